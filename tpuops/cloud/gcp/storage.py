"""The bucket and its IAM policy through google-cloud-storage. Grants are on the bucket only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tpuops.cloud.base import Bucket, has_labels
from tpuops.cloud.gcp.clients import LazyClient
from tpuops.cloud.gcp.waiting import Timing
from tpuops.errors import CloudError

API = "storage"


class GcsApi(LazyClient):
    def __init__(self, make_client: Callable[[], Any], timing: Timing) -> None:
        super().__init__(make_client)
        self.timing = timing

    def get_bucket(self, name: str) -> Bucket | None:
        found = self.timing.call(lambda: self.client.lookup_bucket(name), f"get bucket {name}", API)
        return None if found is None else to_bucket(found)

    def find_buckets(self, labels: Mapping[str, str]) -> list[Bucket]:
        """The JSON API cannot filter buckets by label: list the project's buckets and keep the labelled ones."""
        found = self.timing.call(lambda: list(self.client.list_buckets()), "list buckets", API)
        return [to_bucket(bucket) for bucket in found if has_labels(bucket.labels or {}, labels)]

    def create_bucket(self, name: str, location: str, labels: Mapping[str, str]) -> Bucket:
        def create() -> Any:
            bucket = self.client.bucket(name)
            bucket.iam_configuration.uniform_bucket_level_access_enabled = True
            bucket.labels = dict(labels)
            return self.client.create_bucket(bucket, location=location)

        return to_bucket(self.timing.call(create, f"create bucket {name} in {location}", API))

    def bucket_is_empty(self, name: str) -> bool:
        blobs = self.timing.call(lambda: list(self.client.list_blobs(name, max_results=1)), f"list bucket {name}", API)
        return not blobs

    def delete_bucket(self, name: str, force: bool = False) -> None:
        from google.api_core import exceptions as gexc

        def delete() -> None:
            try:
                self.client.bucket(name).delete(force=force)
            except gexc.NotFound:
                return
            except gexc.Conflict:
                raise CloudError(f"bucket {name} is not empty", "pass --force to delete it with its objects") from None

        self.timing.call(delete, f"delete bucket {name}", API)

    def bucket_members(self, name: str, role: str) -> frozenset[str]:
        policy = self.timing.call(
            lambda: self.client.bucket(name).get_iam_policy(requested_policy_version=3), f"read IAM of {name}", API
        )
        return frozenset(
            member for binding in policy.bindings if binding["role"] == role for member in binding["members"]
        )

    def grant_on_bucket(self, name: str, member: str, role: str) -> bool:
        def grant() -> bool:
            bucket = self.client.bucket(name)
            policy = bucket.get_iam_policy(requested_policy_version=3)
            for binding in policy.bindings:
                if binding["role"] == role and not binding.get("condition"):
                    if member in binding["members"]:
                        return False
                    binding["members"] = set(binding["members"]) | {member}
                    break
            else:
                policy.bindings.append({"role": role, "members": {member}})
            bucket.set_iam_policy(policy)  # carries the etag: a concurrent change fails with 412, not lost
            return True

        return self.timing.call(grant, f"grant {role} on gs://{name} to {member}", API)


def to_bucket(bucket: Any) -> Bucket:
    return Bucket(
        name=bucket.name,
        location=(bucket.location or "").upper(),
        labels=dict(bucket.labels or {}),
        uniform_access=bool(bucket.iam_configuration.uniform_bucket_level_access_enabled),
    )

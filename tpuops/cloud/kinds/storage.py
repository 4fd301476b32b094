"""The bucket, and the grant on it for the identity the TPU reads and writes GCS as."""

from __future__ import annotations

from collections.abc import Mapping

from tpuops.cloud.base import Bucket, Cloud, TpuMode
from tpuops.cloud.kinds.base import (
    MISSING,
    Described,
    Doomed,
    Finding,
    Found,
    Job,
    Known,
    ResourceStatus,
    owned_by,
)
from tpuops.errors import CloudError
from tpuops.plan import IAM_ROLE, Action, Kind, ObservedResource, bucket_reader, tpu_kind
from tpuops.spec import Spec
from tpuops.state import IamRecord, ResourceRecord


class BucketKind:
    kind: Kind = "bucket"
    zonal = False

    def depends_on(self, spec: Spec) -> tuple[Kind, ...]:
        return ()

    def observe(self, job: Job, known: Known) -> Found:
        assert job.spec.bucket is not None
        bucket = job.cloud.storage.get_bucket(job.spec.bucket.name)
        if bucket is None:
            return Found()
        return Found(ObservedResource("bucket", bucket.name, "exists", owned_by(bucket.labels, job.spec.name)))

    def ensure(self, job: Job, action: Action, known: Known) -> Found:
        spec = job.spec
        assert spec.bucket is not None
        if action.verb == "create":
            location = (spec.bucket.location or spec.region or "").upper()
            job.ledger.record("bucket", action.name, None, "creating", location=location)
            job.progress("bucket", action.name, f"creating in {location}")
            job.cloud.storage.create_bucket(action.name, location, spec.resource_labels)
        job.ledger.record("bucket", action.name, None, "created")
        job.progress("bucket", action.name, "ready")
        return Found(ObservedResource("bucket", action.name, "exists"))

    def delete(self, cloud: Cloud, mode: TpuMode, doomed: Doomed) -> None:
        cloud.storage.delete_bucket(doomed.name, force=True)  # `down` checked emptiness before it asked

    def describe(self, cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> Described:
        bucket = cloud.storage.get_bucket(record.name)
        if bucket is None:
            return Described(ResourceStatus("bucket", record.name, None, MISSING))
        return Described(bucket_row(bucket))

    def find(self, cloud: Cloud, mode: TpuMode, cluster: str, zone: str) -> list[Finding]:
        return []  # not in a zone: `down` takes the bucket by its name, and only when asked to

    def labels(self, cloud: Cloud, mode: TpuMode, name: str, zone: str) -> Mapping[str, str] | None:
        bucket = cloud.storage.get_bucket(name)
        return None if bucket is None else bucket.labels


def bucket_row(bucket: Bucket) -> ResourceStatus:
    """The bucket as `status` shows it."""
    return ResourceStatus("bucket", bucket.name, None, "EXISTS", f"location {bucket.location}")


class IamKind:
    """roles/storage.objectAdmin on the bucket only, for the identity the TPU uses (see `plan.bucket_reader`)."""

    kind: Kind = "iam"
    zonal = False

    def depends_on(self, spec: Spec) -> tuple[Kind, ...]:
        # A legacy Node's identity is known once the Node exists.
        return ("bucket", tpu_kind(spec)) if spec.tpu.mode == "node" else ("bucket",)

    def observe(self, job: Job, known: Known) -> Found:
        bucket = known.get("bucket")
        if bucket is None or bucket.resource is None or not bucket.resource.owned:
            return Found()
        member = self.member(job, known)
        name = bucket.resource.name
        if member and member in job.cloud.storage.bucket_members(name, IAM_ROLE):
            return Found(ObservedResource("iam", name, "granted"), member=member)
        return Found(member=member)

    def member(self, job: Job, known: Known) -> str | None:
        """`serviceAccount:EMAIL` (None while a legacy Node does not exist yet)."""
        seen = known.get("iam")
        if seen is not None and seen.member:
            return seen.member
        tpu = known.get(tpu_kind(job.spec))
        node_account = tpu.node.service_account if tpu is not None and tpu.node is not None else None
        email = bucket_reader(job.spec, node_account, job.cloud.projects.default_service_account)
        return f"serviceAccount:{email}" if email else None

    def ensure(self, job: Job, action: Action, known: Known) -> Found:
        member = self.member(job, known)
        if member is None:
            raise CloudError("the TPU Node reports no service account to grant on the bucket", "rerun `tpuops up`")
        if action.verb == "create":
            job.progress("iam", action.name, f"granting {IAM_ROLE} to {member}")
            job.cloud.storage.grant_on_bucket(action.name, member, IAM_ROLE)
        job.ledger.record("iam", action.name, None, "created", member=member, role=IAM_ROLE)
        job.progress("iam", action.name, f"{member} has {IAM_ROLE}")
        return Found(ObservedResource("iam", action.name, "granted"), member=member)

    def delete(self, cloud: Cloud, mode: TpuMode, doomed: Doomed) -> None:
        return None  # the grant is on the bucket only: it goes with the bucket

    def describe(self, cloud: Cloud, record: ResourceRecord, mode: TpuMode) -> Described:
        member = record.member or "" if isinstance(record, IamRecord) else ""
        granted = cloud.storage.get_bucket(record.name) is not None and member in cloud.storage.bucket_members(
            record.name, IAM_ROLE
        )
        return Described(ResourceStatus("iam", record.name, None, "GRANTED" if granted else MISSING,
                                        f"{IAM_ROLE} {member}"))

    def find(self, cloud: Cloud, mode: TpuMode, cluster: str, zone: str) -> list[Finding]:
        return []

    def labels(self, cloud: Cloud, mode: TpuMode, name: str, zone: str) -> Mapping[str, str] | None:
        return None  # a grant has no labels of its own

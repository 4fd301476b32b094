"""The BlobStore over a GCS bucket prefix, with google-cloud-storage.

The SDK is imported inside methods only (the CLI must start fast). Its own retries are switched off
(`retry=None`) so that tpuops.retry is the one policy: SDK errors are translated here into TransientError
(429, 5xx, connection trouble) or CloudError/BlobNotFound, and transient ones are retried with backoff.

STORAGE_EMULATOR_HOST (gcloud's and the SDK's own name) points the client at an emulator or a private
endpoint, with anonymous credentials; otherwise Application Default Credentials are used.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from tenacity import Retrying

from tpuops.cloud.blob_types import BlobInfo, BlobNotFound, PreconditionFailed, VersionedBlob
from tpuops.cloud.gcp.clients import Endpoints, base_url, storage_client
from tpuops.cloud.gcp.deadline import ApiDeadline
from tpuops.cloud.gcp.errors import is_connection_error, translate
from tpuops.errors import CloudError, CredentialsError, TpuopsError, TransientError
from tpuops.retry import transient

T = TypeVar("T")

EMULATOR_PROJECT = "tpuops-emulator"
REQUEST_TIMEOUT_S = 60.0
READ_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)


class GcsBlobStore:
    """Blobs under `gs://bucket/prefix`; names are relative to the prefix."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        env: Mapping[str, str] | None = None,
        policy: Callable[[], Retrying] = transient,
    ) -> None:
        self.bucket_name = bucket
        self.root = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.env = dict(os.environ if env is None else env)
        self._policy = policy
        self._deadline = ApiDeadline.from_env(self.env)
        self._timeout = min(REQUEST_TIMEOUT_S, self._deadline.seconds)  # per socket operation, not per transfer
        self._client: Any = None
        self._client_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"gs://{self.bucket_name}/{self.root}".rstrip("/")

    # -- the client ------------------------------------------------------------------------------------

    def client(self) -> Any:
        with self._client_lock:  # uploads run in threads: build one client, not one per thread
            if self._client is None:
                self._client = make_storage_client(self.env)
            return self._client

    def _bucket(self) -> Any:
        return self.client().bucket(self.bucket_name)

    def _call(self, what: str, fn: Callable[[], T], not_found: Callable[[], Exception] | None = None) -> T:
        """Run one SDK request with translated errors, retrying the transient ones."""

        def attempt() -> T:
            try:  # the storage SDK sends with timeouts: no watchdog thread needed, only the deadline's count
                return self._deadline.run(fn, what, "storage", bounded=False)
            except Exception as err:  # noqa: BLE001  translated below; programming errors re-raised as is
                raise translate_error(err, what, not_found) from err

        return self._policy()(attempt)

    # -- BlobStore ---------------------------------------------------------------------------------------

    def list(self, prefix: str = "", *, checksums: bool = False) -> list[BlobInfo]:
        del checksums  # GCS reports crc32c with every listing at no cost

        def listing() -> list[BlobInfo]:
            blobs = self.client().list_blobs(
                self.bucket_name,
                prefix=self.root + prefix,
                retry=None,
                timeout=self._timeout,
                fields="items(name,size,crc32c,updated),nextPageToken",
            )
            return [self._info(blob) for blob in blobs if not blob.name.endswith("/")]

        return self._call(f"listing {self.url}/{prefix}", listing, not_found=self._bucket_missing)

    def read_range(self, name: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        blob_url = f"{self.url}/{name}"

        def read() -> bytes:
            from google.api_core import exceptions

            blob = self._bucket().blob(self.root + name)
            try:
                # `end` is inclusive in the SDK; range reads carry no whole-object checksum to verify.
                return blob.download_as_bytes(
                    start=start, end=end - 1, checksum=None, retry=None, timeout=self._timeout
                )
            except exceptions.RequestRangeNotSatisfiable:
                return b""  # the object is shorter than `start` now (replaced); nothing to read there

        return self._call(f"reading {blob_url}", read, not_found=lambda: BlobNotFound(f"{blob_url} not found"))

    def upload_file(self, local_path: str | Path, name: str) -> BlobInfo:
        def upload() -> BlobInfo:
            blob = self._bucket().blob(self.root + name)
            # A single-request upload is all or nothing: readers never see half an object.
            blob.upload_from_filename(str(local_path), checksum="crc32c", retry=None, timeout=self._timeout)
            return self._info(blob)

        return self._call(f"uploading {local_path} to {self.url}/{name}", upload, not_found=self._bucket_missing)

    def delete(self, name: str) -> None:
        from google.api_core import exceptions

        def delete() -> None:
            with contextlib.suppress(exceptions.NotFound):  # already gone: what we wanted
                self._bucket().blob(self.root + name).delete(retry=None, timeout=self._timeout)

        self._call(f"deleting {self.url}/{name}", delete)

    def copy_to(self, dest: Any) -> tuple[int, int]:
        """Every object under this prefix copied under `dest`'s (another GcsBlobStore), server-side (GCS rewrite:
        the bytes never pass through here); objects `dest` holds already (size and CRC32C) are skipped. Returns
        (objects copied, bytes copied)."""
        if not isinstance(dest, GcsBlobStore):
            raise CloudError(f"cannot copy {self.url} to {dest.url} server-side", "copy between gs:// locations")
        there = {info.name: info for info in dest.list()}
        copied = size = 0
        for info in self.list():
            if (held := there.get(info.name)) is not None and (held.size, held.crc32c) == (info.size, info.crc32c):
                continue

            def rewrite(name: str = info.name) -> None:
                source = self._bucket().blob(self.root + name)
                target = dest._bucket().blob(dest.root + name)
                token, _, _ = target.rewrite(source, retry=None, timeout=REQUEST_TIMEOUT_S)
                while token is not None:  # large objects across locations take several calls
                    token, _, _ = target.rewrite(source, token=token, retry=None, timeout=REQUEST_TIMEOUT_S)

            self._call(f"copying {self.url}/{info.name} to {dest.url}", rewrite)
            copied, size = copied + 1, size + info.size
        return copied, size

    def read_versioned(self, name: str) -> VersionedBlob:
        blob_url = f"{self.url}/{name}"

        def read() -> VersionedBlob:
            blob = self._bucket().blob(self.root + name)
            data = blob.download_as_bytes(retry=None, timeout=REQUEST_TIMEOUT_S)  # x-goog-generation sets it
            generation = blob.generation
            if generation is None:  # an endpoint that does not send it: metadata, then that generation's bytes
                blob.reload(retry=None, timeout=REQUEST_TIMEOUT_S)
                generation = blob.generation
                data = blob.download_as_bytes(if_generation_match=generation, retry=None, timeout=REQUEST_TIMEOUT_S)
            return VersionedBlob(data, int(generation))

        return self._call(f"reading {blob_url}", read, not_found=lambda: BlobNotFound(f"{blob_url} not found"))

    def write_bytes(self, name: str, data: bytes, *, if_generation_match: int | None = None) -> int:
        def write() -> int:
            blob = self._bucket().blob(self.root + name)
            blob.upload_from_string(data, if_generation_match=if_generation_match, checksum="crc32c", retry=None,
                                    timeout=REQUEST_TIMEOUT_S)
            return int(blob.generation)

        return self._call(f"writing {self.url}/{name}", write, not_found=self._bucket_missing)

    # -- helpers ----------------------------------------------------------------------------------------

    def _info(self, blob: Any) -> BlobInfo:
        updated = blob.updated.timestamp() if blob.updated is not None else None
        return BlobInfo(name=blob.name[len(self.root) :], size=int(blob.size or 0), crc32c=blob.crc32c, updated=updated)

    def _bucket_missing(self) -> Exception:
        return CloudError(f"bucket gs://{self.bucket_name} not found", "check the bucket name (and the project)")


def make_storage_client(env: Mapping[str, str]) -> Any:
    """A storage.Client: the emulator's endpoint with anonymous credentials, else ADC."""

    project = env.get("CLOUDSDK_CORE_PROJECT") or env.get("GOOGLE_CLOUD_PROJECT")
    emulator = env.get("STORAGE_EMULATOR_HOST")
    if emulator:
        from google.auth.credentials import AnonymousCredentials

        return storage_client(Endpoints(storage=base_url(emulator)), AnonymousCredentials(),
                              project or EMULATOR_PROJECT)
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, adc_project = google.auth.default(scopes=list(READ_SCOPES))
    except DefaultCredentialsError as err:
        raise CredentialsError(
            "no Google credentials found for Cloud Storage",
            "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS",
        ) from err
    return storage_client(Endpoints(), credentials, project or adc_project)


def translate_error(err: Exception, what: str, not_found: Callable[[], Exception] | None = None) -> Exception:
    """SDK/transport exception -> a tpuops error: the GCP adapters' one table (`errors.translate`), with what
    blobs need first (a missing object is BlobNotFound, an auth transport failure is transient, GCS's hint)."""
    from google.api_core import exceptions
    from google.auth.exceptions import TransportError

    if isinstance(err, TpuopsError):
        return err
    if isinstance(err, exceptions.PreconditionFailed):
        return PreconditionFailed(f"{what}: the object changed since it was read (HTTP 412)",
                                  "someone else wrote it since it was read: read it again")
    if isinstance(err, exceptions.NotFound):
        return not_found() if not_found else BlobNotFound(f"{what}: not found")
    if isinstance(err, TransportError) or is_connection_error(err):
        return TransientError(f"{what}: {_short(err)}", "GCS or the network is struggling; try again")
    if isinstance(err, exceptions.GoogleAPICallError):
        return translate(err, what, "storage")
    return err  # not an SDK failure: a bug to see with its traceback


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 200 else text[:197] + "..."

"""Google Cloud Storage backend (``--storage-backend=gcs``).

Auth is Application Default Credentials (Workload Identity on GKE); with
``STORAGE_EMULATOR_HOST`` set (fake-gcs-server) the client is anonymous. Every
SDK retry is switched off: :class:`~runtime.storage.retry.RetryPolicy` in the
base class is the only retry loop, so one budget governs every call.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass
from datetime import UTC
from typing import Any, BinaryIO

import google.auth
import requests
import urllib3
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials
from google.auth.transport.requests import AuthorizedSession

from runtime.storage.base import ErrorKind, Listing, ObjectInfo, ObjectStore
from runtime.storage.errors import PermanentStorageError, StorageConfigError
from runtime.storage.lean_imports import without_modules
from runtime.storage.requests_adapter import AbortOnCloseAdapter
from runtime.storage.retry import RetryPolicy
from runtime.storage.settings import SettingSource
from runtime.storage.streams import read_full

# The storage SDK speaks JSON over HTTP; google.api_core would load gRPC for nothing.
with without_modules("grpc"):
    from google.api_core import exceptions as api_exceptions
    from google.cloud import storage
    from google.cloud.storage.exceptions import DataCorruption, InvalidResponse

logger = logging.getLogger(__name__)

#: (connect, read) seconds for every request; a stalled call fails and is retried
#: by our policy instead of hanging a worker.
TIMEOUT = (5.0, 60.0)
#: Resumable-upload chunk: a multiple of 256 KiB. The SDK holds about two chunks
#: per upload, and the collector runs several uploads at once inside its 80 MiB.
UPLOAD_CHUNK_SIZE = 2 * 1024 * 1024
#: Largest payload sent as one multipart request. The SDK would go single-shot up
#: to 8 MiB, building the whole body in memory three times over (measured: +24 MiB
#: for a 7.7 MiB file); above this we ask for a resumable upload instead.
SINGLE_SHOT_MAX = 1024 * 1024
#: Objects per list call (the API maximum is 1000).
PAGE_SIZE = 1000
#: Seconds a credentials refresh may take in all (google-cloud-core's value for its own session).
_CREDENTIALS_REFRESH_TIMEOUT = 300
_LIST_FIELDS = "items(name,size,updated,generation),prefixes,nextPageToken"

_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")


@dataclass(frozen=True)
class GCSSettings:
    """Where the GCS backend connects."""

    bucket: str
    """Bucket name (``GCS_BUCKET`` / config key ``gcsBucket``), validated against GCS naming rules."""

    project: str | None = None
    """Project for bucket creation (``GOOGLE_CLOUD_PROJECT`` / ``gcsProject``); None = from ADC."""

    emulator_host: str | None = None
    """``STORAGE_EMULATOR_HOST``, e.g. ``http://127.0.0.1:4443``: anonymous client on that endpoint."""

    def __post_init__(self) -> None:
        problem = bucket_name_problem(self.bucket)
        if problem:
            raise StorageConfigError(f"GCS_BUCKET={self.bucket!r} is not a valid GCS bucket name: {problem}")
        if self.emulator_host and "://" not in self.emulator_host:
            # The Go SDK convention is host:port without a scheme; the emulator speaks http.
            object.__setattr__(self, "emulator_host", f"http://{self.emulator_host}")

    @classmethod
    def from_source(cls, source: SettingSource) -> GCSSettings:
        return cls(
            bucket=source.require("GCS_BUCKET", "gcsBucket", "GCS bucket"),
            project=source.get("GOOGLE_CLOUD_PROJECT", "gcsProject"),
            emulator_host=source.get("STORAGE_EMULATOR_HOST", None),
        )


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` breaks the GCS bucket naming rules, or None if it is fine."""
    if not 3 <= len(name) <= 222:
        return "must be 3-63 characters (up to 222 with dots)"
    if not _BUCKET_CHARS.match(name):
        return "use only lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
    parts = name.split(".")
    if any(not 1 <= len(p) <= 63 for p in parts):
        return "each dot-separated part must be 1-63 characters"
    try:
        ipaddress.ip_address(name)
        return "must not be an IP address"
    except ValueError:
        pass
    if name.startswith("goog") or "google" in name or "g00gle" in name:
        return "must not start with 'goog' or contain 'google'"
    return None


class GCSStore(ObjectStore):
    """An ObjectStore on a GCS bucket, keys used verbatim as object names."""

    backend = "gcs"

    def __init__(self, settings: GCSSettings, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings.bucket, retry)
        self.settings = settings
        try:
            self._client = _make_client(settings)
        except auth_exceptions.GoogleAuthError as exc:
            raise PermanentStorageError(
                "no usable Google credentials (Application Default Credentials; on GKE enable Workload "
                f"Identity for the pod's service account): {exc}",
                backend=self.backend,
                bucket=self.bucket,
            ) from exc
        self._bucket = self._client.bucket(settings.bucket)

    # -------------------------------------------------------------- primitives
    def _put_stream(self, key: str, stream: BinaryIO, size: int | None) -> None:
        # A fresh Blob per call, with chunk_size so a resumable upload reads
        # UPLOAD_CHUNK_SIZE at a time. The SDK picks multipart for any known size up
        # to 8 MiB; an unknown size is its only way to ask for resumable sooner (the
        # stream ends at `size`: put_file and put_bytes bound it).
        blob = self._bucket.blob(key, chunk_size=UPLOAD_CHUNK_SIZE)
        try:
            blob.upload_from_file(
                _CountingReader(stream),
                rewind=False,
                size=size if size is not None and size <= SINGLE_SHOT_MAX else None,
                content_type="application/octet-stream",
                timeout=TIMEOUT,
                retry=None,
            )
        except api_exceptions.NotFound as exc:
            raise _BucketMissingError from exc  # an insert has no object to miss

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        blob = self._bucket.blob(key)
        ranged = start > 0 or length is not None
        try:
            data = blob.download_as_bytes(
                start=start if ranged else None,
                end=start + length - 1 if length is not None else None,  # GCS ranges are inclusive
                raw_download=True,  # stored bytes, never decompressive transcoding
                checksum=None if ranged else "auto",  # no whole-object hash applies to a range
                timeout=TIMEOUT,
                retry=None,
            )
        except api_exceptions.NotFound as exc:
            if _classify_status(404, str(exc)) is ErrorKind.NOT_FOUND:
                # Emulators (and some proxies) answer a bare 404 for a missing
                # bucket too: ask once per store before calling it a missing key.
                self._verify_bucket_once(key)
            raise
        return bytes(data)

    def _stat(self, key: str) -> ObjectInfo:
        blob = self._bucket.blob(key)
        blob.reload(timeout=TIMEOUT, retry=None)  # NotFound for a missing key
        return _info(blob)

    def _list_page(self, prefix: str, delimiter: str | None, token: str | None) -> tuple[Listing, str | None]:
        pages = self._client.list_blobs(
            self._bucket,
            prefix=prefix or None,
            delimiter=delimiter,
            page_size=PAGE_SIZE,
            page_token=token,
            fields=_LIST_FIELDS,
            timeout=TIMEOUT,
            retry=None,
        )
        try:
            page = next(pages.pages)  # exactly one API call
        except api_exceptions.NotFound as exc:
            raise _BucketMissingError from exc  # an absent prefix lists empty; a 404 is the bucket
        objects = [_info(blob) for blob in page]
        prefixes = sorted(getattr(page, "prefixes", ()) or ())
        next_token: str | None = pages.next_page_token or None
        return Listing(objects=objects, prefixes=prefixes), next_token

    def _delete(self, key: str) -> None:
        self._bucket.blob(key).delete(timeout=TIMEOUT, retry=None)

    def _bucket_exists(self) -> bool:
        try:
            return bool(self._bucket.exists(timeout=TIMEOUT, retry=None))
        except api_exceptions.Forbidden:
            # roles/storage.objectAdmin lacks storage.buckets.get; a one-object
            # listing proves the bucket exists with object permissions only.
            logger.debug("no storage.buckets.get on %s, probing with a listing", self.bucket)
            probe = self._client.list_blobs(
                self._bucket,
                prefix=self.probe_prefix or None,
                max_results=1,
                fields="items(name)",
                timeout=TIMEOUT,
                retry=None,
            )
            try:
                next(probe.pages)
            except api_exceptions.NotFound:
                return False
            return True

    def _create_bucket(self) -> None:
        self._client.create_bucket(self.bucket, project=self._client.project, timeout=TIMEOUT, retry=None)

    def _classify(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, _BucketMissingError):
            return ErrorKind.NO_BUCKET
        if isinstance(exc, (api_exceptions.GoogleAPICallError, InvalidResponse)):
            # InvalidResponse is normally converted by the SDK; classify it the same way.
            status = exc.code if isinstance(exc, api_exceptions.GoogleAPICallError) else _response_status(exc)
            return _classify_status(status, str(exc))
        if isinstance(exc, auth_exceptions.RefreshError):
            # A token fetch google-auth itself marks retryable (metadata server hiccup);
            # otherwise revoked/invalid credentials, which retrying will not fix.
            return ErrorKind.TRANSIENT if getattr(exc, "retryable", False) else ErrorKind.PERMANENT
        # DefaultCredentialsError and anything unknown are permanent.
        return ErrorKind.TRANSIENT if isinstance(exc, _TRANSIENT_TYPES) else ErrorKind.PERMANENT

    # ------------------------------------------------------------------ misc
    def close(self) -> None:
        try:
            self._client.close()
        except Exception:  # closing must never mask the caller's real error
            logger.debug("closing GCS client failed", exc_info=True)


class _CountingReader:
    """What the SDK's resumable upload needs from any stream: ``tell()`` counting
    from 0 (it insists on starting at 0 and derives chunk offsets from it; pipes
    cannot tell at all) and full reads (a short read would look like the end)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._pos = 0

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        data = self._stream.read() if size is None or size < 0 else read_full(self._stream, size)
        self._pos += len(data)
        return data


class _BucketMissingError(Exception):
    """A 404 from a call that can only miss the bucket (list, insert)."""


_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    auth_exceptions.TransportError,
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,  # connection dropped mid-body
    urllib3.exceptions.HTTPError,
    ConnectionError,
    TimeoutError,
    DataCorruption,  # a corrupted transfer is worth another try
    api_exceptions.RetryError,
)


def _response_status(exc: BaseException) -> int | None:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _classify_status(status: int | None, message: str) -> ErrorKind:
    if status == 404:
        # Object and bucket misses are both 404; GCS says which in the message.
        return ErrorKind.NO_BUCKET if "bucket does not exist" in message.lower() else ErrorKind.NOT_FOUND
    if status == 416:
        return ErrorKind.RANGE_NOT_SATISFIABLE
    if status in (408, 429) or (status is not None and status >= 500):
        return ErrorKind.TRANSIENT
    return ErrorKind.PERMANENT  # 400, 401, 403, 409, 412, ...


def _info(blob: Any) -> ObjectInfo:
    updated = blob.updated
    if updated is not None and updated.tzinfo is None:
        updated = updated.replace(tzinfo=UTC)
    generation = blob.generation
    return ObjectInfo(
        key=str(blob.name),
        size=int(blob.size or 0),
        updated=updated,
        version=str(generation) if generation is not None else None,
    )


def _make_client(settings: GCSSettings) -> Any:
    kwargs: dict[str, Any] = {}
    if settings.emulator_host:
        # Explicit endpoint + anonymous credentials: works whatever the process env says.
        credentials: Any = AnonymousCredentials()  # type: ignore[no-untyped-call]
        kwargs["project"] = settings.project or "test"
        kwargs["client_options"] = {"api_endpoint": settings.emulator_host}
    else:
        # What storage.Client does without credentials; done here because a client
        # given its own session (below) must be given the credentials too.
        credentials, adc_project = google.auth.default(scopes=storage.Client.SCOPE)
        project = settings.project or adc_project
        if project:
            kwargs["project"] = project  # else the client's own lookup (passing None would mean "no project")
    kwargs["credentials"] = credentials
    kwargs["_http"] = _authorized_session(credentials)
    client = storage.Client(**kwargs)
    if getattr(client, "_bucket_metadata_cache", None) is not None:
        # This cache only decorates OpenTelemetry spans, but on each miss it starts a
        # background bucket GET with SDK retries, outside our policy: switch it off.
        client._bucket_metadata_cache = None
    return client


def _authorized_session(credentials: Any) -> AuthorizedSession:
    """The session google-cloud-core would build for the client, except that its
    connections reset on close, so an upload given up on is never delivered late
    (``runtime/storage/sockets.py``). Pool size and (no) retries stay requests' defaults."""
    session = AuthorizedSession(credentials, refresh_timeout=_CREDENTIALS_REFRESH_TIMEOUT)  # type: ignore[no-untyped-call]
    adapter = AbortOnCloseAdapter()
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    # As the client does for its own session. When client certificates are in use
    # (GOOGLE_API_USE_CLIENT_CERTIFICATE), google-auth mounts its mTLS adapter for
    # https:// in place of ours, and those connections close gracefully.
    session.configure_mtls_channel()  # type: ignore[no-untyped-call]
    return session

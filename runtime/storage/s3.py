"""Amazon S3 (and S3-compatible stores such as MinIO or Ceph) through boto3.

Settings keep the names of KubeRay's Go history server (``S3_BUCKET``/``s3Bucket``, ``S3_ENDPOINT``,
``S3_REGION``, ``S3FORCE_PATH_STYLE``, ``S3DISABLE_SSL``). botocore's own retries
are off: the RetryPolicy in base.py is the only retry budget.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO

import boto3
from boto3.s3.transfer import TransferConfig
from botocore import exceptions as bce
from botocore.config import Config
from botocore.exceptions import ClientError
from urllib3 import exceptions as u3e

from runtime.storage.base import ErrorKind, Listing, ObjectInfo, ObjectStore
from runtime.storage.errors import StorageConfigError
from runtime.storage.keys import validate_key
from runtime.storage.retry import RetryPolicy
from runtime.storage.settings import SettingSource
from runtime.storage.sockets import with_abort_on_close
from runtime.storage.streams import DEFAULT_CHUNK_SIZE, read_full

logger = logging.getLogger(__name__)

DEFAULT_BUCKET = "ray-historyserver"
DEFAULT_REGION = "us-east-1"

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# Adjacent '.'/'-' pairs, IP-address shapes and prefixes/suffixes S3 reserves.
_BUCKET_BAD = re.compile(r"\.\.|\.-|-\.|^\d+\.\d+\.\d+\.\d+$|^(xn--|sthree-|amzn-s3-demo-)|(-s3alias|--ol-s3|\.mrap)$")

# S3 error codes (HEAD answers carry only the HTTP status as code) by kind, first match wins.
_CODE_KINDS = (
    ({"NoSuchKey", "NotFound", "NoSuchVersion", "404"}, ErrorKind.NOT_FOUND),
    ({"NoSuchBucket"}, ErrorKind.NO_BUCKET),
    ({"InvalidRange", "416"}, ErrorKind.RANGE_NOT_SATISFIABLE),
    ({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "401", "403"},
     ErrorKind.PERMANENT),
    ({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded", "InternalError",
      "TooManyRequestsException", "ServiceUnavailable", "OperationAborted", "IncompleteBody", "BadDigest", "429"},
     ErrorKind.TRANSIENT),
)  # fmt: skip
_CODE_IN_MESSAGE = re.compile(r"An error occurred \(([^)]+)\)")


def validate_bucket_name(name: str) -> str:
    """Apply S3's general-purpose bucket naming rules; errors name S3_BUCKET."""
    if not _BUCKET_RE.match(name) or _BUCKET_BAD.search(name):
        raise StorageConfigError(
            f"S3_BUCKET / s3Bucket={name!r} is not a valid S3 bucket name: use 3-63 lowercase letters, digits, "
            "'.' and '-', starting and ending with a letter or digit, not shaped like an IP address"
        )
    return name


@dataclass(frozen=True)
class S3Settings:
    """Where and how to reach the S3 bucket."""

    bucket: str = DEFAULT_BUCKET
    """Bucket name (env S3_BUCKET, JSON s3Bucket)."""
    region: str = DEFAULT_REGION
    """Signing region (S3_REGION / s3Region, else AWS_REGION / AWS_DEFAULT_REGION)."""
    endpoint_url: str | None = None
    """Full endpoint URL for S3-compatible stores; None = AWS (S3_ENDPOINT / s3Endpoint)."""
    force_path_style: bool = False
    """Address buckets as ``host/bucket`` instead of ``bucket.host`` (S3FORCE_PATH_STYLE)."""
    disable_ssl: bool = False
    """Plain HTTP instead of HTTPS (S3DISABLE_SSL / s3DisableSSL)."""
    access_key_id: str | None = None
    """Static key id (AWS_ACCESS_KEY_ID); None = boto3's default credential chain."""
    secret_access_key: str | None = field(default=None, repr=False)
    """Static secret (AWS_SECRET_ACCESS_KEY), used only with access_key_id."""
    session_token: str | None = field(default=None, repr=False)
    """Optional session token (AWS_SESSION_TOKEN), used only with access_key_id."""

    def __post_init__(self) -> None:
        validate_bucket_name(self.bucket)
        if self.access_key_id and not self.secret_access_key:
            raise StorageConfigError("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is empty")

    @classmethod
    def from_source(cls, source: SettingSource) -> S3Settings:
        disable_ssl = source.get_bool("S3DISABLE_SSL", "s3DisableSSL", False)
        endpoint = source.get("S3_ENDPOINT", "s3Endpoint")
        if endpoint:
            # KubeRay's Go history server takes host:port; a full URL is accepted too.
            if "://" not in endpoint:
                endpoint = ("http://" if disable_ssl else "https://") + endpoint
            elif not endpoint.startswith(("http://", "https://")):
                raise StorageConfigError(f"S3_ENDPOINT / s3Endpoint={endpoint!r}: scheme must be http or https")
            endpoint = endpoint.rstrip("/")
        key_id = source.get("AWS_ACCESS_KEY_ID", None)
        return cls(
            bucket=source.get("S3_BUCKET", "s3Bucket", DEFAULT_BUCKET) or DEFAULT_BUCKET,
            region=source.get("S3_REGION", "s3Region")
            or source.get("AWS_REGION", None)
            or source.get("AWS_DEFAULT_REGION", None, DEFAULT_REGION)
            or DEFAULT_REGION,
            endpoint_url=endpoint or None,
            force_path_style=source.get_bool("S3FORCE_PATH_STYLE", "s3ForcePathStyle", False),
            disable_ssl=disable_ssl,
            access_key_id=key_id,
            secret_access_key=source.get("AWS_SECRET_ACCESS_KEY", None) if key_id else None,
            session_token=source.get("AWS_SESSION_TOKEN", None) if key_id else None,
        )


class S3Store(ObjectStore):
    """An S3 bucket; keys are used verbatim (``?``, ``&``, ``=`` included)."""

    backend = "s3"

    def __init__(self, settings: S3Settings, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings.bucket, retry)
        self.settings = settings
        config = Config(
            signature_version="s3v4",
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            max_pool_connections=32,
            s3={"addressing_style": "path"} if settings.force_path_style else None,
            # Many S3-compatible stores reject the CRC32/aws-chunked bodies botocore
            # sends by default since 1.36; send checksums only where required there.
            request_checksum_calculation="when_required" if settings.endpoint_url else "when_supported",
            response_checksum_validation="when_required" if settings.endpoint_url else "when_supported",
        )
        session = boto3.session.Session(
            aws_access_key_id=settings.access_key_id or None,
            aws_secret_access_key=settings.secret_access_key if settings.access_key_id else None,
            aws_session_token=settings.session_token if settings.access_key_id else None,
            region_name=settings.region,
        )
        self._client: Any = session.client(
            "s3", endpoint_url=settings.endpoint_url, use_ssl=not settings.disable_ssl, config=config
        )
        _abort_on_close(self._client)
        self._transfer = TransferConfig(
            multipart_threshold=DEFAULT_CHUNK_SIZE,
            multipart_chunksize=DEFAULT_CHUNK_SIZE,
            max_concurrency=2,
            use_threads=True,
            preferred_transfer_client="classic",  # never switch to CRT behind our back
        )
        # s3transfer reads up to 10 parts ahead by default; cap it so memory stays flat.
        self._transfer.max_in_memory_upload_chunks = 2
        logger.debug(
            "s3 store bucket=%s region=%s endpoint=%s static_creds=%s",
            settings.bucket, settings.region, settings.endpoint_url or "<aws>", bool(settings.access_key_id),
        )  # fmt: skip

    # ------------------------------------------------------------- primitives
    def _put_stream(self, key: str, stream: BinaryIO, size: int | None) -> None:
        if size is not None and size < DEFAULT_CHUNK_SIZE:
            # Small and of known size: one PutObject from a bounded buffer.
            self._client.put_object(Bucket=self.bucket, Key=key, Body=read_full(stream, size))
            return
        self._client.upload_fileobj(_FullReads(stream), self.bucket, key, Config=self._transfer)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Like the base, but each multipart part is read straight from the file by
        the thread sending it (``upload_fileobj`` buffers parts in memory): a 2 GiB
        log moves with a few MiB. s3transfer takes the size at submission, so a
        file still growing is uploaded as long as it was then."""
        validate_key(key)
        os.stat(path)  # a vanished file is the caller's FileNotFoundError, not a storage error
        filename = os.fspath(path)
        self._run("upload", key, lambda: self._client.upload_file(filename, self.bucket, key, Config=self._transfer))

    def put_open_file(self, key: str, fh: BinaryIO) -> None:
        """Like :meth:`put_file` for an opened file: s3transfer reopens its name per
        part, so it gets ``/proc/self/fd/N``, which reopens this very inode whatever
        happens to the path meanwhile. Without /proc, the base's stream."""
        proc = f"/proc/self/fd/{fh.fileno()}"
        if not os.path.exists(proc):
            super().put_open_file(key, fh)
            return
        validate_key(key)
        self._run("upload", key, lambda: self._client.upload_file(proc, self.bucket, key, Config=self._transfer))

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if length is not None:
            args["Range"] = f"bytes={start}-{start + length - 1}"
        elif start > 0:
            args["Range"] = f"bytes={start}-"
        # No Range for a whole-object read, so a 0-byte object is a plain 200.
        resp = self._client.get_object(**args)
        data = _read_body(resp)
        if "Range" in args and not resp.get("ContentRange"):
            # A server that ignored Range sent the whole object: slice it here.
            return data[start : None if length is None else start + length]
        return data

    def get_tail(self, key: str, nbytes: int) -> bytes:
        """The last ``nbytes`` bytes in one suffix-range request (``bytes=-N``)."""
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        if nbytes == 0:
            self.stat(key)  # a missing key is still an error
            return b""
        validate_key(key)
        return self._run("read", key, lambda: self._get_suffix(key, nbytes))

    def _get_suffix(self, key: str, nbytes: int) -> bytes:
        try:
            resp = self._client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes=-{nbytes}")
        except ClientError as exc:
            if _kind_for(_code(exc), None) is ErrorKind.RANGE_NOT_SATISFIABLE:
                return b""  # S3 answers 416 to a suffix range on a 0-byte object
            raise
        data = _read_body(resp)
        return data if resp.get("ContentRange") else data[-nbytes:]

    def _stat(self, key: str) -> ObjectInfo:
        resp = self._client.head_object(Bucket=self.bucket, Key=key)
        return ObjectInfo(key, int(resp["ContentLength"]), _utc(resp.get("LastModified")), _etag(resp.get("ETag")))

    def _list_page(self, prefix: str, delimiter: str | None, token: str | None) -> tuple[Listing, str | None]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": 1000}
        if delimiter:
            args["Delimiter"] = delimiter
        if token:
            args["ContinuationToken"] = token
        resp = self._client.list_objects_v2(**args)
        objects = [
            ObjectInfo(str(o["Key"]), int(o.get("Size", 0)), _utc(o.get("LastModified")), _etag(o.get("ETag")))
            for o in resp.get("Contents", [])
        ]
        prefixes = [str(p["Prefix"]) for p in resp.get("CommonPrefixes", [])]
        next_token = resp.get("NextContinuationToken") if resp.get("IsTruncated") else None
        return Listing(objects=objects, prefixes=prefixes), (str(next_token) if next_token else None)

    def _delete(self, key: str) -> None:
        self._client.delete_object(Bucket=self.bucket, Key=key)

    def _bucket_exists(self) -> bool:
        # Not HeadBucket: it needs s3:ListBucket with no s3:prefix in the request, which
        # our policies (listings only under prefixes they name) deny. A one-key listing
        # under the probe prefix is allowed to every identity.
        args: dict[str, Any] = {"Bucket": self.bucket, "MaxKeys": 1}
        if self.probe_prefix:
            args["Prefix"] = self.probe_prefix
        try:
            self._client.list_objects_v2(**args)
        except ClientError as exc:
            if _code(exc) in {"404", "NoSuchBucket", "NotFound"}:
                return False
            raise  # 403 and friends classify as permanent
        return True

    def _create_bucket(self) -> None:
        args: dict[str, Any] = {"Bucket": self.bucket}
        if self.settings.region != "us-east-1":
            args["CreateBucketConfiguration"] = {"LocationConstraint": self.settings.region}
        try:
            self._client.create_bucket(**args)
        except ClientError as exc:
            if _code(exc) != "BucketAlreadyOwnedByYou":
                raise

    def _classify(self, exc: BaseException) -> ErrorKind:
        # upload_fileobj/s3transfer may wrap the real error; walk the chain.
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            kind = _classify_one(current)
            if kind is not None:
                return kind
            current = current.__cause__ or current.__context__
        match = _CODE_IN_MESSAGE.search(str(exc))  # a wrapper that kept only the text
        if match:
            return _kind_for(match.group(1), None) or ErrorKind.PERMANENT
        return ErrorKind.PERMANENT

    def close(self) -> None:
        self._client.close()


class _FullReads:
    """Make ``read(n)`` return n bytes unless at EOF: s3transfer sizes multipart
    parts by one read() each, and a raw stream may return short reads."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self._stream.read()
        return read_full(self._stream, size)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        try:
            return bool(self._stream.seekable())
        except (OSError, ValueError):
            return False

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()


def _abort_on_close(client: Any) -> None:
    """Make the client's connections reset on close, so an upload given up on is
    never delivered late (``runtime/storage/sockets.py``). botocore has no public
    setting for socket options (its Config offers only ``tcp_keepalive``): extend
    the list its URLLib3Session keeps, TCP_NODELAY (and SO_KEEPALIVE) included,
    which proxy pools read when built, and the pool manager's, before any pool exists."""
    http: Any = getattr(getattr(client, "_endpoint", None), "http_session", None)
    options = getattr(http, "_socket_options", None)
    pool_kw = getattr(getattr(http, "_manager", None), "connection_pool_kw", None)
    if not isinstance(options, list) or not isinstance(pool_kw, dict):
        logger.warning("botocore's HTTP session has changed shape: S3 connections will close gracefully")
        return
    options = with_abort_on_close(options)
    http._socket_options = options
    pool_kw["socket_options"] = options


def _read_body(resp: dict[str, Any]) -> bytes:
    body = resp["Body"]
    try:
        return bytes(body.read())
    finally:
        body.close()


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _kind_for(code: str, status: int | None) -> ErrorKind | None:
    """The kind for an S3 error code, else for the HTTP status; None if neither tells."""
    for candidate in (code, str(status)):
        for codes, kind in _CODE_KINDS:
            if candidate in codes:
                return kind
        if candidate.isdigit() and int(candidate) >= 500:
            return ErrorKind.TRANSIENT
    return None


def _classify_one(exc: BaseException) -> ErrorKind | None:
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return _kind_for(_code(exc), status) or ErrorKind.PERMANENT
    if isinstance(exc, (bce.NoCredentialsError, bce.PartialCredentialsError)):
        return ErrorKind.PERMANENT
    if isinstance(exc, bce.CredentialRetrievalError):
        # IRSA/Pod Identity agent not ready yet, or an STS hiccup: worth another try.
        return ErrorKind.TRANSIENT
    # Refused, reset, timed out, body cut short: the store may answer next time.
    transient = (bce.ConnectionError, bce.HTTPClientError, bce.IncompleteReadError, u3e.ProtocolError, u3e.TimeoutError)
    if isinstance(exc, (*transient, ConnectionError, TimeoutError)):
        return ErrorKind.TRANSIENT
    return None


def _utc(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _etag(value: Any) -> str | None:
    return str(value).strip('"') if value else None

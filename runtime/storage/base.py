"""The storage interface both the collector and the history server use.

A backend implements a handful of primitives (``_put_stream``, ``_get_range``,
``_stat``, ``_list_page``, ``_delete``, ``_bucket_exists``,
``_create_bucket``) and a classifier that sorts its SDK's exceptions into
not-found / missing-bucket / permanent / transient. This class adds everything
callers rely on: key validation, one retry policy, one exception vocabulary, and
the derived operations (tail reads, chunked streaming reads, file uploads).
The byte-stream helpers these and the backends share are :mod:`runtime.storage.streams`.
"""

from __future__ import annotations

import enum
import io
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, TypeVar

from runtime.storage.errors import (
    InvalidKeyError,
    ObjectNotFoundError,
    PermanentStorageError,
    StorageError,
    StorageUnavailableError,
)
from runtime.storage.keys import validate_key, validate_prefix
from runtime.storage.retry import RetryPolicy, TransientError
from runtime.storage.streams import DEFAULT_CHUNK_SIZE, LimitedReader

T = TypeVar("T")

logger = logging.getLogger(__name__)


class ErrorKind(enum.Enum):
    """How a backend's SDK exception should be treated."""

    NOT_FOUND = "not_found"
    NO_BUCKET = "no_bucket"
    RANGE_NOT_SATISFIABLE = "range_not_satisfiable"
    PERMANENT = "permanent"
    TRANSIENT = "transient"


@dataclass(frozen=True)
class ObjectInfo:
    """What ``stat`` and listings say about one object.

    ``version`` changes whenever the object's content is replaced (GCS generation,
    S3/Azure ETag, local mtime+size); the history server uses it to notice late
    uploads and re-index a session.
    """

    key: str
    size: int
    updated: datetime | None = None
    version: str | None = None


@dataclass(frozen=True)
class Listing:
    """One level of a delimited listing: objects directly under the prefix, and the
    sub-prefixes (full keys ending in the delimiter), both sorted."""

    objects: list[ObjectInfo] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)


class ObjectStore(ABC):
    """A bucket (or local directory) holding history objects under verbatim keys."""

    #: Backend name as used on the command line: local, gcs, s3, azureblob.
    backend: str = ""
    #: Where a bucket check may list (``ROOT/_selfcheck/``, set by ``open_store``): the one
    #: prefix every identity may list, a collector's included.
    probe_prefix: str = ""

    def __init__(self, bucket: str, retry: RetryPolicy | None = None) -> None:
        self.bucket = bucket
        self.retry = retry or RetryPolicy()
        self._bucket_verified = False

    # ------------------------------------------------------------------ writes
    def put_bytes(self, key: str, data: bytes) -> None:
        """Create or replace ``key`` with ``data``."""
        self.put_stream(key, io.BytesIO(data), size=len(data))

    def put_stream(self, key: str, stream: BinaryIO, size: int | None = None) -> None:
        """Create or replace ``key`` from a binary stream, streamed in chunks.

        Memory stays flat whatever the size. A seekable stream is rewound and the
        upload retried on transient errors; a non-seekable one gets one attempt.
        ``size``, when given, is the exact number of bytes the stream yields from
        its current position; it lets backends choose single-shot vs multipart.
        """
        validate_key(key)
        start: int | None = None
        try:
            if stream.seekable():
                start = stream.tell()
        except (OSError, ValueError):
            start = None

        def rewind() -> None:
            if start is not None:
                stream.seek(start)

        policy = self.retry if start is not None else RetryPolicy(attempts=1, deadline=0)
        self._run("upload", key, lambda: self._put_stream(key, stream, size), policy=policy, before_retry=rewind)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        """Upload a local file, streamed. Its size is taken when the upload starts,
        so a file still being appended to is uploaded up to that size."""
        with open(path, "rb") as fh:
            self.put_open_file(key, fh)

    def put_open_file(self, key: str, fh: BinaryIO) -> None:
        """Upload an already opened regular file from its start, streamed, up to its
        size now. For callers that checked the file they opened (the collector's
        logs): nothing is looked up by name again, so what was checked is sent."""
        fh.seek(0)
        size = os.fstat(fh.fileno()).st_size
        limited = io.BufferedReader(LimitedReader(fh, size), buffer_size=1024 * 1024)
        self.put_stream(key, limited, size=size)

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing key is not an error."""
        validate_key(key)
        try:
            self._run("delete", key, lambda: self._delete(key))
        except ObjectNotFoundError:
            return

    # ------------------------------------------------------------------- reads
    def get_bytes(self, key: str) -> bytes:
        """The whole object. Raises ObjectNotFoundError for a missing key."""
        return self.get_range(key, 0, None)

    def get_range(self, key: str, start: int, length: int | None = None) -> bytes:
        """Bytes ``[start, start+length)`` (to the end when ``length`` is None),
        like slicing: past the end gives fewer bytes or ``b""``."""
        validate_key(key)
        if start < 0:
            raise ValueError("start must be >= 0; use get_tail for suffix reads")
        if length is not None and length < 0:
            raise ValueError("length must be >= 0")
        if length == 0:
            self.stat(key)  # still a missing key is a missing key
            return b""
        try:
            return self._run("read", key, lambda: self._get_range(key, start, length))
        except _RangeNotSatisfiableError:
            # Starting at/after the end: the key exists (else NOT_FOUND), answer empty.
            return b""

    def get_tail(self, key: str, nbytes: int) -> bytes:
        """The last ``nbytes`` bytes (the whole object if it is shorter)."""
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        info = self.stat(key)
        if nbytes == 0 or info.size == 0:
            return b""
        return self.get_range(key, max(0, info.size - nbytes), None)

    def iter_chunks(self, key: str, chunk_size: int = DEFAULT_CHUNK_SIZE, start: int = 0) -> Iterator[bytes]:
        """Stream an object in ranged chunks; each chunk has its own retry budget,
        so a transient failure mid-stream resumes where it stopped."""
        info = self.stat(key)
        offset = start
        while offset < info.size:
            chunk = self.get_range(key, offset, min(chunk_size, info.size - offset))
            if not chunk:
                break
            offset += len(chunk)
            yield chunk

    def download_file(self, key: str, path: str | os.PathLike[str], chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
        """Stream ``key`` into a local file (written atomically); returns bytes written."""
        target = Path(path)
        tmp = target.with_name(f".{target.name}.part")
        written = 0
        try:
            with open(tmp, "wb") as out:
                for chunk in self.iter_chunks(key, chunk_size):
                    out.write(chunk)
                    written += len(chunk)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return written

    def stat(self, key: str) -> ObjectInfo:
        """Size, time and version of the exact key; ObjectNotFoundError if absent."""
        validate_key(key)
        try:
            return self._run("stat", key, lambda: self._stat(key))
        except ObjectNotFoundError:
            # A HEAD cannot tell a missing key from a missing bucket; ask once.
            self._verify_bucket_once(key)
            raise

    def exists(self, key: str) -> bool:
        """Whether the exact key exists."""
        try:
            self.stat(key)
        except ObjectNotFoundError:
            return False
        return True

    def list(self, prefix: str = "", delimiter: str = "/") -> Listing:
        """One level under ``prefix``: objects and sub-prefixes, sorted by key.
        Zero-byte "directory marker" objects (keys ending in ``/``) are hidden."""
        validate_prefix(prefix)
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        for page in self._pages(prefix, delimiter):
            objects.extend(page.objects)
            prefixes.extend(page.prefixes)
        if not objects and not prefixes:
            self._verify_bucket_once(prefix)
        return Listing(objects=sorted(objects, key=_by_key), prefixes=sorted(set(prefixes)))

    def walk(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under ``prefix``, recursively, in key order.

        Pages are fetched lazily, each with its own retry budget.
        """
        validate_prefix(prefix)
        empty = True
        for page in self._pages(prefix, None):
            for info in page.objects:
                empty = False
                yield info
        if empty:
            self._verify_bucket_once(prefix)

    def _pages(self, prefix: str, delimiter: str | None) -> Iterator[Listing]:
        token: str | None = None
        while True:
            page, token = self._run(
                "list",
                prefix or "<bucket root>",
                lambda t=token: self._list_page(prefix, delimiter, t),  # type: ignore[misc]
            )
            yield Listing(
                objects=[o for o in page.objects if not o.key.endswith("/")],
                prefixes=page.prefixes,
            )
            if not token:
                return

    # ------------------------------------------------------------------ bucket
    def check(self, create: bool = False) -> None:
        """Verify the bucket exists and is reachable; create it only if asked.

        Raises PermanentStorageError naming the bucket when it is missing.
        """
        exists = self._run("check bucket", None, self._bucket_exists)
        if not exists:
            if not create:
                raise PermanentStorageError(
                    "bucket does not exist (create it, or pass --create-bucket to let this process create it)",
                    backend=self.backend,
                    bucket=self.bucket,
                )
            logger.info("creating %s bucket %s", self.backend, self.bucket)
            self._run("create bucket", None, self._create_bucket)
        self._bucket_verified = True

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release clients and connection pools."""

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> str:
        """Human-readable location, e.g. ``s3://bucket``."""
        return f"{self.backend}://{self.bucket}"

    # ------------------------------------------------------- backend primitives
    @abstractmethod
    def _put_stream(self, key: str, stream: BinaryIO, size: int | None) -> None: ...

    @abstractmethod
    def _get_range(self, key: str, start: int, length: int | None) -> bytes: ...

    @abstractmethod
    def _stat(self, key: str) -> ObjectInfo: ...

    @abstractmethod
    def _list_page(self, prefix: str, delimiter: str | None, token: str | None) -> tuple[Listing, str | None]:
        """One page of keys starting with ``prefix``: with a delimiter, one level
        (objects + sub-prefixes); without, recursive. Returns the next page token."""

    @abstractmethod
    def _delete(self, key: str) -> None: ...

    @abstractmethod
    def _bucket_exists(self) -> bool: ...

    @abstractmethod
    def _create_bucket(self) -> None: ...

    @abstractmethod
    def _classify(self, exc: BaseException) -> ErrorKind:
        """Sort an SDK exception into an ErrorKind."""

    # ---------------------------------------------------------------- plumbing
    def _run(
        self,
        op: str,
        key: str | None,
        fn: Callable[[], T],
        *,
        policy: RetryPolicy | None = None,
        before_retry: Callable[[], None] | None = None,
    ) -> T:
        """Run one backend primitive under the retry policy, translating errors."""

        def attempt() -> T:
            try:
                return fn()
            except (StorageError, InvalidKeyError, TransientError, _RangeNotSatisfiableError):
                raise
            except Exception as exc:
                raise self._translate(op, key, exc) from exc

        try:
            return (policy or self.retry).call(
                attempt, describe=f"{op} {key or self.bucket}", before_retry=before_retry
            )
        except TransientError as exc:
            raise StorageUnavailableError(
                f"{op} failed after retries, storage unreachable or overloaded: {_short(exc.cause)}",
                backend=self.backend,
                bucket=self.bucket,
                key=key,
            ) from exc.cause

    def _translate(self, op: str, key: str | None, exc: Exception) -> Exception:
        kind = self._classify(exc)
        if kind is ErrorKind.TRANSIENT:
            return TransientError(exc)
        if kind is ErrorKind.RANGE_NOT_SATISFIABLE:
            return _RangeNotSatisfiableError()
        if kind is ErrorKind.NOT_FOUND:
            return ObjectNotFoundError("no such object", backend=self.backend, bucket=self.bucket, key=key)
        if kind is ErrorKind.NO_BUCKET:
            return PermanentStorageError("bucket does not exist", backend=self.backend, bucket=self.bucket, key=key)
        return PermanentStorageError(f"{op} failed: {_short(exc)}", backend=self.backend, bucket=self.bucket, key=key)

    def _verify_bucket_once(self, key: str | None) -> None:
        """After an empty answer, make sure it is not a missing bucket in disguise."""
        if self._bucket_verified:
            return
        if not self._run("check bucket", key, self._bucket_exists):
            raise PermanentStorageError("bucket does not exist", backend=self.backend, bucket=self.bucket, key=key)
        self._bucket_verified = True


class _RangeNotSatisfiableError(Exception):
    """Internal: a ranged read started at or past the end of an existing object."""


def _by_key(info: ObjectInfo) -> str:
    return info.key


def _short(exc: BaseException, limit: int = 300) -> str:
    """One line from an SDK exception, whose str() can be a multi-KiB XML dump."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

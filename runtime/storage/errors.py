"""The exceptions every storage backend raises, whatever its SDK raised.

Callers handle three cases and never an SDK type:

* :class:`ObjectNotFoundError` - the exact key does not exist (a normal answer);
* :class:`PermanentStorageError` - retrying will not help: no such bucket, access
  denied, bad credentials, a key the layout rejects;
* :class:`StorageUnavailableError` - transient failures outlasted the retry budget
  (endpoint down, throttling, 5xx); the history server maps it to HTTP 503.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class: names the backend, the bucket (or directory) and the key."""

    def __init__(
        self,
        message: str,
        *,
        backend: str,
        bucket: str,
        key: str | None = None,
    ) -> None:
        self.backend = backend
        self.bucket = bucket
        self.key = key
        self.reason = message
        where = f"{backend} bucket {bucket!r}" if backend != "local" else f"local directory {bucket!r}"
        if key is not None:
            where += f", key {key!r}"
        super().__init__(f"{where}: {message}")


class ObjectNotFoundError(StorageError):
    """The exact key does not exist. Reads never fall back to a similar key."""


class PermanentStorageError(StorageError):
    """An error retrying cannot fix (missing bucket, access denied, bad credentials)."""


class StorageUnavailableError(StorageError):
    """Transient errors persisted past the retry budget; the store may come back."""


class InvalidKeyError(ValueError):
    """A key or key component was rejected before any I/O (traversal, bad characters)."""


class StorageConfigError(ValueError):
    """Storage configuration that cannot work; the message names the flag or
    environment variable to fix."""

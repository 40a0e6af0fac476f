"""The ``local`` backend: a directory on disk, the embedded default for the demo
and tests.

Keys map to relative paths under the directory. Writes go to a staging file in the
same file system and are renamed into place, so readers (the history server,
another gunicorn worker) see the old object or the new one, never half of one.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from runtime.storage.base import ErrorKind, Listing, ObjectInfo, ObjectStore
from runtime.storage.errors import InvalidKeyError
from runtime.storage.retry import RetryPolicy

logger = logging.getLogger(__name__)

#: Staging directory for atomic writes, inside the root so ``os.replace`` never
#: crosses file systems. Keys may not start with it.
STAGING_DIR = ".staging"

# A disk-to-disk copy gains nothing from big buffers; keep the collector's RSS low.
_COPY_BUFFER = 1024 * 1024

# Errors that a retry can fix on a local disk (NFS hiccups, interrupted calls).
_TRANSIENT_ERRNOS = {errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT, errno.ESTALE}


class LocalStore(ObjectStore):
    """Objects as files under ``root``; the "bucket" is the directory itself."""

    backend = "local"

    def __init__(self, root: Path, retry: RetryPolicy | None = None) -> None:
        self.root = Path(root).absolute()
        super().__init__(str(self.root), retry)

    def describe(self) -> str:
        return f"local://{self.root}"

    # --------------------------------------------------------------- helpers
    def _path(self, key: str) -> Path:
        if key.split("/", 1)[0] == STAGING_DIR:
            raise InvalidKeyError(f"keys under {STAGING_DIR!r} are reserved by the local backend")
        return self.root / key

    def _info(self, key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(
            key=key,
            size=st.st_size,
            updated=datetime.fromtimestamp(st.st_mtime, tz=UTC),
            version=f"{st.st_mtime_ns}-{st.st_size}",
        )

    def _require_root(self) -> None:
        if not self.root.is_dir():
            raise _NoBucketError()

    # ------------------------------------------------------------ primitives
    def _put_stream(self, key: str, stream: BinaryIO, size: int | None) -> None:
        self._require_root()
        target = self._path(key)
        staging = self.root / STAGING_DIR
        staging.mkdir(exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=staging, prefix="put-")
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(stream, out, _COPY_BUFFER)
                out.flush()
                os.fsync(out.fileno())
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as exc:
                raise InvalidKeyError(f"key {key!r} lies under an existing object") from exc
            if target.is_dir():
                raise InvalidKeyError(f"key {key!r} is already a prefix of other objects")
            os.replace(tmp_name, target)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        self._require_root()
        path = self._path(key)
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if start >= size > 0:
                return b""
            fh.seek(start)
            return fh.read() if length is None else fh.read(length)

    def _stat(self, key: str) -> ObjectInfo:
        self._require_root()
        path = self._path(key)
        st = path.stat()
        if not path.is_file():
            raise FileNotFoundError(key)
        return self._info(key, st)

    def _list_page(self, prefix: str, delimiter: str | None, token: str | None) -> tuple[Listing, str | None]:
        self._require_root()
        if delimiter not in (None, "/"):
            raise InvalidKeyError("the local backend lists with delimiter '/' or recursively")
        dir_part, _, name_part = prefix.rpartition("/")
        base = self.root / dir_part if dir_part else self.root
        if not base.is_dir():
            return Listing(), None
        if delimiter is None:
            # One page, sorted by key as cloud listings are.
            walked = sorted(self._walk_files(base, name_part), key=lambda o: o.key)
            return Listing(objects=walked), None
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        with os.scandir(base) as entries:
            for entry in entries:
                if not entry.name.startswith(name_part) or (not dir_part and entry.name == STAGING_DIR):
                    continue
                key = f"{dir_part}/{entry.name}" if dir_part else entry.name
                if entry.is_dir(follow_symlinks=False):
                    if _has_files(Path(entry.path)):
                        prefixes.append(key + "/")
                elif entry.is_file(follow_symlinks=False):
                    objects.append(self._info(key, entry.stat()))
        return Listing(objects=objects, prefixes=prefixes), None

    def _walk_files(self, base: Path, name_part: str) -> Iterator[ObjectInfo]:
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            rel_dir = "" if rel_dir == "." else rel_dir
            if rel_dir == "":
                dirnames[:] = [d for d in dirnames if d != STAGING_DIR]
            names = filenames
            if dirpath == str(base) and name_part:
                dirnames[:] = [d for d in dirnames if d.startswith(name_part)]
                names = [f for f in filenames if f.startswith(name_part)]
            for name in names:
                key = f"{rel_dir}/{name}" if rel_dir else name
                try:
                    yield self._info(key, os.stat(os.path.join(dirpath, name)))
                except FileNotFoundError:
                    continue  # deleted while listing

    def _delete(self, key: str) -> None:
        self._require_root()
        path = self._path(key)
        path.unlink()
        # Prune now-empty parent directories so listings show no empty prefixes.
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def _bucket_exists(self) -> bool:
        return self.root.is_dir()

    def _create_bucket(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def _classify(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, _NoBucketError):
            return ErrorKind.NO_BUCKET
        if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
            return ErrorKind.NOT_FOUND
        if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
            return ErrorKind.TRANSIENT
        return ErrorKind.PERMANENT


class _NoBucketError(Exception):
    """The configured directory does not exist."""


def _has_files(directory: Path) -> bool:
    return any(filenames for _dirpath, _dirnames, filenames in os.walk(directory))

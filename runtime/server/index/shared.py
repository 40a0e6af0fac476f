"""Shared session indexes: built once, then downloaded by every replica, restart and
``ray-history`` run instead of rebuilt (issue #18 item 4).

An index lives in the bucket under ``{root}/history-index/`` (keys from
:meth:`~runtime.storage.layout.KeyLayout.index_keys`), zstd-compressed (a SQLite index
shrinks about 14 times, so a download moves a fourteenth of the bytes; figures in
``bench/server_shared_index.py``), next to a JSON manifest written *after* it
(:mod:`.shared_manifest`). A reader fetches the manifest and checks it, streams the
object with parallel ranged reads, hashing it in order and decompressing it into a temp
file in the cache directory, and serves it only if every check passed (sha256 and size
of the object, zstd's content checksum, the decompressed size, the file's schema, exactly
this server's, and its own ``meta``); anything else (absent, foreign, corrupt,
truncated, planted) means a local build. Objects under the prefix may be planted by
less-trusted writers: the size an object may decompress to is bounded by the
session's own stored inputs and ``--cache-max-size`` before a byte is fetched, and
no SQL of the file's runs in the server (:mod:`.shared_manifest`).

``--shared-index``: ``read`` (the default) never writes; ``write`` also uploads after a
build, in a thread of its own, and a refused upload is logged once per session and
counted, nothing more. Writing needs a grant on the index prefix only (on Azure, on a
separate container: ``--shared-index-container``); an identity that only reads
sessions keeps working.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO, cast

import zstandard

from runtime import __version__
from runtime.server.index.schema import META_OBJECTS_FINGERPRINT, SCHEMA_VERSION
from runtime.server.index.shared_manifest import (
    COMPRESSION,
    MAX_MANIFEST_BYTES,
    SHARE_FORMAT,
    Manifest,
    ManifestError,
    download_problem,
    index_file_problem,
    index_size_bound,
    index_version,
    manifest_problem,
    read_meta,
)
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.errors import ObjectNotFoundError, StorageError
from runtime.storage.layout import ClusterRef, KeyLayout

if TYPE_CHECKING:
    from runtime.server.metrics import ServerMetrics

logger = logging.getLogger(__name__)

MODES = ("off", "read", "write")
#: Ranged reads in flight while downloading, and their size: one connection gets a
#: fraction of what several do, from the emulators and the clouds alike.
DOWNLOAD_THREADS = 4
DOWNLOAD_CHUNK = 8 * 1024 * 1024
IO_CHUNK = 8 * 1024 * 1024
#: zstd level 1: 14x smaller at ~600 MB/s on one core; higher levels cost the writer
#: far more than they save readers.
ZSTD_LEVEL = 1
DOWNLOAD_PHASE = "downloading index"

ProgressCallback = Callable[[str, int | None, int | None], None]

__all__ = ["MODES", "DOWNLOAD_PHASE", "SharedIndexes", "index_version", "install_index"]


class _TooBigError(Exception):
    """The object decompresses to more than its manifest says."""


class _BoundedWriter:
    """A file that refuses to grow past ``limit`` (a corrupt or hostile object cannot
    fill the cache's disk), counting what it got."""

    def __init__(self, out: BinaryIO, limit: int) -> None:
        self.out, self.limit, self.written = out, limit, 0

    def write(self, data: bytes) -> int:
        self.written += len(data)
        if self.written > self.limit:
            raise _TooBigError
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


class SharedIndexes:
    """Download and upload of one server's shared indexes (``mode`` read or write)."""

    def __init__(
        self, store: ObjectStore, layout: KeyLayout, mode: str, metrics: ServerMetrics, *, cache_max_bytes: int = 0
    ) -> None:
        """``cache_max_bytes``: ``--cache-max-size`` (0: unbounded), the most any
        downloaded index may take."""
        if mode not in ("read", "write"):
            raise ValueError(f"shared index mode {mode!r}: read or write")
        self.store = store
        self.layout = layout
        self.mode = mode
        self.metrics = metrics
        self.cache_max_bytes = cache_max_bytes
        self._guard = threading.Lock()
        self._warned: set[str] = set()  # sessions whose failed upload was logged at WARNING
        self._uploads: list[threading.Thread] = []

    @property
    def writes(self) -> bool:
        return self.mode == "write"

    def keys(self, cluster: ClusterRef, session: str, events_fingerprint: str) -> tuple[str, str]:
        return self.layout.index_keys(cluster, session, index_version(), events_fingerprint)

    # -------------------------------------------------------------- download
    def install(
        self,
        cluster: ClusterRef,
        session: str,
        path: Path,
        *,
        listing: Sequence[ObjectInfo],
        prints: tuple[str, str],
        progress: ProgressCallback,
    ) -> bool:
        """Put the verified shared index of these build inputs (``prints``: events and
        objects fingerprints) at ``path``; False when there is none usable."""
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.download")
        if not self.fetch(cluster, session, prints[0], tmp, progress, listing=listing, count_ok=False):
            return False
        try:
            if read_meta(tmp).get(META_OBJECTS_FINGERPRINT) != prints[1]:
                # Logs uploaded since it was built: only the object list differs.
                from runtime.server.index.index_file import refresh_objects

                refresh_objects(tmp, listing, self.layout.session_prefix(cluster, session))
            install_index(tmp, path)
            self.metrics.shared_downloads.labels("ok").inc()  # only now: no build follows
        except sqlite3.Error as exc:
            # Past the checks yet unreadable (damaged pages): raising here failed every
            # build of the session, for as long as that object stayed in the bucket.
            _remove(tmp)
            self.metrics.shared_downloads.labels("rejected").inc()
            logger.warning("shared index of %s rejected, building locally: %s", session, exc)
            return False
        except BaseException:
            _remove(tmp)
            raise
        return True

    def fetch(
        self,
        cluster: ClusterRef,
        session: str,
        events_fingerprint: str,
        dest: Path,
        progress: ProgressCallback,
        *,
        listing: Sequence[ObjectInfo],
        count_ok: bool = True,
    ) -> bool:
        """Download and verify the shared index into ``dest``; False (and ``dest``
        absent) when there is none or it is unusable. Storage errors are not raised:
        a local build follows. ``listing``: the session's objects, which bound what
        the index may decompress to (:func:`.shared_manifest.index_size_bound`).
        ``count_ok`` False: the caller counts the download as ``ok`` once it is used."""
        data_key, manifest_key = self.keys(cluster, session, events_fingerprint)
        try:
            raw = self.store.get_range(manifest_key, 0, MAX_MANIFEST_BYTES + 1)
        except ObjectNotFoundError:
            self.metrics.shared_downloads.labels("absent").inc()
            return False
        except StorageError as exc:
            self.metrics.shared_downloads.labels("failed").inc()
            logger.warning("shared index of %s: cannot read %s, building locally: %s", session, manifest_key, exc)
            return False
        try:
            manifest = Manifest.parse(raw)
            bound = index_size_bound(listing, self.layout.session_prefix(cluster, session), self.cache_max_bytes)
            problem = manifest_problem(manifest, events_fingerprint, bound)
            if problem is None:
                problem = self._download(data_key, manifest, dest, progress)
            if problem is None:
                problem = index_file_problem(dest, events_fingerprint)
        except ManifestError as exc:
            problem = str(exc)
        except StorageError as exc:
            _remove(dest)
            self.metrics.shared_downloads.labels("failed").inc()
            logger.warning("shared index of %s: download of %s failed, building locally: %s", session, data_key, exc)
            return False
        except BaseException:
            _remove(dest)
            raise
        if problem is not None:
            _remove(dest)
            self.metrics.shared_downloads.labels("rejected").inc()
            logger.warning("shared index %s rejected, building locally: %s", data_key, problem)
            return False
        if count_ok:
            self.metrics.shared_downloads.labels("ok").inc()
        logger.info("downloaded the shared index of %s (%d bytes, verified)", session, manifest.size)
        return True

    def _download(self, key: str, manifest: Manifest, dest: Path, progress: ProgressCallback) -> str | None:
        """Stream ``key`` into ``dest``: ranged reads in parallel, hashed and
        decompressed in order; a problem's description, or None."""
        size = self.store.stat(key).size
        if size != manifest.size:
            return f"the stored object is {size} bytes, the manifest says {manifest.size}"
        progress(DOWNLOAD_PHASE, 0, size)
        h = hashlib.sha256()
        done = 0
        offsets = iter(range(0, size, DOWNLOAD_CHUNK))
        with (
            open(dest, "wb") as out,
            ThreadPoolExecutor(DOWNLOAD_THREADS, thread_name_prefix="index-fetch") as pool,
        ):
            bounded = _BoundedWriter(out, manifest.index_size)  # bounded by the session: manifest_problem
            # The writer only calls write(): every decompressed byte is written as it comes.
            writer = zstandard.ZstdDecompressor().stream_writer(
                cast("IO[bytes]", bounded), write_size=IO_CHUNK, closefd=False
            )

            def submit() -> Future[bytes] | None:
                offset = next(offsets, None)
                if offset is None:
                    return None
                return pool.submit(self.store.get_range, key, offset, min(DOWNLOAD_CHUNK, size - offset))

            pending: deque[Future[bytes]] = deque()
            for _ in range(DOWNLOAD_THREADS * 2):  # a bounded window: memory stays flat
                if (future := submit()) is not None:
                    pending.append(future)
            try:
                while pending:
                    chunk = pending.popleft().result()
                    if (future := submit()) is not None:
                        pending.append(future)
                    h.update(chunk)
                    done += len(chunk)
                    writer.write(chunk)
                    progress(DOWNLOAD_PHASE, done, size)
            except _TooBigError:
                return f"decompresses to more than the manifest's {manifest.index_size} bytes"
            except zstandard.ZstdError as exc:
                return f"not a valid zstd object: {exc}"
            finally:
                for future in pending:
                    future.cancel()
        return download_problem(manifest, h.hexdigest(), done, bounded.written)

    # ---------------------------------------------------------------- upload
    def publish_later(self, cluster: ClusterRef, session: str, events_fingerprint: str, fh: BinaryIO) -> None:
        """Upload the freshly built index open as ``fh`` in a thread of its own (the
        caller's requests are answered meanwhile); closes ``fh``."""

        def run() -> None:
            with fh:
                self.publish(cluster, session, events_fingerprint, fh)

        thread = threading.Thread(target=run, name="index-publish", daemon=True)
        with self._guard:
            self._uploads = [t for t in self._uploads if t.is_alive()] + [thread]
        thread.start()

    def wait_for_uploads(self, timeout: float | None = None) -> bool:
        """Wait for the uploads started so far (tests, benchmarks)."""
        with self._guard:
            uploads = list(self._uploads)
        for thread in uploads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in uploads)

    def publish(self, cluster: ClusterRef, session: str, events_fingerprint: str, fh: BinaryIO) -> bool:
        """Compress, upload the data, then its manifest; False (logged, counted) when
        refused or when the file changed meanwhile (then nothing is uploaded)."""
        data_key, manifest_key = self.keys(cluster, session, events_fingerprint)
        try:
            # Packed beside the index (the cache directory has the room), deleted after.
            with tempfile.NamedTemporaryFile(prefix=".publish-", suffix=".zst", dir=Path(fh.name).parent) as packed:
                source_sha, index_size, sha, size = _compress(fh, packed)
                if _digest(fh) != (source_sha, index_size):
                    # Refreshed in place meanwhile (late logs): what was packed may mix
                    # two versions; the next build publishes again.
                    self.metrics.shared_uploads.labels("changed").inc()
                    logger.info("shared index of %s not published: the file changed while packing", session)
                    return False
                self.store.put_file(data_key, packed.name)
            manifest = Manifest(
                SHARE_FORMAT, SCHEMA_VERSION, events_fingerprint, COMPRESSION, sha, size, index_size, __version__
            )
            self.store.put_bytes(manifest_key, manifest.to_bytes())
        except Exception as exc:  # a background upload fails nothing but itself
            self.metrics.shared_uploads.labels("failed").inc()
            with self._guard:
                first = session not in self._warned
                self._warned.add(session)
            log = logger.warning if first else logger.debug
            log("cannot publish the shared index of %s to %s (answers are not affected): %s", session, data_key, exc)
            return False
        self.metrics.shared_uploads.labels("ok").inc()
        logger.info("published the shared index of %s (%d bytes, %d compressed)", session, index_size, size)
        self._drop_superseded(cluster, session, (data_key, manifest_key))
        return True

    def _drop_superseded(self, cluster: ClusterRef, session: str, keep: tuple[str, str]) -> None:
        """Delete this session's older copies (a running session is re-indexed as its
        events grow; only the newest inputs' index is of use). Best effort: what stays
        is deleted by ``ray-history gc`` with its session."""
        data_key = keep[0]
        version_prefix = data_key[: data_key.rindex("/") + 1]
        try:
            for info in self.store.walk(version_prefix):
                if info.key not in keep:
                    self.store.delete(info.key)
        except (StorageError, ValueError) as exc:
            logger.debug("cannot delete superseded shared indexes of %s: %s", session, exc)


def _compress(source: IO[bytes], packed: IO[bytes]) -> tuple[str, int, str, int]:
    """zstd ``source`` into ``packed``: (source sha256, source size, packed sha256, packed size)."""
    source.seek(0)
    source_hash, packed_hash = hashlib.sha256(), hashlib.sha256()
    counted = _HashingWriter(packed, packed_hash)
    params = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=False)
    source_size = 0
    with params.stream_writer(cast("IO[bytes]", counted), closefd=False) as writer:
        while chunk := source.read(IO_CHUNK):
            source_hash.update(chunk)
            source_size += len(chunk)
            writer.write(chunk)
    packed.flush()
    return source_hash.hexdigest(), source_size, packed_hash.hexdigest(), counted.written


def _digest(fh: BinaryIO) -> tuple[str, int]:
    fh.seek(0)
    h = hashlib.sha256()
    size = 0
    while chunk := fh.read(IO_CHUNK):
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


class _HashingWriter:
    """Hashes and counts what the compressor writes."""

    def __init__(self, out: IO[bytes], h: hashlib._Hash) -> None:
        self.out, self.h, self.written = out, h, 0

    def write(self, data: bytes) -> int:
        self.h.update(data)
        self.written += len(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


def install_index(tmp: Path, path: Path) -> None:
    """Rename a complete index into place (readers of the old file finish on it)."""
    os.replace(tmp, path)
    for suffix in ("-wal", "-shm"):  # stale companions of the replaced file
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

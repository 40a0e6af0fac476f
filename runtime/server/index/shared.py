"""Shared session indexes: built once, then downloaded by every replica, restart and
``ray-history`` run instead of rebuilt (issue #18 item 4).

An index lives in the bucket under ``{root}/history-index/`` (keys from
:meth:`~runtime.storage.layout.KeyLayout.index_keys`), next to a JSON manifest written
*after* it: sha256, size, share format, schema version, the events fingerprint it was
built from and the builder's version. A reader fetches the manifest, checks it, streams
the data to a temp file in the cache directory while hashing it, and serves it only if
every check passed; anything else (absent, foreign, corrupt, truncated) means a local
build. ``--shared-index``: ``read`` (the default) never writes; ``write`` also uploads
after a build, in a thread of its own, and a refused upload is logged and counted only.

Writing needs a grant on the index prefix only (or, on Azure, a separate container:
``--shared-index-container``); an identity that only reads sessions keeps working.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import orjson

from runtime import __version__
from runtime.server.index.schema import (
    META_EVENTS_FINGERPRINT,
    META_OBJECTS_FINGERPRINT,
    META_SCHEMA_VERSION,
    SCHEMA_VERSION,
)
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.errors import ObjectNotFoundError, StorageError
from runtime.storage.layout import ClusterRef, KeyLayout

if TYPE_CHECKING:
    from runtime.server.metrics import ServerMetrics

logger = logging.getLogger(__name__)

MODES = ("off", "read", "write")
#: The layout of the shared objects themselves (manifest fields, raw SQLite data);
#: bumped when they change, independently of the index schema.
SHARE_FORMAT = 1
#: Ranged reads in flight while downloading, and their size: the emulators and the
#: clouds serve one connection at a fraction of what several give.
DOWNLOAD_THREADS = 4
DOWNLOAD_CHUNK = 16 * 1024 * 1024
HASH_CHUNK = 8 * 1024 * 1024
#: A manifest is a few hundred bytes; anything much larger is not ours.
MAX_MANIFEST_BYTES = 64 * 1024
DOWNLOAD_PHASE = "downloading index"

ProgressCallback = Callable[[str, int | None, int | None], None]


def index_version() -> str:
    """The version component of the keys: share format and index schema."""
    return f"v{SHARE_FORMAT}-s{SCHEMA_VERSION}"


class ManifestError(ValueError):
    """A manifest that is not one this server wrote (or can use)."""


@dataclass(frozen=True)
class Manifest:
    """What a reader checks before it serves a downloaded index."""

    share_format: int
    schema_version: int
    events_fingerprint: str
    sha256: str
    size: int
    builder: str

    def to_bytes(self) -> bytes:
        return orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS)

    @classmethod
    def parse(cls, data: bytes) -> Manifest:
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest is {len(data)} bytes, more than {MAX_MANIFEST_BYTES}")
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ManifestError(f"manifest is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ManifestError("manifest is not a JSON object")
        types = {"share_format": int, "schema_version": int, "events_fingerprint": str, "sha256": str}
        types |= {"size": int, "builder": str}
        for name, kind in types.items():
            if not isinstance(raw.get(name), kind) or isinstance(raw.get(name), bool):
                raise ManifestError(f"manifest field {name!r} is missing or not {kind.__name__}")
        return cls(**{name: raw[name] for name in types})


def manifest_problem(manifest: Manifest, events_fingerprint: str) -> str | None:
    """Why ``manifest`` does not describe an index this server may use for a session
    whose build inputs have ``events_fingerprint`` (None: it does)."""
    if manifest.share_format != SHARE_FORMAT:
        return f"share format {manifest.share_format}, this server reads {SHARE_FORMAT}"
    if manifest.schema_version != SCHEMA_VERSION:
        return f"index schema {manifest.schema_version}, this server reads {SCHEMA_VERSION}"
    if manifest.events_fingerprint != events_fingerprint:
        return "built from other event objects (fingerprint differs)"
    if len(manifest.sha256) != 64 or any(c not in "0123456789abcdef" for c in manifest.sha256):
        return "sha256 is not 64 lower-case hex digits"
    if manifest.size <= 0:
        return f"size {manifest.size}"
    return None


def download_problem(manifest: Manifest, sha256: str, size: int) -> str | None:
    """Why the downloaded bytes are not the ones the manifest describes (None: they are)."""
    if size != manifest.size:
        return f"{size} bytes downloaded, the manifest says {manifest.size}"
    if sha256 != manifest.sha256:
        return f"sha256 {sha256} differs from the manifest's {manifest.sha256}"
    return None


def index_file_problem(path: Path, events_fingerprint: str) -> str | None:
    """Why the SQLite file at ``path`` is not an index of this schema built from these
    inputs (the manifest's word is checked against the file's own ``meta``)."""
    try:
        meta = _meta(path)
    except sqlite3.Error as exc:
        return f"not a readable index: {exc}"
    if meta.get(META_SCHEMA_VERSION) != str(SCHEMA_VERSION):
        return f"its meta says schema {meta.get(META_SCHEMA_VERSION)!r}"
    if meta.get(META_EVENTS_FINGERPRINT) != events_fingerprint:
        return "its meta names other event objects"
    return None


def digest_open_file(fh: BinaryIO) -> tuple[str, int]:
    """(sha256 hex, size) of an open file from its start."""
    fh.seek(0)
    h = hashlib.sha256()
    size = 0
    while chunk := fh.read(HASH_CHUNK):
        h.update(chunk)
        size += len(chunk)
    fh.seek(0)
    return h.hexdigest(), size


class SharedIndexes:
    """Download and upload of one server's shared indexes (``mode`` read or write)."""

    def __init__(self, store: ObjectStore, layout: KeyLayout, mode: str, metrics: ServerMetrics) -> None:
        if mode not in ("read", "write"):
            raise ValueError(f"shared index mode {mode!r}: read or write")
        self.store = store
        self.layout = layout
        self.mode = mode
        self.metrics = metrics
        self._warned_guard = threading.Lock()
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
        if not self.fetch(cluster, session, prints[0], tmp, progress):
            return False
        try:
            meta_objects = _meta(tmp).get(META_OBJECTS_FINGERPRINT)
            if meta_objects != prints[1]:  # logs uploaded since it was built: only the object list differs
                from runtime.server.index.index_file import refresh_objects

                refresh_objects(tmp, listing, self.layout.session_prefix(cluster, session))
            install_index(tmp, path)
        except BaseException:
            _remove(tmp)
            raise
        return True

    def fetch(
        self, cluster: ClusterRef, session: str, events_fingerprint: str, dest: Path, progress: ProgressCallback
    ) -> bool:
        """Download and verify the shared index into ``dest``; False (and ``dest``
        absent) when there is none or it is unusable. Never raises for storage errors:
        a local build follows."""
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
            problem = manifest_problem(manifest, events_fingerprint)
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
        self.metrics.shared_downloads.labels("ok").inc()
        logger.info("downloaded the shared index of %s (%d bytes, verified)", session, manifest.size)
        return True

    def _download(self, key: str, manifest: Manifest, dest: Path, progress: ProgressCallback) -> str | None:
        """Stream ``key`` into ``dest`` with ranged reads in parallel, hashed in order."""
        size = self.store.stat(key).size
        if size != manifest.size:
            return f"the stored object is {size} bytes, the manifest says {manifest.size}"
        progress(DOWNLOAD_PHASE, 0, size)
        h = hashlib.sha256()
        done = 0
        offsets = iter(range(0, size, DOWNLOAD_CHUNK))
        with open(dest, "wb") as out, ThreadPoolExecutor(DOWNLOAD_THREADS, thread_name_prefix="index-fetch") as pool:

            def submit() -> Future[bytes] | None:
                offset = next(offsets, None)
                if offset is None:
                    return None
                return pool.submit(self.store.get_range, key, offset, min(DOWNLOAD_CHUNK, size - offset))

            pending: deque[Future[bytes]] = deque()
            for _ in range(DOWNLOAD_THREADS * 2):  # a bounded window: memory stays flat
                future = submit()
                if future is not None:
                    pending.append(future)
            try:
                while pending:
                    chunk = pending.popleft().result()
                    future = submit()
                    if future is not None:
                        pending.append(future)
                    h.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    progress(DOWNLOAD_PHASE, done, size)
            finally:
                for future in pending:
                    future.cancel()
        return download_problem(manifest, h.hexdigest(), done)

    # ---------------------------------------------------------------- upload
    def publish_later(self, cluster: ClusterRef, session: str, events_fingerprint: str, fh: BinaryIO) -> None:
        """Upload the freshly built index open as ``fh`` in a thread of its own (the
        caller's requests are answered meanwhile); closes ``fh``."""

        def run() -> None:
            with fh:
                self.publish(cluster, session, events_fingerprint, fh)

        thread = threading.Thread(target=run, name="index-publish", daemon=True)
        with self._warned_guard:
            self._uploads = [t for t in self._uploads if t.is_alive()] + [thread]
        thread.start()

    def wait_for_uploads(self, timeout: float | None = None) -> bool:
        """Wait for the uploads started so far (tests, benchmarks, the CLI at exit)."""
        with self._warned_guard:
            uploads = list(self._uploads)
        for thread in uploads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in uploads)

    def publish(self, cluster: ClusterRef, session: str, events_fingerprint: str, fh: BinaryIO) -> bool:
        """Upload data, then its manifest; False (logged, counted) when refused or
        when the file changed meanwhile (then no manifest: the data is never served)."""
        data_key, manifest_key = self.keys(cluster, session, events_fingerprint)
        try:
            sha, size = digest_open_file(fh)
            self.store.put_open_file(data_key, fh)
            if digest_open_file(fh) != (sha, size):
                # Refreshed in place while uploading (late logs): what was sent may mix
                # two versions, so no manifest; the next build publishes again.
                self.metrics.shared_uploads.labels("changed").inc()
                logger.info("shared index of %s not published: the file changed while uploading", session)
                return False
            manifest = Manifest(SHARE_FORMAT, SCHEMA_VERSION, events_fingerprint, sha, size, __version__)
            self.store.put_bytes(manifest_key, manifest.to_bytes())
        except Exception as exc:  # a background upload fails nothing but itself
            self.metrics.shared_uploads.labels("failed").inc()
            with self._warned_guard:
                first = session not in self._warned
                self._warned.add(session)
            log = logger.warning if first else logger.debug
            log("cannot publish the shared index of %s to %s (answers are not affected): %s", session, data_key, exc)
            return False
        self.metrics.shared_uploads.labels("ok").inc()
        logger.info("published the shared index of %s (%d bytes)", session, size)
        return True


def install_index(tmp: Path, path: Path) -> None:
    """Rename a complete index into place (readers of the old file finish on it)."""
    os.replace(tmp, path)
    for suffix in ("-wal", "-shm"):  # stale companions of the replaced file
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def _meta(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    finally:
        conn.close()


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

"""The on-disk cache of session indexes (README "How it stays fast").

* One SQLite file per stored session under ``--cache-dir``; it survives restarts.
* One build per session across threads *and* gunicorn workers: an in-process lock
  plus an ``flock`` on ``<index>.lock``; whoever gets the lock second finds the
  index built and just opens it (:mod:`runtime.server.index.locks`).
* No request waits for a build longer than ``--build-wait``: builds (and freshness
  checks) run in a background thread holding both locks (:mod:`.jobs`); a request
  still waiting is answered 503 with the build's progress (:mod:`.progress`), read
  from the progress file of the worker that builds when it is another one. While a
  session is re-indexed its previous index keeps answering.
* A session without an index is first checked to exist in storage (one delimited
  listing, remembered for a few seconds when absent), so a cookie naming a made-up
  session costs no lock, no lock file and no table entry: 404 at once. Lock files
  are deleted with their index (and when a build fails or finds nothing).
* At most ``--max-builds`` builds that requests started run at once on the cache
  directory (``flock`` slots, :func:`~runtime.server.index.locks.queued_slot`); more
  wait their turn reporting the phase ``queued``, so many users opening many big
  sessions share the CPU and memory instead of exhausting them.
* Builds write a temp file and ``os.replace`` it in, so a reader never sees a
  half-built index, and a request already reading the old file finishes on it.
* Freshness: at most every ``freshness_seconds`` (tracked by the mtime of a
  ``.checked`` stamp, shared by workers and restarts) the session is listed again.
  Changed event objects -> rebuild; only other objects changed (late log uploads)
  -> the objects table is refreshed in place.
* Shared through the bucket (``--shared-index``, :mod:`.shared`): a miss first tries
  the index another replica (or an earlier run) uploaded for the same build inputs,
  verified before use; only without one is the index built here (and, with
  ``write``, uploaded in the background).
* Byte-bounded LRU: after a build, least recently used indexes are deleted until
  the directory fits ``cache_max_bytes`` (recency = the index file's mtime, touched
  when opened). A wiped directory is recreated and indexes rebuilt on demand. An
  index built ahead of requests (:mod:`.ahead`) evicts nothing: when it does not fit,
  it is deleted itself (unless a request joined its build).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.server.errors import ApiError, IndexBuildingError
from runtime.server.index.fingerprint import fingerprints, is_log_events
from runtime.server.index.jobs import BuildJob, BuildJobs, lower_priority
from runtime.server.index.locks import SLOTS_DIR, KeyedLocks, file_lock, lock_path, queued_slot, remove_lock_file
from runtime.server.index.progress import BuildProgress, ProgressFile
from runtime.server.index.reader import SessionIndex
from runtime.server.index.schema import (
    META_EVENTS_FINGERPRINT,
    META_OBJECTS_FINGERPRINT,
    META_SCHEMA_VERSION,
    SCHEMA_VERSION,
)
from runtime.server.index.shared import SharedIndexes, install_index
from runtime.server.index.sources import likely_size
from runtime.server.index.temp_files import sweep_temp_files
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.index_store import open_index_store
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.session_keys import is_readable_event_file, parse_session_key, relative_key

if TYPE_CHECKING:
    from runtime.server.config import ServerConfig
    from runtime.server.metrics import ServerMetrics

logger = logging.getLogger(__name__)

INDEX_SUFFIX = ".sqlite"
#: Recency is recorded at most this often per index (one utime per minute, not per request).
TOUCH_INTERVAL = 60.0
#: How long a session found absent from storage is answered 404 without asking again
#: (capped by ``freshness_seconds``), and how many such answers are remembered.
ABSENT_TTL = 5.0
ABSENT_MAX = 4096
#: A failed build's error is answered this long before a request builds again.
FAILED_RETRY_SECONDS = 5.0
#: What a 503 during a build tells clients to wait before asking again.
BUILDING_RETRY_AFTER = 2
#: The lock files of the ``--max-builds`` slots in the cache directory.
BUILD_SLOT_PREFIX = "build-slot-"
#: The phase of a build waiting for a slot.
QUEUED = "queued"


class IndexCache:
    """Finds, builds, refreshes and evicts session indexes."""

    def __init__(self, config: ServerConfig, *, store: ObjectStore, layout: KeyLayout, metrics: ServerMetrics) -> None:
        self.config = config
        self.dir = Path(config.cache_dir)
        self.store = store
        self.layout = layout
        self.metrics = metrics
        self._locks = KeyedLocks()
        self._jobs = BuildJobs(
            FAILED_RETRY_SECONDS, on_start=metrics.builds_in_progress.inc, on_end=metrics.builds_in_progress.dec
        )
        self._touched: dict[str, float] = {}
        self._absent_guard = threading.Lock()
        self._absent: OrderedDict[str, float] = OrderedDict()  # session prefix -> when found absent
        self.shared: SharedIndexes | None = None
        if config.shared_index != "off":
            index_store = open_index_store(config.storage, config.shared_index_container, store)
            self.shared = SharedIndexes(
                index_store, layout, config.shared_index, metrics, cache_max_bytes=config.cache_max_bytes
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        sweep_temp_files(self.dir)

    # ------------------------------------------------------------ public API
    def path_for(self, cluster: ClusterRef, session: str) -> Path:
        prefix = self.layout.session_prefix(cluster, session)
        digest = hashlib.sha256(prefix.encode()).hexdigest()[:40]
        return self.dir / f"{digest}{INDEX_SUFFIX}"

    def open(self, cluster: ClusterRef, session: str) -> SessionIndex:
        """A read connection to the session's index, building it first if needed."""
        path = self.ensure(cluster, session)
        try:
            return SessionIndex(path)
        except sqlite3.Error:
            # Evicted or wiped between ensure() and open(): build again, once.
            return SessionIndex(self.ensure(cluster, session))

    def used_bytes(self) -> int:
        """What the indexes in the directory take (their WAL files included)."""
        return sum(_size(p) + _size(Path(f"{p}-wal")) for p in self.dir.glob(f"*{INDEX_SUFFIX}"))

    def is_indexed(self, cluster: ClusterRef, session: str) -> bool:
        """An index of the current schema exists (fresh or not)."""
        return _schema_ok(self.path_for(cluster, session))

    def ensure(self, cluster: ClusterRef, session: str, wait: float | None = None, *, ahead: bool = False) -> Path:
        """Make sure a current index exists; returns its path.

        A build (or a freshness check) runs in the background; this waits for it at
        most ``wait`` seconds (default ``--build-wait``). Raises ApiError(404) for a
        session with no stored objects, the build's own error when it failed (for
        ``FAILED_RETRY_SECONDS`` after it did), and IndexBuildingError (503 with the
        build's progress) when it is still running and no older index can serve.
        ``ahead``: indexing ahead of any request, at a lower CPU priority."""
        path = self.path_for(cluster, session)
        if _schema_ok(path) and not self._check_due(path):
            self.metrics.cache_requests.labels("hit").inc()
            self._touch(path)
            return path
        if not path.exists():
            self._require_stored(cluster, session)  # before any lock or file exists
        job, started = self._start_or_join(cluster, session, path, ahead)
        if not started:
            self.metrics.cache_requests.labels("joined").inc()  # another request's build or check
        if not ahead:
            job.requested = True
        if not job.done.wait(self.config.build_wait if wait is None else wait):
            if _schema_ok(path):
                # Re-indexing (or a slow re-listing): the previous index answers meanwhile.
                self.metrics.cache_requests.labels("stale").inc()
                return path
            self.metrics.building_answers.inc()
            raise _building(cluster, session, job.current())
        if job.error is not None:
            raise job.error
        return path

    def build_ahead(self, cluster: ClusterRef, session: str) -> BuildJob | None:
        """Start (or join) the build of a session's index ahead of any request; the
        caller waits on the job's ``done`` as long as it likes. None: a current index
        exists. Raises ApiError(404) for a session with no stored objects. An index
        built ahead that no request waited for never evicts another one: it is deleted
        instead when it does not fit ``--cache-max-size``."""
        path = self.path_for(cluster, session)
        if _schema_ok(path) and not self._check_due(path):
            return None
        if not path.exists():
            self._require_stored(cluster, session)
        return self._start_or_join(cluster, session, path, ahead=True)[0]

    # -------------------------------------------------------------- internals
    def _start_or_join(self, cluster: ClusterRef, session: str, path: Path, ahead: bool) -> tuple[BuildJob, bool]:
        return self._jobs.start_or_join(path, lambda job: self._run_job(job, cluster, session, path, ahead))

    def _require_stored(self, cluster: ClusterRef, session: str) -> None:
        """404 unless storage holds something under the session's prefix."""
        prefix = self.layout.session_prefix(cluster, session)
        ttl = min(ABSENT_TTL, self.config.freshness_seconds)
        now = time.monotonic()
        with self._absent_guard:
            found_at = self._absent.get(prefix)
            known_absent = found_at is not None and now - found_at < ttl
        if not known_absent:
            listing = self.store.list(prefix)
            if listing.objects or listing.prefixes:
                return
            with self._absent_guard:
                self._absent[prefix] = now
                self._absent.move_to_end(prefix)
                while len(self._absent) > ABSENT_MAX:
                    self._absent.popitem(last=False)
        raise _no_objects(cluster, session)

    def _run_job(self, job: BuildJob, cluster: ClusterRef, session: str, path: Path, ahead: bool) -> None:
        """The body of a background build: both locks for its whole duration."""
        if ahead:
            lower_priority()
        with self._locks.hold(str(path)), file_lock(path, on_contended=job.waiting_elsewhere):
            job.building_here()
            try:
                self._ensure_locked(cluster, session, path, job, ahead)
            finally:
                job.progress.remove()  # before the lock goes: a file present means a build under way

    def _ensure_locked(self, cluster: ClusterRef, session: str, path: Path, job: BuildJob, ahead: bool) -> Path:
        progress = job.progress
        usable = _schema_ok(path)
        if usable and not self._check_due(path):
            self.metrics.cache_requests.labels("hit").inc()  # another worker just built or checked it
            return path
        prefix = self.layout.session_prefix(cluster, session)
        listing: list[ObjectInfo] = []
        for info in self.store.walk(prefix):
            listing.append(info)
            progress.report("listing", len(listing), None)  # a listing's length is known only at its end
        if not listing:
            raise _no_objects(cluster, session)
        events_fp, objects_fp = fingerprints(listing, prefix)
        if usable:
            meta = _read_meta(path)
            if meta.get(META_EVENTS_FINGERPRINT) == events_fp:
                if meta.get(META_OBJECTS_FINGERPRINT) != objects_fp:
                    from runtime.server.index.index_file import refresh_objects

                    refresh_objects(path, listing, prefix)
                    logger.info("index %s: refreshed the object list of %s", path.name, session)
                self.metrics.cache_requests.labels("refresh").inc()
                self._stamp(path)
                return path
            logger.info("index %s: event objects of %s changed, re-indexing", path.name, session)
        shared = self.shared
        if shared is not None and shared.install(
            cluster, session, path, listing=listing, prints=(events_fp, objects_fp), progress=progress.report
        ):
            self.metrics.cache_requests.labels("downloaded").inc()
        else:
            self.metrics.cache_requests.labels("miss").inc()
            with contextlib.ExitStack() as held:
                if not ahead:  # a build ahead holds a slot of its own (ahead.py)
                    slots = (self.dir / SLOTS_DIR, BUILD_SLOT_PREFIX, self.config.max_builds)
                    waiting = self.metrics.builds_queued.inc
                    held.enter_context(queued_slot(*slots, lambda: progress.report(QUEUED), waiting))
                self._build(cluster, session, path, listing, progress)
            self._publish(cluster, session, path, events_fp)
        self._stamp(path)
        if ahead and not job.requested:
            self._fit_ahead(path)
        else:
            self._evict(keep=path)
        return path

    def _publish(self, cluster: ClusterRef, session: str, path: Path, events_fp: str) -> None:
        """``--shared-index write``: upload what was just built, in the background."""
        if self.shared is None or not self.shared.writes:
            return
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed by the publishing thread
        except OSError as exc:
            logger.warning("cannot publish the index of %s: %s", session, exc)
            return
        self.shared.publish_later(cluster, session, events_fp, fh)

    def _build(
        self, cluster: ClusterRef, session: str, path: Path, listing: Sequence[ObjectInfo], progress: ProgressFile
    ) -> None:
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.building")
        prefix = self.layout.session_prefix(cluster, session)
        events = [info for info in listing if _is_build_input(info.key, prefix)]
        event_bytes = sum(info.size for info in events)
        # By what the objects hold once read: a .gz one's stored size understates it
        # (~10x; a bomb is cut at 100x, inflating no more than that, see sources.py).
        # Log-event files count too: a big one replayed inline held its memory here.
        in_child = sum(likely_size(info) for info in events) > self.config.subprocess_build_bytes
        mode = "subprocess" if in_child else "inline"
        started = time.perf_counter()
        try:
            if in_child:
                from runtime.server.index.child import build_in_child

                build_in_child(
                    storage=self.config.storage,
                    cluster=cluster,
                    session=session,
                    out=tmp,
                    listing=listing,
                    timeout=self.config.build_timeout,
                    progress=progress.report,
                )
            else:
                from runtime.server.index.build import build_index

                build_index(self.store, self.layout, cluster, session, tmp, listing=listing, progress=progress.report)
            install_index(tmp, path)
        except BaseException:
            self.metrics.index_builds.labels("failed").inc()
            _remove(tmp)
            raise
        seconds = time.perf_counter() - started
        self.metrics.index_builds.labels("ok").inc()
        self.metrics.session_load_seconds.labels(mode).observe(seconds)
        logger.info(
            "indexed %s/%s %s in %.2f s (%s, %d event bytes)",
            cluster.namespace,
            cluster.name,
            session,
            seconds,
            mode,
            event_bytes,
        )

    def _evict(self, keep: Path) -> None:
        self._sweep_lock_files()
        if self.config.cache_max_bytes <= 0:  # --cache-max-size=0: unbounded
            return
        files = []
        for candidate in self.dir.glob(f"*{INDEX_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                st = candidate.stat()
                size = st.st_size + _size(Path(f"{candidate}-wal"))
                files.append((st.st_mtime, size, candidate))
        total = sum(size for _, size, _ in files)
        for _mtime, size, candidate in sorted(files):
            if total <= self.config.cache_max_bytes:
                break
            if candidate == keep:
                continue
            self._delete(candidate)
            total -= size
            self.metrics.evictions.inc()
            logger.info("evicted index %s (%d bytes) to respect the cache size", candidate.name, size)

    def _fit_ahead(self, built: Path) -> None:
        """After a build ahead no request waits for: the indexes people use are never
        evicted for it (``ahead.py``); when it does not fit the bound it goes itself, and
        is built again when a request asks for it."""
        self._sweep_lock_files()
        bound = self.config.cache_max_bytes
        used = self.used_bytes()
        if bound <= 0 or used <= bound:
            return
        self._delete(built)  # its lock file goes when the build lets go of it (file_lock)
        logger.info("dropped index %s built ahead: the cache would take %d bytes of %d", built.name, used, bound)

    def _delete(self, index: Path) -> None:
        for victim in (index, Path(f"{index}-wal"), Path(f"{index}-shm"), _stamp_path(index)):
            _remove(victim)
        remove_lock_file(index)  # goes with its index (unless held: its holder removes it)
        self._touched.pop(str(index), None)

    def _sweep_lock_files(self) -> None:
        """Lock files whose index is gone (left by a crash, or by an older version)."""
        for lock in self.dir.glob(f"*{INDEX_SUFFIX}.lock"):
            index = lock.with_name(lock.name.removesuffix(".lock"))
            if lock != lock_path(index) or index.exists():
                continue
            remove_lock_file(index)

    def _check_due(self, path: Path) -> bool:
        try:
            checked = _stamp_path(path).stat().st_mtime
        except FileNotFoundError:
            return True
        return time.time() - checked >= self.config.freshness_seconds

    def _stamp(self, path: Path) -> None:
        stamp = _stamp_path(path)
        stamp.touch()
        os.utime(stamp)
        self._touch(path, force=True)

    def _touch(self, path: Path, force: bool = False) -> None:
        now = time.monotonic()
        key = str(path)
        if force or now - self._touched.get(key, 0.0) >= TOUCH_INTERVAL:
            with contextlib.suppress(FileNotFoundError):
                os.utime(path)
            self._touched[key] = now


# ------------------------------------------------------------------ helpers
def _building(cluster: ClusterRef, session: str, progress: BuildProgress) -> IndexBuildingError:
    percent = progress.percent()
    done = f" ({percent} %)" if percent is not None else ""
    where = f"session {session} of {cluster.namespace}/{cluster.name}"
    msg = f"{where} is being indexed: {progress.phase}{done}; retry shortly"
    return IndexBuildingError(msg, progress.as_json(), BUILDING_RETRY_AFTER, session)


def _no_objects(cluster: ClusterRef, session: str) -> ApiError:
    return ApiError(404, f"session {session} of {cluster.namespace}/{cluster.name} has no objects in storage")


def _stamp_path(path: Path) -> Path:
    return path.with_suffix(".checked")


def _is_build_input(key: str, session_prefix: str) -> bool:
    """An object the build replays (events, log events): what sizes it (inline or child)."""
    item = parse_session_key(relative_key(key, session_prefix))
    return is_readable_event_file(item) or is_log_events(item)


def _schema_ok(path: Path) -> bool:
    if not path.exists():
        return False
    return _read_meta(path).get(META_SCHEMA_VERSION) == str(SCHEMA_VERSION)


def _read_meta(path: Path) -> dict[str, str]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
        finally:
            conn.close()
    except sqlite3.Error:
        return {}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

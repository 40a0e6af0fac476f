"""Log shipping: the current session's logs while the node runs, previous sessions
through ``prev-logs``, and everything left at shutdown.

KubeRay's Go collector uploads logs only at shutdown and reads whole files into
memory. Here a ``watchfiles`` thread marks changed files dirty
and one loop thread uploads them, streamed, at most every ``upload_interval`` per
file (new files at once), with a periodic full rescan as a safety net. Files in
``prev-logs`` are deleted only after their upload succeeded, so failures are
retried and a collector restart resumes (``logs_prev.py``). What is remembered
per file, and the uploads themselves, live in ``logs_state.py``; the watcher
thread in ``log_watch.py``.

Nothing reached through a symbolic link is shipped (#14 item 1): the watcher
watches each real directory on its own (a recursive inotify watch follows linked
directories), walks and opens go through descriptors with ``O_NOFOLLOW``
(``log_files.py``), and what is uploaded is read from the descriptor checked.
"""

from __future__ import annotations

import logging
import math
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from runtime.collector.log_files import LogFile, UnsafePathError, iter_log_files, lstat_below
from runtime.collector.log_watch import LogWatcher
from runtime.collector.logs_prev import (
    PrevPlan,
    UploadJob,
    plan_prev_logs,
    prune_prev_logs_dir,
    relpath_of,
)
from runtime.collector.logs_state import BACKOFF_BASE, BACKOFF_CAP, UploadState, backoff
from runtime.collector.metrics import CollectorMetrics
from runtime.collector.session_files import PREV_LOGS, node_id_from_session_dir, resolve_session_latest
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import ClusterRef, KeyLayout, validate_node_id

logger = logging.getLogger(__name__)


class LogShipper:
    """Ships one node's Ray logs to ``store`` under ``layout``/``cluster``."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        layout: KeyLayout,
        cluster: ClusterRef,
        tmp_root: Path,
        node_id: Callable[[], str | None],
        upload_interval: float,
        metrics: CollectorMetrics,
        on_session: Callable[[str], None] | None = None,
        node_for_session: Callable[[str], str | None] | None = None,
        rescan_interval: float = 300.0,
        session_check_interval: float = 2.0,
        workers: int = 4,
    ) -> None:
        self._layout = layout
        self._cluster = cluster
        self._tmp_root = Path(tmp_root)
        self._node_id = node_id
        # When given, asked instead of node_id with the session being shipped.
        self._node_for_session = node_for_session
        self._interval = upload_interval
        self._metrics = metrics
        self._on_session = on_session
        self._rescan_interval = rescan_interval
        self._session_check = session_check_interval

        self._wake = threading.Event()
        self._stopping = threading.Event()
        # Dirty marks (the watcher thread adds to them), schedules, stored content, uploads.
        self._state = UploadState(
            store=store, metrics=metrics, upload_interval=upload_interval, stopping=self._stopping, workers=workers
        )
        self._loop_thread: threading.Thread | None = None
        self._result: bool | None = None  # of stop()
        self._watcher = LogWatcher(
            on_changes=self._state.mark_dirty, wake=self._wake, upload_interval=upload_interval, retry_after=BACKOFF_CAP
        )

        # Used by the loop thread only (and by stop() once the loop has ended).
        self._session_dir: Path | None = None
        self._rejected: set[Path] = set()
        self._announced: set[str] = set()
        self._announce_retry_at = 0.0
        self._next_rescan = 0.0
        self._last_rescan = 0.0
        self._prev_due = 0.0
        self._prev_failures = 0
        self._warned: set[str] = set()
        self.skipped_invalid = 0

    # ------------------------------------------------------------- public API
    @property
    def files_shipped(self) -> int:
        return self._state.files_shipped

    @property
    def bytes_shipped(self) -> int:
        return self._state.bytes_shipped

    def start(self) -> None:
        """Start the loop thread (it starts the watcher); returns at once."""
        if self._loop_thread is None:
            self._loop_thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)
            self._loop_thread.start()

    def stop(self, deadline: float) -> bool:
        """Stop watching, then upload every remaining byte of the current session
        and of ``prev-logs`` before ``deadline`` (a ``time.monotonic()`` value).
        True when everything was shipped. A second call answers the first's result."""
        if self._result is not None:
            return self._result
        self._result = self._stop(deadline)
        return self._result

    def _stop(self, deadline: float) -> bool:
        started = time.monotonic()
        self._stopping.set()
        self._wake.set()
        self._watcher.stop()
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if self._loop_thread.is_alive():
                logger.warning("log shipper: uploads still running at the deadline; logs NOT all shipped")
                self._state.shutdown()
                return False
        self._watcher.stop()  # the loop may have started one as stop() began
        files, size = self.files_shipped, self.bytes_shipped
        failed = left = 0
        try:
            self._check_session()
            # No node id yet at shutdown: the session dir may still tell, better than losing the logs.
            node = self._live_node() or (node_id_from_session_dir(self._session_dir) if self._session_dir else None)
            jobs = self._current_jobs(node, final=True) if node else []
            plan = self._plan_prev()
            self._announce_all(plan.sessions)
            outcomes, left = self._state.run(jobs + plan.jobs, deadline)
            for prev in plan.dirs:
                prune_prev_logs_dir(prev, self._tmp_root / PREV_LOGS)
            failed = sum(o.status in ("failed", "changed", "replaced") for o in outcomes)
            complete = plan.complete and failed == 0 and left == 0 and (node is not None or self._session_dir is None)
        except Exception:
            logger.exception("log shipper: final upload failed")
            complete = False
        finally:
            self._state.shutdown()
        logger.info(
            "log shipper stopped in %.1fs: final upload %d files (%d bytes), %d failed, %d not attempted; "
            "%d files (%d bytes) shipped in all, %d skipped as names the key layout rejects%s",
            time.monotonic() - started,
            self.files_shipped - files,
            self.bytes_shipped - size,
            failed,
            left,
            self.files_shipped,
            self.bytes_shipped,
            self.skipped_invalid,
            "" if complete else "; logs NOT all shipped",
        )
        return complete

    # ------------------------------------------------------------- main loop
    def _run(self) -> None:
        errors = 0
        while not self._stopping.is_set():
            self._wake.clear()  # before the work, so a wake-up during it is not lost
            now = time.monotonic()
            node: str | None = None
            try:
                self._check_session()
                watching = self._watcher.alive
                if not watching:
                    # Without a watcher (it may have died just after the last check),
                    # rescans every upload interval stand in for it.
                    self._next_rescan = min(self._next_rescan, self._last_rescan + self._interval)
                if now >= self._next_rescan:
                    self._rescan()
                    self._last_rescan = now
                    self._next_rescan = now + (self._rescan_interval if watching else self._interval)
                    self._prev_due = min(self._prev_due, now)
                node = self._live_node()
                if node and now >= self._state.store_retry_at:
                    self._state.run(self._current_jobs(node, final=False), None)
                if now >= self._prev_due:
                    self._prev_pass()
                errors = 0
            except Exception:
                # Never let a bug or an odd file end log shipping for good.
                errors += 1
                logger.exception("log shipper loop error")
            wake_at = self._next_wake(node is not None) if not errors else now + backoff(errors)
            self._wake.wait(max(0.05, wake_at - time.monotonic()))

    def _next_wake(self, node_known: bool) -> float:
        now = time.monotonic()
        wake = min(now + self._session_check, self._next_rescan, self._prev_due)
        if not node_known:
            return wake  # dirty files wait for the node id, which each tick asks for
        return min(wake, self._state.next_due(now))

    def _live_node(self) -> str | None:
        """The node id to file logs under, or None while unknown."""
        try:
            if self._node_for_session is not None:
                session = self._session_dir.name if self._session_dir is not None else None
                node = self._node_for_session(session) if session is not None else None
            else:
                node = self._node_id()
            return validate_node_id(node) if node else None
        except Exception as exc:  # InvalidKeyError, or a failing callable
            self._warn_once("node", f"no usable node id yet: {exc}")
            return None

    # -------------------------------------------------------------- sessions
    def _check_session(self) -> None:
        resolved = resolve_session_latest(self._tmp_root)
        if resolved is not None and (self._session_dir is None or resolved.name != self._session_dir.name):
            old = self._session_dir
            self._watcher.stop()
            self._session_dir = resolved
            self._state.new_session()
            self._rejected.clear()
            logger.info("shipping logs of session %s%s", resolved.name, f" (previous: {old.name})" if old else "")
            self._next_rescan = 0.0  # rescan the new session now
            self._prev_due = 0.0  # move the old one into prev-logs and ship it
        if self._session_dir is not None:
            self._announce_all([self._session_dir.name])
            if self._watcher.rewatch.is_set() and not self._stopping.is_set():
                self._watcher.rewatch.clear()
                self._watcher.stop()  # watched again below, with the new directories
            if not self._stopping.is_set() and self._watcher.ensure(self._session_dir / "logs", self._anchor()):
                self._next_rescan = 0.0  # catch up on what changed while nothing watched

    def _anchor(self) -> Path:
        """Where no-link-followed walks start: Ray's temp root when the session lies
        directly in it (as Ray makes it), else the session directory itself."""
        session = self._session_dir
        return self._tmp_root if session is None or session.parent == self._tmp_root else session

    def _announce_all(self, sessions: list[str]) -> None:
        for session in sessions:
            if self._on_session is None or session in self._announced or time.monotonic() < self._announce_retry_at:
                continue
            try:
                self._on_session(session)
            except Exception as exc:
                # A marker failure must not hold back the logs (a weakness of KubeRay's Go collector).
                self._announce_retry_at = time.monotonic() + 5 * BACKOFF_BASE
                logger.warning("session callback for %s failed, will retry: %s", session, exc)
                continue
            self._announced.add(session)

    # ----------------------------------------------------- current session
    def _rescan(self) -> None:
        """Mark every file of the current session dirty; unchanged ones are
        dropped cheaply when they come due."""
        if self._session_dir is None:
            return
        found = {f.path for f in iter_log_files(self._session_dir / "logs", self._anchor())}
        self._state.mark_dirty(found)
        self._state.keep_only(found)

    def _current_jobs(self, node: str, *, final: bool) -> list[UploadJob]:
        """Dirty files that are due (every changed file when ``final``)."""
        if self._session_dir is None:
            return []
        if final:
            self._rescan()
        logs_dir = self._session_dir / "logs"
        now = time.monotonic()
        jobs: list[UploadJob] = []
        for path in self._state.dirty():
            if not final and self._state.waits(path, now):
                continue
            self._state.unmark(path)  # an event during the upload marks it again
            job = self._live_job(path, logs_dir, self._session_dir.name, node)
            if job is not None:
                jobs.append(job)
        return jobs

    def _live_job(self, path: Path, logs_dir: Path, session: str, node: str) -> UploadJob | None:
        relpath = relpath_of(path, logs_dir)
        if relpath is None:
            return None  # an event from elsewhere
        anchor = self._anchor()
        try:
            # Every component from the anchor, none a link: a file inside a linked
            # directory is not one of Ray's logs.
            st = lstat_below(anchor, path)
        except UnsafePathError:
            return None
        except OSError:
            self._state.forget(path)
            return None
        if not stat.S_ISREG(st.st_mode):
            return None  # a directory, symlink, socket
        item = LogFile.from_stat(path, relpath, st, anchor)
        key = self._key_for(session, node, item)
        if key is None or self._state.shipped.get(key) == item.version:
            return None
        return UploadJob(item, key, live=True)

    def _key_for(self, session: str, node: str, item: LogFile) -> str | None:
        try:
            return self._layout.log_key(self._cluster, session, node, item.relpath)
        except InvalidKeyError as exc:
            if item.path not in self._rejected:
                self._rejected.add(item.path)
                self.skipped_invalid += 1
                self._metrics.log_files_skipped.inc()
                logger.debug("not shipping %s: %s", item.path, exc)
            return None

    # ------------------------------------------------------------ prev-logs
    def _plan_prev(self) -> PrevPlan:
        return plan_prev_logs(
            self._tmp_root,
            self._session_dir,
            fallback_node=self._live_node,
            key_for=self._key_for,
            shipped=self._state.shipped,
            warn=self._warn_once,
        )

    def _prev_pass(self) -> None:
        plan = self._plan_prev()
        self._announce_all(plan.sessions)
        outcomes, left = self._state.run(plan.jobs, None)
        for prev in plan.dirs:
            prune_prev_logs_dir(prev, self._tmp_root / PREV_LOGS)
        if plan.complete and left == 0 and all(o.status == "shipped" for o in outcomes):
            self._prev_failures = 0
            self._prev_due = math.inf  # until the next rescan or session change
        else:
            self._prev_failures += 1
            self._prev_due = time.monotonic() + backoff(self._prev_failures)

    def _warn_once(self, tag: str, message: str) -> None:
        level = logging.DEBUG if tag in self._warned else logging.WARNING
        self._warned.add(tag)
        logger.log(level, "%s", message)

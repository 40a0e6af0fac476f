"""Per-file state of log shipping, and the uploads that change it.

:class:`UploadState` is what :class:`~runtime.collector.logs.LogShipper` remembers
between passes: which files are dirty, when each current-session file may be
uploaded next (at most every ``upload_interval``, longer for files whose upload is
slow), which content is already stored, and the back-off of storage as a whole.
:meth:`UploadState.run` uploads a batch of :class:`UploadJob` on a thread pool
(streamed; prev-logs files deleted once stored) and records the outcomes.

The dirty marks may come from any thread (the watcher adds to them); everything
else is used by one thread at a time (the shipper's loop thread, then ``stop()``).
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
import threading
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from runtime.collector.log_files import FileVersion, UnsafePathError, open_log_file, unlink_if_unchanged
from runtime.collector.logs_prev import UploadJob
from runtime.collector.metrics import CollectorMetrics
from runtime.storage.base import ObjectStore
from runtime.storage.errors import StorageUnavailableError

logger = logging.getLogger(__name__)

BACKOFF_BASE = 1.0
BACKOFF_CAP = 60.0
#: A file is re-uploaded whole, so a big one waits at least this many times as
#: long as its last upload took: one huge busy log cannot hog the uploads ...
UPLOAD_GAP_FACTOR = 2.0
#: ... but on slow storage it is never left stale for longer than this.
MAX_UPLOAD_GAP = 600.0
#: Uploads submitted to the pool at most at once (the rest wait their turn in the list).
IN_FLIGHT = 256


def backoff(failures: int) -> float:
    return min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** max(0, failures - 1))


@dataclass
class Schedule:
    """When a current-session file may be uploaded next."""

    last_upload: float = -math.inf
    gap: float = 0.0  # min seconds between two uploads of this file
    failures: int = 0
    retry_at: float = 0.0

    def due(self) -> float:
        return max(self.retry_at, self.last_upload + self.gap)


@dataclass(frozen=True)
class Outcome:
    job: UploadJob
    # shipped | vanished | changed | skipped | failed | refused (a link on the way) |
    # replaced (another regular file in its place since it was listed: a rotated log)
    status: str
    started: float = 0.0
    error: BaseException | None = None
    uploaded: bool = False
    seconds: float = 0.0


class UploadState:
    """Dirty marks, per-file schedules, stored content and storage back-off, plus
    the pool that runs the uploads."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        metrics: CollectorMetrics,
        upload_interval: float,
        stopping: threading.Event,
        workers: int,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._interval = upload_interval
        self._stopping = stopping
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-upload")
        self._lock = threading.Lock()  # guards _dirty: the watcher thread adds to it
        self._dirty: set[Path] = set()
        self._schedule: dict[Path, Schedule] = {}
        self.shipped: dict[str, FileVersion] = {}  # key -> version of the file stored there
        self.store_retry_at = 0.0
        self._store_failures = 0
        self.files_shipped = 0
        self.bytes_shipped = 0

    # ----------------------------------------------------------- dirty marks
    def mark_dirty(self, paths: Iterable[Path]) -> bool:
        """Mark ``paths`` dirty (from any thread); True when that added any."""
        with self._lock:
            before = len(self._dirty)
            self._dirty.update(paths)
            return len(self._dirty) > before

    def unmark(self, path: Path) -> None:
        with self._lock:
            self._dirty.discard(path)  # an event during the upload marks it again

    def dirty(self) -> list[Path]:
        with self._lock:
            return list(self._dirty)

    def new_session(self) -> None:
        """Forget every file of the previous session."""
        with self._lock:
            self._dirty.clear()
        self._schedule.clear()

    # ------------------------------------------------------------- schedules
    def waits(self, path: Path, now: float) -> bool:
        """Whether a scheduled file is not due yet (an unscheduled one is due)."""
        sched = self._schedule.get(path)
        return sched is not None and now < sched.due()

    def next_due(self, now: float) -> float:
        """When the earliest dirty file may be uploaded (inf when none is dirty)."""
        due = math.inf
        for path in self.dirty():
            sched = self._schedule.get(path)
            due = min(due, now if sched is None else sched.due())
        return max(due, self.store_retry_at)

    def forget(self, path: Path) -> None:
        self._schedule.pop(path, None)

    def keep_only(self, found: set[Path]) -> None:
        """Drop the schedules of files that no longer exist."""
        for gone in set(self._schedule) - found:
            del self._schedule[gone]

    # --------------------------------------------------------------- uploads
    def run(self, jobs: list[UploadJob], deadline: float | None) -> tuple[list[Outcome], int]:
        """Run jobs on the pool; with a deadline, stop waiting when it passes.
        Returns the outcomes and how many jobs were not done."""
        outcomes: list[Outcome] = []
        # A sliding window of IN_FLIGHT futures (the next job goes in as one finishes):
        # one future per file of a node with tens of thousands of logs held ~1 KiB each
        # at once, past the sidecar's memory limit.
        queued = iter(jobs)
        running: set[Future[Outcome]] = set()
        for job in itertools.islice(queued, IN_FLIGHT):
            running.add(self._pool.submit(self._execute, job, deadline))
        while running:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, running = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
            if not done:  # the deadline passed
                break
            outcomes.extend(f.result() for f in done)
            for job in itertools.islice(queued, len(done)):
                running.add(self._pool.submit(self._execute, job, deadline))
        for future in running:
            future.cancel()
        not_done = len(running) + sum(1 for _ in queued)
        self._apply(outcomes)
        return outcomes, not_done + sum(o.status == "skipped" for o in outcomes)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _execute(self, job: UploadJob, deadline: float | None) -> Outcome:
        """One upload, then for prev-logs the delete. Runs on the pool."""
        now = time.monotonic()
        if deadline is None and (self._stopping.is_set() or now < self.store_retry_at):
            return Outcome(job, "skipped")  # stop() or the storage back-off takes over
        if deadline is not None and now >= deadline:
            return Outcome(job, "skipped")
        seconds = 0.0
        if job.upload:
            try:
                # What is sent is read from the descriptor that was checked (#14 item 1).
                with open_log_file(job.file) as fh:
                    self._store.put_open_file(job.key, fh)  # streamed, up to the size at open
            except FileNotFoundError:
                return Outcome(job, "vanished", now)
            except UnsafePathError as exc:
                if exc.errno == errno.ESTALE:
                    return Outcome(job, "replaced", now)  # listed afresh, then shipped, next pass
                logger.warning("not shipping %s: %s", job.file.path, exc.strerror)
                return Outcome(job, "refused", now)
            except Exception as exc:
                return Outcome(job, "failed", now, exc)
            finally:
                seconds = time.monotonic() - now
                self._metrics.upload_seconds.labels(what="log").observe(seconds)
        if job.delete_after:
            try:
                if not unlink_if_unchanged(job.file):
                    return Outcome(job, "changed", now, uploaded=job.upload)  # ship again, then delete
            except FileNotFoundError:
                pass
            except OSError as exc:
                logger.debug("shipped %s but cannot delete it: %s", job.file.path, exc)
        return Outcome(job, "shipped", now, uploaded=job.upload, seconds=seconds)

    def _apply(self, outcomes: list[Outcome]) -> None:
        """Record outcomes, on the thread that submitted the jobs."""
        now = time.monotonic()
        errors = [o.error for o in outcomes if o.error is not None]
        for outcome in outcomes:
            self._apply_one(outcome, now)
        if any(isinstance(e, StorageUnavailableError) for e in errors):
            # Storage is unreachable: back off as a whole, not file by file.
            self._store_failures += 1
            self.store_retry_at = now + backoff(self._store_failures)
        elif any(o.uploaded for o in outcomes):
            self._store_failures = 0
        if errors:
            logger.warning(
                "%d of %d log uploads failed, retrying with back-off; last error: %s",
                len(errors),
                len(outcomes),
                errors[-1],
            )

    def _apply_one(self, outcome: Outcome, now: float) -> None:
        job, path = outcome.job, outcome.job.file.path
        if outcome.uploaded:
            self.files_shipped += 1
            self.bytes_shipped += job.file.size
            self._metrics.log_files_shipped.inc()
            self._metrics.log_bytes_shipped.inc(job.file.size)
        if outcome.error is not None:
            self._metrics.upload_failures.labels(what="log", kind=type(outcome.error).__name__).inc()
        if outcome.status == "shipped":
            if job.delete_after and not path.exists():
                self.shipped.pop(job.key, None)  # nothing local left to compare with
            else:
                # The version seen *before* the upload: bytes appended during it
                # make the file differ, so they are shipped next time.
                self.shipped[job.key] = job.file.version
            if job.live:
                gap = max(self._interval, min(MAX_UPLOAD_GAP, UPLOAD_GAP_FACTOR * outcome.seconds))
                self._schedule[path] = Schedule(last_upload=outcome.started, gap=gap)
        elif outcome.status == "replaced":
            self._schedule.pop(path, None)  # the file now there is new: due at once
            if job.live:
                with self._lock:
                    self._dirty.add(path)
        elif outcome.status in ("vanished", "refused"):
            self._schedule.pop(path, None)
            if outcome.status == "refused":
                self._metrics.log_files_skipped.inc()
        elif job.live:  # failed or skipped: keep it dirty
            with self._lock:
                self._dirty.add(path)
            if outcome.status == "failed":
                sched = self._schedule.setdefault(path, Schedule())
                sched.failures += 1
                sched.retry_at = now + backoff(sched.failures)

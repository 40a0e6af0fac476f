"""Index builds run in background threads, one per index path in this process.

A request that needs an index starts the build (or joins the one running) and
waits for it only as long as it is willing to (``--build-wait``); the build goes on
without it. A failed build's error is kept for ``retry_seconds`` and answered to
every request in that window, so a broken session is not rebuilt on every request.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from runtime.server.index.progress import ELSEWHERE, BuildProgress, ProgressFile, read_progress

logger = logging.getLogger(__name__)

#: The nice value of a build started ahead of any request (its processes inherit it).
AHEAD_NICE = 10


def lower_priority() -> None:
    """Run this thread (and the processes it starts) at ``AHEAD_NICE``: CPU goes to
    requests and to the builds users wait for first, and to this one when idle."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), AHEAD_NICE)  # per thread on Linux
    except OSError as exc:
        logger.debug("cannot lower the priority of an index-ahead build: %s", exc)


class BuildJob:
    """One build of one index: its progress, then its outcome."""

    def __init__(self, index: Path) -> None:
        self.index = index
        self.progress = ProgressFile(index)
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.finished_at = 0.0  # monotonic
        #: A request waits for this build: even one started ahead then keeps its index
        #: like a request's build does (:meth:`IndexCache._ensure_locked`).
        self.requested = False
        self._elsewhere = False

    def waiting_elsewhere(self) -> None:
        """Another process holds the build lock: its progress file tells how far it is."""
        self._elsewhere = True

    def building_here(self) -> None:
        self._elsewhere = False
        self.progress.publish()

    def current(self) -> BuildProgress:
        if self._elsewhere:
            return read_progress(self.index) or BuildProgress(ELSEWHERE)
        return self.progress.current()


class BuildJobs:
    """The builds of one :class:`~runtime.server.index.cache.IndexCache`."""

    def __init__(self, retry_seconds: float, on_start: Callable[[], None], on_end: Callable[[], None]) -> None:
        self.retry_seconds = retry_seconds
        self._on_start, self._on_end = on_start, on_end
        self._guard = threading.Lock()
        self._jobs: dict[str, BuildJob] = {}  # running, or failed and not yet due for a retry

    def __len__(self) -> int:
        with self._guard:
            return len(self._jobs)

    def start_or_join(self, index: Path, run: Callable[[BuildJob], None]) -> tuple[BuildJob, bool]:
        """The running (or recently failed) build of ``index``, else a new one running
        ``run``; and whether it is new."""
        key = str(index)
        now = time.monotonic()
        with self._guard:
            self._forget_failures(now)
            job = self._jobs.get(key)
            if job is not None:
                return job, False
            job = self._jobs[key] = BuildJob(index)
        thread = threading.Thread(target=self._run, args=(key, job, run), name=f"index-build-{index.stem[:12]}")
        thread.daemon = True  # a worker shutting down does not wait for a build (its child exits with it)
        self._on_start()
        try:
            thread.start()
        except BaseException as exc:  # no thread to run it: the waiters get the error
            self._finish(key, job, exc)
            raise
        return job, True

    def _run(self, key: str, job: BuildJob, run: Callable[[BuildJob], None]) -> None:
        error: BaseException | None = None
        try:
            run(job)
        except BaseException as exc:  # handed to the requests, which answer it
            error = exc
        self._finish(key, job, error)

    def _finish(self, key: str, job: BuildJob, error: BaseException | None) -> None:
        job.error, job.finished_at = error, time.monotonic()
        with self._guard:
            if error is None and self._jobs.get(key) is job:
                del self._jobs[key]  # the index is on disk: later requests find it there
        job.done.set()
        self._on_end()

    def _forget_failures(self, now: float) -> None:
        due = [
            key for key, job in self._jobs.items() if job.done.is_set() and now - job.finished_at >= self.retry_seconds
        ]
        for key in due:
            del self._jobs[key]

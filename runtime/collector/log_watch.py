"""The watcher side of log shipping: one ``watchfiles`` thread over a session's
real log directories that hands changed paths to the shipper's loop.

Non-recursive watches on each real directory: a recursive one (notify's walk)
would follow a linked directory and report what changes there (#14 item 1). A new
directory seen by the watcher sets :attr:`LogWatcher.rewatch`; the loop then
restarts the watcher with it. When watching fails (e.g. inotify limits) the loop's
rescans take over and a new watcher is tried after ``retry_after`` seconds.
"""

from __future__ import annotations

import logging
import math
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import watchfiles

from runtime.collector.log_files import is_real_dir, log_dirs, lstat_below

logger = logging.getLogger(__name__)

#: How often the Rust side of watchfiles wakes to check its stop event, and how
#: long it waits for more changes before yielding a batch. The default (50 ms)
#: costs 4x the idle CPU; a stop latency of 0.5 s is fine.
WATCH_STEP_MS = 500
WATCH_TIMEOUT_MS = 5_000


class LogWatcher:
    """Starts, restarts and stops the watcher thread of one ``logs`` tree."""

    def __init__(
        self,
        *,
        on_changes: Callable[[Iterable[Path]], bool],
        wake: threading.Event,
        upload_interval: float,
        retry_after: float,
    ) -> None:
        self._on_changes = on_changes  # True when that made work: the loop is woken
        self._wake = wake
        self._interval = upload_interval
        self._retry_after = retry_after
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # ensure() (the shipper's loop) and stop() (the shutdown) run on different threads:
        # stop must never see a watcher made but not yet started (join would raise).
        self._lock = threading.Lock()
        self._failed_at = -math.inf
        self._watched: frozenset[Path] = frozenset()  # the real directories being watched
        self.rewatch = threading.Event()  # the watcher saw a new directory

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def ensure(self, logs_dir: Path, anchor: Path) -> bool:
        """Watch ``logs_dir`` (reached from ``anchor`` with no link followed) unless
        already watching or in the back-off after a failure. True when a watcher was
        started: what changed while nothing watched needs a rescan."""
        if self.alive or time.monotonic() < self._failed_at + self._retry_after:
            return False
        try:
            if not stat.S_ISDIR(lstat_below(anchor, logs_dir).st_mode):
                return False  # Ray has not created it yet; the next tick looks again
        except OSError:
            return False  # not there yet, or a link: never watched
        dirs = log_dirs(logs_dir, anchor)
        stop_event = threading.Event()
        thread = threading.Thread(target=self._watch, args=(dirs, stop_event), name="log-watch", daemon=True)
        with self._lock:
            self._watched = frozenset(dirs)
            self._stop, self._thread = stop_event, thread
            thread.start()
        return True

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=4 * WATCH_STEP_MS / 1000)

    def _watch(self, dirs: list[Path], stop_event: threading.Event) -> None:
        logs_dir = dirs[0]
        try:
            for changes in watchfiles.watch(
                *dirs,
                watch_filter=None,  # the default filter drops names such as *.swp and *~
                stop_event=stop_event,
                recursive=False,
                step=WATCH_STEP_MS,
                rust_timeout=WATCH_TIMEOUT_MS,
                yield_on_timeout=True,
                raise_interrupt=False,
                ignore_permission_denied=True,
                poll_delay_ms=max(1000, int(self._interval * 500)),  # if notify must poll, poll rarely
            ):
                if stop_event.is_set():
                    return
                paths = [Path(raw) for _change, raw in changes]
                if any(path not in self._watched and is_real_dir(path) for path in paths):
                    self.rewatch.set()  # a new directory: watch it too (its files come by the rescan)
                    self._wake.set()
                if paths and self._on_changes(paths):
                    self._wake.set()
            problem: object = "the watcher ended"
        except Exception as exc:  # e.g. inotify limits
            problem = exc
        if not stop_event.is_set():
            # Rescans every upload interval take over; a new watcher is tried later.
            self._failed_at = time.monotonic()
            logger.warning("watching %s failed, rescanning every %.0fs instead: %s", logs_dir, self._interval, problem)
            self._wake.set()

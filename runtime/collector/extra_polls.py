"""Polls of the head's dashboard asked for besides the periodic ones.

A job's final status (SUCCEEDED, FAILED with its message) exists only in Ray's
``/api/jobs/``, and KubeRay may delete a RayJob's cluster seconds after the job
ends (``shutdownAfterJobFinishes``, ``ttlSecondsAfterFinished: 0``): waiting for the
next periodic poll (30 s by default) would store the job as still RUNNING. So when
the head's aggregator reports a driver job FINISHED, the recorder polls again shortly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

#: Seconds after a job ends at which the dashboard is polled (Ray's job supervisor
#: writes the final status right after the entrypoint exits, around the same moment).
JOB_END_POLL_DELAYS = (1.0, 5.0, 15.0)
#: Bound on pending polls: a flood of job-end events must not grow a list forever.
MAX_PENDING = 16


class ExtraPolls:
    """Thread-safe: :meth:`add` runs on the event receiver's threads, the rest on the
    recorder's thread."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._due: list[float] = []

    def add(self, delays: Iterable[float] = JOB_END_POLL_DELAYS) -> None:
        now = self._clock()
        with self._lock:
            self._due = sorted({*self._due, *(now + delay for delay in delays)})[:MAX_PENDING]

    def take_due(self) -> bool:
        """True (and forgotten) when at least one asked-for poll is due now."""
        now = self._clock()
        with self._lock:
            due = [at for at in self._due if at <= now]
            if not due:
                return False
            self._due = [at for at in self._due if at > now]
            return True

    def next_at(self) -> float | None:
        with self._lock:
            return self._due[0] if self._due else None

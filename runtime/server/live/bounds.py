"""Bounds on proxied live requests that are not log streams (those are :mod:`.streams`').

* :class:`Deadlines`: a total deadline per request, not only a per-read timeout. A
  head (tenant code) that trickles a byte every few seconds never trips a read
  timeout, yet would hold a gunicorn thread for as long as it likes. One thread per
  worker shuts the upstream socket down when a request's time is up, which ends the
  blocking read in the request thread (headers or body alike).
* :func:`track_connections`: which pooled connection the current thread's request
  uses, so the deadline reaches its socket while requests still waits for the headers.
* :class:`ClusterSlots`: at most ``limit`` such requests per cluster at once (per
  worker), so one slow head cannot hold every thread; over it the proxy answers 503
  with ``Retry-After``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import requests
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from runtime.server.live.streams import shutdown_quietly

logger = logging.getLogger(__name__)

_tracking = threading.local()


class Watch:
    """One upstream request under a deadline: the connection it runs on (from when the pool
    hands it out until it goes back) and whether its time ran out.

    urllib3 puts a connection back in the pool as soon as its body has been read, before
    the relay ends and the deadline is disarmed; from then on another request may be using
    it. So a returned connection is forgotten first (:meth:`released`), under the same lock
    as :meth:`expire`, which shuts only a socket this request still holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.conn: Any = None
        self.expired = False
        #: The time ran out before the answer was all read (its connection still held, or
        #: none yet): the answer is cut short. Expiring after that changes nothing upstream.
        self.cut = False
        self._answered = False

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            self.cut = not self._answered
            shutdown_quietly(getattr(self.conn, "sock", None))

    def held(self, conn: Any) -> None:
        """The pool handed ``conn`` to this request (shut at once if its time is up)."""
        with self._lock:
            self.conn = conn
            if self.expired:
                shutdown_quietly(getattr(conn, "sock", None))

    def released(self, conn: Any) -> None:
        """``conn`` goes back to the pool: no longer this request's to shut."""
        with self._lock:
            if self.conn is conn:
                self.conn = None
                self._answered = True  # urllib3 returns a connection once the body is read

    def __enter__(self) -> Watch:
        _tracking.watch = self
        return self

    def __exit__(self, *exc: object) -> None:
        _tracking.watch = None


_WATCH_ATTR = "_ray_history_watch"


def _track(conn: Any) -> Any:
    watch: Watch | None = getattr(_tracking, "watch", None)
    if watch is not None:
        # On the connection: it may go back to the pool from whichever thread reads the end.
        setattr(conn, _WATCH_ATTR, watch)
        watch.held(conn)
    return conn


def _untrack(conn: Any) -> None:
    watch: Watch | None = getattr(conn, _WATCH_ATTR, None)
    if watch is not None:
        setattr(conn, _WATCH_ATTR, None)
        watch.released(conn)


class _TrackedHTTPPool(HTTPConnectionPool):
    def _get_conn(self, timeout: float | None = None) -> Any:
        return _track(super()._get_conn(timeout))

    def _put_conn(self, conn: Any) -> None:
        _untrack(conn)  # before another request can take it from the pool
        super()._put_conn(conn)


class _TrackedHTTPSPool(HTTPSConnectionPool):
    def _get_conn(self, timeout: float | None = None) -> Any:
        return _track(super()._get_conn(timeout))

    def _put_conn(self, conn: Any) -> None:
        _untrack(conn)
        super()._put_conn(conn)


def track_connections(session: requests.Session) -> None:
    """Make ``session``'s pools report their connections to the current :class:`Watch`
    (call before its first request: pools made earlier keep their class)."""
    for adapter in session.adapters.values():
        manager = getattr(adapter, "poolmanager", None)
        if manager is not None:
            manager.pool_classes_by_scheme = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}


class Deadlines:
    """Calls each armed callback once at its time, unless disarmed first.

    The callback runs under the lock :meth:`disarm` takes too: once ``disarm`` returns
    the callback has either run or never will (as :class:`.streams.DisconnectWatcher`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._heap: list[tuple[float, int]] = []
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._handles = itertools.count(1)
        self._thread: threading.Thread | None = None

    def arm(self, at: float, callback: Callable[[], None]) -> int:
        """Call ``callback`` at ``at`` (``time.monotonic()``); returns a handle for :meth:`disarm`."""
        with self._wake:
            handle = next(self._handles)
            self._callbacks[handle] = callback
            heapq.heappush(self._heap, (at, handle))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="proxy-deadlines", daemon=True)
                self._thread.start()
            self._wake.notify()
        return handle

    def disarm(self, handle: int | None) -> None:
        if handle is None:
            return
        with self._lock:
            self._callbacks.pop(handle, None)  # its heap entry is skipped when due

    def __len__(self) -> int:
        with self._lock:
            return len(self._callbacks)

    def _run(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, handle = heapq.heappop(self._heap)
                    callback = self._callbacks.pop(handle, None)
                    if callback is None:
                        continue
                    try:
                        callback()
                    except Exception:  # one broken callback must not stop the others
                        logger.exception("proxy deadline callback failed")
                self._wake.wait(self._heap[0][0] - now if self._heap else None)


class ClusterSlots:
    """A non-blocking counting semaphore per cluster (``namespace/name``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._in_use: dict[str, int] = {}

    def try_acquire(self, key: str) -> bool:
        with self._lock:
            used = self._in_use.get(key, 0)
            if used >= self.limit:
                return False
            self._in_use[key] = used + 1
            return True

    def release(self, key: str) -> None:
        with self._lock:
            used = self._in_use.get(key, 0) - 1
            if used > 0:
                self._in_use[key] = used
            else:
                self._in_use.pop(key, None)

    def in_use(self, key: str) -> int:
        with self._lock:
            return self._in_use.get(key, 0)

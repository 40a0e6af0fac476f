"""Bounds on proxied live log streams, which can run for as long as a log grows.

* :class:`StreamSlots`: at most ``--max-live-streams`` streams per worker (default
  half of ``--threads``), so streams never hold every thread: probes and the
  Dashboard's other requests keep the rest. Over the cap: 503 with Retry-After.
* :class:`DisconnectWatcher`: a quiet stream (a log with no new lines) sends
  nothing, so a client that left is never noticed by writing to it. One thread
  per worker waits (epoll, ``EPOLLRDHUP``) for the clients of running streams to
  hang up and then shuts the upstream socket down, which ends the blocking read
  in the request thread and frees it.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

_HANGUP = getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0) | getattr(select, "EPOLLERR", 0)


class StreamSlots:
    """A non-blocking counting semaphore with a readable count (for metrics and tests)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self.in_use = 0

    def try_acquire(self) -> bool:
        with self._lock:
            if self.in_use >= self.limit:
                return False
            self.in_use += 1
            return True

    def release(self) -> None:
        with self._lock:
            self.in_use = max(0, self.in_use - 1)


class DisconnectWatcher:
    """Calls ``on_gone`` once when a watched client socket is hung up.

    The callback runs under the watcher's lock, and :meth:`unwatch` takes it too:
    once ``unwatch`` returns the callback has either run or never will, so the
    caller can decide safely whether the upstream connection may be reused.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._epoll: select.epoll | None = None
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return hasattr(select, "epoll") and _HANGUP != 0

    def watch(self, client: socket.socket, on_gone: Callable[[], None]) -> int | None:
        """Start watching; returns a handle for :meth:`unwatch` (None: cannot watch)."""
        if not self.available:
            return None
        try:
            fd = client.fileno()
        except OSError:
            return None
        with self._lock:
            if self._epoll is None:
                self._epoll = select.epoll()
                self._thread = threading.Thread(
                    target=self._run, args=(self._epoll,), name="stream-disconnects", daemon=True
                )
                self._thread.start()
            try:
                self._epoll.register(fd, _HANGUP)
            except OSError as exc:  # already closed, or watched twice
                logger.debug("cannot watch client socket %d: %s", fd, exc)
                return None
            self._callbacks[fd] = on_gone
        return fd

    def unwatch(self, fd: int | None) -> None:
        if fd is None:
            return
        with self._lock:
            if self._callbacks.pop(fd, None) is not None and self._epoll is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(fd)

    def __len__(self) -> int:
        with self._lock:
            return len(self._callbacks)

    def _run(self, epoll: select.epoll) -> None:
        while True:
            try:
                events = epoll.poll(1.0)
            except InterruptedError:
                continue
            for fd, _mask in events:
                with self._lock:
                    callback = self._callbacks.pop(fd, None)
                    if callback is None:
                        continue
                    with contextlib.suppress(OSError, ValueError):
                        epoll.unregister(fd)
                    try:
                        callback()
                    except Exception:  # one broken callback must not stop the watcher
                        logger.exception("stream disconnect callback failed")


def shutdown_quietly(sock: socket.socket | None) -> None:
    """Wake up a thread blocked reading ``sock`` (it then reads end-of-file)."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)

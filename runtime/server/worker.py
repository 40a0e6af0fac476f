"""gunicorn's gthread worker, made to withstand slow clients (slowloris).

Stock gthread hands a connection to a thread as soon as its first byte arrives;
the thread then reads the rest of the request head blocking, with no deadline, so
8 connections that send half a request line hold all 8 threads (``/livez``
included) for as long as they stay open. Here the *main loop* collects the head
without blocking (the poller it already runs), and a connection reaches a thread
only once its head is complete:

* ``HEADER_TIMEOUT`` from the first byte (for a new connection: from accept) to
  the end of the head; past it the client gets ``408`` and is closed. A slow
  client then costs one file descriptor (at most ``worker_connections``, 1000,
  per worker), never a thread.
* ``MAX_HEAD_BYTES`` for the head (request line and headers); more is ``431``.
* ``IO_TIMEOUT`` for every read of a body and write of an answer once a thread
  serves the request (a stalled upload, a client that stops reading): the
  connection is closed and the thread freed.
* The closing linger (RFC 9112 §9.6: drain what the client still sends before
  closing, for up to 2 s) is one more poller entry, not a blocking wait: gunicorn
  27 lingers in its main loop, so a client that never closes its end stalled
  every other connection for 2 s.

It relies on the structure of gunicorn 27's gthread (``enqueue_req``,
``murder_pending``, ``TConn.data_ready``); ``tests/integration/server`` runs it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import selectors
import socket
import time
from functools import partial
from typing import Any

import orjson
from gunicorn import util  # type: ignore[import-untyped]
from gunicorn.workers.gthread import TConn  # type: ignore[import-untyped]
from gunicorn.workers.gthread import ThreadWorker as _GThreadWorker

logger = logging.getLogger(__name__)

#: Seconds for a complete request head (nginx's client_header_timeout is 60 s; a
#: real client sends its head in one packet, an Ingress forwards it at once).
HEADER_TIMEOUT = 10.0
#: Seconds without progress reading a body or writing an answer.
IO_TIMEOUT = 60.0
#: A request head larger than this is refused (nginx's default allows 32 KiB).
MAX_HEAD_BYTES = 64 * 1024
#: Like gunicorn's own graceful close: how long the closing linger may take.
LINGER_SECONDS = 2.0
LINGER_MAX_BYTES = 64 * 1024
_END_OF_HEAD = b"\r\n\r\n"


class _Conn(TConn):  # type: ignore[misc]
    """A connection that knows its worker, so a graceful close can linger there."""

    worker: HeadFirstThreadWorker | None = None
    head: bytearray | None = None
    head_deadline = 0.0
    linger_deadline = 0.0
    drained = 0

    def close(self, graceful: bool = False) -> None:
        if graceful and self.worker is not None:
            self.worker.linger(self)
        else:
            super().close(graceful)


def _answer(status: str, msg: str) -> bytes:
    body = orjson.dumps({"result": False, "msg": msg})
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class HeadFirstThreadWorker(_GThreadWorker):  # type: ignore[misc]
    """gthread that gives a thread only connections with a complete request head."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gathering: collections.deque[_Conn] = collections.deque()  # in deadline order
        self.lingering: collections.deque[_Conn] = collections.deque()  # in deadline order

    # ------------------------------------------------------------ main loop side
    def enqueue_req(self, conn: Any) -> None:
        if not isinstance(conn, _Conn):
            conn.__class__ = _Conn  # accept() builds plain TConns
            conn.worker = self
        if conn.head is None:
            conn.head = bytearray()
            conn.head_deadline = time.monotonic() + HEADER_TIMEOUT
            if not self._head_complete(conn):
                conn.sock.setblocking(False)
                self.gathering.append(conn)
                self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_head_readable, conn))
                return
        super().enqueue_req(conn)

    def _head_complete(self, conn: _Conn) -> bool:
        buffered = conn.parser.unreader.buf.getvalue() if conn.parser is not None else b""
        return _END_OF_HEAD in buffered + bytes(conn.head or b"")

    def _on_head_readable(self, conn: _Conn, _sock: Any) -> None:
        data = _recv_ready(conn.sock)
        if data is None:
            return
        if not data or conn.head is None:  # the client gave up
            self._stop_gathering(conn)
            self._drop(conn)
            return
        conn.head += data
        if len(conn.head) > MAX_HEAD_BYTES and not self._head_complete(conn):
            self._stop_gathering(conn)
            self._refuse(conn, "431 Request Header Fields Too Large", f"request head over {MAX_HEAD_BYTES} bytes")
        elif self._head_complete(conn):
            self._stop_gathering(conn)
            super().enqueue_req(conn)

    def _stop_gathering(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        with contextlib.suppress(ValueError):
            self.gathering.remove(conn)

    def _drop(self, conn: _Conn) -> None:
        self.nr_conns -= 1
        util.close(conn.sock)

    def _refuse(self, conn: _Conn, status: str, msg: str) -> None:
        with contextlib.suppress(OSError):
            conn.sock.send(_answer(status, msg))  # non-blocking: best effort
        self._drop(conn)

    def linger(self, conn: _Conn) -> None:
        """Close after the client's FIN, what it still sends drained, by the poller."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
        except OSError:
            util.close(conn.sock)
            return
        if len(self.lingering) >= self.worker_connections:
            util.close(conn.sock)  # under a flood: skip the courtesy
            return
        conn.linger_deadline = time.monotonic() + LINGER_SECONDS
        conn.drained = 0
        self.lingering.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_linger_readable, conn))

    def _on_linger_readable(self, conn: _Conn, _sock: Any) -> None:
        data = _recv_ready(conn.sock)
        if data is None:
            return
        conn.drained += len(data)
        if not data or conn.drained >= LINGER_MAX_BYTES:
            self._end_linger(conn)

    def _end_linger(self, conn: _Conn) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        with contextlib.suppress(ValueError):
            self.lingering.remove(conn)
        util.close(conn.sock)

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        while self.lingering and self.lingering[0].linger_deadline <= now:
            self._end_linger(self.lingering[0])
        while self.gathering and (self.gathering[0].head_deadline <= now or not self.alive):
            conn = self.gathering[0]
            self._stop_gathering(conn)
            self.log.info("closing a connection from %s: no request head within %gs", conn.client, HEADER_TIMEOUT)
            self._refuse(conn, "408 Request Timeout", f"request head not complete within {HEADER_TIMEOUT:g} s")

    # --------------------------------------------------------------- thread side
    def handle(self, conn: Any) -> Any:
        head = conn.head if isinstance(conn, _Conn) else None
        if head is not None:
            conn.head = None  # the next request on this connection is gathered anew
            conn.data_ready = True
            conn.sock.setblocking(True)
            conn.init()  # the parser of a new connection (kept-alive ones have theirs)
            if head:
                unreader = conn.parser.unreader
                unreader.unread(unreader.take_buffered() + bytes(head))
        return super().handle(conn)

    def handle_request(self, req: Any, conn: Any) -> Any:
        # setblocking(True) in handle() cleared any timeout: bodies and answers get one.
        conn.sock.settimeout(IO_TIMEOUT)
        try:
            return super().handle_request(req, conn)
        except TimeoutError:
            self.log.info("closing a connection from %s: no progress within %gs", conn.client, IO_TIMEOUT)
            return False


def _recv_ready(sock: Any) -> bytes | None:
    """What a readable socket holds: None for a spurious wake-up, ``b""`` for end or error."""
    try:
        data: bytes = sock.recv(65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""
    return data

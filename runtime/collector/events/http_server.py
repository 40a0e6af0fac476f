"""The events port's HTTP server: the standard library's threaded server with the
limits it lacks (issue #14, item 8).

``ThreadingHTTPServer`` starts one thread per connection and reads without any
timeout, so a client that sends half a request, or a body that stops midway, holds
a thread for as long as it keeps the socket open; enough of them exhaust memory and
threads. Here:

* every read of a request has a *total* deadline, not a per-``recv`` timeout (a
  client trickling one byte every few seconds would reset the latter forever): an
  idle keep-alive connection gets ``idle_timeout`` for its next request's first byte,
  the request line and headers ``header_timeout``, the body ``body_timeout``;
* at most ``max_connections`` connections are served at once. A few more
  (``spare_connections``) are served in a spare lane with a short header deadline
  that answers the probes (``/healthz``, ``/readyz``, ``/metrics``) and gives a POST
  503 with ``Retry-After``, so the kubelet still sees a live collector while it is
  saturated; beyond that, a canned 503 is written from the accept thread and the
  socket closed, without starting a thread.
"""

from __future__ import annotations

import io
import json
import logging
import math
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerLimits:
    """Connection and timing limits of the events port (flags in ``config.py``)."""

    max_connections: int = 32
    spare_connections: int = 4
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    #: Longer than aiohttp's client keep-alive (15 s), so Ray's agent closes an idle
    #: connection first and never races a request against our close.
    idle_timeout: float = 20.0
    #: The spare lane only answers probes and 503s: a short deadline frees it fast.
    spare_header_timeout: float = 2.0
    #: For writing a reply: a client that does not read cannot hold the thread.
    write_timeout: float = 10.0


class ReadDeadlineError(TimeoutError):
    """A read of the request did not finish before its deadline."""


class DeadlineReader(io.RawIOBase):
    """A socket reader whose every ``recv`` waits at most until ``deadline`` (a
    ``time.monotonic()`` value), so the deadline bounds the whole read."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline = math.inf

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise ReadDeadlineError("read deadline passed")
        self._sock.settimeout(remaining)
        try:
            return self._sock.recv_into(buffer)
        except TimeoutError as exc:
            raise ReadDeadlineError("read deadline passed") from exc


class LimitedHandler(BaseHTTPRequestHandler):
    """Request handler reading through a :class:`DeadlineReader`; the refusals
    http.server makes itself are JSON, as every other answer of the port."""

    protocol_version = "HTTP/1.1"
    # http.server answers a request line it cannot parse in this version; with its
    # default, HTTP/0.9, that answer had no status line and no headers at all.
    default_request_version = "HTTP/1.1"
    _reader: DeadlineReader
    _buffered: io.BufferedReader

    @property
    def limits(self) -> ServerLimits:
        return cast(BoundedHTTPServer, self.server).limits

    @property
    def spare_lane(self) -> bool:
        """Whether this connection is served in the spare lane (probes only)."""
        return cast(BoundedHTTPServer, self.server).in_spare_lane()

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain makefile() reader, replaced by one with deadlines
        self._reader = DeadlineReader(self.connection)
        self._buffered = io.BufferedReader(self._reader, 64 * 1024)
        self.rfile = self._buffered

    def handle_one_request(self) -> None:
        limits = self.limits
        if self.spare_lane:
            self.close_connection = True  # one request per spare connection
            self._reader.deadline = time.monotonic() + limits.spare_header_timeout
        else:
            # Wait for the next request's first byte (keep-alive idle), then give the
            # request line and headers their own deadline.
            self._reader.deadline = time.monotonic() + limits.idle_timeout
            try:
                if not self._buffered.peek(1):
                    self.close_connection = True
                    return
            except (TimeoutError, OSError):
                self.close_connection = True
                return
            self._reader.deadline = time.monotonic() + limits.header_timeout
        super().handle_one_request()  # closes the connection on TimeoutError

    def read_body(self, length: int) -> bytes | None:
        """Exactly ``length`` body bytes within ``body_timeout``; None when the client
        closed early. Raises :class:`ReadDeadlineError` when it is too slow."""
        self._reader.deadline = time.monotonic() + self.limits.body_timeout
        body = self.rfile.read(length)
        return body if len(body) == length else None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (malformed request line, too many or too long
        headers, unsupported method or version) as ``{"error": ...}`` instead of its
        HTML page; the connection is closed, since the request was not read whole."""
        try:
            status = HTTPStatus(code)
            phrase = status.phrase
        except ValueError:
            phrase = ""
        logger.debug("events port: refused %s: %s %s", self.client_address, code, message or phrase)
        body = json.dumps({"error": message or phrase or f"HTTP {code}"}).encode()
        self.close_connection = True
        self.prepare_write()
        self.send_response(code, phrase or None)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        # HEAD answers and 1xx/204/304 carry no body (RFC 9110), as in the base class.
        with_body = self.command != "HEAD" and code >= 200 and code not in (204, 304)
        self.send_header("Content-Length", str(len(body) if with_body else 0))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def prepare_write(self) -> None:
        """Reads left a deadline-sized timeout on the socket; writes get their own."""
        self.connection.settimeout(self.limits.write_timeout)


class BoundedHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server with a connection cap, a spare lane for probes and
    deadlines on reads (the handler class must derive from :class:`LimitedHandler`)."""

    daemon_threads = True
    #: socketserver's default backlog of 5 makes a burst of clients wait on SYN
    #: retransmits (1 s, 3 s, ...) before the cap can even answer them 503.
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[LimitedHandler], limits: ServerLimits | None = None
    ) -> None:
        self.limits = limits or ServerLimits()
        self._slots = threading.BoundedSemaphore(self.limits.max_connections)
        self._spare = threading.BoundedSemaphore(max(1, self.limits.spare_connections))
        self._lane = threading.local()
        self.refused = 0  # connections answered from the accept thread
        super().__init__(address, handler)

    def in_spare_lane(self) -> bool:
        return bool(getattr(self._lane, "spare", False))

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._slots.acquire(blocking=False):
            slot, spare = self._slots, False
        elif self._spare.acquire(blocking=False):
            slot, spare = self._spare, True
        else:
            self._refuse(request)
            return
        try:
            threading.Thread(
                target=self._serve, args=(request, client_address, slot, spare), name="events-http", daemon=True
            ).start()
        except RuntimeError:  # cannot start a thread: answer busy rather than die
            slot.release()
            self._refuse(request)

    def _serve(self, request: Any, client_address: Any, slot: threading.BoundedSemaphore, spare: bool) -> None:
        self._lane.spare = spare
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            slot.release()

    def _refuse(self, request: socket.socket) -> None:
        self.refused += 1
        try:
            request.settimeout(0.2)  # fits in the socket buffer; never wait on this client
            request.sendall(BUSY_RESPONSE)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The base prints a traceback to stderr; a reset peer is not worth one.
        logger.debug("events port: error serving %s: %s", client_address, sys.exc_info()[1])


def _busy_response() -> bytes:
    """Written by the accept thread when even the spare lane is full: no thread, no read."""
    body = b'{"error": "collector busy: too many connections"}'
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


BUSY_RESPONSE = _busy_response()

__all__ = [
    "BUSY_RESPONSE",
    "BoundedHTTPServer",
    "DeadlineReader",
    "LimitedHandler",
    "ReadDeadlineError",
    "ServerLimits",
]

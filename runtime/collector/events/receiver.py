"""The collector's HTTP side: ``POST /v1/events`` plus ``/healthz``, ``/readyz``
and ``/metrics`` on the events port.

Contract with Ray's aggregator agent (its HTTP publisher): one JSON array per
POST, any non-2xx is retried with the identical batch. So:

* 200 only after the batch is durable in the spool;
* invalid events inside a valid array are quarantined, and the batch is still 200;
* 400 (JSON body naming the problem) only when the body is not a JSON array;
* 503 with ``Retry-After`` when the spool is over budget, the collector is
  shutting down, its connections are all taken or the request bodies held in
  memory would pass their budget; 413 for an oversized body or a
  batch naming more spool targets than ``max_targets_per_batch``; 411 without a
  ``Content-Length`` (chunked bodies are not accepted); 400 for a negative or
  malformed one; 408 for a body slower than its deadline; 500 for a local disk
  failure.

The body is read only after its length was checked, and never more than that
length (``Content-Length: -1`` used to mean "read until the peer closes").
Bodies are held in memory until their batch is written, so their bytes are
reserved from one process-wide budget (``body_budget``) before they are read: a
handful of clients sending large bodies at once must not take the sidecar past
its memory limit.

A request counts as in flight from :meth:`EventReceiver.admit` until its reply
(:meth:`EventReceiver.done`), so the shutdown waits for bodies still arriving;
once the shutdown's final rotation has begun, :meth:`EventReceiver.accept` refuses
with 503: a 200 after it would name a batch no upload of this process sends.

The server is the standard library's threaded HTTP server with deadlines and a
connection cap (``http_server.py``): Ray's agent sends one batch at a time per
node, and avoiding asyncio and aiohttp keeps ~20 MiB off a sidecar whose memory
limit is small.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from runtime.collector.events.http_server import BoundedHTTPServer, LimitedHandler, ReadDeadlineError, ServerLimits
from runtime.collector.events.parse import BatchRejected, ParsedBatch, parse_batch
from runtime.collector.events.quarantine import Quarantine
from runtime.collector.events.spool import Spool
from runtime.collector.metrics import CollectorMetrics

logger = logging.getLogger(__name__)

#: Backpressure starts here (as in KubeRay's Go collector): leave room for in-flight batches.
PRESSURE_RATIO = 0.8
#: Distinct (session, node, job) spool files one batch may name. Ray's agent sends
#: one node's events, from one session and a handful of jobs; each target costs an
#: open file and a directory, so a made-up batch must not name thousands.
DEFAULT_MAX_TARGETS_PER_BATCH = 1000
#: Request bodies held in memory at once, across all connections. Ray's agent
#: sends one batch at a time per node, so one default-size (32 MiB) body leaves
#: room for a retry racing its predecessor. Added to the one batch being decoded
#: and written (about three times its body, see parse.py), this keeps the
#: receiver's share of the sidecar's 256Mi limit (infra/sidecar.py) near 150 MiB.
DEFAULT_BODY_BUDGET = 48 * 1024 * 1024
#: RFC 9110: 1*DIGIT, nothing else (``int()`` would also take "-1", "+5", " 1_0 ").
_DIGITS = re.compile(r"[0-9]{1,18}")


class LengthError(ValueError):
    """The request's length cannot be trusted; ``status`` is 400 or 411."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def body_length(content_length: list[str], transfer_encoding: list[str]) -> int:
    """The body length the headers announce, or LengthError: a missing length is
    411, a negative, malformed or contradictory one 400. Chunked bodies are refused
    (411) rather than read without a bound: Ray's agent always sends a length."""
    if transfer_encoding:
        sent = ", ".join(transfer_encoding)
        raise LengthError(411, f"Transfer-Encoding {sent!r} is not accepted; send Content-Length")
    if not content_length:
        raise LengthError(411, "Content-Length is required")
    values = {v.strip() for v in content_length}
    if len(values) > 1:
        raise LengthError(400, f"conflicting Content-Length headers: {sorted(values)}")
    (value,) = values
    if not _DIGITS.fullmatch(value):
        raise LengthError(400, f"Content-Length {value[:40]!r} is not a non-negative decimal integer")
    return int(value)


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def _json(status: int, payload: dict[str, object], **headers: str) -> Reply:
    return Reply(status, json.dumps(payload).encode(), headers=dict(headers))


class EventReceiver:
    """State and logic behind the routes; one per collector process."""

    def __init__(
        self,
        *,
        spool: Spool,
        quarantine: Quarantine,
        metrics: CollectorMetrics,
        max_disk: int,
        max_request_size: int,
        fallback_node: Callable[[], str | None],
        max_targets_per_batch: int = DEFAULT_MAX_TARGETS_PER_BATCH,
        limits: ServerLimits | None = None,
        on_job_ended: Callable[[], None] | None = None,
        body_budget: int = DEFAULT_BODY_BUDGET,
    ) -> None:
        """``on_job_ended``: told, once a batch is durable, that it reported a driver
        job FINISHED (the head's snapshot recorder polls for the job's final status).
        ``body_budget``: bytes of request bodies held in memory at once; never less
        than ``max_request_size``, or a batch the size limit allows would get 503
        forever."""
        self.spool = spool
        self.quarantine = quarantine
        self.metrics = metrics
        self.max_disk = max_disk
        self.max_request_size = max_request_size
        self.fallback_node = fallback_node
        self.max_targets_per_batch = max_targets_per_batch
        self.limits = limits or ServerLimits()
        self.on_job_ended = on_job_ended
        self.body_budget = max(body_budget, max_request_size)
        self.draining = False
        self._in_flight = 0
        self._body_bytes = 0  # reserved by admitted requests, released after their reply
        self._count_lock = threading.Lock()
        # Set under write_lock by the shutdown's final rotation: accept() refuses after it.
        self._sealed = False
        # One batch decoded and written at a time: appends must be ordered anyway,
        # and decoding holds the GIL, so concurrency would only multiply memory.
        self.write_lock = threading.Lock()

    def under_pressure(self) -> bool:
        return self.spool.used_bytes >= PRESSURE_RATIO * self.max_disk

    # ------------------------------------------------------------- events
    def admit(self, content_length: int | None, problem: LengthError | None = None) -> Reply | None:
        """Checks made before reading the body; a Reply means "answer this".
        ``content_length`` comes from :func:`body_length`, or is None with the
        ``problem`` it raised. None means admitted: the request counts as in flight
        and holds ``content_length`` bytes of the body budget until :meth:`done`."""
        # Under the lock begin_shutdown() takes: a request admitted here is already
        # counted when the shutdown waits for in-flight requests.
        with self._count_lock:
            refused = self._refusal(content_length, problem)
            if refused is None and content_length is not None:
                self._body_bytes += content_length
                self._in_flight += 1
        return refused

    def _refusal(self, content_length: int | None, problem: LengthError | None) -> Reply | None:
        if self.draining:
            return _json(503, {"error": "collector is shutting down"}, **{"Retry-After": "5"})
        if self.under_pressure():
            return _json(
                503,
                {"error": f"event spool over budget ({self.spool.used_bytes} of {self.max_disk} bytes)"},
                **{"Retry-After": "10"},
            )
        if problem is not None:
            return _json(problem.status, {"error": str(problem)})
        if content_length is None:
            return _json(411, {"error": "Content-Length is required"})
        if content_length > self.max_request_size:
            return _json(413, {"error": f"request body over {self.max_request_size} bytes"})
        if self._body_bytes + content_length > self.body_budget:
            return _json(
                503,
                {
                    "error": f"collector busy: {self._body_bytes} bytes of request bodies held in memory, "
                    f"{content_length} more would pass the budget of {self.body_budget}"
                },
                **{"Retry-After": "1"},
            )
        return None

    def done(self, content_length: int) -> None:
        """The end of a request :meth:`admit` let in (after its reply, or after the
        client left): its body's bytes go back to the budget and it no longer
        counts as in flight."""
        with self._count_lock:
            self._body_bytes -= content_length
            self._in_flight -= 1

    def begin_shutdown(self) -> None:
        """Refuse new requests from now on (503); those admitted before still finish."""
        with self._count_lock:
            self.draining = True

    def final_rotation(self) -> int:
        """The shutdown's last rotation: every spool file is handed to the uploader,
        and any batch arriving after this is refused rather than written to a file
        this process would never upload."""
        with self.write_lock:
            self._sealed = True
            return self.spool.rotate_all()

    def accept(self, body: bytes) -> Reply:
        """Decode, spool durably, quarantine what is invalid (for a request
        :meth:`admit` let in; the caller calls :meth:`done` after replying)."""
        with self.write_lock:
            if self._sealed:
                # The final upload has its file list: a 200 now would be a lie.
                return _json(
                    503,
                    {"error": "collector is shutting down: its final upload has begun, send the batch again"},
                    **{"Retry-After": "5"},
                )
            try:
                batch = parse_batch(body)
            except BatchRejected as exc:
                return _json(400, {"error": str(exc)})
            if len(batch.groups) > self.max_targets_per_batch:
                # Refused before anything is written: only this batch pays.
                return _json(
                    413,
                    {
                        "error": f"batch names {len(batch.groups)} distinct (session, node, job) spool targets, "
                        f"over the limit of {self.max_targets_per_batch}; split it"
                    },
                )
            try:
                self._store(batch)
            except OSError as exc:
                logger.error("spooling an event batch failed: %s", exc)
                return _json(500, {"error": f"local spool write failed: {exc.strerror or exc}"})
        if batch.jobs_ended and self.on_job_ended is not None:
            self._tell_job_ended(self.on_job_ended)
        return _json(200, {"accepted": batch.accepted, "quarantined": len(batch.rejected)})

    @staticmethod
    def _tell_job_ended(listener: Callable[[], None]) -> None:
        try:
            listener()
        except Exception:  # the batch is durable: its 200 must not depend on a listener
            logger.exception("job-ended listener failed")

    def _store(self, batch: ParsedBatch) -> None:
        self.spool.write(batch.groups, fallback_node=self.fallback_node())
        for event_type, count in batch.type_counts.items():
            self.metrics.events_accepted.labels(event_type=event_type).inc(count)
        if batch.rejected:
            self.quarantine.add(batch.rejected)
            for reason, count in Counter(r.reason for r in batch.rejected).items():
                self.metrics.events_quarantined.labels(reason=reason).inc(count)
        self.metrics.spool_bytes.set(self.spool.used_bytes)
        self.metrics.spool_files.set(self.spool.file_count)

    def wait_idle(self, timeout: float) -> None:
        """After :meth:`begin_shutdown`: let requests already admitted finish (their
        body still arriving, or their batch being written), for at most ``timeout``;
        one still unfinished then is refused by :meth:`accept` after the final rotation."""
        deadline = time.monotonic() + timeout
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.02)

    # ---------------------------------------------------------- operability
    def healthz(self) -> Reply:
        return _json(200, {"status": "ok"})

    def readyz(self) -> Reply:
        """Ready = events posted now would be accepted."""
        state: dict[str, object] = {
            "draining": self.draining,
            "spool_bytes": self.spool.used_bytes,
            "spool_budget_bytes": self.max_disk,
            "under_pressure": self.under_pressure(),
        }
        ready = not self.draining and not state["under_pressure"]
        return _json(200 if ready else 503, {"ready": ready, **state})

    def metrics_page(self) -> Reply:
        self.metrics.spool_bytes.set(self.spool.used_bytes)
        self.metrics.spool_files.set(self.spool.file_count)
        return Reply(200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)

    # ----------------------------------------------------------------- server
    def make_server(self, host: str, port: int) -> BoundedHTTPServer:
        receiver = self

        class Handler(_Handler):
            pass

        Handler.receiver = receiver
        return BoundedHTTPServer((host, port), Handler, self.limits)


class _Handler(LimitedHandler):
    receiver: EventReceiver
    protocol_version = "HTTP/1.1"  # keep-alive, as Ray's aiohttp client expects
    # Headers and body go out as separate writes; with Nagle on, the body waits
    # for the client's delayed ACK (~40 ms per request).
    disable_nagle_algorithm = True
    server_version = "ray-history-collector"

    def do_POST(self) -> None:  # noqa: N802 - http.server's dispatch name
        if self.path.split("?", 1)[0] != "/v1/events":
            self._send(_json(404, {"error": f"no route {self.path}"}), drain=True)
            return
        if self.spare_lane:
            busy = f"collector busy: {self.limits.max_connections} connections open"
            self._send(_json(503, {"error": busy}, **{"Retry-After": "1"}), drain=True)
            return
        length: int | None = None
        problem: LengthError | None = None
        try:
            length = body_length(
                self.headers.get_all("Content-Length", []), self.headers.get_all("Transfer-Encoding", [])
            )
        except LengthError as exc:
            problem = exc
        refused = self.receiver.admit(length, problem)
        if refused is not None or length is None:
            self._send(refused or _json(411, {"error": "Content-Length is required"}), drain=True)
            return
        try:  # admitted: in flight, and its body's bytes reserved, until replied to
            try:
                body = self.read_body(length)
            except ReadDeadlineError:
                timeout = self.limits.body_timeout
                self._send(_json(408, {"error": f"body not received within {timeout:g}s"}), drain=True)
                return
            if body is None:
                self.close_connection = True  # the client left mid-body: nobody to answer
                return
            self._send(self.receiver.accept(body))
        finally:
            self.receiver.done(length)

    def do_GET(self) -> None:  # noqa: N802 - http.server's dispatch name
        path = self.path.split("?", 1)[0]
        routes = {
            "/healthz": self.receiver.healthz,
            "/readyz": self.receiver.readyz,
            "/metrics": self.receiver.metrics_page,
        }
        route = routes.get(path)
        self._send(route() if route else _json(404, {"error": f"no route {path}"}))

    def _send(self, reply: Reply, drain: bool = False) -> None:
        self.prepare_write()
        if self.command == "POST":
            self.receiver.metrics.event_requests.labels(status=str(reply.status)).inc()
        if self.receiver.draining:
            drain = True  # shutting down: no further request on this connection
        if drain:
            # The body was not read: close rather than desynchronise keep-alive.
            self.close_connection = True
        self.send_response(reply.status, HTTPStatus(reply.status).phrase)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if drain:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: object) -> None:
        """No per-request access log (Ray posts several times a second)."""

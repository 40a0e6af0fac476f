"""Hostile clients of the events port (#14 items 2 and 8), over raw sockets against
the real receiver on loopback: lengths that lie, bodies and headers that stop
midway, more connections than the server will serve."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from runtime.collector.events.http_server import ServerLimits
from tests.unit.collector.hostile_support import (
    connect,
    event,
    get,
    post,
    post_head,
    read_answer,
    request,
    served,
)

pytestmark = pytest.mark.hostile

BATCH = json.dumps([event()]).encode()


# ----------------------------------------------------------------- item 2: lengths
@pytest.mark.parametrize(
    ("length", "status", "named"),
    [
        ("-1", 400, "Content-Length"),
        ("+5", 400, "Content-Length"),
        ("1_0", 400, "Content-Length"),
        ("0x10", 400, "Content-Length"),
        ("12abc", 400, "Content-Length"),
        (None, 411, "Content-Length is required"),
    ],
)
def test_negative_or_malformed_length_is_refused_before_any_body_is_read(
    tmp_path: Path, length: str | None, status: int, named: str
) -> None:
    """``Content-Length: -1`` used to read until the peer closed, past
    ``--max-request-mb``; now the answer comes at once, without reading the body."""
    with served(tmp_path) as srv, connect(srv.port, timeout=5) as sock:
        # A body much larger than the 1 MiB limit is on its way; the answer must
        # not wait for it (the old code blocked here until the client closed).
        sock.sendall(post_head(length) + b"[" + b" " * 65536)
        answer = read_answer(sock)
        assert answer is not None
        assert answer.status == status
        assert named in str(answer.json()["error"])
        assert answer.headers["connection"] == "close"
        assert srv.receiver.spool.used_bytes == 0


def test_conflicting_lengths_and_chunked_bodies_are_refused(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        twice = request(srv.port, post_head("2", extra="Content-Length: 900\r\n") + b"[]")
        assert twice is not None and twice.status == 400
        assert "conflicting Content-Length" in str(twice.json()["error"])
        chunked = request(srv.port, post_head(None, extra="Transfer-Encoding: chunked\r\n") + b"2\r\n[]\r\n0\r\n\r\n")
        assert chunked is not None and chunked.status == 411
        assert "Transfer-Encoding" in str(chunked.json()["error"])
        # Both a length and chunked (request smuggling's favourite): refused too.
        both = request(srv.port, post_head("2", extra="Transfer-Encoding: chunked\r\n") + b"[]")
        assert both is not None and both.status == 411
        assert srv.receiver.spool.used_bytes == 0


def test_a_body_shorter_than_its_length_is_never_acknowledged(tmp_path: Path) -> None:
    """The client closes after part of the announced body: nothing is spooled and
    no 200 goes out (the old code parsed the truncated body and answered 200)."""
    with served(tmp_path) as srv, connect(srv.port) as sock:
        sock.sendall(post_head("100") + b"[]")
        sock.shutdown(socket.SHUT_WR)
        assert read_answer(sock) is None
        assert srv.receiver.spool.used_bytes == 0
        ok = post(srv.port, BATCH)
        assert ok is not None and ok.status == 200


# ---------------------------------------------------- item 8: timeouts, concurrency
FAST = ServerLimits(
    max_connections=8, spare_connections=2, header_timeout=1.0, body_timeout=1.0, idle_timeout=1.0,
    spare_header_timeout=0.5,
)  # fmt: skip


def test_two_hundred_stalled_bodies_hold_no_more_than_the_cap(tmp_path: Path) -> None:
    """200 POSTs whose bodies stop midway used to hold 200 threads until the clients
    left. Now at most the cap is served, the rest get 503, the served ones are cut
    at the body deadline (408), and /healthz answers throughout."""
    with served(tmp_path, limits=FAST) as srv:
        base_threads = threading.active_count()
        sockets = []
        try:
            for _ in range(200):
                sock = connect(srv.port, timeout=10)
                sock.sendall(post_head("1000") + b"[" + b" " * 10)
                sockets.append(sock)
            time.sleep(0.3)
            assert threading.active_count() <= base_threads + FAST.max_connections + FAST.spare_connections
            started = time.monotonic()
            health = get(srv.port, "/healthz", timeout=5)
            assert health is not None and health.status == 200
            assert time.monotonic() - started < 2.0
            answers = [read_answer(sock) for sock in sockets]
        finally:
            for sock in sockets:
                sock.close()
        statuses = sorted({a.status for a in answers if a is not None})
        assert set(statuses) <= {408, 503}
        assert 408 in statuses and 503 in statuses
        busy = next(a for a in answers if a is not None and a.status == 503)
        assert busy.headers["retry-after"] == "1" and "busy" in str(busy.json()["error"])
        ok = post(srv.port, BATCH)
        assert ok is not None and ok.status == 200


def test_a_request_line_trickled_byte_by_byte_is_cut_at_the_header_deadline(tmp_path: Path) -> None:
    """The deadline bounds the whole header read, not each recv: a byte every
    0.2 s would reset a plain socket timeout forever."""
    with served(tmp_path, limits=FAST) as srv, connect(srv.port) as sock:
        started = time.monotonic()
        closed_after = None
        for byte in b"POST /v1/events HTTP/1.1\r\nHost: x\r\n":
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            time.sleep(0.2)
        if closed_after is None:
            assert read_answer(sock) is None  # closed without an answer
            closed_after = time.monotonic() - started
        assert closed_after < FAST.header_timeout + 1.5


def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path) -> None:
    with served(tmp_path, limits=FAST) as srv, connect(srv.port) as sock:
        sock.sendall(post_head(str(len(BATCH))) + BATCH)
        first = read_answer(sock)
        assert first is not None and first.status == 200
        started = time.monotonic()
        assert sock.recv(1) == b""  # the server closed the idle connection
        assert time.monotonic() - started < FAST.idle_timeout + 1.0


def test_probes_are_answered_while_every_connection_is_taken(tmp_path: Path) -> None:
    limits = ServerLimits(max_connections=2, spare_connections=1, header_timeout=30.0, idle_timeout=30.0)
    with served(tmp_path, limits=limits) as srv:
        hogs = [connect(srv.port) for _ in range(2)]
        try:
            for hog in hogs:
                hog.sendall(b"GET /heal")  # half a request line: each holds a slot
            time.sleep(0.2)
            health = get(srv.port, "/healthz", timeout=5)
            assert health is not None and health.status == 200  # the spare lane
            busy = post(srv.port, BATCH, timeout=5)
            assert busy is not None and busy.status == 503
            assert busy.headers["retry-after"] == "1"
        finally:
            for hog in hogs:
                hog.close()
        time.sleep(0.2)
        ok = post(srv.port, BATCH)
        assert ok is not None and ok.status == 200


# ------------------------------------------------------- memory across connections
def test_bodies_held_at_once_are_bounded_by_the_body_budget(tmp_path: Path) -> None:
    """Each connection used to buffer its whole body before the write lock, so a few
    clients sending large bodies at once held hundreds of MiB in a 256Mi sidecar. A
    body's length is reserved from one budget before it is read: past it, 503 at once
    (nothing read), and the bytes come back once the reply is sent."""
    size = 1 << 20
    with served(tmp_path, max_request_size=size, body_budget=2 * size) as srv:
        stalled = []
        try:
            for _ in range(2):  # together they hold the whole budget
                sock = connect(srv.port)
                sock.sendall(post_head(str(size)) + b"[")
                stalled.append(sock)
            time.sleep(0.3)
            refused = request(srv.port, post_head(str(size)) + b"[")
            assert refused is not None and refused.status == 503, refused
            assert refused.headers["retry-after"] == "1"
            assert refused.headers["content-type"] == "application/json"
            assert refused.headers["connection"] == "close"
            assert "budget" in str(refused.json()["error"])
            stalled[0].sendall(b" " * (size - 2) + b"]")  # one finishes and is answered
            done = read_answer(stalled[0])
            assert done is not None and done.status == 200
        finally:
            for sock in stalled:
                sock.close()
        time.sleep(0.3)  # the closed one's handler gives its bytes back too
        ok = post(srv.port, BATCH)
        assert ok is not None and ok.status == 200


def test_the_default_request_size_and_body_budget_fit_the_sidecar() -> None:
    """The bodies held at once plus the one batch being written (its lines and the
    joined write, about twice its body) within half the sidecar's 256Mi limit; the
    other half is the interpreter, the storage client and the log shipper."""
    from runtime.collector.config import CollectorConfig
    from runtime.collector.events.receiver import DEFAULT_BODY_BUDGET

    largest = CollectorConfig.max_request_size
    budget = max(DEFAULT_BODY_BUDGET, largest)
    assert budget + 2 * largest <= 128 * 1024 * 1024
    assert largest >= 8 * 1024 * 1024  # Ray's largest batch: 1000 events of up to ~8 KiB


# ------------------------------------------------------------- JSON refusals (#3)
@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"PUT /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n[]", 501),
        (b"POST /v1/events HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"POST /v1/events HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n", 431),
        (b"POST /v1/events HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431),
        (b"POST /v1/events HTTP/x.y\r\n\r\n", 400),
        (b"BREW\r\n\r\n", 400),
        (b"G" * 70000 + b"\r\n\r\n", 414),
    ],
    ids=["method", "version", "header-count", "header-length", "bad-version", "bad-line", "line-length"],
)
def test_the_http_servers_own_refusals_are_json(tmp_path: Path, raw: bytes, status: int) -> None:
    """http.server answered these itself with its HTML error page, and a malformed
    request line got no status line at all (answered as HTTP/0.9)."""
    with served(tmp_path) as srv:
        answer = request(srv.port, raw)
    assert answer is not None, "no HTTP answer"
    assert answer.status == status, (answer.status, answer.body[:200])
    assert answer.headers["content-type"] == "application/json", answer.body[:200]
    assert answer.headers["connection"] == "close"
    assert answer.json()["error"]

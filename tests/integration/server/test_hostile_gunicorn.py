"""The real ``historyserver`` (embedded gunicorn) against slow and hostile clients
over raw sockets on 127.0.0.1 (issue #14, items 4, 5, 9, 10): half request lines,
clients that never close, log streams to a head dashboard that never answers, a
foreign Host, a leading double slash. ``/livez`` must keep answering throughout."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runtime.server.worker import HEADER_TIMEOUT
from runtime.storage.config import StorageConfig, open_store
from tests.integration.server.harness import HistoryServerProcess
from tests.unit.server.live.servers import HangingUpstream, live_cookies

pytestmark = [pytest.mark.integration, pytest.mark.hostile]

STREAM = "/api/v0/logs/stream?node_id=abc&filename=raylet.out&follow=true"


@pytest.fixture(scope="module")
def silent() -> Iterator[HangingUpstream]:
    upstream = HangingUpstream("silent")
    yield upstream
    upstream.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, silent: HangingUpstream) -> Iterator[HistoryServerProcess]:
    root = tmp_path_factory.mktemp("hostile-gunicorn")
    open_store(StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True)).close()
    args = (f"--live-cluster=default/live-demo={silent.url}", "--kubernetes=off", "--threads=8")
    with HistoryServerProcess(root / "store", root / "cache", *args) as proc:
        yield proc


def _connect(server: HistoryServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def _exchange(server: HistoryServerProcess, request: bytes) -> bytes:
    with _connect(server) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _livez_seconds(server: HistoryServerProcess) -> float:
    started = time.monotonic()
    answer = requests.get(f"{server.url}/livez", timeout=30)
    assert (answer.status_code, answer.text) == (200, "ok")
    return time.monotonic() - started


def test_half_request_lines_do_not_starve_the_threads(server: HistoryServerProcess) -> None:
    slow = [_connect(server) for _ in range(32)]  # 4x the threads
    try:
        for sock in slow:
            sock.sendall(b"GET /livez HT")  # ... and never the rest
        time.sleep(0.5)
        for _ in range(5):
            assert _livez_seconds(server) < 1.0
        # The slow clients are told why and closed once the header timeout is up.
        slow[0].settimeout(HEADER_TIMEOUT + 5)
        answer = slow[0].recv(65536)
        assert answer.startswith(b"HTTP/1.1 408") and b"request head not complete" in answer
    finally:
        for sock in slow:
            sock.close()


def test_a_trickled_head_is_cut_at_the_header_timeout(server: HistoryServerProcess) -> None:
    """One byte a second keeps no thread busy and ends at the deadline, not never."""
    with _connect(server) as sock:
        started = time.monotonic()
        answer = b""
        for byte in b"GET /livez HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            sock.settimeout(1.0)
            try:
                answer += sock.recv(65536)
            except TimeoutError:
                continue
            if answer:
                break
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert time.monotonic() - started < HEADER_TIMEOUT + 3


def test_clients_that_never_close_do_not_stall_the_server(server: HistoryServerProcess) -> None:
    """A finished request on a connection that is not kept alive is followed by a
    linger for the client's FIN; a client that never closes must not make every
    other connection wait (gunicorn 27 lingers in its main loop, 2 s each)."""
    lingering = [_connect(server) for _ in range(8)]
    try:
        for sock in lingering:
            sock.sendall(b"GET /livez HTTP/1.0\r\n\r\n")  # then neither reads nor closes
        time.sleep(0.3)
        assert max(_livez_seconds(server) for _ in range(3)) < 1.0
    finally:
        for sock in lingering:
            sock.close()


def test_log_streams_to_a_silent_head_leave_threads_for_probes(
    server: HistoryServerProcess, silent: HangingUpstream
) -> None:
    statuses: list[int] = []

    def stream() -> None:
        try:
            statuses.append(requests.get(f"{server.url}{STREAM}", cookies=live_cookies(), timeout=60).status_code)
        except requests.RequestException:
            statuses.append(0)

    clients = [threading.Thread(target=stream) for _ in range(8)]
    for client in clients:
        client.start()
    time.sleep(1.0)
    assert _livez_seconds(server) < 1.0  # 4 streams wait for headers, 4 threads are left
    assert sorted(statuses) == [503] * 4  # over --max-live-streams (half of 8 threads): refused at once
    assert silent.accepted <= 4
    for client in clients:
        client.join(60)
    assert sorted(statuses) == [503] * 4 + [504] * 4  # the others end at --proxy-timeout (30 s)


def test_foreign_host_and_pod_ip_probe(server: HistoryServerProcess) -> None:
    refused = _exchange(server, b"GET /clusters HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
    assert refused.startswith(b"HTTP/1.1 400") and b"attacker.example" in refused
    probe = _exchange(server, b"GET /livez HTTP/1.1\r\nHost: 10.244.3.7:8080\r\nConnection: close\r\n\r\n")
    assert probe.startswith(b"HTTP/1.1 200")
    local = _exchange(server, b"GET /clusters HTTP/1.1\r\nHost: localhost:8080\r\nConnection: close\r\n\r\n")
    assert local.startswith(b"HTTP/1.1 200")


def test_double_slash_is_redirected_not_served(server: HistoryServerProcess) -> None:
    answer = _exchange(server, b"GET //select_cluster HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    head = answer.split(b"\r\n\r\n", 1)[0]
    assert head.startswith(b"HTTP/1.1 308") and b"\r\nLocation: /select_cluster" in head


def test_slow_head_then_normal_keepalive_requests(server: HistoryServerProcess, tmp_path: Path) -> None:
    """A head split over packets, then a second request on the same connection."""
    with _connect(server) as sock:
        sock.sendall(b"GET /li")
        time.sleep(0.3)
        sock.sendall(b"vez HTTP/1.1\r\nHost: localhost\r\n\r\nGET /readz HTTP/1.1\r\nHost: localhost\r\n")
        time.sleep(0.3)
        sock.sendall(b"Connection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.count(b"HTTP/1.1 200") == 2 and answer.endswith(b"ok")

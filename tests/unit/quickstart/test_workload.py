"""Explaining the sample job's failure when Ray's job message lacks the traceback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runtime.quickstart.workload import JobResult, failure_text, short_error

EXPECTED = "reading -7.5 in batch 2 is negative"
TAIL = "(clean-batch-3 pid=24627) clean_batch: batch 3 is not validated yet [repeated 2x across cluster]"
TRACEBACK = f"Traceback (most recent call last):\n  File 'x.py', line 1\nValueError: {EXPECTED}\n"


class JobLogs:
    """Stands in for the Jobs API log route: the traceback lands after `flush_after` reads."""

    def __init__(self, flush_after: int) -> None:
        self.flush_after = flush_after
        self.reads = 0

    def body(self) -> bytes:
        self.reads += 1
        logs = TAIL + ("\n" + TRACEBACK if self.reads > self.flush_after else "")
        return json.dumps({"logs": logs}).encode()


@pytest.fixture
def dashboard(request: pytest.FixtureRequest) -> Iterator[tuple[str, JobLogs]]:
    logs = JobLogs(flush_after=request.param)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/api/jobs/quickstart-1/logs"
            body = logs.body() if ok else b'{"error": "not found"}'
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", logs
    finally:
        server.shutdown()
        server.server_close()


def job(message: str, status: str = "FAILED") -> JobResult:
    return JobResult("quickstart-1", "01000000", status, message)


@pytest.mark.parametrize("dashboard", [2], indirect=True)
def test_a_message_without_the_traceback_is_completed_from_the_driver_log(dashboard: tuple[str, JobLogs]) -> None:
    url, logs = dashboard
    text = failure_text(url, job(f"Job entrypoint command failed with exit code 1:\n{TAIL}"), EXPECTED, timeout=10)
    assert short_error(text) == f"ValueError: {EXPECTED}"
    assert logs.reads == 3  # asked again until the traceback was flushed


@pytest.mark.parametrize("dashboard", [0], indirect=True)
def test_a_message_that_explains_itself_is_kept(dashboard: tuple[str, JobLogs]) -> None:
    url, logs = dashboard
    message = f"Job entrypoint command failed:\n{TRACEBACK}"
    assert failure_text(url, job(message), EXPECTED) == message
    assert failure_text(url, job("", status="SUCCEEDED"), EXPECTED) == ""
    assert logs.reads == 0


@pytest.mark.parametrize("dashboard", [1000], indirect=True)
def test_the_message_stands_when_the_log_never_explains_it(dashboard: tuple[str, JobLogs]) -> None:
    url, _ = dashboard
    message = f"Job entrypoint command failed:\n{TAIL}"
    assert failure_text(url, job(message), EXPECTED, timeout=1) == message

"""Explaining the sample job's failure when Ray's job message lacks the traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from runtime.quickstart.workload import JobResult, failure_text, short_error
from tests.support.fake_dashboard import FakeDashboard, Reply

EXPECTED = "reading -7.5 in batch 2 is negative"
TAIL = "(clean-batch-3 pid=24627) clean_batch: batch 3 is not validated yet [repeated 2x across cluster]"
TRACEBACK = f"Traceback (most recent call last):\n  File 'x.py', line 1\nValueError: {EXPECTED}\n"
LOGS = "/api/jobs/quickstart-1/logs"


@pytest.fixture
def dashboard() -> Iterator[FakeDashboard]:
    with FakeDashboard.running() as fake:
        yield fake


def logs_reply(logs: str) -> Reply:
    return Reply(body=json.dumps({"logs": logs}).encode())


def job(message: str, status: str = "FAILED") -> JobResult:
    return JobResult("quickstart-1", "01000000", status, message)


def test_a_message_without_the_traceback_is_completed_from_the_driver_log(dashboard: FakeDashboard) -> None:
    # The traceback reaches the driver's log only on the third read (the pipe flushes late).
    dashboard.script(LOGS, logs_reply(TAIL), logs_reply(TAIL), logs_reply(f"{TAIL}\n{TRACEBACK}"))
    message = f"Job entrypoint command failed with exit code 1:\n{TAIL}"
    text = failure_text(dashboard.url, job(message), EXPECTED, timeout=10)
    assert short_error(text) == f"ValueError: {EXPECTED}"
    assert dashboard.hits(LOGS) == 3  # asked again until the traceback was there


def test_a_message_that_explains_itself_is_kept(dashboard: FakeDashboard) -> None:
    message = f"Job entrypoint command failed:\n{TRACEBACK}"
    assert failure_text(dashboard.url, job(message), EXPECTED) == message
    assert failure_text(dashboard.url, job("", status="SUCCEEDED"), EXPECTED) == ""
    assert dashboard.hits(LOGS) == 0


def test_the_message_stands_when_the_log_never_explains_it(dashboard: FakeDashboard) -> None:
    dashboard.reply(LOGS, {"logs": TAIL})
    message = f"Job entrypoint command failed:\n{TAIL}"
    assert failure_text(dashboard.url, job(message), EXPECTED, timeout=1) == message
    assert dashboard.hits(LOGS) >= 2

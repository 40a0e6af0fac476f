"""Running the sample job on the live head and reading back what happened, over
HTTP: the Ray Jobs API while the cluster runs, the collector's metrics to know
Ray has flushed its events, and the history server once the cluster is gone."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from runtime.quickstart.errors import QuickstartError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b.*")
TERMINAL_JOB_STATES = ("SUCCEEDED", "FAILED", "STOPPED")
ACCEPTED_EVENTS_METRIC = "ray_history_collector_events_accepted"


class WorkloadError(QuickstartError):
    """The sample job could not be submitted or did not finish in time."""


@dataclass(frozen=True)
class JobResult:
    submission_id: str
    job_id: str
    status: str
    message: str


def submit_sample_job(
    dashboard_url: str, submission_id: str, timeout: float = 90.0, headers: Mapping[str, str] | None = None
) -> None:
    """Submit ``python -m runtime.quickstart.sample_job`` with this interpreter. The
    dashboard answers before its job agent is registered ("No available agent to
    submit job"): that answer is retried until ``timeout``."""
    body = {"entrypoint": f"{sys.executable} -m runtime.quickstart.sample_job", "submission_id": submission_id}
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = requests.post(f"{dashboard_url}/api/jobs/", json=body, headers=headers, timeout=60)
        except requests.RequestException as exc:
            raise WorkloadError(f"submitting the sample job to {dashboard_url} failed: {exc}") from exc
        if answer.status_code == 200:
            return
        if "no available agent" not in answer.text.lower() or time.monotonic() > deadline:
            raise WorkloadError(f"submitting the sample job failed: HTTP {answer.status_code} {answer.text[:500]}")
        time.sleep(1.0)


def wait_for_job(
    dashboard_url: str, submission_id: str, timeout: float, headers: Mapping[str, str] | None = None
) -> JobResult:
    deadline = time.monotonic() + timeout
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            answer = requests.get(f"{dashboard_url}/api/jobs/{submission_id}", headers=headers, timeout=10)
            if answer.status_code == 200:
                info = answer.json()
        except (requests.RequestException, ValueError):
            pass  # the dashboard is busy starting the job's driver; ask again
        if info.get("status") in TERMINAL_JOB_STATES:
            return JobResult(submission_id, str(info.get("job_id") or ""), info["status"], info.get("message") or "")
        time.sleep(1.0)
    raise WorkloadError(
        f"the sample job {submission_id} did not finish within {timeout:.0f} s "
        f"(last status {info.get('status', 'unknown')}); raise --job-timeout on a slow machine"
    )


def failure_text(
    dashboard_url: str, job: JobResult, expected: str, timeout: float = 15.0, headers: Mapping[str, str] | None = None
) -> str:
    """The text that explains a failed job: its message, unless that lacks ``expected``
    and the driver's full log has it. Ray's message is the log tail read as the driver
    exits, and under load it can miss the traceback still in the driver's pipe; the
    log itself (``/api/jobs/{id}/logs``) gets it within seconds."""
    if job.status != "FAILED" or expected in job.message:
        return job.message
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = requests.get(f"{dashboard_url}/api/jobs/{job.submission_id}/logs", headers=headers, timeout=10)
            logs = str(answer.json().get("logs") or "") if answer.status_code == 200 else ""
        except (requests.RequestException, ValueError, AttributeError):
            logs = ""
        if expected in logs:
            return logs
        if time.monotonic() >= deadline:
            return job.message
        time.sleep(0.5)


def accepted_events(collector_url: str) -> float | None:
    """Events the collector has acknowledged so far (``None`` if it does not answer)."""
    try:
        text = requests.get(f"{collector_url}/metrics", timeout=5).text
    except requests.RequestException:
        return None
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == ACCEPTED_EVENTS_METRIC:
            total += sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
    return total


def wait_for_events_to_settle(collector_url: str, quiet_seconds: float = 3.0, timeout: float = 30.0) -> float:
    """Wait until the collector has accepted no new event for ``quiet_seconds``: Ray's
    publisher sends the last task and job events a moment after the job ends."""
    deadline = time.monotonic() + timeout
    last = accepted_events(collector_url)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = accepted_events(collector_url)
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_seconds:
            break
    return last or 0.0


def short_error(message: str) -> str:
    """The exception line of a job message or traceback (``ValueError: ...``): the last
    line that looks like one, else the last non-empty line. Worker output that Ray
    forwards to the driver may follow the traceback, and carries colour codes."""
    lines = [_ANSI.sub("", line).strip() for line in message.splitlines()]
    lines = [line for line in lines if line]
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return line
    return lines[-1] if lines else ""

"""Resolution of a log request to one object and byte window (no guessing)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from runtime.server.errors import ApiError
from runtime.server.logs.params import LogFileParams
from runtime.server.logs.resolve import ActorLogRow, ResolvedLog, TaskLogRow, resolve_log

HEAD = "aa"
WORKER_NODE = "bb"
WID = "f00d"


def _task(**overrides: object) -> TaskLogRow:
    values: dict[str, object] = {
        "type": "NORMAL_TASK",
        "actor_id": "",
        "node_id": WORKER_NODE,
        "worker_id": WID,
        "stdout_file": f"/tmp/ray/session_x/logs/worker-{WID}-01000000-7.out",
        "stderr_file": f"/tmp/ray/session_x/logs/worker-{WID}-01000000-7.err",
        "stdout_start": 10,
        "stdout_end": 20,
        "stderr_start": 5,
        "stderr_end": 5,
    }
    values.update(overrides)
    return TaskLogRow(**values)  # type: ignore[arg-type]


@dataclass
class FakeCatalog:
    files: dict[str, list[str]] = field(default_factory=dict)
    ips: dict[str, list[str]] = field(default_factory=dict)
    tasks: dict[str, dict[int, TaskLogRow]] = field(default_factory=dict)
    actors: dict[str, ActorLogRow] = field(default_factory=dict)

    def nodes_with_logs(self) -> list[str]:
        return sorted(self.files)

    def nodes_for_ip(self, ip: str) -> list[str]:
        return self.ips.get(ip, [])

    def log_files(self, node_id: str, under: str = "") -> list[str]:
        return sorted(f for f in self.files.get(node_id, []) if not under or f.startswith(under + "/"))

    def has_log(self, node_id: str, path: str) -> bool:
        return path in self.files.get(node_id, [])

    def task_attempts(self, task_id: str) -> dict[int, TaskLogRow]:
        return self.tasks.get(task_id, {})

    def actor(self, actor_id: str) -> ActorLogRow | None:
        return self.actors.get(actor_id)


CATALOG = FakeCatalog(
    files={
        HEAD: ["raylet.out", "job-driver-raysubmit_1.log", "worker-0a-01000000-42.out", "python-core-worker-0a_42.log"],
        WORKER_NODE: [f"worker-{WID}-01000000-7.out", f"worker-{WID}-01000000-7.err", "raylet.out"],
    },
    ips={"10.0.0.1": [HEAD], "10.0.0.9": [HEAD, WORKER_NODE]},
    tasks={
        "t1": {0: _task(), 1: _task(stdout_file=None, stderr_file=None)},
        "actor-task": {0: _task(type="ACTOR_TASK", actor_id="ac")},
        "creation": {0: _task(type="ACTOR_CREATION_TASK", actor_id="ac", stdout_file=None)},
        "open": {0: _task(stdout_end=None)},
        "unended": {0: _task(stdout_start=95, stdout_end=0)},
        "empty": {0: _task(stdout_start=0, stdout_end=0)},
        "weird": {0: _task(stdout_start=30, stdout_end=20)},
        "escape": {0: _task(stdout_file="/tmp/../..")},
        "unscheduled": {0: _task(node_id="")},
    },
    actors={"ac": ActorLogRow(WORKER_NODE, WID), "pending": ActorLogRow("", "")},
)


def _resolve(**kwargs: object) -> ResolvedLog:
    return resolve_log(LogFileParams(**kwargs), CATALOG)  # type: ignore[arg-type]


def _error(**kwargs: object) -> ApiError:
    with pytest.raises(ApiError) as info:
        _resolve(**kwargs)
    return info.value


def test_filename_on_a_node_or_an_ip() -> None:
    assert _resolve(node_id=HEAD, filename="raylet.out") == ResolvedLog(HEAD, "raylet.out")
    assert _resolve(node_ip="10.0.0.1", filename="raylet.out") == ResolvedLog(HEAD, "raylet.out")
    # Several nodes on one IP: the one holding the file wins.
    assert _resolve(node_ip="10.0.0.9", filename=f"worker-{WID}-01000000-7.err").node_id == WORKER_NODE
    # attempt_number does not rename an explicit file
    assert _resolve(node_id=HEAD, filename="raylet.out", attempt_number=1).path == "raylet.out"


def test_unknown_ip_is_404() -> None:
    error = _error(node_ip="10.9.9.9", filename="raylet.out")
    assert error.status == 404 and "10.9.9.9" in error.msg


def test_an_attempt_without_an_end_offset_reads_to_the_end_of_its_file() -> None:
    """A task still running when its node died reported a start but no end (the index keeps
    it as 0): like Ray's log manager (end offset None), read from the start to the end."""
    out = f"worker-{WID}-01000000-7.out"
    assert _resolve(task_id="open") == ResolvedLog(WORKER_NODE, out, 10, None)
    assert _resolve(task_id="unended") == ResolvedLog(WORKER_NODE, out, 95, None)
    assert _resolve(task_id="empty") == ResolvedLog(WORKER_NODE, out, 0, 0)  # printed nothing


def test_task_attempt_uses_its_byte_range() -> None:
    assert _resolve(task_id="t1") == ResolvedLog(WORKER_NODE, f"worker-{WID}-01000000-7.out", 10, 20)
    assert _resolve(task_id="t1", suffix="err") == ResolvedLog(WORKER_NODE, f"worker-{WID}-01000000-7.err", 5, 5)


@pytest.mark.parametrize(
    ("kwargs", "status", "text"),
    [
        ({"task_id": "nope"}, 400, "not in this session"),
        ({"task_id": "t1", "attempt_number": 5}, 400, "no attempt 5 (attempts: 0, 1)"),
        ({"task_id": "t1", "attempt_number": 1}, 404, "Could not find log file for task attempt t1(1)"),
        ({"task_id": "actor-task"}, 400, "for actor task, please query actor log for actor(ac)"),
        ({"task_id": "creation"}, 404, "actor_id=ac"),
        ({"task_id": "weird"}, 500, "invalid log range"),
        ({"task_id": "escape"}, 404, "Could not find log file"),
        ({"task_id": "unscheduled"}, 400, "never scheduled"),
        ({"actor_id": "nope"}, 400, "not in this session"),
        ({"actor_id": "pending"}, 404, "no worker recorded"),
        ({"node_id": HEAD, "pid": 999}, 404, "pid 999"),
        ({"submission_id": "raysubmit_2"}, 404, "job-driver-raysubmit_2.log"),
    ],
)
def test_task_actor_pid_failures(kwargs: dict[str, object], status: int, text: str) -> None:
    error = _error(**kwargs)
    assert error.status == status
    assert text in error.msg


def test_actor_worker_file() -> None:
    assert _resolve(actor_id="ac") == ResolvedLog(WORKER_NODE, f"worker-{WID}-01000000-7.out")
    assert _resolve(actor_id="ac", suffix="err").path == f"worker-{WID}-01000000-7.err"


def test_pid_prefers_the_worker_file() -> None:
    assert _resolve(node_id=HEAD, pid=42) == ResolvedLog(HEAD, "worker-0a-01000000-42.out")


def test_submission_driver_log_is_found_on_any_node() -> None:
    assert _resolve(submission_id="raysubmit_1") == ResolvedLog(HEAD, "job-driver-raysubmit_1.log")

"""Tasks the GCS fails without a task event: their worker died, or their job finished.

The expected rows are what a live Ray 2.60 head answered (``/api/v0/tasks?detail=1``)
for a task whose worker was force-exited and for a task still pending when its driver
exited; ``tests/integration/server/test_gcs_task_failures.py`` checks the same
against a real head.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtime.common.timestamps import parse_timestamp_ns
from runtime.server.index.build import build_index
from runtime.server.index.reader import SessionIndex
from runtime.server.replay.ids import IdCache
from runtime.server.replay.session import SessionReplay
from runtime.server.replay.shard import TaskShard
from runtime.server.replay.task_failures import FailureContext, WorkerDeaths
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.sample_session import RUN_B, load_events, write_events
from tests.unit.server.replay.events import (
    JOB_B64,
    TASK_B64,
    WORKER_B64,
    WORKER_HEX,
    definition,
    envelope,
    executor,
    lifecycle,
    owner,
    ts,
)

OTHER_TASK = base64.b64encode(bytes(range(100, 124))).decode()
FORCED = "Worker force exited because its job has finished"


def ms(text: str) -> int:
    return parse_timestamp_ns(text) // 1_000_000


def worker_dead(at: str, exit_type: str | None = "INTENDED_USER_EXIT", detail: str = FORCED) -> dict[str, Any]:
    death: dict[str, Any] = {"exitDetail": detail}
    if exit_type is not None:
        death["exitType"] = exit_type
    transition = {"state": "DEAD", "timestamp": at, "endTimeMs": str(ms(at)), "deathInfo": death}
    return envelope(
        "WORKER_LIFECYCLE_EVENT", "workerLifecycleEvent", {"workerId": WORKER_B64, "stateTransitions": [transition]}
    )


def job_finished(at: str) -> dict[str, Any]:
    transitions = [{"state": "CREATED", "timestamp": ts(0)}, {"state": "FINISHED", "timestamp": at}]
    return envelope(
        "DRIVER_JOB_LIFECYCLE_EVENT", "driverJobLifecycleEvent", {"jobId": JOB_B64, "stateTransitions": transitions}
    )


def running(task: str = TASK_B64) -> list[dict[str, Any]]:
    """Submitted to the worker and running there, never finished."""
    states = (("PENDING_ARGS_AVAIL", ts(1)), ("PENDING_NODE_ASSIGNMENT", ts(1, 500)), ("SUBMITTED_TO_WORKER", ts(2)))
    return [definition(task), lifecycle(task, states=states, workerId=WORKER_B64), executor(task)]


def pending(task: str = OTHER_TASK) -> list[dict[str, Any]]:
    """Waiting for a node (an infeasible resource request), never scheduled."""
    states = (("PENDING_ARGS_AVAIL", ts(1)), ("PENDING_NODE_ASSIGNMENT", ts(1, 500)))
    return [definition(task, name="never"), lifecycle(task, states=states)]


def render(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Task name -> its detail row, rendered with the session's failure context."""
    session, shard = SessionReplay(), TaskShard()
    session.feed(events)
    shard.replay.feed(events)
    renderer = shard.renderer(session.failure_context())
    return {row[4]: orjson.loads(renderer.detail_json(row)) for row in renderer.rows()}


def test_a_task_whose_worker_died_fails_as_the_gcs_says() -> None:
    rows = render([*running(), worker_dead(ts(20))])
    task = rows["parent-task"]
    assert (task["state"], task["error_type"]) == ("FAILED", "WORKER_DIED")
    assert task["error_message"] == (
        f"Worker running the task ({WORKER_HEX}) died with exit_type: 3 with error_message: {FORCED}"
    )
    assert task["end_time_ms"] == float(ms(ts(20)))
    assert [e["state"] for e in task["events"]][-2:] == ["RUNNING", "FAILED"]


def test_a_task_pending_when_its_job_finished_fails_as_the_gcs_says() -> None:
    rows = render([*pending(), job_finished(ts(30))])
    task = rows["never"]
    assert (task["state"], task["error_type"]) == ("FAILED", "WORKER_DIED")
    assert task["error_message"] == "Job finishes (02000000) as driver exits. Marking all non-terminal tasks as failed."
    assert task["end_time_ms"] == float(ms(ts(30)))
    assert [e["state"] for e in task["events"]] == ["PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "FAILED"]


@pytest.mark.parametrize(
    ("death", "job_end", "rule"),
    [
        (ts(20), ts(30), "worker"),  # death + 1 s comes before job end + 15 s
        (ts(58), ts(30), "job"),  # job end + 15 s (45 s) comes before death + 1 s (59 s)
        (ts(44), ts(30), "worker"),  # 45 s either way: the worker rule, as the GCS's earlier timer
    ],
)
def test_the_rule_that_fires_first_wins(death: str, job_end: str, rule: str) -> None:
    task = render([*running(), worker_dead(death), job_finished(job_end)])["parent-task"]
    expected = death if rule == "worker" else job_end
    assert task["end_time_ms"] == float(ms(expected))
    assert task["error_message"].startswith("Worker running" if rule == "worker" else "Job finishes")


def test_terminal_tasks_and_tasks_of_live_jobs_and_workers_keep_their_state() -> None:
    finished = [definition(), owner(), executor()]  # FINISHED on the worker that later died
    rows = render([*finished, *pending(), worker_dead(ts(20))])  # the job never finished
    assert rows["parent-task"]["state"] == "FINISHED" and rows["parent-task"]["error_type"] is None
    assert rows["never"]["state"] == "PENDING_NODE_ASSIGNMENT" and rows["never"]["end_time_ms"] is None


def test_an_exit_type_proto3_left_out_is_system_error() -> None:
    task = render([*running(), worker_dead(ts(20), exit_type=None, detail="crashed")])["parent-task"]
    assert "died with exit_type: 0 with error_message: crashed" in task["error_message"]


def test_worker_deaths_of_a_captured_ray_session() -> None:
    """Ray 2.60's own WORKER_LIFECYCLE_EVENTs: crashed (0), idle (1), a user error (2), ray.shutdown (3)."""
    deaths = WorkerDeaths(IdCache())
    for event in load_events(RUN_B):
        if event.get("eventType") == "WORKER_LIFECYCLE_EVENT":
            assert deaths.lifecycle(event["workerLifecycleEvent"])  # type: ignore[arg-type]
    assert deaths.deaths and {exit_type for _, exit_type, _ in deaths.deaths.values()} == {0, 1, 2, 3}
    assert all(end > 1_700_000_000_000 for end, _, _ in deaths.deaths.values())


def test_the_context_crosses_a_process_boundary_intact() -> None:
    context = FailureContext({WORKER_HEX: (5, 3, 'why\n"quoted"')}, {"02000000": 7})
    assert FailureContext.from_json(context.to_json()) == context


@pytest.mark.parametrize("processes", [0, 2])
def test_builds_in_process_and_by_workers_apply_the_rules(tmp_path: Path, processes: int) -> None:
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True))
    cluster = ClusterRef("default", "failures")
    write_events(store, KeyLayout(""), cluster, [*running(), *pending(), worker_dead(ts(20)), job_finished(ts(30))])
    out = tmp_path / "index.sqlite"
    session = "session_2026-11-22_01-45-25_333080_9264"
    stats = build_index(store, KeyLayout(""), cluster, session, out, processes=processes)
    assert stats.processes == processes and stats.tasks == 2
    with SessionIndex(out) as index:
        rows = dict(index.rows("SELECT name, state FROM tasks"))
        counts = dict(index.rows("SELECT state, SUM(n) FROM task_counts GROUP BY state"))
    assert rows == {"parent-task": "FAILED", "never": "FAILED"} and counts == {"FAILED": 2}

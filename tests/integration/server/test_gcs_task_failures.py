"""Tasks the GCS fails without a task event, against a real Ray 2.60 head.

A driver submits a task that sleeps for minutes and one that asks for a GPU nobody
has, then exits. Ray force-exits the sleeping task's worker (the GCS fails that task
one second later: "Worker running the task ... died") and fails the pending one when
its job has been finished for 15 s ("Job finishes ... as driver exits"). No task event
says either, so without ``runtime.server.replay.task_failures`` the stored session
shows one task RUNNING and one pending forever. The history server must show them as
the live dashboard did.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from runtime.storage.layout import ClusterRef
from tests.integration.ray_harness import head_with_collector, ray_available, unique_id, wait_until
from tests.integration.server.harness import HistoryServerProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,  # the GCS's job rule fires 15 s after the driver exits
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
    pytest.mark.timeout(360),
]

CLUSTER = ClusterRef(namespace="default", name="raycluster-gcs-failures")
WORKLOAD = """\
import time
import ray

ray.init()

@ray.remote
def sleeps_for_minutes():
    time.sleep(600)

@ray.remote(num_gpus=1)
def never_scheduled():
    return 1

refs = [sleeps_for_minutes.remote(), never_scheduled.remote()]
time.sleep(5)  # the sleeping task runs; the driver exits without waiting for either
"""
NAMES = ("sleeps_for_minutes", "never_scheduled")
TASKS = "/api/v0/tasks?detail=1&limit=100"


def _ours(tasks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in tasks if t["name"] in NAMES}


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, dict[str, dict[str, Any]]]]:
    """(bucket, session, the live dashboard's two tasks once the GCS failed them)."""
    tmp = tmp_path_factory.mktemp("gcs-failures")
    with head_with_collector(tmp, CLUSTER) as head:
        ray = head.ray
        workdir = tmp / "job"
        workdir.mkdir()
        (workdir / "failing.py").write_text(WORKLOAD)
        assert ray.submit("python failing.py", workdir, unique_id("gcs")) == "SUCCEEDED"
        live: dict[str, dict[str, Any]] = {}

        def both_failed() -> bool:
            live.update(_ours(requests.get(ray.dashboard_url + TASKS, timeout=30).json()["data"]["result"]["result"]))
            return len(live) == 2 and all(t["state"] == "FAILED" for t in live.values())

        wait_until(both_failed, 60, "the live dashboard to show both tasks FAILED (the GCS's 1 s and 15 s rules)")
        time.sleep(3)  # the GCS's worker and job events reach the collector
        session = ray.session_dir().name
        assert head.collector.terminate() == 0
        ray.stop()
        yield head.bucket, session, live


def test_the_history_shows_the_tasks_the_gcs_failed(
    stored: tuple[Path, str, dict[str, dict[str, Any]]], tmp_path: Path
) -> None:
    bucket, session, live = stored
    with HistoryServerProcess(bucket, tmp_path / "idx", "--storage-root-dir=hist") as history:
        client = history.session(CLUSTER.namespace, CLUSTER.name, session)
        answer = client.get(f"{history.url}{TASKS}", timeout=60).json()
    ours = _ours(answer["data"]["result"]["result"])
    assert set(ours) == set(NAMES)
    assert live["sleeps_for_minutes"]["error_message"].startswith("Worker running the task (")
    assert live["never_scheduled"]["error_message"].startswith("Job finishes (")
    for name in NAMES:
        mine, theirs = ours[name], live[name]
        for field in ("state", "error_type", "error_message", "worker_id", "job_id"):
            assert mine[field] == theirs[field], (name, field)
        assert [e["state"] for e in mine["events"]] == [e["state"] for e in theirs["events"]], name
        # The GCS stamps the worker's end time as it learnt it; the exported event may be a
        # millisecond later (observed: 1 ms). The job's end is the same instant.
        assert abs(mine["end_time_ms"] - theirs["end_time_ms"]) <= 5, (name, mine["end_time_ms"], theirs["end_time_ms"])

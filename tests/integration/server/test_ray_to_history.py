"""End to end with real Ray 2.60: a job runs under the collector, the cluster is
stopped, and the history server answers the Dashboard API for the dead session
with what the live dashboard said. Then a fresh ``ray start --head
--proxy-server-url=<history server>`` serves that dead session through Ray's own
dashboard port, as in the GKE guide."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from runtime.storage.layout import ClusterRef
from tests.integration.ray_harness import (
    SAMPLES,
    RayHead,
    head_with_collector,
    ray_available,
    unique_id,
    wait_until,
)
from tests.integration.server.harness import HistoryServerProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
]

CLUSTER = ClusterRef(namespace="default", name="raycluster-history")
LIVE_PATHS = ("/api/jobs/", "/api/v0/tasks?detail=1&limit=10000", "/logical/actors", "/nodes?view=summary")


@dataclass
class DeadSession:
    bucket: Path
    session: str
    node_id: str
    submission: str
    live: dict[str, Any]


@pytest.fixture(scope="module")
def dead_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeadSession]:
    tmp = tmp_path_factory.mktemp("ray-history")
    with head_with_collector(tmp, CLUSTER) as head:
        ray = head.ray
        workdir = tmp / "job"
        workdir.mkdir()
        shutil.copy(SAMPLES / "workload.py", workdir / "workload.py")
        submission = unique_id("wl")
        assert ray.submit("python workload.py", workdir, submission) == "SUCCEEDED"
        time.sleep(3)  # Ray's publisher flushes the last events every ~1 s
        live = {path: requests.get(ray.dashboard_url + path, timeout=30).json() for path in LIVE_PATHS}
        session, node = ray.session_dir().name, ray.node_id()
        assert head.collector.terminate() == 0
        ray.stop()  # the cluster is gone: only storage remains
        yield DeadSession(head.bucket, session, node, submission, live)


@pytest.fixture(scope="module")
def history(dead_session: DeadSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HistoryServerProcess]:
    cache = tmp_path_factory.mktemp("history-cache")
    with HistoryServerProcess(dead_session.bucket, cache / "idx", "--storage-root-dir=hist") as server:
        yield server


def failed_by_gcs_after_finishing(live_task: dict[str, Any]) -> bool:
    """Whether the live answer for an attempt comes from a race inside Ray, not from its events.

    When a worker dies, the GCS waits one second (``gcs_mark_task_failed_on_worker_dead_delay_ms``)
    and adds a FAILED (WORKER_DIED) at the death time to every attempt of that worker it holds
    no terminal state for. The owner reports FINISHED in its next flush (every second), so an
    attempt that finished just before its worker exited (``Quitter.quit`` calls
    ``exit_actor()``) is sometimes marked before the owner's FINISHED arrives. The GCS then
    holds both, and Ray's State API (``protobuf_to_task_state_dict`` in
    ``ray/util/state/common.py``) names as the state the last one in TaskStatus order: FAILED.
    The exported events hold the owner's FINISHED only, and no event says when it reached the
    GCS, so the history answers FINISHED; the live answer is FAILED in some runs only.
    """
    return (
        live_task["state"] == "FAILED"
        and live_task.get("error_type") == "WORKER_DIED"
        and any(event["state"] == "FINISHED" for event in live_task.get("events") or ())
    )


def test_dead_session_answers_like_the_live_dashboard(history: HistoryServerProcess, dead_session: DeadSession) -> None:
    clusters = requests.get(f"{history.url}/clusters", timeout=30).json()
    assert any(c["sessionName"] == dead_session.session and c["name"] == CLUSTER.name for c in clusters)
    client = history.session(CLUSTER.namespace, CLUSTER.name, dead_session.session)

    jobs = client.get(f"{history.url}/api/jobs/", timeout=30).json()
    job = next(j for j in jobs if j["submission_id"] == dead_session.submission)
    assert job["status"] == "SUCCEEDED"
    assert client.get(f"{history.url}/api/jobs/{dead_session.submission}", timeout=30).json()["job_id"] == job["job_id"]

    tasks = client.get(f"{history.url}/api/v0/tasks?detail=1&limit=10000", timeout=30).json()["data"]["result"]
    live_tasks = dead_session.live["/api/v0/tasks?detail=1&limit=10000"]["data"]["result"]
    ours = {(t["task_id"], t["attempt_number"]): t for t in tasks["result"]}
    theirs = {(t["task_id"], t["attempt_number"]): t for t in live_tasks["result"]}
    assert set(theirs) <= set(ours), "every task the live dashboard listed is in the history"
    for key, live_task in theirs.items():
        for field in ("name", "func_or_class_name", "type", "job_id", "actor_id", "parent_task_id"):
            assert ours[key][field] == live_task[field], (key, field)
        if failed_by_gcs_after_finishing(live_task):
            assert ours[key]["state"] == "FINISHED", (key, live_task["events"], ours[key]["events"])
        elif live_task["state"] in ("FINISHED", "FAILED"):
            assert ours[key]["state"] == live_task["state"], (key, live_task["events"], ours[key]["events"])

    actors = client.get(f"{history.url}/logical/actors", timeout=30).json()["data"]["actors"]
    live_actors = dead_session.live["/logical/actors"]["data"]["actors"]
    assert set(live_actors) <= set(actors)
    for actor_id, live_actor in live_actors.items():
        assert actors[actor_id]["className"] == live_actor["className"]

    nodes = client.get(f"{history.url}/nodes?view=summary", timeout=30).json()["data"]["summary"]
    assert [n["raylet"]["nodeId"] for n in nodes] == [dead_session.node_id]

    finished = next(t for t in tasks["result"] if t["state"] == "FINISHED" and t["type"] == "NORMAL_TASK"
                    and t.get("task_log_info"))  # fmt: skip
    out = client.get(
        f"{history.url}/api/v0/logs/file", params={"task_id": finished["task_id"], "suffix": "out"}, timeout=30
    )
    assert out.status_code == 200, out.text


def test_ray_proxy_server_url_serves_the_dead_session(
    history: HistoryServerProcess, dead_session: DeadSession, tmp_path: Path
) -> None:
    """The GKE guide's route: a local Ray head forwards the dashboard's backend
    requests to the history server (and falls back to itself on 404)."""
    viewer = RayHead("http://127.0.0.1:9", extra_args=(f"--proxy-server-url={history.url}",))
    try:
        viewer.start()
        client = requests.Session()
        entered = client.get(
            f"{viewer.dashboard_url}/enter_cluster/{CLUSTER.namespace}/raycluster/{CLUSTER.name}/{dead_session.session}",
            timeout=120,
        )
        assert entered.status_code == 200 and entered.json()["result"] == "success", entered.text
        assert client.cookies.get("session_name") == dead_session.session

        def jobs_from_history() -> bool:
            jobs = client.get(f"{viewer.dashboard_url}/api/jobs/", timeout=30).json()
            return any(j.get("submission_id") == dead_session.submission for j in jobs)

        wait_until(jobs_from_history, 30, "the dead session's jobs through Ray's dashboard")
        # A route the history server does not own falls back to Ray's own handler.
        version = client.get(f"{viewer.dashboard_url}/api/version", timeout=30)
        assert version.status_code == 200 and version.json()["ray_version"] == "2.60.0"
    finally:
        viewer.cleanup()

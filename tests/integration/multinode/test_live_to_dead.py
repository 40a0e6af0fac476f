"""Scenario 5, live to dead: the history server, started with ``--live-cluster`` naming
the running head (through the test's tunnel), serves the live Dashboard through its
proxy: the task list as the head answers it, a task's log as a live stream. The same
browser also entered the cluster's stored session by name while it ran. Then the
cluster is deleted: the live selection fails loudly (the proxy never falls back to
storage on its own), and the stored selection, the same cookies, now answers with
exactly the task set the live Dashboard showed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.multinode.cluster import CLUSTER, TwoNodeCluster
from tests.integration.ray_harness import unique_id
from tests.integration.server.harness import HistoryServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.multinode, pytest.mark.slow]

Task = tuple[str, int, str, str, str | None]


def task_set(tasks: list[dict[str, Any]]) -> set[Task]:
    return {(t["task_id"], t["attempt_number"], t["name"], t["state"], t["node_id"]) for t in tasks}


def tasks_of(client: requests.Session, url: str) -> list[dict[str, Any]]:
    answer = client.get(f"{url}/api/v0/tasks", params={"detail": 1, "limit": 10000}, timeout=60)
    assert answer.status_code == 200, answer.text[:500]
    return list(answer.json()["data"]["result"]["result"])


def read_stream_until(client: requests.Session, url: str, needle: bytes, timeout: float = 30) -> bytes:
    """Read a log stream until ``needle`` arrives, then hang up (a live stream never ends)."""
    seen = b""
    deadline = time.monotonic() + timeout
    with client.get(url, stream=True, timeout=timeout) as answer:
        assert answer.status_code == 200, answer.text[:500]
        for chunk in answer.iter_content(chunk_size=None):
            seen += chunk
            if needle in seen or time.monotonic() > deadline:
                break
    return seen


def test_live_dashboard_then_the_same_selection_from_storage(cluster: TwoNodeCluster, tmp_path: Path) -> None:
    submission = unique_id("live")
    cluster.submit("two_nodes.py", submission)
    assert cluster.wait_job(submission) == "SUCCEEDED", cluster.get(f"/api/jobs/{submission}")
    session = cluster.head.session_dir().name
    head_tasks, live_logs = cluster.caught_up_view(cluster.node_ids()[cluster.worker.ip])
    [worker_task, *_] = [t for t in head_tasks if t["name"] == "on_worker"]
    live_log = live_logs[(worker_task["task_id"], "out")]

    (tmp_path / "cache").mkdir()
    live_flag = f"--live-cluster={CLUSTER.namespace}/{CLUSTER.name}={cluster.dashboard_url}"
    with HistoryServerProcess(
        cluster.bucket, tmp_path / "cache" / "idx", "--storage-root-dir=hist", live_flag, "--kubernetes=off",
        "--proxy-timeout=10",
    ) as server:  # fmt: skip
        listed = requests.get(f"{server.url}/clusters", timeout=30).json()
        ours = [e["sessionName"] for e in listed if e["name"] == CLUSTER.name]
        assert ours == ["live", session], listed  # the live entry first, its stored session (marker) too

        # --- live: "latest" of a running cluster is the live Dashboard, through the proxy
        live = requests.Session()
        entered = live.get(f"{server.url}/enter_cluster/{CLUSTER.namespace}/{CLUSTER.name}/latest", timeout=30)
        assert entered.status_code == 200 and entered.json()["session"] == "live", entered.text
        proxied = tasks_of(live, server.url)
        assert task_set(proxied) == task_set(head_tasks)
        stream = read_stream_until(
            live, f"{server.url}/api/v0/logs/stream?task_id={worker_task['task_id']}&suffix=out", b"says hello"
        )  # fmt: skip
        assert b"on_worker(" in stream and b"says hello" in stream, stream[:500]

        # --- the same browser enters the stored session by name while the cluster runs
        stored = server.session(CLUSTER.namespace, CLUSTER.name, session)
        assert stored.cookies.get("session_name") == session
        tasks_of(stored, server.url)  # answered from what was shipped so far

        # --- the cluster is deleted
        for node in (cluster.head, cluster.worker):
            assert node.shutdown_collector() == 0, node.collector.log()[-3000:] if node.collector else ""
        cluster.stop_ray()

        gone = live.get(f"{server.url}/api/v0/tasks", params={"limit": 10}, timeout=60)
        assert gone.status_code == 502 and "cannot reach its dashboard" in gone.json()["msg"], gone.text[:500]

        # --- the same stored selection, now complete: exactly what the live Dashboard showed
        assert task_set(tasks_of(stored, server.url)) == task_set(head_tasks)
        log = stored.get(
            f"{server.url}/api/v0/logs/file", params={"task_id": worker_task["task_id"], "suffix": "out"}, timeout=60
        )  # fmt: skip
        assert log.status_code == 200 and "says hello" in log.text, log.text[:500]
        assert log.text == live_log, (log.text[:300], live_log[:300])

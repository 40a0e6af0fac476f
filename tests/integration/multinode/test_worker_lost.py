"""Scenario 2, worker lost mid-job: while a task and an actor run on the worker, every
process of the worker "pod" (raylet, Ray workers, collector) is SIGKILLed, as on a
spot reclaim. What the worker's collector had shipped stays in storage, untouched;
the head's events record the node's death; the history server shows the worker DEAD
with the death cause the live dashboard gave, and the task that failed with it."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtime.common.ids import to_hex_id
from tests.integration.multinode.cluster import CLUSTER, TwoNodeCluster
from tests.integration.ray_harness import stored_events, unique_id, wait_until
from tests.integration.server.harness import HistoryServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.multinode, pytest.mark.slow]


def files_with_sizes(root: Path) -> dict[Path, int]:
    return {p.relative_to(root): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_a_lost_worker_keeps_what_it_shipped_and_is_dead_in_history(cluster: TwoNodeCluster, tmp_path: Path) -> None:
    submission = unique_id("lost")
    cluster.submit("lost_worker.py", submission)
    session = cluster.head.session_dir().name
    ids = cluster.node_ids()
    head_id, worker_id = ids[cluster.head.ip], ids[cluster.worker.ip]
    worker_prefix = cluster.cluster_prefix() / session / worker_id

    def task_running() -> bool:
        tasks = cluster.get("/api/v0/tasks?detail=1&limit=10000")["data"]["result"]["result"]
        return any(t["name"] == "outlives_its_node" and t["state"] == "RUNNING" for t in tasks)

    wait_until(task_running, 180, "outlives_its_node running on the worker")

    # Live log shipping: the running task's line reaches storage while the node lives.
    def line_shipped() -> bool:
        return any(b"outlives_its_node started" in p.read_bytes() for p in (worker_prefix / "logs").glob("worker-*"))

    wait_until(line_shipped, 60, "the worker's running task's output in storage")
    live_running = cluster.get("/api/v0/tasks?detail=1&limit=10000")["data"]["result"]["result"]
    [running_id] = [t["task_id"] for t in live_running if t["name"] == "outlives_its_node"]

    # The log file is found by the attempt's taskLogInfo, which the worker reports in a
    # lifecycle event of its own (flushed every 1 s, then a 3 s rotation): wait for that
    # event in storage rather than a fixed time, which a loaded machine outran once.
    def log_info_shipped() -> bool:
        return any(
            isinstance(payload, dict)
            and payload.get("taskLogInfo")
            and to_hex_id(str(payload.get("taskId"))) == running_id
            for event in stored_events(worker_prefix)
            for payload in [event.get("taskLifecycleEvent")]
        )

    wait_until(log_info_shipped, 60, "the running task's taskLogInfo in storage")
    time.sleep(4)  # one more rotation (3 s): the worker's other events so far are uploaded too
    shipped_before = files_with_sizes(worker_prefix)
    acked_before = cluster.worker.acknowledged()

    # --- the worker pod is gone: every process in its namespace, at once
    cluster.topology.kill_all(cluster.worker.ns)
    # SIGKILL is delivered asynchronously: the namespace empties a moment later.
    wait_until(lambda: not cluster.topology.pids(cluster.worker.ns), 30, "the worker's namespace to be empty")

    def worker_dead() -> bool:
        nodes = cluster.get("/api/v0/nodes?limit=100")["data"]["result"]["result"]
        return any(n["node_id"] == worker_id and n["state"] == "DEAD" for n in nodes)

    wait_until(worker_dead, 120, "the head to declare the worker DEAD")
    assert cluster.wait_job(submission) == "SUCCEEDED", cluster.get(f"/api/jobs/{submission}")
    live_summary = {n["raylet"]["nodeId"]: n for n in cluster.get("/nodes?view=summary")["data"]["summary"]}
    live_tasks = cluster.get("/api/v0/tasks?detail=1&limit=10000")["data"]["result"]["result"]
    [live_failed] = [t for t in live_tasks if t["name"] == "outlives_its_node"]
    assert live_failed["state"] == "FAILED", live_failed
    time.sleep(3)  # Ray's publisher flushes the last events every ~1 s

    assert cluster.head.shutdown_collector() == 0
    cluster.head.stop_ray()

    # --- what the worker shipped before it died is all there, unchanged
    shipped_after = files_with_sizes(worker_prefix)
    assert shipped_after == shipped_before, "nothing of the dead worker changed or vanished in storage"
    worker_stored = {str(e["eventId"]): e for e in stored_events(worker_prefix)}
    worker_acked = cluster.worker.acknowledged()
    assert len(worker_stored) > 0
    # Stored are only acknowledged events; the tail still in the pod's spool died with it.
    assert set(worker_stored) <= set(worker_acked), set(worker_stored) - set(worker_acked)
    assert set(acked_before) <= set(worker_acked)

    # --- the head's events: exactly what it acknowledged, including the worker's death
    head_prefix = cluster.cluster_prefix() / session / head_id
    head_stored = {str(e["eventId"]): e for e in stored_events(head_prefix)}
    head_acked = cluster.head.acknowledged()
    assert set(head_stored) == set(head_acked), (len(head_stored), len(head_acked))
    assert Counter(str(e["eventType"]) for e in head_stored.values()) == Counter(
        str(e["eventType"]) for e in head_acked.values()
    )
    deaths = [
        transition
        for event in head_stored.values()
        if event["eventType"] == "NODE_LIFECYCLE_EVENT"
        for payload in [event.get("nodeLifecycleEvent")]
        if isinstance(payload, dict) and to_hex_id(str(payload.get("nodeId"))) == worker_id
        for transition in payload.get("stateTransitions", [])
        if transition.get("state") == "DEAD"
    ]
    assert deaths, "the head's events record the worker's death"

    # --- the history server: the worker DEAD with its cause, the task that failed with it
    (tmp_path / "cache").mkdir()
    with HistoryServerProcess(cluster.bucket, tmp_path / "cache" / "idx", "--storage-root-dir=hist") as server:
        client = server.session(CLUSTER.namespace, CLUSTER.name, session)

        def get(path: str, **params: Any) -> Any:
            answer = client.get(f"{server.url}{path}", params=params, timeout=60)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])
            return answer.json()

        summary = {n["raylet"]["nodeId"]: n for n in get("/nodes", view="summary")["data"]["summary"]}
        assert set(summary) == {head_id, worker_id}
        worker = summary[worker_id]["raylet"]
        live_worker = live_summary[worker_id]["raylet"]
        assert worker["state"] == "DEAD" and worker["stateMessage"], worker
        assert worker["stateMessage"] == live_worker.get("stateMessage"), (worker, live_worker)
        # The cluster is gone (no live cluster lists it): the head, ALIVE in its events, is
        # shown DEAD as the session ended (#19), unlike the worker, whose death has a cause.
        head = summary[head_id]["raylet"]
        assert head["state"] == "DEAD" and head["stateMessage"].startswith("The cluster ended"), head

        tasks = get("/api/v0/tasks", detail=1, limit=10000)["data"]["result"]["result"]
        [failed] = [t for t in tasks if t["name"] == "outlives_its_node"]
        assert failed["task_id"] == live_failed["task_id"] and failed["node_id"] == worker_id
        assert failed["state"] == "FAILED"
        assert failed["error_type"] == live_failed["error_type"], (failed, live_failed)
        warm = [t for t in tasks if t["name"] == "warm_up"]
        assert [t["state"] for t in warm] == ["FINISHED"] * 3

        actors = get("/logical/actors")["data"]["actors"]
        [keeper] = [a for a in actors.values() if a["className"] == "Keeper"]
        assert keeper["state"] == "DEAD" and keeper["address"]["nodeId"] == worker_id

        # The worker's shipped output, by task id, from the dead node's prefix.
        out = client.get(
            f"{server.url}/api/v0/logs/file", params={"task_id": failed["task_id"], "suffix": "out"}, timeout=60
        )  # fmt: skip
        assert out.status_code == 200 and "outlives_its_node started" in out.text, out.text[:500]

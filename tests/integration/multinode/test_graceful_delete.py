"""Scenario 1, graceful delete: a job runs on both nodes of a two-node cluster (each
node in its own network namespace, with its own collector); then both collectors get
SIGTERM and Ray stops, as when the RayCluster is deleted. Storage holds exactly the
events each collector acknowledged, under its own node's prefix, and every log byte
of both nodes; the history server shows both nodes, tasks from both, and the
worker's logs by task id."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.multinode.cluster import CLUSTER, TwoNodeCluster, compare_logs
from tests.integration.ray_harness import stored_events, unique_id
from tests.integration.server.harness import HistoryServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.multinode, pytest.mark.slow]


def test_graceful_delete_keeps_both_nodes_complete(cluster: TwoNodeCluster, tmp_path: Path) -> None:
    submission = unique_id("two")
    cluster.submit("two_nodes.py", submission)
    assert cluster.wait_job(submission) == "SUCCEEDED", cluster.get(f"/api/jobs/{submission}")
    session = cluster.head.session_dir().name
    assert cluster.worker.session_dir().name == session, "one Ray session across the cluster"
    ids = cluster.node_ids()
    head_id, worker_id = ids[cluster.head.ip], ids[cluster.worker.ip]
    assert head_id != worker_id

    # The reference is the live dashboard once it has caught up with the job.
    live_tasks, live_logs = cluster.caught_up_view(worker_id)
    time.sleep(3)  # Ray's publisher flushes the last events every ~1 s

    # --- the RayCluster is deleted: collectors get SIGTERM, Ray stops
    sigterm_at = time.time()
    for node in (cluster.head, cluster.worker):
        assert node.shutdown_collector() == 0, node.collector.log()[-3000:] if node.collector else ""
        log = node.collector.log() if node.collector else ""
        assert "shutdown finished" in log and "LEFT ON DISK" not in log, log[-3000:]
    cluster.head.stop_ray()
    cluster.worker.stop_ray()

    # --- events: exactly what each node's collector acknowledged, under that node's prefix
    session_prefix = cluster.cluster_prefix() / session
    assert {p.name for p in session_prefix.iterdir()} >= {head_id, worker_id, "fetched_endpoints"}
    for node, node_id in ((cluster.head, head_id), (cluster.worker, worker_id)):
        acked = node.acknowledged()
        stored = {str(e["eventId"]): e for e in stored_events(session_prefix / node_id)}
        assert len(acked) > 0, f"the {node.role} acknowledged no event"
        assert set(stored) == set(acked), (
            f"{node.role}: {len(acked)} acknowledged, {len(stored)} stored; "
            f"missing {len(set(acked) - set(stored))}, extra {len(set(stored) - set(acked))}"
        )
        assert Counter(str(e["eventType"]) for e in stored.values()) == Counter(
            str(e["eventType"]) for e in acked.values()
        )
    # Definitions come from the owner (the driver, on the head); the worker reports what ran there.
    worker_types = Counter(str(e["eventType"]) for e in cluster.worker.acknowledged().values())
    for required in ("TASK_LIFECYCLE_EVENT", "TASK_PROFILE_EVENT"):
        assert worker_types[required] > 0, (required, worker_types)

    # --- logs: every byte of both nodes, each under its own node's prefix
    for node, node_id in ((cluster.head, head_id), (cluster.worker, worker_id)):
        files, on_disk, in_storage = compare_logs(
            node.session_dir() / "logs", session_prefix / node_id / "logs", sigterm_at
        )  # fmt: skip
        assert files > 10 and on_disk == in_storage, (node.role, files, on_disk, in_storage)
    assert (cluster.bucket / cluster.layout.marker_key(CLUSTER, session)).exists()

    # --- the history server on what was stored
    (tmp_path / "cache").mkdir()
    with HistoryServerProcess(cluster.bucket, tmp_path / "cache" / "idx", "--storage-root-dir=hist") as server:
        client = server.session(CLUSTER.namespace, CLUSTER.name, session)

        def get(path: str, **params: Any) -> Any:
            answer = client.get(f"{server.url}{path}", params=params, timeout=60)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])
            return answer

        summary = get("/nodes", view="summary").json()["data"]["summary"]
        nodes = {n["raylet"]["nodeId"]: n for n in summary}
        assert set(nodes) == {head_id, worker_id}
        assert nodes[worker_id]["ip"] == cluster.worker.ip and nodes[head_id]["ip"] == cluster.head.ip
        assert nodes[head_id]["raylet"]["isHeadNode"] and not nodes[worker_id]["raylet"]["isHeadNode"]

        tasks = get("/api/v0/tasks", detail=1, limit=10000).json()["data"]["result"]["result"]
        by_name: dict[str, list[dict[str, Any]]] = {}
        for task in tasks:
            by_name.setdefault(task["name"], []).append(task)
        assert [t["state"] for t in by_name["on_head"]] == ["FINISHED"] * 3
        assert [t["state"] for t in by_name["on_worker"]] == ["FINISHED"] * 3
        assert {t["node_id"] for t in by_name["on_head"]} == {head_id}
        assert {t["node_id"] for t in by_name["on_worker"]} == {worker_id}
        [failed] = by_name["fails_on_worker"]
        assert failed["state"] == "FAILED" and failed["node_id"] == worker_id
        assert "multinode: this task fails on the worker" in str(failed.get("error_message")), failed
        assert {t["node_id"] for t in by_name["Tally.add"]} == {worker_id}
        live_ids = {(t["task_id"], t["attempt_number"]) for t in live_tasks}
        assert live_ids <= {(t["task_id"], t["attempt_number"]) for t in tasks}

        actors = get("/logical/actors").json()["data"]["actors"]
        [tally] = [a for a in actors.values() if a["className"] == "Tally"]
        assert tally["address"]["nodeId"] == worker_id

        # The worker's logs, found by task id (the worker's own prefix), as the live dashboard gave them
        for (task_id, suffix), live_text in live_logs.items():
            assert get("/api/v0/logs/file", task_id=task_id, suffix=suffix).text == live_text, (task_id, suffix)

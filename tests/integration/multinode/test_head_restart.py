"""Scenario 3, head restart: Ray stops on both nodes and starts again in the same "pods"
(the head container restarts; without GCS fault tolerance the worker's Ray container
follows), while both collectors keep running. The new Ray session gets new node IDs;
the first session's logs, left behind in its session directory, reach storage through
``prev-logs`` as KubeRay's collector ships them (moved there, uploaded, deleted). Both
sessions are stored completely, each under its own nodes, and both are listed and
served by the history server."""

from __future__ import annotations

import json
import math
import shutil
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import requests

from runtime.collector.session_files import PREV_LOGS
from runtime.storage.layout import ENDPOINTS_DIR, endpoint_storage_name
from tests.integration.multinode.cluster import CLUSTER, PATH_CHECK, Node, TwoNodeCluster, compare_logs
from tests.integration.ray_harness import stored_events, unique_id, wait_until
from tests.integration.server.harness import HistoryServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.multinode, pytest.mark.slow]


def run_job(cluster: TwoNodeCluster, prefix: str) -> set[tuple[str, int, str | None]]:
    """``two_nodes.py`` to completion; (task id, attempt, node id) of every task the live
    dashboard lists. Task IDs recur across sessions (job IDs restart at 1): the node
    IDs tell the two sessions' tasks apart."""
    submission = unique_id(prefix)
    cluster.submit("two_nodes.py", submission)
    assert cluster.wait_job(submission) == "SUCCEEDED", cluster.get(f"/api/jobs/{submission}")
    # A job's status exists only in the dashboard's /api/jobs/ answer (no event carries it):
    # the head's collector stores it every poll. A head that stops before the next poll
    # leaves the status it last stored, so wait for that poll, as a job's end is not the
    # cluster's end in real life either.
    stored = (
        cluster.cluster_prefix() / cluster.head.session_dir().name / ENDPOINTS_DIR / endpoint_storage_name("/api/jobs/")
    )

    def status_stored() -> bool:
        try:
            jobs = json.loads(stored.read_bytes())
        except (OSError, ValueError):
            return False
        return any(j.get("submission_id") == submission and j.get("status") == "SUCCEEDED" for j in jobs)

    wait_until(status_stored, 60, f"the stored /api/jobs/ snapshot shows {submission} SUCCEEDED")
    tasks = cluster.live_tasks()  # node_id is None for an actor's creation task here, live and stored
    return {(str(t["task_id"]), int(t["attempt_number"]), t["node_id"]) for t in tasks}


def acknowledged_in(node: Node, session: str) -> bool:
    return any(e["sessionName"] == session for e in node.acknowledged().values())


def test_head_restart_stores_both_sessions(cluster: TwoNodeCluster, tmp_path: Path) -> None:
    tasks_1 = run_job(cluster, "first")
    session_1 = cluster.head.session_dir().name
    ids_1 = cluster.node_ids()
    time.sleep(3)  # Ray's publisher flushes the last events every ~1 s

    # --- the head restarts: Ray stops everywhere, the collectors stay
    cluster.stop_ray()
    # What the first session left on each node, as it will never change again: the
    # collector moves it away once the next session starts, so the test keeps a copy.
    left_1: dict[str, Path] = {}
    for node in (cluster.head, cluster.worker):
        assert node.session_dir().name == session_1
        left_1[node.role] = tmp_path / f"{node.role}-{session_1}-logs"
        shutil.copytree(node.session_dir() / "logs", left_1[node.role], symlinks=True)
    cluster.start_ray()
    session_2 = cluster.head.session_dir().name
    assert session_2 != session_1 and cluster.worker.session_dir().name == session_2
    ids_2 = cluster.node_ids()
    assert set(ids_2) == set(ids_1) == {cluster.head.ip, cluster.worker.ip}
    assert not set(ids_1.values()) & set(ids_2.values()), "a new session has new node IDs"
    tasks_2 = run_job(cluster, "second")
    assert {t[2] for t in tasks_2} - {None} <= set(ids_2.values()), "the new head lists only the new session's tasks"

    # --- the first session's logs go through prev-logs: moved out, shipped, deleted
    for node in (cluster.head, cluster.worker):
        old_logs = node.tmp_root / session_1 / "logs"
        prev = node.tmp_root / PREV_LOGS / session_1

        def shipped_from_prev(old: Path = old_logs, moved: Path = prev) -> bool:
            return not old.exists() and not moved.exists()

        wait_until(shipped_from_prev, 60, f"{session_1}'s logs on the {node.role} moved to prev-logs and shipped")
        assert f"shipping logs of session {session_2} (previous: {session_1})" in (
            node.collector.log() if node.collector else ""
        )
    for node in (cluster.head, cluster.worker):
        # Ray exports asynchronously: each node's first events of the new session before the stop.
        wait_until(partial(acknowledged_in, node, session_2), 60, f"the {node.role}'s events of {session_2}")
    time.sleep(3)  # Ray's publisher flushes the last events every ~1 s

    # --- the cluster is deleted
    sigterm_at = time.time()
    for node in (cluster.head, cluster.worker):
        assert node.shutdown_collector() == 0, node.collector.log()[-3000:] if node.collector else ""
        log = node.collector.log() if node.collector else ""
        assert "shutdown finished" in log and "LEFT ON DISK" not in log, log[-3000:]
    cluster.stop_ray()

    # --- each session holds its own two nodes, nothing filed under the other session's;
    # besides them the head's snapshots, Ray's metrics config (#20) and the end marker: the
    # first session's written when the new session started, the second's at shutdown.
    prefix = cluster.cluster_prefix()
    for session, ids in ((session_1, ids_1), (session_2, ids_2)):
        entries = {p.name for p in (prefix / session).iterdir()}
        assert entries - {"metrics"} == {*ids.values(), "fetched_endpoints", "session_ended.json"}, session

    # --- events: each session's, exactly as acknowledged, under that session's node
    for node in (cluster.head, cluster.worker):
        acked = node.acknowledged()
        sessions = Counter(str(e["sessionName"]) for e in acked.values())
        assert set(sessions) == {session_1, session_2}, (node.role, sessions)
        for session, ids in ((session_1, ids_1), (session_2, ids_2)):
            node_prefix = prefix / session / ids[node.ip]
            stored = {str(e["eventId"]): e for e in stored_events(node_prefix)}
            expected = {k: e for k, e in acked.items() if e["sessionName"] == session}
            assert set(stored) == set(expected), (
                f"{node.role} {session}: {len(expected)} acknowledged, {len(stored)} stored; "
                f"missing {len(set(expected) - set(stored))}, extra {len(set(stored) - set(expected))}"
            )
            assert Counter(str(e["eventType"]) for e in stored.values()) == Counter(
                str(e["eventType"]) for e in expected.values()
            )

    # --- logs: the first session byte for byte as it was left, the second as on disk
    for node in (cluster.head, cluster.worker):
        files, on_disk, in_storage = compare_logs(
            left_1[node.role], prefix / session_1 / ids_1[node.ip] / "logs", math.inf
        )  # fmt: skip
        assert files > 10 and on_disk == in_storage, (node.role, session_1, files, on_disk, in_storage)
        files, on_disk, in_storage = compare_logs(
            node.session_dir() / "logs", prefix / session_2 / ids_2[node.ip] / "logs", sigterm_at
        )  # fmt: skip
        assert files > 10 and on_disk == in_storage, (node.role, session_2, files, on_disk, in_storage)
    for session in (session_1, session_2):
        assert (cluster.bucket / cluster.layout.marker_key(CLUSTER, session)).exists(), session

    # --- the history server lists both sessions and serves each with its own nodes and tasks
    (tmp_path / "cache").mkdir()
    with HistoryServerProcess(cluster.bucket, tmp_path / "cache" / "idx", "--storage-root-dir=hist") as server:
        listed = server_get(server.url, "/clusters", None)
        ours = [e["sessionName"] for e in listed if e["name"] == CLUSTER.name]
        assert ours == [session_2, session_1], listed  # newest first
        for session, ids, live_tasks in ((session_1, ids_1, tasks_1), (session_2, ids_2, tasks_2)):
            client = server.session(CLUSTER.namespace, CLUSTER.name, session)
            summary = server_get(server.url, "/nodes?view=summary", client)["data"]["summary"]
            assert {n["raylet"]["nodeId"]: n["ip"] for n in summary} == {v: k for k, v in ids.items()}, session
            tasks = server_get(server.url, "/api/v0/tasks?detail=1&limit=10000", client)["data"]["result"]["result"]
            assert {(t["task_id"], t["attempt_number"], t["node_id"]) for t in tasks} == live_tasks, session
            jobs = server_get(server.url, "/api/jobs/", client)
            ours = [j for j in jobs if not str(j.get("submission_id") or "").startswith(PATH_CHECK)]
            assert [j["status"] for j in ours] == ["SUCCEEDED"], (session, jobs)


def server_get(url: str, path: str, client: requests.Session | None) -> Any:
    answer = (client or requests.Session()).get(f"{url}{path}", timeout=60)
    assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])
    return answer.json()

"""Scenario 4, storage outage across shutdown: storage (fake-gcs-server in its own
namespace on the cluster's bridge) becomes unreachable, a job runs on both nodes,
and both collectors get SIGTERM while it is still down: they exit within their
shutdown deadline and leave the event spool on disk. Ray stops, storage returns,
and the collectors start again on the same spool and Ray temp root.

In Kubernetes this is a RayCluster deleted, or its pods evicted, during a storage
or network outage, whose pods come back on the same node with the same
``emptyDir`` volumes (the kubelet restarting the collector container, or the pod
re-created before the volume was cleaned): the restarted collector finds the spool
and the logs of the finished session. Then every event a collector acknowledged is
stored exactly once under its node's prefix, every log file of both nodes with its
full size, and the history server on the bucket shows both nodes and all tasks."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.multinode.cluster import CLUSTER, Node, TwoNodeCluster, compare_logs
from tests.integration.multinode.netns import Topology
from tests.integration.multinode.storage_host import StorageHost, running_storage
from tests.integration.ray_harness import stored_events, unique_id, wait_until
from tests.integration.server.harness import HistoryServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.multinode, pytest.mark.slow]

#: Short, to keep the scenario quick; production's default is 25 s.
SHUTDOWN_DEADLINE = 10.0
#: Past the deadline, for the interpreter to exit (threads still blocked on storage).
EXIT_SLACK = 5.0


@pytest.fixture
def storage(topology: Topology, tmp_path: Path) -> Iterator[StorageHost]:
    with running_storage(topology, tmp_path, "outage-bucket") as host:
        yield host


@pytest.fixture
def gcs_cluster(topology: Topology, tmp_path: Path, storage: StorageHost) -> Iterator[TwoNodeCluster]:
    env = {**storage.env(), "RAY_COLLECTOR_SHUTDOWN_DEADLINE": f"{SHUTDOWN_DEADLINE:g}s"}
    built = TwoNodeCluster(topology, tmp_path, tmp_path / "unused-local-bucket", CLUSTER, storage_env=env)
    try:
        built.start()
        yield built
    finally:
        built.cleanup()


def spooled(node: Node) -> list[Path]:
    """Event files waiting in the node's spool (rotated, compressed or still active)."""
    spool = node.tmp_root / "event-data"
    return [p for p in spool.rglob("*.jsonl*") if p.is_file() and "quarantine" not in p.parts]


def spool_empty(node: Node) -> bool:
    return not spooled(node)


def sigterm_both(nodes: tuple[Node, ...]) -> dict[str, tuple[int | None, float]]:
    """SIGTERM to every collector at once (the pods are deleted together); exit code and seconds each."""
    sent = time.monotonic()
    for node in nodes:
        assert node.collector is not None
        node.collector.send(signal.SIGTERM)
    result: dict[str, tuple[int | None, float]] = {}
    for node in nodes:
        assert node.collector is not None
        try:
            code: int | None = node.collector.wait(SHUTDOWN_DEADLINE + 60)
        finally:
            node.collector.stop(signal.SIGKILL, timeout=10, group=True)
        result[node.role] = (code, time.monotonic() - sent)
    return result


def test_storage_outage_across_shutdown_loses_nothing(
    gcs_cluster: TwoNodeCluster, storage: StorageHost, tmp_path: Path
) -> None:
    cluster = gcs_cluster
    nodes = (cluster.head, cluster.worker)
    session = cluster.head.session_dir().name
    ids = cluster.node_ids()
    head_id, worker_id = ids[cluster.head.ip], ids[cluster.worker.ip]
    marker = cluster.layout.marker_key(CLUSTER, session)
    with storage.open_store() as store:  # the session is listed before the outage starts
        wait_until(lambda: store.exists(marker), 60, "the session marker in storage")

    # --- storage goes away; the job runs during the outage
    storage.cut()
    assert not any(storage.reachable_from(node.ns) for node in nodes)
    submission = unique_id("outage")
    cluster.submit("two_nodes.py", submission)
    assert cluster.wait_job(submission) == "SUCCEEDED", cluster.get(f"/api/jobs/{submission}")
    live_tasks, live_logs = cluster.caught_up_view(worker_id)
    time.sleep(3)  # Ray's publisher flushes the last events every ~1 s

    # --- pods deleted while storage is still down: both collectors get SIGTERM, then Ray stops
    sigterm_at = time.time()
    exits = sigterm_both(nodes)
    for node in nodes:
        code, seconds = exits[node.role]
        log = node.collector.log() if node.collector else ""
        assert code == 0, (node.role, code, log[-3000:])
        assert seconds <= SHUTDOWN_DEADLINE + EXIT_SLACK, (node.role, seconds, log[-3000:])
        assert "events LEFT ON DISK" in log, log[-3000:]
    left = {node.role: len(spooled(node)) for node in nodes}
    assert all(left.values()), f"the spool kept no event file: {left}"
    cluster.stop_ray()

    # --- storage returns; the collectors start again on the same spool and temp root
    storage.restore()
    for node in nodes:
        wait_until(partial(storage.reachable_from, node.ns), 30, f"storage from {node.ns}")
        node.start_collector(recorder=False)  # the recorder kept its record across the restart
    for node in nodes:
        wait_until(partial(spool_empty, node), 120, f"the {node.role}'s spool uploaded", interval=1.0)

    stored_dir = tmp_path / "stored"
    prefix = cluster.layout.cluster_prefix(CLUSTER)
    session_prefix = stored_dir / prefix / session

    last_gap = ["nothing compared yet"]

    def logs_complete() -> bool:
        storage.download(prefix, stored_dir)
        try:
            for node, node_id in ((cluster.head, head_id), (cluster.worker, worker_id)):
                compare_logs(node.session_dir() / "logs", session_prefix / node_id / "logs", sigterm_at)
        except AssertionError as gap:
            last_gap[0] = str(gap)
            return False
        return True

    try:
        wait_until(logs_complete, 120, "every log byte of both nodes in storage", interval=2.0)
    except TimeoutError as timeout:  # say which file was still missing, and the collectors' view
        logs = {node.role: node.collector.log()[-2000:] if node.collector else "" for node in nodes}
        raise AssertionError(f"{timeout}; last gap: {last_gap[0]}; collector logs: {logs}") from timeout

    # --- events: each acknowledged event stored exactly once, under its node's prefix
    counts: dict[str, tuple[int, int]] = {}
    for node, node_id in ((cluster.head, head_id), (cluster.worker, worker_id)):
        acked = node.acknowledged()
        lines = list(stored_events(session_prefix / node_id))
        stored = Counter(str(e["eventId"]) for e in lines)
        counts[node.role] = (len(acked), len(lines))
        assert len(acked) > 0, f"the {node.role} acknowledged no event"
        assert [i for i, n in stored.items() if n > 1] == [], f"{node.role}: events stored twice"
        assert set(stored) == set(acked), (
            f"{node.role}: {len(acked)} acknowledged, {len(lines)} stored; "
            f"missing {len(set(acked) - set(stored))}, extra {len(set(stored) - set(acked))}"
        )
    worker_types = Counter(str(e["eventType"]) for e in cluster.worker.acknowledged().values())
    for required in ("TASK_LIFECYCLE_EVENT", "TASK_PROFILE_EVENT"):
        assert worker_types[required] > 0, (required, worker_types)

    # --- logs: every file of both nodes with its full size
    for node, node_id in ((cluster.head, head_id), (cluster.worker, worker_id)):
        files, on_disk, in_storage = compare_logs(
            node.session_dir() / "logs", session_prefix / node_id / "logs", sigterm_at
        )  # fmt: skip
        assert files > 10 and on_disk == in_storage, (node.role, files, on_disk, in_storage)
    print(f"storage outage: events (acknowledged, stored) {counts}, spool files at SIGTERM {left}, exits {exits}")

    # --- the restarted collectors shut down cleanly now that storage is back
    again = sigterm_both(nodes)
    for node in nodes:
        text = node.collector.log() if node.collector else ""
        assert again[node.role][0] == 0, (node.role, text[-3000:])
        assert text.count("events all uploaded, logs all shipped") == 1, text[-3000:]

    # --- the history server on the bucket
    (tmp_path / "cache").mkdir()
    with HistoryServerProcess(
        tmp_path / "unused-local-bucket", tmp_path / "cache" / "idx", "--storage-backend=gcs",
        "--storage-root-dir=hist", env=storage.test_env(),
    ) as server:  # fmt: skip
        client = server.session(CLUSTER.namespace, CLUSTER.name, session)

        def get(path: str, **params: Any) -> requests.Response:
            answer = client.get(f"{server.url}{path}", params=params, timeout=60)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:500])
            return answer

        summary = get("/nodes", view="summary").json()["data"]["summary"]
        assert {n["raylet"]["nodeId"] for n in summary} == {head_id, worker_id}
        tasks = get("/api/v0/tasks", detail=1, limit=10000).json()["data"]["result"]["result"]
        states = Counter((t["name"], t["state"], t["node_id"]) for t in tasks)
        assert states[("on_head", "FINISHED", head_id)] == 3, states
        assert states[("on_worker", "FINISHED", worker_id)] == 3, states
        assert states[("fails_on_worker", "FAILED", worker_id)] == 1, states
        assert states[("Tally.add", "FINISHED", worker_id)] == 3, states
        live_ids = {(t["task_id"], t["attempt_number"]) for t in live_tasks}
        assert live_ids <= {(t["task_id"], t["attempt_number"]) for t in tasks}
        actors = get("/logical/actors").json()["data"]["actors"]
        assert [a["address"]["nodeId"] for a in actors.values() if a["className"] == "Tally"] == [worker_id]
        for (task_id, suffix), live_text in live_logs.items():
            assert get("/api/v0/logs/file", task_id=task_id, suffix=suffix).text == live_text, (task_id, suffix)

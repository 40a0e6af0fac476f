"""The collector beside a real Ray 2.60 head: a submitted job with named, failing,
retried and nested tasks, actors (one killed, one failing, one exiting) and a
placement group. After SIGTERM, storage must hold the whole key tree, every event
the collector acknowledged (per type, exactly), complete logs and the marker."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.ray_harness import (
    SAMPLES,
    CollectorProcess,
    RayHead,
    RecordingProxy,
    head_with_collector,
    ray_available,
    stored_events,
    unique_id,
    wait_until,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
]

CLUSTER = ClusterRef(namespace="default", name="raycluster-it")


@dataclass
class Run:
    ray: RayHead
    collector: CollectorProcess
    proxy: RecordingProxy
    bucket: Path
    layout: KeyLayout
    workdir: Path

    def prefix(self) -> Path:
        return self.bucket / self.layout.cluster_prefix(CLUSTER)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    with head_with_collector(tmp_path, CLUSTER) as head:
        workdir = tmp_path / "job"
        workdir.mkdir()
        shutil.copy(SAMPLES / "workload.py", workdir / "workload.py")
        yield Run(head.ray, head.collector, head.proxy, head.bucket, KeyLayout("hist"), workdir)


def test_a_real_session_is_collected_completely(run: Run) -> None:
    submission = unique_id("wl")
    status = run.ray.submit("python workload.py", run.workdir, submission)
    assert status == "SUCCEEDED"
    session = run.ray.session_dir().name
    node = run.ray.node_id()
    session_prefix = run.prefix() / session

    # A line a worker wrote is in storage while the node runs (interval 2 s here).
    driver_log = session_prefix / node / "logs" / f"job-driver-{submission}.log"
    wait_until(driver_log.exists, 30, "the driver log to be shipped while Ray runs")
    # Let Ray's publisher flush the last events (it sends every ~0.1-1 s).
    time.sleep(3)

    sigterm_at = time.time()
    assert run.collector.terminate() == 0
    log = run.collector.log()
    assert "shutdown finished" in log and "LEFT ON DISK" not in log, log[-3000:]

    # --- the key tree
    marker = run.bucket / run.layout.marker_key(CLUSTER, session)
    assert marker.exists() and marker.stat().st_size == 0
    endpoints = session_prefix / "fetched_endpoints"
    for name in (
        "restful__api__v0__cluster_metadata",
        "restful__timezone",
        "restful__api__jobs",
        "restful__api__v0__placement_groups?detail=1&limit=10000",
    ):
        assert (endpoints / name).exists(), f"missing snapshot {name}"
    jobs = json.loads((endpoints / "restful__api__jobs").read_bytes())
    assert any(j.get("submission_id") == submission and j["status"] == "SUCCEEDED" for j in jobs)
    assert list((session_prefix / node / "node_events").glob(f"{node}-*.jsonl"))
    job_dirs = {p.name for p in (session_prefix / node / "job_events").iterdir()}
    assert "02000000" in job_dirs or len(job_dirs) >= 2, job_dirs

    # --- every acknowledged event stored, per type, nothing else
    acked = run.proxy.acknowledged_events()
    stored = {str(e["eventId"]): e for e in stored_events(run.prefix())}
    assert set(stored) == set(acked)
    sent_types = Counter(str(e["eventType"]) for e in acked.values())
    stored_types = Counter(str(e["eventType"]) for e in stored.values())
    assert stored_types == sent_types
    for required in (
        "TASK_DEFINITION_EVENT",
        "TASK_LIFECYCLE_EVENT",
        "ACTOR_LIFECYCLE_EVENT",
        "DRIVER_JOB_DEFINITION_EVENT",
    ):
        assert stored_types[required] > 0, required

    # --- logs complete: every log file Ray wrote before the collector stopped
    local_logs = run.ray.session_dir() / "logs"
    checked = 0
    for path in local_logs.rglob("*"):
        if not path.is_file() or path.stat().st_mtime >= sigterm_at:
            continue  # written after the collector was told to stop
        remote = session_prefix / node / "logs" / path.relative_to(local_logs)
        assert remote.exists(), f"log {path.name} not shipped"
        assert remote.read_bytes() == path.read_bytes(), f"log {path.name} incomplete"
        checked += 1
    assert checked > 20
    worker_outs = [p for p in (session_prefix / node / "logs").glob("worker-*.out") if p.stat().st_size]
    assert any(b"[stdout] square(" in p.read_bytes() for p in worker_outs)
    assert b"[stdout]" in driver_log.read_bytes()

"""Faults around a collector beside a real Ray head: storage gone for a minute with
a tiny spool budget (503 backpressure), the collector SIGKILLed and restarted,
and garbage posted in the middle of a live stream. Nothing acknowledged is lost;
duplicates can only be whole events with the same eventId."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runtime.storage.base import ObjectStore
from runtime.storage.layout import ClusterRef, KeyLayout, is_event_file_name
from runtime.storage.local import LocalStore
from runtime.storage.retry import RetryPolicy
from tests.integration.emulators.base import free_port
from tests.integration.emulators.gcs import FakeGCSEmulator
from tests.integration.ray_harness import (
    RAY_BIN,
    CollectorProcess,
    RayHead,
    RecordingProxy,
    ray_available,
    unique_id,
    wait_until,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
]

CLUSTER = ClusterRef(namespace="default", name="raycluster-faults")
WORKLOAD = Path(__file__).parent / "workloads" / "many_tasks.py"
LAYOUT = KeyLayout("")


def events_in(store: ObjectStore) -> list[dict[str, object]]:
    import gzip

    events = []
    for info in store.walk(LAYOUT.cluster_prefix(CLUSTER) + "/"):
        name = info.key.rsplit("/", 1)[1]
        if ("/node_events/" in info.key or "/job_events/" in info.key) and is_event_file_name(name):
            data = store.get_bytes(info.key)
            data = gzip.decompress(data) if name.endswith(".gz") else data
            events += [json.loads(line) for line in data.splitlines() if line.strip()]
    return events


def local_storage(bucket: Path) -> dict[str, str]:
    return {"STORAGE_BACKEND": "local", "LOCAL_STORAGE_DIR": str(bucket), "STORAGE_CREATE_BUCKET": "true"}


class Setup:
    def __init__(self, tmp: Path, storage_env: dict[str, str], **collector_env: str) -> None:
        self.port = free_port()
        self.proxy = RecordingProxy(upstream_port=self.port)
        self.ray = RayHead(self.proxy.url)
        self.ray.start()
        env = {
            **storage_env,
            "RAY_CLUSTER_NAME": CLUSTER.name,
            "RAY_ROLE": "head",
            "RAY_TMP_ROOT": str(self.ray.tmp_root),
            "RAY_DASHBOARD_ADDRESS": self.ray.dashboard_url,
            "RAY_COLLECTOR_EVENT_DATA_DIR": str(tmp / "spool"),
            "RAY_COLLECTOR_EVENT_ROTATION_INTERVAL": "2s",
            "RAY_COLLECTOR_LOG_UPLOAD_INTERVAL": "5s",
            "RAY_COLLECTOR_POLL_INTERVAL": "5s",
            "RAY_COLLECTOR_SHUTDOWN_DEADLINE": "60s",
            **collector_env,
        }
        self.collector = CollectorProcess(env, self.port, tmp / "collector.log")
        self.collector.start()
        self.workdir = tmp / "job"
        self.workdir.mkdir()
        shutil.copy(WORKLOAD, self.workdir / "many_tasks.py")

    def submit(self, waves: int = 6) -> str:
        submission = unique_id("faults")
        subprocess.run(
            [str(RAY_BIN), "job", "submit", "--address", self.ray.dashboard_url,
             "--submission-id", submission, "--working-dir", str(self.workdir), "--no-wait", "--",
             "python", "many_tasks.py", str(waves)],
            env=self.ray.env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        return submission

    def job_status(self, submission: str) -> str:
        return str(requests.get(f"{self.ray.dashboard_url}/api/jobs/{submission}", timeout=10).json()["status"])

    def wait_job(self, submission: str, timeout: float = 300) -> str:
        wait_until(lambda: self.job_status(submission) in ("SUCCEEDED", "FAILED", "STOPPED"), timeout, "the job")
        time.sleep(3)  # Ray's publisher flushes every ~0.1-1 s
        return self.job_status(submission)

    def close(self) -> None:
        self.collector.kill()
        self.ray.cleanup()
        self.proxy.close()


@pytest.fixture
def gcs(tmp_path: Path) -> Iterator[FakeGCSEmulator]:
    emulator = FakeGCSEmulator(tmp_path / "gcs")
    emulator.workdir.mkdir()
    emulator.start()
    emulator.create_bucket("history")
    yield emulator
    emulator.stop()


def test_storage_down_for_a_minute_with_a_tiny_spool_loses_nothing(tmp_path: Path, gcs: FakeGCSEmulator) -> None:
    setup = Setup(tmp_path, gcs.env("history"), RAY_COLLECTOR_EVENT_MAX_DISK_MB="1")
    try:
        submission = setup.submit(waves=8)
        wait_until(lambda: len(setup.proxy.acknowledged_events()) > 200, 120, "events to flow")
        gcs.kill()
        outage_started = time.monotonic()
        # Spool fills to its budget: the collector pushes back with 503 + Retry-After.
        wait_until(lambda: any(b.status == 503 for b in setup.proxy.batches), 60, "backpressure (503)")
        time.sleep(max(0.0, 60 - (time.monotonic() - outage_started)))
        gcs.restart()
        assert setup.wait_job(submission) == "SUCCEEDED"
        assert setup.collector.terminate(timeout=90) == 0
        log = setup.collector.log()
        assert "LEFT ON DISK" not in log, log[-3000:]

        acked = setup.proxy.acknowledged_events()
        with gcs.make_store("history", retry=RetryPolicy(attempts=3)) as store:
            stored = events_in(store)
        stored_ids = {str(e["eventId"]) for e in stored}
        assert set(acked) <= stored_ids, f"{len(set(acked) - stored_ids)} acknowledged events lost"
        assert len(acked) > 1000
    finally:
        setup.close()


def test_collector_killed_and_restarted_loses_nothing(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    setup = Setup(tmp_path, local_storage(bucket))
    try:
        submission = setup.submit(waves=8)
        wait_until(lambda: len(setup.proxy.acknowledged_events()) > 300, 120, "events to flow")
        setup.collector.kill()  # SIGKILL: no shutdown, spool files left as they were
        time.sleep(3)  # Ray keeps retrying its batch meanwhile
        setup.collector.start()
        assert setup.wait_job(submission) == "SUCCEEDED"
        assert setup.collector.terminate(timeout=90) == 0

        acked = setup.proxy.acknowledged_events()
        stored = events_in(LocalStore(bucket))
        by_id: dict[str, list[dict[str, object]]] = {}
        for event in stored:
            by_id.setdefault(str(event["eventId"]), []).append(event)
        assert set(acked) <= set(by_id), f"{len(set(acked) - set(by_id))} acknowledged events lost"
        for event_id, copies in by_id.items():
            assert all(copy == copies[0] for copy in copies), f"duplicates of {event_id} differ"
        assert "resuming" in setup.collector.log() or len(stored) == len(by_id)
    finally:
        setup.close()


def test_garbage_mid_stream_is_refused_or_quarantined_and_ray_keeps_flowing(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    setup = Setup(tmp_path, local_storage(bucket))
    try:
        submission = setup.submit(waves=4)
        url = f"http://127.0.0.1:{setup.port}/v1/events"
        assert requests.post(url, data=b"{not json", timeout=10).status_code == 400
        assert requests.post(url, data=b'{"an": "object"}', timeout=10).status_code == 400
        mixed = [{"eventId": "bad-1", "eventType": "TASK_DEFINITION_EVENT", "sessionName": "../../etc"}, 42]
        response = requests.post(url, json=mixed, timeout=10)
        assert response.status_code == 200 and response.json() == {"accepted": 0, "quarantined": 2}
        assert setup.wait_job(submission) == "SUCCEEDED"
        metrics = requests.get(f"http://127.0.0.1:{setup.port}/metrics", timeout=10).text
        assert 'ray_history_collector_events_quarantined_total{reason="invalid_session_name"} 1.0' in metrics
        assert setup.collector.terminate(timeout=90) == 0
        stored_ids = {str(e["eventId"]) for e in events_in(LocalStore(bucket))}
        assert set(setup.proxy.acknowledged_events()) <= stored_ids
        assert "bad-1" not in stored_ids
        assert all(b.status == 200 for b in setup.proxy.batches), "Ray's own batches must all be accepted"
    finally:
        setup.close()

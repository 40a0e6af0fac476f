"""POST /v1/events over real HTTP on loopback: receiver -> spool -> uploader ->
local storage, with the keys of KubeRay's Go collector and every event accounted for."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

from runtime.collector.events.quarantine import Quarantine
from runtime.collector.events.receiver import EventReceiver
from runtime.collector.events.spool import Spool
from runtime.collector.events.uploader import EventUploader
from runtime.collector.metrics import CollectorMetrics
from runtime.storage.layout import ClusterRef, KeyLayout, is_event_file_name
from runtime.storage.local import LocalStore
from tests.unit.collector.samples import accepted_batches, all_events

CLUSTER = ClusterRef(namespace="default", name="raycluster-hs", owner_kind="rayjob", owner_name="job-a")
SESSION = "session_2026-11-22_01-58-29_266863_14332"


class Pipeline:
    def __init__(
        self, tmp: Path, *, max_disk: int = 1 << 30, compression: bool = False, node: str | None = None
    ) -> None:
        (tmp / "bucket").mkdir()
        self.store = LocalStore(tmp / "bucket")
        self.layout = KeyLayout("hist")
        self.metrics = CollectorMetrics()
        self.node = node
        self.spool = Spool(
            tmp / "spool", "raycluster-hs_default", max_file_size=1 << 20, rotation_interval=300, fsync=True,
            on_ready=lambda r: self.uploader.submit(r),  # noqa: PLW0108 - uploader is built below
        )  # fmt: skip
        self.quarantine = Quarantine(tmp / "spool" / "quarantine.jsonl")
        self.uploader = EventUploader(
            store=self.store, layout=self.layout, cluster=CLUSTER, spool=self.spool, node_id=lambda: self.node,
            metrics=self.metrics, quarantine=self.quarantine, compression=compression,
        )  # fmt: skip
        self.receiver = EventReceiver(
            spool=self.spool, quarantine=self.quarantine, metrics=self.metrics,
            max_disk=max_disk, max_request_size=1 << 20, fallback_node=lambda: self.node,
        )  # fmt: skip

    def uploaded(self) -> list[str]:
        return [o.key for o in self.store.walk("hist/")]

    def counter(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


class Client:
    """The pipeline's receiver served on a free loopback port."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.server = pipeline.receiver.make_server("127.0.0.1", 0)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.http = requests.Session()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def post(self, path: str, data: bytes) -> requests.Response:
        return self.http.post(self.base + path, data=data, headers={"Content-Type": "application/json"}, timeout=30)

    def get(self, path: str) -> requests.Response:
        return self.http.get(self.base + path, timeout=30)

    def close(self) -> None:
        self.http.close()
        self.server.shutdown()
        self.server.server_close()
        self.pipeline.uploader.stop()


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[object]:
    clients: list[Client] = []

    def build(**kwargs: object) -> tuple[Pipeline, Client]:
        pipeline = Pipeline(tmp_path, **kwargs)  # type: ignore[arg-type]
        client = Client(pipeline)
        clients.append(client)
        return pipeline, client

    yield build
    for client in clients:
        client.close()


def test_real_batches_end_to_end(make_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipeline, client = make_client()
    for body in accepted_batches():
        response = client.post("/v1/events", data=body)
        assert response.status_code == 200, response.text
    pipeline.spool.rotate_all()
    pipeline.uploader.start()
    assert pipeline.uploader.drain(time.monotonic() + 20)

    keys = pipeline.uploaded()
    prefix = f"hist/cluster-history/rayjob/default/job-a/raycluster-hs/{SESSION}/"
    assert keys and all(k.startswith(prefix) for k in keys)
    assert all(is_event_file_name(k.rsplit("/", 1)[1]) for k in keys)
    job_dirs = {k.split("/job_events/")[1].split("/")[0] for k in keys if "/job_events/" in k}
    assert {"01000000", "02000000"} <= job_dirs
    stored = [orjson.loads(line) for k in keys for line in pipeline.store.get_bytes(k).splitlines()]
    sent = all_events()
    assert sorted(e["eventId"] for e in stored) == sorted(str(e["eventId"]) for e in sent)  # type: ignore[index]
    assert pipeline.counter("ray_history_collector_events_uploaded_total") == len(sent)
    assert pipeline.spool.used_bytes == 0
    assert not list((tmp_path / "spool").rglob("*.jsonl"))


def test_compressed_uploads(make_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipeline, client = make_client(compression=True)
    body = next(iter(accepted_batches()))
    assert client.post("/v1/events", data=body).status_code == 200
    pipeline.spool.rotate_all()
    pipeline.uploader.start()
    assert pipeline.uploader.drain(time.monotonic() + 10)
    keys = pipeline.uploaded()
    assert keys and all(k.endswith(".jsonl.gz") for k in keys)
    lines = gzip.decompress(pipeline.store.get_bytes(keys[0])).splitlines()
    assert all(orjson.loads(line)["sessionName"] == SESSION for line in lines)


def test_bad_bodies_and_bad_events(make_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipeline, client = make_client()
    for body in (b"not json", b'{"a": 1}', b'"x"'):
        response = client.post("/v1/events", data=body)
        assert response.status_code == 400
        assert "error" in response.json()
    good = {
        "eventId": "e1",
        "eventType": "NODE_DEFINITION_EVENT",
        "timestamp": "2026-11-22T01:59:00Z",
        "sessionName": SESSION,
    }
    mixed = [good, {**good, "eventId": "e2", "timestamp": "soon"}, {**good, "eventId": "e3", "sessionName": "../x"}]
    response = client.post("/v1/events", data=orjson.dumps(mixed))
    assert response.status_code == 200
    assert response.json() == {"accepted": 1, "quarantined": 2}
    assert pipeline.counter("ray_history_collector_events_quarantined_total", reason="invalid_timestamp") == 1
    quarantined = (tmp_path / "spool" / "quarantine.jsonl").read_bytes().splitlines()
    assert [orjson.loads(q)["reason"] for q in quarantined] == ["invalid_timestamp", "invalid_session_name"]
    assert client.post("/v1/events", data=b"[]").status_code == 200
    too_big = b"[" + b" " * (2 << 20) + b"]"
    assert client.post("/v1/events", data=too_big).status_code == 413


def test_disk_budget_pushes_back_then_recovers(make_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipeline, client = make_client(max_disk=20_000)
    body = next(b for b in accepted_batches() if len(b) > 8000)
    statuses = [client.post("/v1/events", data=body).status_code for _ in range(6)]
    assert 503 in statuses and statuses[0] == 200
    rejected = client.post("/v1/events", data=body)
    assert rejected.status_code == 503 and rejected.headers["Retry-After"] == "10"
    assert client.get("/readyz").status_code == 503
    pipeline.spool.rotate_all()
    pipeline.uploader.start()  # storage drains the spool ...
    assert pipeline.uploader.drain(time.monotonic() + 10)
    assert client.post("/v1/events", data=body).status_code == 200  # ... and events flow again
    assert client.get("/readyz").status_code == 200


def test_draining_answers_503(make_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipeline, client = make_client()
    pipeline.receiver.draining = True
    response = client.post("/v1/events", data=b"[]")
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    assert client.get("/healthz").status_code == 200
    metrics = client.get("/metrics").text
    assert 'ray_history_collector_event_requests_total{status="503"} 1.0' in metrics


def test_events_without_a_node_wait_for_one(make_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pipeline, client = make_client(node=None)
    event = {
        "eventId": "e1",
        "eventType": "NODE_DEFINITION_EVENT",
        "timestamp": "2026-11-22T01:59:00Z",
        "sessionName": SESSION,
    }
    assert client.post("/v1/events", data=orjson.dumps([event])).status_code == 200
    pipeline.spool.rotate_all()
    pipeline.uploader.start()
    time.sleep(0.5)
    assert pipeline.uploaded() == []  # no node id: nothing can be keyed yet
    pipeline.node = "c" * 56
    assert pipeline.uploader.drain(time.monotonic() + 10)
    assert pipeline.uploaded()[0].split("/")[-3] == "c" * 56


def test_a_finished_job_is_told_once_its_batch_is_durable(make_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The head's recorder is told of each batch that reports a driver job FINISHED, after
    the batch is spooled; a failing listener never costs the batch its 200."""
    pipeline, client = make_client()
    told: list[int] = []

    def listener() -> None:
        told.append(pipeline.spool.file_count)  # the batch is already on disk
        raise RuntimeError("listener bug")

    pipeline.receiver.on_job_ended = listener
    answers = [client.post("/v1/events", data=body) for body in accepted_batches()]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200]
    with_finished = [b for b in accepted_batches() if any(_finishes_a_job(e) for e in orjson.loads(b))]
    assert len(told) == len(with_finished) > 0 and all(count > 0 for count in told)


def _finishes_a_job(event: dict[str, Any]) -> bool:
    if event.get("eventType") != "DRIVER_JOB_LIFECYCLE_EVENT":
        return False
    return any(t["state"] == "FINISHED" for t in event["driverJobLifecycleEvent"]["stateTransitions"])


def test_a_spool_file_no_key_can_hold_is_quarantined_and_released(make_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Such a file (spooled under a job ID the key layout refuses, e.g. by a version
    whose parser was looser) used to stay in the spool for good, across restarts too,
    holding its bytes until the budget's pressure refused every batch."""
    pipeline, client = make_client(node="c" * 56)
    bad_job = "job." + "x" * 150  # 154 safe characters: over the layout's 128
    lines = [orjson.dumps({"eventId": f"e{i}", "sessionName": SESSION}) for i in range(3)]
    spooled = pipeline.spool.dir / SESSION / ("c" * 56) / "job_events" / bad_job / "1795712111623317972.jsonl"
    spooled.parent.mkdir(parents=True)
    spooled.write_bytes(b"\n".join(lines) + b"\n")
    ready = pipeline.spool.resume()  # as the next process finds it
    assert len(ready) == 1 and pipeline.spool.used_bytes > 0
    for item in ready:
        pipeline.uploader.submit(item)
    pipeline.uploader.start()
    assert pipeline.uploader.drain(time.monotonic() + 10)
    assert not spooled.exists() and pipeline.spool.used_bytes == 0 and pipeline.spool.file_count == 0
    assert pipeline.uploaded() == []
    quarantined = [orjson.loads(line) for line in pipeline.quarantine.path.read_bytes().splitlines()]
    assert [q["reason"] for q in quarantined] == ["unstorable_key"] * 3
    assert [orjson.loads(q["event"])["eventId"] for q in quarantined] == ["e0", "e1", "e2"]
    assert pipeline.counter("ray_history_collector_events_quarantined_total", reason="unstorable_key") == 3
    # and the spool takes batches again
    good = {"eventId": "g", "eventType": "NODE_DEFINITION_EVENT", "timestamp": "2026-11-22T01:59:00Z"}
    assert client.post("/v1/events", data=orjson.dumps([{**good, "sessionName": SESSION}])).status_code == 200

"""No request hangs on an index build: 503 with the build's real progress, one build
for concurrent requests, a failed build's error for its waiters, another process's
build seen through its progress file, the page a browser waits on, and builds beyond
``--max-builds`` queued."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from runtime.server.app import create_app
from runtime.server.config import ServerConfig
from runtime.server.context import app_services
from runtime.server.errors import IndexBuildingError
from runtime.server.index import cache as cache_module
from runtime.server.index.locks import file_lock
from runtime.server.index.progress import ELSEWHERE, ProgressFile, progress_path
from runtime.server.index.sources import classify
from runtime.server.metrics import ServerMetrics
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.errors import StorageUnavailableError
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.sample_session import StoredSample, write_sample_session

TASKS = "/api/v0/tasks?limit=5"
DEADLINE = 60.0


class GatedReads:
    """A test double of the store's reads: reads of ``gated`` wait for ``release``
    (a slow build without a sleep in product code); ``fail`` makes every read raise."""

    def __init__(self, store: ObjectStore, gated: str | None) -> None:
        self._get = store.get_bytes
        self.gated = gated
        self.release = threading.Event()
        self.reached = threading.Event()
        self.fail = False
        self.reads: Counter[str] = Counter()

    def get_bytes(self, key: str) -> bytes:
        self.reads[key] += 1
        if self.fail:
            raise StorageUnavailableError("injected outage", backend="local", bucket="test", key=key)
        if key == self.gated:
            self.reached.set()
            if not self.release.wait(DEADLINE):
                raise TimeoutError("the test never released the read")
        return self._get(key)


@dataclass
class World:
    config: ServerConfig
    store: ObjectStore
    sample: StoredSample
    gate: GatedReads
    event_bytes: int  # the build's total: every event object's stored size
    before_last: int  # what has been read when the last event object's read blocks

    def app(self, **overrides: Any) -> Flask:
        return create_app(replace(self.config, **overrides), store=self.store, metrics=ServerMetrics())

    def enter_url(self) -> str:
        cluster = self.sample.cluster
        return f"/enter_cluster/{cluster.namespace}/raycluster/{cluster.name}/{self.sample.session}"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    config = ServerConfig(storage=storage, cache_dir=tmp_path / "cache", freshness_seconds=3600, build_wait=0.2)
    store = open_store(storage)
    sample = write_sample_session(store, KeyLayout(""))
    events = classify(list(store.walk(sample.session_prefix)), sample.session_prefix).events
    assert len(events) > 1
    gate = GatedReads(store, events[-1].key)  # the build reads the others, then waits on the last one
    monkeypatch.setattr(store, "get_bytes", gate.get_bytes)
    total = sum(info.size for info in events)
    yield World(config, store, sample, gate, total, total - events[-1].size)
    gate.release.set()  # never leave a build thread waiting


def _client(app: Flask, sample: StoredSample) -> FlaskClient:
    client = app.test_client()
    for name, value in {
        "cluster_name": sample.cluster.name,
        "cluster_namespace": sample.cluster.namespace,
        "session_name": sample.session,
        "owner_kind": "",
        "owner_name": "",
    }.items():
        client.set_cookie(name, value)
    return client


def _until(ask: Any, done: Any) -> TestResponse:
    """Ask again until ``done(answer)`` (a build runs in another thread)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        answer: TestResponse = ask()
        if done(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.02)


def _metric(app: Flask, name: str, labels: dict[str, str] | None = None) -> float:
    value = app_services(app).metrics.registry.get_sample_value(name, labels or {})
    return value or 0.0


def test_a_request_during_a_build_gets_503_with_progress_then_200(world: World) -> None:
    app = world.app()
    client = _client(app, world.sample)
    first = client.get(TASKS)
    assert first.status_code == 503
    assert first.headers["Retry-After"] == "2"
    assert world.gate.reached.wait(DEADLINE)
    # The progress is the build's own count: event bytes read of those listed.
    answer = _until(lambda: client.get(TASKS), lambda a: a.get_json().get("done") == world.before_last)
    body = answer.get_json()
    assert answer.status_code == 503 and answer.mimetype == "application/json"
    assert body["result"] is False and "being indexed" in body["msg"]
    assert (body["phase"], body["done"], body["total"]) == ("reading events", world.before_last, world.event_bytes)
    assert _metric(app, "historyserver_index_builds_in_progress") == 1
    assert _metric(app, "historyserver_index_building_responses_total") >= 2
    world.gate.release.set()
    ready = _until(lambda: client.get(TASKS), lambda a: a.status_code != 503)
    assert ready.status_code == 200, ready.get_data(as_text=True)
    assert ready.get_json()["data"]["result"]["total"] > 0
    assert _metric(app, "historyserver_index_builds_in_progress") == 0
    assert _metric(app, "historyserver_index_builds_total", {"outcome": "ok"}) == 1
    path = app_services(app).indexes.path_for(world.sample.cluster, world.sample.session)
    assert not progress_path(path).exists(), "the progress file goes with the build"


def test_concurrent_requests_start_one_build(world: World) -> None:
    app = world.app()
    indexes = app_services(app).indexes
    barrier = threading.Barrier(2)
    answers: list[BaseException | Path] = []

    def request() -> None:
        barrier.wait()
        try:
            answers.append(indexes.ensure(world.sample.cluster, world.sample.session, wait=0.05))
        except IndexBuildingError as exc:
            answers.append(exc)

    threads = [threading.Thread(target=request) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [type(a) for a in answers] == [IndexBuildingError, IndexBuildingError]
    world.gate.release.set()
    path = indexes.ensure(world.sample.cluster, world.sample.session, wait=DEADLINE)
    assert path.exists()
    assert world.gate.reads[world.gate.gated or ""] == 1, "one build read the session once"
    assert _metric(app, "historyserver_index_builds_total", {"outcome": "ok"}) == 1
    assert _metric(app, "historyserver_index_cache_requests_total", {"result": "miss"}) == 1
    assert _metric(app, "historyserver_index_cache_requests_total", {"result": "joined"}) == 2


def test_a_failed_build_answers_its_error_until_a_retry_is_due(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "FAILED_RETRY_SECONDS", 0.5)
    world.gate.fail = True
    app = world.app(build_wait=DEADLINE)  # the waiter sees the build end
    client = _client(app, world.sample)
    first = client.get(TASKS)
    # As before builds ran in the background: the load error, 503 with Retry-After 5.
    assert first.status_code == 503 and first.headers["Retry-After"] == "5"
    assert "event files" in first.get_json()["msg"] and "phase" not in first.get_json()
    reads = sum(world.gate.reads.values())
    second = client.get(TASKS)
    assert second.get_json() == first.get_json(), "the same error, until a retry is due"
    assert sum(world.gate.reads.values()) == reads, "and no second build"
    assert _metric(app, "historyserver_index_builds_total", {"outcome": "failed"}) == 1
    time.sleep(0.6)
    world.gate.fail = False
    world.gate.release.set()
    assert client.get(TASKS).status_code == 200
    assert _metric(app, "historyserver_index_builds_total", {"outcome": "ok"}) == 1


def test_a_build_in_another_process_is_reported_from_its_progress_file(world: World) -> None:
    world.gate.release.set()
    app = world.app()
    indexes = app_services(app).indexes
    cluster, session = world.sample.cluster, world.sample.session
    path = indexes.path_for(cluster, session)
    with file_lock(path):  # flock excludes other open files of this process as it does other processes
        elsewhere = ProgressFile(path)
        elsewhere.publish()
        elsewhere.report("reading events", 5, 10)
        with pytest.raises(IndexBuildingError) as err:
            indexes.ensure(cluster, session, wait=0.5)
        assert err.value.progress == {"phase": "reading events", "done": 5, "total": 10}
        elsewhere.remove()
        with pytest.raises(IndexBuildingError) as err:
            indexes.ensure(cluster, session, wait=0.5)
        assert err.value.progress == {"phase": ELSEWHERE, "done": None, "total": None}
    assert indexes.ensure(cluster, session, wait=DEADLINE) == path


def test_a_browser_entering_waits_on_a_page_that_lands_in_the_dashboard(world: World) -> None:
    client = world.app().test_client()
    navigate = {"Sec-Fetch-Mode": "navigate", "Accept": "text/html"}
    assert world.gate.reached.wait(0.0) is False
    page = client.get(world.enter_url(), headers=navigate)
    assert page.status_code == 503 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert '<meta http-equiv="refresh" content="2">' in html and world.sample.session in html
    assert "<script" not in html and "<link" not in html and "src=" not in html, "no external assets"
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert not page.headers.getlist("Set-Cookie"), "the session is entered once it is indexed"
    assert world.gate.reached.wait(DEADLINE)
    page = _until(lambda: client.get(world.enter_url(), headers=navigate), lambda a: "reading events" in a.text)
    assert f'value="{world.before_last}" max="{world.event_bytes}"' in page.get_data(as_text=True)
    picker = client.get(world.enter_url())  # the picker's fetch: JSON with the same progress
    assert picker.status_code == 503 and picker.get_json()["phase"] == "reading events"
    world.gate.release.set()
    landed = _until(lambda: client.get(world.enter_url(), headers=navigate), lambda a: a.status_code != 503)
    # Into the session's shareable URL (no fragment: a link's own #/... is kept by the browser).
    assert landed.status_code == 302 and landed.headers["Location"].endswith(
        f"/sessions/{world.sample.cluster.namespace}/{world.sample.cluster.name}/{world.sample.session}/"
    )
    assert any(c.startswith("session_name=") for c in landed.headers.getlist("Set-Cookie"))


def test_builds_beyond_max_builds_wait_their_turn_reporting_queued(world: World) -> None:
    """``--max-builds``: many users opening many sessions share the CPU and memory; a
    build ahead is bounded by its own slots and never waits for the requests' ones."""
    other = write_sample_session(world.store, KeyLayout(""), ClusterRef("default", "other-cluster"))
    ahead = write_sample_session(world.store, KeyLayout(""), ClusterRef("default", "ahead-cluster"))
    app = world.app(max_builds=1)
    indexes = app_services(app).indexes
    with pytest.raises(IndexBuildingError):
        indexes.ensure(world.sample.cluster, world.sample.session, wait=0.05)
    assert world.gate.reached.wait(DEADLINE)  # the first build holds the only slot
    with pytest.raises(IndexBuildingError) as err:
        indexes.ensure(other.cluster, other.session, wait=0.5)
    assert err.value.progress == {"phase": "queued", "done": None, "total": None}
    assert _metric(app, "historyserver_index_builds_queued") == 1
    assert indexes.ensure(ahead.cluster, ahead.session, wait=DEADLINE, ahead=True).exists()
    with pytest.raises(IndexBuildingError):
        indexes.ensure(other.cluster, other.session, wait=0.5)  # still queued
    world.gate.release.set()
    assert indexes.ensure(other.cluster, other.session, wait=DEADLINE).exists()
    assert indexes.ensure(world.sample.cluster, world.sample.session, wait=DEADLINE).exists()
    assert _metric(app, "historyserver_index_builds_queued") == 0
    assert _metric(app, "historyserver_index_builds_total", {"outcome": "ok"}) == 3

"""Indexing ahead (``--index-ahead``): which sessions are finished and queued, newest
first; builds bounded by slots shared with other processes; a user request is never
queued behind them."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runtime.server.config import ServerConfig
from runtime.server.index.ahead import SLOT_PREFIX, IndexAhead
from runtime.server.index.cache import IndexCache
from runtime.server.index.locks import SLOTS_DIR
from runtime.server.metrics import ServerMetrics
from runtime.server.sessions import StoredSessions
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.app_world import FakeLive, live_cluster
from tests.support.sample_session import SESSION_A, StoredSample, write_sample_session

LAYOUT = KeyLayout("")
DEMO = ClusterRef("default", "raycluster-demo")  # live; SESSION_A (2026-11-22) is its newest session
OLDER = "session_2026-11-01_08-00-00_000001_1"  # finished: a newer session of DEMO exists
OLDEST = "session_2026-10-01_08-00-00_000001_1"  # finished, but past --index-ahead-max-age
GONE = ClusterRef("default", "raycluster-gone")  # not live: its only session is finished
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC).timestamp()
MAX_AGE = 30 * 24 * 3600.0


@dataclass
class World:
    store: ObjectStore
    cache: IndexCache
    live: FakeLive
    sessions: StoredSessions
    gone: StoredSample

    def ahead(self, workers: int = 1) -> IndexAhead:
        return IndexAhead(
            self.cache,
            lambda: self.sessions.current(refresh=True),
            self.live,
            workers=workers,
            max_age=MAX_AGE,
            clock=lambda: NOW,
        )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    store = open_store(storage)
    write_sample_session(store, LAYOUT, DEMO)
    gone = write_sample_session(store, LAYOUT, GONE)
    for session in (OLDER, OLDEST):
        store.put_bytes(LAYOUT.marker_key(DEMO, session), b"")
        store.put_bytes(LAYOUT.log_key(DEMO, session, "a" * 56, "raylet.out"), b"an older session\n")
    config = ServerConfig(storage=storage, cache_dir=tmp_path / "cache", freshness_seconds=3600)
    cache = IndexCache(config, store=store, layout=LAYOUT, metrics=ServerMetrics())
    live = FakeLive([live_cluster("default", DEMO.name)])
    yield World(store, cache, live, StoredSessions(store, LAYOUT, ttl=0), gone)


def _names(sessions: list[object]) -> list[tuple[str, str]]:
    return [(s.cluster.name, s.session) for s in sessions]  # type: ignore[attr-defined]


def test_finished_sessions_are_queued_newest_first(world: World) -> None:
    ahead = world.ahead()
    # GONE's session is the same run as SESSION_A (same name); the newest first, then OLDER.
    assert _names(ahead.candidates()) == [(GONE.name, SESSION_A), (DEMO.name, OLDER)]
    world.live.available = False  # liveness unknown: only a newer session proves an end
    assert _names(ahead.candidates()) == [(DEMO.name, OLDER)]


def test_indexing_ahead_makes_the_first_request_a_hit(world: World) -> None:
    ahead = world.ahead()
    indexed = []
    while (stored := ahead.index_next()) is not None:
        indexed.append(stored)
    assert _names(indexed) == [(GONE.name, SESSION_A), (DEMO.name, OLDER)]
    assert ahead.candidates() == []
    assert not world.cache.is_indexed(DEMO, SESSION_A), "a running cluster's session waits for a request"
    started = time.perf_counter()
    world.cache.ensure(GONE, SESSION_A, wait=0.0)  # no build left: answered from the index at once
    assert time.perf_counter() - started < 1.0
    hits = world.cache.metrics.registry.get_sample_value("historyserver_index_cache_requests_total", {"result": "hit"})
    assert hits == 1


def test_builds_ahead_are_bounded_by_slots_shared_with_other_processes(world: World) -> None:
    (world.cache.dir / SLOTS_DIR).mkdir(parents=True, exist_ok=True)
    fd = os.open(world.cache.dir / SLOTS_DIR / f"{SLOT_PREFIX}0.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process's build ahead holds the only slot
        assert world.ahead(workers=1).index_next() is None
        assert world.ahead(workers=2).index_next() is not None, "a second slot is free"
    finally:
        os.close(fd)
    assert world.cache.is_indexed(GONE, SESSION_A)


def test_a_user_request_is_not_queued_behind_builds_ahead(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    release, reached = threading.Event(), threading.Event()
    read = world.store.get_bytes

    def slow_for_gone(key: str) -> bytes:
        if key.startswith(world.gone.session_prefix):
            reached.set()
            release.wait(60)
        return read(key)

    monkeypatch.setattr(world.store, "get_bytes", slow_for_gone)
    ahead = world.ahead(workers=1)
    ahead.start()
    try:
        assert reached.wait(30), "the newest finished session is indexed first"
        # OLDER is queued behind GONE's build; a request for it builds it now.
        path = world.cache.ensure(DEMO, OLDER, wait=30.0)
        assert path.exists() and not world.cache.is_indexed(GONE, SESSION_A)
    finally:
        release.set()
        ahead.stop()
    assert world.cache.is_indexed(GONE, SESSION_A)


def test_nothing_is_indexed_ahead_into_a_nearly_full_cache(world: World) -> None:
    world.cache.ensure(DEMO, SESSION_A)  # a user's index
    world.cache.config = replace(world.cache.config, cache_max_bytes=world.cache.used_bytes())
    assert world.ahead().index_next() is None
    assert not world.cache.is_indexed(GONE, SESSION_A)


def test_liveness_unknown_a_quiet_session_is_finished(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Kubernetes API to ask (the quickstart, a server outside the cluster): a session
    is finished once none of its objects changed for ``quiet`` seconds; until then only
    a newer session proves an end. Listings are not repeated on every scan."""
    world.live.available = False
    written = max(
        info.updated.timestamp() for info in world.store.walk(world.gone.session_prefix) if info.updated is not None
    )
    clock = [written + 60.0]
    walks: list[str] = []
    walk = world.store.walk

    def counting_walk(prefix: str = "") -> Iterator[object]:
        if "/cluster-history/" in f"/{prefix}":  # a session's objects, not the markers
            walks.append(prefix)
        return walk(prefix)

    monkeypatch.setattr(world.store, "walk", counting_walk)
    ahead = IndexAhead(
        world.cache,
        lambda: world.sessions.current(refresh=True),
        world.live,
        workers=1,
        max_age=MAX_AGE,
        quiet=600.0,
        clock=lambda: clock[0],
    )
    assert _names(ahead.candidates()) == [(DEMO.name, OLDER)], "written a minute ago: may be running"
    listed = len(walks)
    assert listed == 2, "one listing for each newest session of its cluster"
    ahead.candidates()
    assert len(walks) == listed, "not listed again before the silence could have lasted"
    clock[0] = written + 601.0
    found = _names(ahead.candidates())
    assert sorted(found[:2]) == [(DEMO.name, SESSION_A), (GONE.name, SESSION_A)] and found[2:] == [(DEMO.name, OLDER)]
    world.store.put_bytes(LAYOUT.log_key(GONE, SESSION_A, "b" * 56, "raylet.out"), b"late\n")
    clock[0] = time.time() + 60.0  # a new object: busy again once its session is looked at again
    assert (GONE.name, SESSION_A) not in _names(ahead.candidates())


def test_liveness_unknown_an_end_marked_session_is_finished(world: World) -> None:
    """The head collector's ``session_ended.json`` makes the newest session a candidate at
    once, without waiting for the quiet period."""
    world.live.available = False
    assert (GONE.name, SESSION_A) not in _names(world.ahead().candidates())
    world.store.put_bytes(LAYOUT.session_ended_key(GONE, SESSION_A), b"{}")
    assert (GONE.name, SESSION_A) in _names(world.ahead().candidates())

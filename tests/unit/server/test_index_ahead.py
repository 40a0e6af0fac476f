"""Indexing ahead (``--index-ahead``): which sessions are finished and queued, newest
first; builds bounded by slots shared with other processes; a user request is never
queued behind them."""

from __future__ import annotations

import atexit
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runtime.server.app import INDEX_AHEAD_EXTENSION, create_app
from runtime.server.config import ServerConfig
from runtime.server.errors import IndexBuildingError
from runtime.server.index.ahead import SLOT_PREFIX, IndexAhead
from runtime.server.index.cache import IndexCache
from runtime.server.index.locks import SLOTS_DIR
from runtime.server.metrics import ServerMetrics
from runtime.server.sessions import StoredSessions
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.app_world import FakeLive, live_cluster, server_config
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

    def ahead(self, workers: int = 1, clock: Callable[[], float] = lambda: NOW, **options: float) -> IndexAhead:
        return IndexAhead(
            self.cache,
            lambda: self.sessions.current(refresh=True),
            self.live,
            workers=workers,
            max_age=MAX_AGE,
            clock=clock,
            **options,
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
    ahead = world.ahead(clock=lambda: clock[0], quiet=600.0)
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


def _gate_reads(world: World, monkeypatch: pytest.MonkeyPatch, prefix: str) -> tuple[threading.Event, threading.Event]:
    """Builds reading objects under ``prefix`` wait for ``release``; ``reached`` says one does."""
    reached, release = threading.Event(), threading.Event()
    read = world.store.get_bytes

    def gated(key: str) -> bytes:
        if key.startswith(prefix):
            reached.set()
            release.wait(30)
        return read(key)

    monkeypatch.setattr(world.store, "get_bytes", gated)
    return reached, release


def test_a_build_ahead_never_evicts_an_index_people_use(world: World) -> None:
    """The cache share is checked before a build ahead; what it builds may still not fit.
    Then the index built ahead is dropped (and not built again at once), not the user's."""
    user = world.cache.ensure(DEMO, SESSION_A)  # a user reads this one
    size = world.cache.used_bytes()
    # The user's index takes 67 % (< CACHE_SHARE): a build ahead may start, but its index does not fit.
    world.cache.config = replace(world.cache.config, cache_max_bytes=int(size * 1.5))
    ahead = world.ahead()
    assert _names([ahead.index_next()]) == [(GONE.name, SESSION_A)]
    assert user.exists(), "a build ahead evicted the user's index"
    assert not world.cache.is_indexed(GONE, SESSION_A), "what does not fit is not kept"
    assert world.cache.metrics.registry.get_sample_value("historyserver_index_evictions_total") == 0
    assert _names(ahead.candidates()) == [(DEMO.name, OLDER)], "not built again on the next scan"
    world.cache.ensure(GONE, SESSION_A)  # a request's build still makes room as before
    assert world.cache.is_indexed(GONE, SESSION_A) and not user.exists()


def test_a_build_ahead_a_user_joined_is_kept(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request waiting on a build ahead makes it a request's build: its index is kept."""
    world.cache.ensure(DEMO, SESSION_A)
    world.cache.config = replace(world.cache.config, cache_max_bytes=int(world.cache.used_bytes() * 1.5))
    reached, release = _gate_reads(world, monkeypatch, world.gone.session_prefix)
    ahead = world.ahead()
    thread = threading.Thread(target=ahead.index_next)
    thread.start()
    try:
        assert reached.wait(30)
        with pytest.raises(IndexBuildingError):
            world.cache.ensure(GONE, SESSION_A, wait=0.0)  # joins the build ahead
    finally:
        release.set()
        thread.join(30)
    assert world.cache.is_indexed(GONE, SESSION_A)


def test_stop_does_not_wait_for_the_build_under_way(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    reached, release = _gate_reads(world, monkeypatch, world.gone.session_prefix)
    ahead = world.ahead()
    ahead.start()
    try:
        assert reached.wait(30)
        started = time.monotonic()
        ahead.stop(timeout=3.0)
        assert time.monotonic() - started < 2.0
        assert not [t.name for t in ahead._threads if t.is_alive()]
    finally:
        release.set()
        ahead.stop()
    world.cache.ensure(GONE, SESSION_A, wait=30.0)
    sample = world.cache.metrics.registry.get_sample_value
    assert sample("historyserver_index_cache_requests_total", {"result": "joined"}) == 1, "the build went on"
    assert sample("historyserver_index_builds_total", {"outcome": "ok"}) == 1


def test_a_build_ahead_holds_its_slot_until_it_is_over(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """However long a build takes (``build_timeout`` is lowered here so that waiting for it
    once timed out at 0.5 s), its slot is not free for another build ahead, and a build
    still under way is not a failure."""
    world.cache.config = replace(world.cache.config, build_timeout=-59.5)
    reached, release = _gate_reads(world, monkeypatch, "")
    ahead = world.ahead(workers=1)
    first: list[object] = []
    thread = threading.Thread(target=lambda: first.append(ahead.index_next()))
    thread.start()
    try:
        assert reached.wait(30)
        thread.join(1.0)
        assert thread.is_alive(), "stopped waiting while the build goes on"
        assert ahead.index_next() is None, "2 builds ahead at once with --index-ahead-workers=1"
    finally:
        release.set()
        thread.join(30)
    assert _names(first) == [(GONE.name, SESSION_A)] and world.cache.is_indexed(GONE, SESSION_A)
    assert not ahead._failed


def test_the_app_stops_indexing_ahead_at_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[Callable[[], object]] = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(IndexAhead, "start", lambda self: None)  # no threads needed here
    app = create_app(replace(server_config(tmp_path), index_ahead=True), live=FakeLive([]))
    ahead = app.extensions[INDEX_AHEAD_EXTENSION]
    assert registered == [ahead.stop]


def test_what_is_noted_about_a_session_goes_with_it(world: World) -> None:
    """End-marker lookups, quiet-period listings and failures are remembered per session;
    once a session is deleted (``gc``) or past ``--index-ahead-max-age``, nothing about it
    is kept, so a server running for months holds notes on the sessions it may index only."""
    world.live.available = False  # liveness unknown: markers and listings are consulted
    clock = [NOW]
    ahead = world.ahead(clock=lambda: clock[0])
    ahead.candidates()
    gone_key = ("default", GONE.name, SESSION_A)
    assert gone_key in ahead._marker_checks and gone_key in ahead._quiet_checks
    ahead._retry_later(next(s for s in world.sessions.current(refresh=True) if s.cluster == GONE))
    assert gone_key in ahead._failed

    for info in list(world.store.walk(world.gone.session_prefix)):  # gc deleted the session
        world.store.delete(info.key)
    world.store.delete(LAYOUT.marker_key(GONE, SESSION_A))
    ahead.candidates()
    notes = (ahead._marker_checks, ahead._quiet_checks, ahead._failed)
    assert all(gone_key not in noted for noted in notes), notes
    assert ("default", DEMO.name, SESSION_A) in ahead._marker_checks, "a listed session's notes stay"

    clock[0] = NOW + 2 * MAX_AGE  # every session is past the maximum age now
    ahead.candidates()
    assert all(not noted for noted in notes), notes

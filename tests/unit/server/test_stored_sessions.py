"""The stored-session listing behind /clusters (runtime/server/sessions.py): decoded
markers reused across listings, and a slow listing refreshed in the background."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runtime.server import sessions as sessions_module
from runtime.server.sessions import StoredSessions
from runtime.storage.layout import ClusterRef, KeyLayout, SessionMarker
from runtime.storage.local import LocalStore

CLUSTER = ClusterRef("default", "raycluster-demo")


class CountingLayout(KeyLayout):
    def __init__(self) -> None:
        super().__init__("")
        self.decoded: list[str] = []

    def parse_marker_key(self, key: str) -> SessionMarker:
        self.decoded.append(key)
        return super().parse_marker_key(key)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _store(tmp_path: Path, layout: KeyLayout, count: int) -> LocalStore:
    (tmp_path / "store").mkdir(exist_ok=True)
    store = LocalStore(tmp_path / "store")
    for i in range(count):
        store.put_bytes(layout.marker_key(CLUSTER, f"session_2026-11-01_00-00-{i:02d}_000000_1"), b"")
    return store


def test_markers_are_decoded_once(tmp_path: Path) -> None:
    layout = CountingLayout()
    store = _store(tmp_path, layout, 5)
    store.put_bytes("cluster-metadata/raycluster/default_x/not-a-session", b"")
    listing = StoredSessions(store, layout, ttl=0)
    first = listing.current()
    assert len(first) == 5 and len(layout.decoded) == 6
    assert listing.current() is first  # nothing changed: the same sorted list
    assert len(layout.decoded) == 6
    store.put_bytes(layout.marker_key(CLUSTER, "session_2026-12-01_00-00-00_000000_1"), b"")
    second = listing.current()
    assert len(layout.decoded) == 7 and second[0].session == "session_2026-12-01_00-00-00_000000_1"
    assert second[1] is first[0]


def test_a_slow_listing_is_refreshed_in_the_background(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = KeyLayout("")
    store = _store(tmp_path, layout, 3)
    clock = Clock()
    listing = StoredSessions(store, layout, ttl=5, clock=clock)
    assert len(listing.current()) == 3
    monkeypatch.setattr(sessions_module, "SLOW_READ_SECONDS", 0.0)
    listing._read_seconds = 1.0  # as if listing took 1 s: refreshed at most every 10 s
    store.put_bytes(layout.marker_key(CLUSTER, "session_2026-12-01_00-00-00_000000_1"), b"")
    clock.now += 6  # expired, but younger than 10 x 1 s: the old list, no listing
    assert len(listing.current()) == 3 and not listing._refreshing
    clock.now += 5  # due: answered at once from the old list while a thread lists again
    assert len(listing.current()) == 3
    deadline = time.monotonic() + 10
    while listing._refreshing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(listing.current()) == 4
    # A refresh=True lookup (a session entered right after it was stored) lists at once.
    store.put_bytes(layout.marker_key(CLUSTER, "session_2026-12-02_00-00-00_000000_1"), b"")
    assert len(listing.current(refresh=True)) == 5


def test_a_worker_lists_the_sessions_once_as_it_starts(tmp_path: Path) -> None:
    """wsgi's workers call warm_up: the first /clusters finds the listing made."""
    from runtime.server.app import create_app
    from runtime.server.config import ServerConfig
    from runtime.storage.config import StorageConfig

    _store(tmp_path, KeyLayout(""), 3)
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"))
    app = create_app(ServerConfig(storage=storage, cache_dir=tmp_path / "cache"))
    sessions_module.warm_up(app).join(30)
    with app.app_context():
        listing = sessions_module.stored_sessions()
        assert listing._sessions is not None and len(listing._sessions) == 3  # listed before any request

"""The head collector's session end marker (``session_ended.json``): written last at
shutdown, written for the previous session when Ray starts a new one, deleted when a
restarted collector finds the session running; never an error when storage fails."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson

from runtime.collector.app import Collector
from runtime.collector.session_end import SessionEndMarker
from runtime.storage.errors import StorageError
from runtime.storage.layout import KeyLayout
from runtime.storage.local import LocalStore
from tests.unit.collector.log_support import CLUSTER, NODE_A, SESSION_A, make_session, point_latest
from tests.unit.collector.test_shutdown import config, run_in_thread

LAYOUT = KeyLayout("")
SESSION_B = "session_2026-11-22_02-00-00_000001_2"


def _marked(store: LocalStore, session: str) -> bool:
    return store.exists(LAYOUT.session_ended_key(CLUSTER, session))


def test_marker_written_and_cleared(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    marker = SessionEndMarker(store, LAYOUT, CLUSTER)
    assert marker.ended(SESSION_A, "the head collector shut down")
    body = orjson.loads(store.get_bytes(LAYOUT.session_ended_key(CLUSTER, SESSION_A)))
    assert body["reason"] == "the head collector shut down" and body["endedAt"].endswith("+00:00")
    marker.reopened(SESSION_A)
    assert not _marked(store, SESSION_A)
    marker.reopened(SESSION_A)  # nothing to delete: fine


class BrokenStore(LocalStore):
    def put_bytes(self, key: str, data: bytes) -> None:
        raise StorageError("storage is down", backend="local", bucket="test")

    def delete(self, key: str) -> None:
        raise StorageError("storage is down", backend="local", bucket="test")


def test_storage_failures_are_not_errors(tmp_path: Path) -> None:
    marker = SessionEndMarker(BrokenStore(tmp_path), LAYOUT, CLUSTER)
    assert not marker.ended(SESSION_A, "x")
    marker.reopened(SESSION_A)  # logged, retried on the next sighting


def test_collector_clears_at_start_marks_a_replaced_session_and_marks_at_shutdown(tmp_path: Path) -> None:
    ray_root = tmp_path / "ray"
    ray_root.mkdir()
    (make_session(ray_root, SESSION_A, NODE_A) / "logs" / "raylet.out").write_bytes(b"raylet says hi\n")
    point_latest(ray_root, SESSION_A)
    (tmp_path / "bucket").mkdir()
    store = LocalStore(tmp_path / "bucket")
    # A previous collector container marked the session ended at its SIGTERM; Ray ran on.
    store.put_bytes(LAYOUT.session_ended_key(CLUSTER, SESSION_A), b"{}")
    collector = Collector(config(tmp_path, ray_root), store)
    stop = threading.Event()
    thread, reports = run_in_thread(collector, stop)
    try:
        deadline = time.monotonic() + 20
        while _marked(store, SESSION_A) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _marked(store, SESSION_A), "a running session's stale marker is deleted"
        # Ray restarts on this head: a new session; the previous one has ended.
        (make_session(ray_root, SESSION_B, NODE_A) / "logs" / "raylet.out").write_bytes(b"again\n")
        point_latest(ray_root, SESSION_B)
        collector.identity.refresh()
        while not _marked(store, SESSION_A) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marked(store, SESSION_A) and not _marked(store, SESSION_B)
    finally:
        stop.set()
        thread.join(30)
    assert reports, "the collector did not shut down"
    assert _marked(store, SESSION_B), "marked at shutdown"
    newest_other = max(
        info.updated
        for info in store.walk(LAYOUT.session_prefix(CLUSTER, SESSION_B))
        if info.updated is not None and not info.key.endswith("session_ended.json")
    )
    assert store.stat(LAYOUT.session_ended_key(CLUSTER, SESSION_B)).updated >= newest_other, "written last"

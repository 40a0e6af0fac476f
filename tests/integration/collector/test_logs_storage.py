"""LogShipper against every storage backend's emulator: the real sample logs go
up live, a growing file ends with every byte, and a session switch ships the old
session from prev-logs (deleted locally only after upload)."""

from __future__ import annotations

import os
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.collector.logs import LogShipper
from runtime.collector.metrics import CollectorMetrics
from runtime.storage.base import ObjectStore
from runtime.storage.errors import ObjectNotFoundError
from runtime.storage.layout import ClusterRef, KeyLayout

pytestmark = pytest.mark.integration

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "ray-samples" / "session-logs-sample.tar.gz"
SESSION_A = "session_2026-11-22_01-45-25_333080_9264"
SESSION_B = "session_2026-11-22_01-58-29_266863_14332"
NODE_A = "a" * 56
NODE_B = "b" * 56
CLUSTER = ClusterRef(namespace="default", name="demo", owner_kind="rayjob", owner_name="job")
LAYOUT = KeyLayout("history")


def wait_for(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def read(store: ObjectStore, key: str) -> bytes | None:
    try:
        return store.get_bytes(key)
    except ObjectNotFoundError:
        return None


def test_logs_ship_live_and_across_a_session_switch(store: ObjectStore, tmp_path: Path) -> None:
    root = tmp_path / "ray"
    with tarfile.open(SAMPLES) as tar:
        tar.extractall(root, filter="data")
    session_a = root / SESSION_A
    (session_a / f"gcs_server_port_{NODE_A}").write_text("6379")
    (root / "session_latest").symlink_to(SESSION_A)
    files = {
        p.relative_to(session_a / "logs").as_posix(): p.read_bytes()
        for p in session_a.rglob("logs/**/*")
        if p.is_file()
    }
    node = [NODE_A]
    sessions: list[str] = []
    metrics = CollectorMetrics()
    shipper = LogShipper(
        store=store,
        layout=LAYOUT,
        cluster=CLUSTER,
        tmp_root=root,
        node_id=lambda: node[0],
        upload_interval=1.0,
        metrics=metrics,
        on_session=sessions.append,
        session_check_interval=0.2,
    )
    shipper.start()
    try:
        prefix = LAYOUT.logs_prefix(CLUSTER, SESSION_A, NODE_A)
        wait_for(lambda: sum(1 for _ in store.walk(prefix)) == len(files), what="every sample file")
        growing = session_a / "logs" / "worker-live-01000000-1.out"
        with growing.open("ab") as fh:
            for i in range(20):
                fh.write(f"line {i}\n".encode())
                fh.flush()
                time.sleep(0.1)
        # Head container restart: new session, new node id; the old session goes via prev-logs.
        (root / SESSION_B / "logs").mkdir(parents=True)
        (root / SESSION_B / "logs" / "raylet.out").write_bytes(b"B\n")
        node[0] = NODE_B
        (root / "session_latest.tmp").symlink_to(SESSION_B)
        os.replace(root / "session_latest.tmp", root / "session_latest")

        expected = b"".join(f"line {i}\n".encode() for i in range(20))
        wait_for(lambda: read(store, prefix + "worker-live-01000000-1.out") == expected, what="all bytes")
        wait_for(lambda: read(store, LAYOUT.log_key(CLUSTER, SESSION_B, NODE_B, "raylet.out")) == b"B\n")
        wait_for(lambda: not (root / "prev-logs" / SESSION_A).exists(), what="prev-logs emptied")
        for rel in ("raylet.out", "jobs/supervisor-wl-job2-fails.log", "gcs_server.out"):
            assert read(store, prefix + rel) == files[rel]
    finally:
        assert shipper.stop(time.monotonic() + 20) is True
    assert sessions == [SESSION_A, SESSION_B]

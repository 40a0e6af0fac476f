"""A real collector process on a temp Ray root with a directory symlinked into the
session's logs (#14 item 1): only Ray's own logs reach storage, live and at
shutdown. No Ray needed: the layout is Ray's, the node id comes from the file
the GKE guide's postStart hook writes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.emulators.base import free_port
from tests.integration.ray_harness import CollectorProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.hostile]

SESSION = "session_2026-11-22_01-45-25_333080_9264"
NODE = "a" * 56
SECRET = b"collector credentials: never shipped\n"


def stored(bucket: Path) -> dict[str, bytes]:
    return {str(p.relative_to(bucket)): p.read_bytes() for p in bucket.rglob("*") if p.is_file()}


def test_a_real_collector_ships_no_file_from_a_linked_directory(tmp_path: Path) -> None:
    root = tmp_path / "ray"
    logs = root / SESSION / "logs"
    (logs / "events").mkdir(parents=True)
    (root / "session_latest").symlink_to(SESSION)
    (root / "raylet_node_id").write_text(NODE)
    outside = tmp_path / "collector-own"
    outside.mkdir()
    (outside / "token.log").write_bytes(SECRET)
    (logs / "linkdir").symlink_to(outside, target_is_directory=True)
    (logs / "events" / "nested").symlink_to(outside, target_is_directory=True)
    bucket = tmp_path / "bucket"
    env = {
        "RAY_CLUSTER_NAME": "hostile", "STORAGE_BACKEND": "local", "LOCAL_STORAGE_DIR": str(bucket),
        "STORAGE_CREATE_BUCKET": "true", "RAY_TMP_ROOT": str(root), "ENABLE_EVENT_COLLECTOR": "false",
        "RAY_COLLECTOR_LOG_UPLOAD_INTERVAL": "1s",
    }  # fmt: skip
    collector = CollectorProcess(env, free_port(), tmp_path / "collector.log")
    collector.start()
    try:
        time.sleep(1.5)  # the watcher is up
        (outside / "token.log").write_bytes(SECRET + b"refreshed\n")  # changes behind the link
        (outside / "other.log").write_bytes(SECRET)
        (logs / "raylet.out").write_bytes(b"raylet\n")
        wait_until(lambda: any(k.endswith("raylet.out") for k in stored(bucket)), timeout=30, what="raylet.out")
        time.sleep(2.5)  # two upload intervals: a followed change would have shipped
    finally:
        assert collector.terminate() == 0
    files = stored(bucket)
    assert any(k.endswith("/logs/raylet.out") for k in files)
    assert not [k for k in files if "linkdir" in k or "nested" in k]
    assert all(SECRET not in data for data in files.values())

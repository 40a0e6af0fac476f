"""A log rotated (renamed, a new file in its place) or truncated and rewritten while
the collector ships it: the stored copy always ends as the file's current content.

The worst case is a replacement or rewrite of the *same size* with the *same
modification time* (a coarse clock tick, or a tool that keeps the mtime): size and
mtime alone cannot tell it from the shipped file, so each case is also run with
the old mtime put back."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.collector.log_files import iter_log_files, unlink_if_unchanged
from runtime.collector.logs import LogShipper
from runtime.collector.logs_prev import UploadJob
from tests.unit.collector.log_support import NODE_A, SESSION_A, Env, holds, key, metric, wait_for

OLD = b"".join(b"old line %03d\n" % i for i in range(50))
NEW = b"".join(b"NEW LINE %03d\n" % i for i in range(50))
assert len(OLD) == len(NEW) and OLD != NEW


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    environment = Env(tmp_path)
    yield environment
    for shipper in environment.shippers:
        shipper.stop(time.monotonic() + 5)


def keep_mtime(path: Path, before: os.stat_result, same_mtime: bool) -> None:
    if same_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_mtime_ns == before.st_mtime_ns


def shipped_once(env: Env, rel: str, data: bytes, upload_interval: float) -> tuple[Path, os.stat_result]:
    path = env.logs / rel
    path.write_bytes(data)
    env.shipper(upload_interval=upload_interval).start()
    wait_for(holds(env.store, key(SESSION_A, NODE_A, rel), data), what="the first upload")
    return path, path.stat()


@pytest.mark.parametrize("same_mtime", [False, True], ids=["new-mtime", "same-mtime"])
def test_a_rotated_log_ships_the_old_and_the_new_file(env: Env, same_mtime: bool) -> None:
    path, before = shipped_once(env, "raylet.out", OLD, upload_interval=0.2)
    os.rename(path, env.logs / "raylet.out.1")  # as logging.handlers.RotatingFileHandler does
    path.write_bytes(NEW)
    keep_mtime(path, before, same_mtime)
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "raylet.out.1"), OLD), what="the rotated file")
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "raylet.out"), NEW), what="the new file")


@pytest.mark.parametrize("same_mtime", [False, True], ids=["new-mtime", "same-mtime"])
def test_a_log_rewritten_in_place_to_the_same_size_is_shipped_again(env: Env, same_mtime: bool) -> None:
    path, before = shipped_once(env, "gcs_server.out", OLD, upload_interval=0.2)
    with path.open("r+b") as fh:  # the same inode, truncated and rewritten
        fh.truncate(0)
        fh.write(NEW)
    assert path.stat().st_ino == before.st_ino and path.stat().st_size == before.st_size
    keep_mtime(path, before, same_mtime)
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "gcs_server.out"), NEW), what="the rewritten content")


def test_a_log_truncated_and_shorter_is_shipped_again(env: Env) -> None:
    """copytruncate: the log is cut to zero and new lines follow."""
    path, _ = shipped_once(env, "dashboard.log", OLD, upload_interval=0.2)
    os.truncate(path, 0)
    path.write_bytes(b"after the cut\n")
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "dashboard.log"), b"after the cut\n"), what="the short file")


@pytest.mark.parametrize("same_mtime", [False, True], ids=["new-mtime", "same-mtime"])
def test_a_rewrite_just_before_shutdown_is_in_the_final_upload(env: Env, same_mtime: bool) -> None:
    """With a long upload interval only stop() can ship the rewrite: it must see it too."""
    path, before = shipped_once(env, "raylet.err", OLD, upload_interval=60)
    os.rename(path, env.logs / "raylet.err.1")
    path.write_bytes(NEW)
    keep_mtime(path, before, same_mtime)
    assert env.shippers[0].stop(time.monotonic() + 10) is True
    assert env.store.get_bytes(key(SESSION_A, NODE_A, "raylet.err")) == NEW
    assert env.store.get_bytes(key(SESSION_A, NODE_A, "raylet.err.1")) == OLD


def test_a_prev_logs_file_rewritten_since_its_listing_is_not_deleted(tmp_path: Path) -> None:
    """prev-logs files are deleted once shipped, only if still the version listed:
    a same-size rewrite with the mtime put back must keep the file (shipped again)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "worker.out"
    path.write_bytes(OLD)
    (listed,) = iter_log_files(logs, tmp_path)
    before = path.stat()
    time.sleep(0.01)  # past a coarse clock tick, so the rewrite's ctime differs
    path.write_bytes(NEW)
    keep_mtime(path, before, same_mtime=True)
    assert unlink_if_unchanged(listed) is False
    assert path.read_bytes() == NEW
    (relisted,) = iter_log_files(logs, tmp_path)
    assert unlink_if_unchanged(relisted) is True and not path.exists()


def test_a_log_rotated_between_its_check_and_its_upload_is_shipped_afresh(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The upload opens the file listed (same inode) and finds a new one in its place:
    not a hostile swap to report and count as skipped, but a rotation. The new file is
    listed afresh and shipped; the rotated one ships under its new name."""
    path = env.logs / "raylet.out"
    path.write_bytes(OLD)
    rotated: list[Path] = []
    check = LogShipper._live_job

    def checked_then_rotated(self: LogShipper, file: Path, *args: str) -> UploadJob | None:
        job = check(self, file, *args)
        if job is not None and file == path and not rotated:
            os.rename(path, env.logs / "raylet.out.1")
            path.write_bytes(NEW)
            rotated.append(file)
        return job

    monkeypatch.setattr(LogShipper, "_live_job", checked_then_rotated)
    env.shipper(upload_interval=0.2, rescan_interval=1.0).start()
    wait_for(lambda: rotated, what="the rotation")
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "raylet.out.1"), OLD), what="the rotated file")
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "raylet.out"), NEW), what="the new file")
    assert metric(env.metrics, "log_files_skipped_total") == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "raylet.out" in r.getMessage()]

"""Temp files a killed build, download or upload left in the cache directory are
removed at start; those of processes still running (other gunicorn workers) are not."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from runtime.server.index.temp_files import STALE_PUBLISH_SECONDS, sweep_temp_files


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_files_of_dead_processes_go_and_live_ones_stay(tmp_path: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    gone = [tmp_path / f"abc.{dead}.140.building", tmp_path / f"def.{dead}.7.download"]
    kept = [
        tmp_path / f"abc.{alive}.140.building",  # another worker's build under way
        tmp_path / f"def.{alive}.7.download",
        tmp_path / "abc.sqlite",  # an index
        tmp_path / "abc.sqlite.lock",
        tmp_path / "weird.building",  # not our naming: not ours to delete
    ]
    old_publish, new_publish = tmp_path / ".publish-x1.zst", tmp_path / ".publish-x2.zst"
    for path in [*gone, *kept, old_publish, new_publish]:
        path.write_bytes(b"x")
    past = time.time() - STALE_PUBLISH_SECONDS - 60
    os.utime(old_publish, (past, past))

    assert sweep_temp_files(tmp_path) == 3
    assert not any(p.exists() for p in [*gone, old_publish])
    assert all(p.exists() for p in [*kept, new_publish])


def test_a_missing_directory_is_not_an_error(tmp_path: Path) -> None:
    assert sweep_temp_files(tmp_path / "absent") == 0

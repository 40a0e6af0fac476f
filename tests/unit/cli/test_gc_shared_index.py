"""``ray-history gc`` deletes a deleted session's shared indexes (``history-index/``) with
it, lists them with ``--dry-run``, and keeps those of a session that may be running."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from runtime.cli import main as cli_main
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore
from tests.unit.cli.test_gc import DEMO, S1, S2, _files, _write_session

DAY = 86400.0
S0 = "session_2025-12-01_00-00-00_000001_1"
OWNED = ClusterRef("team-b", "job-cluster", owner_kind="rayjob", owner_name="nightly")


def _write_index(root: Path, layout: KeyLayout, cluster: ClusterRef, session: str, age_days: float) -> list[str]:
    """A shared index (data + manifest) in two versions, as servers of two schemas left them."""
    store = LocalStore(root)
    keys = [
        *layout.index_keys(cluster, session, "v1-s1", "ab" * 32),
        *layout.index_keys(cluster, session, "v1-s2", "cd" * 32),
    ]
    when = time.time() - age_days * DAY
    for key in keys:
        store.put_bytes(key, b"index" if key.endswith(".sqlite") else b"{}")
        os.utime(root / key, (when, when))
    return keys


def _gc(root: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, object]]]:
    code = cli_main.main(["gc", "--storage-backend=local", f"--local-storage-dir={root}", "--json", *args])
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_gc_deletes_an_ended_sessions_indexes_and_keeps_a_running_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = KeyLayout("hist")
    ended = _write_session(tmp_path, DEMO, S1, 40, layout=layout)
    _write_session(tmp_path, DEMO, S2, 40, layout=layout)  # newest: may be running
    # Uploaded yesterday for a session that ended long ago: does not keep it.
    ended_index = _write_index(tmp_path, layout, DEMO, S1, 1)
    running_index = _write_index(tmp_path, layout, DEMO, S2, 40)
    before = _files(tmp_path)

    code, dry = _gc(tmp_path, "--older-than=30d", "--dry-run", "--storage-root-dir=hist", capsys=capsys)
    assert code == 0 and _files(tmp_path) == before
    by_session = {row["session"]: row for row in dry}
    assert by_session[S1]["action"] == "would delete"
    assert by_session[S1]["index_objects"] == sorted(ended_index)
    assert by_session[S1]["objects"] == len(ended)  # the index is not counted as the session's objects
    assert by_session[S2]["action"] == "kept" and by_session[S2]["index_objects"] == sorted(running_index)

    code, done = _gc(tmp_path, "--older-than=30d", "--storage-root-dir=hist", capsys=capsys)
    assert code == 0 and [r["session"] for r in done if r["action"] == "deleted"] == [S1]
    assert _files(tmp_path) == before - set(ended) - set(ended_index)
    assert set(running_index) <= _files(tmp_path)


def test_an_index_left_without_its_session_is_deleted_once_old(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upload that raced a gc run: only index objects, dated by themselves."""
    layout = KeyLayout()
    _write_session(tmp_path, OWNED, S2, 1, layout=layout)
    old_orphan = _write_index(tmp_path, layout, OWNED, S0, 40)
    young_orphan = _write_index(tmp_path, layout, OWNED, S1, 1)
    code, rows = _gc(tmp_path, "--older-than=30d", capsys=capsys)
    assert code == 0
    actions = {row["session"]: row["action"] for row in rows}
    assert actions == {S0: "deleted", S1: "kept", S2: "kept"}
    left = _files(tmp_path)
    assert not set(old_orphan) & left and set(young_orphan) <= left


def test_the_table_lists_the_index_objects_a_run_would_delete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = KeyLayout()
    _write_session(tmp_path, DEMO, S1, 40, layout=layout)
    _write_session(tmp_path, DEMO, S2, 40, layout=layout)
    index = _write_index(tmp_path, layout, DEMO, S1, 40)
    _write_index(tmp_path, layout, DEMO, S2, 40)
    argv = ["gc", "--storage-backend=local", f"--local-storage-dir={tmp_path}", "--older-than=30d", "--dry-run"]
    assert cli_main.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = [line.split("shared index: ", 1)[1] for line in lines if "shared index: " in line]
    assert listed == sorted(index)  # the kept session's indexes are not listed


def test_a_container_off_azure_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["gc", "--storage-backend=local", f"--local-storage-dir={tmp_path}", "--older-than=30d"]
    with pytest.raises(SystemExit) as exited:
        cli_main.main([*argv, "--shared-index-container=indexes"])
    assert exited.value.code == 2
    assert "--shared-index-container=indexes: only for --storage-backend=azureblob" in capsys.readouterr().err

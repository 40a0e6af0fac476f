"""``ray-history clusters --failed --since/--until --owner`` (#19 item 4), in-process from
a local bucket holding the real session A and marker-only sessions."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from runtime.cli import main as cli_main
from runtime.cli import render
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.sample_session import SESSION_A, write_sample_session

NIGHTLY = ClusterRef("team-a", "rayjob-nightly-x7k2p", "rayjob", "rayjob-nightly")
NIGHTLY_SESSION = "session_2026-10-05_12-30-00_123456_7"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli_main.main(argv)
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def source(tmp_path: Path) -> list[str]:
    bucket = tmp_path / "bucket"
    storage = StorageConfig(backend="local", local_dir=str(bucket), create_bucket=True)
    with open_store(storage) as store:
        write_sample_session(store, storage.layout)
        store.put_bytes(KeyLayout("").marker_key(NIGHTLY, NIGHTLY_SESSION), b"")
    return ["--storage-backend=local", f"--local-storage-dir={bucket}", f"--cache-dir={tmp_path / 'cache'}"]


def _sessions(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    return [entry["sessionName"] for entry in orjson.loads(out)]


def test_failed_since_until_owner(source: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    listing = ["clusters", *source, "--json"]
    assert _sessions([*listing, "--failed"], capsys) == []  # not indexed yet: cannot be judged
    assert _run(["jobs", "raycluster-demo", *source, "--json"], capsys)[0] == 0  # indexes session A
    assert _sessions([*listing, "--failed", "--since", "100000d"], capsys) == [SESSION_A]
    assert _sessions([*listing, "--since", "2026-11-01"], capsys) == [SESSION_A]
    assert _sessions([*listing, "--until", "2026-10-05"], capsys) == [NIGHTLY_SESSION]
    assert _sessions([*listing, "--owner", "rayjob/rayjob-nightly"], capsys) == [NIGHTLY_SESSION]
    code, table, _ = _run(["clusters", *source, "--failed"], capsys)
    assert code == 0 and SESSION_A in table and "FAILED:2" in table and "SUCCEEDED:2" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "last week"], "argument --since: --since must be an ISO date"),
        (["--until", "2026-02-30"], "argument --until: --until must be an ISO date"),
    ],
)
def test_bad_flags_name_the_flag(
    source: list[str], capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = _run(["clusters", *source, *args], capsys)
    assert code == 2 and message in err


def test_until_before_since_is_the_servers_400(source: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["clusters", *source, "--since", "2026-11-02", "--until", "2026-11-01"], capsys)
    assert code != 0 and "until is before since" in err


def test_table_shows_the_summary_columns() -> None:
    entry = {
        "name": "c",
        "namespace": "ns",
        "sessionName": "session_x",
        "createTime": "t",
        "summary": {"start": 1000, "end": 62000, "jobs": {"FAILED": 1, "SUCCEEDED": 3}, "failedTasks": 7},
    }
    from rich.console import Console

    console = Console(width=200, no_color=True)
    with console.capture() as captured:
        console.print(render.clusters_table([entry]))
    out = captured.get()
    assert "1m01s" in out and "FAILED:1 SUCCEEDED:3" in out and "FAILED TASKS" in out and " 7 " in out

"""Tables and JSON output."""

from __future__ import annotations

import orjson
import pytest
from rich.console import Console
from rich.table import Table

from runtime.cli import render


def _text(table: Table) -> str:
    console = Console(width=250, record=True, no_color=True)
    console.print(table)
    return console.export_text()


def test_jobs_table() -> None:
    jobs = [
        {
            "job_id": "02000000",
            "submission_id": "raysubmit_x",
            "type": "SUBMISSION",
            "status": "FAILED",
            "entrypoint": "python " + "x" * 100,
            "start_time": 1795311943091,
            "end_time": 1795311944621,
        },
        {"job_id": None, "submission_id": "[odd]", "status": "RUNNING", "start_time": 0},
    ]
    out = _text(render.jobs_table(jobs, "default/demo s1"))
    assert "02000000" in out and "FAILED" in out and "2026-11-22 01:45:43Z" in out and "1.5s" in out
    assert "[odd]" in out  # markup in data is escaped, not interpreted
    assert "x" * 60 not in out and "..." in out
    assert "2 job(s)" in out


def test_tasks_table_caption_and_short_node() -> None:
    result = {
        "total": 41,
        "num_filtered": 7,
        "result": [
            {
                "task_id": "ab",
                "attempt_number": 0,
                "name": "t",
                "state": "FAILED",
                "type": "NORMAL_TASK",
                "job_id": "02000000",
                "node_id": "98f883cfe30ce800c7aac63e",
                "error_type": "WORKER_DIED",
            }
        ],
    }
    out = _text(render.tasks_table(result, "w"))
    assert "98f883cfe30c " in out and "98f883cfe30ce8" not in out
    assert "1 shown, 7 match, 41 total" in out and "WORKER_DIED" in out


def test_clusters_table_marks_live_and_owner() -> None:
    entries = [
        {"name": "c", "namespace": "ns", "sessionName": "live", "createTime": "t"},
        {
            "name": "c2",
            "namespace": "ns",
            "sessionName": "session_x",
            "ownerKind": "rayjob",
            "ownerName": "j",
            "createTime": "t2",
        },
    ]
    out = _text(render.clusters_table(entries))
    assert "RUNNING" in out and "rayjob/j" in out and "session_x" in out


@pytest.mark.parametrize(("start", "end", "shown"), [(0, 5, ""), (1000, 62000, "1m01s"), (1, 3_700_001, "1h01m40s")])
def test_duration(start: int, end: int, shown: str) -> None:
    assert render.duration(start, end) == shown


def test_print_json_is_plain(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_json({"a": [1, "é"]})
    out = capsys.readouterr().out
    assert orjson.loads(out) == {"a": [1, "é"]} and "\x1b" not in out


def test_progress_only_on_a_terminal_and_not_quiet() -> None:
    from runtime.cli.progress import human_bytes, progress_enabled

    assert progress_enabled(quiet=False, stderr_is_tty=True)
    assert not progress_enabled(quiet=True, stderr_is_tty=True)
    assert not progress_enabled(quiet=False, stderr_is_tty=False)
    assert (human_bytes(512), human_bytes(1536), human_bytes(3 * 1024**3)) == ("512 B", "1.5 KiB", "3.0 GiB")

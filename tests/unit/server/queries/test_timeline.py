"""Chrome-trace timeline details (the whole-session check is in test_live_answers.py)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import orjson

from runtime.server.index.reader import SessionIndex
from runtime.server.queries.timeline import ProfileRow, chrome_trace, download_name, timeline
from tests.unit.server.queries.factory import Task, create_index, insert_tasks


def row(
    task_id: str, event: str, *, attempt: int = 0, extra: str | None = "{}", component: str = "worker"
) -> ProfileRow:
    return ProfileRow(
        task_id, attempt, "02000000", component, "w1", "10.0.0.1", event, 2_000_000, 5_000_500, extra, "f", ""
    )


def test_complete_event_fields() -> None:
    (event, process, thread) = chrome_trace([row("t1", "task:execute")])
    assert event == {
        "cat": "task:execute",
        "name": "task:execute",
        "pid": 0,
        "tid": 0,
        "ts": 2000.0,
        "dur": 3000.5,
        "cname": "rail_animation",
        "args": {
            "task_id": "t1",
            "job_id": "02000000",
            "attempt_number": 0,
            "func_or_class_name": "f",
            "actor_id": None,
        },
        "ph": "X",
    }
    assert process == {"name": "process_name", "args": {"name": "Node 10.0.0.1"}, "pid": 0, "tid": None, "ph": "M"}
    assert thread == {"name": "thread_name", "args": {"name": "worker:w1"}, "pid": 0, "tid": 0, "ph": "M"}


def test_extra_data_names_and_colours() -> None:
    events = chrome_trace(
        [
            row("t1", "task::square-1", extra='{"name": "__main__.square", "task_id": "x"}'),
            row("t1", "custom", extra='{"cname": "ray.get"}'),
            row("t1", "odd", extra="not json"),
        ]
    )
    named, coloured, odd = events[:3]
    assert named["name"] == "__main__.square" and named["cname"] == "generic_work"
    assert list(named["args"])[:2] == ["name", "task_id"] and named["args"]["task_id"] == "t1"
    assert coloured["cname"] == "good" and coloured["name"] == "custom"
    assert odd["args"]["task_id"] == "t1"


def test_other_components_are_skipped_and_attempts_capped() -> None:
    rows = [row("t1", "a", component="raylet"), row("t2", "b"), row("t3", "c"), row("t4", "d")]
    events = [e for e in chrome_trace(rows, max_attempts=2) if e["ph"] == "X"]
    assert [e["args"]["task_id"] for e in events] == ["t2"]


def test_drivers_excluded_and_job_filter(tmp_path: Path) -> None:
    conn = create_index(tmp_path / "i.sqlite")
    insert_tasks(conn, [Task(task_id="t1", func_name="f"), Task(task_id="d", type="DRIVER_TASK", job_id="03000000")])
    conn.executemany(
        "INSERT INTO profile_events VALUES (?,?,?,?,?,?,?,?,?,?)",
        [
            ("t1", 0, "02000000", "worker", "w", "ip", "task:execute", 1, 2, "{}"),
            ("d", 0, "03000000", "driver", "w", "ip", "submit_task", 1, 2, "{}"),
            ("orphan", 0, "03000000", "worker", "w", "ip", "task:execute", 1, 2, None),
        ],
    )
    conn.commit()
    conn.close()
    with SessionIndex(tmp_path / "i.sqlite") as index:
        all_ids = [e["args"]["task_id"] for e in orjson.loads(timeline(index, None)) if e["ph"] == "X"]
        job3 = [e["args"]["task_id"] for e in orjson.loads(timeline(index, "03000000")) if e["ph"] == "X"]
    assert all_ids == ["orphan", "t1"]
    assert job3 == ["orphan"]


def test_download_name() -> None:
    now = datetime(2026, 11, 22, 1, 2, 3)
    assert download_name("02000000", now) == "timeline-02000000-2026-11-22_01-02-03.json"
    assert download_name(None, now) == "timeline-2026-11-22_01-02-03.json"
    assert download_name('x"; evil', now) == "timeline-2026-11-22_01-02-03.json"

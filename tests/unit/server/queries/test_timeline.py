"""Chrome-trace timeline details (the whole-session check is in test_live_answers.py)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from runtime.server.index.reader import SessionIndex
from runtime.server.queries.timeline import ProfileRow, chrome_trace, download_name, timeline
from tests.unit.server.queries.factory import Task, create_index, insert_tasks


def row(
    task_id: str, event: str, *, attempt: int = 0, extra: dict[str, Any] | None = None, component: str = "worker"
) -> ProfileRow:
    return ProfileRow(task_id, attempt, "02000000", component, "w1", "10.0.0.1", event, 2.0, 5.0005, extra, "f", "")


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
            row("t1", "task::square-1", extra={"name": "__main__.square", "task_id": "x"}),
            row("t1", "custom", extra={"cname": "ray.get"}),
            row("t1", "odd", extra=None),
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


def _profile(name: str, extra: object) -> dict[str, Any]:
    event = {"start_time": 0.001, "end_time": 0.002, "extra_data": extra, "event_name": name}
    return {"component_type": "worker", "component_id": "w", "node_ip_address": "ip", "events": [event]}


def test_drivers_excluded_and_job_filter(tmp_path: Path) -> None:
    conn = create_index(tmp_path / "i.sqlite")
    insert_tasks(
        conn,
        [
            Task(task_id="t1", func_name="f", profiling_data=_profile("task:execute", {})),
            Task(task_id="t1", attempt=1, func_name="f", profiling_data=_profile("task:execute", {})),
            Task(task_id="t2", job_id="03000000", profiling_data=_profile("task:execute", [1, 2])),
            Task(task_id="t3", job_id="03000000"),  # no profile events: drawn as nothing
            Task(task_id="d", type="DRIVER_TASK", job_id="03000000", profiling_data=_profile("submit_task", {})),
        ],
    )
    conn.commit()
    conn.close()
    with SessionIndex(tmp_path / "i.sqlite") as index:
        every = [e for e in orjson.loads(timeline(index, None)) if e["ph"] == "X"]
        job3 = [e["args"]["task_id"] for e in orjson.loads(timeline(index, "03000000")) if e["ph"] == "X"]
    assert [(e["args"]["task_id"], e["args"]["attempt_number"]) for e in every] == [("t1", 1), ("t1", 0), ("t2", 0)]
    assert every[0]["args"]["func_or_class_name"] == "f" and every[0]["ts"] == 1.0 and every[0]["dur"] == 1.0
    assert every[2]["args"] == {  # extra data that is not an object is dropped, as Ray does
        "task_id": "t2", "job_id": "03000000", "attempt_number": 0, "func_or_class_name": "", "actor_id": None,
    }  # fmt: skip
    assert job3 == ["t2"]


def test_download_name() -> None:
    now = datetime(2026, 11, 22, 1, 2, 3)
    assert download_name("02000000", now) == "timeline-02000000-2026-11-22_01-02-03.json"
    assert download_name(None, now) == "timeline-2026-11-22_01-02-03.json"
    assert download_name('x"; evil', now) == "timeline-2026-11-22_01-02-03.json"

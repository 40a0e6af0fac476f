"""``/api/v0/tasks/timeline``: Chrome-tracing JSON from the stored profile events.

A port of Ray 2.60's ``chrome_tracing_dump`` (ray/_private/profiling.py) over the
``profiling_data`` of each task row's detail fields: tasks in Ray's list order
(task id, newest attempt first, drivers excluded), complete events in the order
they were recorded, then one ``process_name`` record per node and one
``thread_name`` record per worker. Like Ray, at most 10 000 task attempts are
drawn, so at most that many rows are rendered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from runtime.server.index.reader import SessionIndex
from runtime.server.queries.options import MAX_LIMIT

_COLORS = {
    "worker_idle": "cq_build_abandoned",
    "task": "rail_response",
    "task:deserialize_arguments": "rail_load",
    "task:execute": "rail_animation",
    "task:store_outputs": "rail_idle",
    "wait_for_function": "detailed_memory_dump",
    "ray.get": "good",
    "ray.put": "terrible",
    "ray.wait": "vsync_highlight_color",
    "submit_task": "background_memory_dump",
    "fetch_and_run_function": "detailed_memory_dump",
    "register_remote_function": "detailed_memory_dump",
}
_DEFAULT_COLOR = "generic_work"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass(frozen=True)
class ProfileRow:
    task_id: str
    attempt: int
    job_id: str
    component_type: str
    component_id: str
    node_ip: str
    event_name: str
    start_ms: float  # as Ray's profiling data holds it: ns / 1e6
    end_ms: float
    extra_data: dict[str, Any] | None  # parsed; None when absent or not an object
    func_name: str
    actor_id: str


# Rows come in key order (the primary key, or tasks_by_job's (job_id, task_id, attempt)):
# no sort of the whole table before the first row; each task's attempts are reversed
# in Python (Ray lists the newest first), and reading stops once enough are drawn.
_SQL = """
SELECT task_id, attempt, job_id, func_name, actor_id, detail FROM tasks {hint}
WHERE {where} type != 'DRIVER_TASK'
"""


def profile_rows(index: SessionIndex, job_id: str | None) -> Iterator[ProfileRow]:
    if job_id:
        sql = _SQL.format(hint="INDEXED BY tasks_by_job", where="job_id = ? AND") + " ORDER BY job_id, task_id, attempt"
        rows = index.iter_rows(sql, (job_id,))
    else:
        rows = index.iter_rows(_SQL.format(hint="", where="") + " ORDER BY task_id, attempt")
    render = index.details()
    for attempts in _newest_first(rows):
        for row in attempts:
            stored = bytes(row[5])
            if render.has_profile(stored):  # most tasks have none: render only those that do
                yield from _events(row, orjson.loads(render(stored)))


def _newest_first(rows: Iterable[tuple[Any, ...]]) -> Iterator[list[tuple[Any, ...]]]:
    """Each task's rows (consecutive in key order), newest attempt first."""
    group: list[tuple[Any, ...]] = []
    for row in rows:
        if group and row[0] != group[0][0]:
            group.reverse()
            yield group
            group = []
        group.append(row)
    if group:
        group.reverse()
        yield group


def _events(row: tuple[Any, ...], detail: dict[str, Any]) -> Iterator[ProfileRow]:
    """The profile events of one attempt's row and its parsed detail fields."""
    task_id, attempt, job, func, actor = row[0], row[1], row[2], row[3] or "", row[4] or ""
    profile = detail.get("profiling_data") or {}
    ctype, cid, ip = (
        profile.get("component_type", ""),
        profile.get("component_id", ""),
        profile.get("node_ip_address", ""),
    )
    for event in profile.get("events") or ():
        data = event.get("extra_data")
        yield ProfileRow(
            task_id, attempt, job, ctype, cid, ip, event.get("event_name", ""),
            event.get("start_time", 0.0), event.get("end_time", 0.0),
            data if isinstance(data, dict) else None, func, actor,
        )  # fmt: skip


def chrome_trace(rows: Iterable[ProfileRow], max_attempts: int = MAX_LIMIT) -> list[dict[str, Any]]:
    """The trace events, as ``chrome_tracing_dump`` lays them out."""
    events: list[dict[str, Any]] = []
    node_index: dict[str, int] = {}
    worker_index: dict[tuple[int, str], int] = {}
    attempts = 0
    last: tuple[str, int] | None = None
    for row in rows:
        if (row.task_id, row.attempt) != last:
            last = (row.task_id, row.attempt)
            attempts += 1
            if attempts > max_attempts:
                break
        if row.component_type not in ("worker", "driver"):
            continue
        extra = dict(row.extra_data or {})
        # Ray updates the event's own extra data in place: its keys keep their place.
        extra["task_id"] = row.task_id
        extra["job_id"] = row.job_id
        extra["attempt_number"] = row.attempt
        extra["func_or_class_name"] = row.func_name
        extra["actor_id"] = row.actor_id or None
        pid = node_index.setdefault(row.node_ip, len(node_index))
        component = f"{row.component_type}:{row.component_id}"
        tid = worker_index.setdefault((pid, component), len(worker_index))
        cname = _COLORS.get(row.event_name, _DEFAULT_COLOR)
        if "cname" in extra:
            cname = _COLORS.get(str(extra["cname"]), _DEFAULT_COLOR)
        start_ms, end_ms = row.start_ms, row.end_ms  # Ray's ms floats, then * 1e3
        events.append(
            {
                "cat": row.event_name,
                "name": extra.get("name", row.event_name),
                "pid": pid,
                "tid": tid,
                "ts": start_ms * 1e3,
                "dur": end_ms * 1e3 - start_ms * 1e3,
                "cname": cname,
                "args": extra,
                "ph": "X",
            }
        )
    for node, pid in node_index.items():
        events.append({"name": "process_name", "args": {"name": f"Node {node}"}, "pid": pid, "tid": None, "ph": "M"})
    for (pid, component), tid in worker_index.items():
        events.append({"name": "thread_name", "args": {"name": component}, "pid": pid, "tid": tid, "ph": "M"})
    return events


def timeline(index: SessionIndex, job_id: str | None) -> bytes:
    return orjson.dumps(chrome_trace(profile_rows(index, job_id)))


def download_name(job_id: str | None, now: datetime) -> str:
    """``timeline-<job>-<YYYY-MM-DD_HH-MM-SS>.json`` (no ``None`` when there is no job)."""
    stamp = now.strftime("%Y-%m-%d_%H-%M-%S")
    if job_id and not _SAFE_NAME.fullmatch(job_id):
        job_id = None  # never echo arbitrary request text into a header
    return f"timeline-{job_id}-{stamp}.json" if job_id else f"timeline-{stamp}.json"

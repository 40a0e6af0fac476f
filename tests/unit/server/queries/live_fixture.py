"""An index filled from the live Ray 2.60 answers of session A (``ray-samples/api``).

The rows are exactly what the live dashboard returned, so every query and renderer
can be checked against the live answer without the index builder: the list must
give back the same tasks, the summaries the same summaries, and so on.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson

from tests.support.sample_session import API
from tests.unit.server.queries.factory import create_index, refresh_counts

BRIEF_FIELDS = (
    "task_id",
    "attempt_number",
    "name",
    "state",
    "job_id",
    "actor_id",
    "type",
    "func_or_class_name",
    "parent_task_id",
    "node_id",
    "worker_id",
    "worker_pid",
    "error_type",
)


def live(name: str) -> Any:
    return orjson.loads((API / name).read_bytes())


def live_tasks() -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = live("api_v0_tasks_detail_limit10000.json")["data"]["result"]["result"]
    return tasks


def _ms(value: object) -> int | None:
    return None if value is None else int(float(str(value)))


def _insert_task(conn: sqlite3.Connection, task: dict[str, Any]) -> None:
    extra = {k: v for k, v in task.items() if k not in BRIEF_FIELDS}
    conn.execute(
        "INSERT INTO tasks (task_id, attempt, job_id, actor_id, name, func_name, state, type, parent_task_id,"
        " node_id, worker_id, worker_pid, creation_ms, start_ms, end_ms, error_type, detail)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            task["task_id"],
            task["attempt_number"],
            task["job_id"],
            task["actor_id"] or "",
            task["name"],
            task["func_or_class_name"],
            task["state"],
            task["type"],
            task["parent_task_id"] or "",
            task["node_id"] or "",
            task["worker_id"] or "",
            task["worker_pid"] or 0,
            _ms(task["creation_time_ms"]),
            _ms(task["start_time_ms"]),
            _ms(task["end_time_ms"]),
            task["error_type"],
            orjson.dumps(extra),
        ),
    )


def build_live_index(path: Path, *, driver_tasks: bool = True) -> Path:
    """Session A's live tasks, actors, jobs, nodes and events in a fresh index."""
    conn = create_index(path)
    for task in live_tasks():
        _insert_task(conn, task)
    if driver_tasks:  # the live list excludes drivers; add the session's driver tasks back
        for job in ("01000000", "02000000", "03000000", "04000000"):
            driver = {f: None for f in BRIEF_FIELDS} | {
                "task_id": "f" * 40 + job,
                "attempt_number": 0,
                "name": "",
                "state": "RUNNING",
                "job_id": job,
                "type": "DRIVER_TASK",
                "func_or_class_name": "",
                "creation_time_ms": None,
                "start_time_ms": None,
                "end_time_ms": None,
            }
            _insert_task(conn, driver)
    refresh_counts(conn)
    actors = live("api_v0_actors_detail=1.json")["data"]["result"]["result"]
    by_id = {a["actor_id"]: a for a in actors}
    for actor_id, actor in live("logical_actors.json")["data"]["actors"].items():
        state_row = by_id.get(actor_id, {})
        conn.execute(
            "INSERT INTO actors (actor_id, job_id, node_id, worker_id, state, class_name, repr_name,"
            " required_resources_json, actor_json) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                actor_id,
                actor["jobId"],
                actor["address"]["nodeId"],
                actor["address"]["workerId"],
                actor["state"],
                actor["className"],
                state_row.get("repr_name") or "",
                orjson.dumps(actor.get("requiredResources")),
                orjson.dumps(actor),
            ),
        )
    for n, job in enumerate(live("api_jobs.json")):
        conn.execute(
            "INSERT INTO jobs (job_key, job_id, submission_id, sort_key, job_json) VALUES (?,?,?,?,?)",
            (
                job["job_id"] or job["submission_id"],
                job["job_id"],
                job["submission_id"],
                job["start_time"] or n,
                orjson.dumps(job),
            ),
        )
    summary = live("nodes_view=summary.json")["data"]
    for node in summary["summary"]:
        raylet = node["raylet"]
        conn.execute(
            "INSERT INTO nodes (node_id, ip, hostname, node_name, state, node_group, is_head, resources_text,"
            " node_json, raw_json) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                raylet["nodeId"],
                node["ip"],
                node["hostname"],
                raylet["nodeName"],
                raylet["state"],
                "",
                int(raylet["isHeadNode"]),
                summary["nodeLogicalResources"][raylet["nodeId"]],
                orjson.dumps(node),
                orjson.dumps({"node_id": raylet["nodeId"], "definition": None, "transitions": []}),
            ),
        )
    for job_id, events in live("events.json")["data"]["events"].items():
        for event in events:
            conn.execute(
                "INSERT INTO log_events (job_id, ts, event_id, event_json) VALUES (?,?,?,?)",
                (job_id, float(event["timestamp"]), event["eventId"], orjson.dumps(event)),
            )
    conn.commit()
    conn.close()
    return path

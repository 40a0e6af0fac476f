"""A session's outcome at a glance, read from its built index (read-only).

Used by the history list (``/clusters`` entries' ``summary``): only the small
tables are read (``jobs``, ``nodes``, ``task_counts``), never ``tasks``, so a
summary costs well under a millisecond even for a session of millions of tasks.

* ``start``/``end``: Unix ms, the earliest start and the latest end among the
  session's jobs and nodes (``None`` when none is known: a node that never
  reported its death and no finished job leave ``end`` unknown);
* ``jobs``: job count by status (``""`` = unknown, no stored ``/api/jobs/``);
* ``failedTasks``: task attempts in state ``FAILED``; ``tasks``: all attempts;
* ``nodes``: nodes seen; ``failed``: a job ``FAILED`` or a failed task attempt.
"""

from __future__ import annotations

from typing import Any

import orjson

from runtime.server.index.reader import SessionIndex
from runtime.server.index.schema import META_CLUSTER, META_SCHEMA_VERSION, SCHEMA_VERSION

FAILED = "FAILED"


class NotCurrentError(Exception):
    """The index file was written by another schema version (it will be rebuilt)."""


def _positive(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def read_summary(index: SessionIndex) -> dict[str, Any]:
    """The summary of one built index (raises :class:`NotCurrentError`, ``sqlite3.Error``)."""
    if index.meta(META_SCHEMA_VERSION) != str(SCHEMA_VERSION):
        raise NotCurrentError(str(index.path))
    starts: list[int] = []
    ends: list[int] = []
    jobs: dict[str, int] = {}
    for (job_json,) in index.iter_rows("SELECT job_json FROM jobs"):
        job = orjson.loads(job_json)
        status = str(job.get("status") or "")
        jobs[status] = jobs.get(status, 0) + 1
        if (start := _positive(job.get("start_time"))) is not None:
            starts.append(start)
        if (end := _positive(job.get("end_time"))) is not None:
            ends.append(end)
    nodes = 0
    for (node_json,) in index.iter_rows("SELECT node_json FROM nodes"):
        nodes += 1
        raylet = orjson.loads(node_json).get("raylet") or {}
        if (start := _positive(raylet.get("startTimeMs"))) is not None:
            starts.append(start)
        if (end := _positive(raylet.get("endTimeMs"))) is not None:
            ends.append(end)
    failed_tasks = int(index.scalar("SELECT COALESCE(SUM(n), 0) FROM task_counts WHERE state = ?", (FAILED,)))
    tasks = int(index.scalar("SELECT COALESCE(SUM(n), 0) FROM task_counts"))
    start_ms = min(starts) if starts else None
    end_ms = max(ends) if ends else None
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        end_ms = None  # clocks disagree: no duration rather than a negative one
    summary: dict[str, Any] = {
        "start": start_ms,
        "end": end_ms,
        "durationSeconds": None if start_ms is None or end_ms is None else round((end_ms - start_ms) / 1000, 3),
        "jobs": dict(sorted(jobs.items())),
        "failedTasks": failed_tasks,
        "tasks": tasks,
        "nodes": nodes,
        "failed": jobs.get(FAILED, 0) > 0 or failed_tasks > 0,
    }
    cluster = index.meta(META_CLUSTER)
    owner = orjson.loads(cluster) if cluster else {}
    if owner.get("owner_kind") and owner.get("owner_name"):
        summary["ownerKind"] = owner["owner_kind"]
        summary["ownerName"] = owner["owner_name"]
    return summary

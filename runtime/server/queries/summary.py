"""``/api/v0/tasks/summarize``: by name (Ray's ``func_name`` mode) or by lineage.

* By name: Ray 2.60 keys the summary by ``name or func_or_class_name`` over at most
  10 000 tasks. We count every selected attempt exactly, from ``task_counts`` when
  the filters allow (a few thousand rows, not a million) and from an indexed
  ``GROUP BY`` otherwise.
* By lineage: the tree holds every task, so like Ray it covers the first 10 000
  selected attempts (with Ray's warning when that is not all of them). The result
  is kept in the index's ``computed`` table per filter set: a session pays once.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from typing import Any

import orjson

from runtime.server.index.reader import SessionIndex
from runtime.server.queries.lineage import LineageTask, summarize_by_lineage
from runtime.server.queries.options import FILTER_KEYS, MAX_LIMIT, SUMMARY_BY_LINEAGE, TaskQuery
from runtime.server.queries.tasks import state_api_envelope
from runtime.server.queries.tasksql import Condition, TaskSelection, where_clause

logger = logging.getLogger(__name__)

CACHE_VERSION = "v1"
MISSING_DATA_WARNING = (
    "There is missing data in this aggregation. Possibly due to task data being evicted to preserve memory."
)
_TOTAL_KEYS = {
    "NORMAL_TASK": "total_tasks",
    "ACTOR_TASK": "total_actor_tasks",
    "ACTOR_CREATION_TASK": "total_actor_scheduled",
}


def summarize_tasks(index: SessionIndex, query: TaskQuery) -> bytes:
    """The whole summarize answer (cached in the index when it was costly)."""
    key = f"summarize:{CACHE_VERSION}:{query.summary_by}:{query.cache_key()}"
    cached = index.computed(key)
    if cached is not None:
        return cached
    selection = TaskSelection(index, query)
    counts = selection.counts()
    if query.summary_by == SUMMARY_BY_LINEAGE:
        cluster, costly = _lineage(index, selection), True
    else:
        cluster, costly = _by_name(index, selection)
    # Ray warns when the summary covers fewer attempts than were selected.
    covered = sum(int(cluster[k]) for k in _TOTAL_KEYS.values())
    warnings = [MISSING_DATA_WARNING] if covered < counts.num_filtered else []
    result = _dumps({"node_id_to_summary": {"cluster": cluster}})
    body = state_api_envelope(counts, result, warnings)
    if costly:
        index.store_computed(key, body)
    return body


def _dumps(value: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:
        # orjson stops at 255 levels; a lineage chain can be deeper (Ray's json is not).
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


# ------------------------------------------------------------------- by name
def _by_name(index: SessionIndex, selection: TaskSelection) -> tuple[dict[str, Any], bool]:
    """(summary, computed from the tasks table) - the latter is worth caching."""
    conds = selection.conditions
    from_counts = selection.small_counts and all(c.column.counted for c in conds)
    rows: list[tuple[Any, ...]] = []
    if not selection.empty and from_counts:
        where, params = where_clause(conds)
        sql = f"SELECT name, func_name, type, state, SUM(n) FROM task_counts WHERE {where} GROUP BY 1, 2, 3, 4"  # noqa: S608
        rows = index.rows(sql, params)
    elif not selection.empty and selection.counts().num_filtered:
        # Filters task_counts cannot answer: like Ray, the first 10 000 selected attempts.
        page, params = selection.page_sql("name, func_name, type, state", MAX_LIMIT, attempt_desc=True)
        rows = index.rows(f"SELECT name, func_name, type, state, COUNT(*) FROM ({page}) GROUP BY 1, 2, 3, 4", params)  # noqa: S608
    return summary_by_name(rows, lambda key, types: _first_type(index, selection, key, types)), not from_counts


def summary_by_name(rows: list[tuple[Any, ...]], first_type: Any = None) -> dict[str, Any]:
    """Group ``(name, func_name, type, state, count)`` rows as Ray's
    ``to_summary_by_func_name``: key = name, else function name; an attempt with
    neither (lifecycle events only, no definition) is left out, as KubeRay's Go history server
    does; an empty state counts as ``NIL``. ``first_type(key, types)`` picks the
    type shown when one key has several (Ray: the type of the first task)."""
    states: dict[str, dict[str, int]] = defaultdict(dict)
    types: dict[str, dict[str, int]] = defaultdict(dict)
    totals = {"total_tasks": 0, "total_actor_tasks": 0, "total_actor_scheduled": 0}
    for name, func_name, task_type, state, count in rows:
        key = name or func_name
        if not key:
            continue
        n = int(count)
        state_name = state or "NIL"
        states[key][state_name] = states[key].get(state_name, 0) + n
        types[key][task_type] = types[key].get(task_type, 0) + n
        if task_type in _TOTAL_KEYS:
            totals[_TOTAL_KEYS[task_type]] += n
    summary: dict[str, Any] = {}
    for key in sorted(states):
        seen = types[key]
        if len(seen) == 1 or first_type is None:
            task_type = max(seen, key=lambda t: (seen[t], t))
        else:
            task_type = first_type(key, seen)
        summary[key] = {"func_or_class_name": key, "type": task_type, "state_counts": states[key]}
    return {"summary": summary, **totals, "summary_by": "func_name"}


def _first_type(index: SessionIndex, selection: TaskSelection, key: str, seen: dict[str, int]) -> str:
    """The type of the first selected task (by id) under ``key``: what Ray shows."""
    name_col = FILTER_KEYS["name"]
    extra = [Condition(name_col, "=", (key,))]
    where, params = where_clause([*selection.conditions, *extra])
    found = index.scalar(f"SELECT type FROM tasks WHERE {where} ORDER BY task_id, attempt DESC LIMIT 1", params)  # noqa: S608
    if found is None:  # keyed by function name (the task has no name)
        extra = [Condition(name_col, "=", ("",)), Condition(FILTER_KEYS["func_name"], "=", (key,))]
        where, params = where_clause([*selection.conditions, *extra])
        found = index.scalar(f"SELECT type FROM tasks WHERE {where} ORDER BY task_id, attempt DESC LIMIT 1", params)  # noqa: S608
    return str(found) if found is not None else max(seen, key=lambda t: (seen[t], t))


# ------------------------------------------------------------------ lineage
_LINEAGE_COLUMNS = "task_id, name, func_name, type, state, actor_id, parent_task_id, creation_ms"


def _lineage(index: SessionIndex, selection: TaskSelection) -> dict[str, Any]:
    rows = selection.page(_LINEAGE_COLUMNS, MAX_LIMIT, attempt_desc=True)
    tasks = [LineageTask(*row) for row in rows]
    actor_ids = sorted({t.actor_id for t in tasks if t.actor_id} | _creation_actor_ids(tasks))
    names: dict[str, tuple[str, str]] = {}
    for chunk in range(0, len(actor_ids), 500):
        part = actor_ids[chunk : chunk + 500]
        marks = ",".join("?" * len(part))
        sql = f"SELECT actor_id, repr_name, class_name FROM actors WHERE actor_id IN ({marks})"  # noqa: S608
        for actor_id, repr_name, class_name in index.rows(sql, part):
            names[actor_id] = (repr_name, class_name)
    return summarize_by_lineage(tasks, names).to_json()


def _creation_actor_ids(tasks: list[LineageTask]) -> set[str]:
    return {t.task_id[16:] for t in tasks if t.type == "ACTOR_CREATION_TASK" and not t.actor_id}

"""Task filters as indexed SQL over the session index.

Three numbers and one page per request, sized for million-task sessions:

* counts (``total`` and ``num_filtered``) come from one pass over the small
  ``task_counts`` table when every filter is on one of its columns, else from
  ``COUNT(*)`` over ``tasks`` through the indexes;
* the page is ``ORDER BY task_id, attempt LIMIT n`` through the access path that
  reads the fewest rows. Every secondary index is ``(column, task_id, attempt)``,
  so an equality on one column walks rows already in output order and stops after
  ``limit`` matches; the expected rows read is ``range * limit / num_filtered``.
  The range sizes come from ``task_counts``, so the plan does not depend on
  SQLite's guesses (the index carries no ``sqlite_stat1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.server.index.reader import SessionIndex
from runtime.server.queries.options import FILTER_KEYS, Column, Filter, TaskQuery

DRIVER_TASK = "DRIVER_TASK"
#: Index per column (schema.py); task_id is the primary key.
INDEX_OF = {
    "job_id": "tasks_by_job",
    "state": "tasks_by_state",
    "actor_id": "tasks_by_actor",
    "name": "tasks_by_name",
    "type": "tasks_by_type",
}
#: Relative cost of reading one row through a secondary index (index entry + row
#: lookup) versus one row of the primary-key scan, and of sorting an unordered range.
_INDEX_ROW_COST = 1.2
_UNORDERED_ROW_COST = 1.6
#: Counting a huge actor's tasks just to estimate a plan is not worth more than this.
_ESTIMATE_CAP = 200_000
#: ``task_counts`` answers counts in one pass while it stays small (low-cardinality
#: names). A session with a distinct name per task makes it as big as ``tasks``;
#: then counts go through index-only scans instead.
SMALL_COUNTS_TABLE = 100_000


@dataclass(frozen=True)
class Condition:
    """``column = v``, ``column IN (...)``, ``column != v`` or ``NOT IN``; ``values``
    are the stored spellings (a case-insensitive text filter may match several)."""

    column: Column
    predicate: str
    values: tuple[Any, ...]

    @property
    def impossible(self) -> bool:
        return self.predicate == "=" and not self.values

    @property
    def trivial(self) -> bool:
        return self.predicate == "!=" and not self.values

    def sql(self) -> tuple[str, list[Any]]:
        col, n = self.column.name, len(self.values)
        if self.impossible:
            return "0", []
        if self.trivial:
            return "1", []
        if n == 1:
            return f"{col} {self.predicate} ?", [self.values[0]]
        marks = ",".join("?" * n)
        op = "IN" if self.predicate == "=" else "NOT IN"
        return f"{col} {op} ({marks})", list(self.values)


def where_clause(conditions: Sequence[Condition]) -> tuple[str, list[Any]]:
    """``AND`` of the conditions (``1`` when there are none)."""
    parts: list[str] = []
    params: list[Any] = []
    for cond in conditions:
        if cond.trivial:
            continue
        sql, args = cond.sql()
        parts.append(sql)
        params.extend(args)
    return (" AND ".join(parts) or "1"), params


def counts_table_rows(index: SessionIndex) -> int:
    """Rows in ``task_counts`` (bulk-inserted, so its largest rowid), in O(log n)."""
    return int(index.scalar("SELECT MAX(rowid) FROM task_counts") or 0)


def resolve_filter(index: SessionIndex, flt: Filter, *, small_counts: bool = True) -> Condition:
    """Turn a parsed filter into a condition on stored values."""
    col = flt.column
    if col.kind == "text":
        # Ray matches names case-insensitively; the name index is BINARY, so find the
        # stored spellings in the small task_counts table and match those exactly.
        value = str(flt.value)
        if small_counts or col.name != "name":
            rows = index.rows(
                f"SELECT DISTINCT {col.name} FROM task_counts WHERE {col.name} = ? COLLATE NOCASE",  # noqa: S608
                (value,),
            )
            found = {str(r[0]) for r in rows}
        else:  # a huge table: probe the usual spellings through the name index instead
            spellings = {value, value.lower(), value.upper(), value.title(), value.capitalize()}
            found = {v for v in spellings if index.scalar("SELECT 1 FROM tasks WHERE name = ? LIMIT 1", (v,))}
        return Condition(col, flt.predicate, tuple(sorted(found)))
    if col.name == "state" and flt.value == "NIL":
        return Condition(col, flt.predicate, ("", "NIL"))  # a definition-only task is NIL in summaries
    return Condition(col, flt.predicate, (flt.value,))


def driver_condition() -> Condition:
    return Condition(FILTER_KEYS["type"], "!=", (DRIVER_TASK,))


@dataclass
class Counts:
    """``total`` (= ``num_after_truncation``) and ``num_filtered`` for one query."""

    total: int
    num_filtered: int
    #: rows in each candidate access path's range, and all rows (for the plan).
    ranges: dict[str, int] = field(default_factory=dict)
    all_rows: int = 0


class TaskSelection:
    """The tasks one :class:`TaskQuery` selects, over one open index."""

    def __init__(self, index: SessionIndex, query: TaskQuery) -> None:
        self.index = index
        self.query = query
        self.small_counts = counts_table_rows(index) <= SMALL_COUNTS_TABLE
        conds = [resolve_filter(index, f, small_counts=self.small_counts) for f in query.filters]
        driver = [driver_condition()] if query.exclude_driver else []
        self.conditions = conds + driver
        # Ray's GCS applies exclude_driver and the job/task/actor/name/state filters
        # before counting, so ``total`` counts only those (matches the live answers).
        self.source_conditions = [c for c in conds if c.column.source_side] + driver
        self._counts: Counts | None = None
        self._ranges: dict[int, int] = {}

    # ------------------------------------------------------------------ counts
    @property
    def empty(self) -> bool:
        return any(c.impossible for c in self.conditions)

    def counts(self) -> Counts:
        if self._counts is None:
            self._counts = self._compute_counts()
        return self._counts

    def _compute_counts(self) -> Counts:
        counted = self.small_counts and all(c.column.counted for c in self.conditions)
        source_counted = self.small_counts and all(c.column.counted for c in self.source_conditions)
        # One pass over task_counts gives every number it can: all rows, the
        # filtered/source counts when expressible, and each candidate range.
        exprs: list[str] = ["COALESCE(SUM(n), 0)"]
        params: list[Any] = []
        slots: list[str] = []

        def add(name: str, conds: Sequence[Condition]) -> None:
            sql, args = where_clause(conds)
            exprs.append(f"COALESCE(SUM(CASE WHEN {sql} THEN n END), 0)")
            params.extend(args)
            slots.append(name)

        if counted:
            add("filtered", self.conditions)
        if source_counted:
            add("source", self.source_conditions)
        for cond in self._candidates():
            if cond.column.counted and self.small_counts:
                add(f"range:{id(cond)}", [cond])
        # Without the small table, plan inputs are read only if a plan is needed (access_hint).
        sql = f"SELECT {', '.join(exprs)} FROM task_counts"  # noqa: S608
        row = self.index.row(sql, params) if self.small_counts else (-1,)
        values = dict(zip(slots, row[1:] if row else [], strict=False))
        all_rows = int(row[0] or 0) if row else 0

        filtered = int(values["filtered"]) if counted else self._count_tasks(self.conditions)
        if source_counted:
            source = int(values["source"])
        elif len(self.source_conditions) == len(self.conditions):
            source = filtered  # every filter is source-side: the same set
        else:
            source = self._count_tasks(self.source_conditions)
        ranges = {k: int(v) for k, v in values.items() if k.startswith("range:")}
        return Counts(total=source, num_filtered=filtered, ranges=ranges, all_rows=all_rows)

    def _plan_inputs(self, counts: Counts) -> None:
        """Range sizes task_counts could not give (index-only counts)."""
        if counts.all_rows < 0:  # the builder's task count is enough for planning
            counts.all_rows = int(self.index.stats().get("tasks") or self._count_tasks([]))
        for cond in self._candidates():
            key = f"range:{id(cond)}"
            if key not in counts.ranges:
                counts.ranges[key] = self._estimate_range(cond)

    def _count_tasks(self, conds: Sequence[Condition]) -> int:
        if any(c.impossible for c in conds):
            return 0
        live = [c for c in conds if not c.trivial]
        driver = [c for c in live if c.column.name == "type" and c.predicate == "!=" and c.values == (DRIVER_TASK,)]
        rest = [c for c in live if c not in driver]
        if len(rest) <= 1 and all(c.column.name in INDEX_OF for c in rest):
            # count(E and not driver) = count(E) - count(E and driver): the first is an
            # index-only range count, the second reads only the few driver rows.
            sql, params = where_clause(rest)
            hint = f"INDEXED BY {INDEX_OF[rest[0].column.name]}" if rest else "INDEXED BY tasks_by_type"
            whole = int(self.index.scalar(f"SELECT COUNT(*) FROM tasks {hint} WHERE {sql}", params) or 0)  # noqa: S608
            if not driver:
                return whole
            drivers = self.index.scalar(
                f"SELECT COUNT(*) FROM tasks INDEXED BY tasks_by_type WHERE type = ? AND {sql}",  # noqa: S608
                [DRIVER_TASK, *params],
            )
            return whole - int(drivers or 0)
        if len(rest) > 1 and all(c.column.name in INDEX_OF and c.predicate == "=" and len(c.values) == 1 for c in rest):
            return self._count_intersection(rest, bool(driver))
        sql, params = where_clause(conds)
        return int(self.index.scalar(f"SELECT COUNT(*) FROM tasks WHERE {sql}", params) or 0)  # noqa: S608

    def _count_intersection(self, equalities: list[Condition], exclude_driver: bool) -> int:
        """Several equalities without row reads: walk the smallest index range and
        probe the other (covering) indexes for the same (task_id, attempt)."""
        drive = min(equalities, key=self._estimate_range)
        sql = f"{drive.column.name} = ?"
        params: list[Any] = [drive.values[0]]
        for n, cond in enumerate(c for c in equalities if c is not drive):
            col, idx = cond.column.name, INDEX_OF[cond.column.name]
            sql += (
                f" AND EXISTS (SELECT 1 FROM tasks AS p{n} INDEXED BY {idx} WHERE p{n}.{col} = ?"  # noqa: S608
                f" AND p{n}.task_id = tasks.task_id AND p{n}.attempt = tasks.attempt)"
            )
            params.append(cond.values[0])
        hint = f"INDEXED BY {INDEX_OF[drive.column.name]}"
        whole = int(self.index.scalar(f"SELECT COUNT(*) FROM tasks {hint} WHERE {sql}", params) or 0)  # noqa: S608
        if not exclude_driver:
            return whole
        where, args = where_clause(equalities)
        drivers = self.index.scalar(
            f"SELECT COUNT(*) FROM tasks INDEXED BY tasks_by_type WHERE type = ? AND {where}",  # noqa: S608
            [DRIVER_TASK, *args],
        )
        return whole - int(drivers or 0)

    def _estimate_range(self, cond: Condition) -> int:
        if id(cond) not in self._ranges:
            sql, params = cond.sql()
            found = self.index.scalar(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE {sql} LIMIT {_ESTIMATE_CAP})",  # noqa: S608
                params,
            )
            self._ranges[id(cond)] = int(found or 0)
        return self._ranges[id(cond)]

    # -------------------------------------------------------------------- plan
    def _candidates(self) -> list[Condition]:
        """Conditions an index can serve as a range (task_id is left to SQLite: it
        is the primary key and always the best path)."""
        return [
            c
            for c in self.conditions
            if c.column.name in INDEX_OF and c.predicate == "=" and c.values and not c.impossible
        ]

    def access_hint(self, limit: int) -> str:
        """``INDEXED BY <index>`` for the cheapest path, or ``""`` for the primary key."""
        if any(c.column.name == "task_id" and c.predicate == "=" for c in self.conditions):
            return ""
        counts = self.counts()
        self._plan_inputs(counts)
        matched = max(counts.num_filtered, 1)
        want = max(limit, 1)
        best_cost = counts.all_rows * min(1.0, want / matched)
        best = ""
        for cond in self._candidates():
            rng = counts.ranges.get(f"range:{id(cond)}", counts.all_rows)
            if len(cond.values) == 1:
                cost = _INDEX_ROW_COST * rng * min(1.0, want / matched)
            else:
                cost = _UNORDERED_ROW_COST * rng
            if cost < best_cost:
                best_cost, best = cost, f"INDEXED BY {INDEX_OF[cond.column.name]}"
        return best

    # ------------------------------------------------------------------- pages
    def page_sql(self, columns: str, limit: int, *, attempt_desc: bool = False) -> tuple[str, list[Any]]:
        where, params = where_clause(self.conditions)
        order = "task_id, attempt DESC" if attempt_desc else "task_id, attempt"
        hint = self.access_hint(limit)
        sql = f"SELECT {columns} FROM tasks {hint} WHERE {where} ORDER BY {order} LIMIT ?"  # noqa: S608
        return sql, [*params, limit]

    def page(self, columns: str, limit: int, *, attempt_desc: bool = False) -> list[tuple[Any, ...]]:
        if limit <= 0 or self.empty or self.counts().num_filtered == 0:
            return []
        sql, params = self.page_sql(columns, limit, attempt_desc=attempt_desc)
        return self.index.rows(sql, params)

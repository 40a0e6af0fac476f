"""State-API query options for ``/api/v0/tasks`` and ``/api/v0/tasks/summarize``.

Follows KubeRay's Go history server ("the reference" below) with two deliberate changes that match Ray
itself: an unknown filter key is a 400 naming the key (the reference silently
compares it against ""), and ``=``/``!=`` compare case-insensitively (ids and
states are stored in one canonical case, so values are normalised instead).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Protocol

from runtime.common.ids import InvalidIdError, to_hex_id
from runtime.server.errors import ApiError

DEFAULT_LIMIT = 100
#: Ray's RAY_MAX_LIMIT_FROM_API_SERVER.
MAX_LIMIT = 10_000

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})

SUMMARY_BY_FUNC_NAME = "func_name"
SUMMARY_BY_LINEAGE = "lineage"


class QueryArgs(Protocol):
    """What a view passes in: werkzeug's ``MultiDict`` satisfies it."""

    def get(self, key: str) -> str | None: ...

    def getlist(self, key: str) -> list[str]: ...


class InvalidQueryError(ApiError):
    """A malformed query option: HTTP 400 with the reason."""

    def __init__(self, msg: str) -> None:
        super().__init__(400, msg)


@dataclass(frozen=True)
class Column:
    """A filterable ``tasks`` column.

    ``kind``: ``id`` (lower-case hex), ``enum`` (upper case), ``text`` (matched
    case-insensitively through the distinct values in ``task_counts``), ``int``.
    ``counted``: the column exists in ``task_counts``. ``source_side``: Ray's GCS
    applies this filter before counting ``total`` (state_manager._build_task_events_request).
    """

    name: str
    kind: str
    counted: bool = False
    source_side: bool = False
    indexed: bool = False


_COLUMNS = {
    "task_id": Column("task_id", "id", source_side=True, indexed=True),
    "job_id": Column("job_id", "id", counted=True, source_side=True, indexed=True),
    "actor_id": Column("actor_id", "id", source_side=True, indexed=True),
    "name": Column("name", "text", counted=True, source_side=True, indexed=True),
    "state": Column("state", "enum", counted=True, source_side=True, indexed=True),
    "type": Column("type", "enum", counted=True, indexed=True),
    "func_name": Column("func_name", "text", counted=True),
    "parent_task_id": Column("parent_task_id", "id"),
    "node_id": Column("node_id", "id"),
    "worker_id": Column("worker_id", "id"),
    "attempt": Column("attempt", "int"),
    "worker_pid": Column("worker_pid", "int"),
}

#: Filter key (as Ray's TaskState field, the reference's alias, or our column) -> column.
FILTER_KEYS: dict[str, Column] = {
    **_COLUMNS,
    "task_type": _COLUMNS["type"],
    "task_name": _COLUMNS["name"],
    "func_or_class_name": _COLUMNS["func_name"],
    "attempt_number": _COLUMNS["attempt"],
}


@dataclass(frozen=True)
class Filter:
    """One normalised filter: ``column <predicate> value``."""

    column: Column
    predicate: str  # "=" or "!="
    value: str | int

    def key(self) -> str:
        return f"{self.column.name}{self.predicate}{self.value}"


@dataclass(frozen=True)
class TaskQuery:
    limit: int = DEFAULT_LIMIT
    detail: bool = False
    exclude_driver: bool = True
    filters: tuple[Filter, ...] = ()
    summary_by: str = SUMMARY_BY_FUNC_NAME

    def cache_key(self) -> str:
        """A canonical string for everything that selects tasks (not limit/detail)."""
        parts = sorted(f.key() for f in self.filters)
        return f"exclude_driver={int(self.exclude_driver)};" + ";".join(parts)


def parse_bool(name: str, raw: str | None, default: bool) -> bool:
    """Go's strconv.ParseBool, as the reference: anything else is a 400."""
    if raw is None:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise InvalidQueryError(f"invalid {name}: {raw!r} is not a boolean (use true/false or 1/0)")


def parse_int(name: str, raw: str | None, default: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidQueryError(f"invalid {name}: {raw!r} is not an integer") from None
    if value < 0:
        raise InvalidQueryError(f"invalid {name}: cannot be negative")
    return value


def parse_limit(raw: str | None) -> int:
    limit = parse_int("limit", raw, DEFAULT_LIMIT)
    if limit > MAX_LIMIT:
        raise InvalidQueryError(f"limit cannot be greater than {MAX_LIMIT}, please use a lower limit")
    return limit


def normalise_value(column: Column, raw: str) -> str | int:
    """Put a filter value in the case the index stores (ids hex, enums upper)."""
    if column.kind == "id":
        value = raw.strip()
        # Ray ids are hex; the reference's docs show base64, so accept that too.
        with contextlib.suppress(InvalidIdError):
            return to_hex_id(value)
        return value.lower()
    if column.kind == "enum":
        return raw.strip().upper()
    if column.kind == "int":
        try:
            return int(raw.strip())
        except ValueError:
            raise InvalidQueryError(f"invalid filter value for {column.name}: {raw!r} is not an integer") from None
    return raw


def parse_filters(args: QueryArgs) -> tuple[Filter, ...]:
    keys = args.getlist("filter_keys")
    predicates = args.getlist("filter_predicates")
    values = args.getlist("filter_values")
    if not len(keys) == len(predicates) == len(values):
        raise InvalidQueryError(
            "invalid filters parameter: filter_keys, filter_predicates, and filter_values must have the same length"
        )
    filters: list[Filter] = []
    for key, predicate, raw in zip(keys, predicates, values, strict=True):
        column = FILTER_KEYS.get(key.strip().lower())
        if column is None:
            supported = ", ".join(sorted(FILTER_KEYS))
            raise InvalidQueryError(f"unsupported filter key {key!r}; supported keys: {supported}")
        if predicate not in ("=", "!="):
            raise InvalidQueryError(f"unsupported filter predicate {predicate!r}; use = or !=")
        filters.append(Filter(column, predicate, normalise_value(column, raw)))
    return tuple(filters)


def parse_task_query(args: QueryArgs, *, summary: bool = False) -> TaskQuery:
    """Parse and validate; raises :class:`InvalidQueryError` (400) naming the problem."""
    limit = parse_limit(args.get("limit"))
    parse_int("timeout", args.get("timeout"), 0)  # validated, then ignored (as Ray's dead data has no timeout)
    detail = parse_bool("detail", args.get("detail"), False)
    exclude_driver = parse_bool("exclude_driver", args.get("exclude_driver"), True)
    filters = parse_filters(args)
    summary_by = args.get("summary_by") or SUMMARY_BY_FUNC_NAME
    if summary_by != SUMMARY_BY_LINEAGE:
        summary_by = SUMMARY_BY_FUNC_NAME  # Ray's "task_name" and anything else: by name
    if summary:
        limit = MAX_LIMIT
    return TaskQuery(limit=limit, detail=detail, exclude_driver=exclude_driver, filters=filters, summary_by=summary_by)

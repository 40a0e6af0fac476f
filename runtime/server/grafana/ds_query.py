"""The body of ``POST /grafana/api/ds/query`` (a panel's data), reduced to what the check
read: the body forwarded to Grafana is rebuilt from the checked queries, never the
caller's bytes, so nothing the check did not see (another field, a duplicate key another
JSON parser would read differently) reaches Grafana.

Every query is checked whatever its ``hide`` flag: hiding is a display choice of the
frontend, Grafana's backend still runs hidden queries (server-side expressions take
them as inputs). A query is served only if it is PromQL for a Prometheus datasource:
``datasource`` is ``{"type": "prometheus", "uid": "<uid>"}`` and ``expr`` a string whose
every selector is pinned to a session (:mod:`runtime.server.grafana.promql`). Anything
the check cannot read is refused: server-side expressions (datasource ``__expr__``),
Grafana's built-in datasources, other datasource types, a query without ``expr``.
Of each query only ``refId``, ``datasource``, ``expr`` and the scalar options in
:data:`QUERY_OPTIONS` are passed on; of the body only ``from`` and ``to``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from runtime.server.grafana.promql import QueryRefused, sessions_of

#: Per-query options of a Prometheus panel query passed on (JSON scalars only; others are dropped).
QUERY_OPTIONS = (
    "hide",
    "instant",
    "range",
    "exemplar",
    "format",
    "legendFormat",
    "interval",
    "intervalMs",
    "intervalFactor",
    "maxDataPoints",
    "step",
    "utcOffsetSec",
    "editorMode",
    "requestId",
    "queryCachingTTL",
)
#: Datasource uids Grafana answers as server-side expressions (current and pre-8.3 forms).
EXPRESSION_UIDS = frozenset({"__expr__", "-100", "Expression"})
#: Grafana's built-in datasources (their queries are not PromQL).
BUILTIN_UIDS = frozenset({"grafana", "-- Grafana --", "-- Mixed --", "-- Dashboard --"})
PROMETHEUS = "prometheus"
_UID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_SCALAR = (str, int, float, bool)


class MalformedQuery(ValueError):  # noqa: N818 - reads as what the body is
    """The body is not a data query at all (400)."""


@dataclass(frozen=True)
class CheckedQuery:
    """The body to forward and the sessions its queries are pinned to (still to be authorized)."""

    body: bytes
    sessions: frozenset[str]


def check_ds_query(raw: bytes) -> CheckedQuery:
    """The rebuilt body of a data query and its sessions.

    Raises:
        MalformedQuery: not JSON ``{"queries": [...]}`` with at least one query.
        QueryRefused: a query the check cannot read or not pinned to sessions; the
            message names the query (its ``refId``) and what was wrong.
    """
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise MalformedQuery("a data query must be JSON") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("queries"), list):
        raise MalformedQuery('a data query must be JSON {"queries": [...]} (PromQL in queries[].expr)')
    queries = parsed["queries"]
    if not queries:
        raise MalformedQuery("a data query with no queries")
    rebuilt: list[dict[str, object]] = []
    sessions: set[str] = set()
    for index, query in enumerate(queries):
        checked, pinned = _checked(index, query)
        rebuilt.append(checked)
        sessions |= pinned
    body: dict[str, object] = {"queries": rebuilt}
    for name in ("from", "to"):
        if isinstance(parsed.get(name), str):
            body[name] = parsed[name]
    return CheckedQuery(orjson.dumps(body), frozenset(sessions))


def _checked(index: int, query: object) -> tuple[dict[str, object], set[str]]:
    if not isinstance(query, dict):
        raise QueryRefused(f"query #{index + 1} is not an object")
    ref = query.get("refId")
    label = f"query {ref}" if isinstance(ref, str) and ref else f"query #{index + 1}"
    datasource = _prometheus_datasource(label, query.get("datasource"))
    expr = query.get("expr")
    if not isinstance(expr, str) or not expr.strip():
        raise QueryRefused(f"{label} has no PromQL expr (only Prometheus queries are served)")
    try:
        pinned = sessions_of(expr)
    except QueryRefused as exc:
        raise QueryRefused(f"{label}: {exc}") from None
    checked: dict[str, object] = {"refId": ref} if isinstance(ref, str) else {}
    checked["datasource"] = datasource
    checked["expr"] = expr
    checked.update((k, query[k]) for k in QUERY_OPTIONS if isinstance(query.get(k), _SCALAR))
    return checked, pinned


def _prometheus_datasource(label: str, datasource: object) -> dict[str, str]:
    """``{"type": "prometheus", "uid": ...}`` as the query named it, or QueryRefused."""
    if isinstance(datasource, str):
        if datasource in EXPRESSION_UIDS:
            raise QueryRefused(f"{label} is a server-side expression: expressions are not served")
        raise QueryRefused(f'{label} must name its datasource as {{"type": "prometheus", "uid": "..."}}')
    if not isinstance(datasource, dict):
        raise QueryRefused(f'{label} names no datasource ({{"type": "prometheus", "uid": "..."}} is required)')
    kind, uid = datasource.get("type"), datasource.get("uid")
    if not isinstance(uid, str):
        uid = None  # unhashable values must not reach the set lookups below
    if kind == "__expr__" or uid in EXPRESSION_UIDS:
        raise QueryRefused(f"{label} is a server-side expression: expressions are not served")
    if kind != PROMETHEUS:
        raise QueryRefused(f"{label}: datasource type {kind!r} is not prometheus (only PromQL can be checked)")
    if uid in BUILTIN_UIDS:
        raise QueryRefused(f"{label}: Grafana's built-in datasource {uid!r} is not served")
    if uid is None or not _UID.match(uid):
        raise QueryRefused(f"{label}: datasource uid must be a Grafana uid, got {uid!r}")
    return {"type": PROMETHEUS, "uid": uid}

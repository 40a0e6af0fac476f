"""Nodes, actors, jobs and log events: Ray's envelopes around stored row bytes.

Rows hold the exact JSON of each object (``*_json`` columns), embedded with
``orjson.Fragment`` so a response never decodes and re-encodes them. With
``ended`` (the session is over, :mod:`runtime.server.queries.ended`) nodes and
actors are served in their ended form where they have one (DEAD at the session's
end, :mod:`runtime.server.replay.ended`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from runtime.common.ids import InvalidIdError, to_hex_id
from runtime.server.index.reader import SessionIndex

#: Ray's event head keeps the newest 10 000 events per job.
MAX_EVENTS_PER_JOB = 10_000


def envelope(msg: str, data: dict[str, Any], *, result: bool = True) -> bytes:
    """Ray's dashboard answer ``{"result", "msg", "data"}``."""
    return orjson.dumps({"result": result, "msg": msg, "data": data})


def _fragment(raw: bytes | memoryview) -> orjson.Fragment:
    return orjson.Fragment(bytes(raw))


def normalise_id(value: str) -> str:
    """Hex ids in any case (or base64) -> the stored lower-case hex; else unchanged."""
    try:
        return to_hex_id(value)
    except InvalidIdError:
        return value


# --------------------------------------------------------------------- actors
def actors_map(rows: Iterable[Sequence[Any]]) -> dict[str, orjson.Fragment]:
    return {str(actor_id): _fragment(raw) for actor_id, raw in rows}


def _actor_json(ended: bool) -> str:
    return "COALESCE(ended_json, actor_json)" if ended else "actor_json"


def _node_json(ended: bool) -> str:
    return "COALESCE(ended_json, node_json)" if ended else "node_json"


def all_actors(index: SessionIndex, ids: list[str] | None = None, *, ended: bool = False) -> bytes:
    """``/logical/actors`` (``?ids=a,b`` narrows it, as Ray's ``ids`` query does)."""
    column = _actor_json(ended)
    if ids is None:
        rows = index.rows(f"SELECT actor_id, {column} FROM actors ORDER BY actor_id")  # noqa: S608 - fixed names
    else:
        wanted = sorted({normalise_id(i) for i in ids if i})
        rows = []
        for start in range(0, len(wanted), 500):
            part = wanted[start : start + 500]
            rows += index.rows(
                f"SELECT actor_id, {column} FROM actors WHERE actor_id IN ({','.join('?' * len(part))})"  # noqa: S608
                " ORDER BY actor_id",
                part,
            )
    return envelope("All actors fetched.", {"actors": actors_map(rows)})


def one_actor(index: SessionIndex, actor_id: str, *, ended: bool = False) -> bytes:
    """``/logical/actors/<id>``: always 200; ``result:false`` when unknown (the UI
    and the e2e tests of KubeRay's Go history server rely on that)."""
    sql = f"SELECT {_actor_json(ended)} FROM actors WHERE actor_id = ?"  # noqa: S608 - fixed names
    raw = index.scalar(sql, (normalise_id(actor_id),))
    if raw is None:
        return envelope("Actor not found.", {"detail": None}, result=False)
    return envelope("Actor details fetched.", {"detail": _fragment(raw)})


# ---------------------------------------------------------------------- nodes
def node_summary(index: SessionIndex, *, ended: bool = False) -> bytes:
    rows = index.rows(
        f"SELECT node_id, {_node_json(ended)}, resources_text FROM nodes ORDER BY is_head DESC, node_id"  # noqa: S608
    )
    return envelope(
        "Node summary fetched.",
        {
            "summary": [_fragment(raw) for _, raw, _ in rows],
            "nodeLogicalResources": {node_id: text for node_id, _, text in rows},
        },
    )


def host_name_list(index: SessionIndex) -> bytes:
    rows = index.rows(
        "SELECT hostname, node_name, node_id FROM nodes WHERE state = 'ALIVE' ORDER BY is_head DESC, node_id"
    )
    names = [hostname or node_name or node_id for hostname, node_name, node_id in rows]
    return envelope("Node hostname list fetched.", {"hostNameList": names})


def node_detail(index: SessionIndex, node_id: str, *, ended: bool = False) -> bytes | None:
    """``/nodes/<id>``: the summary element plus the actors placed on it; ``None``
    when the index has no such node (nodes without transitions are not indexed)."""
    hex_id = normalise_id(node_id)
    raw = index.scalar(f"SELECT {_node_json(ended)} FROM nodes WHERE node_id = ?", (hex_id,))  # noqa: S608
    if raw is None:
        return None
    node = orjson.loads(raw)  # one object: cheaper than splicing around an existing "actors" key
    actor_rows = index.rows(
        f"SELECT actor_id, {_actor_json(ended)} FROM actors WHERE node_id = ? ORDER BY actor_id",  # noqa: S608
        (hex_id,),
    )
    node["actors"] = actors_map(actor_rows)
    node.setdefault("workers", [])
    return envelope("Node details fetched.", {"detail": node})


# ----------------------------------------------------------------------- jobs
def all_jobs(index: SessionIndex) -> bytes:
    """``/api/jobs/``: a bare array (no envelope), oldest first."""
    rows = index.rows("SELECT job_json FROM jobs ORDER BY sort_key, job_key")
    return b"[" + b",".join(bytes(r[0]) for r in rows) + b"]"


def one_job(index: SessionIndex, job_id: str) -> bytes | None:
    """A job by hex job id or by submission id (Ray accepts both; KubeRay's Go history server
    only the former). ``None`` when unknown."""
    candidates = (
        ("SELECT job_json FROM jobs WHERE job_id = ?", normalise_id(job_id)),
        ("SELECT job_json FROM jobs WHERE submission_id = ? ORDER BY sort_key", job_id),
        ("SELECT job_json FROM jobs WHERE job_key = ?", job_id),
    )
    for sql, value in candidates:
        raw = index.scalar(sql, (value,))
        if raw is not None:
            return bytes(raw)
    return None


# --------------------------------------------------------------------- events
def _job_events(index: SessionIndex, job_id: str) -> list[orjson.Fragment]:
    rows = index.rows(
        "SELECT event_json FROM (SELECT event_json, ts, event_id FROM log_events WHERE job_id = ?"
        " ORDER BY ts DESC, event_id DESC LIMIT ?) ORDER BY ts, event_id",
        (job_id, MAX_EVENTS_PER_JOB),
    )
    return [_fragment(r[0]) for r in rows]


def all_events(index: SessionIndex) -> bytes:
    jobs = [r[0] for r in index.rows("SELECT DISTINCT job_id FROM log_events ORDER BY job_id")]
    return envelope("All events fetched.", {"events": {job: _job_events(index, job) for job in jobs}})


def job_events(index: SessionIndex, job_id: str) -> bytes:
    """``/events?job_id=``: even an empty value selects (and finds nothing), as Ray."""
    return envelope("Job events fetched.", {"jobId": job_id, "events": _job_events(index, job_id)})

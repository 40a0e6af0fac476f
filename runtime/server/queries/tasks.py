"""``/api/v0/tasks``: the State-API list envelope, spliced from stored row bytes."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from runtime.server.index.reader import SessionIndex
from runtime.server.queries.options import TaskQuery
from runtime.server.queries.tasksql import Counts, TaskSelection
from runtime.server.replay.render_tasks import BRIEF_COLUMNS, brief_json, splice_detail


def state_api_envelope(counts: Counts, result: bytes, warnings: list[str] | None = None) -> bytes:
    """Ray's ``{"result":true,"msg":"","data":{"result":{...}}}`` around ``result``
    (already-encoded JSON), with the counts as Ray reports them."""
    return b"".join(
        (
            b'{"result":true,"msg":"","data":{"result":{"total":%d,"num_after_truncation":%d,"num_filtered":%d,'
            % (counts.total, counts.total, counts.num_filtered),
            b'"result":',
            result,
            b',"partial_failure_warning":"","warnings":',
            orjson.dumps(warnings or None),
            b"}}}",
        )
    )


def json_array(items: Iterable[bytes]) -> bytes:
    return b"[" + b",".join(items) + b"]"


def list_tasks(index: SessionIndex, query: TaskQuery) -> bytes:
    """The whole ``/api/v0/tasks`` answer. Rows are never decoded: the brief form is
    rendered from the columns, the detail form is the brief bytes with the stored
    detail-only fields rendered and spliced in."""
    selection = TaskSelection(index, query)
    counts = selection.counts()
    if query.detail:
        render = index.details()
        rows = selection.page(f"{BRIEF_COLUMNS}, detail", query.limit)
        body = json_array(splice_detail(brief_json(r[:-1]), render(r[-1])) for r in rows)
    else:
        rows = selection.page(BRIEF_COLUMNS, query.limit)
        body = json_array(brief_json(r) for r in rows)
    return state_api_envelope(counts, body)

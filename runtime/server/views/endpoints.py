"""Stored dashboard-endpoint snapshots: what the collector fetched from the head's dashboard.

``/api/<anything>`` that no other view serves is answered from the snapshot the
collector stored for that exact request URI (path + raw query) under
``fetched_endpoints/``. Missing snapshots of endpoints the UI cannot live without
get a schema-valid empty answer; anything else is a JSON 404, which also lets a
Ray head started with ``--proxy-server-url`` fall back to its own handler.
Only GET (and HEAD) is served here; other methods fall through to the UI
blueprint's last-resort route (proxied for a live cluster, 404 otherwise).
"""

from __future__ import annotations

import logging

import orjson
from flask import Blueprint, Response, request

from runtime.server.context import SessionContext, session_route
from runtime.server.errors import ApiError, json_response
from runtime.server.selection import has_selection
from runtime.storage.errors import InvalidKeyError, ObjectNotFoundError
from runtime.storage.layout import endpoint_storage_name

logger = logging.getLogger(__name__)

bp = Blueprint("endpoints", __name__)

PLACEMENT_GROUPS = "/api/v0/placement_groups"
CLUSTER_METADATA = "/api/v0/cluster_metadata"
DATASETS = "/api/data/datasets/"
NOT_FOUND = "Endpoint data not found in storage"
#: Longest object name a POSIX file system stores in one path segment.
MAX_NAME_BYTES = 255

EMPTY_SERVE = b'{"applications":{}}'
EMPTY_PLACEMENT_GROUPS = orjson.dumps(
    {
        "result": True,
        "msg": "",
        "data": {
            "result": {
                "total": 0,
                "num_after_truncation": 0,
                "num_filtered": 0,
                "result": [],
                "partial_failure_warning": "",
                "warnings": None,
            }
        },
    }
)
EMPTY_DATASETS = b'{"datasets":[]}'


def _request_uris() -> list[str]:
    """Path + raw query as received (the collector keyed the snapshot on it), then
    the same with the trailing ``/`` toggled: routes ignore it, keys do not."""
    path = request.path
    other = path.rstrip("/") if path.endswith("/") else path + "/"
    query = request.query_string.decode("latin-1")
    return [f"{p}?{query}" if query else p for p in (path, other)]


def read_snapshot(ctx: SessionContext, *uris: str) -> bytes | None:
    """The stored answer of the first of ``uris`` that was stored; None if none was
    (a URI outside the key whitelist cannot have been stored: no read at all)."""
    keys: list[str] = []
    for uri in uris:
        try:
            key = ctx.layout.endpoint_key(ctx.cluster, ctx.session, uri)
        except InvalidKeyError:
            continue
        if len(endpoint_storage_name(uri).encode()) > MAX_NAME_BYTES:
            continue  # no file system (local backend) holds such a name: not stored
        if key not in keys:
            keys.append(key)
    for key in keys:
        try:
            return ctx.store.get_bytes(key)
        except ObjectNotFoundError:
            continue
    return None


@bp.get("/api/<path:rest>")
def stored_endpoint(rest: str) -> Response:
    """Without a selected session this route owns nothing: 404, so that ``ray start
    --proxy-server-url`` answers ``/api/version`` & co. itself (it falls back on 404
    only; a 400 "cookie not found" would break Ray's own routes)."""
    if not has_selection(request):
        raise ApiError(404, NOT_FOUND)
    return _stored_endpoint(rest=rest)


@session_route
def _stored_endpoint(ctx: SessionContext, rest: str) -> Response:
    path = "/api/" + rest.strip("/")
    data = read_snapshot(ctx, *_request_uris())
    if data is not None:
        if path == PLACEMENT_GROUPS:
            data = backfill_bundles(data)
        return json_response(data)
    empty = empty_answer(path)
    if empty is not None:
        return json_response(empty)
    if path == CLUSTER_METADATA:
        raise ApiError(404, "Cluster metadata not found")
    raise ApiError(404, NOT_FOUND)


def empty_answer(path: str) -> bytes | None:
    """Schema-valid empty bodies for snapshots the UI needs (``path`` without
    trailing ``/``), or None."""
    if path == "/api/serve/applications":
        return EMPTY_SERVE  # no http_options: the UI shows "Serve not started"
    if path == PLACEMENT_GROUPS:
        return EMPTY_PLACEMENT_GROUPS
    if path.startswith(DATASETS):
        job = path[len(DATASETS) :]
        if job and "/" not in job:
            return EMPTY_DATASETS
    return None


def backfill_bundles(data: bytes) -> bytes:
    """Add ``"bundles": []`` to stored placement groups lacking it (the UI iterates
    it). Bytes are returned unchanged when nothing is missing or the shape is odd."""
    try:
        doc = orjson.loads(data)
        groups = doc["data"]["result"]["result"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return data
    if not isinstance(groups, list):
        return data
    changed = False
    for group in groups:
        if isinstance(group, dict) and "bundles" not in group:
            group["bundles"] = []
            changed = True
    return orjson.dumps(doc) if changed else data

"""Log routes for stored sessions: listing, file, finite stream.

* ``/api/v0/logs?node_id=|node_ip=&glob=`` - names from the index's ``objects``
  table, categorised like Ray; names keep the glob's base directory (so they can be
  opened). Without a node: the only node with logs, 400 if there are several.
* ``/api/v0/logs/file`` - one object, by file name / task attempt / actor / pid /
  driver submission; last N lines from ranged reads, or the whole window streamed.
  ``download_filename`` makes it an attachment, otherwise ``inline`` (the UI shows
  it in the page).
* ``/api/v0/logs/stream`` - for a stored session the same content as ``file``
  (default last 1000 lines), sent as a finite stream: the log cannot grow any more,
  so ``ray logs --follow`` prints it and ends instead of failing with 501.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import orjson
from flask import Blueprint, Response, request

from runtime.server.context import SessionContext, session_route
from runtime.server.errors import ApiError, json_response
from runtime.server.logs.catalog import IndexCatalog
from runtime.server.logs.categories import categorize
from runtime.server.logs.disposition import content_disposition
from runtime.server.logs.globs import match_names, parse_glob
from runtime.server.logs.params import parse_log_file_params
from runtime.server.logs.resolve import ResolvedLog, resolve_log, resolve_node
from runtime.server.logs.tail import filter_ansi, filtered, iter_window, tail_window
from runtime.storage.errors import InvalidKeyError, ObjectNotFoundError, StorageError
from runtime.storage.layout import validate_node_id
from runtime.storage.session_keys import log_rel_key

logger = logging.getLogger(__name__)

bp = Blueprint("logs", __name__)

MEDIA_TYPES = ("file", "stream")
TEXT = "text/plain; charset=utf-8"


@bp.get("/api/v0/logs")
@session_route
def list_logs(ctx: SessionContext) -> Response:
    args = request.args
    try:
        node_id = validate_node_id(args["node_id"]) if args.get("node_id") else None
    except InvalidKeyError as exc:
        raise ApiError(400, f"invalid path: path traversal not allowed ({exc})") from None
    try:
        glob = parse_glob(args.get("glob"))
    except InvalidKeyError as exc:
        raise ApiError(400, str(exc)) from None
    catalog = IndexCatalog(ctx.index)
    node = _listing_node(catalog, node_id, args.get("node_ip") or None)
    names = match_names(catalog.log_files(node, under=glob.base), glob) if node else []
    body = {"result": True, "msg": "", "data": {"result": categorize(names)}}
    return json_response(orjson.dumps(body))


def _listing_node(catalog: IndexCatalog, node_id: str | None, node_ip: str | None) -> str | None:
    if node_id or node_ip:
        return resolve_node(catalog, node_id, node_ip)
    nodes = catalog.nodes_with_logs()
    if len(nodes) > 1:
        # Which node's logs a caller means is not guessable; name the choices.
        raise ApiError(400, f"node_id is required: this session has logs of {len(nodes)} nodes ({', '.join(nodes)})")
    return nodes[0] if nodes else None


@bp.get("/api/v0/logs/<media_type>")
@session_route
def log_content(ctx: SessionContext, media_type: str) -> Response:
    if media_type not in MEDIA_TYPES:
        raise ApiError(400, f"unsupported media_type: {media_type[:64]} (must be 'file' or 'stream')")
    params = parse_log_file_params(request.args)
    resolved = resolve_log(params, IndexCatalog(ctx.index))
    key = ctx.layout.log_key(ctx.cluster, ctx.session, resolved.node_id, resolved.path)
    where = log_rel_key(resolved.node_id, resolved.path)
    try:
        size = ctx.store.stat(key).size
    except ObjectNotFoundError:
        raise ApiError(404, f"log file not found: {where}") from None
    start, end = _window(resolved, size, where)
    store = ctx.store

    def read(offset: int, length: int) -> bytes:
        return store.get_range(key, offset, length)

    if params.lines is None:
        body: bytes | Iterator[bytes] = filtered(_guarded(iter_window(read, start, end), where), params.filter_ansi)
    else:
        data = tail_window(read, start, end, params.lines)
        body = filter_ansi(data) if params.filter_ansi else data
    response = Response(body, content_type=TEXT)
    if params.download_filename:
        response.headers["Content-Disposition"] = content_disposition(params.download_filename, attachment=True)
    else:
        response.headers["Content-Disposition"] = content_disposition(resolved.basename, attachment=False)
    if media_type == "stream":
        response.headers["X-Log-Stream"] = "finite"  # stored session: content ends, no follow
        response.headers["Cache-Control"] = "no-store"
    return response


def _window(resolved: ResolvedLog, size: int, where: str) -> tuple[int, int]:
    """Clamp the requested byte window to the stored object.

    A task's offsets can point past the end when the worker died before its last
    output was shipped; what was stored is still the best answer (KubeRay's Go history server 500s).
    """
    end = size if resolved.end is None else resolved.end
    if end > size:
        logger.warning("log window of %s ends at %d but only %d bytes are stored", where, end, size)
        end = size
    return min(resolved.start, end), end


def _guarded(chunks: Iterator[bytes], where: str) -> Iterator[bytes]:
    """Once streaming has begun the status is sent: log a storage failure and stop."""
    try:
        yield from chunks
    except StorageError as exc:
        logger.error("streaming %s failed midway: %s", where, exc)

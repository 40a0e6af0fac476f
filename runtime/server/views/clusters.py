"""Cluster listing and selection: ``/clusters``, ``/enter_cluster/...`` and the
``/select_cluster`` picker page.

Differences from the reference (KubeRay's Go history server), on purpose:

* stored sessions come from a short-TTL marker listing, not a listing per request;
* ``/clusters`` says ``X-Live-Discovery: unavailable`` when live clusters could not
  be listed (the body stays a JSON array) and takes ``?namespace=&name=`` filters;
* ``/clusters`` is the history list: each entry has a shareable ``url``, stored ones
  ``indexed`` and a ``summary`` read from an existing index (never built for the
  list), and it pages (``?limit=&cursor=``, the next cursor in ``X-Next-Cursor`` and
  ``Link``; the body stays an array) and filters (``failed``, ``owner``, ``since``,
  ``until``: :mod:`runtime.server.cluster_list`);
* ``/enter_cluster`` opened as a page by a browser redirects into the Dashboard
  (scripts and the picker's fetch still get the reference's JSON);
* ``/enter_cluster`` builds the session's index before answering (waiting at most
  ``--build-wait``: then 503 with the build's progress as JSON, or for a browser a
  page that reloads itself until the index is ready) and lets an *older* stored
  session of a running cluster be entered: only ``latest``/``live`` resolve to the
  live cluster;
* the picker page loads its script and style from this server (no inline code),
  under a CSP without ``'unsafe-inline'``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import orjson
from flask import Blueprint, Response, redirect, request
from werkzeug.wrappers import Response as BaseResponse

from runtime.server.auth import readable_namespaces
from runtime.server.cluster_list import ListParamError, ListQuery, encode_cursor, owner_matches, parse_query
from runtime.server.context import services
from runtime.server.errors import ApiError, IndexBuildingError, json_response
from runtime.server.live.discovery import LiveCluster, LiveDiscoveryError
from runtime.server.selection import LATEST, LIVE, Selection, set_selection_cookies
from runtime.server.session_urls import enter_location, session_path
from runtime.server.sessions import StoredSession, StoredSessions, stored_sessions
from runtime.server.summaries import session_summaries
from runtime.server.views.building import building_page
from runtime.storage.errors import InvalidKeyError, StorageError
from runtime.storage.layout import (
    CLUSTER_KINDS,
    OWNER_KINDS,
    RAYCLUSTER,
    ClusterRef,
    session_created_at,
    validate_k8s_name,
    validate_namespace,
    validate_session_name,
)
from runtime.storage.session_keys import looks_like_session_name

logger = logging.getLogger(__name__)

bp = Blueprint("clusters", __name__)

PICKER_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_ASSETS = {
    "select_cluster.html": "text/html; charset=utf-8",
    "select_cluster.js": "text/javascript; charset=utf-8",
    "select_cluster.css": "text/css; charset=utf-8",
}


# ------------------------------------------------------------------ /clusters
def _go_time(moment: datetime) -> str:
    """Go's default ``time.Time`` format, as the reference prints live clusters."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


def live_entry(cluster: LiveCluster) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": cluster.name,
        "namespace": cluster.namespace,
        "sessionName": LIVE,
        "createTime": _go_time(cluster.created_at),
        "createTimeStamp": int(cluster.created_at.timestamp()),
    }
    kind = (cluster.owner_kind or "").lower()
    owned = kind in OWNER_KINDS and bool(cluster.owner_name)
    if owned:
        entry["ownerKind"] = kind
        entry["ownerName"] = cluster.owner_name
    try:
        ref = ClusterRef(cluster.namespace, cluster.name, kind if owned else RAYCLUSTER, cluster.owner_name or "")
        entry["url"] = session_path(ref, LIVE)
    except InvalidKeyError:
        entry["url"] = None  # a name storage could not hold: no shareable URL
    entry["summary"] = None
    return entry


def stored_entry(stored: StoredSession) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": stored.cluster.name,
        "namespace": stored.cluster.namespace,
        "sessionName": stored.session,
        "createTime": stored.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "createTimeStamp": int(stored.created_at.timestamp()),
    }
    if stored.cluster.has_owner:
        entry["ownerKind"] = stored.cluster.owner_kind
        entry["ownerName"] = stored.cluster.owner_name
    entry["url"] = session_path(stored.cluster, stored.session)
    return entry


def _wanted(entry: dict[str, Any], query: ListQuery) -> bool:
    if query.namespace and entry["namespace"] != query.namespace:
        return False
    if query.owner and not owner_matches(query.owner, entry.get("ownerKind"), entry.get("ownerName")):
        return False
    return not query.name or query.name in (entry["name"], entry.get("ownerName"))


def _stored_wanted(cluster: ClusterRef, query: ListQuery) -> bool:
    """:func:`_wanted` on a stored session, before its entry is built (most are not)."""
    if query.namespace and cluster.namespace != query.namespace:
        return False
    owner_name = cluster.owner_name if cluster.has_owner else None
    if query.owner and not owner_matches(query.owner, cluster.owner_kind, owner_name):
        return False
    return not query.name or query.name in (cluster.name, owner_name)


def _in_time(moment: datetime, query: ListQuery) -> bool:
    return (query.since is None or moment >= query.since) and (query.until is None or moment <= query.until)


class _Readable:
    """Per-namespace read decisions, each made once and only for namespaces met."""

    def __init__(self) -> None:
        self._decided: dict[str, bool] = {}
        readable_namespaces(())  # the route decides access even when nothing is listed

    def __call__(self, namespace: str) -> bool:
        found = self._decided.get(namespace)
        if found is None:
            found = self._decided[namespace] = namespace in readable_namespaces((namespace,))
        return found


def _live_entries(query: ListQuery, readable: _Readable, headers: dict[str, str]) -> list[dict[str, Any]]:
    try:
        listing = services().live.list_clusters()
        live_ok, live = listing.available, listing.clusters
        if not live_ok:
            logger.warning("live cluster discovery unavailable: %s", listing.error)
    except Exception:  # a broken directory must not take the stored sessions down
        logger.exception("listing live clusters failed")
        live_ok, live = False, []
    if not live_ok:
        headers["X-Live-Discovery"] = "unavailable"
    if query.failed:
        return []  # a running cluster has no outcome yet
    entries = []
    for cluster in live:
        entry = live_entry(cluster)
        if _wanted(entry, query) and _in_time(cluster.created_at, query) and readable(entry["namespace"]):
            entries.append(entry)
    return entries


def _next_link(cursor: str) -> str:
    params = [(k, v) for k, v in request.args.items(multi=True) if k != "cursor"] + [("cursor", cursor)]
    return f'<clusters?{urlencode(params)}>; rel="next"'


@bp.get("/clusters")
def list_clusters() -> Response:
    """Live clusters first (``sessionName: "live"``, first page only), then stored sessions,
    newest first, a page of ``limit`` (default ``--clusters-limit``); the next page's
    cursor is in ``X-Next-Cursor`` (and ``Link: <...>; rel="next"``)."""
    try:
        query = parse_query(request.args)
    except ListParamError as exc:
        raise ApiError(400, str(exc)) from None
    headers: dict[str, str] = {}
    readable = _Readable()
    entries = _live_entries(query, readable, headers) if query.cursor is None else []
    try:
        stored = stored_sessions().current()
    except StorageError as exc:
        logger.warning("listing stored sessions failed: %s", exc)
        headers["X-Stored-Sessions"] = "unavailable"
        stored = []
    limit = query.limit if query.limit is not None else max(1, services().config.clusters_limit)
    summaries = session_summaries()
    present = summaries.present()
    start = 0 if query.cursor is None else StoredSessions.position_after(stored, query.cursor)
    page: list[StoredSession] = []
    for position in range(start, len(stored)):
        candidate = stored[position]
        if query.since is not None and candidate.created_at < query.since:
            break  # newest first: every later one is older still
        if query.failed and summaries.index_name(candidate) not in present:
            continue  # not indexed: cannot be judged, so not listed as failed
        if not _in_time(candidate.created_at, query) or not _stored_wanted(candidate.cluster, query):
            continue
        if not readable(candidate.cluster.namespace):
            continue
        state = summaries.state(candidate, present)
        if query.failed and not (state.summary and state.summary["failed"]):
            continue
        if len(page) == limit:
            cursor = encode_cursor(page[-1].key)
            headers["X-Next-Cursor"] = cursor
            headers["Link"] = _next_link(cursor)
            break
        entry = stored_entry(candidate)
        entry["indexed"] = state.summary is not None
        entry["summary"] = state.summary
        if state.indexing is not None:
            entry["indexing"] = state.indexing
        entries.append(entry)
        page.append(candidate)
    response = json_response(orjson.dumps(entries, option=orjson.OPT_INDENT_2))
    response.headers.update(headers)
    response.headers["Cache-Control"] = "no-store"
    return response


# ------------------------------------------------------------- /enter_cluster
@bp.get("/enter_cluster/<namespace>/<name>")
def enter_cluster_by_name(namespace: str, name: str) -> Response:
    """The short form: a RayCluster's latest session (live if it is running)."""
    return enter_cluster(namespace, RAYCLUSTER, name)


@bp.get("/enter_cluster/<namespace>/<kind>/<name>")
@bp.get("/enter_cluster/<namespace>/<kind>/<name>/<session>")
def enter_cluster(namespace: str, kind: str, name: str, session: str = LATEST) -> Response:
    if kind.lower() not in CLUSTER_KINDS and session == LATEST and _looks_like_session(name):
        # /enter_cluster/{namespace}/{name}/{session}: the kind-less form (a RayCluster).
        kind, name, session = RAYCLUSTER, kind, name
    kind_l = kind.lower()
    if kind_l not in CLUSTER_KINDS:
        raise ApiError(400, f'unsupported resource kind: "{kind[:64]}" (must be raycluster, rayjob, or rayservice)')
    try:
        validate_namespace(namespace)
        validate_k8s_name(name, "name")
    except InvalidKeyError as exc:
        raise ApiError(400, str(exc)) from None
    if session not in (LATEST, LIVE, ""):
        try:
            validate_session_name(session)
        except InvalidKeyError:
            raise ApiError(400, f'invalid session name: "{session[:128]}"') from None
        if session_created_at(session) is None:
            raise ApiError(400, f'invalid session name: "{session[:128]}"')

    try:
        selection = _resolve(namespace, kind_l, name, session)
    except IndexBuildingError as exc:
        if not _is_page_navigation():
            raise
        # No cookies yet: the reload enters again, and lands in the Dashboard once indexed.
        return building_page(exc)
    response: Response
    if _is_page_navigation():
        # A person opened the URL (a link, the quickstart's output): land in the Dashboard.
        # Relative, so it also works behind `ray start --proxy-server-url` and path prefixes.
        response = Response(status=302)
        response.headers["Location"] = enter_location(request.path, selection, session)
    else:
        body = {
            "result": "success",
            "name": selection.name,
            "namespace": selection.namespace,
            "session": selection.session,
        }
        response = Response(orjson.dumps(body), mimetype="application/json")
    response.headers["Cache-Control"] = "no-store"
    set_selection_cookies(response, selection, secure=services().config.secure_cookies)
    return response


def _looks_like_session(segment: str) -> bool:
    return segment in (LATEST, LIVE) or looks_like_session_name(segment)


def _is_page_navigation() -> bool:
    """A browser loading the URL as a page (not the picker's fetch, not curl/requests)."""
    mode = request.headers.get("Sec-Fetch-Mode")
    if mode is not None:
        return mode == "navigate"
    return "text/html" in request.headers.get("Accept", "")


def _resolve(namespace: str, kind: str, name: str, session: str) -> Selection:
    svc = services()
    if session in (LATEST, LIVE, ""):
        live = _find_live(namespace, kind, name)
        if live is not None:
            owner_kind = (live.owner_kind or "").lower()
            owner_name = live.owner_name
            if owner_kind not in OWNER_KINDS or not owner_name:
                # Found through the owner's labels but no controller reference: trust the URL.
                owner_kind, owner_name = (kind, name) if kind != RAYCLUSTER else (RAYCLUSTER, "")
            return Selection(live.namespace, live.name, LIVE, owner_kind, owner_name)
        if session == LIVE:
            raise ApiError(404, f"cluster {namespace}/{kind}/{name} is not running (no live RayCluster found)")
    stored = stored_sessions().find(namespace, kind, name, session)
    if stored is None:
        raise ApiError(404, f"cluster {namespace}/{kind}/{name} with session {session or LATEST} not found")
    # Build (or validate) the index now, so the Dashboard's first requests are fast
    # and a broken session is reported here rather than on every page.
    svc.indexes.ensure(stored.cluster, stored.session)
    cluster = stored.cluster
    return Selection(cluster.namespace, cluster.name, stored.session, cluster.owner_kind, cluster.owner_name)


def _find_live(namespace: str, kind: str, name: str) -> LiveCluster | None:
    live = services().live
    try:
        if kind == RAYCLUSTER:
            return live.get(namespace, name)
        return live.find_for_owner(namespace, kind, name)
    except LiveDiscoveryError as exc:
        # No silent fallback to storage: a running cluster's stored session is stale.
        logger.warning("live lookup of %s/%s/%s failed: %s", namespace, kind, name, exc)
        raise ApiError(
            503,
            f"cannot tell whether {namespace}/{kind}/{name} is running ({exc}); "
            "retry, or enter a stored session by name",
            headers={"Retry-After": "5"},
        ) from None


# ------------------------------------------------------------ /select_cluster
def _asset(name: str) -> Response:
    data = resources.files("runtime.server").joinpath("static", name).read_bytes()
    response = Response(data, content_type=_ASSETS[name])
    response.headers.update(PICKER_HEADERS)
    return response


@bp.get("/select_cluster")
def select_cluster() -> BaseResponse:
    if request.path.endswith("/"):
        # The page's asset URLs are relative (a path prefix in front of the server
        # keeps working); under ".../select_cluster/" they would miss.
        return redirect("../select_cluster", code=308)
    return _asset("select_cluster.html")


@bp.get("/select_cluster.js")
def select_cluster_js() -> Response:
    return _asset("select_cluster.js")


@bp.get("/select_cluster.css")
def select_cluster_css() -> Response:
    return _asset("select_cluster.css")

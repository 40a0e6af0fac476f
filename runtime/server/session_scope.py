"""Answering ``/sessions/...`` (:mod:`runtime.server.session_urls`) with the views of
the cookie flow, the session taken from the path instead of the selection cookies.

:class:`SessionPaths` (WSGI) moves the session part of the path into ``SCRIPT_NAME``, so
``/sessions/ns/c/s/api/jobs/`` is routed as ``/api/jobs/``, and drops the selection
cookies; :func:`select_from_path` (``before_request``) authorizes the path's namespace
and resolves its session for :func:`runtime.server.selection.selection_from_request`.
Nothing here sets a cookie.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import quote

from flask import Flask, redirect, request
from werkzeug.wrappers import Response as BaseResponse

from runtime.server.auth import authorize
from runtime.server.auth.gate import OPEN_ENDPOINTS
from runtime.server.context import services
from runtime.server.errors import ApiError, IndexBuildingError
from runtime.server.live.discovery import LiveCluster, LiveDiscoveryError
from runtime.server.selection import COOKIE_NAMES, LATEST, LIVE, PATH_SELECTION, Selection
from runtime.server.session_urls import PREFIX, SessionTarget, parse_session_path
from runtime.server.sessions import stored_sessions
from runtime.server.views.building import building_page
from runtime.storage.errors import StorageError
from runtime.storage.layout import OWNER_KINDS, RAYCLUSTER

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

logger = logging.getLogger(__name__)

#: The WSGI environ keys :class:`SessionPaths` leaves for :func:`select_from_path`.
ENVIRON_TARGET = "historyserver.session_target"
ENVIRON_ERROR = "historyserver.session_url_error"


class SessionPaths:
    """WSGI middleware: ``/sessions/<target>/<rest>`` is handed to the app as ``/<rest>``
    (the target moves to ``SCRIPT_NAME``), so the cookie flow's routes answer it unchanged.

    The selection cookies are dropped from such a request: the path alone selects, so a
    cookie left by another tab can neither change the answer nor the namespace authorized.
    """

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path: str = environ.get("PATH_INFO", "")
        if path.startswith(PREFIX) or path == PREFIX[:-1]:
            # A copy: the server's own view (gunicorn's access log) keeps the URL as requested.
            environ = dict(environ)
            try:
                target, rest = parse_session_path(path)
            except ApiError as exc:
                environ[ENVIRON_ERROR] = exc  # answered by the app, after authentication
            else:
                environ[ENVIRON_TARGET] = (target, rest)
                consumed = path[: len(path) - len(rest)]
                script = environ.get("SCRIPT_NAME", "")
                environ["SCRIPT_NAME"] = script + consumed
                environ["PATH_INFO"] = rest or "/"
                _strip_raw_uri(environ, consumed, script + (rest or "/"))
            if "HTTP_COOKIE" in environ:
                environ["HTTP_COOKIE"] = without_selection_cookies(environ["HTTP_COOKIE"])
        return self.app(environ, start_response)


def _strip_raw_uri(environ: WSGIEnvironment, consumed: str, fallback: str) -> None:
    """The request target as received, without the session part: the live proxy forwards
    it verbatim, and the cluster knows ``/api/jobs/``, not ``/sessions/.../api/jobs/``."""
    query = environ.get("QUERY_STRING", "")
    for key in ("RAW_URI", "REQUEST_URI"):
        raw = environ.get(key)
        if not isinstance(raw, str):
            continue
        at = raw.find(consumed)  # validated segments: their encoded form is the decoded one
        if at >= 0:
            environ[key] = raw[:at] + raw[at + len(consumed) :]
        else:  # an oddly encoded path: rebuild it from the decoded one
            environ[key] = quote(fallback, safe="/") + (f"?{query}" if query else "")


def without_selection_cookies(header: str) -> str:
    """A ``Cookie`` header without the five selection cookies (others, e.g. a login, stay)."""
    kept = (part for part in header.split(";") if part.split("=", 1)[0].strip() not in COOKIE_NAMES)
    return ";".join(kept).strip()


def select_from_path() -> BaseResponse | None:
    """``before_request``: authorize and resolve the path's session for the views.

    Runs after authentication: the path's namespace is authorized on every request, as
    the cookie's is. ``latest``/``live`` resolve as ``/enter_cluster`` resolves them (a
    running cluster is live). The Dashboard page itself waits for the session's index
    (a browser sees the build's progress page, which reloads itself).
    """
    environ = request.environ
    error: ApiError | None = environ.get(ENVIRON_ERROR)
    if error is not None:
        raise error
    found: tuple[SessionTarget, str] | None = environ.get(ENVIRON_TARGET)
    if found is None:
        return None
    target, rest = found
    endpoint = request.endpoint or ""
    if endpoint in OPEN_ENDPOINTS or endpoint.startswith("auth."):
        # Probes, metrics and login are the server's, not a session's (and skip authentication).
        raise ApiError(404, f"{request.path}: not served under a session URL (use it without {PREFIX}...)")
    authorize(target.namespace, target.name, target.session)
    if not rest:
        # The page's URLs are relative: without the trailing "/" they would miss the session.
        query = request.query_string.decode("latin-1")
        response = redirect(f"{target.session}/" + (f"?{query}" if query else ""), code=308)
        response.headers["Cache-Control"] = "no-store"
        return response
    if endpoint == "ui.static_file" and not {"", ".", ".."} & set(rest[1:].split("/")):
        return _shared_asset(target, rest)
    selection = resolve_target(target)
    environ[PATH_SELECTION] = selection
    if not selection.is_live and request.path in ("/", "/index.html"):
        try:
            services().indexes.ensure(selection.cluster, selection.session)
        except IndexBuildingError as exc:
            if is_page_navigation():
                return building_page(exc)
            raise
    return None


def _shared_asset(target: SessionTarget, rest: str) -> BaseResponse:
    """The Dashboard's hashed files are the same for every session: a permanent redirect
    (relative, cacheable) to the server's own ``static/...`` lets a browser download them
    (main.js is over 1 MB) once for all sessions instead of once per session URL."""
    # From the directory of <prefix>/sessions/.../<rest> up to <prefix>/.
    depth = target.path.count("/") - 1 + rest.count("/") - 1
    response = redirect("../" * depth + rest.lstrip("/"), code=308)
    response.headers["Cache-Control"] = "public, max-age=86400"
    return response


def resolve_target(target: SessionTarget) -> Selection:
    """The session a target names: live if ``live``/``latest`` and running, else stored; 404 if none."""
    namespace, kind, name, session = target.namespace, target.kind, target.name, target.session
    if session in (LATEST, LIVE):
        live = _find_live(target)
        if live is not None:
            owner_kind, owner_name = (live.owner_kind or "").lower(), live.owner_name
            if owner_kind not in OWNER_KINDS or not owner_name:
                owner_kind, owner_name = (kind, name) if kind != RAYCLUSTER else (RAYCLUSTER, "")
            return Selection(live.namespace, live.name, LIVE, owner_kind, owner_name)
        if session == LIVE:
            raise ApiError(404, f"cluster {namespace}/{kind}/{name} is not running (no live RayCluster found)")
    try:
        stored = stored_sessions().find(namespace, kind, name, session)
    except StorageError as exc:
        logger.warning("looking up %s failed: %s", target.path, exc)
        raise ApiError(503, "stored sessions cannot be listed now; retry", headers={"Retry-After": "5"}) from None
    if stored is None:
        raise ApiError(404, f"cluster {namespace}/{kind}/{name} with session {session} not found")
    cluster = stored.cluster
    return Selection(cluster.namespace, cluster.name, stored.session, cluster.owner_kind, cluster.owner_name)


def _find_live(target: SessionTarget) -> LiveCluster | None:
    live = services().live
    try:
        if target.kind == RAYCLUSTER:
            return live.get(target.namespace, target.name)
        return live.find_for_owner(target.namespace, target.kind, target.name)
    except LiveDiscoveryError as exc:
        # No silent fallback to storage: a running cluster's stored session is stale.
        logger.warning("live lookup for %s failed: %s", target.path, exc)
        raise ApiError(
            503,
            f"cannot tell whether {target.namespace}/{target.kind}/{target.name} is running ({exc}); "
            "retry, or open a stored session by name",
            headers={"Retry-After": "5"},
        ) from None


def is_page_navigation() -> bool:
    """A browser loading the URL as a page (not a fetch of the Dashboard, not curl)."""
    mode = request.headers.get("Sec-Fetch-Mode")
    if mode is not None:
        return mode == "navigate"
    return "text/html" in request.headers.get("Accept", "")


def install(app: Flask) -> None:
    """Serve ``/sessions/...`` on ``app``; call right after access control is installed,
    so the path's namespace is authorized before any view runs."""
    app.wsgi_app = SessionPaths(app.wsgi_app)  # type: ignore[method-assign]
    app.before_request(select_from_path)

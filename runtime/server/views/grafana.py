"""Grafana under the server's own origin (``/grafana/...``) and a Prometheus query API
(``/prometheus/api/v1/query[_range]``), both restricted to sessions the caller may read.

The Dashboard's iframes point at ``/grafana`` (the ``grafanaHost`` the health probe
answers), so one port-forward or ingress serves everything. What is forwarded:

* ``/grafana/public/...`` (Grafana's own scripts, styles, fonts): no session data.
* Dashboard pages ``/grafana/d/...`` and ``/grafana/d-solo/...``: must carry
  ``var-SessionName`` naming a stored session the caller may read (404 when unknown
  or not readable alike: :mod:`runtime.server.grafana.access`). Once that session has
  ended the page is redirected to the same URL with its absolute window
  (:mod:`runtime.server.grafana.window`); a running session's URL passes through unchanged.
* ``POST /grafana/api/ds/query`` (the panels' data): every query, hidden or not, must be
  PromQL for a Prometheus datasource passing :mod:`runtime.server.grafana.promql` for
  readable sessions; server-side expressions and other datasources are 403, and the
  body forwarded is rebuilt from the checked queries (:mod:`runtime.server.grafana.ds_query`).
* Label-value lookups of the dashboards' variables (``.../resources/api/v1/labels``,
  ``label/<name>/values``, ``series``): the session is the one the framed page names
  (its ``Referer``'s ``var-SessionName``, checked like a page), and every ``match[]``
  is rewritten to select only that session, so a lookup never lists other sessions.
* A few metadata calls a panel page makes (settings, user, the dashboard's JSON,
  search, datasource by uid, annotations). Anything else is 403 naming the path
  (Grafana's own datasource proxy, for one, could read any session's series).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlencode, urlsplit

from flask import Blueprint, Response, redirect, request

from runtime.server.auth import no_namespace_data
from runtime.server.context import services
from runtime.server.errors import ApiError
from runtime.server.grafana.access import ended_window, readable_session, readable_sessions
from runtime.server.grafana.ds_query import MalformedQuery, check_ds_query
from runtime.server.grafana.promql import QueryRefused, pin_selector, sessions_of
from runtime.server.grafana.upstream import forward
from runtime.server.grafana.window import rewrite_query, session_name_of

logger = logging.getLogger(__name__)

bp = Blueprint("grafana", __name__)

GRAFANA_PREFIX = "/grafana"
METHODS = ("GET", "HEAD", "POST")
MAX_QUERY_BODY = 1024 * 1024
_STATIC = re.compile(r"^public/[A-Za-z0-9_./@-]+$")
_PAGE = re.compile(r"^d(?:-solo)?/[A-Za-z0-9_-]{1,40}(?:/[A-Za-z0-9_-]*)?/?$")
_METADATA = re.compile(
    r"^api/(?:health|frontend/settings|user|user/[a-z/-]+|login/ping|search|dashboards/uid/[A-Za-z0-9_-]{1,40}"
    r"|datasources/uid/[A-Za-z0-9_-]{1,40}|plugins/[a-z0-9-]+/settings|annotations|access-control/user/actions)/?$"
)
_LOOKUP = re.compile(
    r"^api/datasources/uid/[A-Za-z0-9_-]{1,40}/resources/api/v1/(?:labels|series|label/[A-Za-z_][A-Za-z0-9_]*/values)$"
)
#: Prometheus query API parameters passed on (others are dropped, never forwarded blindly).
_PROM_PARAMS = ("query", "start", "end", "step", "time", "timeout", "limit")


def _grafana_url() -> str:
    url = services().config.metrics.grafana_url
    if url is None:
        raise ApiError(404, "no Grafana is configured for this history server (--grafana-url)")
    return url


@bp.route(GRAFANA_PREFIX + "/", defaults={"path": ""}, methods=METHODS)
@bp.route(GRAFANA_PREFIX + "/<path:path>", methods=METHODS)
def grafana(path: str) -> Response:
    base = _grafana_url()
    _refuse_dot_segments(path)
    metrics = services().config.metrics
    query = request.query_string.decode("latin-1")
    body: bytes | None = None
    if request.method in ("GET", "HEAD") and _STATIC.match(path):
        no_namespace_data()
    elif request.method in ("GET", "HEAD") and _PAGE.match(path):
        rewritten = _page_window(query)
        if rewritten is not None:
            moved: Response = redirect(f"{request.script_root}{request.path}?{rewritten}", code=302)  # type: ignore[assignment]
            return moved
    elif request.method == "POST" and path.rstrip("/") == "api/ds/query":
        body = _checked_ds_query()
    elif request.method in ("GET", "POST") and _LOOKUP.match(path):
        query, body = _pinned_lookup()
    elif request.method in ("GET", "HEAD") and _METADATA.match(path):
        no_namespace_data()
    else:
        raise ApiError(403, f"{request.method} {GRAFANA_PREFIX}/{path} is not served through the history server")
    url = f"{base}{GRAFANA_PREFIX}/{path}" + (f"?{query}" if query else "")
    return forward(
        request,
        url,
        base_url=base,
        authorization=metrics.grafana_authorization,
        timeout=services().config.proxy_timeout,
        body=body,
        what="Grafana",
    )


def _refuse_dot_segments(path: str) -> None:
    """The allow-lists below judge the path as written, Grafana (and the HTTP client on
    the way) the path with its dot segments resolved: ``public/../api/...`` would pass as
    a static asset and reach any Grafana API. Such a path is refused, never cleaned."""
    segments = path.split("/")
    if any(segment in (".", "..") for segment in segments) or "" in segments[:-1] or "\\" in path:
        raise ApiError(400, f"{GRAFANA_PREFIX}/{path}: a path with '.', '..', empty segments or '\\' is not served")


def _page_window(query: str) -> str | None:
    """The page's query with the session's absolute window, None to forward it as is."""
    name = session_name_of(query)
    if not name:
        raise ApiError(400, "a Grafana page needs var-SessionName (the session whose charts it shows)")
    stored = readable_session(name)
    window = ended_window(services(), stored)
    return None if window is None else rewrite_query(query, window)


def _pinned_lookup() -> tuple[str, bytes | None]:
    """A label lookup's parameters with every ``match[]`` pinned to the framing page's session."""
    referer = urlsplit(request.headers.get("Referer", ""))
    name = session_name_of(referer.query) if referer.path.startswith(GRAFANA_PREFIX + "/d") else None
    if not name:
        raise ApiError(403, "a label lookup is served only for a dashboard page naming var-SessionName (its Referer)")
    session = readable_session(name).session
    source = request.form if request.method == "POST" else request.args
    params = [(k, v) for k, v in source.items(multi=True) if k != "match[]"]
    try:
        pinned = [pin_selector(v, session) for v in source.getlist("match[]")] or [f'{{SessionName="{session}"}}']
    except QueryRefused as exc:
        raise ApiError(403, f"label lookup refused: {exc}") from None
    encoded = urlencode(params + [("match[]", m) for m in pinned])
    return (encoded, None) if request.method == "GET" else ("", encoded.encode())


def _checked_ds_query() -> bytes:
    """The body of a panel's data request rebuilt from its checked queries, once every
    query (hidden or not) is pinned to sessions the caller may read."""
    if (request.content_length or 0) > MAX_QUERY_BODY:
        raise ApiError(413, f"a data query body is limited to {MAX_QUERY_BODY} bytes")
    raw = request.get_data(cache=False)[: MAX_QUERY_BODY + 1]
    if len(raw) > MAX_QUERY_BODY:
        raise ApiError(413, f"a data query body is limited to {MAX_QUERY_BODY} bytes")
    try:
        checked = check_ds_query(raw)
    except MalformedQuery as exc:
        raise ApiError(400, str(exc)) from None
    except QueryRefused as exc:
        raise ApiError(403, f"query refused: {exc}") from None
    readable_sessions(checked.sessions)
    return checked.body


def _pinned(expr: str) -> set[str]:
    try:
        return sessions_of(expr)
    except QueryRefused as exc:
        raise ApiError(403, f"query refused: {exc}") from None


@bp.route("/prometheus/api/v1/query_range", methods=("GET", "POST"))
@bp.route("/prometheus/api/v1/query", methods=("GET", "POST"))
def prometheus() -> Response:
    """Prometheus' query API for queries pinned to readable sessions (``SessionName="..."``)."""
    metrics = services().config.metrics
    if metrics.prometheus_url is None:
        raise ApiError(404, "no Prometheus is configured for this history server (--prometheus-url)")
    expr = request.values.get("query")
    if not expr:
        raise ApiError(400, 'query is required (PromQL with SessionName="<session>" on every selector)')
    readable_sessions(_pinned(expr))
    params = [(name, request.values[name]) for name in _PROM_PARAMS if name in request.values]
    endpoint = request.path.rsplit("/", 1)[1]
    return forward(
        request,
        f"{metrics.prometheus_url}/api/v1/{endpoint}?{urlencode(params)}",
        base_url=metrics.prometheus_url,
        authorization=None,
        timeout=services().config.proxy_timeout,
        body=b"",
        what="Prometheus",
        method="GET",
    )

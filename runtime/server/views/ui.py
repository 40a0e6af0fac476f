"""The Ray Dashboard web UI, served by the history server itself.

The static build ships in the ``ray`` wheel (``ray/dashboard/client/build``); it
is found without importing ``ray`` (seconds of start-up), or given with
``--dashboard-dir`` (the image copies it in). The UI is a hash-routed SPA whose
requests are relative to the page (``api/...``, not ``/api/...``), so the server only sees ``/``,
``/favicon.ico``, ``/static/...`` and API calls.

The last-resort route ``/<path:path>`` proxies to a live cluster when the
selection cookie says ``live`` -- the Dashboard's own paths that no
stored-session view implements (``/worker/traceback``, ``/task/cpu_profile``, ...)
-- and otherwise answers 404, which is also what makes ``ray start
--proxy-server-url`` fall back to Ray's own handler. Werkzeug picks the most
specific rule, so every other blueprint's routes win over it. It accepts every
method so that a write to a live cluster gets the proxy's JSON 403 (the live
proxy is read-only: :data:`runtime.server.live.proxy.READ_METHODS`), not a bare
405.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from flask import Blueprint, Flask, Response, current_app, redirect, request, send_from_directory
from werkzeug.security import safe_join
from werkzeug.wrappers import Response as BaseResponse

from runtime.server.auth import no_namespace_data
from runtime.server.context import services
from runtime.server.errors import ApiError, json_error
from runtime.server.live.proxy import METHODS, proxy_request
from runtime.server.selection import has_selection, refresh_selection_cookies, selection_from_request

logger = logging.getLogger(__name__)

bp = Blueprint("ui", __name__)

_EXTENSION = "historyserver.ui"
#: Content-hashed file names under static/: cache for a year, never revalidate.
IMMUTABLE = 365 * 24 * 3600
#: Other top-level files (favicon, speedscope): an hour is plenty.
SHORT = 3600
REFERENCE_DIR = Path("/dashboard")
MISSING_HINT = (
    "the Ray Dashboard UI build was not found: install the 'ray' package next to the history server "
    "(it ships ray/dashboard/client/build) or pass --dashboard-dir=<dir with index.html>; "
    "the Dashboard API (/clusters, /api/...) works without it"
)


def find_dashboard_build(configured: Path | None = None) -> Path | None:
    """The directory holding the Dashboard's ``index.html``, or ``None``.

    ``configured`` (``--dashboard-dir``) wins; otherwise the installed ``ray``
    package is located with ``find_spec`` (which does not import it), then the
    default of KubeRay's Go history server, ``/dashboard``, is tried.
    """
    if configured is not None:
        return configured if (configured / "index.html").is_file() else None
    try:
        spec = importlib.util.find_spec("ray")
    except (ImportError, ValueError):
        return None
    for base in (spec.submodule_search_locations or []) if spec is not None else []:
        build = Path(base) / "dashboard" / "client" / "build"
        if (build / "index.html").is_file():
            return build
    # Where KubeRay's Go history server's --dashboard-dir points by default (an image may copy it there).
    return REFERENCE_DIR if (REFERENCE_DIR / "index.html").is_file() else None


def dashboard_build(app: Flask) -> Path | None:
    """The build directory for ``app``, looked up once."""
    if _EXTENSION not in app.extensions:
        build = find_dashboard_build(services().config.dashboard_dir)
        if build is None:
            logger.warning("Ray Dashboard UI not served: %s", MISSING_HINT)
        else:
            logger.info("serving the Ray Dashboard UI from %s", build)
        app.extensions[_EXTENSION] = build
    found: Path | None = app.extensions[_EXTENSION]
    return found


def _security_headers(response: Response) -> Response:
    response.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    return response


def _has_route(app: Flask, rule: str) -> bool:
    return any(r.rule == rule for r in app.url_map.iter_rules())


@bp.route("/", methods=["GET", "HEAD"])
@bp.route("/index.html", methods=["GET", "HEAD"])
def index() -> BaseResponse:
    build = dashboard_build(current_app)
    if build is None:
        return json_error(404, MISSING_HINT)
    if not has_selection(request) and _has_route(current_app, "/select_cluster"):
        # Nothing selected yet: every Dashboard call would fail with "Cookie not
        # found". Relative, so the UI keeps working under a path prefix.
        response = redirect("select_cluster", code=302)
        response.headers["Cache-Control"] = "no-store"
        return response
    response = send_from_directory(build, "index.html", max_age=0)
    response.headers["Cache-Control"] = "no-cache"  # new hashes after a Ray upgrade
    return _security_headers(response)


@bp.route("/static/<path:filename>", methods=["GET", "HEAD"])
def static_file(filename: str) -> Response:
    build = dashboard_build(current_app)
    if build is None:
        return json_error(404, MISSING_HINT)
    response = send_from_directory(build / "static", filename, max_age=IMMUTABLE)
    response.headers["Cache-Control"] = f"public, max-age={IMMUTABLE}, immutable"
    return _security_headers(response)


@bp.route("/<path:path>", methods=list(METHODS), provide_automatic_options=False)
def fallback(path: str) -> Response:
    """Top-level build files, else the live proxy, else 404 (see the module doc)."""
    if request.method in ("GET", "HEAD"):
        build = dashboard_build(current_app)
        if build is not None:
            found = safe_join(str(build), path)
            if found is not None and _is_file(Path(found)):
                no_namespace_data()  # a file of the UI build, the same for every caller
                response = send_from_directory(build, path, max_age=SHORT)
                return _security_headers(response)
    try:
        selection = selection_from_request(request) if has_selection(request) else None
    except ApiError:
        selection = None  # a broken cookie must not turn a plain 404 into a 400
    if selection is not None and selection.is_live:
        svc = services()
        response = proxy_request(selection, request, live=svc.live, config=svc.config, outcomes=svc.metrics.proxied)
        refresh_selection_cookies(request, response, selection, secure=svc.config.secure_cookies)
        return response
    if selection is not None:
        msg = f"/{path} is not available for stored sessions (only for live clusters)"
    else:
        msg = f"/{path}: no such route"
    return json_error(404, msg)


def _is_file(path: Path) -> bool:
    """``Path.is_file`` that treats an unusable name (e.g. over NAME_MAX) as absent."""
    try:
        return path.is_file()
    except OSError:
        return False

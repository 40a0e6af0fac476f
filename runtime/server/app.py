"""The Flask app factory (``create_app(config)``): no globals, one Services value."""

from __future__ import annotations

import atexit
import logging
import os
import time
from typing import Any

from flask import Flask, Response, g, request

from runtime.server.auth import AccessControl, build_access_control
from runtime.server.auth import install as install_access_control
from runtime.server.config import ServerConfig
from runtime.server.context import EXTENSION, Services
from runtime.server.errors import register_error_handlers
from runtime.server.guards import register_request_guards
from runtime.server.index.cache import IndexCache
from runtime.server.live.directory import kubernetes_mode, live_directory_from_config
from runtime.server.live.discovery import LiveDirectory
from runtime.server.metrics import ServerMetrics
from runtime.server.session_scope import install as install_session_urls
from runtime.storage.base import ObjectStore
from runtime.storage.config import open_store

logger = logging.getLogger(__name__)
INDEX_AHEAD_EXTENSION = "historyserver.index_ahead"


def create_app(
    config: ServerConfig,
    *,
    store: ObjectStore | None = None,
    live: LiveDirectory | None = None,
    metrics: ServerMetrics | None = None,
    access: AccessControl | None = None,
) -> Flask:
    """Build the history server. ``store``/``live``/``metrics``/``access`` may be passed
    in by tests; by default they come from ``config``."""
    app = Flask(__name__, static_folder=None)
    app.url_map.strict_slashes = False  # go-restful ignores trailing slashes; so do we
    app.json.sort_keys = False  # type: ignore[attr-defined]
    install_nosniff(app)  # first, so its hook runs last: also on answers other hooks replaced

    store = store if store is not None else open_store(config.storage)
    metrics = metrics if metrics is not None else ServerMetrics()
    layout = config.storage.layout
    indexes = IndexCache(config, store=store, layout=layout, metrics=metrics)
    live = live if live is not None else live_directory_from_config(config)
    app.extensions[EXTENSION] = Services(
        config=config, store=store, layout=layout, indexes=indexes, live=live, metrics=metrics
    )

    if config.index_ahead:
        _start_index_ahead(app, indexes, store, live)
    register_error_handlers(app)
    register_request_guards(app, config.allowed_hosts)
    # Before the blueprints' own hooks: nothing runs for a caller who may not read.
    install_access_control(app, access if access is not None else access_control_from_config(config))
    install_session_urls(app)  # right after: a /sessions/... path's namespace is authorized first
    _register_blueprints(app)
    _instrument(app, metrics)
    return app


def _start_index_ahead(app: Flask, indexes: IndexCache, store: ObjectStore, live: LiveDirectory) -> None:
    """Index finished sessions in the background (each gunicorn worker runs the
    threads; slots on the cache directory bound the builds of them all)."""
    from runtime.server.index.ahead import IndexAhead
    from runtime.server.sessions import StoredSessions

    config = indexes.config
    sessions = StoredSessions(store, indexes.layout)
    ahead = IndexAhead(
        indexes,
        lambda: sessions.current(refresh=True),
        live,
        workers=config.index_ahead_workers,
        max_age=config.index_ahead_max_age,
    )
    app.extensions[INDEX_AHEAD_EXTENSION] = ahead
    ahead.start()
    # A gunicorn worker exits through sys.exit, which runs atexit: its threads let go
    # of their slots instead of being cut off in the middle of a wait.
    atexit.register(ahead.stop)


def access_control_from_config(config: ServerConfig) -> AccessControl:
    """``--auth``/``--authz``, with the Kubernetes API client RayCluster discovery uses."""

    def kubernetes_client() -> Any:
        mode = kubernetes_mode(config, os.environ)
        if mode is None:
            raise ValueError("--auth/--authz kubernetes: no Kubernetes API (run in a pod, or --kubernetes=kubeconfig)")
        from runtime.server.live.k8s import kubernetes_api_client

        return kubernetes_api_client(mode, config.kubeconfig)

    return build_access_control(config.auth, kubernetes_client, oidc=config.oidc, front_door=config.front_door)


def install_nosniff(app: Flask) -> None:
    """Every answer, the server's own or proxied, tells browsers not to guess its type
    (``X-Content-Type-Options: nosniff``; an upstream's own value is kept). The one place
    that sets it."""

    @app.after_request
    def _nosniff(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response


def _register_blueprints(app: Flask) -> None:
    from runtime.server.views import clusters, endpoints, grafana, health, logs, state, tasks, ui

    for module in (health, clusters, tasks, state, logs, endpoints, grafana, ui):
        app.register_blueprint(module.bp)


def _instrument(app: Flask, metrics: ServerMetrics) -> None:
    @app.before_request
    def _start_timer() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def _observe(response: Response) -> Response:
        started: Any = g.get("started")
        if started is not None:
            rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
            metrics.request_seconds.labels(rule, request.method, f"{response.status_code // 100}xx").observe(
                time.perf_counter() - started
            )
        return response

"""Per-app services and the per-request session context.

``create_app`` puts one :class:`Services` in ``app.extensions``; Dashboard views are
wrapped by :func:`session_route`, which reads the selection (cookies or a
``/sessions/...`` path), proxies live
clusters, and hands stored sessions to the view as a :class:`SessionContext` whose
index is opened (built on first use) lazily.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, current_app, g, request

from runtime.server.config import ServerConfig
from runtime.server.live.proxy import proxy_request
from runtime.server.selection import Selection, refresh_selection_cookies, selection_from_request
from runtime.storage.base import ObjectStore
from runtime.storage.layout import ClusterRef, KeyLayout

if TYPE_CHECKING:
    from runtime.server.index.cache import IndexCache
    from runtime.server.index.reader import SessionIndex
    from runtime.server.live.discovery import LiveDirectory
    from runtime.server.metrics import ServerMetrics

EXTENSION = "historyserver"


@dataclass
class Services:
    """Everything a view needs; built once per app."""

    config: ServerConfig
    store: ObjectStore
    layout: KeyLayout
    indexes: IndexCache
    live: LiveDirectory
    metrics: ServerMetrics


def app_services(app: Flask) -> Services:
    """The :class:`Services` of an app made by ``create_app`` (its store, indexes, metrics...)."""
    found: Services = app.extensions[EXTENSION]
    return found


def services() -> Services:
    """The :class:`Services` of the app handling the current request."""
    return app_services(current_app)


@dataclass
class SessionContext:
    """A stored session selected by the request (cookies or path)."""

    selection: Selection
    services: Services
    _index: SessionIndex | None = field(default=None, repr=False)

    @property
    def cluster(self) -> ClusterRef:
        return self.selection.cluster

    @property
    def session(self) -> str:
        return self.selection.session

    @property
    def store(self) -> ObjectStore:
        return self.services.store

    @property
    def layout(self) -> KeyLayout:
        return self.services.layout

    @property
    def session_prefix(self) -> str:
        return self.layout.session_prefix(self.cluster, self.session)

    @property
    def index(self) -> SessionIndex:
        """The session's index, built (once, across workers) on first use."""
        if self._index is None:
            self._index = self.services.indexes.open(self.cluster, self.session)
        return self._index

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None


View = Callable[..., Response]


def session_route(view: Callable[..., Response]) -> View:
    """Wrap a Dashboard view: selection -> live proxy or ``view(ctx, **kwargs)``.

    The selection cookies are refreshed on every cookie-flow answer (sliding expiry).
    """

    @functools.wraps(view)
    def wrapper(**kwargs: Any) -> Response:
        svc = services()
        selection = selection_from_request(request)
        if selection.is_live:
            response: Response = proxy_request(
                selection, request, live=svc.live, config=svc.config, outcomes=svc.metrics.proxied
            )
        else:
            ctx = SessionContext(selection, svc)
            g.session_context = ctx
            try:
                response = view(ctx, **kwargs)
            finally:
                ctx.close()
        refresh_selection_cookies(request, response, selection, secure=svc.config.secure_cookies)
        return response

    return wrapper

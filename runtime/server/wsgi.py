"""WSGI entry points, without a module-level app (each worker builds its own).

* :class:`HistoryServerApplication`: gunicorn embedded, what ``historyserver`` runs.
* :func:`create_from_env`: for running gunicorn yourself, configured by the same
  flags passed in ``HISTORYSERVER_ARGS``::

      HISTORYSERVER_ARGS='--storage-backend=local --local-storage-dir=/data' \\
        gunicorn -c runtime/server/gunicorn_conf.py 'runtime.server.wsgi:create_from_env()'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gunicorn.app.base import BaseApplication  # type: ignore[import-untyped]

from runtime.server.config import ServerConfig
from runtime.server.gunicorn_conf import settings
from runtime.server.options import config_from_env

if TYPE_CHECKING:
    from flask import Flask


def create_from_env() -> Flask:
    from runtime.server.app import create_app
    from runtime.server.sessions import warm_up

    app = create_app(config_from_env())
    warm_up(app)
    return app


class HistoryServerApplication(BaseApplication):  # type: ignore[misc]
    """gunicorn running ``create_app(config)`` in every worker (no preload)."""

    def __init__(self, config: ServerConfig, options: Mapping[str, Any] | None = None) -> None:
        self.config = config
        self.options = {**settings(config), **(options or {})}
        super().__init__(prog="historyserver")

    def load_config(self) -> None:
        for name, value in self.options.items():
            if value is not None:
                self.cfg.set(name, value)

    def load(self) -> Flask:
        # Imported here, in the worker after fork: prometheus_client must see
        # PROMETHEUS_MULTIPROC_DIR (set by the master) when it is first imported.
        from runtime.server.app import create_app
        from runtime.server.sessions import warm_up

        app = create_app(self.config)
        warm_up(app)
        return app

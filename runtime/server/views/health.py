"""Probes and metrics: ``/livez``, ``/readz`` (any method, ``ok``, as KubeRay's Go history server)
and ``/metrics`` (Prometheus text format)."""

from __future__ import annotations

import contextlib
import logging
import os

from flask import Blueprint, Response

from runtime.server.context import services

logger = logging.getLogger(__name__)

bp = Blueprint("health", __name__)

ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def _text(body: str, status: int = 200) -> Response:
    response = Response(body, status=status, mimetype="text/plain")
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.route("/livez", methods=ANY_METHOD, provide_automatic_options=False)
def livez() -> Response:
    return _text("ok")


@bp.route("/readz", methods=ANY_METHOD, provide_automatic_options=False)
def readz() -> Response:
    """Ready when the index cache directory is usable: every stored-session request
    needs it. Storage outages are not checked on purpose -- they are transient and
    answered per request (503 + Retry-After); failing readiness for them would take
    every replica out of the Service at once, live proxying included."""
    cache_dir = services().config.cache_dir
    with contextlib.suppress(OSError):
        cache_dir.mkdir(parents=True, exist_ok=True)  # a wiped cache is rebuilt on demand
    if not cache_dir.is_dir() or not os.access(cache_dir, os.W_OK | os.X_OK):
        logger.warning("not ready: cache directory %s is missing or not writable", cache_dir)
        return _text(f"cache directory {cache_dir} is missing or not writable", 503)
    return _text("ok")


@bp.route("/metrics", methods=["GET", "HEAD"])
def metrics() -> Response:
    registry = services().metrics
    response = Response(registry.exposition(), status=200)
    response.headers["Content-Type"] = registry.content_type
    response.headers["Cache-Control"] = "no-store"
    return response

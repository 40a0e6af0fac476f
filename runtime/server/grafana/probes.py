"""``/api/grafana_health`` and ``/api/prometheus_health`` as Ray 2.60's metrics head
answers them (``rest_response``: ``result``, ``msg``, camelCase ``data``), so the
unmodified Dashboard shows its charts.

With ``--grafana-url`` the Grafana answer names ``/grafana`` (this server's proxy, a
path so it works behind any ingress and scheme) as ``grafanaHost``, the selected
session as ``sessionName`` (for a live cluster: its newest stored session, which its
collector is writing), the dashboards' uids and the datasource. Each probe asks the
service once (Ray's health paths and 5 s timeout); an unreachable or unhealthy one
gives Ray's failure answer, 500 with ``result: false``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson
import requests
from flask import Response, request

from runtime.server.config import MetricsConfig
from runtime.server.context import services
from runtime.server.errors import json_response
from runtime.server.grafana.upstream import get_json
from runtime.server.live.proxy import proxy_request
from runtime.server.selection import Selection, refresh_selection_cookies, selection_from_request
from runtime.server.sessions import stored_sessions
from runtime.storage.errors import StorageError

logger = logging.getLogger(__name__)

#: Ray's ``PROMETHEUS_HEALTHCHECK_TIMEOUT_S``.
PROBE_TIMEOUT = 5.0
#: Where the Dashboard's iframes point: this server's Grafana proxy.
GRAFANA_HOST = "/grafana"
_NOT_KEPT = (
    "no {what} is configured for this history server (--{flag}): "
    "the charts of stored sessions need one that kept their metrics"
)

Probe = Callable[[MetricsConfig, str | None], Response]


def _answer(code: int, message: str, **data: Any) -> Response:
    return json_response(orjson.dumps({"result": code == 200, "msg": message, "data": data}), status=code)


def grafana_probe(config: MetricsConfig, session_name: str | None) -> Response:
    if config.grafana_url is None:
        return _answer(
            500, "Grafana healthcheck failed", exception=_NOT_KEPT.format(what="Grafana", flag="grafana-url")
        )
    url = f"{config.grafana_url}{GRAFANA_HOST}/api/health"
    try:
        status, body = get_json(url, authorization=config.grafana_authorization, timeout=PROBE_TIMEOUT)
    except requests.RequestException as exc:
        logger.warning("Grafana health check %s failed: %s", url, exc)
        return _answer(500, "Grafana healthcheck failed", exception=type(exc).__name__)
    if status != 200:
        return _answer(500, "Grafana healthcheck failed", status=status)
    if not isinstance(body, dict) or body.get("database") != "ok":
        return _answer(500, "Grafana healthcheck failed. Database not ok.", status=status, json=body)
    return _answer(
        200,
        "Grafana running",
        grafanaHost=GRAFANA_HOST,
        grafanaOrgId=config.grafana_org_id,
        sessionName=session_name,
        dashboardUids=config.dashboard_uids,
        dashboardDatasource=config.datasource,
        grafanaClusterFilter=None,
    )


def prometheus_probe(config: MetricsConfig, session_name: str | None) -> Response:
    if config.prometheus_url is None:
        reason = _NOT_KEPT.format(what="Prometheus", flag="prometheus-url")
        return _answer(500, "prometheus healthcheck failed.", reason=reason)
    url = f"{config.prometheus_url}/api/v1/query?query=vector(1)"
    try:
        status, body = get_json(url, authorization=None, timeout=PROBE_TIMEOUT)
    except requests.RequestException as exc:
        logger.warning("Prometheus health check %s failed: %s", url, exc)
        return _answer(500, "prometheus healthcheck failed.", reason=type(exc).__name__)
    if status != 200 or not isinstance(body, dict) or body.get("status") != "success":
        return _answer(500, "prometheus healthcheck failed.", status=status)
    return _answer(200, "prometheus running")


def _live_session_name(selection: Selection) -> str | None:
    """A live cluster's newest stored session (its collector writes it while it runs)."""
    try:
        sessions = stored_sessions().current()
    except StorageError as exc:
        logger.warning("cannot list stored sessions for %s/%s: %s", selection.namespace, selection.name, exc)
        return None
    key = (selection.namespace, selection.name)
    return next((s.session for s in sessions if (s.cluster.namespace, s.cluster.name) == key), None)


def metrics_probe(probe: Probe, *, configured: bool) -> Response:
    """Answer a health probe for the request's selection (stored or live)."""
    svc = services()
    selection = selection_from_request(request)
    if selection.is_live and not configured:
        # Ray's own answer from the cluster (it may run its own Grafana).
        response: Response = proxy_request(
            selection, request, live=svc.live, config=svc.config, outcomes=svc.metrics.proxied
        )
    else:
        name = _live_session_name(selection) if selection.is_live else selection.session
        response = probe(svc.config.metrics, name)
    refresh_selection_cookies(request, response, selection, secure=svc.config.secure_cookies)
    return response

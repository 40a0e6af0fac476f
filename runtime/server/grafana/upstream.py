"""The hop to Grafana or Prometheus: streamed both ways, headers filtered, credentials
added here and never taken from (or given to) the browser.

Up: only the headers a Grafana page and its API calls need (an allow-list); the
caller's ``Authorization`` and cookies never pass (they are the history server's
login and selection); Grafana's credentials (``--grafana-token-file`` /
``--grafana-basic-auth-file``) are added. Down: hop-by-hop headers, ``Set-Cookie``
(with server-side credentials Grafana needs no browser session, so none of its
cookies reach the browser) and our own server headers are dropped; a ``Location``
into Grafana's URL becomes a path; ``X-Frame-Options`` is ``SAMEORIGIN`` (the panels
are framed by the Dashboard on this same origin, never by another site).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import requests
from flask import Flask, Request, Response, current_app

from runtime.server.errors import json_error
from runtime.server.live.headers import HOP_BY_HOP, connection_tokens
from runtime.server.upstream_session import pooled_session

logger = logging.getLogger(__name__)

CHUNK = 64 * 1024
_EXTENSION = "historyserver.metrics_upstream"
#: Request headers a Grafana page, its assets and its API calls use.
REQUEST_ALLOW = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "content-type",
        "if-modified-since",
        "if-none-match",
        "x-dashboard-uid",
        "x-datasource-uid",
        "x-grafana-device-id",
        "x-grafana-nocache",
        "x-grafana-org-id",
        "x-panel-id",
        "x-plugin-id",
        "x-query-group-id",
    }
)
RESPONSE_DROP = HOP_BY_HOP | {"server", "date", "set-cookie", "x-frame-options"}


def _session(app: Flask) -> requests.Session:
    """A Grafana page is ~50 requests: pooled connections."""
    return pooled_session(app, _EXTENSION, pool_connections=4, pool_maxsize=16)


def upstream_headers(request: Request, authorization: str | None) -> dict[str, str]:
    headers = {name: value for name, value in request.headers.items() if name.lower() in REQUEST_ALLOW}
    headers.setdefault("Accept-Encoding", "identity")
    if authorization is not None:
        headers["Authorization"] = authorization
    return headers


def downstream_headers(upstream: requests.Response, base_url: str) -> list[tuple[str, str]]:
    raw = upstream.raw.headers
    drop = RESPONSE_DROP | connection_tokens(raw.get("Connection"))
    out: list[tuple[str, str]] = []
    for name, value in raw.items():
        lowered = name.lower()
        if lowered in drop:
            continue
        if lowered == "location" and value.startswith(base_url):
            out.append((name, value[len(base_url) :] or "/"))  # never send a browser to the in-cluster host
        else:
            out.append((name, value))
    out.append(("X-Frame-Options", "SAMEORIGIN"))
    return out


def _relay(upstream: requests.Response) -> Iterator[bytes]:
    try:
        # Bytes as sent (still compressed if they were): nothing is buffered or decoded.
        yield from upstream.raw.stream(CHUNK, decode_content=False)
    except (requests.RequestException, OSError) as exc:
        logger.warning("metrics upstream %s broke off: %s", upstream.url, exc)
    finally:
        upstream.close()


def forward(
    request: Request,
    url: str,
    *,
    base_url: str,
    authorization: str | None,
    timeout: float,
    body: bytes | None = None,
    what: str,
    method: str | None = None,
) -> Response:
    """Send ``request`` (method, allowed headers, ``body`` or its own) to ``url``; stream the answer."""
    data = body if body is not None else (request.get_data() if request.content_length else None)
    try:
        upstream = _session(current_app).request(
            method or request.method,
            url,
            headers=upstream_headers(request, authorization),
            data=data,
            stream=True,
            allow_redirects=False,
            timeout=(min(10.0, timeout), timeout),
        )
    except requests.Timeout:
        logger.warning("%s: %s %s timed out", what, method or request.method, url)
        return json_error(504, f"{what}: no answer within {timeout:g} s")
    except requests.RequestException as exc:
        logger.warning("%s: %s %s failed: %s", what, method or request.method, url, exc)
        return json_error(502, f"{what}: cannot reach it ({type(exc).__name__})")
    return Response(
        _relay(upstream),
        status=upstream.status_code,
        headers=downstream_headers(upstream, base_url),
        direct_passthrough=True,
    )


def get_json(url: str, *, authorization: str | None, timeout: float) -> tuple[int, object]:
    """A health probe: (status, parsed JSON or None); raises requests.RequestException."""
    headers = {"Accept": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    response = _session(current_app).get(url, headers=headers, timeout=timeout, allow_redirects=False)
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, None

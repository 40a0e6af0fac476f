"""Header hygiene of the live proxy: what reaches a cluster's dashboard and what
comes back.

Dropped on the way up: hop-by-hop headers (RFC 9110 §7.6.1, and any the client's
``Connection`` names), client-sent forwarding claims (replaced by ours), our
selection cookies, and every credential -- ``Authorization`` (the caller's login
to the history server), ``x-ray-authorization`` and Ray's
``ray-authentication-token`` cookie. A cluster with Ray token auth gets
``x-ray-authorization: Bearer <token>`` (what Ray 2.60's dashboard reads when
``Authorization`` is absent, and what KubeRay's own clients send). On the way
down: hop-by-hop headers, our server's own, a ``Location`` into the cluster, and
any ``Set-Cookie`` of Ray's token cookie.
"""

from __future__ import annotations

import requests
from flask import Request

from runtime.server.live.discovery import LiveCluster
from runtime.server.selection import COOKIE_NAMES

#: RFC 9110 §7.6.1 connection-specific headers (plus the non-standard ones seen in the wild).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
#: Request headers re-derived for the upstream hop (requests sets Host and the length).
REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "expect"}
#: Forwarding claims a client may send (``X-Forwarded-*`` too): replaced by ours.
FORWARDING = frozenset({"forwarded", "x-real-ip", "x-client-ip", "x-original-forwarded-for"})
#: Credentials for the history server (or forged for the cluster): never forwarded.
CREDENTIALS = frozenset({"authorization", "x-ray-authorization"})
#: Ray's dashboard login cookie (``AUTHENTICATION_TOKEN_COOKIE_NAME``): never forwarded or set.
RAY_TOKEN_COOKIE = "ray-authentication-token"  # noqa: S105 - a cookie name, not a value
RAY_AUTH_HEADER = "x-ray-authorization"
#: Response headers our own server writes (gunicorn always sends Server and Date).
RESPONSE_DROP = HOP_BY_HOP | {"server", "date"}


def connection_tokens(value: str | None) -> set[str]:
    return {token.strip().lower() for token in (value or "").split(",") if token.strip()}


def _forwarding(name: str) -> bool:
    return name.startswith("x-forwarded-") or name in FORWARDING


def upstream_headers(request: Request, token: str | None = None) -> dict[str, str]:
    drop = REQUEST_DROP | CREDENTIALS | connection_tokens(request.headers.get("Connection"))
    headers = {
        name: value
        for name, value in request.headers.items()
        if name.lower() not in drop and not _forwarding(name.lower())
    }
    if token is not None:
        headers[RAY_AUTH_HEADER] = f"Bearer {token}"
    cookie = _without_selection_cookies(request.headers.get("Cookie", ""))
    headers.pop("Cookie", None)
    if cookie:
        headers["Cookie"] = cookie
    # Without this, requests would announce gzip for a client that never asked for it.
    headers.setdefault("Accept-Encoding", "identity")
    # Always ours, never the client's: a client could otherwise tell the dashboard
    # it came from anywhere, over HTTPS, for any host (the Host was checked).
    headers["X-Forwarded-For"] = request.remote_addr or ""
    headers["X-Forwarded-Proto"] = request.scheme
    headers["X-Forwarded-Host"] = request.host
    return headers


def _without_selection_cookies(header: str) -> str:
    """The Cookie header minus our five selection cookies (they mean nothing upstream)
    and Ray's token cookie (a client must not choose the credentials)."""
    kept = []
    for part in header.split(";"):
        name = part.split("=", 1)[0].strip()
        if name and name not in COOKIE_NAMES and name.lower() != RAY_TOKEN_COOKIE:
            kept.append(part.strip())
    return "; ".join(kept)


def _sets_ray_token(set_cookie: str) -> bool:
    """A ``Set-Cookie`` for Ray's token cookie: it would hand a cluster token to the browser."""
    return set_cookie.split("=", 1)[0].strip().lower() == RAY_TOKEN_COOKIE


def downstream_headers(upstream: requests.Response, cluster: LiveCluster) -> list[tuple[str, str]]:
    raw_headers = upstream.raw.headers  # keeps repeated headers (Set-Cookie) apart
    drop = RESPONSE_DROP | connection_tokens(raw_headers.get("Connection"))
    headers: list[tuple[str, str]] = []
    for name, value in raw_headers.items():
        lowered = name.lower()
        if lowered in drop or (lowered == "set-cookie" and _sets_ray_token(value)):
            continue
        if lowered == "location" and value.startswith(cluster.base_url):
            # Never point a browser at an in-cluster host name.
            headers.append((name, value[len(cluster.base_url) :] or "/"))
        else:
            headers.append((name, value))
    return headers

"""Header hygiene of the live proxy: what reaches a cluster's dashboard and what
comes back. Both ways it is an allow-list: the head runs tenant code, so it gets
only what the unmodified Ray 2.60 Dashboard needs, and the browser gets only what
a dashboard answer needs, never anything that acts on the history server's origin.

On the way up (:func:`upstream_headers`), only :data:`REQUEST_ALLOW` passes.
Everything else is dropped, so no credential of the history server or its front
door can reach the head, including ones this list never heard of:
``Authorization`` (the caller's login to the history server), ``Proxy-Authorization``,
``x-ray-authorization``, the front doors' identity headers (``x-goog-iap-jwt-assertion``,
``x-goog-authenticated-user-*``, ``x-amzn-oidc-*``; whichever ``--trusted-header``
chooses), and every cookie: the OIDC login and state cookies, the selection cookies
and Ray's own ``ray-authentication-token`` (the only cookie the Ray 2.60 dashboard
reads; the proxy supplies the cluster's token itself as ``x-ray-authorization:
Bearer <token>``, what Ray reads when ``Authorization`` is absent and what KubeRay's
own clients send). Client-sent forwarding claims are replaced by ours.
``User-Agent`` and the ``Sec-Fetch-*`` headers pass on purpose: Ray redacts
``runtime_env`` secrets (``env_vars``) in answers to requests that look like a
browser's (``ray.dashboard.optional_utils.is_browser_request``).

On the way down (:func:`downstream_headers`), only :data:`RESPONSE_ALLOW` passes:
no ``Set-Cookie`` (a head must not plant cookies, e.g. a login of its own choosing,
on the history server's origin), no ``WWW-Authenticate`` (a password dialog in the
history server's name), no CORS grant, ``Refresh``, ``Link`` or
``Content-Security-Policy`` of the head's. A ``Location`` passes only when it points
into the cluster's own dashboard, rewritten to the proxied path the browser asked
for; any other one raises :class:`ForeignRedirectError` (the proxy answers 502).
"""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import requests
from flask import Request

from runtime.server.live.discovery import LiveCluster

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
#: The request headers forwarded to a head (lower case); everything else is dropped.
#: Content negotiation, conditional and range requests (log downloads), the body's
#: type (a GET may carry one), and the headers by which Ray tells a browser
#: (``User-Agent``, ``Sec-Fetch-*``): it redacts runtime-env secrets for browsers.
REQUEST_ALLOW = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "pragma",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "if-range",
        "range",
        "content-type",
        "user-agent",
        "sec-fetch-dest",
        "sec-fetch-mode",
        "sec-fetch-site",
        "sec-fetch-user",
    }
)
#: Never forwarded, whatever the allow-list says (a second line of defence, and the
#: names the tests check): credentials of the history server, its front door or Ray.
CREDENTIALS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-ray-authorization",
        "cookie",
        "x-goog-iap-jwt-assertion",
        "x-amzn-oidc-data",
        "x-amzn-oidc-accesstoken",
        "x-amzn-oidc-identity",
    }
)
CREDENTIAL_PREFIXES = ("x-amzn-oidc-", "x-goog-authenticated-user-", "x-goog-iap-")
#: Ray's dashboard login cookie (``AUTHENTICATION_TOKEN_COOKIE_NAME``): never forwarded or set.
RAY_TOKEN_COOKIE = "ray-authentication-token"  # noqa: S105 - a cookie name, not a value
RAY_AUTH_HEADER = "x-ray-authorization"
#: The response headers passed to the browser (lower case); ``location`` only once checked.
RESPONSE_ALLOW = frozenset(
    {
        "content-type",
        "content-length",
        "content-encoding",
        "content-disposition",
        "content-language",
        "content-range",
        "accept-ranges",
        "cache-control",
        "expires",
        "etag",
        "last-modified",
        "vary",
        "age",
        "retry-after",
        "location",
    }
)
#: A Location a browser could read as another host (``/\\evil``, ``/\t/evil``) is not ours to pass.
_UNSAFE_LOCATION = re.compile(r"[\x00-\x20\x7f\\]")


class ForeignRedirectError(ValueError):
    """The head redirected somewhere other than its own dashboard."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def connection_tokens(value: str | None) -> set[str]:
    return {token.strip().lower() for token in (value or "").split(",") if token.strip()}


def is_credential(name: str) -> bool:
    lowered = name.lower()
    return lowered in CREDENTIALS or lowered.startswith(CREDENTIAL_PREFIXES)


def upstream_headers(request: Request, token: str | None = None) -> dict[str, str]:
    """The headers sent to the head: the allow-listed ones, our forwarding headers and
    the cluster's own Ray token (``token``), if it has one. Never a cookie."""
    drop = connection_tokens(request.headers.get("Connection"))
    headers: dict[str, str] = {}
    for name, value in request.headers.items():
        lowered = name.lower()
        if lowered not in REQUEST_ALLOW or lowered in drop or is_credential(lowered):
            continue
        # A repeated header (two Accept lines) is joined, as RFC 9110 §5.3 allows.
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if token is not None:
        headers[RAY_AUTH_HEADER] = f"Bearer {token}"
    # Without this, requests would announce gzip for a client that never asked for it.
    headers.setdefault("Accept-Encoding", "identity")
    # Ray 2.60 redacts runtime-env secrets (env_vars) only in answers to what looks like a
    # browser (a Sec-Fetch-* header, among others): a script reading through the proxy with
    # its Kubernetes token gets the same redacted answers as the Dashboard does.
    headers.setdefault("Sec-Fetch-Mode", "cors")
    # Always ours, never the client's: a client could otherwise tell the dashboard
    # it came from anywhere, over HTTPS, for any host (the Host was checked).
    headers["X-Forwarded-For"] = request.remote_addr or ""
    headers["X-Forwarded-Proto"] = request.scheme
    headers["X-Forwarded-Host"] = request.host
    return headers


def downstream_headers(
    upstream: requests.Response, cluster: LiveCluster, request: Request, target: str
) -> list[tuple[str, str]]:
    """The head's headers the browser may see (``request`` is the browser's, ``target``
    the URL the head was asked for).

    Raises:
        ForeignRedirectError: a ``Location`` outside the cluster's dashboard.
    """
    raw_headers = upstream.raw.headers  # keeps repeated headers apart
    drop = connection_tokens(raw_headers.get("Connection"))
    headers: list[tuple[str, str]] = []
    for name, value in raw_headers.items():
        lowered = name.lower()
        if lowered not in RESPONSE_ALLOW or lowered in drop:
            continue
        if lowered == "location":
            headers.append((name, proxied_location(value, cluster.base_url, target, request.script_root)))
        else:
            headers.append((name, value))
    return headers


def proxied_location(value: str, base_url: str, target: str, script_root: str) -> str:
    """``value`` (a head's ``Location``) as the browser must see it: the same resource
    under the proxied path (``script_root``: ``/sessions/...`` or a path prefix).

    Relative references are resolved against ``target`` (the URL the head was asked for)
    first, so ``../x`` cannot climb out of the cluster either.

    Raises:
        ForeignRedirectError: another host, another scheme, or a path outside ``base_url``.
    """
    if not value or _UNSAFE_LOCATION.search(value):
        raise ForeignRedirectError(value)
    resolved = urlsplit(urljoin(target, value))
    base = urlsplit(base_url)
    if (resolved.scheme.lower(), resolved.netloc.lower()) != (base.scheme.lower(), base.netloc.lower()):
        raise ForeignRedirectError(value)
    base_path = base.path.rstrip("/")
    path = resolved.path or "/"
    if base_path:
        if path != base_path and not path.startswith(base_path + "/"):
            raise ForeignRedirectError(value)
        path = path[len(base_path) :] or "/"
    rewritten = script_root.rstrip("/") + path
    if rewritten.startswith("//"):  # a browser reads "//host/..." as another host
        raise ForeignRedirectError(value)
    if resolved.query:
        rewritten += f"?{resolved.query}"
    if resolved.fragment:
        rewritten += f"#{resolved.fragment}"
    return rewritten

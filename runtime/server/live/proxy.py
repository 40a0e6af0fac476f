"""Reverse proxy to a live cluster's head dashboard (``session_name=live``).

Read-only: access to a namespace is granted as "may read" (``get rayclusters``),
so only ``GET`` and ``HEAD`` are forwarded. Every other method -- job submission
(``POST /api/jobs/``, i.e. code execution on the cluster), job stop and delete,
package uploads, Serve deployments -- is refused with ``403`` before the cluster
is looked up, its token read or any connection opened; ``OPTIONS`` is answered
here (``204``, ``Allow: GET, HEAD, OPTIONS``; the Dashboard is same-origin and
needs no preflight) and never forwarded. The unmodified Ray Dashboard (2.60)
reads with ``GET`` only; its one other request, ``POST /api/authenticate`` (the
token login dialog, shown only after a ``401``/``403``), cannot succeed through
the proxy anyway (credentials never pass, see below). Changing a live cluster
takes Ray's own dashboard or Jobs API with the caller's own credentials.

Better than the reference otherwise: every path is forwarded, not only the
routes it knows; bodies stream both ways (``stream=True`` + a generator, nothing
is buffered); the target comes from the live directory, never from a cookie;
hop-by-hop and client-sent forwarding headers are dropped; failures are JSON
naming the cluster and the URL tried.

Credentials never pass: request headers are an allow-list and no cookie is
forwarded (:mod:`runtime.server.live.headers`), so the history server's login
(``Authorization``, the OIDC login and state cookies), a front door's identity
headers and Ray's own ``ray-authentication-token`` cookie never reach the head,
which runs tenant code. A cluster with Ray token auth (KubeRay ``authOptions.mode:
token``) gets ``x-ray-authorization: Bearer <token>`` from its Secret
(:mod:`runtime.server.live.tokens`); when that cannot be read the request is not
sent (503 naming the Secret and the grant it needs).

The head's answer cannot act on the history server's origin: response headers are
an allow-list (no ``Set-Cookie``, no ``WWW-Authenticate``, no CORS grant), a
``Location`` outside the cluster's dashboard is refused (502 JSON), and every
proxied answer carries ``Content-Security-Policy: sandbox`` and
``X-Content-Type-Options: nosniff``, so HTML or SVG the head serves runs no script
as the history server. The Dashboard's own page and scripts are never proxied: the
history server serves them from the Ray wheel's build (:mod:`runtime.server.views.ui`);
only API answers, logs, profiles and tracebacks come from the head.

Every other request has a total deadline of :data:`TOTAL_FACTOR` x
``--proxy-timeout`` (headers and body; a head trickling a byte at a time never
trips a read timeout) and at most :func:`cluster_limit` requests, log streams
included, run per cluster and worker at once (503 JSON with ``Retry-After`` beyond),
so one slow head cannot hold every thread (:mod:`runtime.server.live.bounds`).

Log streams (``/api/v0/logs/stream``, job log tails) wait for the upstream's
headers within the same deadline, then have no read timeout (a quiet log sends
nothing for minutes); they are capped per worker and end when their client hangs
up (:mod:`runtime.server.live.streams`).

Not supported: WebSocket upgrades (gthread workers cannot hold them; Ray's own
``--proxy-server-url`` forwards them as plain GETs too).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

import requests
import urllib3
from flask import Flask, Request, Response, current_app, g

from runtime.server.config import ServerConfig
from runtime.server.errors import json_error
from runtime.server.live.bounds import ClusterSlots, Deadlines, Watch, track_connections
from runtime.server.live.discovery import LiveAuthError, LiveCluster, LiveDirectory, LiveDiscoveryError
from runtime.server.live.headers import ForeignRedirectError, downstream_headers, upstream_headers
from runtime.server.live.streams import DisconnectWatcher, StreamSlots, shutdown_quietly
from runtime.server.selection import Selection
from runtime.server.upstream_session import pooled_session

if TYPE_CHECKING:  # imported by the app after fork (multi-process metrics mode)
    from prometheus_client import Counter

logger = logging.getLogger(__name__)

#: Log streams stay open as long as the log grows: no read timeout once headers came.
STREAM_PATHS = (re.compile(r"^/api/v0/logs/stream/?$"), re.compile(r"^/api/jobs/[^/]+/logs/tail/?$"))
CHUNK = 64 * 1024
#: What is forwarded: the authorizer's grant is "may read" (``get rayclusters``).
READ_METHODS = frozenset({"GET", "HEAD"})
#: What the catch-all route accepts, so that a write gets our JSON 403 (naming the
#: method) rather than werkzeug's bare 405; only READ_METHODS are ever forwarded.
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
ALLOW = "GET, HEAD, OPTIONS"
#: A proxied request (headers and body) ends within this many ``--proxy-timeout``.
TOTAL_FACTOR = 2.0
#: Set on every answer relayed from a head: its HTML/SVG runs no script in our origin.
SANDBOX = "sandbox"
_EXTENSION = "historyserver.proxy"
_STREAMS_EXTENSION = "historyserver.proxy.streams"
_BOUNDS_EXTENSION = "historyserver.proxy.bounds"
_TRACKED = "_historyserver_tracked"
_session_lock = threading.Lock()


def _http_session(app: Flask, pool_size: int) -> requests.Session:
    """Connections to a head dashboard are reused across the ~10 requests of a Dashboard page;
    their pools tell :class:`~runtime.server.live.bounds.Watch` which connection a request uses."""
    found = app.extensions.get(_EXTENSION)
    if isinstance(found, requests.Session) and getattr(found, _TRACKED, False):
        return found
    with _session_lock:
        session = pooled_session(app, _EXTENSION, pool_connections=16, pool_maxsize=max(10, pool_size))
        if not getattr(session, _TRACKED, False):
            track_connections(session)
            setattr(session, _TRACKED, True)
        return session


def cluster_limit(threads: int) -> int:
    """Requests per cluster and worker at once, log streams included: three quarters of the threads
    (6 of 8: a browser opens at most 6 connections per host), so a slow head always
    leaves threads for probes and other clusters."""
    return max(1, threads * 3 // 4)


def _bounds(app: Flask, threads: int) -> tuple[ClusterSlots, Deadlines]:
    found = app.extensions.get(_BOUNDS_EXTENSION)
    if found is None:
        with _session_lock:
            found = app.extensions.setdefault(_BOUNDS_EXTENSION, (ClusterSlots(cluster_limit(threads)), Deadlines()))
    slots, deadlines = found
    return slots, deadlines


def _stream_bounds(app: Flask, limit: int) -> tuple[StreamSlots, DisconnectWatcher]:
    found = app.extensions.get(_STREAMS_EXTENSION)
    if found is None:
        with _session_lock:
            found = app.extensions.setdefault(_STREAMS_EXTENSION, (StreamSlots(limit), DisconnectWatcher()))
    slots, watcher = found
    return slots, watcher


def _client_socket(request: Request) -> Any:
    """The client's socket under gunicorn or werkzeug (None in tests without one)."""
    return request.environ.get("gunicorn.socket") or request.environ.get("werkzeug.socket")


def _upstream_socket(upstream: requests.Response) -> Any:
    return getattr(getattr(upstream.raw, "connection", None), "sock", None)


def proxy_request(
    selection: Selection, request: Request, *, live: LiveDirectory, config: ServerConfig, outcomes: Counter
) -> Response:
    """Forward ``request`` to the live cluster ``selection`` names; stream the answer.

    ``live`` supplies the cluster's URL, ``config`` the timeout and pool sizes, and
    ``outcomes`` is the labelled counter every outcome is counted in (the app's
    ``historyserver_live_proxy_requests_total``)."""
    metrics = outcomes
    label = f"{selection.namespace}/{selection.name}"
    if request.method not in READ_METHODS:
        # Before discovery, the Secret and any connection: a write never carries the token.
        return _not_forwarded(request, label, metrics)
    found = _resolve(selection, request, live, metrics)
    if isinstance(found, Response):
        return found
    cluster, token = found

    target = cluster.base_url + _path_and_query(request)
    streaming = any(p.match(request.path) for p in STREAM_PATHS)
    budget = TOTAL_FACTOR * config.proxy_timeout
    held = _hold_slot(streaming, cluster, config, metrics, label=label, budget=budget)
    if isinstance(held, Response):
        return held
    release = held
    _, deadlines = _bounds(current_app, config.threads)
    watch = Watch()
    armed: int | None = deadlines.arm(time.monotonic() + budget, watch.expire)
    try:
        with watch:
            upstream = _send(config, outcomes, request, target, label, token=token, watch=watch, budget=budget)
    except BaseException:
        deadlines.disarm(armed)
        release()
        raise
    if isinstance(upstream, Response):  # an error answer
        deadlines.disarm(armed)
        release()
        return upstream
    if streaming:
        deadlines.disarm(armed)  # headers came in time; a stream then runs as long as its log grows
        armed = None
    try:
        headers = downstream_headers(upstream, cluster, request, target)
    except ForeignRedirectError as exc:
        deadlines.disarm(armed)
        upstream.close()
        release()
        metrics.labels("foreign_redirect").inc()
        logger.warning("live cluster %s: %s redirected off the cluster to %r: refused", label, target, exc.location)
        return json_error(
            502,
            f"live cluster {label}: its dashboard redirected {request.path} to {exc.location[:200]!r}, outside the "
            "cluster; the history server does not forward such redirects",
        )

    metrics.labels("upstream_5xx" if upstream.status_code >= 500 else "forwarded").inc()
    if token is not None and upstream.status_code in (401, 403):
        _token_refused(live, cluster)
    relay = _Relay(upstream, label, target, outcomes)
    relay.bound(release, deadlines, armed, watch, budget)
    if streaming:
        _slots, watcher = _stream_bounds(current_app, config.live_stream_limit)
        relay.stream_forever(watcher, _client_socket(request))
    response = Response(relay, status=upstream.status_code, headers=headers, direct_passthrough=True)
    # Whatever the head serves (HTML, SVG, a JS file) runs no script in our origin.
    response.headers["Content-Security-Policy"] = SANDBOX
    response.headers["X-Content-Type-Options"] = "nosniff"
    if streaming:
        response.headers["X-Accel-Buffering"] = "no"  # ask nginx-style ingresses not to buffer
    return response


def _hold_slot(
    streaming: bool, cluster: LiveCluster, config: ServerConfig, metrics: Counter, *, label: str, budget: float
) -> Callable[[], None] | Response:
    """Slots for this request (one of its cluster's; a stream also one of the streams'):
    the function that gives them back, or our 503 when one is not free. A stream counts
    against its cluster too, so streams and requests of one slow head together never take
    more than the cluster's share of the threads."""
    cluster_slot = _hold_cluster_slot(cluster, config, metrics, label=label, budget=budget)
    if isinstance(cluster_slot, Response) or not streaming:
        return cluster_slot
    slots, _watcher = _stream_bounds(current_app, config.live_stream_limit)
    if not slots.try_acquire():
        cluster_slot()
        metrics.labels("too_many_streams").inc()
        logger.warning("live cluster %s: refused a log stream, %d already open", label, slots.limit)
        return json_error(
            503,
            f"too many live log streams at once ({slots.limit} per server process, --max-live-streams); "
            "close one or retry shortly",
            {"Retry-After": "5"},
        )

    def release_both() -> None:
        slots.release()
        cluster_slot()

    return _once(release_both)


def _hold_cluster_slot(
    cluster: LiveCluster, config: ServerConfig, metrics: Counter, *, label: str, budget: float
) -> Callable[[], None] | Response:
    """One of the cluster's slots (3/4 of the threads): the function that gives it back, or our 503."""
    per_cluster, _deadlines = _bounds(current_app, config.threads)
    if not per_cluster.try_acquire(cluster.key):
        metrics.labels("too_many_requests").inc()
        logger.warning(
            "live cluster %s: refused a request, %d already waiting for its dashboard", label, per_cluster.limit
        )
        return json_error(
            503,
            f"live cluster {label}: {per_cluster.limit} requests to its dashboard (log streams included) are "
            f"already in flight in this server process (a request ends within {budget:g} s); retry shortly",
            {"Retry-After": "2"},
        )
    return _once(lambda: per_cluster.release(cluster.key))


def _once(release: Callable[[], None]) -> Callable[[], None]:
    """``release`` that does something only the first time it is called."""
    done = threading.Lock()

    def run() -> None:
        if done.acquire(blocking=False):
            release()

    return run


def _not_forwarded(request: Request, label: str, metrics: Counter) -> Response:
    """Our answer to anything but a read: OPTIONS is answered here, the rest is 403."""
    if request.method == "OPTIONS":
        metrics.labels("options").inc()
        response = Response(status=204)
        response.headers["Allow"] = ALLOW
        return response
    metrics.labels("read_only").inc()
    logger.info("live cluster %s: refused %s %r (the live proxy is read-only)", label, request.method, request.path)
    return json_error(
        403,
        f"the history server proxies live clusters read-only: {request.method} {request.path} is not forwarded "
        f"to live cluster {label} (only GET and HEAD are); use Ray's own dashboard or Jobs API with your own "
        "credentials to change a cluster",
        {"Allow": ALLOW},
    )


def _resolve(
    selection: Selection, request: Request, live: LiveDirectory, metrics: Counter
) -> tuple[LiveCluster, str | None] | Response:
    """The ready cluster ``selection`` names and the Ray token it needs, or our error answer.

    Fail closed: a token-auth cluster whose token cannot be read gets no request."""
    label = f"{selection.namespace}/{selection.name}"
    try:
        cluster = live.get(selection.namespace, selection.name)
    except LiveDiscoveryError as exc:
        logger.warning("live cluster %s: discovery failed: %s", label, exc)
        metrics.labels("discovery_error").inc()
        return json_error(503, f"cannot look up live cluster {label}: {exc}", {"Retry-After": "5"})
    if cluster is None:
        metrics.labels("cluster_gone").inc()
        return json_error(404, f"live cluster {label} no longer exists; its stored sessions are listed by /clusters")
    if not cluster.ready:
        metrics.labels("not_ready").inc()
        return json_error(503, f"RayCluster {label}: head service not ready", {"Retry-After": "5"})
    try:
        return cluster, live.auth_token(cluster, _caller_kubernetes_token(request))
    except LiveAuthError as exc:
        metrics.labels("token_unavailable").inc()
        return json_error(503, f"live cluster {label} uses Ray token auth: {exc}", {"Retry-After": "5"})


def _caller_kubernetes_token(request: Request) -> str | None:
    """The bearer token this request was authenticated with by TokenReview, if it was."""
    identity = g.get("identity")
    if identity is None or identity.via != "kubernetes":
        return None
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _token_refused(live: LiveDirectory, cluster: LiveCluster) -> None:
    """The cluster refused our token: read the Secret again next time (rotated?)."""
    auth = cluster.token_auth
    if live.token_source is not None and auth is not None and not auth.kubernetes_delegated:
        logger.warning("live cluster %s refused the token from Secret %s", cluster.key, auth.secret)
        live.token_source.forget(auth)


def _send(
    config: ServerConfig,
    metrics: Counter,
    request: Request,
    target: str,
    label: str,
    *,
    token: str | None,
    watch: Watch,
    budget: float,
) -> requests.Response | Response:
    """The upstream's answer once its headers arrived, or our error answer (``watch``
    tells whether the total deadline, ``budget`` seconds, cut it short)."""
    timeout = config.proxy_timeout
    session = _http_session(current_app, config.threads)
    try:
        # The read timeout also bounds the wait for the headers: an upstream that
        # accepts and never answers cannot hold a thread for longer. The total
        # deadline (the watch) ends one that trickles its headers.
        # Straight to the adapter: Session.send runs its redirect logic even without
        # following redirects, and that reads a 3xx's whole body (unbounded) before we
        # could relay it (we then sent its Content-Length with no body).
        headers, body = upstream_headers(request, token), _request_body(request)
        prepared = session.prepare_request(requests.Request(request.method, target, headers=headers, data=body))
        upstream = session.get_adapter(target).send(prepared, stream=True, timeout=(min(10.0, timeout), timeout))
    except requests.RequestException as exc:
        if not watch.cut:
            return _send_failed(metrics, request, target, label, timeout=timeout, exc=exc)
        upstream = None
    if upstream is None or watch.cut:
        if upstream is not None:
            upstream.close()
        metrics.labels("upstream_timeout").inc()
        logger.warning("live cluster %s: %s %s: no answer within %g s", label, request.method, target, budget)
        return json_error(504, f"live cluster {label}: no complete answer from {target} within {budget:g} s")
    return upstream


def _send_failed(
    metrics: Counter, request: Request, target: str, label: str, *, timeout: float, exc: requests.RequestException
) -> Response:
    if isinstance(exc, requests.Timeout):
        metrics.labels("upstream_timeout").inc()
        logger.warning("live cluster %s: %s %s timed out: %s", label, request.method, target, exc)
        return json_error(504, f"live cluster {label}: no answer from {target} within {timeout:g} s")
    metrics.labels("upstream_error").inc()
    logger.warning("live cluster %s: %s %s failed: %s", label, request.method, target, exc)
    return json_error(502, f"live cluster {label}: cannot reach its dashboard at {target}: {_reason(exc)}")


def _path_and_query(request: Request) -> str:
    """The original path and query, as the client encoded them when we know it."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or ""
    # Only an origin-form target ("/path?q") is used verbatim; it is appended to the
    # cluster's base URL, so it cannot change the host even if it starts with "//".
    if isinstance(raw, str) and raw.startswith("/"):
        return raw
    query = request.query_string.decode("latin-1")
    return request.script_root + request.path + (f"?{query}" if query else "")


class _SizedStream:
    """The request body with a known length: requests then sends Content-Length
    (not chunked) while urllib3 still reads it piecewise."""

    def __init__(self, stream: IO[bytes], length: int) -> None:
        self.stream, self.length = stream, length

    def __len__(self) -> int:
        return self.length

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size)


def _request_body(request: Request) -> _SizedStream | IO[bytes] | None:
    length = request.content_length
    if length:
        return _SizedStream(request.stream, length)
    if "chunked" in request.headers.get("Transfer-Encoding", "").lower():
        return request.stream  # length unknown: requests sends it chunked
    return None


class DeadlineExceededError(OSError):
    """A relay ran past its total deadline (the head sent too slowly)."""


class _Relay:
    """The upstream body as it arrives, still encoded (Content-Encoding and
    Content-Length are passed through unchanged, so the bytes must be too).

    The WSGI server calls ``close()`` when the answer is done or the client went
    away: a fully read connection goes back to the pool, anything else is closed;
    the request's slot is given back and its deadline disarmed.
    """

    def __init__(self, upstream: requests.Response, label: str, target: str, outcomes: Counter) -> None:
        self.upstream, self.label, self.target, self.outcomes = upstream, label, target, outcomes
        self.complete = False
        self.client_gone = False
        self._release: Callable[[], None] | None = None
        self._deadlines: Deadlines | None = None
        self._armed: int | None = None
        self._deadline = Watch()
        self._budget = 0.0
        self._watcher: DisconnectWatcher | None = None
        self._disconnect: int | None = None
        self._sock: Any = None

    def bound(
        self, release: Callable[[], None], deadlines: Deadlines, armed: int | None, deadline: Watch, budget: float
    ) -> None:
        """Hold the request's slot (``release`` gives it back) and its deadline (``armed``,
        None for a stream: none once its headers came) until :meth:`close`."""
        self._release, self._deadlines, self._armed, self._deadline, self._budget = (
            release,
            deadlines,
            armed,
            deadline,
            budget,
        )

    def stream_forever(self, watcher: DisconnectWatcher, client: Any) -> None:
        """A log stream: no read timeout from now on, and the upstream is cut when the
        client hangs up."""
        self._watcher = watcher
        self._sock = _upstream_socket(self.upstream)
        if self._sock is not None:
            self._sock.settimeout(None)  # a quiet log sends nothing for minutes
        if client is not None:
            self._disconnect = watcher.watch(client, self._client_left)

    def _client_left(self) -> None:
        self.client_gone = True
        shutdown_quietly(self._sock)  # the request thread's blocking read returns

    def _chunks(self) -> Iterator[bytes]:
        raw = self.upstream.raw
        if raw.chunked:
            yield from raw.stream(CHUNK, decode_content=False)
        else:
            while chunk := raw.read1(CHUNK, decode_content=False):
                yield chunk

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._chunks():
                if self._deadline.cut:
                    break
                yield chunk
            if self._deadline.cut:
                raise DeadlineExceededError(f"no complete answer within {self._budget:g} s")
            self.complete = True
        except (urllib3.exceptions.HTTPError, requests.RequestException, OSError) as exc:
            if self.client_gone:
                logger.info("live cluster %s: client left, stream from %s closed", self.label, self.target)
                return
            if self._deadline.cut:
                self.outcomes.labels("upstream_timeout").inc()
                logger.warning(
                    "live cluster %s: %s sent too slowly, cut off after %g s", self.label, self.target, self._budget
                )
                raise DeadlineExceededError(f"no complete answer within {self._budget:g} s") from exc
            self.outcomes.labels("stream_error").inc()
            logger.warning("live cluster %s: stream from %s broke off: %s", self.label, self.target, exc)
            # Re-raised so the server aborts the connection: ending normally would
            # let a truncated body look complete (a terminating chunk).
            raise

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.unwatch(self._disconnect)  # after this, _client_left has run or never will
            self._watcher = None
        if self._deadlines is not None:
            self._deadlines.disarm(self._armed)  # after this, the deadline has fired or never will
            self._deadlines = None
        if self.complete and not self.client_gone and not self._deadline.cut:
            self.upstream.raw.release_conn()
        else:
            self.upstream.close()
        if self._release is not None:
            self._release()
            self._release = None


def _reason(exc: requests.RequestException) -> str:
    """The useful tail of a requests error ("Connection refused", a DNS failure)."""
    text = str(exc)
    marker = "Caused by "
    if marker in text:
        text = text.split(marker, 1)[1].rstrip(")")
    return text[-300:]

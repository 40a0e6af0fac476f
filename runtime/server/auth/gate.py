"""The Flask side of access control: who is calling (every request) and may they read this namespace.

* ``before_request`` establishes ``g.identity`` on every request except the open probes
  (``/livez``, ``/readz``, ``/metrics``: they reveal no session data), or answers 401
  (503 when the authenticator could not be asked).
* Then, in the same hook, the namespace the request reads is authorized: the
  ``<namespace>`` of the route (``/enter_cluster/...``) or, for every Dashboard route and
  the live proxy, the namespace the selection cookies name. One place, so a route added
  later is checked without doing anything. Listings (``/clusters``,
  :data:`FILTERED_ENDPOINTS`) filter with :func:`readable_namespaces` instead: the
  selection cookie of another namespace (a stale one, after access was revoked) must not
  refuse the picker's list, which reads no namespace the caller may not read anyway. Each
  decision is one audit line.
* An identity from an identity provider (OIDC, IAP, ALB: anything but a Kubernetes
  TokenReview) goes through :class:`ProviderNames` first: ``system:`` names are refused
  (403) and ``--oidc-username-prefix`` / ``--oidc-groups-prefix`` are applied, so every
  authorizer sees the prefixed names.
* ``after_request`` fails closed: a successful answer from a route that is neither
  namespace-free nor made a decision is replaced by a 503, so a route added later
  without a check can never leak. The one exception is an answer marked with
  :func:`no_data_response` (a guard's redirect, answered before any view ran).

Selection cookies only *select* a session; the namespace they name is authorized on
every request like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from flask import Blueprint, Flask, Response, g, jsonify, request

from runtime.server.auth.model import (
    ANONYMOUS,
    VIA_KUBERNETES,
    AuthError,
    AuthUnavailableError,
    ForbiddenError,
    Identity,
    UnauthenticatedError,
)
from runtime.server.auth.provider_names import ProviderNames

logger = logging.getLogger(__name__)
audit_logger = logging.getLogger("runtime.server.audit")

EXTENSION = "historyserver.auth"
#: Probes and metrics: open by design, no session data.
OPEN_ENDPOINTS = frozenset({"health.livez", "health.readz", "health.metrics"})
#: Routes that serve no namespace's data (the UI's files, the picker's page, login/logout).
NAMESPACE_FREE_ENDPOINTS = frozenset(
    {
        "ui.index",
        "ui.static_file",
        "clusters.select_cluster",
        "clusters.select_cluster_js",
        "clusters.select_cluster_css",
        "auth.login",
        "auth.callback",
        "auth.logout",
    }
)
#: Listings that read many namespaces and filter them with :func:`readable_namespaces`:
#: authenticated, never authorized by the selection cookie's namespace, and still
#: subject to the fail-closed check (they must make that decision themselves).
FILTERED_ENDPOINTS = frozenset({"clusters.list_clusters"})


class Authenticator(Protocol):
    """One way to establish an identity from a request."""

    name: str

    def identify(self) -> Identity | None:
        """The caller, None when this request carries none of this authenticator's credentials.

        Raises:
            UnauthenticatedError: credentials of this kind are present but invalid.
            AuthUnavailableError: the authenticator could not be asked.
        """


class Authorizer(Protocol):
    def may_read(self, who: Identity, namespace: str) -> bool:
        """Whether ``who`` may read ``namespace``'s history; AuthUnavailableError when it cannot tell."""


class AllowAll:
    """``--authz none`` (only with ``--auth none``)."""

    def may_read(self, who: Identity, namespace: str) -> bool:
        return True


@dataclass
class AccessControl:
    """What ``create_app`` installs: the authenticators in order, the authorizer, the
    login URL browsers without credentials are sent to (OIDC), if any, with the function
    that redirects them there, the blueprints serving login / logout, and what is done to
    identity-provider names before they are authorized."""

    authenticators: tuple[Authenticator, ...]
    authorizer: Authorizer
    login_url: str | None = None
    redirect: Callable[[str], Response] | None = None
    blueprints: tuple[Blueprint, ...] = ()
    provider_names: ProviderNames = field(default_factory=ProviderNames)

    @property
    def enabled(self) -> bool:
        return bool(self.authenticators)


def access_control() -> AccessControl:
    from flask import current_app

    found: AccessControl = current_app.extensions[EXTENSION]
    return found


def _audit(who: Identity, namespace: str, allowed: bool, cluster: str, session: str) -> None:
    fields = {
        "identity": who.user,
        "via": who.via,
        "namespace": namespace,
        "cluster": cluster,
        "session": session,
        "route": request.path,
        "decision": "allow" if allowed else "deny",
    }
    audit_logger.info(
        "access %s %s ns=%s cluster=%s session=%s route=%s",
        fields["decision"],
        who.user,
        namespace,
        cluster,
        session,
        request.path,
        extra={"audit": fields},
    )


def authorize(namespace: str, cluster: str = "", session: str = "") -> None:
    """Allow the request to read ``namespace``, or raise :class:`ForbiddenError` / :class:`AuthUnavailableError`."""
    control = access_control()
    who: Identity = g.get("identity", ANONYMOUS)
    allowed = control.authorizer.may_read(who, namespace)
    g.auth_decided = True
    if control.enabled:
        _audit(who, namespace, allowed, cluster, session)
    if not allowed:
        raise ForbiddenError(f"{who.user} may not read namespace {namespace}")


def readable_namespaces(namespaces: Iterable[str]) -> set[str]:
    """The subset of ``namespaces`` the caller may read (each decided once, each audited)."""
    control = access_control()
    who: Identity = g.get("identity", ANONYMOUS)
    g.auth_decided = True
    allowed = set()
    for namespace in sorted(set(namespaces)):
        ok = control.authorizer.may_read(who, namespace)
        if control.enabled:
            _audit(who, namespace, ok, "*", "*")
        if ok:
            allowed.add(namespace)
    return allowed


def _refusal(failure: AuthError) -> Response:
    response = jsonify({"result": False, "msg": failure.message, "data": {}})
    response.status_code = failure.status
    if isinstance(failure, AuthUnavailableError):
        response.headers["Retry-After"] = str(failure.retry_after)
    if isinstance(failure, UnauthenticatedError):
        response.headers["WWW-Authenticate"] = 'Bearer realm="ray-history"'
    response.headers["Cache-Control"] = "no-store"
    return response


def _wants_html() -> bool:
    accept = request.accept_mimetypes
    return request.method == "GET" and accept.best_match(["text/html", "application/json"]) == "text/html"


def install(app: Flask, control: AccessControl, redirect: Callable[[str], Response] | None = None) -> None:
    """Register the hooks and ``control.blueprints``; ``redirect`` (default ``control.redirect``)
    sends a browser to ``control.login_url`` (OIDC)."""
    app.extensions[EXTENSION] = control
    redirect = redirect or control.redirect
    for blueprint in control.blueprints:
        app.register_blueprint(blueprint)

    @app.errorhandler(AuthError)
    def _refuse(failure: AuthError) -> Response:
        return _refusal(failure)

    if not control.enabled:
        g_default = ANONYMOUS

        @app.before_request
        def _anonymous() -> None:
            g.identity = g_default

        return

    @app.before_request
    def _authenticate() -> Response | None:
        g.auth_decided = False
        if request.endpoint in OPEN_ENDPOINTS or request.endpoint in ("auth.login", "auth.callback", "auth.logout"):
            return None
        for authenticator in control.authenticators:
            found = authenticator.identify()
            if found is not None:
                # Only TokenReview names are Kubernetes' own; every other name came from an
                # identity provider and must not pass for a Kubernetes user (system:masters).
                g.identity = found if found.via == VIA_KUBERNETES else control.provider_names.apply(found)
                break
        else:
            if control.login_url and redirect is not None and _wants_html():
                g.auth_no_data = True  # the redirect to the login page carries no data
                return redirect(control.login_url)
            raise UnauthenticatedError("authentication required: send Authorization: Bearer <token> or log in")
        if request.endpoint not in NAMESPACE_FREE_ENDPOINTS and not _filters_itself():
            target = requested_namespace()
            if target is not None:
                authorize(*target)
        return None

    @app.after_request
    def _fail_closed(response: Response) -> Response:
        endpoint = request.endpoint
        if (
            response.status_code < 400
            and endpoint not in OPEN_ENDPOINTS
            and endpoint not in NAMESPACE_FREE_ENDPOINTS
            and not g.get("auth_decided", False)
            and not g.get("auth_no_data", False)
            and g.get("auth_no_data_response") is not response
        ):
            logger.error("route %s answered without an access decision: refused", endpoint)
            return _refusal(AuthUnavailableError("internal error: this route made no access decision"))
        return response


def _filters_itself() -> bool:
    """A listing (``/clusters``) reached without a namespace in its route: it filters.

    A namespace in the route (``view_args``) is still authorized; only the selection
    cookies are ignored, since they select a session and a listing reads none."""
    return request.endpoint in FILTERED_ENDPOINTS and not isinstance((request.view_args or {}).get("namespace"), str)


def requested_namespace() -> tuple[str, str, str] | None:
    """``(namespace, cluster, session)`` this request reads, from the route or the selection
    cookies; None when it names none (the view then answers 4xx, or lists with a filter)."""
    from runtime.server.selection import COOKIE_CLUSTER, COOKIE_NAMESPACE, COOKIE_SESSION
    from runtime.storage.errors import InvalidKeyError
    from runtime.storage.layout import validate_namespace

    args = request.view_args or {}
    if isinstance(args.get("namespace"), str):
        namespace, cluster, session = args["namespace"], str(args.get("name", "")), str(args.get("session", ""))
    else:
        cookies = request.cookies
        namespace = cookies.get(COOKIE_NAMESPACE, "")
        cluster, session = cookies.get(COOKIE_CLUSTER, ""), cookies.get(COOKIE_SESSION, "")
    if not namespace:
        return None
    try:
        validate_namespace(namespace)
    except InvalidKeyError:
        return None  # not a namespace: the view refuses it (400) before reading anything
    return namespace, cluster, session


def no_namespace_data() -> None:
    """Mark this answer as carrying no namespace's data (a UI file from the catch-all route)."""
    g.auth_no_data = True


def no_data_response(response: Response) -> Response:
    """Mark ``response``, built before any view ran (a guard's redirect), as carrying no data.

    Only this very response object is exempt from the fail-closed check: should a later hook
    replace it, the replacement is checked like any other answer.
    """
    g.auth_no_data_response = response
    return response

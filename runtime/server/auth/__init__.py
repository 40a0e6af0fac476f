"""Access control for a shared history server: who is calling, and which namespaces they may read.

Public surface: :func:`parse_auth` (flags -> :class:`AuthConfig`), :func:`build_access_control`
(config -> the hooks' :class:`AccessControl`), :func:`install` (register the hooks on an app),
and for views :func:`authorize` / :func:`readable_namespaces` / :func:`no_namespace_data`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.server.auth.bearer import BearerTokenAuthenticator
from runtime.server.auth.config import AUTH_MODES, AUTHZ_MODES, AuthConfig, parse_auth
from runtime.server.auth.front_door import FrontDoorSettings, front_door_authenticator, parse_front_door
from runtime.server.auth.gate import (
    AccessControl,
    AllowAll,
    Authenticator,
    Authorizer,
    authorize,
    install,
    no_data_response,
    no_namespace_data,
    readable_namespaces,
)
from runtime.server.auth.kubernetes import KubernetesReviews, ResourceCheck
from runtime.server.auth.model import (
    ANONYMOUS,
    AuthError,
    AuthUnavailableError,
    ForbiddenError,
    Identity,
    UnauthenticatedError,
)
from runtime.server.auth.oidc_settings import OidcSettings, parse_oidc
from runtime.server.auth.provider_names import ProviderNames
from runtime.server.auth.static_policy import StaticPolicy

__all__ = [
    "ANONYMOUS",
    "AUTHZ_MODES",
    "AUTH_MODES",
    "AccessControl",
    "AuthConfig",
    "AuthError",
    "AuthUnavailableError",
    "ForbiddenError",
    "FrontDoorSettings",
    "Identity",
    "OidcSettings",
    "ProviderNames",
    "ResourceCheck",
    "UnauthenticatedError",
    "authorize",
    "build_access_control",
    "install",
    "no_data_response",
    "no_namespace_data",
    "parse_auth",
    "parse_front_door",
    "parse_oidc",
    "readable_namespaces",
]


def build_access_control(
    config: AuthConfig,
    kubernetes_client: Callable[[], Any] | None = None,
    oidc: OidcSettings | None = None,
    front_door: FrontDoorSettings | None = None,
) -> AccessControl:
    """The authenticators and the authorizer ``config`` asks for.

    ``kubernetes_client`` builds the API client (the one RayCluster discovery uses); it is
    called once, only when ``kubernetes`` authentication or authorization is on. ``oidc``
    (from :func:`parse_oidc`) is required with ``--auth oidc``; the result then carries the
    login URL, its redirect and the ``auth`` blueprint, which :func:`install` registers.
    ``front_door`` (from :func:`parse_front_door`) is required with ``--auth trusted-header``
    and refused without it.

    Raises:
        ValueError: naming the flag, when a mode cannot be set up.
    """
    if front_door is not None and "trusted-header" not in config.modes:
        raise ValueError("--trusted-header: only used with --auth trusted-header")
    if not config.enabled:
        return AccessControl(authenticators=(), authorizer=AllowAll())
    reviews: KubernetesReviews | None = None

    def kube_reviews(flag: str) -> KubernetesReviews:
        nonlocal reviews
        if reviews is None:
            if kubernetes_client is None:
                raise ValueError(f"{flag}: needs the Kubernetes API (--kubernetes in-cluster or kubeconfig)")
            reviews = KubernetesReviews(kubernetes_client(), config.resource)
        return reviews

    authenticators: list[Authenticator] = []
    login: dict[str, Any] = {}
    for mode in config.modes:
        if mode == "kubernetes":
            authenticators.append(BearerTokenAuthenticator(kube_reviews("--auth kubernetes")))
        elif mode == "trusted-header":
            authenticators.append(front_door_authenticator(front_door))
        elif mode == "oidc":
            if oidc is None:
                raise ValueError("--auth oidc: needs --oidc-issuer, --oidc-client-id, --oidc-client-secret-file ...")
            from runtime.server.auth.oidc import LOGIN_URL, login_redirect, oidc_access

            authenticator, blueprint = oidc_access(oidc)
            authenticators.append(authenticator)
            login = {"login_url": LOGIN_URL, "redirect": login_redirect, "blueprints": (blueprint,)}
    authorizer: Authorizer
    if config.authz == "kubernetes":
        authorizer = kube_reviews("--authz kubernetes")
    elif config.authz == "static" and config.policy_file is not None:
        authorizer = StaticPolicy(config.policy_file)
    else:  # parse_auth never lets an authenticated server through without an authorizer
        raise ValueError(f"--authz: {config.authz!r} cannot be used with --auth {','.join(config.modes)}")
    return AccessControl(
        authenticators=tuple(authenticators), authorizer=authorizer, provider_names=config.provider_names, **login
    )

"""The ``access`` section of a stack: the history server's authentication and authorization.

::

    ray-history-server:access:
      auth: [oidc, kubernetes]     # default: kubernetes, plus oidc when oidc is set
      authz: kubernetes            # or static (with policy)
      authzResource: get:rayclusters.ray.io
      policy: |                    # authz static: namespaces -> users / groups
        namespaces: {team-a: {groups: [team-a-devs]}}
      oidc: {issuer: ..., clientId: ..., clientSecretName: ..., redirectUrl: ..., groupsClaim: groups}
      trustedHeader: {kind: iap}   # or alb; iapAudience / albArn (derived when the stack makes the ALB)
      ingressFrom: [monitoring]    # a NetworkPolicy admits these namespaces (+ the front door's sources)
      readRayTokens: false         # true: get on Secrets in the workload namespaces (live clusters with Ray token auth)
      ingress:                     # the front door (TLS: the browser's cookies are Secure)
        host: ray-history.example.com
        flavour: gke               # default: the cloud's (gke, alb, app-routing); generic with className
        staticIpName: ...          # gke; also iapOauthSecretName, tlsSecretName
        # alb: certificateArn, scheme, loadBalancerName, albOidc{...}; app-routing: keyVaultCertificateUri
        # generic: className, tlsSecretName
        annotations: {}            # merged over the flavour's (docs/deploy.md)

The OIDC client secret is never configuration: ``clientSecretName`` names a Secret in the
server's namespace with the key ``client-secret``.
"""

from __future__ import annotations

import re

from infra.config_values import ConfigError, _key, _Section
from ray_history_pulumi.cloud_ingress import FLAVOURS, AlbOidc, HistoryServerIngress
from ray_history_pulumi.server_access import AUTH_MODES, AUTHZ_MODES, FrontDoor, OidcClient, ServerAccess

#: The ingress flavour a stack on each cloud gets unless it names another.
CLOUD_FLAVOURS = {"gcp": "gke", "aws": "alb", "azure": "app-routing"}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def default_access() -> ServerAccess:
    """A stack without an ``access`` section: Kubernetes bearer tokens and RBAC (fail closed)."""
    return ServerAccess()


def read_access(s: _Section) -> ServerAccess:
    """The section, validated; ConfigError naming the key otherwise."""
    raw_auth = s.get("auth", list, [])
    oidc = _oidc(s)
    front_door = _front_door(s)
    if raw_auth:
        modes = tuple(str(mode) for mode in raw_auth)
    else:
        modes = ("oidc", "kubernetes") if oidc is not None else ("kubernetes",)
        if front_door is not None:
            modes = ("trusted-header", *modes)
    for mode in modes:
        if mode not in AUTH_MODES:
            raise ConfigError(f"{_key('access.auth')} must list {', '.join(AUTH_MODES)} (got {mode!r})")
    authz = s.get("authz", str, "none" if modes == ("none",) else "kubernetes")
    if authz not in AUTHZ_MODES:
        raise ConfigError(f"{_key('access.authz')} must be one of {', '.join(AUTHZ_MODES)} (got {authz!r})")
    namespaces = s.get("ingressFrom", list, [])
    for index, namespace in enumerate(namespaces):
        if not isinstance(namespace, str) or not _NAME.match(namespace):
            raise ConfigError(f"{_key(f'access.ingressFrom[{index}]')} must be a namespace name (got {namespace!r})")
    ingress = read_ingress(s)
    access = ServerAccess(
        modes=modes,
        authz=authz,
        authz_resource=s.get("authzResource", str, ""),
        policy=s.get("policy", str, ""),
        oidc=oidc,
        front_door=front_door,
        ingress_from=tuple(namespaces),
        ingress=ingress,
        read_ray_tokens=s.get("readRayTokens", bool, False),
        username_prefix=s.get("usernamePrefix", str, ""),
        groups_prefix=s.get("groupsPrefix", str, ""),
    )
    try:
        access.validate()
    except ValueError as error:
        raise ConfigError(f"{_key('access')}: {error}") from None
    return access


def read_ingress(parent: _Section) -> HistoryServerIngress | None:
    """``access.ingress``: host (required), flavour and its keys (see :func:`resolve_ingress`)."""
    s = parent.section("ingress")
    if s is None:
        return None
    host = s.require("host", str, "with access.ingress (the DNS name browsers use)")
    if not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", host) or ".." in host:
        raise ConfigError(f"{_key('access.ingress.host')} must be a DNS name (got {host!r})")
    annotations = s.get("annotations", dict, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()):
        raise ConfigError(f"{_key('access.ingress.annotations')} must map names to strings")
    ingress = HistoryServerIngress(
        host=host,
        # "" = the cloud's own, decided by resolve_ingress once the cloud is known.
        flavour=s.choice("flavour", ("", *FLAVOURS), ""),
        class_name=s.get("className", str, "") or None,
        tls_secret_name=s.get("tlsSecretName", str, "") or None,
        annotations=dict(annotations),
        static_ip_name=s.get("staticIpName", str, "") or None,
        iap_oauth_secret_name=s.get("iapOauthSecretName", str, "") or None,
        certificate_arn=s.get("certificateArn", str, "") or None,
        scheme=s.choice("scheme", ("internet-facing", "internal"), "internet-facing"),
        load_balancer_name=s.get("loadBalancerName", str, "ray-history"),
        alb_oidc=_alb_oidc(s),
        key_vault_certificate_uri=s.get("keyVaultCertificateUri", str, "") or None,
    )
    s.reject_unknown()
    return ingress


def resolve_ingress(access: ServerAccess, cloud: str) -> None:
    """Settle ``access.ingress.flavour`` for ``cloud`` and check the front door against it.

    Without ``flavour`` the cloud's own controller is used (GKE Ingress, AWS Load Balancer
    Controller, AKS application routing), unless ``className`` names another one (generic).
    """
    ingress = access.ingress
    if ingress is not None:
        if not ingress.flavour:
            ingress.flavour = "generic" if ingress.class_name else CLOUD_FLAVOURS.get(cloud, "generic")
        home = {flavour: home_cloud for home_cloud, flavour in CLOUD_FLAVOURS.items()}.get(ingress.flavour)
        if home is not None and home != cloud:
            raise ConfigError(
                f"{_key('access.ingress.flavour')} {ingress.flavour} needs cloud {home} (this is {cloud})"
            )
        ingress.iap = access.front_door is not None and access.front_door.kind == "iap" and ingress.flavour == "gke"
        try:
            ingress.validate()
        except ValueError as error:
            raise ConfigError(f"{_key('access')}: {error}") from None
    door = access.front_door
    if door is None or door.ready:
        return
    flavour = ingress.flavour if ingress is not None else ""
    if door.kind == "alb" and flavour != "alb":
        raise ConfigError(
            f"{_key('access.trustedHeader.albArn')} is required with kind alb unless access.ingress makes the ALB"
        )
    if door.kind == "iap" and flavour != "gke":
        raise ConfigError(
            f"{_key('access.trustedHeader.iapAudience')} is required with kind iap unless access.ingress makes"
            " the GKE load balancer"
        )
    if not access.active_modes:
        raise ConfigError(
            f"{_key('access.auth')}: trusted-header alone needs access.trustedHeader.iapAudience; list another"
            " mode (kubernetes) for the first deploy, before the load balancer's backend service exists"
        )


def _alb_oidc(parent: _Section) -> AlbOidc | None:
    s = parent.section("albOidc")
    if s is None:
        return None
    why = "with access.ingress.albOidc (the identity provider's discovery document lists it)"
    oidc = AlbOidc(
        issuer=s.require("issuer", str, why),
        authorization_endpoint=s.require("authorizationEndpoint", str, why),
        token_endpoint=s.require("tokenEndpoint", str, why),
        user_info_endpoint=s.require("userInfoEndpoint", str, why),
        secret_name=s.require("secretName", str, "with access.ingress.albOidc (keys clientID, clientSecret)"),
        scope=s.get("scope", str, "openid email profile"),
    )
    s.reject_unknown()
    for key in ("issuer", "authorizationEndpoint", "tokenEndpoint", "userInfoEndpoint"):
        url = getattr(oidc, re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), key))
        if not url.startswith("https://"):
            raise ConfigError(f"{_key('access.ingress.albOidc.' + key)} must be an https:// URL (got {url!r})")
    if not _NAME.match(oidc.secret_name):
        raise ConfigError(f"{_key('access.ingress.albOidc.secretName')} must be a Secret name")
    return oidc


def _oidc(parent: _Section) -> OidcClient | None:
    s = parent.section("oidc")
    if s is None:
        return None
    client = OidcClient(
        issuer=s.require("issuer", str, "with access.oidc"),
        client_id=s.require("clientId", str, "with access.oidc"),
        client_secret_name=s.require(
            "clientSecretName", str, "with access.oidc (a Secret in the server's namespace, key client-secret)"
        ),
        redirect_url=s.require("redirectUrl", str, "with access.oidc (https://HOST/oauth2/callback)"),
        groups_claim=s.get("groupsClaim", str, "groups"),
    )
    s.reject_unknown()
    for key, url in (("issuer", client.issuer), ("redirectUrl", client.redirect_url)):
        if not url.startswith("https://"):
            raise ConfigError(f"{_key('access.oidc.' + key)} must be an https:// URL (got {url!r})")
    if not _NAME.match(client.client_secret_name):
        raise ConfigError(f"{_key('access.oidc.clientSecretName')} must be a Secret name")
    return client


def _front_door(parent: _Section) -> FrontDoor | None:
    s = parent.section("trustedHeader")
    if s is None:
        return None
    door = FrontDoor(
        kind=s.choice("kind", ("iap", "alb")),
        iap_audience=s.get("iapAudience", str, ""),
        alb_arn=s.get("albArn", str, ""),
    )
    s.reject_unknown()
    # Either may be left out when access.ingress makes the load balancer (resolve_ingress).
    if door.kind == "alb" and door.alb_arn and not door.alb_arn.startswith("arn:"):
        raise ConfigError(f"{_key('access.trustedHeader.albArn')} must be the ALB's ARN (got {door.alb_arn!r})")
    return door

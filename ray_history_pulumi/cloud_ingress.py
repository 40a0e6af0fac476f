"""The history server's front door per cloud: what each cloud's ingress controller needs.

Pure: :func:`plan_ingress` turns the stack's ``access.ingress`` into the Ingress's class,
annotations and TLS, the Service's annotations, the controller's own objects
(``ManagedCertificate``, ``BackendConfig``, ``FrontendConfig`` on GKE) and the sources a
NetworkPolicy must admit. ``flavour`` says whose controller:

* ``gke``: GKE's own Ingress controller (Cloud Load Balancing): a Google-managed certificate
  for the host, HTTP redirected to HTTPS, the health check on ``/livez`` and, with
  ``trustedHeader.kind: iap``, Identity-Aware Proxy on the backend.
* ``alb``: the AWS Load Balancer Controller (or EKS Auto Mode's): an HTTPS ALB with a fixed
  name (so the server can pin it before it exists), the certificate from ACM (by host, or
  ``certificateArn``) and, with ``albOidc``, the ALB's own OIDC login.
* ``app-routing``: AKS's application routing add-on (managed NGINX), the certificate from
  Azure Key Vault.
* ``generic``: any controller; class, TLS Secret and annotations as given.

Every cloud flavour terminates TLS, so the browser's cookies can be ``Secure``, and raises
the load balancer's request timeout above the server's longest answer (a cold index build,
a live log stream): the clouds' defaults (30 s on Google's, 60 s on ALB and NGINX) would cut
them with a 502/504.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

FLAVOURS = ("generic", "gke", "alb", "app-routing")
#: Where the Cloud Load Balancing front ends and health checks come from
#: (https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges).
GOOGLE_LB_RANGES = ("35.191.0.0/16", "130.211.0.0/22")
APP_ROUTING_CLASS = "webapprouting.kubernetes.azure.com"
#: Where the add-on runs its NGINX pods.
APP_ROUTING_NAMESPACE = "app-routing-system"
HEALTH_PATH = "/livez"
#: Seconds the load balancer waits for an answer: above ``--build-timeout`` (15 min), and long
#: enough for a live log stream.
REQUEST_TIMEOUT_SECONDS = 3600
#: An ALB name: at most 32 alphanumerics and hyphens, no hyphen at either end, not ``internal-...``
#: (https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_CreateLoadBalancer.html).
_ALB_NAME = re.compile(r"^(?!internal-)[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?$")
#: A ManagedCertificate domain: at most 63 characters, no wildcard
#: (https://cloud.google.com/kubernetes-engine/docs/how-to/managed-certs#limitations).
_MANAGED_CERT_DOMAIN = re.compile(r"^(([a-z0-9]|[a-z0-9][-a-z0-9]*[a-z0-9])\.)+[a-z][-a-z0-9]*[a-z0-9]$")
_KEY_VAULT_CERT = re.compile(
    r"^https://[a-z0-9-]{3,24}\.vault\.azure\.(net|cn|us)/certificates/[A-Za-z0-9-]+(/[0-9a-f]{32})?$"
)


#: Fields that only one flavour reads.
_FLAVOUR_FIELDS = {
    "static_ip_name": "gke",
    "iap": "gke",
    "iap_oauth_secret_name": "gke",
    "certificate_arn": "alb",
    "alb_oidc": "alb",
    "key_vault_certificate_uri": "app-routing",
}


@dataclass
class AlbOidc:
    """The ALB's own OIDC login (``alb.ingress.kubernetes.io/auth-idp-oidc``).

    Attributes:
        issuer, authorization_endpoint, token_endpoint, user_info_endpoint: the identity
            provider's endpoints (its discovery document lists them).
        secret_name: a Secret in the server's namespace with keys ``clientID`` and ``clientSecret``.
        scope: what the ALB asks for.
    """

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    user_info_endpoint: str
    secret_name: str
    scope: str = "openid email profile"

    def annotation(self) -> str:
        return json.dumps(
            {
                "issuer": self.issuer,
                "authorizationEndpoint": self.authorization_endpoint,
                "tokenEndpoint": self.token_endpoint,
                "userInfoEndpoint": self.user_info_endpoint,
                "secretName": self.secret_name,
            },
            separators=(",", ":"),
        )


@dataclass
class HistoryServerIngress:
    """An Ingress in front of the Service.

    Attributes:
        host: DNS name (required).
        flavour: whose controller: ``gke``, ``alb``, ``app-routing`` or ``generic``; a stack
            without it gets its cloud's own (``generic`` with ``className``, and on kind).
        class_name: ``generic``: ``ingressClassName`` (e.g. ``nginx``); None = cluster default.
        tls_secret_name: a Secret with the certificate (``generic``, ``app-routing``; on ``gke``
            instead of the Google-managed certificate); None = plain HTTP on ``generic``.
        annotations: more annotations (the controller's), merged over the flavour's.
        static_ip_name: ``gke``: a reserved global address
            (``kubernetes.io/ingress.global-static-ip-name``) so DNS survives a re-created Ingress.
        iap: ``gke``: Identity-Aware Proxy on the backend (set by ``trustedHeader.kind: iap``).
        iap_oauth_secret_name: ``gke``: a Secret with ``client_id``/``client_secret`` of a custom
            OAuth client; None = Google's managed client (users of your organisation only).
        certificate_arn: ``alb``: the ACM certificate; None = ACM's certificate for ``host``.
        scheme: ``alb``: ``internet-facing`` or ``internal``.
        load_balancer_name: ``alb``: the ALB's name (the server pins tokens to it).
        alb_oidc: ``alb``: the ALB's OIDC login.
        key_vault_certificate_uri: ``app-routing``: the Key Vault certificate
            (``https://VAULT.vault.azure.net/certificates/NAME``).
    """

    host: str
    flavour: str = "generic"
    class_name: str | None = None
    tls_secret_name: str | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    static_ip_name: str | None = None
    iap: bool = False
    iap_oauth_secret_name: str | None = None
    certificate_arn: str | None = None
    scheme: str = "internet-facing"
    load_balancer_name: str = "ray-history"
    alb_oidc: AlbOidc | None = None
    key_vault_certificate_uri: str | None = None

    def validate(self) -> None:
        """ValueError naming the field when a cloud would refuse the objects."""
        if not self.host.strip():
            raise ValueError("ingress.host: required when an ingress is requested")
        if self.flavour not in FLAVOURS:
            raise ValueError(f"ingress.flavour: {self.flavour!r} is not one of {', '.join(FLAVOURS)}")
        for name, owner in _FLAVOUR_FIELDS.items():
            if getattr(self, name) and owner != self.flavour:
                raise ValueError(f"ingress.{name}: only with the {owner} flavour (this is {self.flavour})")
        if self.class_name and self.flavour != "generic":
            raise ValueError(f"ingress.class_name: the {self.flavour} flavour sets its own class")
        {"gke": self._check_gke, "alb": self._check_alb, "app-routing": self._check_app_routing}.get(
            self.flavour, lambda: None
        )()

    def _check_gke(self) -> None:
        if self.tls_secret_name is None and (len(self.host) > 63 or not _MANAGED_CERT_DOMAIN.match(self.host)):
            raise ValueError(
                f"ingress.host: {self.host!r} cannot have a Google-managed certificate"
                " (at most 63 characters, no wildcard); give tls_secret_name instead"
            )

    def _check_alb(self) -> None:
        if not _ALB_NAME.match(self.load_balancer_name):
            raise ValueError(
                f"ingress.load_balancer_name: {self.load_balancer_name!r} is not an ALB name"
                " (1-32 letters, digits, hyphens; no hyphen at either end; not internal-...)"
            )
        if self.scheme not in ("internet-facing", "internal"):
            raise ValueError(f"ingress.scheme: {self.scheme!r} is not internet-facing or internal")
        if self.certificate_arn and not self.certificate_arn.startswith("arn:aws"):
            raise ValueError(f"ingress.certificate_arn: {self.certificate_arn!r} is not an ACM ARN")
        if self.tls_secret_name:
            raise ValueError("ingress.tls_secret_name: an ALB takes its certificate from ACM (certificate_arn)")

    def _check_app_routing(self) -> None:
        if not (self.key_vault_certificate_uri or self.tls_secret_name):
            raise ValueError(
                "ingress.key_vault_certificate_uri: required with app-routing (or tls_secret_name):"
                " browsers must reach the server over HTTPS"
            )
        if self.key_vault_certificate_uri and not _KEY_VAULT_CERT.match(self.key_vault_certificate_uri):
            raise ValueError(
                f"ingress.key_vault_certificate_uri: {self.key_vault_certificate_uri!r} is not"
                " https://VAULT.vault.azure.net/certificates/NAME"
            )

    @property
    def https(self) -> bool:
        """Browsers reach the server over HTTPS (its cookies may be ``Secure``)."""
        return self.flavour != "generic" or self.tls_secret_name is not None


@dataclass
class IngressPlan:
    """What :func:`plan_ingress` decided.

    Attributes:
        class_name: ``spec.ingressClassName`` (None: not set).
        annotations: the Ingress's annotations.
        tls: ``spec.tls``.
        service_annotations: what the Service needs (GKE: its BackendConfig, container-native LB).
        objects: the controller's custom objects, complete (apiVersion, kind, metadata, spec).
        source_cidrs: addresses the load balancer's traffic comes from (NetworkPolicy ``ipBlock``).
        source_namespaces: namespaces the controller's pods run in (NetworkPolicy).
        skip_await: Pulumi must not wait for the Ingress's address (a controller that never
            publishes one would fail every ``pulumi up`` after 10 minutes).
        await_minutes: how long Pulumi waits for the address when it does.
    """

    class_name: str | None
    annotations: dict[str, str]
    tls: list[dict[str, Any]]
    service_annotations: dict[str, str] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)
    source_cidrs: tuple[str, ...] = ()
    source_namespaces: tuple[str, ...] = ()
    skip_await: bool = False
    await_minutes: int = 10


def plan_ingress(ingress: HistoryServerIngress, *, name: str, namespace: str, port: int) -> IngressPlan:
    """The objects of ``ingress`` for a Service/Ingress called ``name`` whose pods listen on ``port``."""
    ingress.validate()
    if ingress.flavour == "gke":
        plan = _gke(ingress, name, namespace, port)
    elif ingress.flavour == "alb":
        plan = _alb(ingress)
    elif ingress.flavour == "app-routing":
        plan = _app_routing(ingress, name)
    else:
        tls = [{"hosts": [ingress.host], "secret_name": ingress.tls_secret_name}] if ingress.tls_secret_name else []
        plan = IngressPlan(class_name=ingress.class_name, annotations={}, tls=tls, skip_await=True)
    plan.annotations = {**plan.annotations, **ingress.annotations}
    return plan


def _gke(ingress: HistoryServerIngress, name: str, namespace: str, port: int) -> IngressPlan:
    metadata = {"name": name, "namespace": namespace}
    backend: dict[str, Any] = {
        # The default check would probe the serving port's "/" (or the readiness path):
        # "/" answers 401/302 once access control is on, which marks every pod unhealthy.
        "healthCheck": {"type": "HTTP", "requestPath": HEALTH_PATH, "port": port},
        "timeoutSec": REQUEST_TIMEOUT_SECONDS,
    }
    if ingress.iap:
        iap: dict[str, Any] = {"enabled": True}
        if ingress.iap_oauth_secret_name:
            iap["oauthclientCredentials"] = {"secretName": ingress.iap_oauth_secret_name}
        backend["iap"] = iap
    objects: list[dict[str, Any]] = [
        {"apiVersion": "cloud.google.com/v1", "kind": "BackendConfig", "metadata": metadata, "spec": backend},
        {
            "apiVersion": "networking.gke.io/v1beta1",
            "kind": "FrontendConfig",
            "metadata": metadata,
            "spec": {"redirectToHttps": {"enabled": True}},
        },
    ]
    annotations = {
        # GKE's controller reads the class from this annotation (it creates no IngressClass "gce").
        "kubernetes.io/ingress.class": "gce",
        "networking.gke.io/v1beta1.FrontendConfig": name,
    }
    tls: list[dict[str, Any]] = []
    if ingress.tls_secret_name:
        tls = [{"hosts": [ingress.host], "secret_name": ingress.tls_secret_name}]
    else:
        objects.append(
            {
                "apiVersion": "networking.gke.io/v1",
                "kind": "ManagedCertificate",
                "metadata": metadata,
                "spec": {"domains": [ingress.host]},
            }
        )
        annotations["networking.gke.io/managed-certificates"] = name
    if ingress.static_ip_name:
        annotations["kubernetes.io/ingress.global-static-ip-name"] = ingress.static_ip_name
    return IngressPlan(
        class_name=None,
        annotations=annotations,
        tls=tls,
        service_annotations={
            "cloud.google.com/backend-config": json.dumps({"default": name}),
            # Container-native load balancing: the load balancer reaches pod IPs directly.
            "cloud.google.com/neg": json.dumps({"ingress": True}),
        },
        objects=objects,
        source_cidrs=GOOGLE_LB_RANGES,
        # A new load balancer and its certificate take several minutes on Google's side.
        await_minutes=30,
    )


def _alb(ingress: HistoryServerIngress) -> IngressPlan:
    prefix = "alb.ingress.kubernetes.io/"
    annotations = {
        prefix + "scheme": ingress.scheme,
        prefix + "target-type": "ip",
        prefix + "listen-ports": json.dumps([{"HTTP": 80}, {"HTTPS": 443}]),
        prefix + "ssl-redirect": "443",
        prefix + "healthcheck-path": HEALTH_PATH,
        prefix + "load-balancer-name": ingress.load_balancer_name,
        prefix + "load-balancer-attributes": f"idle_timeout.timeout_seconds={REQUEST_TIMEOUT_SECONDS}",
    }
    if ingress.certificate_arn:
        annotations[prefix + "certificate-arn"] = ingress.certificate_arn
    if ingress.alb_oidc is not None:
        annotations |= {
            prefix + "auth-type": "oidc",
            prefix + "auth-idp-oidc": ingress.alb_oidc.annotation(),
            prefix + "auth-on-unauthenticated-request": "authenticate",
            prefix + "auth-scope": ingress.alb_oidc.scope,
        }
    # The ALB's address is published only once AWS has made it, which may take minutes.
    return IngressPlan(class_name="alb", annotations=annotations, tls=[], await_minutes=20)


def _app_routing(ingress: HistoryServerIngress, name: str) -> IngressPlan:
    annotations = {
        # Live log streams and cold index builds answer slowly; NGINX's default is 60 s.
        "nginx.ingress.kubernetes.io/proxy-read-timeout": str(REQUEST_TIMEOUT_SECONDS),
        "nginx.ingress.kubernetes.io/proxy-send-timeout": str(REQUEST_TIMEOUT_SECONDS),
        "nginx.ingress.kubernetes.io/proxy-buffering": "off",
    }
    secret = ingress.tls_secret_name
    if ingress.key_vault_certificate_uri:
        annotations["kubernetes.azure.com/tls-cert-keyvault-uri"] = ingress.key_vault_certificate_uri
        secret = f"keyvault-{name}"  # the add-on syncs the certificate into this Secret
    return IngressPlan(
        class_name=APP_ROUTING_CLASS,
        annotations=annotations,
        tls=[{"hosts": [ingress.host], "secret_name": secret}],
        source_namespaces=(APP_ROUTING_NAMESPACE,),
    )

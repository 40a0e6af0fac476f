"""Access control of the history server on Kubernetes: its flags, the files they name, its RBAC.

The server authenticates callers (``--auth``) and authorizes the namespace each request
reads (``--authz``); see the README's "Access control". Secrets (the OIDC client secret)
come from a Kubernetes Secret mounted as a file, never from stack configuration; a
``static`` policy from a ConfigMap. With ``ingress_from`` a NetworkPolicy admits the
server's port only from those namespaces (the ingress controller's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi

if TYPE_CHECKING:
    from ray_history_pulumi.cloud_ingress import HistoryServerIngress

POLICY_DIR = "/etc/ray-history/policy"
OIDC_SECRET_DIR = "/var/run/secrets/ray-history/oidc"  # noqa: S105 - a mount path
OIDC_SECRET_KEY = "client-secret"  # noqa: S105 - the key name inside the Secret
#: TokenReview and SubjectAccessReview: what ``kubernetes`` authentication/authorization call.
REVIEW_RULES: list[dict[str, Any]] = [
    {"api_groups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"api_groups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]
AUTH_MODES = ("none", "kubernetes", "oidc", "trusted-header")
AUTHZ_MODES = ("none", "kubernetes", "static")


@dataclass
class OidcClient:
    """The OIDC client registered with the identity provider.

    Attributes:
        issuer: issuer URL.
        client_id: the client id.
        client_secret_name: a Secret in the server's namespace holding the secret under ``client-secret``.
        redirect_url: the external callback URL (``https://HOST/oauth2/callback``).
        groups_claim: the ID-token claim listing groups.
    """

    issuer: str
    client_id: str
    client_secret_name: str
    redirect_url: str
    groups_claim: str = "groups"


@dataclass
class FrontDoor:
    """``trusted-header``: ``iap`` (GKE, with ``iap_audience``) or ``alb`` (AWS, with ``alb_arn``).

    ``alb_arn`` may be an Output: the program derives ``.../app/NAME/*`` for the ALB its Ingress
    makes. An IAP audience names a backend service that exists only after the first deploy;
    until it is set the server runs without ``trusted-header`` (IAP users get 401: fail closed).
    """

    kind: str
    iap_audience: str = ""
    alb_arn: Any = ""

    @property
    def ready(self) -> bool:
        """The server can verify this front door's tokens."""
        return bool(self.iap_audience) if self.kind == "iap" else bool(self.alb_arn)


@dataclass
class ServerAccess:
    """Who may call the server and what they may read.

    Attributes:
        modes: ``--auth`` modes in order (``("none",)`` = none, for a server nobody else reaches).
        authz: ``kubernetes`` (SubjectAccessReview), ``static`` (``policy``) or ``none``.
        authz_resource: ``VERB:RESOURCE.GROUP`` asked by ``kubernetes`` authorization ("" = the server's default).
        policy: the ``static`` policy document (YAML text).
        oidc: the OIDC client (``oidc`` mode).
        front_door: the signed front door (``trusted-header`` mode).
        ingress_from: namespaces whose pods may reach the server (a NetworkPolicy); empty = no policy.
        ingress: an Ingress in front of the Service (its host is also allowed by the server).
        read_ray_tokens: let the server read Secrets in the workload namespaces (a Role per
            namespace, never cluster-wide) to pass live clusters' Ray auth tokens
            (KubeRay ``authOptions.mode: token``) to their dashboards.
        username_prefix: put before the user names an identity provider gives (``oidc``,
            ``trusted-header``) before they are authorized (``--oidc-username-prefix``, e.g. ``oidc:``).
        groups_prefix: the same for its groups (``--oidc-groups-prefix``).
    """

    modes: tuple[str, ...] = ("kubernetes",)
    authz: str = "kubernetes"
    authz_resource: str = ""
    policy: str = ""
    oidc: OidcClient | None = None
    front_door: FrontDoor | None = None
    ingress_from: tuple[str, ...] = field(default_factory=tuple)
    ingress: HistoryServerIngress | None = None
    read_ray_tokens: bool = False
    username_prefix: str = ""
    groups_prefix: str = ""

    def validate(self) -> None:
        for mode in self.modes:
            if mode not in AUTH_MODES:
                raise ValueError(f"access.modes: {mode!r} is not one of {', '.join(AUTH_MODES)}")
        if "none" in self.modes and len(self.modes) > 1:
            raise ValueError("access.modes: none cannot be combined with another mode")
        if self.authz not in AUTHZ_MODES:
            raise ValueError(f"access.authz: {self.authz!r} is not one of {', '.join(AUTHZ_MODES)}")
        if (self.authz == "none") != (self.modes == ("none",)):
            raise ValueError(
                "access.authz: none exactly when access.modes is none (an authenticated server authorizes)"
            )
        if self.authz == "static" and not self.policy.strip():
            raise ValueError("access.policy: required with authz static")
        if ("oidc" in self.modes) != (self.oidc is not None):
            raise ValueError("access.oidc: set it exactly when access.modes includes oidc")
        if ("trusted-header" in self.modes) != (self.front_door is not None):
            raise ValueError("access.front_door: set it exactly when access.modes includes trusted-header")
        if (
            self.oidc is not None
            and self.ingress is not None
            and not self.oidc.redirect_url.startswith(f"https://{self.ingress.host}/")
        ):
            raise ValueError(f"access.oidc.redirect_url: must be on the Ingress host https://{self.ingress.host}/")
        if self.front_door is not None and self.front_door.kind not in ("iap", "alb"):
            raise ValueError(f"access.front_door.kind: {self.front_door.kind!r} is not iap or alb")
        self._validate_prefixes()

    def _validate_prefixes(self) -> None:
        for name, prefix in (("username_prefix", self.username_prefix), ("groups_prefix", self.groups_prefix)):
            if prefix and self.oidc is None and self.front_door is None:
                raise ValueError(f"access.{name}: applies to identity-provider names: set oidc or front_door")
            if prefix.startswith("system:") or any(c.isspace() or not c.isprintable() for c in prefix):
                raise ValueError(f"access.{name}: {prefix!r} may not start with system: or hold spaces")

    @property
    def uses_kubernetes(self) -> bool:
        return "kubernetes" in self.modes or self.authz == "kubernetes"

    def server_args(self) -> list[Any]:
        """The server's access-control flags (strings; an Output for a derived ALB ARN)."""
        args: list[Any] = [f"--auth={','.join(self.active_modes)}", f"--authz={self.authz}"]
        if self.uses_kubernetes:
            args.append("--kubernetes=in-cluster")  # reviews go to the API server the pod runs under
        if self.authz_resource:
            args.append(f"--authz-resource={self.authz_resource}")
        if self.authz == "static":
            args.append(f"--authz-policy={POLICY_DIR}/policy.yaml")
        if self.oidc is not None:
            args += [
                f"--oidc-issuer={self.oidc.issuer}",
                f"--oidc-client-id={self.oidc.client_id}",
                f"--oidc-client-secret-file={OIDC_SECRET_DIR}/{OIDC_SECRET_KEY}",
                f"--oidc-redirect-url={self.oidc.redirect_url}",
                f"--oidc-groups-claim={self.oidc.groups_claim}",
            ]
        if self.username_prefix:
            args.append(f"--oidc-username-prefix={self.username_prefix}")
        if self.groups_prefix:
            args.append(f"--oidc-groups-prefix={self.groups_prefix}")
        door = self.front_door
        if door is not None and door.ready:
            args.append(f"--trusted-header={door.kind}")
            if door.kind == "iap":
                args.append(f"--iap-audience={door.iap_audience}")
            elif isinstance(door.alb_arn, str):
                args.append(f"--alb-arn={door.alb_arn}")
            else:
                args.append(pulumi.Output.concat("--alb-arn=", door.alb_arn))
        return args

    @property
    def active_modes(self) -> tuple[str, ...]:
        """``modes`` without ``trusted-header`` while its front door cannot be verified yet."""
        if self.front_door is not None and not self.front_door.ready:
            return tuple(mode for mode in self.modes if mode != "trusted-header")
        return self.modes

    def volumes(self, policy_config_map: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(volumes, volume_mounts)`` for the policy ConfigMap and the OIDC client Secret."""
        volumes: list[dict[str, Any]] = []
        mounts: list[dict[str, Any]] = []
        if self.authz == "static":
            volumes.append({"name": "authz-policy", "config_map": {"name": policy_config_map}})
            mounts.append({"name": "authz-policy", "mount_path": POLICY_DIR, "read_only": True})
        if self.oidc is not None:
            secret = {
                "secret_name": self.oidc.client_secret_name,
                "items": [{"key": OIDC_SECRET_KEY, "path": OIDC_SECRET_KEY}],
            }
            volumes.append({"name": "oidc-client", "secret": secret})
            mounts.append({"name": "oidc-client", "mount_path": OIDC_SECRET_DIR, "read_only": True})
        return volumes, mounts

    def network_policy_spec(
        self,
        pod_labels: dict[str, str],
        port: int,
        extra_namespaces: tuple[str, ...] = (),
        extra_cidrs: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """Ingress to the server's port only from pods of ``ingress_from`` namespaces, plus the
        front door's own sources (its controller's namespace, its load balancer's addresses)."""
        namespaces = list(dict.fromkeys((*self.ingress_from, *extra_namespaces)))
        sources: list[dict[str, Any]] = [
            {"namespace_selector": {"match_labels": {"kubernetes.io/metadata.name": namespace}}}
            for namespace in namespaces
        ]
        sources += [{"ip_block": {"cidr": cidr}} for cidr in extra_cidrs]
        return {
            "pod_selector": {"match_labels": pod_labels},
            "policy_types": ["Ingress"],
            "ingress": [{"from": sources, "ports": [{"protocol": "TCP", "port": port}]}],
        }


def ray_token_reader_roles(namespaces: list[str], server_namespace: str, server_account: str) -> list[dict[str, Any]]:
    """One Role + RoleBinding per workload namespace: ``get`` on Secrets there, for the server's account.

    Namespaced on purpose: a ClusterRole would let the server read every Secret of the cluster.
    """
    objects: list[dict[str, Any]] = []
    for namespace in namespaces:
        name = f"ray-history-token-reader-{server_namespace}"[:63].rstrip("-")
        objects.append(
            {
                "kind": "Role",
                "metadata": {"name": name, "namespace": namespace},
                "rules": [{"api_groups": [""], "resources": ["secrets"], "verbs": ["get"]}],
            }
        )
        objects.append(
            {
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "role_ref": {"api_group": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": server_account, "namespace": server_namespace}],
            }
        )
    return objects

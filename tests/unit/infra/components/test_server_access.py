"""The history server's access control on Kubernetes (#16): flags, mounted files, RBAC, NetworkPolicy.

Every object is schema-validated, and the server flags the program generates are parsed by
the real ``historyserver`` parser and access-control validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray

from infra.config import ConfigError, parse_config
from ray_history_pulumi.history_server import HistoryServerArgs
from ray_history_pulumi.server_access import OIDC_SECRET_DIR, POLICY_DIR, FrontDoor, OidcClient, ServerAccess
from runtime.server.auth.config import parse_auth
from runtime.server.options import build_parser
from tests.unit.infra.components.test_history_server import AZURE_WIRING, _by_kind, _deploy
from tests.unit.infra.schema_validation import validate_k8s
from tests.unit.infra.test_config import base

OIDC = OidcClient(
    issuer="https://accounts.example.com",
    client_id="ray-history",
    client_secret_name="ray-history-oidc",
    redirect_url="https://ray-history.example.com/oauth2/callback",
)


_OIDC_SETTINGS = {
    "issuer": OIDC.issuer,
    "clientId": OIDC.client_id,
    "clientSecretName": OIDC.client_secret_name,
    "redirectUrl": OIDC.redirect_url,
}


def _objects(access: ServerAccess | None) -> dict[str, dict[str, Any]]:
    resources = _deploy(HistoryServerArgs(image="r/server:1", wiring=AZURE_WIRING, access=access))
    for resource in resources:
        validate_k8s(resource.inputs)
    return _by_kind(resources)


def _parsed(argv: list[str]) -> Any:
    local_build = Path(ray.__file__).parent / "dashboard" / "client" / "build"
    argv = [f"--dashboard-dir={local_build}" if a.startswith("--dashboard-dir=") else a for a in argv]
    return build_parser().parse_args(argv)


def _container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    return container


def test_kubernetes_access_grants_the_reviews_and_passes_the_flags() -> None:
    """``--auth/--authz kubernetes`` call TokenReview and SubjectAccessReview: the ClusterRole allows
    ``create`` on both (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#webhook-token-authentication,
    https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access), and nothing more."""
    objects = _objects(ServerAccess())
    rules = objects["ClusterRole"]["rules"]
    assert {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]} in rules
    assert {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]} in rules
    assert not [r for r in rules if "secrets" in r["resources"] or "*" in r["verbs"]]
    args = _container(objects)["args"]
    parsed = _parsed(args)
    assert (parsed.auth, parsed.authz, parsed.kubernetes) == ("kubernetes", "kubernetes", "in-cluster")
    assert parse_auth(parsed.auth, parsed.authz).enabled


def test_no_access_control_means_no_review_rights() -> None:
    rules = _objects(None)["ClusterRole"]["rules"]
    assert rules == [{"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list", "get"]}]


def test_oidc_client_secret_comes_from_a_mounted_secret() -> None:
    objects = _objects(ServerAccess(modes=("oidc", "kubernetes"), oidc=OIDC))
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "oidc-client")
    assert volume["secret"] == {
        "secretName": "ray-history-oidc",
        "items": [{"key": "client-secret", "path": "client-secret"}],
    }
    mount = next(m for m in _container(objects)["volumeMounts"] if m["name"] == "oidc-client")
    assert (mount["mountPath"], mount["readOnly"]) == (OIDC_SECRET_DIR, True)
    parsed = _parsed(_container(objects)["args"])
    assert parsed.auth == "oidc,kubernetes"
    assert parsed.oidc_client_secret_file == f"{OIDC_SECRET_DIR}/client-secret"
    assert parsed.oidc_issuer == OIDC.issuer and parsed.oidc_redirect_url == OIDC.redirect_url


def test_identity_provider_prefixes_reach_the_server() -> None:
    """``usernamePrefix`` / ``groupsPrefix`` become the server's ``--oidc-username-prefix`` /
    ``--oidc-groups-prefix`` (kube-apiserver's flags of the same names), which the real server
    configuration accepts; without an identity provider they are refused, naming the key."""
    config = parse_config(base(access={"oidc": _OIDC_SETTINGS, "usernamePrefix": "oidc:", "groupsPrefix": "oidc:"}))
    parsed = _parsed(_container(_objects(config.access))["args"])
    assert (parsed.oidc_username_prefix, parsed.oidc_groups_prefix) == ("oidc:", "oidc:")
    auth = parse_auth(
        parsed.auth, parsed.authz, username_prefix=parsed.oidc_username_prefix, groups_prefix=parsed.oidc_groups_prefix
    )
    assert (auth.provider_names.username_prefix, auth.provider_names.groups_prefix) == ("oidc:", "oidc:")
    with pytest.raises(ConfigError, match=r"access\.username_prefix: applies to identity-provider names"):
        parse_config(base(access={"usernamePrefix": "oidc:"}))
    with pytest.raises(ConfigError, match="may not start with system:"):
        parse_config(base(access={"oidc": _OIDC_SETTINGS, "groupsPrefix": "system:"}))


def test_static_policy_is_a_mounted_config_map() -> None:
    policy = "namespaces:\n  team-a: {groups: [team-a-devs]}\n"
    objects = _objects(ServerAccess(authz="static", policy=policy))
    assert objects["ConfigMap"]["data"] == {"policy.yaml": policy}
    parsed = _parsed(_container(objects)["args"])
    assert parsed.authz_policy == f"{POLICY_DIR}/policy.yaml"
    assert parse_auth(parsed.auth, parsed.authz, policy_file=parsed.authz_policy).authz == "static"


def test_ingress_from_admits_only_those_namespaces() -> None:
    """A NetworkPolicy selecting the server's pods admits its port only from the listed namespaces
    (https://kubernetes.io/docs/concepts/services-networking/network-policies/#behavior-of-to-and-from-selectors)."""
    objects = _objects(ServerAccess(ingress_from=("ingress-nginx",)))
    spec = objects["NetworkPolicy"]["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "historyserver"
    [rule] = spec["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8080}]


def test_trusted_header_flags() -> None:
    door = FrontDoor(kind="iap", iap_audience="/projects/1/global/backendServices/2")
    parsed = _parsed(_container(_objects(ServerAccess(modes=("trusted-header",), front_door=door)))["args"])
    assert (parsed.trusted_header, parsed.iap_audience) == ("iap", "/projects/1/global/backendServices/2")


def test_stack_defaults_to_kubernetes_and_adds_oidc_when_configured() -> None:
    assert parse_config(base()).access == ServerAccess()
    oidc = {
        "issuer": OIDC.issuer,
        "clientId": OIDC.client_id,
        "clientSecretName": OIDC.client_secret_name,
        "redirectUrl": OIDC.redirect_url,
    }
    config = parse_config(base(access={"oidc": oidc, "ingressFrom": ["ingress-nginx"]}))
    assert config.access.modes == ("oidc", "kubernetes")
    assert config.access.oidc == OIDC and config.access.ingress_from == ("ingress-nginx",)


@pytest.mark.parametrize(
    ("access", "message"),
    [
        ({"auth": ["ldap"]}, "ray-history-server:access.auth must list"),
        ({"authz": "static"}, "access.policy: required with authz static"),
        ({"auth": ["none"], "authz": "kubernetes"}, "authz: none exactly when"),
        (
            {"oidc": {"issuer": "https://i", "clientId": "c", "redirectUrl": "https://r/cb"}},
            "access.oidc.clientSecretName is required",
        ),
        (
            {"oidc": {"issuer": "http://i", "clientId": "c", "clientSecretName": "s", "redirectUrl": "https://r/cb"}},
            "access.oidc.issuer must be an https:// URL",
        ),
        ({"oidc": {"clientSecret": "hunter2"}}, "access.oidc.issuer is required"),
        ({"trustedHeader": {"kind": "iap"}}, "access.trustedHeader.iapAudience is required"),
        ({"ingressFrom": ["Ingress NGINX"]}, "access.ingressFrom[0] must be a namespace name"),
    ],
)
def test_bad_access_settings_name_the_key(access: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(base(access=access))
    assert message in str(error.value)


def test_ingress_from_stack_config_reaches_the_deployment() -> None:
    """``access.ingress``: an Ingress with TLS in front of the Service; its host is allowed by the server
    and the selection cookies become Secure (the browser sees HTTPS)."""
    from tests.unit.infra.mocks import FAKE_KUBECONFIG
    from tests.unit.infra.test_config import stack_values
    from tests.unit.infra.test_program import deploy_with

    values = stack_values("gke")
    values["kubeconfig"] = FAKE_KUBECONFIG
    values["access"] = {
        "ingress": {"host": "ray-history.example.com", "className": "gce", "tlsSecretName": "rh-tls"},
        "ingressFrom": ["kube-system"],
    }
    mocks, _ = deploy_with(values)
    ingress = mocks.one("kubernetes:networking.k8s.io/v1:Ingress").inputs
    validate_k8s(ingress)
    assert ingress["spec"]["tls"] == [{"hosts": ["ray-history.example.com"], "secretName": "rh-tls"}]
    args = mocks.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--allowed-hosts=ray-history.example.com" in args and "--secure-cookies" in args
    assert mocks.one("kubernetes:networking.k8s.io/v1:NetworkPolicy")


def test_oidc_redirect_must_be_on_the_ingress_host() -> None:
    oidc = {"issuer": OIDC.issuer, "clientId": "c", "clientSecretName": "s", "redirectUrl": "https://elsewhere/cb"}
    with pytest.raises(ConfigError, match="must be on the Ingress host"):
        parse_config(base(access={"oidc": oidc, "ingress": {"host": "ray-history.example.com"}}))


def test_ray_token_reads_are_namespaced_roles_never_cluster_wide() -> None:
    """``access.readRayTokens``: a Role + RoleBinding in each workload namespace with ``get`` on
    Secrets, and no ClusterRole rule on Secrets (least privilege: the server would otherwise read
    every Secret of the cluster; https://kubernetes.io/docs/concepts/security/rbac-good-practices/)."""
    from tests.unit.infra.mocks import FAKE_KUBECONFIG
    from tests.unit.infra.test_config import stack_values
    from tests.unit.infra.test_program import deploy_with

    values = stack_values("gke")
    values["kubeconfig"] = FAKE_KUBECONFIG
    values["workloads"] = {"namespaces": ["team-a", "team-b"]}
    values["access"] = {"readRayTokens": True}
    mocks, _ = deploy_with(values)
    roles = mocks.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
    assert sorted(r.inputs["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        validate_k8s(role.inputs)
        assert role.inputs["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    bindings = mocks.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
    assert {b.inputs["subjects"][0]["name"] for b in bindings} == {"ray-history-server"}
    cluster_rules = mocks.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole").inputs["rules"]
    assert not [r for r in cluster_rules if "secrets" in r["resources"]]
    values["access"] = {}
    mocks, _ = deploy_with(values)
    assert not mocks.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")

"""The front door per cloud (#16): what GKE's, AWS's and AKS's ingress controllers need.

Each test encodes a documented behaviour of a cloud that mocks cannot see (cited in its
docstring); the objects are schema-validated (core kinds strictly, GKE's own kinds against
``tests/unit/infra/front_door_schemas.py``), and the server flags are parsed by the real
``historyserver`` parser and front-door settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError, parse_config
from ray_history_pulumi.cloud_ingress import (
    GOOGLE_LB_RANGES,
    REQUEST_TIMEOUT_SECONDS,
    HistoryServerIngress,
    plan_ingress,
)
from ray_history_pulumi.history_server import CONTAINER_PORT
from runtime.server.auth.front_door_settings import parse_front_door
from runtime.server.settings import BUILD_TIMEOUT
from tests.unit.infra.components.test_history_server import _args
from tests.unit.infra.front_door_schemas import validate_front_door
from tests.unit.infra.mocks import AWS_ACCOUNT, FAKE_KUBECONFIG, RecordingMocks
from tests.unit.infra.schema_validation import validate_k8s
from tests.unit.infra.test_config import base, stack_values
from tests.unit.infra.test_program import created_cluster_values, deploy_with

HOST = "ray-history.example.com"
INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
SERVICE = "kubernetes:core/v1:Service"
POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def _deploy(stack: str, access: dict[str, Any]) -> RecordingMocks:
    values = stack_values(stack)
    values["kubeconfig"] = FAKE_KUBECONFIG
    values["access"] = access
    mocks, _ = deploy_with(values)
    return mocks


def _stack(stack: str, access: dict[str, Any]) -> dict[str, Any]:
    """The example stack's values with this ``access`` section (for parse_config)."""
    return {**stack_values(stack), "access": access}


def _server_args(mocks: RecordingMocks) -> list[str]:
    args: list[str] = mocks.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    return args


def _flag(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(name + "=")), None)


def _validated(mocks: RecordingMocks) -> dict[str, Any]:
    """Every object of the server's namespace validated; the Ingress's inputs."""
    for typ in (INGRESS, SERVICE, POLICY):
        for resource in mocks.of_type(typ):
            validate_k8s(resource.inputs)
    for resource in mocks.resources:
        if resource.typ.startswith(("kubernetes:cloud.google.com/", "kubernetes:networking.gke.io/")):
            validate_front_door(resource.inputs)
    ingress: dict[str, Any] = mocks.one(INGRESS).inputs
    return ingress


# --- GKE ---------------------------------------------------------------------------------


def test_gke_gets_a_managed_certificate_https_and_its_own_health_check() -> None:
    """A GKE stack's Ingress is GKE's (class annotation ``gce``: GKE creates no IngressClass,
    https://cloud.google.com/kubernetes-engine/docs/concepts/ingress#controller_summary), with a
    Google-managed certificate for the host
    (https://cloud.google.com/kubernetes-engine/docs/how-to/managed-certs), HTTP redirected by a
    FrontendConfig (https://cloud.google.com/kubernetes-engine/docs/how-to/ingress-configuration#https_redirect)
    and container-native load balancing through NEGs. Without a BackendConfig the health check
    probes the serving port's readiness path or ``/``
    (https://cloud.google.com/kubernetes-engine/docs/concepts/ingress#health_checks); the
    BackendConfig pins ``/livez``, which the server leaves open under access control."""
    mocks = _deploy("gke", {"ingress": {"host": HOST, "staticIpName": "ray-history-ip"}})
    ingress = _validated(mocks)
    annotations = ingress["metadata"]["annotations"]
    assert annotations["kubernetes.io/ingress.class"] == "gce" and "ingressClassName" not in ingress["spec"]
    assert annotations["networking.gke.io/managed-certificates"] == "historyserver"
    assert annotations["networking.gke.io/v1beta1.FrontendConfig"] == "historyserver"
    assert annotations["kubernetes.io/ingress.global-static-ip-name"] == "ray-history-ip"
    cert = mocks.one("kubernetes:networking.gke.io/v1:ManagedCertificate").inputs
    assert cert["spec"] == {"domains": [HOST]} and cert["metadata"]["name"] == "historyserver"
    redirect = mocks.one("kubernetes:networking.gke.io/v1beta1:FrontendConfig").inputs
    assert redirect["spec"]["redirectToHttps"] == {"enabled": True}
    backend = mocks.one("kubernetes:cloud.google.com/v1:BackendConfig").inputs["spec"]
    assert backend["healthCheck"] == {"type": "HTTP", "requestPath": "/livez", "port": 8080}
    assert "iap" not in backend
    service = mocks.one(SERVICE).inputs["metadata"]["annotations"]
    assert json.loads(service["cloud.google.com/backend-config"]) == {"default": "historyserver"}
    assert json.loads(service["cloud.google.com/neg"]) == {"ingress": True}
    # TLS ends at Google's load balancer: the browser sees HTTPS, cookies may be Secure.
    args = _server_args(mocks)
    assert "--secure-cookies" in args and _flag(args, "--allowed-hosts") == HOST


def test_the_health_check_path_is_open_under_access_control(tmp_path: Path) -> None:
    """Why the BackendConfig names ``/livez``: with access control on, ``/`` answers 401 (the load
    balancer's default probe would mark every pod unhealthy and serve 502) and the health path
    200, on the real server app with Kubernetes authentication."""
    from runtime.server.app import create_app
    from runtime.server.auth import build_access_control, parse_auth
    from tests.support.app_world import FakeLive, server_config, stored_session_a
    from tests.support.k8s_auth_stub import auth_api_stub

    plan = plan_ingress(HistoryServerIngress(host=HOST, flavour="gke"), name="historyserver", namespace="n", port=8080)
    [backend] = [o for o in plan.objects if o["kind"] == "BackendConfig"]
    check = backend["spec"]["healthCheck"]
    args = _args().server_args()
    assert check["port"] == CONTAINER_PORT == int(args[args.index("--port") + 1])
    config = server_config(tmp_path)
    store, _ = stored_session_a(config)
    with auth_api_stub() as stub:
        control = build_access_control(parse_auth("kubernetes", "kubernetes"), stub.api_client)
        client = create_app(config, store=store, live=FakeLive(), access=control).test_client()
        assert client.get("/").status_code == 401
        assert client.get(check["requestPath"]).status_code == 200


def test_load_balancer_timeouts_outlast_the_slowest_answer() -> None:
    """A cold index build may take ``--build-timeout`` and a live log stream stays open: Google's
    backend service times out after 30 s by default
    (https://cloud.google.com/load-balancing/docs/backend-service#timeout-setting), an ALB's idle
    timeout is 60 s (https://docs.aws.amazon.com/elasticloadbalancing/latest/application/edit-load-balancer-attributes.html#connection-idle-timeout),
    NGINX's proxy read timeout 60 s (https://kubernetes.github.io/ingress-nginx/user-guide/nginx-configuration/annotations/#custom-timeouts)."""
    build_timeout = float(BUILD_TIMEOUT.default or 0)
    assert REQUEST_TIMEOUT_SECONDS > build_timeout > 0
    gke = plan_ingress(HistoryServerIngress(host=HOST, flavour="gke"), name="h", namespace="n", port=8080)
    [backend] = [o for o in gke.objects if o["kind"] == "BackendConfig"]
    assert backend["spec"]["timeoutSec"] > build_timeout
    alb = plan_ingress(HistoryServerIngress(host=HOST, flavour="alb"), name="h", namespace="n", port=8080)
    attributes = alb.annotations["alb.ingress.kubernetes.io/load-balancer-attributes"]
    assert int(attributes.removeprefix("idle_timeout.timeout_seconds=")) > build_timeout
    aks = plan_ingress(
        HistoryServerIngress(host=HOST, flavour="app-routing", tls_secret_name="tls"), name="h", namespace="n", port=1
    )
    assert int(aks.annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) > build_timeout


def test_gke_network_policy_admits_googles_load_balancer() -> None:
    """With ``ingressFrom`` the NetworkPolicy must also admit Google's front ends and health
    checkers, 35.191.0.0/16 and 130.211.0.0/22
    (https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges): with NEGs they
    reach the pod directly, from no namespace, and a policy of namespaces alone answers 502."""
    mocks = _deploy("gke", {"ingress": {"host": HOST}, "ingressFrom": ["monitoring"]})
    _validated(mocks)
    sources = mocks.one(POLICY).inputs["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in sources
    assert {s["ipBlock"]["cidr"] for s in sources if "ipBlock" in s} == set(GOOGLE_LB_RANGES)


def test_alb_network_policy_admits_the_load_balancer_by_the_vpcs_cidrs() -> None:
    """An ALB with ``target-type: ip`` sends requests and health checks straight to pod IPs
    from its own addresses in the VPC's subnets
    (https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/how-it-works/); no
    namespace selector matches them, so where network policy is enforced (VPC CNI network
    policy, https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy.html, or
    Calico) a policy of namespaces alone leaves every target unhealthy. The policy admits the
    cluster's VPC CIDR blocks, primary and secondary (the mock VPC's 10.0.0.0/16 and
    100.64.0.0/16), looked up from the cluster (found by reviewer helper-54)."""
    mocks = _deploy("eks", {"ingress": {"host": HOST}, "ingressFrom": ["monitoring"]})
    _validated(mocks)
    ingress = mocks.one(INGRESS).inputs
    assert ingress["metadata"]["annotations"]["alb.ingress.kubernetes.io/target-type"] == "ip"
    sources = mocks.one(POLICY).inputs["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in sources
    assert [s["ipBlock"]["cidr"] for s in sources if "ipBlock" in s] == ["10.0.0.0/16", "100.64.0.0/16"]
    [vpc] = mocks.invokes_of("aws:ec2/getVpc:getVpc")
    assert vpc.args["id"] == "vpc-mock"
    # Without ingressFrom there is no policy, and nothing is looked up.
    mocks = _deploy("eks", {"ingress": {"host": HOST}})
    assert not mocks.of_type(POLICY) and not mocks.invokes_of("aws:ec2/getVpc:getVpc")


def test_alb_with_ingress_from_on_an_existing_cluster_needs_its_name() -> None:
    """The VPC is found through the EKS cluster: an existing cluster without
    ``aws.clusterName`` (IRSA needs none) stops at configuration, naming the key."""
    values = _stack("eks", {"ingress": {"host": HOST}, "ingressFrom": ["monitoring"]})
    values["aws"] = {**values["aws"], "identityMode": "irsa", "clusterName": ""}
    values["aws"]["oidcProviderArn"] = f"arn:aws:iam::{AWS_ACCOUNT}:oidc-provider/oidc.eks.example/id/X"
    values["aws"]["oidcIssuerUrl"] = "https://oidc.eks.example/id/X"
    with pytest.raises(ConfigError, match=r"aws\.clusterName.*alb ingress.*access\.ingressFrom"):
        parse_config(values)


def test_gke_ingress_waits_for_what_it_names() -> None:
    """GKE's controller rejects an Ingress or Service naming a BackendConfig, FrontendConfig or
    ManagedCertificate that does not exist yet (events "BackendConfig not found"): they are made
    first. Google's load balancer takes minutes, longer than Pulumi's 10-minute Ingress wait
    (https://www.pulumi.com/registry/packages/kubernetes/api-docs/networking/v1/ingress/)."""
    mocks = _deploy("gke", {"ingress": {"host": HOST}})
    ingress = mocks.one(INGRESS)
    service = mocks.one(SERVICE)
    for kind in ("backendconfig", "frontendconfig", "managedcertificate"):
        assert ingress.depends_on(f"history-{kind}"), kind
    assert service.depends_on("history-backendconfig")
    plan = plan_ingress(HistoryServerIngress(host=HOST, flavour="gke"), name="h", namespace="n", port=8080)
    assert plan.await_minutes > 10 and not plan.skip_await


def test_gke_iap_is_enabled_and_the_audience_comes_after_the_first_deploy() -> None:
    """``trustedHeader.kind: iap``: the BackendConfig turns IAP on (Google's managed OAuth client
    unless a custom one is named, https://cloud.google.com/iap/docs/custom-oauth-configuration).
    IAP's ``aud`` names the backend service GKE creates for this Ingress
    (https://cloud.google.com/iap/docs/signed-headers-howto#verifying_the_jwt_payload), which does
    not exist before the first deploy: until ``iapAudience`` is set the server does not accept the
    header (fail closed) and still authenticates Kubernetes tokens; with it, ``--trusted-header iap``."""
    pending = _deploy("gke", {"ingress": {"host": HOST}, "trustedHeader": {"kind": "iap"}})
    backend = pending.one("kubernetes:cloud.google.com/v1:BackendConfig").inputs["spec"]
    assert backend["iap"] == {"enabled": True}
    args = _server_args(pending)
    assert _flag(args, "--auth") == "kubernetes" and _flag(args, "--trusted-header") is None
    audience = "/projects/123456789/global/backendServices/987654321"
    ready = _deploy(
        "gke",
        {
            "ingress": {"host": HOST, "iapOauthSecretName": "iap-client"},
            "trustedHeader": {"kind": "iap", "iapAudience": audience},
        },
    )
    _validated(ready)
    backend = ready.one("kubernetes:cloud.google.com/v1:BackendConfig").inputs["spec"]
    assert backend["iap"] == {"enabled": True, "oauthclientCredentials": {"secretName": "iap-client"}}
    args = _server_args(ready)
    assert _flag(args, "--auth") == "trusted-header,kubernetes"
    settings = parse_front_door("iap", iap_audience=_flag(args, "--iap-audience"))
    assert settings is not None and settings.iap_audience == audience


def test_gke_managed_certificate_domain_limits() -> None:
    """A Google-managed certificate's domains are at most 63 characters, without wildcards
    (https://cloud.google.com/kubernetes-engine/docs/how-to/managed-certs#limitations): the stack
    says so before the deploy, and a certificate Secret of your own lifts the limit."""
    host = "a" * 56 + ".example.com"
    with pytest.raises(ConfigError, match="Google-managed certificate"):
        parse_config(base(access={"ingress": {"host": host}}))
    config = parse_config(base(access={"ingress": {"host": host, "tlsSecretName": "own-cert"}}))
    assert config.access.ingress is not None and config.access.ingress.flavour == "gke"
    with pytest.raises(ValueError, match="Google-managed certificate"):
        HistoryServerIngress(host="*.example.com", flavour="gke").validate()
    HistoryServerIngress(host="a" * 51 + ".example.com", flavour="gke").validate()  # 63: the limit itself


# --- EKS ---------------------------------------------------------------------------------


def test_eks_gets_an_https_alb_with_a_pinned_name_and_the_server_trusts_only_it() -> None:
    """An EKS stack's Ingress is the AWS Load Balancer Controller's (class ``alb``), HTTPS with the
    ACM certificate for the host (discovered when no ARN is given,
    https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/ingress/cert_discovery/),
    pods as targets, ``/livez`` as health check, and the ALB's own OIDC login
    (https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/ingress/annotations/#authentication).
    The ALB's ARN ends in an id AWS assigns when the controller makes it, after this deploy: the
    program pins the name it chose (unique per account and region) with the account and region
    it deploys to, and the real server parser accepts that ARN."""
    oidc = {
        "issuer": "https://idp.example.com",
        "authorizationEndpoint": "https://idp.example.com/authorize",
        "tokenEndpoint": "https://idp.example.com/token",
        "userInfoEndpoint": "https://idp.example.com/userinfo",
        "secretName": "alb-oidc",
    }
    mocks = _deploy("eks", {"ingress": {"host": HOST, "albOidc": oidc}, "trustedHeader": {"kind": "alb"}})
    ingress = _validated(mocks)
    assert ingress["spec"]["ingressClassName"] == "alb" and "tls" not in ingress["spec"]
    annotations = ingress["metadata"]["annotations"]
    prefix = "alb.ingress.kubernetes.io/"
    assert annotations[prefix + "target-type"] == "ip"
    assert annotations[prefix + "healthcheck-path"] == "/livez"
    assert json.loads(annotations[prefix + "listen-ports"]) == [{"HTTP": 80}, {"HTTPS": 443}]
    assert annotations[prefix + "ssl-redirect"] == "443"
    assert annotations[prefix + "auth-type"] == "oidc"
    assert json.loads(annotations[prefix + "auth-idp-oidc"]) == oidc
    name = annotations[prefix + "load-balancer-name"]
    args = _server_args(mocks)
    arn = _flag(args, "--alb-arn")
    region = stack_values("eks")["aws"]["region"]
    assert arn == f"arn:aws:elasticloadbalancing:{region}:{AWS_ACCOUNT}:loadbalancer/app/{name}/*"
    settings = parse_front_door("alb", alb_arn=arn)
    assert settings is not None and settings.alb_region == region
    assert settings.alb_signer_matches(arn.replace("*", "50dc6c495c0c9188"))
    assert not settings.alb_signer_matches(arn.replace(f"/{name}/", f"/{name}x/").replace("*", "50dc6c495c0c9188"))
    assert _flag(args, "--auth") == "trusted-header,kubernetes" and "--secure-cookies" in args


@pytest.mark.parametrize(
    ("name", "ok"),
    [("ray-history", True), ("a" * 32, True), ("a" * 33, False), ("internal-history", False), ("-history", False)],
)
def test_alb_names_follow_aws_rules(name: str, ok: bool) -> None:
    """An ALB's name: at most 32 characters, letters, digits and hyphens, no hyphen at either end,
    not starting with ``internal-``
    (https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_CreateLoadBalancer.html);
    the controller would otherwise fail to reconcile long after ``pulumi up`` returned."""
    raw = _stack("eks", {"ingress": {"host": HOST, "loadBalancerName": name}})
    if ok:
        assert parse_config(raw).access.ingress is not None
    else:
        with pytest.raises(ConfigError, match="load_balancer_name"):
            parse_config(raw)


def test_a_trusted_header_needs_a_load_balancer_the_stack_can_name() -> None:
    """Without ``albArn`` the server could not pin tokens to a load balancer: only an ALB the
    stack makes can be named; the same for IAP's audience."""
    with pytest.raises(ConfigError, match="albArn"):
        parse_config(_stack("eks", {"trustedHeader": {"kind": "alb"}}))
    with pytest.raises(ConfigError, match="iapAudience"):
        parse_config(base(access={"trustedHeader": {"kind": "iap"}}))
    with pytest.raises(ConfigError, match="trusted-header alone"):
        parse_config(
            base(access={"auth": ["trusted-header"], "trustedHeader": {"kind": "iap"}, "ingress": {"host": HOST}})
        )


# --- AKS ---------------------------------------------------------------------------------

VAULT_CERT = "https://rayhistory-kv.vault.azure.net/certificates/ray-history"


def test_aks_uses_application_routing_with_a_key_vault_certificate() -> None:
    """An AKS stack's Ingress is the application routing add-on's (class
    ``webapprouting.kubernetes.azure.com``); its certificate comes from Key Vault through
    ``kubernetes.azure.com/tls-cert-keyvault-uri`` into the Secret ``keyvault-<Ingress name>``
    (https://learn.microsoft.com/azure/aks/app-routing-dns-ssl); the NetworkPolicy admits the
    add-on's NGINX in ``app-routing-system``."""
    mocks = _deploy("aks", {"ingress": {"host": HOST, "keyVaultCertificateUri": VAULT_CERT}, "ingressFrom": ["ops"]})
    ingress = _validated(mocks)
    assert ingress["spec"]["ingressClassName"] == "webapprouting.kubernetes.azure.com"
    assert ingress["metadata"]["annotations"]["kubernetes.azure.com/tls-cert-keyvault-uri"] == VAULT_CERT
    assert ingress["spec"]["tls"] == [{"hosts": [HOST], "secretName": "keyvault-historyserver"}]
    sources = mocks.one(POLICY).inputs["spec"]["ingress"][0]["from"]
    names = {s["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for s in sources}
    assert names == {"ops", "app-routing-system"}
    assert "--secure-cookies" in _server_args(mocks)


def test_a_created_aks_cluster_has_the_application_routing_add_on() -> None:
    """The add-on is off unless enabled on the cluster (``ingressProfile.webAppRouting.enabled``,
    https://learn.microsoft.com/azure/aks/app-routing): an Ingress of its class would never get
    an address on a cluster the stack made without it."""
    values = created_cluster_values("aks")
    values["access"] = {"ingress": {"host": HOST, "keyVaultCertificateUri": VAULT_CERT}}
    mocks, _ = deploy_with(values)
    cluster = mocks.one("azure-native:containerservice:ManagedCluster").inputs
    assert cluster["ingressProfile"] == {"webAppRouting": {"enabled": True}}
    values = created_cluster_values("aks")
    mocks, _ = deploy_with(values)
    assert "ingressProfile" not in mocks.one("azure-native:containerservice:ManagedCluster").inputs


def test_aks_ingress_needs_a_certificate() -> None:
    """Browsers log in over HTTPS only (the OIDC redirect URL is https, cookies are Secure)."""
    raw = _stack("aks", {"ingress": {"host": HOST}})
    with pytest.raises(ConfigError, match=r"key_vault_certificate_uri: required"):
        parse_config(raw)


# --- every cloud -------------------------------------------------------------------------


def test_a_class_name_or_kind_keeps_the_generic_ingress_and_pulumi_does_not_wait_for_it() -> None:
    """``className`` names another controller (e.g. an existing NGINX): the Ingress is generic,
    and Pulumi does not wait for an address such a controller may never publish (NodePort setups:
    https://github.com/pulumi/pulumi-kubernetes/issues/1812), which would fail the deploy after
    10 minutes."""
    mocks = _deploy("gke", {"ingress": {"host": HOST, "className": "nginx", "tlsSecretName": "t"}})
    ingress = _validated(mocks)
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert not mocks.of_type("kubernetes:cloud.google.com/v1:BackendConfig")


@pytest.mark.parametrize(
    ("access", "message"),
    [
        ({"ingress": {"host": HOST, "flavour": "alb"}}, "flavour alb needs cloud aws"),
        ({"ingress": {"host": HOST, "flavour": "gke", "className": "nginx"}}, "sets its own class"),
        ({"ingress": {"host": HOST, "certificateArn": "arn:aws:acm:x"}}, "only with the alb flavour"),
        ({"ingress": {"host": HOST, "flavour": "magic"}}, "flavour"),
        ({"ingress": {"host": HOST, "albOidc": {"issuer": "https://i"}}}, "authorizationEndpoint"),
    ],
)
def test_bad_front_door_settings_name_the_key(access: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(base(access=access))

"""``managed`` metrics, the query side (ray_history_pulumi/metrics_proxies.py) under Pulumi mocks:
each cloud's query proxy, its identity and grant, the Grafana release, the server's URLs.

Core objects are validated with ``kubernetes_validate``; each cloud behaviour cites its doc.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from ray_history_pulumi import grafana
from ray_history_pulumi.metrics import RayMetrics, RayMetricsArgs
from ray_history_pulumi.metrics_managed import ManagedMetricsArgs
from ray_history_pulumi.metrics_proxies import (
    APS_QUERY_ACTIONS,
    GMP_FRONTEND_IMAGE,
    GRAFANA_CHART_VERSION,
    GRAFANA_HELM_REPO,
    SIGV4_PROXY_IMAGE,
    AwsIdentity,
    sigv4_proxy,
)
from tests.unit.infra.mocks import (
    AWS_ACCOUNT,
    AWS_REGION,
    GCP_PROJECT_NUMBER,
    RecordedResource,
    RecordingMocks,
    settled,
)
from tests.unit.infra.schema_validation import validate_k8s

RELEASE = "kubernetes:helm.sh/v3:Release"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
GRAFANA_URL = "http://ray-metrics-grafana.ray-metrics.svc.cluster.local:80"


def _deploy(args: RayMetricsArgs) -> tuple[dict[str, Any], list[RecordedResource]]:
    """The component's resources, and its server env with every Output resolved."""
    mocks = RecordingMocks.install()
    env: dict[str, Any] = {}

    @settled
    def run() -> pulumi.Output[None]:
        metrics = RayMetrics("metrics", args)
        return pulumi.Output.all(**metrics.server_env).apply(env.update)

    run()
    return env, [r for r in mocks.resources if r.custom]


def _managed(cloud: str, **kw: Any) -> RayMetricsArgs:
    return RayMetricsArgs(
        mode="managed", workload_namespaces=["default"], managed=ManagedMetricsArgs(cloud=cloud, **kw)
    )


def _k8s(resources: list[RecordedResource], typ: str, kind: str, name: str) -> dict[str, Any]:
    (obj,) = [r.inputs for r in resources if r.typ == typ and r.inputs["metadata"]["name"] == name]
    validate_k8s({"apiVersion": "apps/v1" if kind == "Deployment" else "v1", "kind": kind, **obj})
    return obj


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return {**container, "serviceAccountName": spec["serviceAccountName"]}


def _grafana(resources: list[RecordedResource]) -> dict[str, Any]:
    (release,) = [r.inputs for r in resources if r.typ == RELEASE]
    assert release["chart"] == "grafana"
    assert release["version"] == GRAFANA_CHART_VERSION
    assert release["repositoryOpts"]["repo"] == GRAFANA_HELM_REPO
    assert release["namespace"] == "ray-metrics"
    values: dict[str, Any] = release["values"]
    return values


def _datasource(values: dict[str, Any]) -> dict[str, Any]:
    (source,) = values["datasources"]["datasources.yaml"]["datasources"]
    return dict(source)


def test_gke_query_frontend_with_workload_identity_and_monitoring_viewer() -> None:
    """GMP's query frontend (https://cloud.google.com/stackdriver/docs/managed-prometheus/query):
    a Deployment + Service of ``gke.gcr.io/prometheus-engine/frontend`` with
    ``--query.project-id``; under Workload Identity Federation its Kubernetes service account needs
    ``roles/monitoring.viewer`` on the project
    (https://cloud.google.com/stackdriver/docs/managed-prometheus/query-api-ui, "Configure a service
    account for Workload Identity Federation for GKE"), granted to its ``principal://`` member
    (https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity)."""
    env, resources = _deploy(_managed("gcp"))
    deployment = _k8s(resources, DEPLOYMENT, "Deployment", "gmp-frontend")
    container = _container(deployment)
    assert container["image"] == GMP_FRONTEND_IMAGE
    assert "--query.project-id=mock-project" in container["args"]
    assert container["serviceAccountName"] == "gmp-frontend"
    service = _k8s(resources, SERVICE, "Service", "gmp-frontend")
    assert service["spec"]["ports"][0]["port"] == 9090
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    _k8s(resources, SERVICE_ACCOUNT, "ServiceAccount", "gmp-frontend")
    (grant,) = [r for r in resources if r.typ == "gcp:projects/iAMMember:IAMMember"]
    assert grant.inputs["role"] == "roles/monitoring.viewer"
    assert grant.inputs["project"] == "mock-project"
    assert grant.inputs["member"] == (
        f"principal://iam.googleapis.com/projects/{GCP_PROJECT_NUMBER}/locations/global/workloadIdentityPools/"
        "mock-project.svc.id.goog/subject/ns/ray-metrics/sa/gmp-frontend"
    )
    # The pool exists once the cluster does: the grant waits for the service account (k8s provider).
    sa_name = next(r.name for r in resources if r.typ == SERVICE_ACCOUNT)
    assert grant.depends_on(sa_name)
    frontend_url = "http://gmp-frontend.ray-metrics.svc.cluster.local:9090"
    assert env["PROMETHEUS_URL"] == frontend_url
    assert env["GRAFANA_URL"] == GRAFANA_URL
    assert env["GRAFANA_DASHBOARD_UIDS"] == ",".join(grafana.dashboard_uids())
    assert _datasource(_grafana(resources))["url"] == frontend_url


@pytest.mark.parametrize("mode", ["pod-identity", "irsa"])
def test_eks_sigv4_proxy_with_a_query_only_role_on_the_workspace(mode: str) -> None:
    """AMP's query API takes SigV4-signed requests only; AWS points at aws-sigv4-proxy for that
    (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-onboard-query-APIs.html), run as
    ``--name aps --region R --host aps-workspaces.R.amazonaws.com`` (https://github.com/awslabs/aws-sigv4-proxy),
    with ``aps:QueryMetrics``, ``aps:GetSeries``, ``aps:GetLabels``, ``aps:GetMetricMetadata``
    (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-onboard-query-grafana-7.3.html).
    The role is assumed like the history server's: EKS Pod Identity
    (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-association.html) or IRSA
    (https://docs.aws.amazon.com/eks/latest/userguide/associate-service-account-role.html).
    The query URL is ``/workspaces/WORKSPACE_ID/api/v1/query``
    (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-APIReference-QueryMetrics.html)."""
    issuer = "https://oidc.eks.us-east-1.amazonaws.com/id/ABC"
    identity = AwsIdentity(
        mode, oidc_provider_arn=f"arn:aws:iam::{AWS_ACCOUNT}:oidc-provider/x", oidc_issuer_url=issuer
    )
    env, resources = _deploy(_managed("aws", eks_cluster_name="ray", aws_identity=identity))
    workspace = next(r for r in resources if r.typ == "aws:amp/workspace:Workspace")
    deployment = _k8s(resources, DEPLOYMENT, "Deployment", "aps-query-proxy")
    container = _container(deployment)
    assert container["image"] == SIGV4_PROXY_IMAGE
    assert container["args"] == [
        "--name",
        "aps",
        "--region",
        AWS_REGION,
        "--host",
        f"aps-workspaces.{AWS_REGION}.amazonaws.com",
        "--port",
        ":8005",
    ]
    assert container["serviceAccountName"] == "aps-query-proxy"
    _k8s(resources, SERVICE, "Service", "aps-query-proxy")
    account = _k8s(resources, SERVICE_ACCOUNT, "ServiceAccount", "aps-query-proxy")
    (policy,) = [r for r in resources if r.typ == "aws:iam/rolePolicy:RolePolicy"]
    (statement,) = json.loads(policy.inputs["policy"])["Statement"]
    assert sorted(statement["Action"]) == sorted(APS_QUERY_ACTIONS)
    assert statement["Resource"] == workspace.state["arn"]
    (role,) = [r for r in resources if r.typ == "aws:iam/role:Role"]
    (trust,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    associations = [r for r in resources if r.typ == "aws:eks/podIdentityAssociation:PodIdentityAssociation"]
    if mode == "pod-identity":
        assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        (association,) = associations
        assert association.inputs["clusterName"] == "ray"
        assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == (
            "ray-metrics",
            "aps-query-proxy",
        )
        assert association.inputs["roleArn"] == role.state["arn"]
    else:
        assert associations == []
        assert trust["Condition"]["StringEquals"]["oidc.eks.us-east-1.amazonaws.com/id/ABC:sub"] == [
            "system:serviceaccount:ray-metrics:aps-query-proxy"
        ]
        assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == role.state["arn"]
    url = f"http://aps-query-proxy.ray-metrics.svc.cluster.local:8005/workspaces/{workspace.resource_id}"
    assert env["PROMETHEUS_URL"] == url
    assert env["GRAFANA_URL"] == GRAFANA_URL
    assert _datasource(_grafana(resources))["url"] == url


def test_aks_needs_the_prometheus_url_and_gets_grafana_on_it() -> None:
    """Azure Monitor's query endpoint needs an Entra token, and Microsoft's authorization proxy is
    retired (https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-authorization-proxy):
    no proxy is deployed, the URL is required and Grafana's datasource is that URL."""
    with pytest.raises(ValueError, match=r"^prometheus_url: required with mode managed on azure"):
        _managed("azure", azure_resource_group="rg", azure_location="westeurope").validate()
    args = _managed("azure", azure_resource_group="rg", azure_location="westeurope")
    args.prometheus_url = "http://my-proxy.monitoring:8080"
    env, resources = _deploy(args)
    assert not [r for r in resources if r.typ == DEPLOYMENT]
    assert env["PROMETHEUS_URL"] == "http://my-proxy.monitoring:8080"
    assert env["GRAFANA_URL"] == GRAFANA_URL
    assert _datasource(_grafana(resources))["url"] == "http://my-proxy.monitoring:8080"


def test_grafana_serves_under_grafana_embeddable_with_the_sidecar_and_the_named_datasource() -> None:
    """The history server proxies Grafana at /grafana/: Grafana serves from that sub-path
    (https://grafana.com/docs/grafana/latest/setup-grafana/configure-grafana/#serve_from_sub_path),
    allows embedding (``[security] allow_embedding``) and anonymous viewers; the chart's dashboard
    sidecar loads ConfigMaps labelled ``grafana_dashboard: "1"``
    (https://github.com/grafana/helm-charts/tree/main/charts/grafana#sidecar-for-dashboards)."""
    args = _managed("gcp")
    args.datasource = "GMP"
    env, resources = _deploy(args)
    values = _grafana(resources)
    ini = values["grafana.ini"]
    assert ini["server"] == {
        "root_url": "%(protocol)s://%(domain)s:%(http_port)s/grafana/",
        "serve_from_sub_path": True,
    }
    assert ini["security"]["allow_embedding"] is True
    assert ini["auth.anonymous"] == {"enabled": True, "org_role": "Viewer"}
    assert values["sidecar"]["dashboards"] == {"enabled": True, "label": "grafana_dashboard", "labelValue": "1"}
    assert values["fullnameOverride"] == "ray-metrics-grafana" and values["service"]["port"] == 80
    source = _datasource(values)
    assert (source["name"], source["type"], source["isDefault"]) == ("GMP", "prometheus", True)
    assert env["PROMETHEUS_DATASOURCE"] == "GMP"
    maps = [r.inputs for r in resources if r.typ == "kubernetes:core/v1:ConfigMap"]
    assert len(maps) == len(grafana.dashboards())
    assert all(m["metadata"]["namespace"] == "ray-metrics" for m in maps)


def test_given_urls_replace_the_proxy_and_the_grafana() -> None:
    args = _managed("gcp")
    args.prometheus_url = "http://prom.example:9090"
    args.grafana_url = "http://grafana.example"
    env, resources = _deploy(args)
    assert not [r for r in resources if r.typ in (RELEASE, DEPLOYMENT, "gcp:projects/iAMMember:IAMMember")]
    assert env["PROMETHEUS_URL"] == "http://prom.example:9090"
    assert env["GRAFANA_URL"] == "http://grafana.example"


def test_sigv4_proxy_role_and_policy_names_fit_aws_limits() -> None:
    """IAM role names are at most 64 characters and inline policy names 128
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html): a name too
    long for Pulumi's auto-name (logical name + 8) gets a shortened prefix; the program's own
    (``metrics-sigv4``) keeps its auto-names."""
    from tests.unit.infra.components.test_aws_names import iam_naming, names_over_limit

    for name, prefixed in (("metrics-sigv4", (False, False)), ("m" * 60, (True, False)), ("m" * 125, (True, True))):
        mocks = RecordingMocks.install()

        @settled
        def run(name: str = name) -> pulumi.Output[Any]:
            proxy = sigv4_proxy(
                name,
                namespace="ray-history",
                labels={},
                workspace_id="ws-1",
                workspace_arn=f"arn:aws:aps:{AWS_REGION}:{AWS_ACCOUNT}:workspace/ws-1",
                identity=AwsIdentity(cluster_name="ray"),
                cloud_provider=None,
                on_k8s=pulumi.ResourceOptions(),
                on_cloud=pulumi.ResourceOptions(),
            )
            return pulumi.Output.all(*(r.urn for r in proxy.resources))

        run()
        assert names_over_limit(mocks) == []
        assert iam_naming(mocks) == (2, {("Role", prefixed[0]), ("RolePolicy", prefixed[1])})


def test_gmp_frontend_project_lookup_waits_like_its_grant() -> None:
    """The ``getProject`` lookup of the query frontend waits for what its project grant waits for:
    ``on_cloud``'s dependencies and the service account (on a created cluster, its Kubernetes
    provider waits for the cluster, made after the project's APIs are enabled).

    GCP: ``projects.get`` and project IAM policy writes are Cloud Resource Manager methods
    (https://cloud.google.com/iam/docs/write-policy-client-libraries), off in a new project
    (https://cloud.google.com/service-usage/docs/enabled-service#default). An invoke does not wait
    for anything by itself: unchecked, the lookup ran at program start, before any API was enabled.
    """
    from ray_history_pulumi.gcp_services import GcpProjectServices, GcpProjectServicesArgs
    from ray_history_pulumi.metrics_proxies import gmp_frontend

    mocks = RecordingMocks.install()

    @settled
    def run() -> pulumi.Output[Any]:
        apis = GcpProjectServices("apis", GcpProjectServicesArgs(project="demo-proj"))
        proxy = gmp_frontend(
            "metrics-frontend",
            namespace="ray-metrics",
            labels={},
            cloud_provider=None,
            on_k8s=pulumi.ResourceOptions(),
            on_cloud=pulumi.ResourceOptions(depends_on=[apis]),
        )
        return pulumi.Output.all(*(r.urn for r in proxy.resources))

    run()
    (lookup,) = mocks.invokes_of("gcp:organizations/getProject:getProject")
    assert {"apis-cloudresourcemanager", "metrics-frontend-sa"} <= lookup.dependency_names()
    grant = mocks.one("gcp:projects/iAMMember:IAMMember")
    assert grant.depends_on("apis-cloudresourcemanager"), grant.dependency_names()

"""``metrics.mode`` through the whole program (infra/program.py) under mocks, per example stack."""

from __future__ import annotations

from typing import Any

import pytest

from ray_history_pulumi import grafana
from tests.unit.infra.metrics_schemas import validate_scrape_object
from tests.unit.infra.mocks import FAKE_KUBECONFIG, RecordedResource, RecordingMocks
from tests.unit.infra.test_config import stack_values
from tests.unit.infra.test_program import container_env, created_cluster_values, deploy_with, run_stack

MANAGED_URLS = {"prometheusUrl": "http://frontend.ray-metrics.svc:9090", "grafanaUrl": "http://grafana.ray-metrics.svc"}


def _deployment(mocks: RecordingMocks) -> RecordedResource:
    return next(
        r
        for r in mocks.resources
        if r.typ == "kubernetes:apps/v1:Deployment" and r.inputs["metadata"]["name"] == "historyserver"
    )


def _with_metrics(stack: str, metrics: dict[str, Any]) -> dict[str, Any]:
    values = stack_values(stack)
    values["kubeconfig"] = FAKE_KUBECONFIG
    values["metrics"] = metrics
    return values


def test_kind_stack_installs_kube_prometheus_stack_and_points_the_server_at_it() -> None:
    run = run_stack("kind")
    releases = {r.inputs["chart"]: r for r in run.mocks.of_type("kubernetes:helm.sh/v3:Release")}
    assert set(releases) == {"kuberay-operator", "kube-prometheus-stack"}
    kps = releases["kube-prometheus-stack"]
    assert kps.provider_name == "kubernetes"
    spec = kps.inputs["values"]["prometheus"]["prometheusSpec"]
    assert spec["retention"] == run.values["metrics"]["retention"]
    monitors = [r.inputs for r in run.mocks.resources if r.inputs.get("kind") in ("PodMonitor", "ServiceMonitor")]
    assert len(monitors) == 2
    for obj in monitors:
        validate_scrape_object(obj)
        assert obj["spec"]["namespaceSelector"]["matchNames"] == run.values["workloads"]["namespaces"]
    env = container_env(_deployment(run.mocks))
    assert env["PROMETHEUS_URL"] == "http://ray-metrics-prometheus.ray-metrics.svc.cluster.local:9090"
    assert env["GRAFANA_URL"] == "http://ray-metrics-grafana.ray-metrics.svc.cluster.local:80"
    assert env["GRAFANA_DASHBOARD_UIDS"] == ",".join(grafana.dashboard_uids())
    assert env["PROMETHEUS_DATASOURCE"] == "Prometheus"
    assert run.outputs["metrics"]["mode"] == "kube-prometheus-stack"
    assert run.outputs["metrics"]["PROMETHEUS_URL"] == env["PROMETHEUS_URL"]


@pytest.mark.parametrize("stack", ["gke", "eks", "aks"])
def test_cloud_stacks_have_metrics_off_unless_asked(stack: str) -> None:
    run = run_stack(stack)
    assert run.outputs["metrics"] == {"mode": "off"}
    assert not {"PROMETHEUS_URL", "GRAFANA_URL"} & set(container_env(_deployment(run.mocks)))
    assert [r.inputs["chart"] for r in run.mocks.of_type("kubernetes:helm.sh/v3:Release")] == ["kuberay-operator"]


@pytest.mark.parametrize(
    ("stack", "cloud_types", "scrape_kind"),
    [
        ("gke", set(), "PodMonitoring"),
        ("eks", {"aws:amp/workspace:Workspace", "aws:amp/scraper:Scraper", "aws:eks/accessEntry:AccessEntry"}, None),
        ("aks", {"azure-native:monitor:AzureMonitorWorkspace"}, "PodMonitor"),
    ],
)
def test_managed_metrics_on_each_cloud(stack: str, cloud_types: set[str], scrape_kind: str | None) -> None:
    mocks, outputs = deploy_with(_with_metrics(stack, {"mode": "managed", **MANAGED_URLS}))
    types = {r.typ for r in mocks.resources}
    assert cloud_types <= types, f"missing {cloud_types - types}"
    package = {"gke": "gcp", "eks": "aws", "aks": "azure-native"}[stack]
    for r in mocks.resources:
        if r.typ in cloud_types:
            assert r.provider_name == package, f"{r.typ} without the stack's {package} provider"
    if scrape_kind is not None:
        scrape = [r.inputs for r in mocks.resources if r.inputs.get("kind") == scrape_kind]
        assert scrape
        for obj in scrape:
            validate_scrape_object(obj)
    for token, _, provider in mocks.calls:
        if token.startswith("aws:eks/getCluster"):
            assert "::aws::" in provider
    dashboards = [
        r
        for r in mocks.of_type("kubernetes:core/v1:ConfigMap")
        if "grafana_dashboard" in r.inputs["metadata"].get("labels", {})
    ]
    assert len(dashboards) == len(grafana.dashboards())
    env = container_env(_deployment(mocks))
    assert env["PROMETHEUS_URL"] == MANAGED_URLS["prometheusUrl"]
    assert env["GRAFANA_URL"] == MANAGED_URLS["grafanaUrl"]
    assert outputs["metrics"]["mode"] == "managed"


def test_external_metrics_install_nothing() -> None:
    mocks, _ = deploy_with(_with_metrics("gke", {"mode": "external", "prometheusUrl": "https://prom.example.com"}))
    assert [r.inputs["chart"] for r in mocks.of_type("kubernetes:helm.sh/v3:Release")] == ["kuberay-operator"]
    assert not mocks.of_type("kubernetes:core/v1:ConfigMap") or all(
        "grafana_dashboard" not in r.inputs["metadata"].get("labels", {})
        for r in mocks.of_type("kubernetes:core/v1:ConfigMap")
    )
    env = container_env(_deployment(mocks))
    assert env["PROMETHEUS_URL"] == "https://prom.example.com"
    assert "GRAFANA_URL" not in env


def test_a_created_gke_cluster_has_managed_collection_on() -> None:
    """GKE: managed collection must be on for PodMonitorings to be scraped
    (https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed#enable-mgdcoll-gke);
    the program sets it rather than rely on the version's default."""
    values = created_cluster_values("gke")
    values["metrics"] = {"mode": "managed", **MANAGED_URLS}
    mocks, _ = deploy_with(values)
    cluster = mocks.one("gcp:container/cluster:Cluster")
    assert cluster.inputs["monitoringConfig"]["managedPrometheus"]["enabled"] is True


def test_a_created_eks_cluster_is_what_the_scraper_reads() -> None:
    values = created_cluster_values("eks")
    values["metrics"] = {"mode": "managed", **MANAGED_URLS}
    mocks, _ = deploy_with(values)
    cluster = mocks.one("aws:eks/cluster:Cluster")
    (entry,) = mocks.of_type("aws:eks/accessEntry:AccessEntry")
    assert entry.inputs["clusterName"] == cluster.state["name"]
    calls = [args for token, args, _ in mocks.calls if token == "aws:eks/getCluster:getCluster"]
    assert calls and all(args["name"] == cluster.state["name"] for args in calls)


@pytest.mark.parametrize(
    ("stack", "proxy", "cloud_types", "url_prefix"),
    [
        (
            "gke",
            "gmp-frontend",
            {"gcp:projects/iAMMember:IAMMember"},
            "http://gmp-frontend.ray-metrics.svc.cluster.local:9090",
        ),
        (
            "eks",
            "aps-query-proxy",
            {"aws:iam/rolePolicy:RolePolicy", "aws:eks/podIdentityAssociation:PodIdentityAssociation"},
            "http://aps-query-proxy.ray-metrics.svc.cluster.local:8005/workspaces/",
        ),
    ],
)
def test_managed_without_urls_deploys_the_query_proxy_and_grafana(
    stack: str, proxy: str, cloud_types: set[str], url_prefix: str
) -> None:
    """No manual step on GKE and EKS: the program runs the cloud's query proxy with the stack's
    cloud provider and a Grafana reading it, and the server's URLs are theirs (metrics_proxies.py)."""
    mocks, outputs = deploy_with(_with_metrics(stack, {"mode": "managed"}))
    package = {"gke": "gcp", "eks": "aws"}[stack]
    for typ in cloud_types:
        made = [r for r in mocks.of_type(typ) if r.name.startswith("metrics-")]
        assert made, f"missing the proxy's {typ}"
        assert all(r.provider_name == package for r in made), f"{typ} without the stack's {package} provider"
    deployments = {r.inputs["metadata"]["name"] for r in mocks.of_type("kubernetes:apps/v1:Deployment")}
    assert proxy in deployments
    charts = sorted(r.inputs["chart"] for r in mocks.of_type("kubernetes:helm.sh/v3:Release"))
    assert charts == ["grafana", "kuberay-operator"]
    env = container_env(_deployment(mocks))
    assert env["PROMETHEUS_URL"].startswith(url_prefix)
    assert env["GRAFANA_URL"] == "http://ray-metrics-grafana.ray-metrics.svc.cluster.local:80"
    assert outputs["metrics"]["PROMETHEUS_URL"] == env["PROMETHEUS_URL"]


def test_managed_metrics_on_an_eks_cluster_without_access_entries_stop_before_the_entry() -> None:
    """The scraper reads the cluster as the user an access entry maps its role to, and EKS
    makes access entries only on clusters whose authentication mode includes the API
    (https://docs.aws.amazon.com/eks/latest/userguide/grant-k8s-access.html#set-cam); a cluster
    created through the EKS API or CloudFormation defaults to ``CONFIG_MAP``
    (https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessConfigRequest.html).
    The mocks make any entry, so the program must check the existing cluster's mode itself
    and say how to change it."""
    from tests.unit.infra.mocks import _default_calls

    lookup = _default_calls()["aws:eks/getCluster:getCluster"]

    def config_map_only(args: dict[str, Any]) -> dict[str, Any]:
        return {**lookup(args), "accessConfigs": [{"authenticationMode": "CONFIG_MAP"}]}

    values = _with_metrics("eks", {"mode": "managed", **MANAGED_URLS})
    with pytest.raises(Exception, match=r"authentication mode CONFIG_MAP.*update-cluster-config"):
        deploy_with(values, {"aws:eks/getCluster:getCluster": config_map_only})
    mocks, _ = deploy_with(values)  # the mocks' cluster: API_AND_CONFIG_MAP
    assert mocks.of_type("aws:eks/accessEntry:AccessEntry")

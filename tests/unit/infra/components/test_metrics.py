"""ray_history_pulumi/metrics.py under Pulumi mocks: the store, scrape objects and dashboards per mode.

Every scrape object is validated against the closed schema of its CRD
(``tests/unit/infra/metrics_schemas.py``), every core object with ``kubernetes_validate``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

from ray_history_pulumi import grafana
from ray_history_pulumi.metrics import KPS_CHART_VERSION, KPS_HELM_REPO, RayMetrics, RayMetricsArgs
from ray_history_pulumi.metrics_managed import AMP_COLLECTOR_USER, ManagedMetricsArgs
from tests.unit.infra.metrics_schemas import validate_scrape_object
from tests.unit.infra.mocks import AWS_ACCOUNT, AWS_REGION, RecordedResource, RecordingMocks, settled
from tests.unit.infra.schema_validation import validate_k8s

RELEASE = "kubernetes:helm.sh/v3:Release"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
EKS_ARN = f"arn:aws:eks:{AWS_REGION}:{AWS_ACCOUNT}:cluster/ray"


def _get_cluster(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": args["name"],
        "arn": EKS_ARN,
        "vpcConfig": {"subnetIds": ["subnet-a", "subnet-b"], "clusterSecurityGroupId": "sg-cluster"},
        "accessConfigs": [{"authenticationMode": "API"}],  # access entries allowed
    }


def _deploy(args: RayMetricsArgs) -> tuple[RayMetrics, list[RecordedResource]]:
    mocks = RecordingMocks.install({"aws:eks/getCluster:getCluster": _get_cluster})
    made: list[RayMetrics] = []

    @settled
    def run() -> None:
        made.append(RayMetrics("metrics", args))

    run()
    return made[0], [r for r in mocks.resources if r.custom]


def _scrape_objects(resources: list[RecordedResource]) -> list[dict[str, Any]]:
    return [r.inputs for r in resources if r.inputs.get("kind") in ("PodMonitor", "ServiceMonitor", "PodMonitoring")]


def _kps(**kw: Any) -> RayMetricsArgs:
    return RayMetricsArgs(mode="kube-prometheus-stack", workload_namespaces=["default", "team-a"], **kw)


def test_kube_prometheus_stack_release_monitors_and_dashboards() -> None:
    metrics, resources = _deploy(_kps(storage_class="standard-rwo"))
    (release,) = [r for r in resources if r.typ == RELEASE]
    assert release.inputs["chart"] == "kube-prometheus-stack"
    assert release.inputs["version"] == KPS_CHART_VERSION
    assert release.inputs["repositoryOpts"]["repo"] == KPS_HELM_REPO
    values = release.inputs["values"]
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["retention"] == "90d"
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["resources"]["requests"]["storage"] == "50Gi"
    assert claim["storageClassName"] == "standard-rwo"
    assert values["grafana"]["sidecar"]["dashboards"] == {
        "enabled": True,
        "label": "grafana_dashboard",
        "labelValue": "1",
    }
    assert values["grafana"]["grafana.ini"]["security"]["allow_embedding"] is True
    # The history server proxies Grafana at /grafana/ (runtime/server/views/grafana.py): Grafana
    # serves from that sub-path (https://grafana.com/docs/grafana/latest/setup-grafana/configure-grafana/#serve_from_sub_path).
    server = values["grafana"]["grafana.ini"]["server"]
    assert server["root_url"].endswith("/grafana/") and server["serve_from_sub_path"] is True
    # Nothing of the chart touches kube-system or the nodes (GKE Autopilot refuses both).
    assert values["nodeExporter"] == {"enabled": False}
    assert values["prometheusOperator"]["kubeletService"] == {"enabled": False}
    for part in ("kubelet", "kubeControllerManager", "kubeScheduler", "kubeProxy", "kubeEtcd", "coreDns"):
        assert values[part] == {"enabled": False}, part

    monitors = {obj["kind"]: obj for obj in _scrape_objects(resources)}
    assert set(monitors) == {"PodMonitor", "ServiceMonitor"}
    for obj in monitors.values():
        validate_scrape_object(obj)
        # The chart's Prometheus selects monitors by the release label.
        assert obj["metadata"]["labels"]["release"] == "ray-metrics"
        assert obj["spec"]["namespaceSelector"] == {"matchNames": ["default", "team-a"]}
    head = monitors["ServiceMonitor"]["spec"]
    assert head["selector"] == {"matchLabels": {"ray.io/node-type": "head"}}
    assert [e["port"] for e in head["endpoints"]] == ["metrics", "as-metrics", "dash-metrics"]
    workers = monitors["PodMonitor"]["spec"]
    assert workers["selector"]["matchExpressions"] == [
        {"key": "ray.io/node-type", "operator": "In", "values": ["worker"]}
    ]
    (endpoint,) = workers["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["interval"] == "15s"
    assert endpoint["relabelings"] == [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_label_ray_io_cluster"],
            "targetLabel": "ray_io_cluster",
        }
    ]
    # Monitors and dashboards wait for the release (its CRDs, its namespace).
    for r in resources:
        if r.typ != RELEASE:
            assert r.depends_on(release.name), r.name

    maps = [r.inputs for r in resources if r.typ == CONFIG_MAP]
    assert len(maps) == len(grafana.dashboards()) == 8
    uids = set()
    for obj in maps:
        validate_k8s({"apiVersion": "v1", "kind": "ConfigMap", **obj})
        assert obj["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert obj["metadata"]["namespace"] == "ray-metrics"
        ((file_name, content),) = obj["data"].items()
        uids.add(json.loads(content)["uid"])
        assert len(content.encode()) < 256 * 1024, file_name
    assert uids == set(grafana.dashboard_uids())

    assert metrics.server_env == {
        "PROMETHEUS_URL": "http://ray-metrics-prometheus.ray-metrics.svc.cluster.local:9090",
        "GRAFANA_URL": "http://ray-metrics-grafana.ray-metrics.svc.cluster.local:80",
        "GRAFANA_DASHBOARD_UIDS": ",".join(grafana.dashboard_uids()),
        "PROMETHEUS_DATASOURCE": "Prometheus",
    }


def test_the_schemas_catch_a_misspelt_field() -> None:
    _, resources = _deploy(_kps())
    for obj in _scrape_objects(resources):
        broken = copy.deepcopy(obj)
        broken["spec"]["namespaceSelectors"] = broken["spec"].pop("namespaceSelector")
        with pytest.raises(jsonschema.ValidationError):
            validate_scrape_object(broken)


def test_off_installs_nothing_and_gives_the_server_nothing() -> None:
    metrics, resources = _deploy(RayMetricsArgs())
    assert resources == []
    assert metrics.server_env == {}


def test_external_installs_nothing_and_passes_the_urls() -> None:
    metrics, resources = _deploy(
        RayMetricsArgs(
            mode="external",
            prometheus_url="https://prom.example.com/",
            grafana_url="http://grafana.monitoring:3000",
            datasource="Mimir",
        )
    )
    assert resources == []
    assert metrics.server_env["PROMETHEUS_URL"] == "https://prom.example.com"
    assert metrics.server_env["GRAFANA_URL"] == "http://grafana.monitoring:3000"
    assert metrics.server_env["PROMETHEUS_DATASOURCE"] == "Mimir"
    assert metrics.server_env["GRAFANA_DASHBOARD_UIDS"].startswith("rayDefaultDashboard,")


def test_external_without_grafana_sends_no_dashboard_uids() -> None:
    metrics, _ = _deploy(RayMetricsArgs(mode="external", prometheus_url="http://prom:9090"))
    assert set(metrics.server_env) == {"PROMETHEUS_URL", "PROMETHEUS_DATASOURCE"}


@pytest.mark.parametrize(
    ("kw", "parameter"),
    [
        ({"mode": "prometheus"}, "mode"),
        ({"mode": "external"}, "prometheus_url"),
        ({"mode": "external", "prometheus_url": "prom:9090"}, "prometheus_url"),
        ({"mode": "external", "prometheus_url": "http://p", "grafana_url": "ftp://g"}, "grafana_url"),
        ({"mode": "kube-prometheus-stack", "retention": "90 days"}, "retention"),
        ({"mode": "kube-prometheus-stack", "storage_size": "50"}, "storage_size"),
        ({"mode": "kube-prometheus-stack", "scrape_interval": "0s"}, "scrape_interval"),
        ({"mode": "managed", "prometheus_url": "http://p"}, "managed"),
        (
            {"mode": "managed", "prometheus_url": "http://p", "managed": ManagedMetricsArgs(cloud="aws")},
            "managed.eks_cluster_name",
        ),
    ],
)
def test_bad_args_name_the_parameter(kw: dict[str, Any], parameter: str) -> None:
    with pytest.raises(ValueError, match=f"^{parameter}"):
        RayMetricsArgs(**kw).validate()


def _managed(cloud: str, **kw: Any) -> RayMetricsArgs:
    return RayMetricsArgs(
        mode="managed",
        workload_namespaces=["default", "team-a"],
        prometheus_url="http://frontend.ray-metrics.svc:9090",
        grafana_url="http://grafana.ray-metrics.svc",
        managed=ManagedMetricsArgs(cloud=cloud, **kw),
    )


def _dashboards_provisioned(resources: list[RecordedResource]) -> None:
    maps = [r.inputs for r in resources if r.typ == CONFIG_MAP]
    assert {json.loads(next(iter(m["data"].values())))["uid"] for m in maps} == set(grafana.dashboard_uids())


def test_managed_gke_one_pod_monitoring_per_workload_namespace() -> None:
    """Google Cloud Managed Service for Prometheus: "PodMonitoring ... scoped to pods within the
    PodMonitoring's namespace" (https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed),
    so each workload namespace gets its own; ``targetLabels.fromPod`` copies a pod label onto the series."""
    metrics, resources = _deploy(_managed("gcp"))
    objects = _scrape_objects(resources)
    assert sorted(o["metadata"]["namespace"] for o in objects) == ["default", "team-a"]
    for obj in objects:
        validate_scrape_object(obj)
        assert obj["spec"]["targetLabels"]["fromPod"] == [{"from": "ray.io/cluster", "to": "ray_io_cluster"}]
        assert obj["spec"]["endpoints"] == [{"port": "metrics", "interval": "15s"}]
    _dashboards_provisioned(resources)
    assert metrics.server_env["PROMETHEUS_URL"] == "http://frontend.ray-metrics.svc:9090"


def test_managed_eks_workspace_scraper_and_its_kubernetes_access() -> None:
    """Amazon Managed Service for Prometheus managed collector
    (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html): the scraper
    reads the cluster from the cluster's subnets, and its role is mapped to the Kubernetes user
    ``aps-collector-user``, bound to a ClusterRole that may list pods and read ``/metrics``."""
    _, resources = _deploy(_managed("aws", eks_cluster_name="ray"))
    by_type = {r.typ: r for r in resources}
    workspace = by_type["aws:amp/workspace:Workspace"]
    scraper = by_type["aws:amp/scraper:Scraper"]
    assert scraper.inputs["source"]["eks"] == {
        "clusterArn": EKS_ARN,
        "subnetIds": ["subnet-a", "subnet-b"],
        "securityGroupIds": ["sg-cluster"],
    }
    assert scraper.inputs["destination"]["amp"]["workspaceArn"] == workspace.state["arn"]
    config = yaml.safe_load(scraper.inputs["scrapeConfiguration"])
    (job,) = config["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["default", "team-a"]}}]
    relabels = {(r["action"], r.get("target_label", r["source_labels"][0])): r for r in job["relabel_configs"]}
    assert relabels[("keep", "__meta_kubernetes_pod_label_ray_io_node_type")]["regex"] == "head|worker"
    assert relabels[("replace", "ray_io_cluster")]["source_labels"] == ["__meta_kubernetes_pod_label_ray_io_cluster"]
    entry = by_type["aws:eks/accessEntry:AccessEntry"]
    assert entry.inputs["userName"] == AMP_COLLECTOR_USER
    assert entry.inputs["clusterName"] == "ray"
    # The service-linked role's ARN carries a path; the access entry names the role without it.
    assert scraper.state["roleArn"].startswith(f"arn:aws:iam::{AWS_ACCOUNT}:role/aws-service-role/")
    assert entry.inputs["principalArn"] == (
        f"arn:aws:iam::{AWS_ACCOUNT}:role/AWSServiceRoleForAmazonPrometheusScraper_metrics-scraper"
    )
    role = by_type["kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"]
    binding = by_type["kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"]
    for obj, kind in ((role, "ClusterRole"), (binding, "ClusterRoleBinding")):
        validate_k8s({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, **obj.inputs})
    assert {"nonResourceURLs": ["/metrics"], "verbs": ["get"]} in role.inputs["rules"]
    assert binding.inputs["subjects"] == [
        {"kind": "User", "name": AMP_COLLECTOR_USER, "apiGroup": "rbac.authorization.k8s.io"}
    ]
    _dashboards_provisioned(resources)


def test_managed_aks_workspace_and_ama_metrics_pod_monitor() -> None:
    """Azure Monitor managed Prometheus reads PodMonitors of group ``azmonitoring.coreos.com/v1``
    (https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-metrics-scrape-crd),
    not prometheus-operator's ``monitoring.coreos.com``, which its collector ignores."""
    _, resources = _deploy(_managed("azure", azure_resource_group="rg", azure_location="westeurope"))
    workspace = next(r for r in resources if r.typ == "azure-native:monitor:AzureMonitorWorkspace")
    assert workspace.inputs["location"] == "westeurope"
    (monitor,) = _scrape_objects(resources)
    validate_scrape_object(monitor)
    assert monitor["apiVersion"] == "azmonitoring.coreos.com/v1"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["default", "team-a"]}
    assert monitor["spec"]["selector"]["matchExpressions"][0]["values"] == ["head", "worker"]
    _dashboards_provisioned(resources)

"""AKS with ``metrics.mode: managed``: the PodMonitor's CRD must exist before it is applied.

Azure: "The enablement of Managed Prometheus automatically deploys the custom resource
definitions (CRD) for pod monitors and service monitors" (group ``azmonitoring.coreos.com``),
https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-metrics-scrape-crd. Without
the add-on, ``kubectl apply`` of a ``PodMonitor`` of ``azmonitoring.coreos.com/v1`` fails with
``no matches for kind "PodMonitor"``, and so did the first ``pulumi up`` of a stack creating its
cluster.

Microsoft's enablement templates
(https://learn.microsoft.com/azure/azure-monitor/containers/kubernetes-monitoring-enable-arm,
https://learn.microsoft.com/azure/azure-monitor/containers/kubernetes-monitoring-enable-terraform;
https://github.com/Azure/prometheus-collector/tree/main/AddonBicepTemplate and
AddonTerraformTemplate) turn the add-on on with ``azureMonitorProfile.metrics.enabled`` and link
the cluster to the Azure Monitor workspace with a data collection endpoint (kind Linux), a data
collection rule (the ``Microsoft-PrometheusMetrics`` stream of a ``prometheusForwarder`` data
source flowing to a ``monitoringAccounts`` destination, the workspace) and the rule's association
with the cluster; ``az aks update --enable-azure-monitor-metrics`` creates the same three
(https://learn.microsoft.com/azure/azure-monitor/containers/kubernetes-monitoring-enable-cli).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from infra import platform
from ray_history_pulumi.metrics_managed import AZURE_POD_MONITOR_CRD
from tests.unit.infra.kube_stub import JsonApiHandler, stub_kubeconfig
from tests.unit.infra.metrics_schemas import validate_scrape_object
from tests.unit.infra.mocks import FAKE_KUBECONFIG, RecordingMocks
from tests.unit.infra.test_config import stack_values
from tests.unit.infra.test_program import created_cluster_values, deploy_with

POD_MONITOR = "kubernetes:azmonitoring.coreos.com/v1:PodMonitor"
CLUSTER = "azure-native:containerservice:ManagedCluster"
WORKSPACE = "azure-native:monitor:AzureMonitorWorkspace"
DCE = "azure-native:monitor:DataCollectionEndpoint"
DCR = "azure-native:monitor:DataCollectionRule"
DCRA = "azure-native:monitor:DataCollectionRuleAssociation"
METRICS = {"mode": "managed", "prometheusUrl": "http://my-proxy.ray-metrics.svc:8080"}


def _created() -> RecordingMocks:
    values = created_cluster_values("aks")
    values["metrics"] = dict(METRICS)
    mocks, _ = deploy_with(values)
    return mocks


def _existing(monkeypatch: pytest.MonkeyPatch, addon_on: bool) -> RecordingMocks:
    asked: list[str] = []

    def addon(kubeconfig: str, context: str | None) -> bool:
        asked.append(kubeconfig)
        return addon_on

    monkeypatch.setattr(platform, "azure_monitor_addon_on", addon)
    values = stack_values("aks")
    values["kubeconfig"] = FAKE_KUBECONFIG
    values["metrics"] = dict(METRICS)
    mocks, _ = deploy_with(values)
    assert asked == [FAKE_KUBECONFIG], "the program did not ask the existing cluster for the add-on's CRD"
    return mocks


def test_created_aks_cluster_installs_the_crd_the_podmonitor_needs() -> None:
    """The created ManagedCluster has the add-on on, so its CRDs exist, and the PodMonitor waits
    for the cluster (the reviewed first-deploy failure: no ``azureMonitorProfile``)."""
    mocks = _created()
    cluster = mocks.one(CLUSTER)
    assert cluster.inputs.get("azureMonitorProfile") == {"metrics": {"enabled": True}}
    (monitor,) = mocks.of_type(POD_MONITOR)
    validate_scrape_object({"apiVersion": "azmonitoring.coreos.com/v1", "kind": "PodMonitor", **monitor.inputs})
    association = mocks.one(DCRA)
    assert monitor.depends_on(cluster.name), monitor.dependency_names()
    assert monitor.depends_on(association.name), monitor.dependency_names()


def test_created_aks_cluster_is_linked_to_the_workspace_as_microsofts_templates_do() -> None:
    mocks = _created()
    cluster, workspace = mocks.one(CLUSTER), mocks.one(WORKSPACE)
    endpoint, rule, association = mocks.one(DCE), mocks.one(DCR), mocks.one(DCRA)
    for r in (workspace, endpoint, rule, association):
        assert r.provider_name == "azure-native", f"{r.typ} without the stack's azure-native provider"
    assert endpoint.inputs["kind"] == "Linux"
    assert rule.inputs["kind"] == "Linux"
    assert rule.inputs["dataCollectionEndpointId"] == endpoint.resource_id
    assert rule.inputs["location"] == workspace.inputs["location"] == endpoint.inputs["location"]
    (source,) = rule.inputs["dataSources"]["prometheusForwarder"]
    assert source["streams"] == ["Microsoft-PrometheusMetrics"]
    (destination,) = rule.inputs["destinations"]["monitoringAccounts"]
    assert destination["accountResourceId"] == workspace.resource_id
    (flow,) = rule.inputs["dataFlows"]
    assert flow == {"streams": ["Microsoft-PrometheusMetrics"], "destinations": [destination["name"]]}
    assert association.inputs["resourceUri"] == cluster.resource_id
    assert association.inputs["dataCollectionRuleId"] == rule.resource_id
    assert association.depends_on(cluster.name) and association.depends_on(rule.name)


def test_created_aks_cluster_without_managed_metrics_has_no_addon() -> None:
    values = created_cluster_values("aks")
    mocks, _ = deploy_with(values)
    assert "azureMonitorProfile" not in mocks.one(CLUSTER).inputs
    assert not [r for r in mocks.resources if r.typ in (WORKSPACE, DCE, DCR, DCRA)]


def test_existing_aks_cluster_without_the_addon_gets_no_pod_monitor(monkeypatch: pytest.MonkeyPatch) -> None:
    """An existing cluster is its owner's: the program cannot turn the add-on on, so it leaves the
    PodMonitor out (with a warning naming ``az aks update --enable-azure-monitor-metrics``) instead
    of failing the update; the workspace is still created for the owner to link."""
    mocks = _existing(monkeypatch, addon_on=False)
    assert not mocks.of_type(POD_MONITOR)
    assert mocks.of_type(WORKSPACE)
    assert not [r for r in mocks.resources if r.typ in (DCE, DCR, DCRA)], "the stack does not own the cluster"


def test_existing_aks_cluster_with_the_addon_gets_the_pod_monitor(monkeypatch: pytest.MonkeyPatch) -> None:
    mocks = _existing(monkeypatch, addon_on=True)
    (monitor,) = mocks.of_type(POD_MONITOR)
    assert monitor.inputs["metadata"]["name"] == "ray-nodes"


class _CrdApi(JsonApiHandler):
    present: ClassVar[bool] = False
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's dispatch name
        self.seen.append(self.path)
        expected = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{AZURE_POD_MONITOR_CRD}"
        body: dict[str, Any]
        if self.present and self.path.split("?", 1)[0] == expected:
            code, body = 200, {"kind": "CustomResourceDefinition", "metadata": {"name": AZURE_POD_MONITOR_CRD}}
        else:
            code, body = 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
        self.send_json(code, body)


@pytest.fixture
def crd_kubeconfig() -> Iterator[str]:
    _CrdApi.present, _CrdApi.seen = False, []
    with stub_kubeconfig(_CrdApi) as kubeconfig:
        yield kubeconfig


def test_addon_check_reads_the_crd_the_addon_installs(crd_kubeconfig: str) -> None:
    assert platform.azure_monitor_addon_on(crd_kubeconfig, None) is False
    _CrdApi.present = True
    assert platform.azure_monitor_addon_on(crd_kubeconfig, "stub") is True
    assert _CrdApi.seen[0].startswith(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{AZURE_POD_MONITOR_CRD}"
    )


def test_addon_check_of_a_cluster_it_cannot_ask_leaves_it_to_the_provider() -> None:
    assert platform.azure_monitor_addon_on(FAKE_KUBECONFIG, None) is True

"""``managed`` metrics: the cloud's managed Prometheus collects Ray's metrics.

* GKE: Google Cloud Managed Service for Prometheus with managed collection (on by default on
  GKE 1.27+ and Autopilot; :class:`~ray_history_pulumi.gke_cluster.GkeCluster` turns it on
  explicitly). One ``PodMonitoring`` per workload namespace: a PodMonitoring selects pods of
  its own namespace only.
* EKS: an Amazon Managed Service for Prometheus workspace and an AWS managed scraper (agentless
  collection) reading the cluster's Ray pods; the scraper's service-linked role is given
  read access to pods as Kubernetes user ``aps-collector-user`` (a ClusterRole, its binding,
  and an EKS access entry), as
  https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html says.
* AKS: an Azure Monitor workspace and a ``PodMonitor`` of the managed add-on's own API group
  (``azmonitoring.coreos.com/v1``), which its ``ama-metrics`` collector reads. That CRD exists
  only once the add-on is on: "The enablement of Managed Prometheus automatically deploys the
  custom resource definitions (CRD) for pod monitors and service monitors"
  (https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-metrics-scrape-crd).
  On a cluster the stack creates (``aks_cluster_id``) the add-on is on from the start
  (:class:`~ray_history_pulumi.aks_cluster.AksCluster` ``azure_monitor_metrics``) and this
  module links the cluster to the workspace as Microsoft's templates do
  (https://learn.microsoft.com/azure/azure-monitor/containers/kubernetes-monitoring-enable-arm,
  https://github.com/Azure/prometheus-collector/tree/main/AddonBicepTemplate): a data
  collection endpoint, a data collection rule sending the ``Microsoft-PrometheusMetrics``
  stream to the workspace, and that rule's association with the cluster; the PodMonitor waits
  for the cluster and the association. On an existing cluster only its owner can turn the
  add-on on (``az aks update --enable-azure-monitor-metrics``, docs/metrics.md); with
  ``aks_addon_on`` false (the program found no CRD) the PodMonitor is left out, with a warning,
  until a later ``pulumi up`` finds the add-on on.

Each managed store needs cloud credentials to query: unless a Prometheus URL is given, the
history server and Grafana reach it through the query proxy the cloud documents
(:mod:`ray_history_pulumi.metrics_proxies`: GMP's frontend on GKE, the AWS SigV4 proxy on EKS;
AKS has no supported one, so there the URL is required).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import pulumi
import pulumi_kubernetes as k8s

from ray_history_pulumi import metrics_scrape
from ray_history_pulumi.metrics_proxies import AwsIdentity, gmp_frontend, sigv4_proxy

MANAGED_CLOUDS = ("gcp", "aws", "azure")
#: The Kubernetes user AWS's documentation maps the managed scraper's role to.
AMP_COLLECTOR_USER = "aps-collector-user"
#: The read access the scraper needs (AMP-collector-how-to, "Configuring your Amazon EKS cluster").
AMP_COLLECTOR_RULES: list[dict[str, Any]] = [
    {
        "api_groups": [""],
        "resources": [
            "nodes",
            "nodes/proxy",
            "nodes/metrics",
            "services",
            "endpoints",
            "pods",
            "ingresses",
            "configmaps",
        ],
        "verbs": ["describe", "get", "list", "watch"],
    },
    {
        "api_groups": ["extensions", "networking.k8s.io"],
        "resources": ["ingresses/status", "ingresses"],
        "verbs": ["describe", "get", "list", "watch"],
    },
    {"non_resource_urls": ["/metrics"], "verbs": ["get"]},
]


@dataclass
class ManagedMetricsArgs:
    """The cloud side of ``managed`` metrics.

    Attributes:
        cloud: ``gcp``, ``aws`` or ``azure``.
        cloud_provider: the explicit provider of that cloud (aws, azure-native); GKE needs none.
        eks_cluster_name: AWS: the cluster the scraper reads (its subnets and security group
            are looked up).
        azure_resource_group: Azure: where the Azure Monitor workspace goes.
        azure_location: Azure: its region.
        workspace_name: name of the AMP / Azure Monitor workspace.
        aws_identity: AWS: how the query proxy's service account assumes its role (the
            history server's mechanism; ``cluster_name`` defaults to ``eks_cluster_name``).
        aks_cluster_id: Azure: resource id of an AKS cluster the stack created with the metrics
            add-on on; the component links it to the workspace (data collection endpoint, rule
            and association). None = an existing cluster, whose owner links it.
        aks_cluster_ready: Azure: what the PodMonitor waits for besides the association (the
            ManagedCluster whose add-on installs the ``azmonitoring.coreos.com`` CRDs).
        aks_addon_on: Azure, existing cluster: whether the add-on's CRDs are on the cluster
            (the program asks it); False leaves the PodMonitor out with a warning, None applies it
            (the caller vouches for the add-on).
    """

    cloud: str
    cloud_provider: pulumi.ProviderResource | None = None
    eks_cluster_name: pulumi.Input[str] | None = None
    azure_resource_group: pulumi.Input[str] | None = None
    azure_location: pulumi.Input[str] = ""
    workspace_name: str = "ray-history-metrics"
    aws_identity: AwsIdentity | None = None
    aks_cluster_id: pulumi.Input[str] | None = None
    aks_cluster_ready: Sequence[pulumi.Resource] = ()
    aks_addon_on: pulumi.Input[bool] | None = None

    def validate(self) -> None:
        if self.cloud not in MANAGED_CLOUDS:
            raise ValueError(
                f"managed.cloud: {self.cloud!r} has no managed Prometheus here ({', '.join(MANAGED_CLOUDS)})"
            )
        if self.cloud == "aws" and self.eks_cluster_name is None:
            raise ValueError("managed.eks_cluster_name: the EKS cluster the scraper reads is required on aws")
        if self.cloud == "azure" and (self.azure_resource_group is None or self.azure_location == ""):
            raise ValueError("managed.azure_resource_group, managed.azure_location: required on azure")
        if self.cloud != "azure" and (self.aks_cluster_id is not None or self.aks_addon_on is not None):
            raise ValueError("managed.aks_cluster_id, managed.aks_addon_on: for azure only")
        identity = self.aws_identity
        if identity is not None and identity.mode not in ("pod-identity", "irsa"):
            raise ValueError(f"managed.aws_identity.mode: {identity.mode!r} is not pod-identity or irsa")
        if (
            identity is not None
            and identity.mode == "irsa"
            and None
            in (
                identity.oidc_provider_arn,
                identity.oidc_issuer_url,
            )
        ):
            raise ValueError("managed.aws_identity.oidc_provider_arn, .oidc_issuer_url: required with irsa")


def role_arn_without_path(arn: str) -> str:
    """``arn:aws:iam::A:role/NAME`` for a role ARN with a path: the scraper's role lives under
    ``aws-service-role/scraper.aps.amazonaws.com/``, and AWS's guide maps it without the path."""
    head, sep, rest = arn.partition(":role/")
    return f"{head}{sep}{rest.rsplit('/', 1)[-1]}" if sep else arn


def custom_resource(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    """A CustomResource from a whole object (apiVersion, kind, metadata, spec)."""
    return k8s.apiextensions.CustomResource(
        name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], spec=obj["spec"], opts=opts
    )


def managed_store(
    name: str,
    args: ManagedMetricsArgs,
    *,
    namespace: str,
    workload_namespaces: Sequence[str],
    interval: str,
    labels: dict[str, str],
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource] = (),
    query_proxy: bool = True,
) -> tuple[list[pulumi.Resource], pulumi.Input[str] | None]:
    """The store and scrape objects of ``args.cloud``, and with ``query_proxy`` the cloud's query
    proxy: (resources, the proxy's Prometheus URL or None). Kubernetes objects use the parent's provider."""
    on_k8s = pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on))
    on_cloud = pulumi.ResourceOptions(parent=parent, provider=args.cloud_provider, depends_on=list(depends_on))
    if args.cloud == "gcp":
        made: list[pulumi.Resource] = [
            custom_resource(
                f"{name}-podmonitoring-{ns}",
                metrics_scrape.gmp_pod_monitoring(name="ray", namespace=ns, labels=labels, interval=interval),
                on_k8s,
            )
            for ns in workload_namespaces
        ]
        if not query_proxy:
            return made, None
        frontend = gmp_frontend(
            f"{name}-frontend",
            namespace=namespace,
            labels=labels,
            cloud_provider=args.cloud_provider,
            on_k8s=on_k8s,
            on_cloud=on_cloud,
        )
        return [*made, *frontend.resources], frontend.url
    if args.cloud == "aws":
        made = _amp(
            name,
            args,
            workload_namespaces=workload_namespaces,
            interval=interval,
            labels=labels,
            on_k8s=on_k8s,
            on_cloud=on_cloud,
        )
        if not query_proxy:
            return made, None
        import pulumi_aws as aws

        workspace = cast(aws.amp.Workspace, made[0])  # _amp lists the workspace first
        identity = args.aws_identity or AwsIdentity()
        if identity.cluster_name is None:
            identity = dataclasses.replace(identity, cluster_name=args.eks_cluster_name)
        proxy = sigv4_proxy(
            f"{name}-sigv4",
            namespace=namespace,
            labels=labels,
            workspace_id=workspace.id,
            workspace_arn=workspace.arn,
            identity=identity,
            cloud_provider=args.cloud_provider,
            on_k8s=on_k8s,
            on_cloud=on_cloud,
        )
        return [*made, *proxy.resources], proxy.url
    # AKS: no supported query proxy (metrics_proxies), the URL is a setting.
    return _azure_monitor(
        name,
        args,
        namespace=namespace,
        workload_namespaces=workload_namespaces,
        interval=interval,
        labels=labels,
        on_k8s=on_k8s,
        on_cloud=on_cloud,
    ), None


def _amp(
    name: str,
    args: ManagedMetricsArgs,
    *,
    workload_namespaces: Sequence[str],
    interval: str,
    labels: dict[str, str],
    on_k8s: pulumi.ResourceOptions,
    on_cloud: pulumi.ResourceOptions,
) -> list[pulumi.Resource]:
    import pulumi_aws as aws

    workspace = aws.amp.Workspace(f"{name}-amp", alias=args.workspace_name, opts=on_cloud)
    cluster = aws.eks.get_cluster_output(
        name=args.eks_cluster_name, opts=pulumi.InvokeOutputOptions(provider=args.cloud_provider)
    )
    scraper = aws.amp.Scraper(
        f"{name}-scraper",
        alias=args.workspace_name,
        source={
            "eks": {
                "cluster_arn": cluster.arn,
                "subnet_ids": cluster.vpc_config.subnet_ids,
                "security_group_ids": [cluster.vpc_config.cluster_security_group_id],
            }
        },
        destination={"amp": {"workspace_arn": workspace.arn}},
        scrape_configuration=metrics_scrape.amp_scrape_configuration(workload_namespaces, interval),
        opts=on_cloud,
    )
    role = k8s.rbac.v1.ClusterRole(
        f"{name}-aps-collector",
        metadata={"name": "aps-collector-role", "labels": labels},
        rules=AMP_COLLECTOR_RULES,
        opts=on_k8s,
    )
    binding = k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-aps-collector-binding",
        metadata={"name": "aps-collector-user-role-binding", "labels": labels},
        role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "aps-collector-role"},
        subjects=[{"kind": "User", "name": AMP_COLLECTOR_USER, "api_group": "rbac.authorization.k8s.io"}],
        opts=pulumi.ResourceOptions.merge(on_k8s, pulumi.ResourceOptions(depends_on=[role])),
    )
    entry = aws.eks.AccessEntry(
        f"{name}-scraper-access",
        cluster_name=pulumi.Output.all(args.eks_cluster_name, cluster.access_configs).apply(
            lambda found: _accepting_access_entries(found[0], found[1])
        ),
        principal_arn=scraper.role_arn.apply(role_arn_without_path),
        user_name=AMP_COLLECTOR_USER,
        type="STANDARD",
        opts=on_cloud,
    )
    return [workspace, scraper, role, binding, entry]


#: The EKS authentication modes under which the cluster accepts access entries.
ACCESS_ENTRY_MODES = ("API", "API_AND_CONFIG_MAP")


def _accepting_access_entries(cluster_name: str, access_configs: Sequence[Any] | None) -> str:
    """``cluster_name``, once its authentication mode is known to accept access entries: with
    ``CONFIG_MAP`` (the default of clusters created through the EKS API) EKS refuses to make
    the scraper's entry, after the workspace and scraper exist. Raise before, saying what to do
    (https://docs.aws.amazon.com/eks/latest/userguide/grant-k8s-access.html#set-cam)."""
    # Invoke results are dicts keyed by Python names (output types subclass dict).
    modes = [c.get("authentication_mode") for c in access_configs or [] if isinstance(c, dict)]
    if not any(mode in ACCESS_ENTRY_MODES for mode in modes):
        raise ValueError(
            f"EKS cluster {cluster_name!r} has authentication mode {modes[0] if modes else 'unknown'!s}: "
            "the managed-Prometheus scraper is given access through an access entry, which needs API or "
            f"API_AND_CONFIG_MAP (aws eks update-cluster-config --name {cluster_name} "
            "--access-config authenticationMode=API_AND_CONFIG_MAP)"
        )
    return cluster_name


#: AKS: the CRD the metrics add-on installs and the PodMonitor needs.
AZURE_POD_MONITOR_CRD = "podmonitors.azmonitoring.coreos.com"
#: The stream and destination names Microsoft's enablement templates give the rule.
PROMETHEUS_STREAM = "Microsoft-PrometheusMetrics"
WORKSPACE_DESTINATION = "MonitoringAccount1"


def _azure_monitor(
    name: str,
    args: ManagedMetricsArgs,
    *,
    namespace: str,
    workload_namespaces: Sequence[str],
    interval: str,
    labels: dict[str, str],
    on_k8s: pulumi.ResourceOptions,
    on_cloud: pulumi.ResourceOptions,
) -> list[pulumi.Resource]:
    import pulumi_azure_native as azure_native

    workspace = azure_native.monitor.AzureMonitorWorkspace(
        f"{name}-workspace",
        azure_monitor_workspace_name=args.workspace_name,
        resource_group_name=args.azure_resource_group,
        location=args.azure_location,
        opts=on_cloud,
    )
    monitor = metrics_scrape.worker_pod_monitor(
        api_version="azmonitoring.coreos.com/v1",
        name="ray-nodes",
        namespace=namespace,
        watched_namespaces=workload_namespaces,
        labels=labels,
        interval=interval,
        node_types=("head", "worker"),
    )
    if args.aks_cluster_id is not None:
        link = _link_cluster(name, args, workspace.id, on_cloud)
        ready = pulumi.ResourceOptions(depends_on=[*args.aks_cluster_ready, link[-1]])
        pod_monitor = custom_resource(f"{name}-ray-nodes", monitor, pulumi.ResourceOptions.merge(on_k8s, ready))
        return [workspace, *link, pod_monitor]
    if args.aks_addon_on is None:
        return [workspace, custom_resource(f"{name}-ray-nodes", monitor, on_k8s)]

    # An existing cluster: the PodMonitor only where the add-on put its CRD (see the module docstring).
    def apply_if_on(facts: list[Any]) -> None:
        addon_on, workspace_id = facts
        if addon_on:
            custom_resource(f"{name}-ray-nodes", monitor, on_k8s)
            return
        pulumi.log.warn(
            f"metrics: the cluster has no {AZURE_POD_MONITOR_CRD} CRD, so Azure Monitor's metrics add-on is off "
            "and the PodMonitor ray-nodes is left out of this update; link the cluster to the workspace "
            "(az aks update -n CLUSTER -g GROUP --enable-azure-monitor-metrics --azure-monitor-workspace-resource-id "
            f"{workspace_id}) and run `pulumi up` again (docs/metrics.md)"
        )

    pulumi.Output.all(args.aks_addon_on, workspace.id).apply(apply_if_on)
    return [workspace]


def _link_cluster(
    name: str,
    args: ManagedMetricsArgs,
    workspace_id: pulumi.Input[str],
    on_cloud: pulumi.ResourceOptions,
) -> list[pulumi.Resource]:
    """Data collection endpoint, rule and the rule's association with ``args.aks_cluster_id``, as
    Microsoft's templates create them (the association last)."""
    import pulumi_azure_native as azure_native

    monitor = azure_native.monitor
    endpoint = monitor.DataCollectionEndpoint(
        f"{name}-dce",
        data_collection_endpoint_name=f"{args.workspace_name}-dce",
        resource_group_name=args.azure_resource_group,
        location=args.azure_location,
        kind="Linux",
        opts=on_cloud,
    )
    rule = monitor.DataCollectionRule(
        f"{name}-dcr",
        data_collection_rule_name=f"{args.workspace_name}-dcr",
        resource_group_name=args.azure_resource_group,
        location=args.azure_location,
        kind="Linux",
        description="Azure Monitor managed service for Prometheus: Ray's metrics to the workspace",
        data_collection_endpoint_id=endpoint.id,
        data_sources=monitor.DataCollectionRuleDataSourcesArgs(
            prometheus_forwarder=[
                monitor.PrometheusForwarderDataSourceArgs(name="PrometheusDataSource", streams=[PROMETHEUS_STREAM])
            ]
        ),
        destinations=monitor.DataCollectionRuleDestinationsArgs(
            monitoring_accounts=[
                monitor.MonitoringAccountDestinationArgs(account_resource_id=workspace_id, name=WORKSPACE_DESTINATION)
            ]
        ),
        data_flows=[monitor.DataFlowArgs(streams=[PROMETHEUS_STREAM], destinations=[WORKSPACE_DESTINATION])],
        opts=on_cloud,
    )
    association = monitor.DataCollectionRuleAssociation(
        f"{name}-dcra",
        association_name=f"{args.workspace_name}-dcra",
        resource_uri=args.aks_cluster_id,
        data_collection_rule_id=rule.id,
        description="Association of data collection rule. Deleting this association will break the data "
        "collection for this AKS Cluster.",
        opts=pulumi.ResourceOptions.merge(on_cloud, pulumi.ResourceOptions(depends_on=list(args.aks_cluster_ready))),
    )
    return [endpoint, rule, association]

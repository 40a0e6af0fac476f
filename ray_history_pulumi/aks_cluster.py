"""A turnkey AKS cluster (config ``createCluster`` on ``cloud: azure``): OIDC issuer and workload identity on.

It exposes the kubelet identity, which the stack-created registry grants ``AcrPull``: without
it every pull from that registry fails with ``ImagePullBackOff``.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field

import pulumi

#: AKS cluster (resource) names: 1-63 letters, digits, '-' and '_', a letter or digit at both ends;
#: the DNS prefix made from it allows 54 (https://learn.microsoft.com/azure/azure-resource-manager/
#: management/resource-name-rules#microsoftcontainerservice).
AKS_NAME = re.compile(r"^[a-zA-Z0-9]([-_a-zA-Z0-9]{0,52}[a-zA-Z0-9])?$")
AKS_NAME_MAX = 54


@dataclass
class AksClusterArgs:
    """Settings of :class:`AksCluster`.

    Attributes:
        resource_group_name: resource group of the cluster.
        cluster_name: the AKS cluster's name, also its DNS prefix (<= 54 characters); None = the component name.
        location: Azure region; None = the resource group's.
        node_vm_size / node_count: the system node pool.
        kubernetes_version: None = AKS default.
        tags: tags on the cluster.
        app_routing: enable the application routing add-on (managed NGINX, class
            ``webapprouting.kubernetes.azure.com``): the history server's Ingress needs it.
        azure_monitor_metrics: enable Azure Monitor's managed Prometheus add-on
            (``azureMonitorProfile.metrics``), which deploys ``ama-metrics`` and the
            ``azmonitoring.coreos.com`` PodMonitor/ServiceMonitor CRDs
            (https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-metrics-scrape-crd);
            :mod:`ray_history_pulumi.metrics_managed` links the cluster to the workspace.
    """

    resource_group_name: pulumi.Input[str]
    cluster_name: str | None = None
    location: pulumi.Input[str] | None = None
    node_vm_size: str = "Standard_D4s_v5"
    node_count: int = 2
    kubernetes_version: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    app_routing: bool = False
    azure_monitor_metrics: bool = False

    def __post_init__(self) -> None:
        if self.cluster_name is not None and not AKS_NAME.match(self.cluster_name):
            raise ValueError(
                f"AksClusterArgs.cluster_name={self.cluster_name!r}: AKS names are letters, digits, '-' and '_', "
                f"a letter or digit at both ends, at most {AKS_NAME_MAX} characters (the DNS prefix limit)"
            )
        if self.node_count < 1:
            raise ValueError(f"AksClusterArgs.node_count={self.node_count}: must be >= 1")


class AksCluster(pulumi.ComponentResource):
    """An AKS cluster with the OIDC issuer and workload identity enabled, one system node pool.

    Example::

        aks = AksCluster("aks", AksClusterArgs(resource_group_name=rg.name),
                         opts=pulumi.ResourceOptions(providers=[azure_provider]))
        AzureBlobHistoryStorageArgs(resource_group_name=rg.name, account_name="rayhistory1",
                                    oidc_issuer_url=aks.oidc_issuer_url)
        HistoryImagesArgs(registry="azure", ..., azure_pull_principal_id=aks.kubelet_object_id)

    Attributes:
        cluster, kubeconfig (secret; the cluster-user credentials), cluster_id,
        oidc_issuer_url, kubelet_object_id.
    """

    def __init__(self, name: str, args: AksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        import pulumi_azure_native as azure

        super().__init__("rayhistory:azure:AksCluster", name, None, opts)
        cs = azure.containerservice
        self.cluster = cs.ManagedCluster(
            f"{name}-cluster",
            resource_name_=args.cluster_name or name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            dns_prefix=args.cluster_name or name,
            kubernetes_version=args.kubernetes_version,
            identity=cs.ManagedClusterIdentityArgs(type=cs.ResourceIdentityType.SYSTEM_ASSIGNED),
            agent_pool_profiles=[
                cs.ManagedClusterAgentPoolProfileArgs(
                    name="system",
                    mode=cs.AgentPoolMode.SYSTEM,
                    count=args.node_count,
                    vm_size=args.node_vm_size,
                    os_type=cs.OSType.LINUX,
                )
            ],
            oidc_issuer_profile=cs.ManagedClusterOIDCIssuerProfileArgs(enabled=True),
            security_profile=cs.ManagedClusterSecurityProfileArgs(
                workload_identity=cs.ManagedClusterSecurityProfileWorkloadIdentityArgs(enabled=True)
            ),
            ingress_profile=cs.ManagedClusterIngressProfileArgs(
                web_app_routing=cs.ManagedClusterIngressProfileWebAppRoutingArgs(enabled=True)
            )
            if args.app_routing
            else None,
            # As Microsoft's Terraform template does: the add-on on at creation, the data
            # collection rule association made afterwards (metrics_managed).
            azure_monitor_profile=cs.ManagedClusterAzureMonitorProfileArgs(
                metrics=cs.ManagedClusterAzureMonitorProfileMetricsArgs(enabled=True)
            )
            if args.azure_monitor_metrics
            else None,
            tags=args.tags or None,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.cluster_id: pulumi.Output[str] = self.cluster.id
        self.oidc_issuer_url: pulumi.Output[str] = self.cluster.oidc_issuer_profile.apply(
            lambda p: str(p.issuer_url) if p and p.issuer_url else ""
        )
        self.kubelet_object_id: pulumi.Output[str] = self.cluster.identity_profile.apply(
            lambda profiles: str(profiles["kubeletidentity"].object_id) if profiles else ""
        )
        credentials = cs.list_managed_cluster_user_credentials_output(
            resource_group_name=args.resource_group_name,
            resource_name=self.cluster.name,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            credentials.kubeconfigs.apply(lambda configs: base64.b64decode(configs[0].value).decode())
        )
        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "oidc_issuer_url": self.oidc_issuer_url,
                "kubelet_object_id": self.kubelet_object_id,
            }
        )

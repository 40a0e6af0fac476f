"""Optional turnkey clusters (config ``createCluster``): GKE, EKS, AKS with workload identity on.

Each is minimal but real and exposes a ``kubeconfig`` (secret Output, ``exec`` credentials so
it never embeds a short-lived token) plus what the storage components need for identity:
GKE the project number, EKS the OIDC provider ARN + issuer URL, AKS the OIDC issuer URL and
the kubelet identity (for AcrPull).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi


def exec_kubeconfig(name: str, server: str, ca_data: str, command: str, exec_args: Sequence[str]) -> str:
    """A kubeconfig whose user runs a credential plugin (gke-gcloud-auth-plugin, aws eks get-token)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "users": [
            {
                "name": name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": command,
                        "args": list(exec_args),
                        "interactiveMode": "Never",
                        "provideClusterInfo": command == "gke-gcloud-auth-plugin",
                    }
                },
            }
        ],
    }
    return json.dumps(config, indent=2)


def _assume_role_policy(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )


# --- GKE ------------------------------------------------------------------------------------


@dataclass
class GkeClusterArgs:
    """Settings of :class:`GkeCluster`.

    Attributes:
        project: project id (the workload pool is ``PROJECT.svc.id.goog``).
        location: region (Autopilot, regional standard cluster) or zone.
        autopilot: Autopilot (Workload Identity always on); False = standard cluster with one node pool.
        machine_type / node_count: the node pool of a standard cluster.
        network / subnetwork: existing VPC to use; None = the project's default network.
        deletion_protection: block ``pulumi destroy`` of the cluster.
    """

    project: str
    location: str
    autopilot: bool = True
    machine_type: str = "e2-standard-4"
    node_count: int = 2
    network: str | None = None
    subnetwork: str | None = None
    deletion_protection: bool = False

    def __post_init__(self) -> None:
        if not self.project or not self.location:
            raise ValueError("GkeClusterArgs.project and .location are required")
        if self.node_count < 1:
            raise ValueError(f"GkeClusterArgs.node_count={self.node_count}: must be >= 1")


class GkeCluster(pulumi.ComponentResource):
    """A GKE cluster with Workload Identity (Autopilot by default).

    Example::

        gke = GkeCluster("gke", GkeClusterArgs(project="my-proj", location="us-central1"),
                         opts=pulumi.ResourceOptions(providers=[gcp_provider]))
        k8s_provider = k8s.Provider("gke", kubeconfig=gke.kubeconfig, cluster_identifier=gke.cluster_id)
        GcsHistoryStorageArgs(project="my-proj", location="US", project_number=gke.project_number)

    Attributes:
        cluster, kubeconfig (secret; needs ``gke-gcloud-auth-plugin``), cluster_id,
        project_number, workload_pool.
    """

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        import pulumi_gcp as gcp

        super().__init__("rayhistory:gcp:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.workload_pool = f"{args.project}.svc.id.goog"
        common: dict[str, Any] = {
            "project": args.project,
            "location": args.location,
            "network": args.network,
            "subnetwork": args.subnetwork,
            "deletion_protection": args.deletion_protection,
            "release_channel": {"channel": "REGULAR"},
        }
        self.node_pool: gcp.container.NodePool | None = None
        if args.autopilot:
            self.cluster = gcp.container.Cluster(f"{name}-cluster", enable_autopilot=True, **common, opts=child)
        else:
            self.cluster = gcp.container.Cluster(
                f"{name}-cluster",
                workload_identity_config={"workload_pool": self.workload_pool},
                remove_default_node_pool=True,
                initial_node_count=1,
                **common,
                opts=child,
            )
            self.node_pool = gcp.container.NodePool(
                f"{name}-nodes",
                cluster=self.cluster.name,
                project=args.project,
                location=args.location,
                node_count=args.node_count,
                node_config={
                    "machine_type": args.machine_type,
                    "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                    # Pods get their KSA identity only through the GKE metadata server.
                    "workload_metadata_config": {"mode": "GKE_METADATA"},
                },
                opts=child,
            )
        self.cluster_id: pulumi.Output[str] = self.cluster.id
        project = gcp.organizations.get_project_output(
            project_id=args.project, opts=pulumi.InvokeOutputOptions(parent=self)
        )
        self.project_number: pulumi.Output[str] = project.number
        # Consumers of the kubeconfig wait for the nodes: nothing can schedule before them.
        nodes_ready = self.node_pool.id if self.node_pool else self.cluster.id
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.name, self.cluster.endpoint, self.cluster.master_auth, nodes_ready).apply(
                lambda a: exec_kubeconfig(
                    f"gke_{args.project}_{args.location}_{a[0]}",
                    f"https://{a[1]}",
                    a[2]["cluster_ca_certificate"] if isinstance(a[2], dict) else a[2].cluster_ca_certificate,
                    "gke-gcloud-auth-plugin",
                    [],
                )
            )
        )
        self.register_outputs(
            {"kubeconfig": self.kubeconfig, "project_number": self.project_number, "workload_pool": self.workload_pool}
        )


# --- EKS ------------------------------------------------------------------------------------


@dataclass
class EksClusterArgs:
    """Settings of :class:`EksCluster` (uses existing subnets; builds no VPC).

    Attributes:
        subnet_ids: at least two subnets in different AZs for the control plane and nodes.
        region: region for the kubeconfig's ``aws eks get-token`` (None = the provider's, looked up).
        version: Kubernetes version; None = EKS default.
        instance_types / desired_size / min_size / max_size: the managed node group.
        tags: tags on every AWS resource.
    """

    subnet_ids: Sequence[pulumi.Input[str]]
    region: str | None = None
    version: str | None = None
    instance_types: Sequence[str] = ("m6i.large",)
    desired_size: int = 2
    min_size: int = 1
    max_size: int = 3
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.subnet_ids) < 2:
            raise ValueError("EksClusterArgs.subnet_ids: EKS needs at least two subnets (in two AZs)")
        if not self.min_size <= self.desired_size <= self.max_size:
            raise ValueError(
                f"EksClusterArgs.desired_size={self.desired_size}: must be within min_size..max_size "
                f"({self.min_size}..{self.max_size})"
            )


class EksCluster(pulumi.ComponentResource):
    """An EKS cluster with an IAM OIDC provider (IRSA) and the Pod Identity agent add-on.

    Example::

        eks = EksCluster("eks", EksClusterArgs(subnet_ids=["subnet-a", "subnet-b"]),
                         opts=pulumi.ResourceOptions(providers=[aws_provider]))
        S3HistoryStorageArgs(identity_mode="irsa", oidc_provider_arn=eks.oidc_provider_arn,
                             oidc_issuer_url=eks.oidc_issuer_url)
        S3HistoryStorageArgs(identity_mode="pod-identity", cluster_name=eks.cluster_name)

    Attributes:
        cluster, kubeconfig (secret; needs the ``aws`` CLI), cluster_name, cluster_id,
        oidc_issuer_url, oidc_provider_arn, pod_identity_addon.
    """

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        import pulumi_aws as aws

        super().__init__("rayhistory:aws:EksCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = args.tags or None
        managed = "arn:aws:iam::aws:policy/"

        cluster_role = aws.iam.Role(
            f"{name}-cluster-role", assume_role_policy=_assume_role_policy("eks.amazonaws.com"), tags=tags, opts=child
        )
        cluster_policy = aws.iam.RolePolicyAttachment(
            f"{name}-cluster-policy", role=cluster_role.name, policy_arn=managed + "AmazonEKSClusterPolicy", opts=child
        )
        self.cluster = aws.eks.Cluster(
            f"{name}-cluster",
            role_arn=cluster_role.arn,
            version=args.version,
            vpc_config={"subnet_ids": list(args.subnet_ids)},
            access_config={
                "authentication_mode": "API_AND_CONFIG_MAP",
                "bootstrap_cluster_creator_admin_permissions": True,
            },
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster_policy]),
        )
        self.cluster_name: pulumi.Output[str] = self.cluster.name
        self.cluster_id: pulumi.Output[str] = self.cluster.id
        self.oidc_issuer_url: pulumi.Output[str] = self.cluster.identities.apply(
            lambda ids: ids[0]["oidcs"][0]["issuer"] if isinstance(ids[0], dict) else ids[0].oidcs[0].issuer
        )
        oidc = aws.iam.OpenIdConnectProvider(
            f"{name}-oidc", url=self.oidc_issuer_url, client_id_lists=["sts.amazonaws.com"], tags=tags, opts=child
        )
        self.oidc_provider_arn: pulumi.Output[str] = oidc.arn

        node_role = aws.iam.Role(
            f"{name}-node-role", assume_role_policy=_assume_role_policy("ec2.amazonaws.com"), tags=tags, opts=child
        )
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}", role=node_role.name, policy_arn=managed + policy, opts=child
            )
            for policy in (
                "AmazonEKSWorkerNodePolicy",
                "AmazonEKS_CNI_Policy",
                "AmazonEC2ContainerRegistryReadOnly",
            )
        ]
        nodes = aws.eks.NodeGroup(
            f"{name}-nodes",
            cluster_name=self.cluster.name,
            node_role_arn=node_role.arn,
            subnet_ids=list(args.subnet_ids),
            instance_types=list(args.instance_types),
            scaling_config={"desired_size": args.desired_size, "min_size": args.min_size, "max_size": args.max_size},
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=attachments),
        )
        # The agent add-on runs as a DaemonSet: it needs nodes to become ACTIVE.
        self.pod_identity_addon = aws.eks.Addon(
            f"{name}-pod-identity-agent",
            cluster_name=self.cluster.name,
            addon_name="eks-pod-identity-agent",
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[nodes]),
        )

        region: pulumi.Output[str] = (
            pulumi.Output.from_input(args.region)
            if args.region
            else aws.get_region_output(opts=pulumi.InvokeOutputOptions(parent=self)).region
        )
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name, self.cluster.endpoint, self.cluster.certificate_authority, region
            ).apply(
                lambda a: exec_kubeconfig(
                    a[0],
                    a[1],
                    a[2]["data"] if isinstance(a[2], dict) else a[2].data,
                    "aws",
                    ["eks", "get-token", "--cluster-name", a[0], "--region", a[3], "--output", "json"],
                )
            )
        )
        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "cluster_name": self.cluster_name,
                "oidc_issuer_url": self.oidc_issuer_url,
                "oidc_provider_arn": self.oidc_provider_arn,
            }
        )


# --- AKS ------------------------------------------------------------------------------------


@dataclass
class AksClusterArgs:
    """Settings of :class:`AksCluster`.

    Attributes:
        resource_group_name: resource group of the cluster.
        location: Azure region; None = the resource group's.
        node_vm_size / node_count: the system node pool.
        kubernetes_version: None = AKS default.
        tags: tags on the cluster.
    """

    resource_group_name: pulumi.Input[str]
    location: pulumi.Input[str] | None = None
    node_vm_size: str = "Standard_D4s_v5"
    node_count: int = 2
    kubernetes_version: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
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
            resource_group_name=args.resource_group_name,
            location=args.location,
            dns_prefix=name,
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

"""A turnkey EKS cluster (config ``createCluster`` on ``cloud: aws``): IRSA and EKS Pod Identity.

The kubeconfig it hands out resolves only once the node group and the Pod Identity agent
are active, so Kubernetes consumers (the Helm release, the history server) never start on
a cluster that cannot schedule them or inject their credentials.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi

from ray_history_pulumi.aws_names import EKS_NODE_GROUP_NAME_MAX, IAM_ROLE_NAME_MAX, name_args
from ray_history_pulumi.kubeconfig import exec_kubeconfig

#: EKS cluster names: 1-100 characters, a letter or digit first, then letters, digits, '-' and '_'
#: (https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateCluster.html#API_CreateCluster_RequestSyntax).
EKS_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
EKS_NAME_MAX = 100


def _assume_role_policy(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )


@dataclass
class EksClusterArgs:
    """Settings of :class:`EksCluster` (uses existing subnets; builds no VPC).

    Attributes:
        subnet_ids: at least two subnets in different AZs for the control plane and nodes.
        cluster_name: the EKS cluster's name (<= 100 characters); None = the component name.
        region: region for the kubeconfig's ``aws eks get-token`` (None = the provider's, looked up).
        version: Kubernetes version; None = EKS default.
        instance_types / desired_size / min_size / max_size: the managed node group.
        tags: tags on every AWS resource.
    """

    subnet_ids: Sequence[pulumi.Input[str]]
    cluster_name: str | None = None
    region: str | None = None
    version: str | None = None
    instance_types: Sequence[str] = ("m6i.large",)
    desired_size: int = 2
    min_size: int = 1
    max_size: int = 3
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cluster_name is not None and not EKS_NAME.match(self.cluster_name):
            raise ValueError(
                f"EksClusterArgs.cluster_name={self.cluster_name!r}: EKS names are a letter or digit, then "
                f"letters, digits, '-' and '_', at most {EKS_NAME_MAX} characters"
            )
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

        if args.cluster_name is None and not EKS_NAME.match(name):
            raise ValueError(
                f"EksCluster {name!r}: with no cluster_name the component's name is the EKS cluster's: a letter "
                f"or digit, then letters, digits, '-' and '_', at most {EKS_NAME_MAX} characters"
            )
        super().__init__("rayhistory:aws:EksCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = args.tags or None
        managed = "arn:aws:iam::aws:policy/"

        # The roles and the node group keep Pulumi's auto-names where they fit (so stacks
        # deployed before see no change), and get a shortened name_prefix where a long
        # cluster name would push them past AWS's limits (aws_names.name_args).
        cluster_role = aws.iam.Role(
            f"{name}-cluster-role",
            **name_args(f"{name}-cluster-role", IAM_ROLE_NAME_MAX, keep="-cluster-role"),
            assume_role_policy=_assume_role_policy("eks.amazonaws.com"),
            tags=tags,
            opts=child,
        )
        cluster_policy = aws.iam.RolePolicyAttachment(
            f"{name}-cluster-policy", role=cluster_role.name, policy_arn=managed + "AmazonEKSClusterPolicy", opts=child
        )
        self.cluster = aws.eks.Cluster(
            f"{name}-cluster",
            name=args.cluster_name or name,
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
            f"{name}-node-role",
            **name_args(f"{name}-node-role", IAM_ROLE_NAME_MAX, keep="-node-role"),
            assume_role_policy=_assume_role_policy("ec2.amazonaws.com"),
            tags=tags,
            opts=child,
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
        self.node_group = nodes = aws.eks.NodeGroup(
            f"{name}-nodes",
            **name_args(f"{name}-nodes", EKS_NODE_GROUP_NAME_MAX, keep="-nodes", prefix_arg="node_group_name_prefix"),
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
        # Consumers of the kubeconfig (the Helm release with its 600 s atomic wait, the history
        # server) wait for the nodes and the Pod Identity agent: before them nothing schedules
        # and no pod gets credentials. The GKE cluster does the same with its node pool.
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name,
                self.cluster.endpoint,
                self.cluster.certificate_authority,
                region,
                nodes.id,
                self.pod_identity_addon.id,
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

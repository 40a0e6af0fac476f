"""Optional turnkey clusters (config ``createCluster``): GKE, EKS, AKS with workload identity on.

Each is minimal but real and exposes a ``kubeconfig`` (secret Output, ``exec`` credentials so
it never embeds a short-lived token) plus what the storage components need for identity:
GKE the project number and the resources that create its identity pool, EKS the OIDC provider
ARN + issuer URL, AKS the OIDC issuer URL and the kubelet identity (for AcrPull). One module
per cloud; this one is the public surface.
"""

from ray_history_pulumi.aks_cluster import AKS_NAME, AKS_NAME_MAX, AksCluster, AksClusterArgs
from ray_history_pulumi.eks_cluster import EKS_NAME, EKS_NAME_MAX, EksCluster, EksClusterArgs
from ray_history_pulumi.gke_cluster import GKE_NAME, GKE_NAME_MAX, GkeCluster, GkeClusterArgs
from ray_history_pulumi.kubeconfig import exec_kubeconfig

__all__ = [
    "AKS_NAME",
    "AKS_NAME_MAX",
    "EKS_NAME",
    "EKS_NAME_MAX",
    "GKE_NAME",
    "GKE_NAME_MAX",
    "AksCluster",
    "AksClusterArgs",
    "EksCluster",
    "EksClusterArgs",
    "GkeCluster",
    "GkeClusterArgs",
    "exec_kubeconfig",
]

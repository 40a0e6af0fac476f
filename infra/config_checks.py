"""Checks of a whole stack configuration that span sections (split from :mod:`infra.config`,
which reads each section): where the cluster comes from, its name limits per cloud, the
namespaces, and how nodes pull the images."""

from __future__ import annotations

import re

from infra.config_model import StackConfig
from infra.config_values import ConfigError, _key
from ray_history_pulumi.azure_storage import MAX_FEDERATED_CREDENTIALS, credentials_per_identity
from ray_history_pulumi.contracts import ServiceAccountRef
from ray_history_pulumi.images import ARTIFACT_REGISTRY_ID
from ray_history_pulumi.retention import RETENTION_SERVICE_ACCOUNT


def check_cluster_source(config: StackConfig) -> None:
    """Exactly one way to reach the cluster, and the identity facts an existing cluster needs."""
    sources = [k for k, on in (("kubeconfig", config.kubeconfig), ("clusterStack", config.cluster_stack)) if on]
    if config.create_cluster:
        if config.cloud == "kind":
            raise ConfigError(f"{_key('createCluster')} is not supported for kind: run `kind create cluster` first")
        if sources:
            raise ConfigError(f"{_key(sources[0])} must not be set when createCluster is true")
    elif not sources:
        raise ConfigError(
            f"{_key('kubeconfig')} (a path or the content) or {_key('clusterStack')} is required "
            "unless createCluster is true"
        )
    elif len(sources) > 1:
        raise ConfigError(f"{_key('kubeconfig')} and {_key('clusterStack')} are exclusive: set one")
    if config.create_cluster:
        if config.aws is not None and len(config.aws.subnet_ids) < 2:
            raise ConfigError(
                f"{_key('aws.subnetIds')} must list at least two subnets (two AZs) to create an EKS cluster"
            )
        return
    _check_existing_cluster_identity(config)


def _check_existing_cluster_identity(config: StackConfig) -> None:
    """What a storage identity needs to know about a cluster the stack does not create."""
    if config.aws is not None:
        if config.aws.identity_mode == "irsa":
            for key, value in (
                ("oidcProviderArn", config.aws.oidc_provider_arn),
                ("oidcIssuerUrl", config.aws.oidc_issuer_url),
            ):
                if not value:
                    raise ConfigError(f"{_key('aws.' + key)} is required for irsa on an existing cluster")
        elif not config.aws.cluster_name:
            raise ConfigError(f"{_key('aws.clusterName')} is required for pod-identity on an existing cluster")
    if config.azure is not None and not config.azure.oidc_issuer_url:
        raise ConfigError(f"{_key('azure.oidcIssuerUrl')} is required on an existing AKS cluster")


def check_front_door_sources(config: StackConfig) -> None:
    """An ALB's addresses come from the cluster's VPC, found through the EKS cluster by name
    (``infra/platform.py`` ``front_door_cidrs``): an existing cluster must be named for an
    ``alb`` ingress whose NetworkPolicy (``access.ingressFrom``) must admit them. Run after
    the ingress flavour is resolved."""
    ingress = config.access.ingress
    if config.aws is None or config.create_cluster or ingress is None or ingress.flavour != "alb":
        return
    if config.access.ingress_from and not config.aws.cluster_name:
        raise ConfigError(
            f"{_key('aws.clusterName')} is required on an existing cluster for an alb ingress with "
            f"{_key('access.ingressFrom')}: the NetworkPolicy admits the ALB by the cluster's VPC CIDRs"
        )


#: The longest cluster name each cloud accepts for what the stack creates, and why.
CLUSTER_NAME_LIMITS = {
    "gcp": (40, "GKE cluster names allow 40 characters"),
    "aws": (100, "EKS cluster names allow 100 characters"),
    "azure": (54, "AKS uses the name as its DNS prefix, which allows 54 characters"),
}


def check_cluster_name(config: StackConfig) -> None:
    """The created cluster's name against the cloud's real limit (not Kubernetes' 63)."""
    if not config.create_cluster or config.cloud not in CLUSTER_NAME_LIMITS:
        return
    limit, why = CLUSTER_NAME_LIMITS[config.cloud]
    name = config.cluster.name
    if len(name) > limit:
        raise ConfigError(f"{_key('cluster.name')} is {len(name)} characters: {why} (got {name!r})")
    if config.cloud == "gcp" and not name[0].isalpha():
        raise ConfigError(f"{_key('cluster.name')} must start with a letter on GKE (got {name!r})")


#: Arm machine types, by each cloud's naming rules:
#: EC2: a "g" after the generation (m7g, c6gn, x2gd; a1 is the first Graviton), see
#: https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html;
#: Compute Engine: the T2A, C4A, N4A and A4X series, see
#: https://cloud.google.com/compute/docs/instances/arm-on-compute;
#: Azure: a "p" among the features after the vCPU count (D4ps_v5, B2pts_v2), see
#: https://learn.microsoft.com/azure/virtual-machines/vm-naming-conventions.
ARM_MACHINE_TYPES = {
    "aws": re.compile(r"(a1|[a-z]+\d+g[a-z-]*)\..+"),
    "gcp": re.compile(r"(t2a|c4a|n4a|a4x)-.+"),
    "azure": re.compile(r"Standard_[A-Z]+\d+(-\d+)?[a-z]*p[a-z]*(_.+)?", re.IGNORECASE),
}


def check_machine_architecture(config: StackConfig) -> None:
    """Nodes the stack creates can run the images it builds, which are linux/amd64 only
    (``infra/platform.py``). An Arm machine type fails at ``pulumi up`` or after it: EKS
    refuses a Graviton node group with the default x86 AMI type, GKE taints Arm nodes
    ``kubernetes.io/arch=arm64:NoSchedule`` (no pod of the stack tolerates it) and AKS
    gives Arm sizes an arm64 node image, where amd64 images cannot start."""
    pattern = ARM_MACHINE_TYPES.get(config.cloud)
    machine_type = config.cluster.machine_type
    if not (config.create_cluster and config.images.build and pattern and machine_type):
        return
    if pattern.fullmatch(machine_type):
        raise ConfigError(
            f"{_key('cluster.machineType')} {machine_type!r} is an Arm machine type: the stack builds its images "
            "for linux/amd64 only; choose an x86 machine type (or build multi-arch images yourself and set "
            f"{_key('images.build')} to false)"
        )


def check_namespaces(config: StackConfig) -> None:
    """Ray pods never run in the history server's namespace (Pod Security level ``restricted``)."""
    if config.namespace in config.workloads.namespaces:
        raise ConfigError(
            f"{_key('workloads.namespaces')} lists {config.namespace!r}, the history server's namespace "
            f"({_key('namespace')}): it enforces the 'restricted' Pod Security Standard, which Ray pods do not "
            "meet, and with workloads.createNamespaces it would be created twice; run Ray in another namespace"
        )


def check_image_pull(config: StackConfig) -> None:
    """Nodes must be able to pull from a registry the stack creates."""
    creates_registry = config.images.build and not config.images.registry
    if (
        config.azure is not None
        and creates_registry
        and not config.create_cluster
        and not config.azure.kubelet_object_id
    ):
        raise ConfigError(
            f"{_key('azure.kubeletObjectId')} is required to build images into the registry the stack creates "
            "on an existing AKS cluster: its kubelet identity gets AcrPull, or every pod ends in ImagePullBackOff "
            "(`az aks show -n CLUSTER -g GROUP --query identityProfile.kubeletidentity.objectId -o tsv`); "
            "or set images.registry / images.build false"
        )
    if config.gcp is not None and config.gcp.image_pull_members and not creates_registry:
        raise ConfigError(
            f"{_key('gcp.imagePullMembers')} applies only to the Artifact Registry repository the stack creates "
            "(images.build true, images.registry empty)"
        )


def check_index_container(config: StackConfig) -> None:
    """On Azure the shared indexes need a container of their own, not the history container."""
    if config.azure is None or config.history_server.shared_index == "off":
        return
    history = config.storage.bucket or "ray-historyserver"
    if config.azure.index_container == history:
        raise ConfigError(
            f"{_key('azure.indexContainer')} is {history!r}, the history container (storage.bucket): the shared "
            "indexes need a container of their own, so write access to them never reaches the sessions"
        )


def check_federated_credentials(config: StackConfig) -> None:
    """On Azure, no managed identity gets more federated credentials than Azure allows.

    The stack's storage gives each identity one credential per Kubernetes service account using
    it (:func:`~ray_history_pulumi.azure_storage.credentials_per_identity`): the collectors of one
    workload namespace share that namespace's identity, the gc job has the maintainers' own.
    Azure rejects the credential over the limit in the middle of ``pulumi up``, after the others
    were created. With one collector service account per namespace (``workloads.serviceAccount``,
    namespaces listed once) no identity comes near the limit; the check guards the invariant.
    """
    if config.azure is None:
        return
    # The accounts infra/program.py hands the storage: collectors, then the gc job (a maintainer).
    writers = [ServiceAccountRef(ns, config.workloads.service_account) for ns in config.workloads.namespaces]
    gc = [ServiceAccountRef(config.namespace, RETENTION_SERVICE_ACCOUNT)] if config.retention.days else []
    for identity, count in credentials_per_identity([*writers, *gc], gc).items():
        if identity.startswith("writer:") and count > MAX_FEDERATED_CREDENTIALS:
            raise ConfigError(
                f"{_key('workloads.namespaces')} gives namespace {identity.removeprefix('writer:')!r} {count} "
                "collector service accounts: on Azure they share that namespace's managed identity, with one "
                f"federated identity credential each, and Azure allows at most {MAX_FEDERATED_CREDENTIALS} per "
                "identity (https://learn.microsoft.com/en-us/entra/workload-id/workload-identity-federation-considerations)"
            )


def check_image_repository(config: StackConfig) -> None:
    """On GCP, ``images.repository`` names the Artifact Registry repository the stack creates: its id rules apply."""
    creates_registry = config.images.build and not config.images.registry
    repository = config.images.repository
    if config.gcp is None or not creates_registry or not repository:
        return
    if not ARTIFACT_REGISTRY_ID.match(repository):
        raise ConfigError(
            f"{_key('images.repository')} is the Artifact Registry repository id on gcp: lower-case letters, digits "
            f"and '-', starting with a letter, ending with a letter or digit, at most 63 characters, no '/', '.' "
            f"or '_' (got {repository!r})"
        )


# --- entry points -------------------------------------------------------------------------------

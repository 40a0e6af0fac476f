"""The per-cloud part of the program: the cluster, the storage + identity component, the images.

Each cloud's SDK is imported only on that cloud's path, so a stack needs only its
own extra installed (``pip install -e '.[aws]'``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

import pulumi
import yaml

from infra.config import AzureSettings, ConfigError, StackConfig
from infra.providers import existing_cluster_kubeconfig
from ray_history_pulumi.contracts import ServiceAccountRef, StorageWiring
from ray_history_pulumi.metrics_managed import AZURE_POD_MONITOR_CRD
from ray_history_pulumi.retention import backstop_days

LOG = logging.getLogger(__name__)

#: MinIO gets its own namespace: the history server's enforces the "restricted" Pod Security Standard.
MINIO_NAMESPACE = "ray-history-minio"
#: The node label the kubelet sets to its architecture (amd64, arm64):
#: https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-arch
ARCH_LABEL = "kubernetes.io/arch"


@dataclass
class Cluster:
    """How to reach the cluster, and the identity facts storage components need.

    Attributes:
        kubeconfig: kubeconfig content (a secret).
        oidc_issuer_url: the cluster's OIDC issuer (IRSA, Azure federated credentials).
        oidc_provider_arn: AWS IAM OIDC provider (IRSA).
        name: cluster name (EKS Pod Identity associations).
        project_number: GCP project number, when a created GKE cluster knows it.
        azure_resource_group: the resource group of everything Azure the stack makes.
        kubelet_object_id: AKS kubelet identity, granted AcrPull on a stack-created registry.
        identity_ready: what must exist before workload identity works (a created GKE
            cluster and node pool: they create the ``PROJECT.svc.id.goog`` pool).
        image_pull_members: IAM members that pull the images (GKE node service accounts).
        aks_cluster_id: resource id of an AKS cluster the stack created (managed metrics link it
            to the Azure Monitor workspace).
        aks_ready: what the add-on's CRDs wait for on that cluster (the ManagedCluster).
        azure_monitor_addon: an existing AKS cluster with ``metrics.mode: managed``: whether the
            managed Prometheus add-on's CRDs are there (:func:`azure_monitor_addon_on`).
    """

    kubeconfig: pulumi.Output[str]
    oidc_issuer_url: pulumi.Input[str] | None = None
    oidc_provider_arn: pulumi.Input[str] | None = None
    name: pulumi.Input[str] | None = None
    project_number: pulumi.Input[str] | None = None
    azure_resource_group: pulumi.Input[str] | None = None
    kubelet_object_id: pulumi.Input[str] | None = None
    identity_ready: list[pulumi.Resource] = field(default_factory=list)
    image_pull_members: list[pulumi.Input[str]] = field(default_factory=list)
    aks_cluster_id: pulumi.Input[str] | None = None
    aks_ready: list[pulumi.Resource] = field(default_factory=list)
    azure_monitor_addon: pulumi.Input[bool] | None = None


@dataclass
class Images:
    """Image references the Deployment and the collectorOptions block use, and
    ``node_selector``: where pods running them can start (the architecture the stack built
    them for; empty for the user's own images and for kind's, built for the local one)."""

    collector: pulumi.Input[str]
    server: pulumi.Input[str]
    node_selector: dict[str, str] = field(default_factory=dict)


def cluster_for(config: StackConfig, on_cloud: pulumi.ResourceOptions) -> Cluster:
    """An existing cluster (kubeconfig / StackReference) or, with ``createCluster``, a new one."""
    if not config.create_cluster:
        kubeconfig = existing_cluster_kubeconfig(config)
        if config.aws is not None:
            return Cluster(
                kubeconfig,
                oidc_issuer_url=config.aws.oidc_issuer_url or None,
                oidc_provider_arn=config.aws.oidc_provider_arn or None,
                name=config.aws.cluster_name or None,
            )
        if config.azure is not None:
            # One resource group for everything Azure the stack makes (storage, registry).
            group = azure_resource_group(config.azure, on_cloud)
            addon = None
            if config.metrics.mode == "managed":
                # Only the cluster's owner can turn the add-on on: ask the cluster whether it is.
                context = config.kube_context
                addon = kubeconfig.apply(lambda text: azure_monitor_addon_on(text, context))
            return Cluster(
                kubeconfig,
                oidc_issuer_url=config.azure.oidc_issuer_url,
                azure_resource_group=group,
                kubelet_object_id=config.azure.kubelet_object_id or None,
                azure_monitor_addon=pulumi.Output.unsecret(addon) if addon is not None else None,
            )
        if config.gcp is not None:
            if config.images.build and not config.images.registry and not config.gcp.image_pull_members:
                pulumi.log.warn(
                    "ray-history-server:gcp.imagePullMembers is empty: the existing cluster's nodes pull from the "
                    "stack's Artifact Registry repository with their own permissions (the default compute service "
                    "account's Editor grant); in organisations that disable that grant, list the node service "
                    "account there or pods end in ImagePullBackOff"
                )
            return Cluster(kubeconfig, image_pull_members=list(config.gcp.image_pull_members))
        return Cluster(kubeconfig)
    return created_cluster(config, on_cloud)


def azure_monitor_addon_on(kubeconfig: str, context: str | None, *, timeout: float = 20.0) -> bool:
    """Whether the cluster has the CRD Azure Monitor's managed Prometheus add-on installs
    (:data:`~ray_history_pulumi.metrics_managed.AZURE_POD_MONITOR_CRD`). A cluster that cannot be
    asked counts as on: the Kubernetes provider then reports the unreachable cluster itself."""
    try:
        from kubernetes import client
        from kubernetes import config as kube_config
        from kubernetes.client.exceptions import ApiException

        api = kube_config.new_client_from_config_dict(  # type: ignore[no-untyped-call]
            yaml.safe_load(kubeconfig), context=context or None
        )
    except Exception as error:  # advisory, as infra/cluster_checks.py
        LOG.warning("could not check for CRD %s: %s", AZURE_POD_MONITOR_CRD, type(error).__name__)
        return True
    try:
        client.ApiextensionsV1Api(api).read_custom_resource_definition(AZURE_POD_MONITOR_CRD, _request_timeout=timeout)
    except ApiException as error:
        if error.status == 404:
            return False
        LOG.warning("could not check for CRD %s: HTTP %s", AZURE_POD_MONITOR_CRD, error.status)
        return True
    except Exception as error:
        LOG.warning("could not check for CRD %s: %s", AZURE_POD_MONITOR_CRD, type(error).__name__)
        return True
    finally:
        api.close()
    return True


def created_cluster(config: StackConfig, on_cloud: pulumi.ResourceOptions) -> Cluster:
    """GKE / EKS / AKS made by this stack (ray_history_pulumi/clusters.py)."""
    from ray_history_pulumi import clusters

    settings = config.cluster
    if config.gcp is not None:
        gke = clusters.GkeCluster(
            settings.name,
            clusters.GkeClusterArgs(
                project=config.gcp.project,
                location=config.gcp.region,
                cluster_name=settings.name,
                # A machine type asks for a standard cluster; otherwise Autopilot.
                autopilot=not settings.machine_type,
                machine_type=settings.machine_type or "e2-standard-4",
                node_count=settings.node_count,
                max_node_count=settings.max_node_count or None,
            ),
            opts=on_cloud,
        )
        return Cluster(
            gke.kubeconfig,
            project_number=gke.project_number,
            identity_ready=gke.identity_ready,
            image_pull_members=[gke.node_service_account_member, *config.gcp.image_pull_members],
        )
    if config.aws is not None:
        eks = clusters.EksCluster(
            settings.name,
            clusters.EksClusterArgs(
                subnet_ids=list(config.aws.subnet_ids),
                cluster_name=settings.name,
                region=config.aws.region,
                version=settings.kubernetes_version or None,
                instance_types=(settings.machine_type,) if settings.machine_type else ("m6i.large",),
                desired_size=settings.node_count,
                max_size=max(3, settings.node_count),
            ),
            opts=on_cloud,
        )
        return Cluster(
            eks.kubeconfig,
            oidc_issuer_url=eks.oidc_issuer_url,
            oidc_provider_arn=eks.oidc_provider_arn,
            name=eks.cluster_name,
        )
    if config.azure is not None:
        group = azure_resource_group(config.azure, on_cloud)
        aks = clusters.AksCluster(
            settings.name,
            clusters.AksClusterArgs(
                resource_group_name=group,
                cluster_name=settings.name,
                location=config.azure.location,
                node_vm_size=settings.machine_type or "Standard_D4s_v5",
                node_count=settings.node_count,
                kubernetes_version=settings.kubernetes_version or None,
                app_routing=config.access.ingress is not None and config.access.ingress.flavour == "app-routing",
                azure_monitor_metrics=config.metrics.mode == "managed",
            ),
            opts=on_cloud,
        )
        return Cluster(
            aks.kubeconfig,
            oidc_issuer_url=aks.oidc_issuer_url,
            azure_resource_group=group,
            kubelet_object_id=aks.kubelet_object_id,
            aks_cluster_id=aks.cluster_id,
            aks_ready=[aks.cluster],
        )
    raise ConfigError("ray-history-server:createCluster is not supported for kind: run `kind create cluster` first")


def storage_for(
    config: StackConfig,
    cluster: Cluster,
    *,
    server: ServiceAccountRef,
    writers: Sequence[ServiceAccountRef],
    on_cloud: pulumi.ResourceOptions,
    on_k8s: pulumi.ResourceOptions,
    consumer_namespaces: Sequence[pulumi.Resource] = (),
    index_maintainers: Sequence[ServiceAccountRef] = (),
) -> StorageWiring:
    """The storage + identity component of the stack's cloud; returns its wiring.

    ``index_maintainers``: writers that delete shared indexes too (the retention job).
    """
    bucket = config.storage.bucket or None
    shared_index = config.history_server.shared_index
    # With whole-session retention the bucket's age rule is only a backstop far beyond it.
    days = config.retention.days
    age_rule_days = backstop_days(days) if days else None
    if config.gcp is not None:
        from ray_history_pulumi.gcp_storage import GcsHistoryStorage, GcsHistoryStorageArgs

        return GcsHistoryStorage(
            "history",
            GcsHistoryStorageArgs(
                project=config.gcp.project,
                location=config.gcp.bucket_location,
                writers=writers,
                server=server,
                bucket_name=bucket,
                root_dir=config.storage.root_dir,
                retention_days=age_rule_days,
                project_number=cluster.project_number,
                force_destroy=config.storage.force_destroy,
                workload_pool_ready=cluster.identity_ready,
                shared_index=shared_index,
                index_maintainers=list(index_maintainers),
            ),
            opts=on_cloud,
        ).wiring
    if config.aws is not None:
        from ray_history_pulumi.aws_storage import S3HistoryStorage, S3HistoryStorageArgs

        irsa = config.aws.identity_mode == "irsa"
        identity_mode: Literal["irsa", "pod-identity"] = "irsa" if irsa else "pod-identity"
        return S3HistoryStorage(
            "history",
            S3HistoryStorageArgs(
                identity_mode=identity_mode,
                writers=writers,
                server=server,
                oidc_provider_arn=cluster.oidc_provider_arn,
                oidc_issuer_url=cluster.oidc_issuer_url,
                cluster_name=cluster.name,
                bucket_name=bucket,
                root_dir=config.storage.root_dir,
                retention_days=age_rule_days,
                force_destroy=config.storage.force_destroy,
                shared_index=shared_index,
                index_maintainers=list(index_maintainers),
            ),
            opts=on_cloud,
        ).wiring
    if config.azure is not None:
        from ray_history_pulumi.azure_storage import AzureBlobHistoryStorage, AzureBlobHistoryStorageArgs

        if cluster.oidc_issuer_url is None:
            raise ConfigError("ray-history-server:azure.oidcIssuerUrl is required")
        return AzureBlobHistoryStorage(
            "history",
            AzureBlobHistoryStorageArgs(
                resource_group_name=cluster.azure_resource_group or azure_resource_group(config.azure, on_cloud),
                account_name=config.azure.storage_account,
                oidc_issuer_url=cluster.oidc_issuer_url,
                writers=writers,
                server=server,
                location=config.azure.location,
                container_name=bucket or "ray-historyserver",
                root_dir=config.storage.root_dir,
                retention_days=age_rule_days,
                shared_index=shared_index,
                index_container_name=config.azure.index_container,
                index_maintainers=index_maintainers,
            ),
            opts=on_cloud,
        ).wiring
    from ray_history_pulumi.minio import MinioHistoryStorage, MinioHistoryStorageArgs

    minio = MinioHistoryStorage(
        "history",
        MinioHistoryStorageArgs(
            namespace=MINIO_NAMESPACE,
            create_namespace=True,
            writers=writers,
            server=server,
            bucket_name=bucket or "ray-historyserver",
            root_dir=config.storage.root_dir,
            # The keys are copied into the server's and the writers' namespaces: those must exist first.
            consumer_dependencies=consumer_namespaces,
        ),
        opts=on_k8s,
    ).wiring
    # MinIO on kind has one key pair, its root user's, for the server and the writers alike:
    # nothing narrower to grant, so the stack's mode stands as configured (a local test stack).
    return dataclasses.replace(
        minio, shared_index=shared_index, index_maintainers=[f"{sa.namespace}/{sa.name}" for sa in writers]
    )


def gcp_services(config: StackConfig, on_cloud: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    """The APIs a GCP stack uses, enabled first (none on kind, AWS, Azure, or with ``gcp.enableServices`` off)."""
    if config.gcp is None or not config.gcp.enable_services:
        return []
    from ray_history_pulumi.gcp_services import GcpProjectServices, GcpProjectServicesArgs

    return [GcpProjectServices("apis", GcpProjectServicesArgs(project=config.gcp.project), opts=on_cloud)]


def azure_resource_group(azure: AzureSettings, on_cloud: pulumi.ResourceOptions) -> pulumi.Input[str]:
    """The configured resource group, or one the stack creates (and deletes on destroy)."""
    if azure.resource_group:
        return azure.resource_group
    import pulumi_azure_native as azure_native

    group = azure_native.resources.ResourceGroup("ray-history", location=azure.location, opts=on_cloud)
    return cast(pulumi.Output[str], group.name)


def build_images(
    config: StackConfig,
    cluster: Cluster,
    cloud: pulumi.ProviderResource | None,
    depends_on: Sequence[pulumi.Resource] = (),
) -> tuple[Images, list[pulumi.Resource]]:
    """Prebuilt references from config, or images built and pushed by ``pulumi up``.

    Returns the references and the build resources consumers must wait for. Built images
    are referenced by ``ref`` (tag@digest) so a rebuild rolls the pods. Without
    ``images.registry`` the stack creates the cloud's registry (Artifact Registry, ECR,
    ACR) and pushes there with the credentials the provider gives; with it, images go to
    that registry with the Docker CLI's credentials (kind: the local registry).
    """
    if not config.images.build:
        return Images(collector=config.images.collector, server=config.images.server), []
    import pulumi_docker_build as docker_build

    from ray_history_pulumi.images import HistoryImages, HistoryImagesArgs

    tag = config.images.tag
    repository = config.images.repository or None
    # Cloud nodes are amd64; kind nodes run the local architecture.
    platforms: tuple[str, ...] = () if config.cloud == "kind" else ("linux/amd64",)
    if config.images.registry:
        args = HistoryImagesArgs(
            registry="none",
            existing_registry=config.images.registry,
            repository_name=repository,
            tag=tag,
            platforms=platforms,
        )
    elif config.gcp is not None:
        args = HistoryImagesArgs(
            registry="gcp",
            gcp_project=config.gcp.project,
            gcp_location=config.gcp.region,
            gcp_reader_members=cluster.image_pull_members,
            repository_name=repository,
            tag=tag,
            platforms=platforms,
        )
    elif config.aws is not None:
        args = HistoryImagesArgs(registry="aws", repository_name=repository, tag=tag, platforms=platforms)
    elif config.azure is not None:
        args = HistoryImagesArgs(
            registry="azure",
            azure_resource_group_name=cluster.azure_resource_group,
            # ACR names: 5-50 letters and digits, globally unique like the storage account's.
            azure_registry_name=f"{config.azure.storage_account}acr",
            azure_location=config.azure.location,
            azure_pull_principal_id=cluster.kubelet_object_id,
            repository_name=repository,
            tag=tag,
            platforms=platforms,
        )
    else:
        raise ConfigError("ray-history-server:images.registry is required to build images on kind")
    providers = [docker_build.Provider("docker-build"), *([cloud] if cloud is not None else [])]
    images = HistoryImages(
        "images", args, opts=pulumi.ResourceOptions(providers=providers, depends_on=list(depends_on))
    )
    # An existing cluster may mix architectures (Graviton, T2A/C4A or Arm pools beside x86
    # ones): single-architecture images must not land on the other kind of node.
    selector = {ARCH_LABEL: platforms[0].split("/")[1]} if len(platforms) == 1 else {}
    return Images(collector=images.collector_image, server=images.server_image, node_selector=selector), [images]


def front_door_cidrs(
    config: StackConfig, cluster: Cluster, cloud: pulumi.ProviderResource | None
) -> pulumi.Output[list[str]] | None:
    """Where an ALB's traffic comes from, for the NetworkPolicy of ``access.ingressFrom``: the
    CIDR blocks of the cluster's VPC. With ``target-type: ip`` the ALB sends requests and health
    checks straight to pod IPs from its own addresses in the VPC's subnets
    (https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/how-it-works/), which
    no namespace selector matches; a policy without them cuts the ALB off wherever network
    policy is enforced (https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy.html).
    None when nothing needs them (no ALB, or no NetworkPolicy)."""
    ingress = config.access.ingress
    if config.aws is None or ingress is None or ingress.flavour != "alb" or not config.access.ingress_from:
        return None
    import pulumi_aws as aws

    invoke = pulumi.InvokeOutputOptions(provider=cloud)
    # A created cluster's name is an output: the lookups wait for the cluster.
    eks = aws.eks.get_cluster_output(name=cluster.name or config.aws.cluster_name, opts=invoke)
    vpc = aws.ec2.get_vpc_output(id=eks.vpc_config.vpc_id, opts=invoke)
    return pulumi.Output.all(vpc.cidr_block, vpc.cidr_block_associations).apply(
        # Each association is an output type, a dict keyed by snake_case names (typed or not).
        lambda parts: sorted({parts[0], *(block["cidr_block"] for block in parts[1] or [])})
    )


def settle_front_door(config: StackConfig, cloud: pulumi.ProviderResource | None) -> None:
    """Fill in what only the deploy knows about the front door (``access.trustedHeader``).

    ALB: the ARN of the load balancer the Ingress makes, name pinned and id open
    (``arn:PARTITION:elasticloadbalancing:REGION:ACCOUNT:loadbalancer/app/NAME/*``): the id
    exists only after the controller has made it. IAP: the audience names the backend service
    GKE creates for the Ingress; until it is configured the server does not accept IAP's header.
    """
    door, ingress = config.access.front_door, config.access.ingress
    if door is None or door.ready or ingress is None:
        return
    if door.kind == "alb" and config.aws is not None:
        import pulumi_aws as aws

        invoke = pulumi.InvokeOutputOptions(provider=cloud)
        partition = aws.get_partition_output(opts=invoke).partition
        account = aws.get_caller_identity_output(opts=invoke).account_id
        region = config.aws.region
        name = ingress.load_balancer_name
        door.alb_arn = pulumi.Output.concat(
            "arn:", partition, ":elasticloadbalancing:", region, ":", account, ":loadbalancer/app/", name, "/*"
        )
    elif door.kind == "iap":
        pulumi.log.warn(
            "access.trustedHeader: IAP is enabled on the load balancer, but the server accepts IAP's identity only"
            " once access.trustedHeader.iapAudience is set to /projects/NUMBER/global/backendServices/ID of the"
            f" backend service GKE creates for {config.namespace}/historyserver (gcloud compute backend-services"
            f" list --filter='description~{config.namespace}/historyserver' --format='value(id)'); until then IAP"
            " users get 401"
        )

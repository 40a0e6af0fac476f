"""Ray History on one cluster: the component of the Pulumi package (any language).

``RayHistory`` composes the storage + identity component of the cluster's cloud (``gcp``,
``aws`` or ``azure``), the writer service accounts of the workload namespaces and the
history server (with the cloud's front door when ``ingress_host`` is set). Its arguments
are plain values so that the Pulumi component-provider host can describe them in a package
schema, which TypeScript, Go, .NET, Java and YAML programs use
(``pulumi package add``; see ``pulumi-package/``). Python programs may import the finer
components directly.

No ``from __future__ import annotations`` here: the provider host reads the annotations at
run time to build the schema.
"""

from collections.abc import Callable
from typing import Literal, NotRequired, TypedDict, cast

import pulumi

from ray_history_pulumi.cloud_ingress import HistoryServerIngress
from ray_history_pulumi.contracts import SERVER_SERVICE_ACCOUNT, ServiceAccountRef, StorageWiring
from ray_history_pulumi.history_server import HistoryServerArgs, HistoryServerK8s
from ray_history_pulumi.metrics import RayMetrics, RayMetricsArgs
from ray_history_pulumi.metrics_managed import ManagedMetricsArgs
from ray_history_pulumi.server_access import ServerAccess
from ray_history_pulumi.workloads import DEFAULT_WRITER_ACCOUNT, RayWorkloadAccounts, RayWorkloadAccountsArgs

#: The package's name: its resources are ``ray-history:index:<Component>``.
PACKAGE_NAME = "ray-history"


class GcpSettings(TypedDict):
    """A GKE cluster with Workload Identity."""

    project: str
    """The GCP project of the bucket and the cluster."""
    location: str
    """The bucket's location (region or multi-region)."""
    project_number: NotRequired[pulumi.Input[str]]
    """The project's number; default looked up."""


class AwsSettings(TypedDict):
    """An EKS cluster with Pod Identity (or IRSA)."""

    cluster_name: pulumi.Input[str]
    """The EKS cluster's name (Pod Identity associations name it)."""
    identity_mode: NotRequired[str]
    """``pod-identity`` (default; the agent add-on must be installed) or ``irsa``."""
    oidc_provider_arn: NotRequired[pulumi.Input[str]]
    """``irsa``: the cluster's IAM OIDC provider ARN."""
    oidc_issuer_url: NotRequired[pulumi.Input[str]]
    """``irsa``: the cluster's OIDC issuer URL."""


class AzureSettings(TypedDict):
    """An AKS cluster with the OIDC issuer and workload identity."""

    resource_group_name: pulumi.Input[str]
    """The resource group of the storage account and identities."""
    storage_account_name: str
    """A globally unique storage account name (3-24 lower-case letters and digits)."""
    oidc_issuer_url: pulumi.Input[str]
    """The cluster's OIDC issuer URL."""
    location: NotRequired[pulumi.Input[str]]
    """The Azure region; default the resource group's."""
    index_container_name: NotRequired[str]
    """The container of the shared indexes (``shared_index`` read or write); default ``ray-history-index``."""
    key_vault_certificate_uri: NotRequired[str]
    """With ``ingress_host``: the Key Vault certificate application routing serves
    (``https://VAULT.vault.azure.net/certificates/NAME``; attach the vault to the add-on)."""


class MetricsSettings(TypedDict):
    """Ray's metrics in a Prometheus that outlives Ray clusters (docs/metrics.md)."""

    mode: str
    """``kube-prometheus-stack`` (installed), ``managed`` (the cloud's managed Prometheus) or ``external``."""
    prometheus_url: NotRequired[str]
    """``managed``, ``external``: the Prometheus HTTP API as the server reaches it."""
    grafana_url: NotRequired[str]
    """``managed``, ``external``: Grafana as the server reaches it."""
    retention: NotRequired[str]
    """``kube-prometheus-stack``: how long samples are kept; default ``90d``."""
    storage_size: NotRequired[str]
    """``kube-prometheus-stack``: Prometheus's volume; default ``50Gi``."""
    namespace: NotRequired[str]
    """Namespace of the release and of the dashboards; default ``ray-metrics``."""
    datasource: NotRequired[str]
    """The Grafana datasource name of the store; default ``Prometheus``."""


class RayHistoryArgs(TypedDict):
    """Ray History on one cluster: exactly one of ``gcp``, ``aws``, ``azure``."""

    image: pulumi.Input[str]
    """The history server image (``images/server/Dockerfile``), ideally pinned by digest."""
    gcp: NotRequired[GcpSettings]
    """GKE: a GCS bucket with Workload Identity grants; Google's load balancer and managed certificate."""
    aws: NotRequired[AwsSettings]
    """EKS: an S3 bucket with Pod Identity (or IRSA) roles; an HTTPS ALB."""
    azure: NotRequired[AzureSettings]
    """AKS: a Blob container with federated workload identities; application routing with Key Vault."""
    namespace: NotRequired[str]
    """The server's namespace (created); default ``ray-history``."""
    workload_namespaces: NotRequired[list[str]]
    """Namespaces where Ray clusters run: each gets the writer service account."""
    writer_service_account: NotRequired[str]
    """The service account Ray pod templates use; default ``ray-history-collector``."""
    bucket_name: NotRequired[str]
    """The bucket (container on Azure); default a generated name."""
    root_dir: NotRequired[str]
    """A prefix inside the bucket; default none."""
    ingress_host: NotRequired[str]
    """A DNS name: adds the cloud's front door (TLS, its controller's health check and timeouts)."""
    shared_index: NotRequired[str]
    """``off``, ``read`` (default) or ``write``: whether the server uses and stores shared indexes
    (``ROOT/history-index/``; on Azure a container of their own). Only ``write`` gives its identity
    write access, scoped to them."""
    metrics: NotRequired[MetricsSettings]
    """Ray's metrics store, its scrape configuration and Ray's Grafana dashboards; default none."""


#: Makes the cloud's storage component: (name, writers, server, opts) -> (bucket name, wiring).
_StorageFactory = Callable[
    [str, list[ServiceAccountRef], ServiceAccountRef, pulumi.ResourceOptions],
    tuple[pulumi.Output[str], StorageWiring],
]


class RayHistory(pulumi.ComponentResource):
    """Ray History on a GKE, EKS or AKS cluster: the cloud's bucket and identities, the history
    server (with the cloud's front door when ``ingress_host`` is set) and the writer service
    accounts Ray pods use."""

    bucket_name: pulumi.Output[str]
    """The bucket (container on Azure) that keeps every session."""
    server_url: pulumi.Output[str]
    """The server's in-cluster URL."""
    namespace: pulumi.Output[str]
    """The server's namespace."""
    collector_env: pulumi.Output[dict[str, str]]
    """The collector sidecar's storage environment (identity env included)."""

    def __init__(self, name: str, args: RayHistoryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PACKAGE_NAME}:index:RayHistory", name, None, opts)
        clouds = [cloud for cloud in ("gcp", "aws", "azure") if args.get(cloud) is not None]
        if len(clouds) != 1:
            raise ValueError(f"RayHistory {name}: set exactly one of gcp, aws, azure (got {clouds or 'none'})")
        factory, flavour = {
            "gcp": (_gcs_storage, "gke"),
            "aws": (_s3_storage, "alb"),
            "azure": (_blob_storage, "app-routing"),
        }[clouds[0]]
        self._compose(name, args, flavour, factory(args))

    def _compose(self, name: str, args: RayHistoryArgs, flavour: str, make_storage: _StorageFactory) -> None:
        namespace = args.get("namespace", "ray-history")
        writer_name = args.get("writer_service_account", DEFAULT_WRITER_ACCOUNT)
        workload_namespaces = list(args.get("workload_namespaces", []))
        writers = [ServiceAccountRef(ns, writer_name) for ns in workload_namespaces]
        server = ServiceAccountRef(namespace, SERVER_SERVICE_ACCOUNT)
        child = pulumi.ResourceOptions(parent=self)
        bucket_name, wiring = make_storage(name, writers, server, child)
        host = args.get("ingress_host")
        metrics = _metrics(name, args, workload_namespaces, child)
        history = HistoryServerK8s(
            f"{name}-server",
            HistoryServerArgs(
                image=args["image"],
                wiring=wiring,
                namespace=namespace,
                access=ServerAccess(),
                ingress=HistoryServerIngress(
                    host=host,
                    flavour=flavour,
                    key_vault_certificate_uri=args["azure"].get("key_vault_certificate_uri")
                    if "azure" in args
                    else None,
                )
                if host
                else None,
                metrics_env=metrics.server_env if metrics else {},
            ),
            opts=child,
        )
        if workload_namespaces:
            RayWorkloadAccounts(
                f"{name}-workloads",
                RayWorkloadAccountsArgs(namespaces=workload_namespaces, wiring=wiring, account_name=writer_name),
                opts=child,
            )
        identity = wiring.writers.get(f"{writers[0].namespace}/{writers[0].name}") if writers else None
        self.bucket_name = bucket_name
        self.server_url = history.url
        self.namespace = history.namespace
        self.collector_env = pulumi.Output.all(
            pulumi.Output.from_input(wiring.env), pulumi.Output.from_input(identity.env if identity else {})
        ).apply(lambda parts: {**dict(parts[0] or {}), **dict(parts[1] or {})})
        self.register_outputs(
            {
                "bucket_name": self.bucket_name,
                "server_url": self.server_url,
                "namespace": self.namespace,
                "collector_env": self.collector_env,
            }
        )


def _metrics(
    name: str, args: RayHistoryArgs, workload_namespaces: list[str], opts: pulumi.ResourceOptions
) -> RayMetrics | None:
    settings = args.get("metrics")
    if settings is None:
        return None
    managed = None
    if settings["mode"] == "managed":
        cloud = next(c for c in ("gcp", "aws", "azure") if c in args)
        managed = ManagedMetricsArgs(
            cloud=cloud,
            eks_cluster_name=args["aws"]["cluster_name"] if "aws" in args else None,
            azure_resource_group=args["azure"]["resource_group_name"] if "azure" in args else None,
            azure_location=args["azure"].get("location", "") if "azure" in args else "",
        )
    return RayMetrics(
        f"{name}-metrics",
        RayMetricsArgs(
            mode=settings["mode"],
            workload_namespaces=workload_namespaces,
            namespace=settings.get("namespace", "ray-metrics"),
            retention=settings.get("retention", "90d"),
            storage_size=settings.get("storage_size", "50Gi"),
            prometheus_url=settings.get("prometheus_url", ""),
            grafana_url=settings.get("grafana_url", ""),
            datasource=settings.get("datasource", "Prometheus"),
            managed=managed,
        ),
        opts=opts,
    )


def _gcs_storage(args: RayHistoryArgs) -> _StorageFactory:
    from ray_history_pulumi.gcp_storage import GcsHistoryStorage, GcsHistoryStorageArgs

    gcp = args["gcp"]

    def make(
        name: str, writers: list[ServiceAccountRef], server: ServiceAccountRef, opts: pulumi.ResourceOptions
    ) -> tuple[pulumi.Output[str], StorageWiring]:
        made = GcsHistoryStorage(
            f"{name}-storage",
            GcsHistoryStorageArgs(
                project=gcp["project"],
                location=gcp["location"],
                writers=writers,
                server=server,
                bucket_name=args.get("bucket_name"),
                root_dir=args.get("root_dir", ""),
                project_number=gcp.get("project_number"),
                shared_index=args.get("shared_index", "read"),
            ),
            opts=opts,
        )
        return made.bucket_name, made.wiring

    return make


def _s3_storage(args: RayHistoryArgs) -> _StorageFactory:
    from ray_history_pulumi.aws_storage import S3HistoryStorage, S3HistoryStorageArgs

    aws = args["aws"]
    mode = aws.get("identity_mode", "pod-identity")
    if mode not in ("pod-identity", "irsa"):
        raise ValueError(f"aws.identity_mode: {mode!r} is not pod-identity or irsa")

    def make(
        name: str, writers: list[ServiceAccountRef], server: ServiceAccountRef, opts: pulumi.ResourceOptions
    ) -> tuple[pulumi.Output[str], StorageWiring]:
        made = S3HistoryStorage(
            f"{name}-storage",
            S3HistoryStorageArgs(
                identity_mode=cast(Literal["pod-identity", "irsa"], mode),
                writers=writers,
                server=server,
                cluster_name=aws["cluster_name"],
                oidc_provider_arn=aws.get("oidc_provider_arn"),
                oidc_issuer_url=aws.get("oidc_issuer_url"),
                bucket_name=args.get("bucket_name"),
                root_dir=args.get("root_dir", ""),
                shared_index=args.get("shared_index", "read"),
            ),
            opts=opts,
        )
        return made.bucket_name, made.wiring

    return make


def _blob_storage(args: RayHistoryArgs) -> _StorageFactory:
    from ray_history_pulumi.azure_storage import AzureBlobHistoryStorage, AzureBlobHistoryStorageArgs

    azure = args["azure"]

    def make(
        name: str, writers: list[ServiceAccountRef], server: ServiceAccountRef, opts: pulumi.ResourceOptions
    ) -> tuple[pulumi.Output[str], StorageWiring]:
        made = AzureBlobHistoryStorage(
            f"{name}-storage",
            AzureBlobHistoryStorageArgs(
                resource_group_name=azure["resource_group_name"],
                account_name=azure["storage_account_name"],
                oidc_issuer_url=azure["oidc_issuer_url"],
                writers=writers,
                server=server,
                location=azure.get("location"),
                container_name=args.get("bucket_name", "ray-historyserver"),
                root_dir=args.get("root_dir", ""),
                shared_index=args.get("shared_index", "read"),
                index_container_name=azure.get("index_container_name", "ray-history-index"),
            ),
            opts=opts,
        )
        return made.bucket_name, made.wiring

    return make


#: What the package offers (the provider host's list, and the schema test's).
COMPONENTS: list[type[pulumi.ComponentResource]] = [RayHistory]

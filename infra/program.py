"""The Pulumi program: compose the components for the stack's cloud and export what teams reuse.

``cloud`` picks the storage + identity component (GCS, S3, Azure Blob, or MinIO on
kind); everything on the Kubernetes side is the same for all four: the KubeRay
operator with the ``RayClusterHistoryServer`` gate, the history server, and the
writer service accounts Ray pods run as, and with ``retention.days`` the CronJob deleting
ended sessions (its account is a storage writer; the server's stays read-only). Every
resource gets an explicit provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import cluster_checks
from infra.config import StackConfig, load_config
from infra.outputs import collector_options_output
from infra.platform import (
    Cluster,
    build_images,
    cluster_for,
    front_door_cidrs,
    gcp_services,
    settle_front_door,
    storage_for,
)
from infra.providers import cloud_provider, kubernetes_provider
from ray_history_pulumi.contracts import SERVER_SERVICE_ACCOUNT, ServiceAccountRef, StorageWiring
from ray_history_pulumi.history_server import SERVICE_PORT, HistoryServerArgs, HistoryServerK8s
from ray_history_pulumi.kuberay import KubeRayOperator, KubeRayOperatorArgs
from ray_history_pulumi.metrics import RayMetrics, RayMetricsArgs
from ray_history_pulumi.metrics_managed import ManagedMetricsArgs
from ray_history_pulumi.retention import RETENTION_SERVICE_ACCOUNT, SessionRetention, SessionRetentionArgs
from ray_history_pulumi.server_access import ray_token_reader_roles
from ray_history_pulumi.workloads import RayWorkloadAccounts, RayWorkloadAccountsArgs


@dataclass
class Deployment:
    """What :func:`deploy` created (the tests inspect it; the outputs are exported)."""

    config: StackConfig
    k8s_provider: k8s.Provider
    cloud_provider: pulumi.ProviderResource | None
    cluster: Cluster
    wiring: StorageWiring
    history_server: HistoryServerK8s
    workloads: RayWorkloadAccounts
    kuberay: KubeRayOperator | None
    outputs: dict[str, Any]
    retention: SessionRetention | None = None
    metrics: RayMetrics | None = None


def precreated_namespaces(config: StackConfig, on_k8s: pulumi.ResourceOptions) -> dict[str, k8s.core.v1.Namespace]:
    """The history server's namespace (labelled as HistoryServerK8s labels its own) and,
    with ``workloads.createNamespaces``, the workload namespaces."""
    part_of = {"app.kubernetes.io/part-of": "ray-history"}
    created = {
        config.namespace: k8s.core.v1.Namespace(
            "history-ns",
            metadata={
                "name": config.namespace,
                "labels": {**part_of, "pod-security.kubernetes.io/enforce": "restricted"},
            },
            opts=on_k8s,
        )
    }
    if config.workloads.create_namespaces:
        for namespace in config.workloads.namespaces:
            if namespace not in created:
                created[namespace] = k8s.core.v1.Namespace(
                    f"workloads-{namespace}-ns", metadata={"name": namespace, "labels": part_of}, opts=on_k8s
                )
    return created


def cluster_role_annotations(config: StackConfig, kubeconfig: pulumi.Output[str]) -> pulumi.Output[dict[str, str]]:
    """The owning stack's annotation for the ClusterRole, after checking that an existing
    cluster has no ClusterRole of that name owned by someone else (:mod:`infra.cluster_checks`)."""
    # Self-managed backends name every organization "organization".
    stack = f"{pulumi.get_organization() or 'organization'}/{pulumi.get_project()}/{pulumi.get_stack()}"
    name = config.history_server.cluster_role_name
    if config.create_cluster:  # a new cluster has no roles of ours or anyone's
        return pulumi.Output.from_input({cluster_checks.STACK_ANNOTATION: stack})
    checked = kubeconfig.apply(
        lambda text: cluster_checks.check_cluster_role_free(
            text, config.kube_context, name, stack, "ray-history-server:historyServer.clusterRoleName"
        )
    )
    # The kubeconfig is a secret; the annotation is not.
    return pulumi.Output.unsecret(checked.apply(lambda _: {cluster_checks.STACK_ANNOTATION: stack}))


def grant_ray_token_reads(
    config: StackConfig,
    server: ServiceAccountRef,
    on_k8s: pulumi.ResourceOptions,
    depends_on: list[pulumi.Resource],
) -> None:
    """``get`` on Secrets in each workload namespace only, for live clusters' Ray auth tokens."""
    opts = pulumi.ResourceOptions.merge(on_k8s, pulumi.ResourceOptions(depends_on=depends_on))
    for obj in ray_token_reader_roles(list(config.workloads.namespaces), server.namespace, server.name):
        namespace = obj["metadata"]["namespace"]
        if obj["kind"] == "Role":
            k8s.rbac.v1.Role(f"ray-token-reader-{namespace}", metadata=obj["metadata"], rules=obj["rules"], opts=opts)
        else:
            k8s.rbac.v1.RoleBinding(
                f"ray-token-reader-{namespace}-binding",
                metadata=obj["metadata"],
                role_ref=obj["role_ref"],
                subjects=obj["subjects"],
                opts=opts,
            )


def metrics_for(
    config: StackConfig, cluster: Cluster, cloud: pulumi.ProviderResource | None, on_k8s: pulumi.ResourceOptions
) -> RayMetrics | None:
    """Ray's metrics store and dashboards (``metrics.mode``); None with ``off``."""
    settings = config.metrics
    if settings.mode == "off":
        return None
    managed = None
    if settings.mode == "managed":
        managed = ManagedMetricsArgs(
            cloud=config.cloud,
            cloud_provider=cloud,
            eks_cluster_name=(cluster.name or config.aws.cluster_name) if config.aws is not None else None,
            azure_resource_group=cluster.azure_resource_group,
            azure_location=config.azure.location if config.azure is not None else "",
            aks_cluster_id=cluster.aks_cluster_id,
            aks_cluster_ready=cluster.aks_ready,
            aks_addon_on=cluster.azure_monitor_addon,
        )
    return RayMetrics(
        "metrics",
        RayMetricsArgs(
            mode=settings.mode,
            workload_namespaces=list(config.workloads.namespaces),
            namespace=settings.namespace,
            chart_version=settings.chart_version,
            retention=settings.retention,
            storage_size=settings.storage_size,
            storage_class=settings.storage_class,
            scrape_interval=settings.scrape_interval,
            prometheus_url=settings.prometheus_url,
            grafana_url=settings.grafana_url,
            datasource=settings.datasource,
            dashboards=settings.dashboards,
            managed=managed,
        ),
        opts=on_k8s,
    )


def deploy(config: StackConfig | None = None) -> Deployment:
    """Create every resource of the stack and export its outputs."""
    config = config or load_config()
    cloud = cloud_provider(config)
    on_cloud = pulumi.ResourceOptions(providers=[cloud] if cloud else [])
    # A fresh GCP project has its APIs off: every Google Cloud component waits for them.
    apis = gcp_services(config, on_cloud)
    on_cloud = pulumi.ResourceOptions.merge(on_cloud, pulumi.ResourceOptions(depends_on=apis))

    cluster = cluster_for(config, on_cloud)
    k8s_provider = kubernetes_provider(config, cluster.kubeconfig)
    on_k8s = pulumi.ResourceOptions(providers=[k8s_provider])

    server_account = ServiceAccountRef(config.namespace, SERVER_SERVICE_ACCOUNT)
    writers = [ServiceAccountRef(ns, config.workloads.service_account) for ns in config.workloads.namespaces]
    # The retention job deletes: it is a writer (listed last: writers[0] is the collectors' account).
    gc_account = ServiceAccountRef(config.namespace, RETENTION_SERVICE_ACCOUNT) if config.retention.days else None
    # On kind, MinIO copies its keys into the server's and the writers' namespaces, so
    # those namespaces are created here, before the storage, instead of by the components.
    namespaces = precreated_namespaces(config, on_k8s) if config.cloud == "kind" else {}
    wiring = storage_for(
        config,
        cluster,
        server=server_account,
        writers=[*writers, *([gc_account] if gc_account else [])],
        on_cloud=on_cloud,
        on_k8s=on_k8s,
        consumer_namespaces=list(namespaces.values()),
        # The job deletes a session together with its shared indexes.
        index_maintainers=[gc_account] if gc_account else [],
    )
    images, image_builds = build_images(config, cluster, cloud, depends_on=apis)

    kuberay = None
    if config.kuberay.install:
        kuberay = KubeRayOperator(
            "kuberay",
            KubeRayOperatorArgs(
                version=config.kuberay.version,
                namespace=config.kuberay.namespace,
                release_name=config.kuberay.release_name,
            ),
            opts=on_k8s,
        )
    settle_front_door(config, cloud)
    # The GMP query proxy looks up the project and grants on it: Resource Manager calls.
    metrics = metrics_for(
        config, cluster, cloud, pulumi.ResourceOptions.merge(on_k8s, pulumi.ResourceOptions(depends_on=apis))
    )
    history_server = HistoryServerK8s(
        "history",
        HistoryServerArgs(
            image=images.server,  # tag@digest when built: a rebuild rolls the pods
            wiring=wiring,
            namespace=config.namespace,
            create_namespace=config.namespace not in namespaces,
            image_pull_policy=config.images.pull_policy,
            replicas=config.history_server.replicas,
            cache_size_limit=config.history_server.cache_size,
            cache_storage_class=config.history_server.cache_storage_class or None,
            cluster_role_name=config.history_server.cluster_role_name,
            image_ready=image_builds,
            access=config.access,
            ingress=config.access.ingress,
            cluster_role_annotations=cluster_role_annotations(config, cluster.kubeconfig),
            metrics_env=metrics.server_env if metrics else {},
            front_door_cidrs=front_door_cidrs(config, cluster, cloud),
            node_selector=images.node_selector,
        ),
        opts=on_k8s,
    )
    if config.access.read_ray_tokens:
        grant_ray_token_reads(config, server_account, on_k8s, depends_on=[history_server])
    retention = None
    if config.retention.days:
        retention = SessionRetention(
            "retention",
            SessionRetentionArgs(
                image=images.server,  # has the ray-history script
                wiring=wiring,
                days=config.retention.days,
                namespace=config.namespace,
                cluster_role_name=f"{config.history_server.cluster_role_name}-gc",
                image_pull_policy=config.images.pull_policy,
                image_ready=image_builds,
                node_selector=images.node_selector,
            ),
            # The server component makes the namespace.
            opts=pulumi.ResourceOptions.merge(on_k8s, pulumi.ResourceOptions(depends_on=[history_server])),
        )
    workloads = RayWorkloadAccounts(
        "ray-workloads",
        RayWorkloadAccountsArgs(
            namespaces=list(config.workloads.namespaces),
            wiring=wiring,
            account_name=config.workloads.service_account,
            create_namespaces=config.workloads.create_namespaces and not namespaces,
        ),
        opts=on_k8s,
    )

    outputs: dict[str, Any] = {
        "cloud": config.cloud,
        "bucket": wiring.bucket,
        "storageBackend": wiring.backend,
        # The collectors' storage settings (README "Storage configuration" names).
        "storageEnv": wiring.env,
        # On kind the MinIO keys come from a Secret: name -> {secret, key}.
        "storageSecretEnv": {name: {"secret": s, "key": k} for name, (s, k) in wiring.secret_env.items()},
        "collectorImage": images.collector,
        "serverImage": images.server,
        "historyServer": {
            "name": history_server.service_name,
            "namespace": history_server.namespace,
            "port": SERVICE_PORT,
            "url": history_server.url,
        },
        "workloadServiceAccounts": [
            {"namespace": ns, "name": workloads.account_name} for ns in config.workloads.namespaces
        ],
        "workloadPodLabels": workloads.pod_labels,
        "historyServerOptions": collector_options_output(
            wiring, images.collector, config.images.pull_policy, writers[0]
        ),
        "kuberayNamespace": config.kuberay.namespace if kuberay else None,
        "retentionDays": config.retention.days,
        # Where the server reads Ray's metrics (empty with metrics.mode off).
        "metrics": {"mode": config.metrics.mode, **(metrics.server_env if metrics else {})},
    }
    for name, value in outputs.items():
        pulumi.export(name, value)
    return Deployment(
        config, k8s_provider, cloud, cluster, wiring, history_server, workloads, kuberay, outputs, retention, metrics
    )

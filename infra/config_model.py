"""The typed settings of a stack (what :mod:`infra.config` validates stack configuration into)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ray_history_pulumi.metrics import DEFAULT_DATASOURCE, KPS_CHART_VERSION
from ray_history_pulumi.server_access import ServerAccess

#: Default chart version of the KubeRay operator (the RayClusterHistoryServer gate needs >= 1.7).
DEFAULT_KUBERAY_VERSION = "1.7.1"


@dataclass(frozen=True)
class ClusterSettings:
    """The cluster the program creates when ``createCluster`` is true.

    Attributes:
        name: cluster name (also the prefix of its cloud resources).
        node_count: nodes in the default pool (GKE regional pools: the total, see max_node_count).
        max_node_count: GKE regional pools autoscale between node_count and this total; 0 = max(node_count, 3).
        machine_type: GCE machine type / EC2 instance type / Azure VM size; empty = the component's default.
            x86 only while images.build is true (the images are built for linux/amd64).
        kubernetes_version: empty = the cloud's default version.
    """

    name: str = "ray-history"
    node_count: int = 2
    max_node_count: int = 0
    machine_type: str = ""
    kubernetes_version: str = ""


@dataclass(frozen=True)
class StorageSettings:
    """The bucket / container the collectors write and the history server reads.

    Attributes:
        bucket: bucket (GCS, S3, MinIO) or blob container (Azure) name; empty = auto-named.
        root_dir: key prefix inside the bucket (``STORAGE_ROOT_DIR``); empty = bucket root.
        force_destroy: let ``pulumi destroy`` delete a non-empty bucket (test stacks only).
    """

    bucket: str = ""
    root_dir: str = ""
    force_destroy: bool = False


@dataclass(frozen=True)
class RetentionSettings:
    """Whole-session retention: a daily CronJob running ``ray-history gc`` (docs/operations.md).

    Attributes:
        days: delete stored sessions that ended (were last written) more than this many days
            ago (at most 36500), never one still running; empty = keep history forever. When
            set, the bucket's own age rule (which deletes objects one by one, running sessions'
            too) is kept only as a backstop at 3 times this.
    """

    days: int | None = None


@dataclass(frozen=True)
class ImageSettings:
    """The collector and history server images.

    Attributes:
        build: build ``images/`` and push them to ``registry`` (with the Docker CLI's
            credentials); false = use ``collector`` / ``server`` as given.
        registry: registry host/path to push to (kind: the local registry, ``localhost:5001``).
        tag: tag of built images.
        collector: prebuilt collector image reference (required when ``build`` is false).
        server: prebuilt history server image reference (required when ``build`` is false).
        pull_policy: ``imagePullPolicy`` of the server Deployment and the collector sidecar.
        repository: repository id (Artifact Registry) / prefix (ECR, ACR, ``registry``); empty =
            ``ray-history-<stack>`` / ``ray-history/<stack>`` on a registry the stack creates,
            ``ray-history`` under ``registry``.
    """

    build: bool = True
    registry: str = ""
    tag: str = "latest"
    collector: str = ""
    server: str = ""
    pull_policy: str = "IfNotPresent"
    repository: str = ""


@dataclass(frozen=True)
class HistoryServerSettings:
    """The history server Deployment.

    Attributes:
        replicas: server pods (at least 1). Two or more add a PodDisruptionBudget (node
            drains evict one pod at a time) and spread the pods over nodes and zones. Each pod
            has its own index cache: a session's first request on a pod builds its index there
            (or the pod's background indexing has built it ahead).
        cache_size: size of the index cache (``20Gi``); the server fills 80 % of it.
        cache_storage_class: empty = an ``emptyDir`` counted in the pod's ``ephemeral-storage``
            request (GKE Autopilot allows at most 10Gi of that per pod); a StorageClass name =
            a generic ephemeral volume (a PVC made and deleted with the pod) of ``cache_size``.
        cluster_role_name: the ClusterRole reading RayClusters (cluster-scoped: a second stack on
            the same cluster needs its own name).
        shared_index: ``off``, ``read`` or ``write`` (the server's ``--shared-index``). ``read``
            uses indexes other servers stored under ``ROOT/history-index/`` (on Azure in the
            container ``azure.indexContainer``); ``write`` also stores the server's own, and only
            then does the server's identity get write access, scoped to that prefix (GCS: an
            IAM condition; S3: a policy on that prefix; Azure: Contributor on that container)
            or, on kind, MinIO's one key pair, which can already write everything. ``off``: no
            index container, no extra grant.
    """

    replicas: int = 1
    cache_size: str = "8Gi"
    cache_storage_class: str = ""
    cluster_role_name: str = "raycluster-reader"
    shared_index: str = "read"


@dataclass(frozen=True)
class MetricsSettings:
    """Ray's metrics in a Prometheus that outlives Ray clusters, and Ray's Grafana dashboards (docs/metrics.md).

    Attributes:
        mode: ``off``; ``kube-prometheus-stack`` (the program installs it: Prometheus on a
            volume, Grafana with Ray's dashboards, scrape objects for Ray pods); ``managed``
            (the cloud's managed Prometheus: GKE Managed Service for Prometheus, Amazon Managed
            Service for Prometheus, Azure Monitor managed Prometheus, with the scrape objects, the
            cloud's query proxy on gcp/aws, and a Grafana with Ray's dashboards); ``external`` (the team's
            own Prometheus and Grafana at ``prometheusUrl`` / ``grafanaUrl``; nothing installed).
        namespace: namespace of the kube-prometheus-stack release, and of the dashboards' ConfigMaps.
        chart_version: kube-prometheus-stack chart version.
        retention: how long Prometheus keeps samples (a Prometheus duration, ``90d``): how long a
            dead session's charts can be seen.
        storage_size: Prometheus's PersistentVolume.
        storage_class: its StorageClass; empty = the cluster's default.
        scrape_interval: how often Ray pods are scraped (a Prometheus duration).
        prometheus_url: ``managed``, ``external``: the Prometheus HTTP API as the history server
            reaches it (an http:// or https:// URL; required with ``external`` and with ``managed``
            on azure; ``managed`` on gcp/aws: empty = the query proxy the program runs).
        grafana_url: ``managed``, ``external``: Grafana as the history server reaches it (optional;
            ``managed``: empty = the Grafana the program installs).
        datasource: the Grafana datasource name of the store (the server's ``--prometheus-datasource``).
        dashboards: provision Ray's Grafana dashboards (``kube-prometheus-stack``, ``managed``).
    """

    mode: str = "off"
    namespace: str = "ray-metrics"
    chart_version: str = KPS_CHART_VERSION
    retention: str = "90d"
    storage_size: str = "50Gi"
    storage_class: str = ""
    scrape_interval: str = "15s"
    prometheus_url: str = ""
    grafana_url: str = ""
    datasource: str = DEFAULT_DATASOURCE
    dashboards: bool = True


@dataclass(frozen=True)
class KubeRaySettings:
    """The KubeRay operator (Helm chart ``kuberay-operator``).

    Attributes:
        install: install the chart; false = an operator >= 1.7 with the
            ``RayClusterHistoryServer`` gate already runs in the cluster.
        version: chart version (>= 1.7.0).
        namespace: namespace of the operator.
        release_name: Helm release name (unique per namespace).
    """

    install: bool = True
    version: str = DEFAULT_KUBERAY_VERSION
    namespace: str = "ray-system"
    release_name: str = "kuberay-operator"


@dataclass(frozen=True)
class WorkloadSettings:
    """Where Ray clusters run: each namespace gets the writer service account.

    Attributes:
        namespaces: namespaces Ray pods run in.
        service_account: the ServiceAccount Ray pod templates use (bucket write access).
        create_namespaces: create the namespaces (false: they exist already).
    """

    namespaces: tuple[str, ...] = ("default",)
    service_account: str = "ray-history-collector"
    create_namespaces: bool = False


@dataclass(frozen=True)
class GcpSettings:
    """Google Cloud: the explicit ``gcp`` provider and the bucket location.

    Attributes:
        project: project id (required).
        region: region of created clusters and the Artifact Registry repository.
        bucket_location: GCS location of the bucket (multi-region ``US`` or a region).
        image_pull_members: IAM members (``serviceAccount:...``) granted
            ``roles/artifactregistry.reader`` on the stack's repository: the node service
            account of an existing cluster (a created cluster's is added automatically).
        enable_services: enable the APIs the stack needs on the project.
    """

    project: str
    region: str = "us-central1"
    bucket_location: str = "US"
    image_pull_members: tuple[str, ...] = ()
    enable_services: bool = True


@dataclass(frozen=True)
class AwsSettings:
    """AWS: the explicit ``aws`` provider and how pods get S3 credentials.

    Attributes:
        region: region (required).
        identity_mode: ``pod-identity`` (EKS Pod Identity agent) or ``irsa`` (IAM roles
            for service accounts through the cluster's OIDC provider).
        cluster_name: existing cluster's name (pod-identity associations need it).
        oidc_provider_arn: existing cluster's IAM OIDC provider ARN (irsa).
        oidc_issuer_url: existing cluster's OIDC issuer URL (irsa).
        subnet_ids: subnets (two AZs at least) of the cluster ``createCluster`` makes.
    """

    region: str
    identity_mode: str = "pod-identity"
    cluster_name: str = ""
    oidc_provider_arn: str = ""
    oidc_issuer_url: str = ""
    subnet_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class AzureSettings:
    """Azure: the explicit ``azure-native`` provider and workload identity facts.

    Attributes:
        location: Azure region (required).
        storage_account: globally unique storage account name, 3-24 lower-case letters and digits (required).
        resource_group: existing resource group to create resources in; empty = create one.
        subscription_id: empty = the subscription of the signed-in principal.
        oidc_issuer_url: existing AKS cluster's OIDC issuer URL (federated credentials need it).
        kubelet_object_id: existing AKS cluster's kubelet identity (object id), granted AcrPull
            on the registry the stack creates.
        index_container: the blob container of the shared indexes (``historyServer.sharedIndex``
            ``read`` or ``write``), in the same account: 3-63 lower-case letters, digits and
            single '-', not the history container.
    """

    location: str
    storage_account: str
    resource_group: str = ""
    subscription_id: str = ""
    oidc_issuer_url: str = ""
    kubelet_object_id: str = ""
    index_container: str = "ray-history-index"


@dataclass(frozen=True)
class ClusterStackRef:
    """Another stack that exports the cluster's kubeconfig.

    Attributes:
        name: fully qualified stack name (``org/project/stack``).
        kubeconfig_output: name of the output holding the kubeconfig content.
    """

    name: str
    kubeconfig_output: str = "kubeconfig"


@dataclass(frozen=True)
class StackConfig:
    """Everything the program needs, validated.

    Attributes:
        cloud: ``gcp``, ``aws``, ``azure`` or ``kind``.
        namespace: namespace of the history server.
        kubeconfig: path to, or content of, the existing cluster's kubeconfig.
        kube_context: kubeconfig context to use; empty = the current context.
        cluster_stack: stack exporting the kubeconfig (instead of ``kubeconfig``).
        create_cluster: create GKE / EKS / AKS instead of using an existing cluster.
        cluster: settings of the created cluster.
    """

    cloud: str
    namespace: str = "ray-history"
    kubeconfig: str = ""
    kube_context: str = ""
    cluster_stack: ClusterStackRef | None = None
    create_cluster: bool = False
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    images: ImageSettings = field(default_factory=ImageSettings)
    history_server: HistoryServerSettings = field(default_factory=HistoryServerSettings)
    access: ServerAccess = field(default_factory=ServerAccess)
    kuberay: KubeRaySettings = field(default_factory=KubeRaySettings)
    workloads: WorkloadSettings = field(default_factory=WorkloadSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    gcp: GcpSettings | None = None
    aws: AwsSettings | None = None
    azure: AzureSettings | None = None

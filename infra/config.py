"""Stack configuration of the Pulumi program, validated into typed dataclasses.

Every key lives in the project namespace (``ray-history-server:<key>``); nested
settings are objects (``pulumi config set --path 'ray-history-server:gcp.project' p``).
:func:`parse_config` is pure (a mapping in, a :class:`StackConfig` out) so it is
unit-tested without Pulumi; :func:`load_config` feeds it the stack's configuration.
Pulumi hands scalars over as strings and objects as JSON, so every reader accepts
both the decoded value and its string form. Each error names the offending key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from infra.config_access import default_access, read_access, resolve_ingress
from infra.config_checks import (
    check_cluster_name,
    check_cluster_source,
    check_federated_credentials,
    check_front_door_sources,
    check_image_pull,
    check_image_repository,
    check_index_container,
    check_machine_architecture,
    check_namespaces,
)
from infra.config_metrics import check_metrics
from infra.config_model import (
    DEFAULT_KUBERAY_VERSION,
    AwsSettings,
    AzureSettings,
    ClusterSettings,
    ClusterStackRef,
    GcpSettings,
    HistoryServerSettings,
    ImageSettings,
    KubeRaySettings,
    MetricsSettings,
    RetentionSettings,
    StackConfig,
    StorageSettings,
    WorkloadSettings,
)
from infra.config_values import (
    _DNS_LABEL,
    _DNS_SUBDOMAIN,
    NAMESPACE,
    ConfigError,
    _decode,
    _key,
    _read_section,
    _Section,
    _typed,
)
from ray_history_pulumi.metrics import METRICS_MODES, check_url
from ray_history_pulumi.storage_common import SHARED_INDEX_MODES
from runtime.cli.gc import MAX_AGE_DAYS

__all__ = [
    "NAMESPACE",
    "AwsSettings",
    "AzureSettings",
    "ClusterSettings",
    "ClusterStackRef",
    "ConfigError",
    "GcpSettings",
    "HistoryServerSettings",
    "ImageSettings",
    "KubeRaySettings",
    "MetricsSettings",
    "RetentionSettings",
    "StackConfig",
    "StorageSettings",
    "WorkloadSettings",
    "load_config",
    "parse_config",
]

CLOUDS = ("gcp", "aws", "azure", "kind")
AWS_IDENTITY_MODES = ("irsa", "pod-identity")
IMAGE_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
#: KubeRay injects the collector from ``collectorOptions`` only from this version on.
MIN_KUBERAY_VERSION = (1, 7, 0)

# Kubernetes object names (RFC 1123 labels) and a loose semver for chart versions.
_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+][0-9A-Za-z.-]+)?$")
_QUANTITY = re.compile(r"^[1-9]\d*(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_REPOSITORY = re.compile(r"^[a-z][a-z0-9-]*(/[a-z0-9][a-z0-9._-]*)*$")
_STACK_NAME = re.compile(r"^[\w.-]+/[\w.-]+/[\w.-]+$|^[\w.-]+$")
# Azure blob container names.
_CONTAINER = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
# Prometheus durations, and volume sizes.
_DURATION = re.compile(r"^[1-9]\d*(ms|s|m|h|d|w|y)$")
_METRICS_SIZE = re.compile(r"^[1-9]\d*(Mi|Gi|Ti)$")

# --- sections -----------------------------------------------------------------------------------


def _cluster(s: _Section) -> ClusterSettings:
    settings = ClusterSettings(
        name=s.dns_label("name", ClusterSettings.name),
        node_count=s.positive_int("nodeCount", ClusterSettings.node_count),
        max_node_count=s.get("maxNodeCount", int, 0),
        machine_type=s.get("machineType", str, ""),
        kubernetes_version=s.get("kubernetesVersion", str, ""),
    )
    if settings.max_node_count and settings.max_node_count < settings.node_count:
        raise ConfigError(
            f"{_key('cluster.maxNodeCount')} must be at least cluster.nodeCount ({settings.node_count}), "
            f"got {settings.max_node_count}"
        )
    return settings


def _history_server(s: _Section) -> HistoryServerSettings:
    cache_size = s.get("cacheSize", str, HistoryServerSettings.cache_size)
    if not _QUANTITY.fullmatch(cache_size):
        raise ConfigError(f"{_key('historyServer.cacheSize')} must be a size like 8Gi or 500Mi (got {cache_size!r})")
    storage_class = s.get("cacheStorageClass", str, "")
    if storage_class and not _DNS_SUBDOMAIN.match(storage_class):
        raise ConfigError(
            f"{_key('historyServer.cacheStorageClass')} must be a StorageClass name (got {storage_class!r})"
        )
    return HistoryServerSettings(
        replicas=s.positive_int("replicas", HistoryServerSettings.replicas),
        cache_size=cache_size,
        cache_storage_class=storage_class,
        cluster_role_name=s.dns_subdomain("clusterRoleName", HistoryServerSettings.cluster_role_name),
        shared_index=s.choice("sharedIndex", SHARED_INDEX_MODES, HistoryServerSettings.shared_index),
    )


def _storage(s: _Section) -> StorageSettings:
    bucket = s.get("bucket", str, "")
    if bucket and not re.match(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", bucket):
        raise ConfigError(
            f"{_key('storage.bucket')} must be 3-63 lower-case letters, digits, '.' or '-' (got {bucket!r})"
        )
    return StorageSettings(
        bucket=bucket, root_dir=s.get("rootDir", str, "").strip("/"), force_destroy=s.get("forceDestroy", bool, False)
    )


def _retention(s: _Section) -> RetentionSettings:
    if s.raw.get("days") in (None, ""):
        s.used.add("days")
        return RetentionSettings()
    days = s.positive_int("days", 1)
    if days > MAX_AGE_DAYS:
        raise ConfigError(
            f"{_key('retention.days')} must be at most {MAX_AGE_DAYS} (100 years: what the CronJob's "
            f"`ray-history gc --older-than` accepts), got {days}"
        )
    return RetentionSettings(days=days)


def _images(s: _Section) -> ImageSettings:
    images = ImageSettings(
        build=s.get("build", bool, True),
        registry=s.get("registry", str, "").rstrip("/"),
        tag=s.get("tag", str, "latest"),
        collector=s.get("collector", str, ""),
        server=s.get("server", str, ""),
        pull_policy=s.choice("pullPolicy", IMAGE_PULL_POLICIES, "IfNotPresent"),
        repository=s.get("repository", str, "").strip("/"),
    )
    if images.repository and (len(images.repository) > 63 or not _REPOSITORY.match(images.repository)):
        raise ConfigError(
            f"{_key('images.repository')} must be lower-case letters, digits and '-', '/'-separated, "
            f"at most 63 characters, starting with a letter (got {images.repository!r})"
        )
    if not images.build:
        for key, ref in (("collector", images.collector), ("server", images.server)):
            if not ref:
                raise ConfigError(f"{_key('images.' + key)} is required when images.build is false")
    return images


def _kuberay(s: _Section) -> KubeRaySettings:
    version = s.get("version", str, DEFAULT_KUBERAY_VERSION)
    match = _SEMVER.match(version)
    if not match:
        raise ConfigError(f"{_key('kuberay.version')} must be a chart version like 1.7.0 (got {version!r})")
    if tuple(int(part) for part in match.groups()) < MIN_KUBERAY_VERSION:
        raise ConfigError(
            f"{_key('kuberay.version')} must be 1.7.0 or later: the RayClusterHistoryServer feature gate "
            f"appeared in KubeRay 1.7 (got {version!r})"
        )
    return KubeRaySettings(
        install=s.get("install", bool, True),
        version=version.removeprefix("v"),
        namespace=s.dns_label("namespace", "ray-system"),
        release_name=s.dns_label("releaseName", KubeRaySettings.release_name),
    )


def _workloads(s: _Section) -> WorkloadSettings:
    namespaces = s.get("namespaces", list, ["default"])
    if not namespaces:
        raise ConfigError(f"{_key('workloads.namespaces')} must list at least one namespace")
    for index, namespace in enumerate(namespaces):
        if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
            raise ConfigError(f"{_key(f'workloads.namespaces[{index}]')} must be a namespace name (got {namespace!r})")
    if len(set(namespaces)) != len(namespaces):
        raise ConfigError(f"{_key('workloads.namespaces')} lists a namespace twice")
    return WorkloadSettings(
        namespaces=tuple(namespaces),
        service_account=s.dns_label("serviceAccount", WorkloadSettings.service_account),
        create_namespaces=s.get("createNamespaces", bool, False),
    )


def _metrics_duration(value: str, key: str, example: str) -> str:
    if not _DURATION.match(value):
        raise ConfigError(f"{_key('metrics.' + key)} must be a Prometheus duration like {example} (got {value!r})")
    return value


def _metrics_url(value: str, key: str) -> str:
    if not value:
        return ""
    try:
        return check_url(value, key)
    except ValueError:
        raise ConfigError(f"{_key('metrics.' + key)} must be an http:// or https:// URL (got {value!r})") from None


def _metrics(s: _Section) -> MetricsSettings:
    size = s.get("storageSize", str, MetricsSettings.storage_size)
    if not _METRICS_SIZE.match(size):
        raise ConfigError(f"{_key('metrics.storageSize')} must be a size like 50Gi (got {size!r})")
    storage_class = s.get("storageClass", str, "")
    if storage_class and not _DNS_SUBDOMAIN.match(storage_class):
        raise ConfigError(f"{_key('metrics.storageClass')} must be a StorageClass name (got {storage_class!r})")
    chart = s.get("chartVersion", str, MetricsSettings.chart_version)
    if not _SEMVER.match(chart) or chart.startswith("v"):
        raise ConfigError(f"{_key('metrics.chartVersion')} must be a chart version like 83.6.0 (got {chart!r})")
    datasource = s.get("datasource", str, MetricsSettings.datasource)
    if not datasource.strip():
        raise ConfigError(f"{_key('metrics.datasource')} must name the Grafana datasource")
    return MetricsSettings(
        mode=s.choice("mode", METRICS_MODES, MetricsSettings.mode),
        namespace=s.dns_label("namespace", MetricsSettings.namespace),
        chart_version=chart,
        retention=_metrics_duration(s.get("retention", str, MetricsSettings.retention), "retention", "90d"),
        storage_size=size,
        storage_class=storage_class,
        scrape_interval=_metrics_duration(
            s.get("scrapeInterval", str, MetricsSettings.scrape_interval), "scrapeInterval", "15s"
        ),
        prometheus_url=_metrics_url(s.get("prometheusUrl", str, ""), "prometheusUrl"),
        grafana_url=_metrics_url(s.get("grafanaUrl", str, ""), "grafanaUrl"),
        datasource=datasource,
        dashboards=s.get("dashboards", bool, True),
    )


def _gcp(s: _Section) -> GcpSettings:
    members = s.get("imagePullMembers", list, [])
    for index, member in enumerate(members):
        if not isinstance(member, str) or not member.startswith(("serviceAccount:", "principal:", "group:")):
            raise ConfigError(
                f"{_key(f'gcp.imagePullMembers[{index}]')} must be an IAM member such as "
                f"serviceAccount:NODES@PROJECT.iam.gserviceaccount.com (got {member!r})"
            )
    return GcpSettings(
        project=s.require("project", str, "when cloud is gcp"),
        region=s.get("region", str, "us-central1"),
        bucket_location=s.get("bucketLocation", str, "US"),
        image_pull_members=tuple(members),
        enable_services=s.get("enableServices", bool, True),
    )


def _aws(s: _Section) -> AwsSettings:
    return AwsSettings(
        region=s.require("region", str, "when cloud is aws"),
        identity_mode=s.choice("identityMode", AWS_IDENTITY_MODES, "pod-identity"),
        cluster_name=s.get("clusterName", str, ""),
        oidc_provider_arn=s.get("oidcProviderArn", str, ""),
        oidc_issuer_url=s.get("oidcIssuerUrl", str, ""),
        subnet_ids=tuple(str(subnet) for subnet in s.get("subnetIds", list, [])),
    )


def _azure(s: _Section) -> AzureSettings:
    return AzureSettings(
        location=s.require("location", str, "when cloud is azure"),
        storage_account=_storage_account(s.require("storageAccount", str, "when cloud is azure")),
        resource_group=s.get("resourceGroup", str, ""),
        subscription_id=s.get("subscriptionId", str, ""),
        oidc_issuer_url=s.get("oidcIssuerUrl", str, ""),
        kubelet_object_id=s.get("kubeletObjectId", str, ""),
        index_container=_index_container(s.get("indexContainer", str, AzureSettings.index_container)),
    )


def _index_container(name: str) -> str:
    if not _CONTAINER.match(name):
        raise ConfigError(
            f"{_key('azure.indexContainer')} must be a blob container name: 3-63 lower-case letters, digits and single "
            f"'-', starting and ending with a letter or digit (got {name!r})"
        )
    return name


def _storage_account(name: str) -> str:
    if not re.match(r"^[a-z0-9]{3,24}$", name):
        raise ConfigError(f"{_key('azure.storageAccount')} must be 3-24 lower-case letters and digits (got {name!r})")
    return name


def _cluster_stack(root: _Section) -> ClusterStackRef | None:
    value = root.raw.get("clusterStack")
    root.used.add("clusterStack")
    if value in (None, ""):
        return None
    # The short form is just the stack name; the long form an object (JSON text from Pulumi).
    is_name = isinstance(value, str) and not value.lstrip().startswith("{")
    decoded = {"name": value} if is_name else _decode("clusterStack", value, dict)
    section = _Section("clusterStack", _typed("clusterStack", decoded, dict))
    ref = ClusterStackRef(
        name=section.require("name", str, "(org/project/stack)"),
        kubeconfig_output=section.get("kubeconfigOutput", str, "kubeconfig"),
    )
    section.reject_unknown()
    if not _STACK_NAME.match(ref.name):
        raise ConfigError(f"{_key('clusterStack.name')} must look like org/project/stack (got {ref.name!r})")
    return ref


def parse_config(raw: Mapping[str, object]) -> StackConfig:
    """Validate the ``ray-history-server:*`` keys (namespace prefix stripped) into a :class:`StackConfig`.

    Raises:
        ConfigError: naming the first bad key.
    """
    root = _Section("", raw)
    cloud = root.choice("cloud", CLOUDS)
    sections: dict[str, Any] = {}
    for name, reader in (("gcp", _gcp), ("aws", _aws), ("azure", _azure)):
        value = _read_section(root, name, reader)
        if value is not None and name != cloud:
            raise ConfigError(f"{_key(name)} is set but cloud is {cloud}")
        sections[name] = value
    if cloud != "kind" and sections[cloud] is None:
        required = {"gcp": "project", "aws": "region", "azure": "location"}[cloud]
        raise ConfigError(f"{_key(cloud + '.' + required)} is required when cloud is {cloud}")
    config = StackConfig(
        cloud=cloud,
        namespace=root.dns_label("namespace", "ray-history"),
        kubeconfig=root.get("kubeconfig", str, ""),
        kube_context=root.get("kubeContext", str, ""),
        cluster_stack=_cluster_stack(root),
        create_cluster=root.get("createCluster", bool, False),
        cluster=_read_section(root, "cluster", _cluster) or ClusterSettings(),
        storage=_read_section(root, "storage", _storage) or StorageSettings(),
        retention=_read_section(root, "retention", _retention) or RetentionSettings(),
        images=_read_section(root, "images", _images) or ImageSettings(),
        history_server=_read_section(root, "historyServer", _history_server) or HistoryServerSettings(),
        access=_read_section(root, "access", read_access) or default_access(),
        kuberay=_read_section(root, "kuberay", _kuberay) or KubeRaySettings(),
        workloads=_read_section(root, "workloads", _workloads) or WorkloadSettings(),
        metrics=_read_section(root, "metrics", _metrics) or MetricsSettings(),
        **sections,
    )
    root.reject_unknown()
    check_cluster_source(config)
    check_cluster_name(config)
    check_machine_architecture(config)
    check_namespaces(config)
    resolve_ingress(config.access, config.cloud)
    check_front_door_sources(config)
    check_image_pull(config)
    check_image_repository(config)
    check_index_container(config)
    check_federated_credentials(config)
    check_metrics(config)
    if config.images.build and not config.images.registry and config.cloud == "kind":
        # On the clouds the stack creates a registry; kind needs the local one.
        raise ConfigError(
            f"{_key('images.registry')} is required on kind when images.build is true (the local registry)"
        )
    return config


def stack_config_values() -> dict[str, object]:
    """The project's keys of the running stack, prefix stripped (scalars as strings, objects as JSON)."""
    # Pulumi exposes no public "list keys" call; reading the runtime map lets typos be reported.
    from pulumi.runtime import config as runtime_config

    merged: dict[str, object] = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{NAMESPACE}:"
    return {key.removeprefix(prefix): value for key, value in merged.items() if key.startswith(prefix)}


def load_config() -> StackConfig:
    """Validate the running stack's configuration (see :func:`parse_config`)."""
    return parse_config(stack_config_values())

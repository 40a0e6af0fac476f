"""Ray's metrics in a Prometheus-compatible store that outlives Ray clusters, and Ray's
Grafana dashboards in the stack's Grafana.

``mode`` picks the store:

* ``off``: nothing; the history server gets no metrics settings.
* ``kube-prometheus-stack``: a Helm release of prometheus-community's chart (Prometheus
  on a PersistentVolume with ``retention``, Grafana with its dashboard sidecar), a
  ServiceMonitor of Ray head Services and a PodMonitor of Ray workers (Ray's KubeRay guide),
  and Ray's dashboards as ConfigMaps the sidecar loads.
* ``managed``: the cloud's managed Prometheus (:mod:`ray_history_pulumi.metrics_managed`),
  read through the cloud's query proxy unless ``prometheus_url`` is given (GKE, EKS;
  :mod:`ray_history_pulumi.metrics_proxies`), and unless ``grafana_url`` is given a Helm
  release of the ``grafana`` chart whose sidecar loads the dashboards' ConfigMaps.
* ``external``: the team's own Prometheus and Grafana at the given URLs; nothing installed.

:attr:`RayMetrics.server_env` is what the history server Deployment gets
(``PROMETHEUS_URL``, ``GRAFANA_URL``, ``GRAFANA_DASHBOARD_UIDS``, ``PROMETHEUS_DATASOURCE``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pulumi
import pulumi_kubernetes as k8s

from ray_history_pulumi import grafana, metrics_scrape
from ray_history_pulumi.metrics_managed import ManagedMetricsArgs, custom_resource, managed_store
from ray_history_pulumi.metrics_proxies import GRAFANA_FULLNAME, grafana_release, service_url

METRICS_MODES = ("off", "kube-prometheus-stack", "managed", "external")
KPS_HELM_REPO = "https://prometheus-community.github.io/helm-charts"
KPS_CHART = "kube-prometheus-stack"
KPS_CHART_VERSION = "83.6.0"
#: ``fullnameOverride`` of the release, so the Services have names the server can be given.
KPS_FULLNAME = "ray-metrics"
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 80
#: The datasource kube-prometheus-stack's Grafana provisions (name ``Prometheus``, uid
#: ``prometheus``); Ray's dashboards pick the default Prometheus datasource.
DEFAULT_DATASOURCE = "Prometheus"
#: kube-prometheus-stack's monitors of the cluster itself, switched off.
CLUSTER_MONITORS = (
    "kubelet",
    "kubeApiServer",
    "kubeControllerManager",
    "kubeScheduler",
    "kubeProxy",
    "kubeEtcd",
    "coreDns",
    "kubeDns",
    "kubeStateMetrics",
)
_DURATION = re.compile(r"^[1-9]\d*(ms|s|m|h|d|w|y)$")
_QUANTITY = re.compile(r"^[1-9]\d*(Ki|Mi|Gi|Ti)$")


def check_url(value: str, parameter: str) -> str:
    """``value`` if it is an http(s) URL with a host; errors name ``parameter``."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{parameter}: {value!r} is not an http:// or https:// URL")
    return value.rstrip("/")


@dataclass
class RayMetricsArgs:
    """Arguments of :class:`RayMetrics`.

    Attributes:
        mode: ``off``, ``kube-prometheus-stack``, ``managed`` or ``external``.
        workload_namespaces: where Ray clusters run (what is scraped).
        namespace: the release's namespace, and the dashboards' (kube-prometheus-stack, managed).
        release_name: Helm release name; its ``release`` label is what the chart's Prometheus
            selects monitors by.
        chart_version: kube-prometheus-stack chart version.
        retention: Prometheus ``retention`` (``90d``): how long a dead session's charts stay.
        storage_size: Prometheus PersistentVolume size (``50Gi``).
        storage_class: its StorageClass; empty = the cluster's default.
        scrape_interval: how often Ray pods are scraped; short jobs need short intervals.
        prometheus_url: ``managed`` and ``external``: the Prometheus HTTP API as the history
            server reaches it (``external`` and ``managed`` on azure: required; ``managed``
            elsewhere: empty = the query proxy the program deploys).
        grafana_url: the Grafana as the history server reaches it (optional; ``managed``:
            empty = the Grafana the program installs).
        datasource: the Grafana datasource name of the store (``--prometheus-datasource``).
        dashboards: provision Ray's dashboards (kube-prometheus-stack, managed).
        managed: the cloud side of ``managed``.
        helm_values: more chart values, deep-merged over ours.
    """

    mode: str = "off"
    workload_namespaces: Sequence[str] = ("default",)
    namespace: str = "ray-metrics"
    release_name: str = "ray-metrics"
    chart_version: str = KPS_CHART_VERSION
    retention: str = "90d"
    storage_size: str = "50Gi"
    storage_class: str = ""
    scrape_interval: str = "15s"
    prometheus_url: str = ""
    grafana_url: str = ""
    datasource: str = DEFAULT_DATASOURCE
    dashboards: bool = True
    managed: ManagedMetricsArgs | None = None
    helm_values: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.mode not in METRICS_MODES:
            raise ValueError(f"mode: {self.mode!r} is not one of {', '.join(METRICS_MODES)}")
        if not self.workload_namespaces and self.mode != "off":
            raise ValueError("workload_namespaces: at least one namespace to scrape is required")
        if not _DURATION.match(self.retention):
            raise ValueError(f"retention: {self.retention!r} is not a Prometheus duration like 90d")
        if not _DURATION.match(self.scrape_interval):
            raise ValueError(f"scrape_interval: {self.scrape_interval!r} is not a Prometheus duration like 15s")
        if not _QUANTITY.match(self.storage_size):
            raise ValueError(f"storage_size: {self.storage_size!r} is not a size like 50Gi")
        if not self.datasource.strip():
            raise ValueError("datasource: the Grafana datasource name is required")
        if not self.prometheus_url and (
            self.mode == "external" or (self.mode == "managed" and self.managed is not None and not self.proxied())
        ):
            where = "mode external" if self.mode == "external" else "mode managed on azure (no query proxy there)"
            raise ValueError(f"prometheus_url: required with {where}: the store's Prometheus HTTP API")
        if self.prometheus_url:
            check_url(self.prometheus_url, "prometheus_url")
        if self.grafana_url:
            check_url(self.grafana_url, "grafana_url")
        if self.mode == "managed":
            if self.managed is None:
                raise ValueError("managed: the cloud side is required with mode managed")
            self.managed.validate()

    def proxied(self) -> bool:
        """``managed`` with a query proxy the program deploys (no ``prometheus_url``; GKE, EKS)."""
        return (
            self.mode == "managed"
            and not self.prometheus_url
            and self.managed is not None
            and self.managed.cloud in ("gcp", "aws")
        )

    def installs_grafana(self) -> bool:
        """``managed`` without ``grafana_url``: the program installs a Grafana."""
        return self.mode == "managed" and not self.grafana_url

    def urls(self) -> tuple[str, str]:
        """(Prometheus, Grafana) as the history server reaches them; "" = none (``managed``
        with a query proxy: the proxy's URL is known once it exists, see :class:`RayMetrics`)."""
        if self.mode == "kube-prometheus-stack":
            base = "svc.cluster.local"
            return (
                f"http://{KPS_FULLNAME}-prometheus.{self.namespace}.{base}:{PROMETHEUS_PORT}",
                f"http://{KPS_FULLNAME}-grafana.{self.namespace}.{base}:{GRAFANA_PORT}",
            )
        if self.mode in ("managed", "external"):
            prometheus = check_url(self.prometheus_url, "prometheus_url") if self.prometheus_url else ""
            if self.grafana_url:
                return prometheus, check_url(self.grafana_url, "grafana_url")
            if self.installs_grafana():
                return prometheus, service_url(GRAFANA_FULLNAME, self.namespace, GRAFANA_PORT)
            return prometheus, ""
        return "", ""

    def server_env(self, proxy_url: pulumi.Input[str] | None = None) -> dict[str, pulumi.Input[str]]:
        """The history server's metrics settings (none with ``off``); ``proxy_url``: the query
        proxy's Prometheus URL when :meth:`proxied` (an Output on EKS: it names the workspace)."""
        prometheus: pulumi.Input[str]
        prometheus, grafana_url = self.urls()
        if proxy_url is not None and not prometheus:
            prometheus = proxy_url
        if not prometheus:
            return {}
        env: dict[str, pulumi.Input[str]] = {"PROMETHEUS_URL": prometheus, "PROMETHEUS_DATASOURCE": self.datasource}
        if grafana_url:
            env["GRAFANA_URL"] = grafana_url
            env["GRAFANA_DASHBOARD_UIDS"] = ",".join(grafana.dashboard_uids())
        return env

    def helm_release_values(self) -> dict[str, Any]:
        """kube-prometheus-stack values: long retention on a volume, embeddable Grafana with the sidecar."""
        claim: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": self.storage_size}},
        }
        if self.storage_class:
            claim["storageClassName"] = self.storage_class
        values: dict[str, Any] = {
            "fullnameOverride": KPS_FULLNAME,
            # Ray's series only: no alerting, and none of the chart's cluster monitoring. Its
            # control-plane monitors add Services in kube-system (refused on GKE Autopilot) and
            # node-exporter needs host access; Ray exports node metrics itself.
            "alertmanager": {"enabled": False},
            "defaultRules": {"create": False},
            "nodeExporter": {"enabled": False},
            **{part: {"enabled": False} for part in CLUSTER_MONITORS},
            "prometheusOperator": {"kubeletService": {"enabled": False}},
            "prometheus": {
                "prometheusSpec": {
                    "retention": self.retention,
                    # On a volume: a restarted Prometheus keeps every dead session's series.
                    "storageSpec": {"volumeClaimTemplate": {"spec": claim}},
                    # The chart's default: monitors labelled release=<release> (ours are).
                    "podMonitorSelectorNilUsesHelmValues": True,
                    "serviceMonitorSelectorNilUsesHelmValues": True,
                }
            },
            "grafana": {
                "fullnameOverride": f"{KPS_FULLNAME}-grafana",
                # The chart's Kubernetes dashboards would stay empty without the monitors above.
                "defaultDashboardsEnabled": False,
                # The Ray Dashboard embeds Grafana panels in iframes (Ray's KubeRay guide),
                # which the history server proxies under its own origin at /grafana/: Grafana
                # must serve from that sub-path (its links and assets carry it).
                "grafana.ini": {
                    "security": {"allow_embedding": True},
                    "auth.anonymous": {"enabled": True, "org_role": "Viewer"},
                    "server": {
                        "root_url": "%(protocol)s://%(domain)s:%(http_port)s/grafana/",
                        "serve_from_sub_path": True,
                    },
                },
                "sidecar": {
                    "dashboards": {"enabled": True, "label": "grafana_dashboard", "labelValue": "1"},
                    "datasources": {"defaultDatasourceEnabled": True, "name": self.datasource},
                },
            },
        }
        return _merge(values, self.helm_values)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class RayMetrics(pulumi.ComponentResource):
    """Ray's metrics store, its scrape configuration and Ray's Grafana dashboards (see the module docstring).

    Example::

        metrics = RayMetrics(
            "metrics",
            RayMetricsArgs(mode="kube-prometheus-stack", workload_namespaces=["default"]),
            opts=pulumi.ResourceOptions(provider=k8s_provider),
        )
        HistoryServerArgs(..., metrics_env=metrics.server_env)
    """

    server_env: dict[str, pulumi.Input[str]]
    release: k8s.helm.v3.Release | None
    grafana: k8s.helm.v3.Release | None

    def __init__(self, name: str, args: RayMetricsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:k8s:RayMetrics", name, None, opts)
        args.validate()
        self.server_env = args.server_env()
        self.release = None
        self.grafana = None
        self.objects: list[pulumi.Resource] = []
        labels = {"app.kubernetes.io/part-of": "ray-history", "app.kubernetes.io/component": "metrics"}
        child = pulumi.ResourceOptions(parent=self)
        if args.mode == "kube-prometheus-stack":
            self._kube_prometheus_stack(name, args, labels, child)
        elif args.mode == "managed" and args.managed is not None:
            namespace = k8s.core.v1.Namespace(
                f"{name}-ns", metadata={"name": args.namespace, "labels": labels}, opts=child
            )
            in_ns = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
            made, proxy_url = managed_store(
                name,
                args.managed,
                namespace=args.namespace,
                workload_namespaces=args.workload_namespaces,
                interval=args.scrape_interval,
                labels=labels,
                parent=self,
                depends_on=[namespace],
                query_proxy=args.proxied(),
            )
            self.objects += made
            self.server_env = args.server_env(proxy_url)
            if args.installs_grafana():
                self.grafana = grafana_release(
                    name,
                    namespace=args.namespace,
                    release_name=args.release_name,
                    datasource=args.datasource,
                    prometheus_url=self.server_env["PROMETHEUS_URL"],
                    opts=in_ns,
                )
            if args.dashboards:
                self.objects += self._dashboards(name, args, labels, in_ns)
        self.register_outputs({"serverEnv": self.server_env})

    def _kube_prometheus_stack(
        self, name: str, args: RayMetricsArgs, labels: dict[str, str], child: pulumi.ResourceOptions
    ) -> None:
        self.release = k8s.helm.v3.Release(
            f"{name}-kube-prometheus-stack",
            k8s.helm.v3.ReleaseArgs(
                name=args.release_name,
                chart=KPS_CHART,
                version=args.chart_version,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KPS_HELM_REPO),
                namespace=args.namespace,
                create_namespace=True,
                values=args.helm_release_values(),
                atomic=True,
                cleanup_on_fail=True,
                timeout=900,
            ),
            opts=child,
        )
        # The monitors' kinds come with the chart's CRDs; the ConfigMaps need its namespace.
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        monitor_labels = {**labels, "release": args.release_name}
        kinds = (
            metrics_scrape.head_service_monitor(
                api_version="monitoring.coreos.com/v1",
                name="ray-head",
                namespace=args.namespace,
                watched_namespaces=args.workload_namespaces,
                labels=monitor_labels,
                interval=args.scrape_interval,
            ),
            metrics_scrape.worker_pod_monitor(
                api_version="monitoring.coreos.com/v1",
                name="ray-workers",
                namespace=args.namespace,
                watched_namespaces=args.workload_namespaces,
                labels=monitor_labels,
                interval=args.scrape_interval,
            ),
        )
        for obj in kinds:
            self.objects.append(custom_resource(f"{name}-{obj['metadata']['name']}", obj, after))
        if args.dashboards:
            self.objects += self._dashboards(name, args, labels, after)

    @staticmethod
    def _dashboards(
        name: str, args: RayMetricsArgs, labels: dict[str, str], opts: pulumi.ResourceOptions
    ) -> list[pulumi.Resource]:
        made: list[pulumi.Resource] = []
        for dashboard in grafana.dashboards():
            stem = dashboard.file_name.removesuffix(".json").replace("_", "-")
            obj = metrics_scrape.dashboard_config_map(
                name=f"ray-{stem}",
                namespace=args.namespace,
                labels=labels,
                file_name=dashboard.file_name,
                content=dashboard.compact,
            )
            made.append(k8s.core.v1.ConfigMap(f"{name}-{stem}", metadata=obj["metadata"], data=obj["data"], opts=opts))
        return made

"""The scrape configuration for Ray pods, per metrics store, as plain Kubernetes objects.

Pure: dicts in the API's camelCase (what ``kubectl get -o yaml`` shows), so the tests
validate them against closed schemas of each kind's CRD. :mod:`ray_history_pulumi.metrics`
creates them.

What Ray exposes (KubeRay's defaults): every Ray container gets the container port
``metrics`` (8080, Ray's ``--metrics-export-port``); the head Service carries it too, plus
``as-metrics`` (autoscaler, 44217) and ``dash-metrics`` (dashboard, 44227) when the pod
declares them. Pods are labelled ``ray.io/node-type`` (``head`` / ``worker``) and
``ray.io/cluster``. Ray's own guide
(https://docs.ray.io/en/latest/cluster/kubernetes/k8s-ecosystem/prometheus-grafana.html)
scrapes the head through a ServiceMonitor and workers through a PodMonitor, copying
``ray.io/cluster`` into the ``ray_io_cluster`` label its Grafana dashboards filter on.
Ray's own metrics carry ``SessionName``, which is how a dead session's series are found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

RAY_METRICS_PORT = "metrics"
RAY_METRICS_PORT_NUMBER = 8080
#: The head Service's ports in Ray's guide: Ray's metrics, the autoscaler's, the dashboard's.
HEAD_SERVICE_PORTS = ("metrics", "as-metrics", "dash-metrics")
NODE_TYPE_LABEL = "ray.io/node-type"
CLUSTER_LABEL = "ray.io/cluster"
#: Where Ray's dashboards look for the cluster (``label_values(..., ray_io_cluster)``).
CLUSTER_METRIC_LABEL = "ray_io_cluster"
#: The Grafana sidecar of kube-prometheus-stack (and of the grafana chart) loads ConfigMaps so labelled.
GRAFANA_DASHBOARD_LABEL = {"grafana_dashboard": "1"}


def _keep_cluster_label() -> list[dict[str, Any]]:
    return [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_label_ray_io_cluster"],
            "targetLabel": CLUSTER_METRIC_LABEL,
        }
    ]


def _metadata(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels}


def head_service_monitor(
    *,
    api_version: str,
    name: str,
    namespace: str,
    watched_namespaces: Sequence[str],
    labels: dict[str, str],
    interval: str,
) -> dict[str, Any]:
    """A ServiceMonitor of Ray head Services (prometheus-operator's ``monitoring.coreos.com/v1``)."""
    return {
        "apiVersion": api_version,
        "kind": "ServiceMonitor",
        "metadata": _metadata(name, namespace, labels),
        "spec": {
            "jobLabel": "ray-head",
            "namespaceSelector": {"matchNames": list(watched_namespaces)},
            "selector": {"matchLabels": {NODE_TYPE_LABEL: "head"}},
            "endpoints": [
                {"port": port, "interval": interval, "relabelings": _keep_cluster_label()}
                for port in HEAD_SERVICE_PORTS
            ],
        },
    }


def worker_pod_monitor(
    *,
    api_version: str,
    name: str,
    namespace: str,
    watched_namespaces: Sequence[str] | None,
    labels: dict[str, str],
    interval: str,
    node_types: Sequence[str] = ("worker",),
) -> dict[str, Any]:
    """A PodMonitor of Ray pods of ``node_types`` (``monitoring.coreos.com/v1`` or Azure's
    ``azmonitoring.coreos.com/v1``, the same schema); ``watched_namespaces`` None = its own."""
    spec: dict[str, Any] = {
        "jobLabel": "ray-workers" if tuple(node_types) == ("worker",) else "ray-nodes",
        "selector": {"matchExpressions": [{"key": NODE_TYPE_LABEL, "operator": "In", "values": list(node_types)}]},
        "podMetricsEndpoints": [
            {"port": RAY_METRICS_PORT, "interval": interval, "relabelings": _keep_cluster_label()},
        ],
    }
    if watched_namespaces is not None:
        spec["namespaceSelector"] = {"matchNames": list(watched_namespaces)}
    return {
        "apiVersion": api_version,
        "kind": "PodMonitor",
        "metadata": _metadata(name, namespace, labels),
        "spec": spec,
    }


def gmp_pod_monitoring(*, name: str, namespace: str, labels: dict[str, str], interval: str) -> dict[str, Any]:
    """Google Cloud Managed Service for Prometheus: a ``PodMonitoring`` of the Ray pods of its namespace.

    A PodMonitoring selects pods in its own namespace only
    (https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed#gmp-pod-monitoring),
    so there is one per workload namespace. GMP does not allow relabeling onto target labels
    from the pod's metadata; ``targetLabels.fromPod`` is its way to keep ``ray.io/cluster``.
    """
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "PodMonitoring",
        "metadata": _metadata(name, namespace, labels),
        "spec": {
            "selector": {
                "matchExpressions": [{"key": NODE_TYPE_LABEL, "operator": "In", "values": ["head", "worker"]}]
            },
            "endpoints": [{"port": RAY_METRICS_PORT, "interval": interval}],
            "targetLabels": {"fromPod": [{"from": CLUSTER_LABEL, "to": CLUSTER_METRIC_LABEL}]},
        },
    }


def amp_scrape_configuration(watched_namespaces: Sequence[str], interval: str) -> str:
    """The Prometheus scrape configuration (YAML) of an Amazon Managed Service for Prometheus scraper.

    A managed scraper takes a plain Prometheus configuration with Kubernetes service discovery
    (https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html): keep
    the Ray pods' ``metrics`` port, and their cluster and node type as labels.
    """
    config = {
        "global": {"scrape_interval": interval},
        "scrape_configs": [
            {
                "job_name": "ray",
                "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": list(watched_namespaces)}}],
                "relabel_configs": [
                    {
                        "action": "keep",
                        "source_labels": ["__meta_kubernetes_pod_label_ray_io_node_type"],
                        "regex": "head|worker",
                    },
                    {
                        "action": "keep",
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": RAY_METRICS_PORT,
                    },
                    {
                        "action": "replace",
                        "source_labels": ["__meta_kubernetes_pod_label_ray_io_cluster"],
                        "target_label": CLUSTER_METRIC_LABEL,
                    },
                    {
                        "action": "replace",
                        "source_labels": ["__meta_kubernetes_namespace"],
                        "target_label": "namespace",
                    },
                    {"action": "replace", "source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                ],
            }
        ],
    }
    return str(yaml.safe_dump(config, sort_keys=False))


def dashboard_config_map(
    *, name: str, namespace: str, labels: dict[str, str], file_name: str, content: str
) -> dict[str, Any]:
    """A ConfigMap the Grafana sidecar loads as a dashboard (``grafana_dashboard: "1"``)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {**labels, **GRAFANA_DASHBOARD_LABEL}},
        "data": {file_name: content},
    }

"""Checks of the ``metrics`` section (:class:`~infra.config_model.MetricsSettings`, read by
:mod:`infra.config`) against the rest of the stack; each error names the key."""

from __future__ import annotations

from infra.config_model import StackConfig
from infra.config_values import ConfigError, _key


def check_metrics(config: StackConfig) -> None:
    """``metrics`` against the rest of the stack."""
    metrics = config.metrics
    if metrics.mode == "external" and not metrics.prometheus_url:
        raise ConfigError(
            f"{_key('metrics.prometheusUrl')} is required with metrics.mode external: the Prometheus HTTP API "
            "as the history server reaches it (docs/metrics.md)"
        )
    # GKE and EKS get the cloud's query proxy; Azure has no supported one (docs/metrics.md).
    if metrics.mode == "managed" and config.cloud == "azure" and not metrics.prometheus_url:
        raise ConfigError(
            f"{_key('metrics.prometheusUrl')} is required with metrics.mode managed on azure: Azure Monitor's "
            "query endpoint needs an Entra token and Azure has no supported in-cluster query proxy; give the "
            "URL of a proxy you run (docs/metrics.md)"
        )
    if metrics.mode == "kube-prometheus-stack" and (metrics.prometheus_url or metrics.grafana_url):
        raise ConfigError(
            f"{_key('metrics.prometheusUrl')} / metrics.grafanaUrl are for managed and external: with "
            "kube-prometheus-stack the program knows where its Prometheus and Grafana are"
        )
    if metrics.mode == "managed":
        if config.cloud == "kind":
            raise ConfigError(
                f"{_key('metrics.mode')} managed needs a cloud's managed Prometheus (gcp, aws, azure); "
                "on kind use kube-prometheus-stack"
            )
        if config.aws is not None and not config.create_cluster and not config.aws.cluster_name:
            raise ConfigError(
                f"{_key('aws.clusterName')} is required with metrics.mode managed: "
                "the managed scraper reads that cluster"
            )
        if (
            config.aws is not None
            and config.aws.identity_mode == "irsa"
            and not config.create_cluster
            and not metrics.prometheus_url
        ):
            # The query proxy's role is assumed through EKS Pod Identity, whose agent a cluster
            # the stack did not create may lack.
            raise ConfigError(
                f"{_key('metrics.prometheusUrl')} is required with metrics.mode managed and aws.identityMode irsa "
                "on an existing cluster: the AMP query proxy the program deploys uses EKS Pod Identity"
            )
    if metrics.mode != "off" and metrics.namespace in (config.namespace, *config.workloads.namespaces):
        raise ConfigError(
            f"{_key('metrics.namespace')} must be a namespace of its own (got {metrics.namespace!r}, "
            "also the history server's or a workload namespace)"
        )

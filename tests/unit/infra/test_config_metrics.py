"""infra/config_metrics.py: the ``metrics`` section of the stack configuration."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import ConfigError, parse_config
from infra.config_model import MetricsSettings
from tests.unit.infra.test_config import AZURE, base


def test_metrics_are_off_by_default() -> None:
    assert parse_config(base()).metrics == MetricsSettings()
    assert MetricsSettings().mode == "off"


def test_every_key_is_read() -> None:
    metrics = parse_config(
        base(
            metrics={
                "mode": "external",
                "namespace": "monitoring-ray",
                "chartVersion": "83.6.0",
                "retention": "1y",
                "storageSize": "200Gi",
                "storageClass": "premium-rwo",
                "scrapeInterval": "30s",
                "prometheusUrl": "https://prometheus.example.com/",
                "grafanaUrl": "http://grafana.monitoring.svc",
                "datasource": "Mimir",
                "dashboards": "false",
            }
        )
    ).metrics
    assert metrics == MetricsSettings(
        mode="external",
        namespace="monitoring-ray",
        chart_version="83.6.0",
        retention="1y",
        storage_size="200Gi",
        storage_class="premium-rwo",
        scrape_interval="30s",
        prometheus_url="https://prometheus.example.com",
        grafana_url="http://grafana.monitoring.svc",
        datasource="Mimir",
        dashboards=False,
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"metrics": {"mode": "prometheus"}}, r"metrics\.mode must be one of off, kube-prometheus-stack"),
        ({"metrics": {"mode": "external"}}, r"metrics\.prometheusUrl is required with metrics\.mode external"),
        (
            {"cloud": "azure", "gcp": None, "azure": AZURE, "metrics": {"mode": "managed"}},
            r"metrics\.prometheusUrl is required with metrics\.mode managed on azure",
        ),
        (
            {
                "cloud": "aws",
                "gcp": None,
                "aws": {
                    "region": "us-east-1",
                    "clusterName": "ray",
                    "identityMode": "irsa",
                    "oidcProviderArn": "arn:aws:iam::1:oidc-provider/x",
                    "oidcIssuerUrl": "https://oidc.eks.us-east-1.amazonaws.com/id/ABC",
                },
                "metrics": {"mode": "managed"},
            },
            r"metrics\.prometheusUrl is required with metrics\.mode managed and aws\.identityMode irsa",
        ),
        ({"metrics": {"mode": "external", "prometheusUrl": "prometheus:9090"}}, r"metrics\.prometheusUrl must be an"),
        ({"metrics": {"grafanaUrl": "file:///etc"}}, r"metrics\.grafanaUrl must be an http"),
        ({"metrics": {"retention": "90 days"}}, r"metrics\.retention must be a Prometheus duration"),
        ({"metrics": {"scrapeInterval": "0s"}}, r"metrics\.scrapeInterval must be a Prometheus duration"),
        ({"metrics": {"storageSize": "50GB"}}, r"metrics\.storageSize must be a size"),
        ({"metrics": {"storageClass": "Fast_SSD"}}, r"metrics\.storageClass must be a StorageClass name"),
        ({"metrics": {"chartVersion": "latest"}}, r"metrics\.chartVersion must be a chart version"),
        ({"metrics": {"datasource": " "}}, r"metrics\.datasource must name"),
        ({"metrics": {"namespace": "Ray_Metrics"}}, r"metrics\.namespace must be a Kubernetes name"),
        ({"metrics": {"scrape": "5s"}}, r"metrics\.scrape is not a known key"),
        (
            {"metrics": {"mode": "kube-prometheus-stack", "prometheusUrl": "http://p:9090"}},
            r"metrics\.prometheusUrl / metrics\.grafanaUrl are for managed and external",
        ),
        (
            {"metrics": {"mode": "kube-prometheus-stack", "namespace": "ray-history"}},
            r"metrics\.namespace must be a namespace of its own",
        ),
        (
            {
                "cloud": "kind",
                "gcp": None,
                "images": {"registry": "localhost:5001"},
                "metrics": {"mode": "managed", "prometheusUrl": "http://p"},
            },
            r"metrics\.mode managed needs a cloud's managed Prometheus",
        ),
        (
            {
                "cloud": "aws",
                "gcp": None,
                "aws": {
                    "region": "us-east-1",
                    "identityMode": "irsa",
                    "oidcProviderArn": "arn:aws:iam::1:oidc-provider/x",
                    "oidcIssuerUrl": "https://oidc.eks.us-east-1.amazonaws.com/id/ABC",
                },
                "metrics": {"mode": "managed", "prometheusUrl": "http://p"},
            },
            r"aws\.clusterName is required with metrics\.mode managed",
        ),
    ],
)
def test_bad_metrics_settings_name_the_key(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=f"ray-history-server:{message}"):
        parse_config(base(**overrides))


def test_managed_on_each_cloud() -> None:
    managed = {"mode": "managed", "prometheusUrl": "http://frontend.ray-metrics.svc:9090"}
    assert parse_config(base(metrics=managed)).metrics.mode == "managed"
    aws = {"region": "us-east-1", "clusterName": "ray"}
    assert parse_config(base(cloud="aws", gcp=None, aws=aws, metrics=managed)).metrics.mode == "managed"
    assert parse_config(base(cloud="azure", gcp=None, azure=AZURE, metrics=managed)).metrics.mode == "managed"


def test_managed_on_gke_and_eks_needs_no_urls() -> None:
    """The program deploys the query proxy and Grafana there (ray_history_pulumi/metrics_proxies.py)."""
    managed = {"mode": "managed"}
    assert parse_config(base(metrics=managed)).metrics.prometheus_url == ""
    aws = {"region": "us-east-1", "clusterName": "ray"}
    assert parse_config(base(cloud="aws", gcp=None, aws=aws, metrics=managed)).metrics.mode == "managed"

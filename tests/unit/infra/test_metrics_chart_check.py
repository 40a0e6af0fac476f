"""infra/metrics_chart_check.py against a Helm repository served on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from infra import metrics_chart_check
from ray_history_pulumi.metrics import KPS_CHART_VERSION, RayMetricsArgs
from ray_history_pulumi.metrics_proxies import GRAFANA_CHART_VERSION, grafana_values
from tests.support.helm_repo import publish, serve_directory


def _values_with_ours() -> dict[str, Any]:
    """A values.yaml holding every key we set (plus some of the chart's own)."""
    values = RayMetricsArgs(mode="kube-prometheus-stack").helm_release_values()
    values["prometheus"]["prometheusSpec"]["replicas"] = 1
    values["grafana"]["grafana.ini"] = {}
    return values


@pytest.fixture
def helm_repo(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    with serve_directory(tmp_path, "charts") as url:
        yield tmp_path, url


def _grafana_values_with_ours() -> dict[str, Any]:
    """The grafana chart's values.yaml with every key we set; like the chart's, no fullnameOverride."""
    values = grafana_values("Prometheus", "http://p:9090")
    del values["fullnameOverride"]
    values["grafana.ini"] = {"paths": {}}
    values["datasources"] = {}
    return values


def _publish(root: Path, charts: dict[str, dict[str, Any]], grafana: dict[str, Any] | None = None) -> None:
    """kube-prometheus-stack ``charts`` and the grafana chart's pin in one repository."""
    directory = root / "charts"
    publish(directory, "kube-prometheus-stack", {v: yaml.safe_dump(values) for v, values in charts.items()})
    kps_index = yaml.safe_load((directory / "index.yaml").read_text())
    grafana_yaml = yaml.safe_dump(_grafana_values_with_ours() if grafana is None else grafana)
    publish(directory, "grafana", {GRAFANA_CHART_VERSION: grafana_yaml})
    index = yaml.safe_load((directory / "index.yaml").read_text())
    index["entries"].update(kps_index["entries"])
    (directory / "index.yaml").write_text(yaml.safe_dump(index))


def test_a_published_pin_knowing_our_values_passes(helm_repo: tuple[Path, str]) -> None:
    root, url = helm_repo
    _publish(root, {KPS_CHART_VERSION: _values_with_ours()})
    assert metrics_chart_check.check([KPS_CHART_VERSION], url) == []
    assert metrics_chart_check.main(["--repo", url]) == 0


def test_an_unpublished_pin_is_reported(helm_repo: tuple[Path, str]) -> None:
    root, url = helm_repo
    _publish(root, {"1.0.0": _values_with_ours()})
    assert metrics_chart_check.check(["9.9.9"], url) == [
        f"9.9.9: kube-prometheus-stack 9.9.9 is not in {url}index.yaml"
    ]


def test_a_renamed_key_is_reported(helm_repo: tuple[Path, str]) -> None:
    root, url = helm_repo
    values = _values_with_ours()
    values["prometheus"]["prometheusSpec"]["retentionPeriod"] = values["prometheus"]["prometheusSpec"].pop("retention")
    values["grafana"]["sidecar"].pop("dashboards")
    _publish(root, {KPS_CHART_VERSION: values})
    problems = metrics_chart_check.check([KPS_CHART_VERSION], url)
    assert f"{KPS_CHART_VERSION}: values.yaml has no prometheus.prometheusSpec.retention" in problems
    assert f"{KPS_CHART_VERSION}: values.yaml has no grafana.sidecar.dashboards" in problems
    assert metrics_chart_check.main(["--repo", url]) == 1


def test_free_form_maps_are_not_walked() -> None:
    paths = set(metrics_chart_check.value_paths(RayMetricsArgs(mode="kube-prometheus-stack").helm_release_values()))
    assert ("grafana", "grafana.ini") in paths
    assert ("grafana", "grafana.ini", "security") not in paths
    assert ("prometheus", "prometheusSpec", "storageSpec", "volumeClaimTemplate") not in paths


def test_every_example_stack_pin_is_checked() -> None:
    assert KPS_CHART_VERSION in metrics_chart_check.pinned_versions()


def test_a_grafana_key_the_chart_renamed_is_reported(helm_repo: tuple[Path, str]) -> None:
    """``managed`` mode's Grafana: a sidecar or sub-path setting the chart no longer reads is caught."""
    root, url = helm_repo
    grafana = _grafana_values_with_ours()
    grafana["sidecar"]["dashboards"].pop("labelValue")
    grafana.pop("testFramework")
    _publish(root, {KPS_CHART_VERSION: _values_with_ours()}, grafana)
    assert metrics_chart_check.check([KPS_CHART_VERSION], url) == [
        f"grafana {GRAFANA_CHART_VERSION}: values.yaml has no testFramework",
        f"grafana {GRAFANA_CHART_VERSION}: values.yaml has no testFramework.enabled",
        f"grafana {GRAFANA_CHART_VERSION}: values.yaml has no sidecar.dashboards.labelValue",
    ]
    assert metrics_chart_check.main(["--repo", url]) == 1


def test_grafana_free_form_maps_are_not_walked() -> None:
    paths = set(
        metrics_chart_check.value_paths(
            grafana_values("P", "http://p"), free_form=metrics_chart_check.GRAFANA_FREE_FORM
        )
    )
    assert ("datasources",) in paths and ("grafana.ini",) in paths
    assert ("datasources", "datasources.yaml") not in paths
    assert ("grafana.ini", "server") not in paths

"""infra/metrics_chart_check.py against a Helm repository served on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from infra import metrics_chart_check
from ray_history_pulumi.metrics import KPS_CHART_VERSION, RayMetricsArgs
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


def _publish(root: Path, charts: dict[str, dict[str, Any]]) -> None:
    publish(root / "charts", "kube-prometheus-stack", {v: yaml.safe_dump(values) for v, values in charts.items()})


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

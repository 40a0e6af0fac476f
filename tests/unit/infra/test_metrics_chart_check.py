"""infra/metrics_chart_check.py against a Helm repository served on loopback."""

from __future__ import annotations

import io
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from infra import metrics_chart_check
from ray_history_pulumi.metrics import KPS_CHART_VERSION, RayMetricsArgs


def _values_with_ours() -> dict[str, Any]:
    """A values.yaml holding every key we set (plus some of the chart's own)."""
    values = RayMetricsArgs(mode="kube-prometheus-stack").helm_release_values()
    values["prometheus"]["prometheusSpec"]["replicas"] = 1
    values["grafana"]["grafana.ini"] = {}
    return values


def _chart(version: str, values: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in (
            ("Chart.yaml", f"apiVersion: v2\nname: kube-prometheus-stack\nversion: {version}\n"),
            ("values.yaml", yaml.safe_dump(values)),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"kube-prometheus-stack/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def helm_repo(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *_: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}/charts/"
    finally:
        server.shutdown()
        server.server_close()


def _publish(root: Path, charts: dict[str, dict[str, Any]]) -> None:
    (root / "charts").mkdir(exist_ok=True)
    entries = []
    for version, values in charts.items():
        name = f"kube-prometheus-stack-{version}.tgz"
        (root / "charts" / name).write_bytes(_chart(version, values))
        entries.append({"name": "kube-prometheus-stack", "version": version, "urls": [name]})
    (root / "charts" / "index.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "entries": {"kube-prometheus-stack": entries}})
    )


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

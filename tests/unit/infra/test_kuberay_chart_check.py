"""infra/kuberay_chart_check.py against a Helm repository served on loopback, with real chart archives.

The published chart's gate list comes from tests/fixtures/kuberay (KubeRay v1.7.0's values.yaml
excerpt), so the check compares ``CHART_DEFAULT_GATES`` with what KubeRay really ships.
"""

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
import yaml

from infra import kuberay_chart_check
from ray_history_pulumi.kuberay import CHART_DEFAULT_GATES, DEFAULT_KUBERAY_VERSION

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kuberay" / "values-1.7.0-featureGates.yaml"


def _chart(version: str, gates_yaml: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in (
            ("Chart.yaml", f"apiVersion: v2\nname: kuberay-operator\nversion: {version}\n"),
            ("values.yaml", "image:\n  repository: quay.io/kuberay/operator\n" + gates_yaml),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"kuberay-operator/{name}")
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
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}/kuberay-helm/"
    finally:
        server.shutdown()
        server.server_close()


def _publish(root: Path, charts: dict[str, str]) -> None:
    (root / "kuberay-helm").mkdir(exist_ok=True)
    entries: list[dict[str, Any]] = []
    for version, gates in charts.items():
        name = f"kuberay-operator-{version}.tgz"
        (root / "kuberay-helm" / name).write_bytes(_chart(version, gates))
        entries.append({"name": "kuberay-operator", "version": version, "urls": [name]})
    (root / "kuberay-helm" / "index.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v1", "entries": {"kuberay-operator": entries}})
    )


def test_our_gate_list_equals_kuberay_1_7_0s_values_yaml() -> None:
    published = [(g["name"], g["enabled"]) for g in yaml.safe_load(FIXTURE.read_text())["featureGates"]]
    assert kuberay_chart_check.gate_problems("1.7.0", published) == []
    assert list(CHART_DEFAULT_GATES["1.7"]) == published


def test_published_pins_with_equal_gates_pass(helm_repo: tuple[Path, str]) -> None:
    root, url = helm_repo
    gates = FIXTURE.read_text()
    _publish(root, {"1.7.0": gates, DEFAULT_KUBERAY_VERSION: gates})
    assert kuberay_chart_check.check({"1.7.0", DEFAULT_KUBERAY_VERSION}, url) == []
    assert kuberay_chart_check.main(["--repo", url]) == 0


def test_an_unpublished_pin_is_reported(helm_repo: tuple[Path, str]) -> None:
    root, url = helm_repo
    _publish(root, {"1.7.0": FIXTURE.read_text()})
    problems = kuberay_chart_check.check({"1.7.9"}, url)
    assert problems == [f"1.7.9: kuberay-operator 1.7.9 is not in {url}index.yaml"]


def test_a_changed_gate_list_is_reported(helm_repo: tuple[Path, str]) -> None:
    root, url = helm_repo
    changed = FIXTURE.read_text() + "- name: RayBrandNewGate\n  enabled: true\n"
    _publish(root, {DEFAULT_KUBERAY_VERSION: changed})
    [problem] = kuberay_chart_check.check({DEFAULT_KUBERAY_VERSION}, url)
    assert "RayBrandNewGate" in problem and "differ from CHART_DEFAULT_GATES['1.7']" in problem
    assert kuberay_chart_check.main(["--repo", url]) == 1


def test_every_example_stack_pin_is_checked() -> None:
    assert DEFAULT_KUBERAY_VERSION in kuberay_chart_check.pinned_versions()

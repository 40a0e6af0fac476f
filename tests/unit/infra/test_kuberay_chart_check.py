"""infra/kuberay_chart_check.py against a Helm repository served on loopback, with real chart archives.

The published chart's gate list comes from tests/fixtures/kuberay (KubeRay v1.7.0's values.yaml
excerpt), so the check compares ``CHART_DEFAULT_GATES`` with what KubeRay really ships.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra import kuberay_chart_check
from ray_history_pulumi.kuberay import CHART_DEFAULT_GATES, DEFAULT_KUBERAY_VERSION
from tests.support.helm_repo import publish, serve_directory

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kuberay" / "values-1.7.0-featureGates.yaml"


@pytest.fixture
def helm_repo(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    with serve_directory(tmp_path, "kuberay-helm") as url:
        yield tmp_path, url


def _publish(root: Path, charts: dict[str, str]) -> None:
    image = "image:\n  repository: quay.io/kuberay/operator\n"
    publish(root / "kuberay-helm", "kuberay-operator", {v: image + gates for v, gates in charts.items()})


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

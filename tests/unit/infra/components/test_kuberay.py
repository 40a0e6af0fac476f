"""ray_history_pulumi/kuberay.py: the Helm release and its feature gates."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

from ray_history_pulumi.kuberay import (
    CHART_DEFAULT_GATES,
    DEFAULT_KUBERAY_VERSION,
    HISTORY_SERVER_GATE,
    KUBERAY_HELM_REPO,
    KubeRayOperator,
    KubeRayOperatorArgs,
    feature_gates,
)
from tests.unit.infra.mocks import FAKE_KUBECONFIG, RecordingMocks, settled

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture
def mocks() -> RecordingMocks:
    return RecordingMocks.install()


def test_history_gate_on_and_every_chart_default_kept() -> None:
    gates = {g["name"]: g["enabled"] for g in feature_gates("1.7.1")}
    defaults = dict(CHART_DEFAULT_GATES["1.7"])
    assert set(gates) == set(defaults)
    assert gates[HISTORY_SERVER_GATE] is True
    assert gates["RayClusterStatusConditions"] is True
    assert gates["RayServiceIncrementalUpgrade"] is True
    assert gates["RayCronJob"] is False
    assert sum(gates.values()) == sum(defaults.values()) + 1


def test_overrides_apply_by_name_without_dropping_others() -> None:
    gates = feature_gates("1.7.0", {"RayCronJob": True, "SomeFutureGate": True})
    names = [g["name"] for g in gates]
    assert len(names) == len(set(names)) == len(CHART_DEFAULT_GATES["1.7"]) + 1
    assert {"name": "RayCronJob", "enabled": True} in gates
    assert {"name": "RayClusterStatusConditions", "enabled": True} in gates


@pytest.mark.parametrize(
    ("version", "message"),
    [("1.6.2", "not supported"), ("latest", "not a chart version"), ("1.7", "not a chart version")],
)
def test_bad_versions_name_the_parameter(version: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"version: .*{message}"):
        feature_gates(version)


def test_bad_override_value() -> None:
    with pytest.raises(ValueError, match=r"feature_gate_overrides\[RayCronJob\]"):
        feature_gates("1.7.1", {"RayCronJob": "yes"})  # type: ignore[dict-item]


def test_values_cannot_smuggle_a_gate_list() -> None:
    args = KubeRayOperatorArgs(values={"featureGates": [{"name": HISTORY_SERVER_GATE, "enabled": True}]})
    with pytest.raises(ValueError, match=r"values\.featureGates"):
        args.helm_values()


def test_other_values_deep_merge() -> None:
    values = KubeRayOperatorArgs(values={"image": {"tag": "v1.7.1"}, "replicas": 2}).helm_values()
    assert values["image"] == {"tag": "v1.7.1"}
    assert values["replicas"] == 2
    assert len(values["featureGates"]) == len(CHART_DEFAULT_GATES["1.7"])


@pytest.mark.parametrize("preview", [False, True])
def test_release_inputs(preview: bool) -> None:
    mocks = RecordingMocks.install(preview=preview)

    @settled
    def run() -> pulumi.Output[None]:
        provider = k8s.Provider("cluster", kubeconfig=FAKE_KUBECONFIG)
        operator = KubeRayOperator(
            "kuberay",
            KubeRayOperatorArgs(feature_gate_overrides={"RayCronJob": True}),
            opts=pulumi.ResourceOptions(provider=provider),
        )

        def check(_: object) -> None:
            release = mocks.one(RELEASE)
            inputs = release.inputs
            assert inputs["chart"] == "kuberay-operator"
            assert inputs["version"] == DEFAULT_KUBERAY_VERSION
            assert inputs["repositoryOpts"] == {"repo": KUBERAY_HELM_REPO}
            assert inputs["namespace"] == "ray-system"
            assert inputs["createNamespace"] is True
            assert inputs["atomic"] is True
            gates = {g["name"]: g["enabled"] for g in inputs["values"]["featureGates"]}
            assert gates[HISTORY_SERVER_GATE] is True
            assert gates["RayCronJob"] is True
            assert gates["RayClusterStatusConditions"] is True
            assert release.provider_name == "cluster"

        return operator.release.urn.apply(check)

    run()

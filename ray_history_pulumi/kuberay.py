"""The KubeRay operator, installed from its Helm chart with the history-server gate on.

Helm merges maps but replaces lists, and the chart's ``featureGates`` is a list:
sending only ``RayClusterHistoryServer`` would silently switch off every other
default gate (``RayClusterStatusConditions`` among them). :func:`feature_gates`
therefore starts from the chart's own default list for the pinned version and
overrides entries by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

KUBERAY_HELM_REPO = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_CHART = "kuberay-operator"
#: Newest 1.7.x seen deployed from the Helm repo (operator image quay.io/kuberay/operator:v1.7.1).
DEFAULT_KUBERAY_VERSION = "1.7.1"
HISTORY_SERVER_GATE = "RayClusterHistoryServer"

#: ``featureGates`` defaults of the chart's values.yaml, per minor release
#: (helm-chart/kuberay-operator/values.yaml in ray-project/kuberay).
CHART_DEFAULT_GATES: dict[str, tuple[tuple[str, bool], ...]] = {
    "1.7": (
        ("RayClusterStatusConditions", True),
        ("RayJobDeletionPolicy", True),
        ("RayMultiHostIndexing", True),
        ("RayServiceIncrementalUpgrade", True),
        ("RayCronJob", False),
        ("RayClusterMTLS", False),
        ("RayClusterNetworkPolicy", False),
        (HISTORY_SERVER_GATE, False),
    ),
}
_VERSION = re.compile(r"(?P<minor>\d+\.\d+)\.\d+(?:-[0-9A-Za-z.-]+)?")


def chart_minor(version: str) -> str:
    """``1.7`` for ``1.7.1`` or ``1.7.0-rc.1``; errors name the parameter."""
    match = _VERSION.fullmatch(version.strip())
    if not match:
        raise ValueError(f"version: {version!r} is not a chart version like 1.7.1")
    minor = match["minor"]
    if minor not in CHART_DEFAULT_GATES:
        raise ValueError(
            f"version: {version!r} is not supported (the history-server gate needs KubeRay "
            f"{', '.join(sorted(CHART_DEFAULT_GATES))}.x); add its chart's default featureGates to CHART_DEFAULT_GATES"
        )
    return minor


def feature_gates(version: str, overrides: Mapping[str, bool] | None = None) -> list[dict[str, Any]]:
    """The chart's full default gate list for ``version``, ``RayClusterHistoryServer``
    on, then ``overrides`` applied by name (new names appended)."""
    gates = dict(CHART_DEFAULT_GATES[chart_minor(version)])
    gates[HISTORY_SERVER_GATE] = True
    for name, enabled in (overrides or {}).items():
        if not isinstance(enabled, bool):
            raise ValueError(f"feature_gate_overrides[{name}]: expected true or false, got {enabled!r}")
        gates[name] = enabled
    return [{"name": name, "enabled": enabled} for name, enabled in gates.items()]


def _merge_values(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if key == "featureGates":
            raise ValueError("values.featureGates: use feature_gate_overrides (a list here would replace the defaults)")
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclass
class KubeRayOperatorArgs:
    """Arguments of :class:`KubeRayOperator`.

    Attributes:
        version: chart version (= operator version); only minors listed in
            ``CHART_DEFAULT_GATES`` are accepted, so the gate list is never guessed.
        namespace: where the operator runs (Ray's docs recommend ``ray-system``).
        release_name: the Helm release's name (unique per namespace; one operator per cluster).
        create_namespace: let Helm create the namespace.
        feature_gate_overrides: extra gates by name, e.g. ``{"RayCronJob": True}``.
        values: other chart values (deep-merged; ``featureGates`` is refused here).
        timeout_seconds: Helm wait timeout.
    """

    version: str = DEFAULT_KUBERAY_VERSION
    namespace: str = "ray-system"
    release_name: str = "kuberay-operator"
    create_namespace: bool = True
    feature_gate_overrides: dict[str, bool] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    timeout_seconds: int = 600

    def helm_values(self) -> dict[str, Any]:
        return _merge_values({"featureGates": feature_gates(self.version, self.feature_gate_overrides)}, self.values)


class KubeRayOperator(pulumi.ComponentResource):
    """The KubeRay operator (Helm release ``kuberay-operator``) with the
    ``RayClusterHistoryServer`` gate on and every other default gate kept.

    Example::

        k8s_provider = k8s.Provider("cluster", kubeconfig=kubeconfig)
        kuberay = KubeRayOperator(
            "kuberay",
            KubeRayOperatorArgs(version="1.7.1", namespace="ray-system"),
            opts=pulumi.ResourceOptions(provider=k8s_provider),
        )
        # RayClusters/RayJobs that need the CRDs: depends_on=[kuberay.release]

    Do not combine with GKE's managed Ray operator add-on on the same cluster.
    """

    release: k8s.helm.v3.Release
    status: pulumi.Output[Any]

    def __init__(self, name: str, args: KubeRayOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:k8s:KubeRayOperator", name, None, opts)
        values = args.helm_values()  # validates before anything is registered
        self.release = k8s.helm.v3.Release(
            f"{name}-operator",
            k8s.helm.v3.ReleaseArgs(
                name=args.release_name,
                chart=KUBERAY_CHART,
                version=args.version,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=KUBERAY_HELM_REPO),
                namespace=args.namespace,
                create_namespace=args.create_namespace,
                values=values,
                # A failed install is rolled back instead of leaving a pending release.
                atomic=True,
                cleanup_on_fail=True,
                timeout=args.timeout_seconds,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.status = self.release.status
        self.register_outputs({"status": self.status})

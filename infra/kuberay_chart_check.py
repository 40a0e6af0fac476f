"""Release-time check: the KubeRay chart versions the stacks pin exist, and their gate lists match ours.

``ray_history_pulumi/kuberay.py`` sends the chart's whole ``featureGates`` list (Helm
replaces lists), so a pinned version that is not published, or whose ``values.yaml``
gained or dropped a gate, breaks ``pulumi up`` or silently flips a gate. This reads the
published Helm index, downloads each pinned chart and compares its default gates with
``CHART_DEFAULT_GATES``. It needs the network, so it runs in the kind workflow and before
a release, not in ``make test``::

    python -m infra.kuberay_chart_check            # the default and every infra/stacks pin
    python -m infra.kuberay_chart_check --repo URL  # another Helm repository (tests: loopback)

Exit status 0 when every pin checks out; 1 with one line per problem otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from infra.helm_repo import pin_problems, run_check
from ray_history_pulumi.kuberay import CHART_DEFAULT_GATES, DEFAULT_KUBERAY_VERSION, KUBERAY_CHART, KUBERAY_HELM_REPO

STACKS_DIR = Path(__file__).resolve().parent / "stacks"


def pinned_versions(stacks_dir: Path = STACKS_DIR) -> set[str]:
    """The default chart version and every ``kuberay.version`` an example stack pins."""
    versions = {DEFAULT_KUBERAY_VERSION}
    for stack in sorted(stacks_dir.glob("Pulumi.*.yaml")):
        config = (yaml.safe_load(stack.read_text()) or {}).get("config", {})
        kuberay = config.get("ray-history-server:kuberay") or {}
        if isinstance(kuberay, dict) and kuberay.get("version"):
            versions.add(str(kuberay["version"]).removeprefix("v"))
    return versions


def chart_gates(values: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """``featureGates`` of a chart's ``values.yaml``."""
    return [(str(gate["name"]), bool(gate["enabled"])) for gate in values.get("featureGates") or []]


def gate_problems(version: str, published: Sequence[tuple[str, bool]]) -> list[str]:
    """How the published gate list differs from ``CHART_DEFAULT_GATES`` for this version ([] = equal)."""
    minor = ".".join(version.split(".")[:2])
    ours = CHART_DEFAULT_GATES.get(minor)
    if ours is None:
        return [f"{version}: no CHART_DEFAULT_GATES entry for {minor}"]
    if list(ours) == list(published):
        return []
    return [f"{version}: chart featureGates {list(published)} differ from CHART_DEFAULT_GATES[{minor!r}] {list(ours)}"]


def check(versions: Iterable[str], repo: str = KUBERAY_HELM_REPO, timeout: float = 60.0) -> list[str]:
    """Every problem with the pinned versions against the repository (empty: all published and equal)."""
    return pin_problems(
        versions, repo, KUBERAY_CHART, lambda version, values: gate_problems(version, chart_gates(values)), timeout
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_check(
        argv,
        prog="python -m infra.kuberay_chart_check",
        description=(__doc__ or "").split("\n")[0],
        default_repo=KUBERAY_HELM_REPO,
        stacks_dir=STACKS_DIR,
        pinned=pinned_versions,
        check=check,
        passed=lambda versions: (
            f"kuberay-operator {', '.join(sorted(versions))}: published, featureGates equal to CHART_DEFAULT_GATES"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())

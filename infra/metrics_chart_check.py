"""Release-time check: the kube-prometheus-stack and grafana chart versions we pin exist, and know our values.

Helm ignores values a chart does not read, so a renamed key (``grafana.sidecar.dashboards``,
``prometheus.prometheusSpec.retention``) would silently leave Prometheus without its volume
or Grafana without Ray's dashboards. This reads prometheus-community's Helm index, downloads
each pinned chart and checks that its ``values.yaml`` has every key
:meth:`~ray_history_pulumi.metrics.RayMetricsArgs.helm_release_values` sets (free-form maps
aside). The same for the ``grafana`` chart ``managed`` mode installs
(:func:`~ray_history_pulumi.metrics_proxies.grafana_values`), from Grafana's Helm repository.
It needs the network, so it runs in the kind workflow, not in ``make test``::

    python -m infra.metrics_chart_check            # the defaults and every infra/stacks pin
    python -m infra.metrics_chart_check --repo URL  # both charts from another repository (tests: loopback)

Exit status 0 when every pin checks out; 1 with one line per problem otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from infra.helm_repo import pin_problems, run_check
from ray_history_pulumi.metrics import KPS_CHART, KPS_CHART_VERSION, KPS_HELM_REPO, RayMetricsArgs
from ray_history_pulumi.metrics_proxies import GRAFANA_CHART, GRAFANA_CHART_VERSION, GRAFANA_HELM_REPO, grafana_values

STACKS_DIR = Path(__file__).resolve().parent / "stacks"
#: Values that are free-form maps in the chart (its values.yaml does not list their keys),
#: or values of a subchart that kube-prometheus-stack's own values.yaml does not repeat.
FREE_FORM = (
    ("grafana", "grafana.ini"),
    ("grafana", "fullnameOverride"),
    ("prometheus", "prometheusSpec", "storageSpec"),
)
#: The same for the grafana chart: ``grafana.ini`` sections and the datasources file are free-form.
GRAFANA_FREE_FORM = (("grafana.ini",), ("datasources",))
#: Read by the chart's name helper though its values.yaml may not list it.
GRAFANA_UNLISTED = ("fullnameOverride",)


def pinned_versions(stacks_dir: Path = STACKS_DIR) -> set[str]:
    """The default chart version and every ``metrics.chartVersion`` an example stack pins."""
    versions = {KPS_CHART_VERSION}
    for stack in sorted(stacks_dir.glob("Pulumi.*.yaml")):
        config = (yaml.safe_load(stack.read_text()) or {}).get("config", {})
        metrics = config.get("ray-history-server:metrics") or {}
        if isinstance(metrics, dict) and metrics.get("chartVersion"):
            versions.add(str(metrics["chartVersion"]))
    return versions


def value_paths(
    values: Mapping[str, Any], prefix: tuple[str, ...] = (), free_form: Sequence[tuple[str, ...]] = FREE_FORM
) -> Iterator[tuple[str, ...]]:
    """Every key path of ``values`` down to its leaves, stopping at ``free_form`` maps."""
    for key, value in values.items():
        path = (*prefix, str(key))
        yield path
        if path in free_form:
            continue
        if isinstance(value, Mapping):
            yield from value_paths(value, path, free_form)


def unknown_keys(
    ours: Mapping[str, Any], published: Mapping[str, Any], free_form: Sequence[tuple[str, ...]] = FREE_FORM
) -> list[str]:
    """Our key paths the chart's values do not have (dotted)."""
    missing = []
    for path in value_paths(ours, free_form=free_form):
        node: Any = published
        for key in path:
            if not isinstance(node, Mapping) or key not in node:
                missing.append(".".join(path))
                break
            node = node[key]
    return missing


def check(versions: Iterable[str], repo: str = "", timeout: float = 120.0) -> list[str]:
    """Every problem with the pinned kube-prometheus-stack ``versions`` and the grafana chart pin
    (empty: all published and known); ``repo`` "" = each chart's own repository."""
    ours = RayMetricsArgs(mode="kube-prometheus-stack").helm_release_values()
    problems = pin_problems(
        versions,
        repo or KPS_HELM_REPO,
        KPS_CHART,
        lambda version, values: [f"{version}: values.yaml has no {key}" for key in unknown_keys(ours, values)],
        timeout,
    )
    # The URL is a placeholder: only the keys are compared.
    grafana = {
        k: v for k, v in grafana_values("Prometheus", "http://prometheus:9090").items() if k not in GRAFANA_UNLISTED
    }
    return problems + pin_problems(
        [GRAFANA_CHART_VERSION],
        repo or GRAFANA_HELM_REPO,
        GRAFANA_CHART,
        lambda version, values: [
            f"{GRAFANA_CHART} {version}: values.yaml has no {key}"
            for key in unknown_keys(grafana, values, GRAFANA_FREE_FORM)
        ],
        timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run_check(
        argv,
        prog="python -m infra.metrics_chart_check",
        description=(__doc__ or "").split("\n")[0],
        default_repo="",
        stacks_dir=STACKS_DIR,
        pinned=pinned_versions,
        check=check,
        passed=lambda versions: (
            f"{KPS_CHART} {', '.join(sorted(versions))} and {GRAFANA_CHART} {GRAFANA_CHART_VERSION}: "
            "published, every value we set is in their values.yaml"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())

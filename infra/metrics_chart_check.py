"""Release-time check: the kube-prometheus-stack versions the stacks pin exist, and know our values.

Helm ignores values a chart does not read, so a renamed key (``grafana.sidecar.dashboards``,
``prometheus.prometheusSpec.retention``) would silently leave Prometheus without its volume
or Grafana without Ray's dashboards. This reads prometheus-community's Helm index, downloads
each pinned chart and checks that its ``values.yaml`` has every key
:meth:`~ray_history_pulumi.metrics.RayMetricsArgs.helm_release_values` sets (free-form maps
aside). It needs the network, so it runs in the kind workflow, not in ``make test``::

    python -m infra.metrics_chart_check            # the default and every infra/stacks pin
    python -m infra.metrics_chart_check --repo URL  # another Helm repository (tests: loopback)

Exit status 0 when every pin checks out; 1 with one line per problem otherwise.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import tarfile
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from infra.kuberay_chart_check import _get, chart_urls
from ray_history_pulumi.metrics import KPS_CHART, KPS_CHART_VERSION, KPS_HELM_REPO, RayMetricsArgs

LOG = logging.getLogger(__name__)
STACKS_DIR = Path(__file__).resolve().parent / "stacks"
#: Values that are free-form maps in the chart (its values.yaml does not list their keys),
#: or values of a subchart that kube-prometheus-stack's own values.yaml does not repeat.
FREE_FORM = (
    ("grafana", "grafana.ini"),
    ("grafana", "fullnameOverride"),
    ("prometheus", "prometheusSpec", "storageSpec"),
)


def pinned_versions(stacks_dir: Path = STACKS_DIR) -> set[str]:
    """The default chart version and every ``metrics.chartVersion`` an example stack pins."""
    versions = {KPS_CHART_VERSION}
    for stack in sorted(stacks_dir.glob("Pulumi.*.yaml")):
        config = (yaml.safe_load(stack.read_text()) or {}).get("config", {})
        metrics = config.get("ray-history-server:metrics") or {}
        if isinstance(metrics, dict) and metrics.get("chartVersion"):
            versions.add(str(metrics["chartVersion"]))
    return versions


def value_paths(values: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path of ``values`` down to its leaves, stopping at :data:`FREE_FORM` maps."""
    for key, value in values.items():
        path = (*prefix, str(key))
        yield path
        if path in FREE_FORM:
            continue
        if isinstance(value, Mapping):
            yield from value_paths(value, path)


def chart_values(chart_archive: bytes, chart: str) -> dict[str, Any]:
    """The chart's ``values.yaml`` inside a chart ``.tgz``."""
    with tarfile.open(fileobj=io.BytesIO(chart_archive), mode="r:gz") as archive:
        member = archive.extractfile(f"{chart}/values.yaml")
        if member is None:
            raise ValueError(f"{chart}/values.yaml is not a file in the chart archive")
        loaded: dict[str, Any] = yaml.safe_load(member.read()) or {}
        return loaded


def unknown_keys(ours: Mapping[str, Any], published: Mapping[str, Any]) -> list[str]:
    """Our key paths the chart's values do not have (dotted)."""
    missing = []
    for path in value_paths(ours):
        node: Any = published
        for key in path:
            if not isinstance(node, Mapping) or key not in node:
                missing.append(".".join(path))
                break
            node = node[key]
    return missing


def check(versions: Iterable[str], repo: str = KPS_HELM_REPO, timeout: float = 120.0) -> list[str]:
    """Every problem with the pinned versions against the repository (empty: all published and known)."""
    repo = repo if repo.endswith("/") else repo + "/"
    index = yaml.safe_load(_get(urllib.parse.urljoin(repo, "index.yaml"), timeout)) or {}
    urls = chart_urls(index, KPS_CHART, repo)
    ours = RayMetricsArgs(mode="kube-prometheus-stack").helm_release_values()
    problems: list[str] = []
    for version in sorted(versions):
        if version not in urls:
            problems.append(f"{version}: {KPS_CHART} {version} is not in {repo}index.yaml")
            continue
        published = chart_values(_get(urls[version], timeout), KPS_CHART)
        problems += [f"{version}: values.yaml has no {key}" for key in unknown_keys(ours, published)]
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.metrics_chart_check", description=__doc__.split("\n")[0])
    parser.add_argument("--repo", default=KPS_HELM_REPO, help="Helm repository URL (default: %(default)s)")
    parser.add_argument("--stacks-dir", type=Path, default=STACKS_DIR, help="stack files to read pins from")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    versions = pinned_versions(args.stacks_dir)
    problems = check(versions, args.repo)
    for problem in problems:
        LOG.error("%s", problem)
    if not problems:
        LOG.info("%s %s: published, every value we set is in its values.yaml", KPS_CHART, ", ".join(sorted(versions)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

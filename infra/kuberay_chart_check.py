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

import argparse
import io
import logging
import sys
import tarfile
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ray_history_pulumi.kuberay import CHART_DEFAULT_GATES, DEFAULT_KUBERAY_VERSION, KUBERAY_CHART, KUBERAY_HELM_REPO

LOG = logging.getLogger(__name__)
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


def chart_urls(index: Mapping[str, Any], chart: str, repo: str) -> dict[str, str]:
    """Published version -> absolute download URL, from a Helm repository's ``index.yaml``."""
    urls: dict[str, str] = {}
    for entry in (index.get("entries") or {}).get(chart) or []:
        if entry.get("urls"):
            urls[str(entry["version"])] = urllib.parse.urljoin(repo, str(entry["urls"][0]))
    return urls


def chart_gates(chart_archive: bytes, chart: str) -> list[tuple[str, bool]]:
    """``featureGates`` of the chart's ``values.yaml`` inside a chart ``.tgz``."""
    with tarfile.open(fileobj=io.BytesIO(chart_archive), mode="r:gz") as archive:
        member = archive.extractfile(f"{chart}/values.yaml")
        if member is None:
            raise ValueError(f"{chart}/values.yaml is not a file in the chart archive")
        values = yaml.safe_load(member.read()) or {}
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


def _get(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - https, or loopback in tests
        body: bytes = response.read()
        return body


def check(versions: Iterable[str], repo: str = KUBERAY_HELM_REPO, timeout: float = 60.0) -> list[str]:
    """Every problem with the pinned versions against the repository (empty: all published and equal)."""
    repo = repo if repo.endswith("/") else repo + "/"
    index = yaml.safe_load(_get(urllib.parse.urljoin(repo, "index.yaml"), timeout)) or {}
    urls = chart_urls(index, KUBERAY_CHART, repo)
    problems: list[str] = []
    for version in sorted(versions):
        if version not in urls:
            problems.append(f"{version}: {KUBERAY_CHART} {version} is not in {repo}index.yaml")
            continue
        problems += gate_problems(version, chart_gates(_get(urls[version], timeout), KUBERAY_CHART))
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.kuberay_chart_check", description=__doc__.split("\n")[0])
    parser.add_argument("--repo", default=KUBERAY_HELM_REPO, help="Helm repository URL (default: %(default)s)")
    parser.add_argument("--stacks-dir", type=Path, default=STACKS_DIR, help="stack files to read pins from")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    versions = pinned_versions(args.stacks_dir)
    problems = check(versions, args.repo)
    for problem in problems:
        LOG.error("%s", problem)
    if not problems:
        LOG.info(
            "kuberay-operator %s: published, featureGates equal to CHART_DEFAULT_GATES", ", ".join(sorted(versions))
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

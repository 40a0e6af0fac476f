"""Reading a published Helm repository, for the release-time chart checks
(:mod:`infra.kuberay_chart_check`, :mod:`infra.metrics_chart_check`): each pinned
version must be in the repository's ``index.yaml``, and its ``values.yaml`` must agree
with what our components send. The checks differ only in that last comparison."""

from __future__ import annotations

import argparse
import io
import logging
import tarfile
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

LOG = logging.getLogger(__name__)

#: (version, the chart's values.yaml) -> problems, one line each ([] = it agrees).
ValuesCheck = Callable[[str, dict[str, Any]], list[str]]


def chart_urls(index: Mapping[str, Any], chart: str, repo: str) -> dict[str, str]:
    """Published version -> absolute download URL, from a Helm repository's ``index.yaml``."""
    urls: dict[str, str] = {}
    for entry in (index.get("entries") or {}).get(chart) or []:
        if entry.get("urls"):
            urls[str(entry["version"])] = urllib.parse.urljoin(repo, str(entry["urls"][0]))
    return urls


def chart_values(chart_archive: bytes, chart: str) -> dict[str, Any]:
    """The chart's ``values.yaml`` inside a chart ``.tgz``."""
    with tarfile.open(fileobj=io.BytesIO(chart_archive), mode="r:gz") as archive:
        member = archive.extractfile(f"{chart}/values.yaml")
        if member is None:
            raise ValueError(f"{chart}/values.yaml is not a file in the chart archive")
        loaded: dict[str, Any] = yaml.safe_load(member.read()) or {}
        return loaded


def fetch(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - https, or loopback in tests
        body: bytes = response.read()
        return body


def pin_problems(
    versions: Iterable[str], repo: str, chart: str, check_values: ValuesCheck, timeout: float = 60.0
) -> list[str]:
    """Every problem with the pinned ``versions`` of ``chart`` in ``repo`` (empty: all good)."""
    repo = repo if repo.endswith("/") else repo + "/"
    index = yaml.safe_load(fetch(urllib.parse.urljoin(repo, "index.yaml"), timeout)) or {}
    urls = chart_urls(index, chart, repo)
    problems: list[str] = []
    for version in sorted(versions):
        if version not in urls:
            problems.append(f"{version}: {chart} {version} is not in {repo}index.yaml")
            continue
        problems += check_values(version, chart_values(fetch(urls[version], timeout), chart))
    return problems


def run_check(
    argv: Sequence[str] | None,
    *,
    prog: str,
    description: str,
    default_repo: str,
    stacks_dir: Path,
    pinned: Callable[[Path], set[str]],
    check: Callable[[set[str], str], list[str]],
    passed: Callable[[set[str]], str],
) -> int:
    """A check's command line: exit 0 when every pin checks out, 1 with one line per problem."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    shown = default_repo or "each chart's own"
    parser.add_argument("--repo", default=default_repo, help=f"Helm repository URL (default: {shown})")
    parser.add_argument("--stacks-dir", type=Path, default=stacks_dir, help="stack files to read pins from")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    versions = pinned(args.stacks_dir)
    problems = check(versions, args.repo)
    for problem in problems:
        LOG.error("%s", problem)
    if not problems:
        LOG.info("%s", passed(versions))
    return 1 if problems else 0

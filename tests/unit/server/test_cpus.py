"""usable_cpus: the container CPU quota caps the index build's worker processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.server.index.cpus import cgroup_cpu_limit, usable_cpus


def _v2(root: Path, cpu_max: str) -> Path:
    (root / "cpu.max").write_text(f"{cpu_max}\n")
    return root


def _v1(root: Path, quota: str, period: str = "100000") -> Path:
    (root / "cpu").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text(f"{period}\n")
    return root


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("200000 100000", 2.0), ("150000 100000", 1.5), ("50000 100000", 0.5), ("max 100000", None), ("max", None)],
)
def test_cgroup_v2_cpu_max(tmp_path: Path, cpu_max: str, expected: float | None) -> None:
    assert cgroup_cpu_limit(_v2(tmp_path, cpu_max)) == expected


@pytest.mark.parametrize(("quota", "expected"), [("400000", 4.0), ("-1", None), ("garbage", None)])
def test_cgroup_v1_cfs_quota(tmp_path: Path, quota: str, expected: float | None) -> None:
    assert cgroup_cpu_limit(_v1(tmp_path, quota)) == expected


def test_no_cgroup_files_means_no_limit(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(tmp_path) is None


def test_quota_caps_affinity_and_rounds_up(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    assert usable_cpus(_v2(tmp_path, "150000 100000")) == min(cores, 2)
    assert usable_cpus(tmp_path / "absent") == cores


def test_a_fraction_of_a_core_still_gives_one(tmp_path: Path) -> None:
    assert usable_cpus(_v2(tmp_path, "10000 100000")) == 1


def test_this_machine_reads_without_error() -> None:
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)

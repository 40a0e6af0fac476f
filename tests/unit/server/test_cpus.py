"""usable_cpus: the container CPU quota caps the index build's worker processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.server.index.cpus import cgroup_cpu_limit, cgroup_memory_limit, killed_hint, usable_cpus


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


@pytest.mark.parametrize(
    ("v2", "v1", "expected"),
    [
        ("3221225472", None, 3 * 2**30),
        ("max", None, None),
        (None, "2147483648", 2 * 2**30),
        (None, "9223372036854771712", None),  # cgroup v1's "unlimited"
        (None, None, None),
        ("garbage", None, None),
    ],
)
def test_cgroup_memory_limit(tmp_path: Path, v2: str | None, v1: str | None, expected: int | None) -> None:
    if v2 is not None:
        (tmp_path / "memory.max").write_text(f"{v2}\n")
    if v1 is not None:
        (tmp_path / "memory").mkdir()
        (tmp_path / "memory" / "memory.limit_in_bytes").write_text(f"{v1}\n")
    assert cgroup_memory_limit(tmp_path) == expected


def test_a_sigkilled_build_is_explained_as_out_of_memory(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("2147483648\n")
    hint = killed_hint(-9, tmp_path)
    assert "out of memory of the container's 2.0 GiB" in hint and "resources.limits.memory" in hint
    assert "out of memory:" in killed_hint(-9, tmp_path / "none")
    assert killed_hint(1, tmp_path) == killed_hint(None, tmp_path) == ""

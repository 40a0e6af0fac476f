"""How many CPUs this process may really use (affinity and the container's CPU quota),
and how much memory (to explain a build the OOM killer stopped).

``os.sched_getaffinity`` reports the node's cores inside a Kubernetes pod; the pod's
``resources.limits.cpu`` is enforced as a CFS quota instead. Sizing the index build's
worker processes by node cores would start one ~400 MiB parse worker per node core
(8 on a 16-core node) inside a pod limited to 2 CPUs and 2 GiB: throttled, then
OOM-killed. So the quota caps the count.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs allowed by the cgroup quota (v2 ``cpu.max``, else v1 CFS files); None if unlimited."""
    v2 = _read(root / "cpu.max")  # "max 100000" or "200000 100000"
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota == "max":
            return None
        return _ratio(quota, period or "100000")
    quota_v1 = _read(root / "cpu" / "cpu.cfs_quota_us")  # -1 when unlimited
    period_v1 = _read(root / "cpu" / "cpu.cfs_period_us")
    if quota_v1 is None or period_v1 is None:
        return None
    return _ratio(quota_v1, period_v1)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """Cores this process may schedule on, capped by the cgroup CPU quota (rounded up), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)


def cgroup_memory_limit(root: Path = CGROUP_ROOT) -> int | None:
    """Bytes the container may use (v2 ``memory.max``, else v1 ``limit_in_bytes``); None if unlimited."""
    v2 = _read(root / "memory.max")
    raw = v2 if v2 is not None else _read(root / "memory" / "memory.limit_in_bytes")
    if raw is None or raw == "max":
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if 0 < value < 2**60 else None  # v1 says "unlimited" with a huge number


def killed_hint(returncode: int | None, root: Path = CGROUP_ROOT) -> str:
    """What to tell an operator about a build process that died with ``returncode``:
    SIGKILL in a container is nearly always the kernel's OOM killer."""
    if returncode != -9:
        return ""
    limit = cgroup_memory_limit(root)
    within = f" of the container's {limit / 2**30:.1f} GiB" if limit else ""
    return (
        f"; it was killed (SIGKILL), most likely out of memory{within}: an index build needs about "
        "0.4 GiB, plus per CPU 0.1 GiB and 1.5 KB per task attempt of a sixteenth of the session "
        "(0.65 GiB for 1,000,000 tasks on 2 CPUs), so raise the server container's "
        "memory limit (resources.limits.memory; HistoryServerArgs.resources in the Pulumi components)"
    )

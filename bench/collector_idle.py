"""CPU used by an idle collector beside an idle Ray 2.60 head.

    .venv/bin/python bench/collector_idle.py [--seconds 60] [--warmup 30]

Starts a real Ray head (event export pointed at the collector), and a head-role
collector with production defaults (30 s log interval, 30 s snapshot polling,
local storage). After the warm-up (first uploads, first snapshots), measures the
collector's CPU time over ``--seconds`` and prints it as a share of one core.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.emulators.base import free_port  # noqa: E402
from tests.integration.ray_harness import CollectorProcess, RayHead  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        work = Path(tmp)
        port = free_port()
        ray = RayHead(f"http://127.0.0.1:{port}/v1/events")
        collector = CollectorProcess(
            {
                "STORAGE_BACKEND": "local",
                "LOCAL_STORAGE_DIR": str(work / "bucket"),
                "STORAGE_CREATE_BUCKET": "true",
                "RAY_CLUSTER_NAME": "idle",
                "RAY_ROLE": "head",
                "RAY_TMP_ROOT": str(ray.tmp_root),
                "RAY_DASHBOARD_ADDRESS": ray.dashboard_url,
                "LOG_LEVEL": "WARNING",
            },
            port,
            work / "collector.log",
        )
        try:
            ray.start()
            collector.start()
            print(f"warming up {args.warmup:.0f} s ...", flush=True)
            time.sleep(args.warmup)
            start_cpu, start = cpu_seconds(collector.pid), time.monotonic()
            time.sleep(args.seconds)
            used = cpu_seconds(collector.pid) - start_cpu
            wall = time.monotonic() - start
            share = used / wall * 100
            print(f"collector CPU over {wall:.0f} s beside an idle Ray head: {used:.2f} s = {share:.2f}% of one core")
            print(f"collector RSS: {rss_mib(collector.pid):.0f} MiB")
            code = collector.terminate()
            print(f"collector exit code: {code}")
        finally:
            collector.kill()
            ray.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

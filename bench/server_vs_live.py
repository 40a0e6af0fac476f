"""The history server next to the live Ray dashboard, on the same real session.

    .venv/bin/python bench/server_vs_live.py [--waves 8] [--repeat 30]

Starts a Ray 2.60 head with the collector (local storage), runs a job of a few
thousand tiny tasks (``tests/integration/collector/workloads/many_tasks.py``),
times ``/api/v0/tasks?detail=1&limit=10000`` and ``/logical/actors`` on the live
dashboard, stops Ray, starts ``historyserver`` on the stored session, enters it
(cold index build, timed) and times the same requests warm. Prints medians, p95
and the ratio live / history server (above 1 = the history server is faster).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runtime.storage.layout import ClusterRef  # noqa: E402
from tests.integration.emulators.base import free_port  # noqa: E402
from tests.integration.ray_harness import CollectorProcess, RayHead, RecordingProxy, collector_env  # noqa: E402
from tests.integration.server.harness import HistoryServerProcess, get_when_indexed  # noqa: E402

CLUSTER = ClusterRef("default", "bench-live")
PATHS = ("/api/v0/tasks?detail=1&limit=10000", "/logical/actors", "/api/v0/tasks?limit=100")
WORKLOAD = REPO / "tests" / "integration" / "collector" / "workloads" / "many_tasks.py"


def timings(client: requests.Session, base: str, path: str, repeat: int) -> tuple[list[float], int]:
    samples = []
    size = 0
    client.get(base + path, timeout=60).raise_for_status()  # warm-up
    for _ in range(repeat):
        started = time.perf_counter()
        answer = client.get(base + path, timeout=60)
        samples.append(time.perf_counter() - started)
        answer.raise_for_status()
        size = len(answer.content)
    return samples, size


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"median {statistics.median(ordered) * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waves", type=int, default=8, help="400 tasks per wave")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-vs-live-") as tmp_name:
        tmp = Path(tmp_name)
        bucket = tmp / "bucket"
        port = free_port()
        proxy = RecordingProxy(upstream_port=port)
        ray = RayHead(proxy.url)
        collector = CollectorProcess({}, port, tmp / "collector.log")
        live: dict[str, tuple[list[float], int]] = {}
        try:
            ray.start()
            collector.env.update(collector_env(bucket, ray, CLUSTER))
            collector.start()
            workdir = tmp / "job"
            workdir.mkdir()
            shutil.copy(WORKLOAD, workdir / "many_tasks.py")
            status = ray.submit(f"python many_tasks.py {args.waves}", workdir, "bench-many-tasks", timeout=900)
            print(f"job finished: {status}")
            time.sleep(5)
            client = requests.Session()
            for path in PATHS:
                live[path] = timings(client, ray.dashboard_url, path, args.repeat)
            session = ray.session_dir().name
            collector.terminate()
        finally:
            collector.kill()
            ray.cleanup()
            proxy.close()

        with HistoryServerProcess(bucket, tmp / "cache", "--storage-root-dir=hist") as server:
            client = requests.Session()
            started = time.perf_counter()
            url = f"{server.url}/enter_cluster/{CLUSTER.namespace}/raycluster/{CLUSTER.name}/{session}"
            get_when_indexed(client, url, 600)
            print(f"cold index build (enter_cluster): {time.perf_counter() - started:.2f} s")
            total = client.get(f"{server.url}/api/v0/tasks?limit=1", timeout=60).json()["data"]["result"]["total"]
            print(f"session: {session}, {total} task attempts")
            for path in PATHS:
                ours, our_size = timings(client, server.url, path, args.repeat)
                theirs, their_size = live[path]
                ratio = statistics.median(theirs) / statistics.median(ours)
                print(f"{path}")
                print(f"  live Ray dashboard: {summary(theirs)}  ({their_size} bytes)")
                print(f"  history server:     {summary(ours)}  ({our_size} bytes)")
                print(f"  ratio live/history: {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

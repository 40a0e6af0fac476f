"""The history server answering a big stored session: cold load through the real
server, first request after a restart, warm query latency and server memory.

    .venv/bin/python bench/server_queries.py [--tasks 1000000] [--repeat 200]

Uses the synthetic sessions of ``bench/server_cold_load.py`` (generated once and
cached in ``--cache-dir``), runs ``historyserver`` (gunicorn, gthread) on them and
prints: the cold ``/enter_cluster`` time (index build), the time to the first
answer after a restart with the index already on disk, p50/p99 of
``/api/v0/tasks?limit=100`` with filters, of ``detail=1&limit=10000`` and of
``/api/v0/tasks/summarize``, and the
RSS of the server's processes while serving (the index build runs in a child).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.server_cold_load import CLUSTER, ensure_session  # noqa: E402
from bench.synth_session import SESSION, job_bytes  # noqa: E402
from tests.integration.server.harness import HistoryServerProcess, get_when_indexed  # noqa: E402

ENTER = f"/enter_cluster/{CLUSTER.namespace}/raycluster/{CLUSTER.name}/{SESSION}"


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` and its descendants, summed, in MiB."""
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    rss = hwm = 0
    for one in pids:
        for line in Path(f"/proc/{one}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm += int(line.split()[1])
    return rss / 1024, hwm / 1024


def percentiles(client: requests.Session, url: str, repeat: int) -> str:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(url, timeout=120).raise_for_status()
        samples.append(time.perf_counter() - started)
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    median = statistics.median(ordered)
    return f"p50 {median * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms   max {ordered[-1] * 1000:7.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "rhs-synth")
    args = parser.parse_args(argv)
    store_dir = ensure_session(args.cache_dir, args.tasks, gzip_events=False)
    job = job_bytes(2).hex()
    with tempfile.TemporaryDirectory(prefix="rhs-serve-") as tmp:
        index_dir = Path(tmp) / "index"
        with HistoryServerProcess(store_dir, index_dir) as server:
            client = requests.Session()
            started = time.perf_counter()
            get_when_indexed(client, server.url + ENTER, 900)
            print(f"{args.tasks} tasks: cold load via /enter_cluster {time.perf_counter() - started:.2f} s")
        with HistoryServerProcess(store_dir, index_dir) as server:
            client = requests.Session()
            started = time.perf_counter()
            get_when_indexed(client, server.url + ENTER, 900)
            first = client.get(f"{server.url}/api/v0/tasks?limit=100", timeout=120)
            first.raise_for_status()
            print(f"after a restart: enter + first /api/v0/tasks answer in {time.perf_counter() - started:.3f} s")
            name = first.json()["data"]["result"]["result"][0]["name"]
            base = f"{server.url}/api/v0/tasks?limit=100"
            flt = "&filter_keys={}&filter_predicates=%3D&filter_values={}"
            queries = {
                "tasks, job_id filter": base + flt.format("job_id", job),
                "tasks, state=FAILED": base + flt.format("state", "FAILED"),
                "tasks, job_id + state=FINISHED": base + flt.format("job_id", job) + flt.format("state", "FINISHED"),
                f"tasks, task_name={name}": base + flt.format("task_name", name),
                "tasks, no filter": base,
            }
            for label, url in queries.items():
                print(f"  {label:34s} {percentiles(client, url, args.repeat)}")
            detail = f"{server.url}/api/v0/tasks?detail=1&limit=10000"  # the stored JSON of 10,000 rows
            print(f"  {'tasks, detail=1 limit=10000':34s} {percentiles(client, detail, max(20, args.repeat // 10))}")
            summarize = f"{server.url}/api/v0/tasks/summarize"
            print(f"  {'summarize (func_name)':34s} {percentiles(client, summarize, max(20, args.repeat // 10))}")
            by_job = summarize + "?" + flt.format("job_id", job)[1:]
            print(f"  {'summarize, job_id filter':34s} {percentiles(client, by_job, max(20, args.repeat // 10))}")
            rss, hwm = rss_mib(server.proc.pid if server.proc else 0)
            print(f"server RSS while serving: {rss:.0f} MiB (master + workers), peak {hwm:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

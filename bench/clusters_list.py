"""The history list over 100,000 stored sessions: ``/clusters`` first-page latency.

    .venv/bin/python bench/clusters_list.py [--sessions 100000] [--repeat 200] [--limit 100]

Stores ``--sessions`` synthetic sessions (markers only, as the collector files them,
on the local backend under ``--cache-dir``; generated once and reused), runs
``historyserver`` on them and prints the first page's latency over HTTP:

* cold: the server's first ``/clusters?limit=N`` (it lists every marker);
* warm: p50/p95 of ``--repeat`` requests after it, for the first page, the first
  page filtered to failed sessions, one namespace and a relative date, and a later
  page through the cursor; the marker listing expires every 5 s meanwhile (it is
  refreshed in the background once it is slow to list);
* a 10-million-iteration Python loop, this machine's speed.

Target (#19): the first page in <= 200 ms.
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

from bench.server_load import loop_seconds  # noqa: E402
from runtime.storage.layout import ClusterRef, KeyLayout  # noqa: E402
from runtime.storage.local import LocalStore  # noqa: E402
from tests.integration.server.harness import HistoryServerProcess  # noqa: E402

NAMESPACES = ("default", "team-a", "team-b", "research", "prod")
OWNERS = ("raycluster", "rayjob", "rayservice")


def synthetic(i: int) -> tuple[ClusterRef, str]:
    """The i-th session: 1,000 clusters in 5 namespaces, a third owned by a RayJob or RayService."""
    cluster_no = i % 1000
    namespace = NAMESPACES[cluster_no % len(NAMESPACES)]
    kind = OWNERS[cluster_no % len(OWNERS)]
    owner = f"owner-{cluster_no}" if kind != "raycluster" else ""
    cluster = ClusterRef(namespace, f"cluster-{cluster_no}-x7k2p", kind, owner)
    # One session every 30 s going back from 2026-11-20: about 35 days.
    seconds = 1_795_132_800 - i * 30
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.gmtime(seconds))
    return cluster, f"session_{stamp}_{i % 1_000_000:06d}_{i % 97 + 1}"


def ensure_markers(root: Path, count: int) -> Path:
    store_dir = root / f"markers-{count}"
    done = store_dir / ".complete"
    if done.exists():
        return store_dir
    store_dir.mkdir(parents=True, exist_ok=True)
    store = LocalStore(store_dir)
    layout = KeyLayout("")
    started = time.perf_counter()
    for i in range(count):
        cluster, session = synthetic(i)
        store.put_bytes(layout.marker_key(cluster, session), b"")
    done.write_text(str(count))
    print(f"stored {count} markers in {time.perf_counter() - started:.1f} s", flush=True)
    return store_dir


def timed(client: requests.Session, url: str) -> tuple[float, requests.Response]:
    started = time.perf_counter()
    answer = client.get(url, timeout=300)
    elapsed = time.perf_counter() - started
    answer.raise_for_status()
    return elapsed, answer


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    median = statistics.median(ordered)
    return f"p50 {median * 1000:6.1f} ms   p95 {p95 * 1000:6.1f} ms   max {ordered[-1] * 1000:6.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "rhs-clusters-list")
    args = parser.parse_args(argv)
    store_dir = ensure_markers(args.cache_dir, args.sessions)
    print(f"10M-iteration Python loop {loop_seconds():.2f} s", flush=True)
    tmp = tempfile.TemporaryDirectory(prefix="rhs-list-")
    with tmp, HistoryServerProcess(store_dir, Path(tmp.name) / "index") as server:
        client = requests.Session()
        first = f"{server.url}/clusters?limit={args.limit}"
        base = first
        cold, answer = timed(client, first)
        entries = answer.json()
        if len(entries) != args.limit:
            raise SystemExit(f"first page has {len(entries)} entries, expected {args.limit}")
        print(f"{args.sessions} stored sessions: cold first page (lists every marker) {cold * 1000:.0f} ms")
        cursor = answer.headers["X-Next-Cursor"]
        cases = {
            f"first page (limit={args.limit})": first,
            "first page, failed only": f"{base}&failed=true",
            "first page, one namespace, since 30d": f"{base}&namespace=team-a&since=30d",
            "second page (cursor)": f"{first}&cursor={cursor}",
            "no parameters (--clusters-limit 1000)": f"{server.url}/clusters",
        }
        for label, url in cases.items():
            samples = [timed(client, url)[0] for _ in range(args.repeat)]
            print(f"  {label:40s} {percentiles(samples)}", flush=True)
    print(f"10M-iteration Python loop after the run {loop_seconds():.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

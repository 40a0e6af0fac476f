"""Concurrent users on one warm stored session: latency per route, throughput, errors.

    .venv/bin/python bench/server_load.py [--tasks 1000000] [--users 20] [--seconds 60]
                                          [--index-dir DIR] [--server-arg=--threads=16 ...]

Uses the synthetic sessions of ``bench/server_cold_load.py`` (generated once and cached in
``--cache-dir``), runs ``historyserver`` (gunicorn, gthread, its default workers and
threads, as the Pulumi program deploys it) on one, warms it (the first request builds the
index: 503 progress answers are followed), visits every route once as one user (what the
server derives once and keeps, e.g. the cluster status, is then computed: ``--no-warm-routes``
leaves that to the users) and then lets ``--users`` threads, each with its
own HTTP client and session cookie, cycle through what the Dashboard asks for a session
(tasks pages, task summaries, jobs, nodes, actors, cluster status, a log listing and a log
file) for ``--seconds``. Prints p50/p95/p99/max per route and overall, requests/s, the
error count (any answer but 200, any exception), the time of a 10-million-iteration
Python loop and the load average, so figures compare across machines. Client and server
share this machine's cores: the figures include the load generator's own CPU.
``--index-dir`` keeps the built index between runs (the warm-up then only opens it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import requests

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.server_cold_load import ensure_session  # noqa: E402
from bench.server_queries import ENTER  # noqa: E402
from tests.integration.server.harness import HistoryServerProcess, get_when_indexed  # noqa: E402

#: Run at module scope (global names), as ``python -c`` runs it: the machine-speed yardstick.
LOOP = "total = 0\nfor i in range(10_000_000):\n    total += i\n"


def loop_seconds() -> float:
    """A 10-million-iteration Python loop: this machine's speed, printed beside every figure."""
    code = compile(LOOP, "<loop>", "exec")
    started = time.perf_counter()
    exec(code, {})  # noqa: S102 - a constant, for timing only
    return time.perf_counter() - started


def dashboard_routes(client: requests.Session, url: str) -> dict[str, str]:
    """What the Dashboard's pages ask for this session, with a real job, node and task name."""
    nodes = client.get(f"{url}/nodes?view=summary", timeout=120)
    nodes.raise_for_status()
    head = next(iter(nodes.json()["data"]["nodeLogicalResources"]))  # the head node comes first
    jobs = client.get(f"{url}/api/jobs/", timeout=120)
    jobs.raise_for_status()
    job_id = next(job["job_id"] for job in jobs.json() if job.get("job_id"))
    tasks = client.get(f"{url}/api/v0/tasks?limit=1", timeout=120)
    tasks.raise_for_status()
    name = tasks.json()["data"]["result"]["result"][0]["name"]

    def tasks_query(*filters: tuple[str, str], limit: int = 100) -> str:
        query: list[tuple[str, str | int]] = [("limit", limit), ("detail", 1)]
        for key, value in filters:
            query += [("filter_keys", key), ("filter_predicates", "="), ("filter_values", value)]
        return f"/api/v0/tasks?{urlencode(query)}"

    return {
        "tasks, limit 100": tasks_query(),
        "tasks, job_id": tasks_query(("job_id", job_id)),
        "tasks, state=FAILED": tasks_query(("state", "FAILED")),
        "tasks, task name": tasks_query(("task_name", name)),
        "summarize, job_id": "/api/v0/tasks/summarize?"
        + urlencode({"filter_keys": "job_id", "filter_predicates": "=", "filter_values": job_id}),
        "jobs": "/api/jobs/",
        f"job {job_id}": f"/api/jobs/{job_id}",
        "nodes summary": "/nodes?view=summary",
        f"node {head[:8]}": f"/nodes/{head}",
        "actors": "/logical/actors",
        "cluster status": "/api/cluster_status?format=1",
        "log listing": f"/api/v0/logs?{urlencode({'node_id': head})}",
        "log file": f"/api/v0/logs/file?{urlencode({'node_id': head, 'filename': 'raylet.out', 'lines': 1000})}",
    }


@dataclass
class Samples:
    """Latencies (s) of the answered 200s per route, and the failures with their first reasons."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, route: str, elapsed: float, error: str | None) -> None:
        with self.lock:
            if error is None:
                self.seconds.setdefault(route, []).append(elapsed)
                return
            self.errors[route] = self.errors.get(route, 0) + 1
            if len(self.reasons) < 10:
                self.reasons.append(f"{route}: {error}")


@dataclass
class Load:
    """One run: the users start together and stop at ``stop_at`` (perf_counter seconds)."""

    url: str
    routes: dict[str, str]
    start: threading.Barrier
    samples: Samples = field(default_factory=Samples)
    stop_at: float = float("inf")  # set once every user holds its cookie

    def user(self, number: int) -> None:
        """One Dashboard user: its own connection and cookie, the routes in turn (each user
        from a different one, so every route is always under load), no think time."""
        client = requests.Session()
        get_when_indexed(client, self.url + ENTER, 120)  # the session cookie, as a browser gets it
        order = list(self.routes.items())
        order = order[number % len(order) :] + order[: number % len(order)]
        self.start.wait()
        turn = 0
        while time.perf_counter() < self.stop_at:
            label, path = order[turn % len(order)]
            turn += 1
            started = time.perf_counter()
            try:
                answer = client.get(self.url + path, timeout=60)
                _ = answer.content  # the whole body: what the browser waits for
                error = None if answer.status_code == 200 else f"HTTP {answer.status_code} {answer.text[:120]!r}"
            except requests.RequestException as exc:
                error = f"{type(exc).__name__}: {exc}"
            self.samples.add(label, time.perf_counter() - started, error)


def quantile(ordered: list[float], q: float) -> float:
    """Nearest-rank quantile of sorted samples."""
    return ordered[min(len(ordered) - 1, max(0, int(len(ordered) * q + 0.5) - 1))]


def describe(values: list[float], errors: int, seconds: float) -> str:
    ordered = sorted(values)
    if not ordered:
        return f"no answer, errors {errors}"
    ms = [quantile(ordered, q) * 1000 for q in (0.5, 0.95, 0.99)]
    return (
        f"n {len(ordered):6d}  {len(ordered) / seconds:6.1f}/s   p50 {ms[0]:7.1f}  p95 {ms[1]:7.1f}"
        f"  p99 {ms[2]:7.1f}  max {ordered[-1] * 1000:7.1f} ms   errors {errors}"
    )


def warm_routes(client: requests.Session, url: str, routes: dict[str, str]) -> None:
    """One user's first visit of every route, timed: results the server derives once and
    keeps in the index (cluster status, summaries) are computed here, not by 20 users at once."""
    for label, path in routes.items():
        started = time.perf_counter()
        client.get(url + path, timeout=600).raise_for_status()
        print(f"  first {label:22s} {(time.perf_counter() - started) * 1000:8.1f} ms", flush=True)


def run_load(url: str, users: int, seconds: float, *, warm: bool) -> tuple[Samples, float]:
    probe = requests.Session()
    get_when_indexed(probe, url + ENTER, 120)
    routes = dashboard_routes(probe, url)
    if warm:
        warm_routes(probe, url, routes)
    load = Load(url, routes, threading.Barrier(users + 1))
    threads = [threading.Thread(target=load.user, args=(n,), daemon=True) for n in range(users)]
    for thread in threads:
        thread.start()
    load.start.wait()
    began = time.perf_counter()
    load.stop_at = began + seconds
    for thread in threads:
        thread.join()
    return load.samples, time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1_000_000, help="tasks of the synthetic session")
    parser.add_argument("--users", type=int, default=20, help="concurrent users")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the users ask")
    parser.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "rhs-synth")
    parser.add_argument("--index-dir", type=Path, default=None, help="keep the index here (default: a temp dir)")
    parser.add_argument("--no-warm-routes", action="store_true", help="no first visit: users meet first computations")
    parser.add_argument("--server-arg", action="append", default=[], help="one more historyserver flag")
    args = parser.parse_args(argv)
    store_dir = ensure_session(args.cache_dir, args.tasks, gzip_events=False)
    print(f"cores: {len(os.sched_getaffinity(0))}, 10M-iteration Python loop {loop_seconds():.2f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="rhs-load-") as tmp:
        index_dir = args.index_dir or Path(tmp) / "index"
        index_dir.mkdir(parents=True, exist_ok=True)
        with HistoryServerProcess(store_dir, index_dir, *args.server_arg) as server:
            started = time.perf_counter()
            get_when_indexed(requests.Session(), server.url + ENTER, 1800)
            warm = time.perf_counter() - started
            print(f"{args.tasks} tasks: warm-up (index build or open) {warm:.1f} s", flush=True)
            load_before = os.getloadavg()[0]
            samples, elapsed = run_load(server.url, args.users, args.seconds, warm=not args.no_warm_routes)
            load_after = os.getloadavg()[0]
        print(f"{args.users} users for {elapsed:.1f} s (load average {load_before:.2f} before, {load_after:.2f} after)")
        for route in sorted(set(samples.seconds) | set(samples.errors)):
            print(f"  {route:22s} {describe(samples.seconds.get(route, []), samples.errors.get(route, 0), elapsed)}")
        everything = [s for values in samples.seconds.values() for s in values]
        errors = sum(samples.errors.values())
        print(f"  {'all routes':22s} {describe(everything, errors, elapsed)}")
        for reason in samples.reasons:
            print(f"  error: {reason}")
        print(f"10M-iteration Python loop after the run: {loop_seconds():.2f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

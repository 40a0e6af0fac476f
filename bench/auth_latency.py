"""What access control adds to a warm Dashboard query, through the real server.

    .venv/bin/python bench/auth_latency.py [--tasks 10000] [--repeat 400]

Two ``historyserver`` processes (gunicorn, gthread) serve the same synthetic session: one
with ``--auth none``, one with ``--auth kubernetes --authz kubernetes`` talking to a
loopback stand-in of the TokenReview / SubjectAccessReview API (tests/support). After a
warm-up (index built, token and access decisions cached) it times
``/api/v0/tasks?limit=100`` alternately on both and prints p50/p99 of each and the
difference. Target (#16): at most 2 ms added at p99.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.server_cold_load import CLUSTER, ensure_session  # noqa: E402
from bench.synth_session import SESSION  # noqa: E402
from tests.integration.server.harness import HistoryServerProcess, get_when_indexed  # noqa: E402
from tests.support.k8s_auth_stub import auth_api_stub  # noqa: E402

ENTER = f"/enter_cluster/{CLUSTER.namespace}/raycluster/{CLUSTER.name}/{SESSION}"
QUERY = "/api/v0/tasks?limit=100"
TOKEN = "bench-token"  # noqa: S105 - the stand-in's test token


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=400)
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".bench-cache")
    args = parser.parse_args(argv)
    store_dir = ensure_session(args.cache_dir, args.tasks, gzip_events=False)
    with tempfile.TemporaryDirectory() as tmp, auth_api_stub() as stub:
        stub.tokens = {TOKEN: ("bench@example.com", ("bench",))}
        stub.access = {("bench", CLUSTER.namespace)}
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(json.dumps(stub.kubeconfig()))
        auth_flags = (
            "--auth=kubernetes",
            "--authz=kubernetes",
            "--kubernetes=kubeconfig",
            f"--kubeconfig={kubeconfig}",
        )
        with (
            HistoryServerProcess(store_dir, Path(tmp) / "open-cache") as open_server,
            HistoryServerProcess(store_dir, Path(tmp) / "auth-cache", *auth_flags) as auth_server,
        ):
            sessions = {"none": requests.Session(), "kubernetes": requests.Session()}
            sessions["kubernetes"].headers["Authorization"] = f"Bearer {TOKEN}"
            urls = {"none": open_server.url, "kubernetes": auth_server.url}
            for mode, session in sessions.items():
                get_when_indexed(session, urls[mode] + ENTER, 600)
                for _ in range(20):  # warm: index open, token and decision cached
                    session.get(urls[mode] + QUERY, timeout=60).raise_for_status()
            times: dict[str, list[float]] = {"none": [], "kubernetes": []}
            for _ in range(args.repeat):
                for mode, session in sessions.items():
                    started = time.perf_counter()
                    session.get(urls[mode] + QUERY, timeout=60).raise_for_status()
                    times[mode].append((time.perf_counter() - started) * 1000)
            reviews = (len(stub.token_reviews), len(stub.access_reviews))
    for mode, values in times.items():
        print(f"--auth {mode:<10} {QUERY}: p50 {_quantile(values, 0.5):6.2f} ms  p99 {_quantile(values, 0.99):6.2f} ms")
    added50 = _quantile(times["kubernetes"], 0.5) - _quantile(times["none"], 0.5)
    added99 = _quantile(times["kubernetes"], 0.99) - _quantile(times["none"], 0.99)
    print(f"added by access control: p50 {added50:+.2f} ms, p99 {added99:+.2f} ms (target: p99 <= 2 ms)")
    print(f"API calls during the run: {reviews[0]} TokenReview, {reviews[1]} SubjectAccessReview (cached)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

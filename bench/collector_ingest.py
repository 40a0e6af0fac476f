"""Sustained event ingest of one collector process pinned to one core.

    .venv/bin/python bench/collector_ingest.py [--seconds 20] [--batch 1000] [--connections 4] [--no-fsync]
                                               [--backend local|gcs|s3|azureblob]

Starts ``collector`` (worker role, log collector off; storage ``local`` or an
emulator, whose SDK counts toward the collector's RSS) on core 0
and posts batches shaped like Ray 2.60's (events from ``tests/fixtures/ray-samples``,
``--batch`` per POST, as the aggregator sends under load) from core 1. Every
200 is a durable acknowledgement (fsync'd spool). Prints events/s, POST latency,
the collector's CPU use, peak RSS, and checks every acknowledged event reached
storage after SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.emulators.registry import EMULATORS  # noqa: E402

SAMPLES = REPO / "tests" / "fixtures" / "ray-samples" / "events" / "runB-all-types" / "_all_events.json"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def make_batches(size: int, count: int) -> list[bytes]:
    events = json.loads(SAMPLES.read_text())
    batches = []
    for b in range(count):
        batch = []
        for i in range(size):
            event = dict(events[(b * size + i) % len(events)])
            event["eventId"] = f"bench-{b}-{i}"
            batch.append(event)
        batches.append(orjson.dumps(batch))
    return batches


async def load(
    url: str, batches: list[bytes], seconds: float, connections: int, batches_per_second: float = 0.0
) -> tuple[int, int, list[float]]:
    acked_batches, other, latencies = 0, 0, []
    started_at = time.monotonic()
    stop_at = started_at + seconds
    sent = 0

    async def worker(session: aiohttp.ClientSession, offset: int) -> None:
        nonlocal acked_batches, other, sent
        i = offset
        while time.monotonic() < stop_at:
            if batches_per_second:  # paced: the n-th batch leaves at n / rate
                delay = started_at + sent / batches_per_second - time.monotonic()
                sent += 1
                if delay > 0:
                    await asyncio.sleep(delay)
            body = batches[i % len(batches)]
            i += connections
            started = time.perf_counter()
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                latencies.append(time.perf_counter() - started)
                if resp.status == 200:
                    acked_batches += 1
                else:
                    other += 1

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session, k) for k in range(connections)))
    return acked_batches, other, latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--backend", default="local", choices=sorted(EMULATORS))
    parser.add_argument("--rate", type=float, default=0.0, help="events/s to offer (0 = as fast as it acknowledges)")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))

    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        work = Path(tmp)
        port = free_port()
        emulator = EMULATORS[args.backend](work / "emulator")
        emulator.workdir.mkdir()
        emulator.start()
        emulator.create_bucket("bench")
        env = {
            **os.environ,
            **emulator.env("bench"),
            "RAY_CLUSTER_NAME": "bench",
            "RAY_TMP_ROOT": str(work / "ray"),
            "EVENTS_PORT": str(port),
            "EVENTS_HOST": "127.0.0.1",
            "ENABLE_LOG_COLLECTOR": "false",
            "RAY_COLLECTOR_EVENT_FSYNC": "false" if args.no_fsync else "true",
            "RAY_COLLECTOR_EVENT_MAX_DISK_MB": "4096",
            "RAY_COLLECTOR_EVENT_ROTATION_INTERVAL": "10s",
            "RAY_COLLECTOR_SHUTDOWN_DEADLINE": "60s",
            "LOG_LEVEL": "WARNING",
        }
        (work / "ray").mkdir()
        proc = subprocess.Popen([sys.executable, "-m", "runtime.collector.main"], env=env, cwd=REPO)
        os.sched_setaffinity(proc.pid, {cores[0]})
        if len(cores) > 1:
            os.sched_setaffinity(0, set(cores[1:]))
        url = f"http://127.0.0.1:{port}/v1/events"
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    print("collector did not start")
                    return 1
                time.sleep(0.1)

        batches = make_batches(args.batch, 64)
        rss_start = proc_status(proc.pid, "VmRSS")
        cpu_start = cpu_seconds(proc.pid)
        wall_start = time.monotonic()
        acked, other, latencies = asyncio.run(
            load(url, batches, args.seconds, args.connections, args.rate / args.batch if args.rate else 0.0)
        )
        wall = time.monotonic() - wall_start
        cpu = cpu_seconds(proc.pid) - cpu_start
        rss_peak = proc_status(proc.pid, "VmHWM")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)

        stored = 0
        with emulator.make_store("bench") as store:
            for info in store.walk(""):
                if info.key.endswith(".jsonl"):
                    stored += store.get_bytes(info.key).count(b"\n")
        emulator.stop()
        latencies.sort()
        events = acked * args.batch
        p50, p99 = latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000
        verdict = "all acknowledged events stored" if stored >= events else "MISSING EVENTS"
        fsync = "off" if args.no_fsync else "on"
        offered = f"{args.rate:,.0f} events/s offered" if args.rate else "as fast as acknowledged"
        shape = f"batches of {args.batch} events, {args.connections} connections"
        print(f"{shape}, fsync {fsync}, {args.backend}, {offered}")
        print(f"acknowledged events/s      {events / wall:>12,.0f}   ({events:,} in {wall:.1f} s; non-200: {other})")
        print(f"collector CPU              {cpu / wall * 100:>11.0f}%  of one core (pinned to core {cores[0]})")
        print(f"events/s per busy core-s   {events / max(cpu, 1e-9):>12,.0f}")
        print(f"POST latency p50 / p99     {p50:>8.1f} / {p99:.1f} ms")
        print(f"collector RSS start / peak {rss_start / 2**20:>8.0f} / {rss_peak / 2**20:.0f} MiB")
        print(f"events in storage          {stored:>12,}   ({verdict})")
        print(f"collector exit code        {proc.returncode:>12}")
        return 0 if stored >= events and proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Collector memory while shipping a large log, and how fast a new log line lands.

    .venv/bin/python bench/collector_logs.py [--size-gib 2] [--backend local|gcs|s3|azureblob]

Builds a Ray-shaped temp root (``session_latest`` -> a session with a node id),
starts ``collector`` (worker role, default 30 s log upload interval) against the
chosen storage (``local``, or an emulator), then:

1. writes a log file of ``--size-gib`` into the session's ``logs/`` and waits until
   storage holds all of it; prints time and the collector's peak RSS;
2. appends one line to a log shipped earlier and measures until storage has it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runtime.storage.layout import ClusterRef, KeyLayout  # noqa: E402
from tests.integration.emulators.base import free_port, wait_for_port  # noqa: E402
from tests.integration.emulators.registry import EMULATORS  # noqa: E402

NODE = "98f883cfe30ce800c7aac63e75e2794d48efac54650dde6e279e2c78"
SESSION = "session_2026-11-22_01-45-25_333080_9264"
MIB = 1024 * 1024


def status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--backend", default="local", choices=sorted(EMULATORS))
    args = parser.parse_args()
    size = int(args.size_gib * 1024 * MIB)

    with tempfile.TemporaryDirectory(prefix="bench-logs-") as tmp:
        work = Path(tmp)
        emulator = EMULATORS[args.backend](work / "emulator")
        emulator.workdir.mkdir()
        emulator.start()
        bucket = f"bench-{uuid.uuid4().hex[:10]}"
        emulator.create_bucket(bucket)
        tmp_root = work / "ray"
        logs = tmp_root / SESSION / "logs"
        logs.mkdir(parents=True)
        (tmp_root / SESSION / f"gcs_server_port_{NODE}").write_text("6379")
        (tmp_root / "session_latest").symlink_to(tmp_root / SESSION)
        (logs / "raylet.out").write_text("raylet started\n")
        port = free_port()
        env = {
            **os.environ,
            **emulator.env(bucket),
            "RAY_CLUSTER_NAME": "bench",
            "RAY_TMP_ROOT": str(tmp_root),
            "EVENTS_PORT": str(port),
            "EVENTS_HOST": "127.0.0.1",
            "LOG_LEVEL": "WARNING",
            "RAY_COLLECTOR_SHUTDOWN_DEADLINE": "300s",
        }
        proc = subprocess.Popen([sys.executable, "-m", "runtime.collector.main"], env=env, cwd=REPO)
        try:
            wait_for_port(port, timeout=30, proc=proc)
            time.sleep(2)
            base_rss = status(proc.pid, "VmRSS")
            store = emulator.make_store(bucket)
            layout = KeyLayout("")
            cluster = ClusterRef(namespace="default", name="bench")

            # 1. a large log
            big = logs / "worker-big-01000000-1.out"
            block = (b"x" * 199 + b"\n") * (MIB // 200) + b"\n" * (MIB % 200)
            with open(big, "wb") as fh:
                for _ in range(size // MIB):
                    fh.write(block)
            written = time.monotonic()
            key = layout.log_key(cluster, SESSION, NODE, big.name)
            while not (store.exists(key) and store.stat(key).size == size):
                time.sleep(1)
                if time.monotonic() - written > 1800:
                    print("the large log was not shipped within 30 minutes")
                    return 1
            shipped = time.monotonic() - written
            peak = status(proc.pid, "VmHWM")

            # 2. one new line in a log that was already shipped (the debounced path)
            line_log = logs / "raylet.out"
            marker = f"line {uuid.uuid4().hex}\n".encode()
            with open(line_log, "ab") as fh:
                fh.write(marker)
            appended = time.monotonic()
            line_key = layout.log_key(cluster, SESSION, NODE, line_log.name)
            while not (store.exists(line_key) and marker in store.get_bytes(line_key)):
                time.sleep(0.5)
                if time.monotonic() - appended > 120:
                    break
            line_latency = time.monotonic() - appended

            print(f"backend                         {args.backend}")
            print(f"log size                        {size / MIB:,.0f} MiB")
            print(f"shipped in                      {shipped:,.1f} s")
            print(f"collector RSS idle / peak       {base_rss / MIB:.0f} / {peak / MIB:.0f} MiB")
            print(f"new line in storage after       {line_latency:.1f} s (upload interval 30 s)")
            store.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=300)
            emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The collector under the attacks of #14 (items 2, 3, 8), measured on a real process.

    .venv/bin/python bench/collector_hostile.py [--body-mib 200]

Starts ``collector`` (worker role, log collector off, storage ``local``,
``--max-request-mb=1``) and reports:

* RSS before and after a ``Content-Length: -1`` POST followed by ``--body-mib`` MiB
  (the old receiver read it all: 36 -> 242 MB), and the answer;
* descriptors after 21,000 made-up sessions in three POSTs, with the default
  ``--max-targets-per-batch`` (413) and raised to 7,000 (accepted, LRU-capped
  descriptors), and the answer to a legitimate event afterwards;
* threads while 200 POST bodies stall midway, and how fast ``/healthz`` answers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.emulators.base import free_port, wait_for_port  # noqa: E402

logger = logging.getLogger("bench.collector_hostile")
SESSION = "session_2026-11-22_01-58-29_266863_14332"


def status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return 0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def event(session: str) -> dict[str, str]:
    return {"eventId": "x", "eventType": "NODE_DEFINITION_EVENT", "timestamp": "2026-11-22T01:58:33Z",
            "sessionName": session}  # fmt: skip


def head(length: str) -> bytes:
    return f"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()


def answer(sock: socket.socket) -> str:
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        data += sock.recv(65536)
    except OSError as exc:
        return f"<{type(exc).__name__}>"
    first, _, rest = data.partition(b"\r\n")
    body = rest.partition(b"\r\n\r\n")[2]
    return f"{first.decode(errors='replace')} {body.decode(errors='replace')}".strip()


def post(port: int, body: bytes) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(head(str(len(body))) + body)
        return answer(sock)


@contextmanager
def collector(tmp: Path, *flags: str) -> Iterator[tuple[int, int]]:
    port = free_port()
    root = tmp / f"ray-{port}"
    root.mkdir()
    env = {**os.environ, "RAY_CLUSTER_NAME": "bench", "STORAGE_BACKEND": "local", "STORAGE_CREATE_BUCKET": "true",
           "LOCAL_STORAGE_DIR": str(tmp / f"bucket-{port}"), "RAY_TMP_ROOT": str(root),
           "ENABLE_LOG_COLLECTOR": "false", "EVENTS_HOST": "127.0.0.1", "EVENTS_PORT": str(port)}  # fmt: skip
    with open(tmp / f"collector-{port}.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.collector.main", *flags], env=env, cwd=REPO, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for_port(port, timeout=30, proc=proc)
        yield proc.pid, port
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def negative_length(pid: int, port: int, body_mib: int) -> None:
    before = status_field(pid, "VmRSS")
    sent = 0
    block = b" " * (1 << 20)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head("-1") + b"[")
        try:
            for _ in range(body_mib):
                sock.sendall(block)
                sent += len(block)
        except OSError as exc:
            logger.info("  the collector closed the connection after %d MiB sent: %s", sent >> 20, exc)
        reply = answer(sock)
    time.sleep(0.5)
    logger.info("Content-Length: -1 with a %d MiB body (--max-request-mb=1): %s", body_mib, reply)
    logger.info("  RSS %.1f MB before, %.1f MB after, peak (VmHWM) %.1f MB",
                before / 1024, status_field(pid, "VmRSS") / 1024, status_field(pid, "VmHWM") / 1024)  # fmt: skip


def sessions_attack(pid: int, port: int, label: str) -> None:
    before = fds(pid)
    answers = [post(port, json.dumps([event(f"session_attack_{i:06d}") for i in range(n, n + 7000)]).encode())
               for n in range(0, 21000, 7000)]  # fmt: skip
    legit = post(port, json.dumps([event(SESSION)]).encode())
    logger.info("21,000 sessions in three POSTs (%s): %s", label, " | ".join(a[:90] for a in answers))
    logger.info("  descriptors %d before, %d after; then a legitimate event: %s", before, fds(pid), legit)


def stalled_bodies(pid: int, port: int) -> None:
    before = status_field(pid, "Threads")
    socks = []
    for _ in range(200):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(head("1000") + b"[" + b" " * 10)
        socks.append(sock)
    time.sleep(0.5)
    during = status_field(pid, "Threads")
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        health = answer(sock)
    latency = time.monotonic() - started
    for sock in socks:
        sock.close()
    logger.info("200 stalled POST bodies: collector threads %d before, %d during; /healthz %s in %.3f s",
                before, during, health.split(" {")[0], latency)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--body-mib", type=int, default=200)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        with collector(tmp, "--max-request-mb=1") as (pid, port):
            negative_length(pid, port, args.body_mib)
            stalled_bodies(pid, port)
        with collector(tmp, "--max-request-mb=64") as (pid, port):
            sessions_attack(pid, port, "default --max-targets-per-batch=1000")
        with collector(tmp, "--max-request-mb=64", "--max-targets-per-batch=7000") as (pid, port):
            sessions_attack(pid, port, "--max-targets-per-batch=7000, --max-open-spool-files=256")


if __name__ == "__main__":
    main()

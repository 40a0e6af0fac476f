"""The collector's SIGTERM shutdown while storage hangs: it ends within its deadline,
the spool stays on disk, and the next collector on the same disk uploads it.

Found by the two-node storage-outage scenario (#21 scenario 4): with storage
unreachable (packets dropped, not refused), the head's final marker write ran its
whole retry budget and an event upload thread its read timeout, and the process
then waited for a log upload thread: 50 s for a 10 s deadline.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import orjson
import requests

from runtime.collector.app import Collector, ShutdownReport
from runtime.collector.config import CollectorConfig
from runtime.storage.config import StorageConfig
from runtime.storage.layout import is_event_file_name
from runtime.storage.local import LocalStore
from tests.unit.collector.hostile_support import connect, event, post_head, read_answer
from tests.unit.collector.log_support import CLUSTER, NODE_A, SESSION_A, FlakyStore, make_session, point_latest
from tests.unit.collector.samples import accepted_batches

DEADLINE = 3.0


def worker_config(tmp_path: Path, ray_root: Path, deadline: float) -> CollectorConfig:
    """A worker's collector (no logs, no snapshots) on this test's bucket and spool."""
    return replace(config(tmp_path, ray_root), role="Worker", enable_log_collector=False, shutdown_deadline=deadline)


def config(tmp_path: Path, ray_root: Path) -> CollectorConfig:
    return CollectorConfig(
        role="Head",  # the head also writes the marker and the final snapshots
        cluster=CLUSTER,
        storage=StorageConfig(backend="local", local_dir=str(tmp_path / "bucket")),
        events_host="127.0.0.1",
        events_port=0,
        ray_tmp_root=ray_root,
        event_data_dir=tmp_path / "spool",
        dashboard_address="http://127.0.0.1:9",  # nothing listens: snapshots fail fast
        log_upload_interval=0.2,
        shutdown_deadline=DEADLINE,
    )


def spooled(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "spool").rglob("*.jsonl*") if p.is_file() and "quarantine" not in p.parts]


def run_in_thread(collector: Collector, stop: threading.Event) -> tuple[threading.Thread, list[ShutdownReport]]:
    reports: list[ShutdownReport] = []
    thread = threading.Thread(target=lambda: reports.append(collector.run(stop)), daemon=True)
    thread.start()
    assert collector.started.wait(30), "the collector did not start"
    return thread, reports


def test_sigterm_with_storage_hanging_ends_within_the_deadline_and_keeps_the_spool(tmp_path: Path) -> None:
    ray_root = tmp_path / "ray"
    ray_root.mkdir()
    (make_session(ray_root, SESSION_A, NODE_A) / "logs" / "raylet.out").write_bytes(b"raylet says hi\n")
    point_latest(ray_root, SESSION_A)
    (tmp_path / "bucket").mkdir()
    storage_back = threading.Event()
    hanging = FlakyStore(tmp_path / "bucket", gate=storage_back)  # every upload blocks until storage is back
    valve = threading.Timer(60.0, storage_back.set)  # bounds the test if shutdown never returns
    valve.start()
    try:
        collector = Collector(config(tmp_path, ray_root), hanging)
        stop = threading.Event()
        thread, reports = run_in_thread(collector, stop)
        url = f"http://127.0.0.1:{collector.bound_port}/v1/events"
        batch = next(iter(accepted_batches()))
        answer = requests.post(url, data=batch, headers={"Content-Type": "application/json"}, timeout=10)
        assert answer.status_code == 200, answer.text
        time.sleep(1.0)  # the log shipper's and the snapshot thread's first uploads are blocked by now

        sent = time.monotonic()
        stop.set()  # what SIGTERM does
        thread.join(DEADLINE + 5)
        took = time.monotonic() - sent
        assert not thread.is_alive() and not storage_back.is_set(), "shutdown waited for storage"
        assert took <= DEADLINE + 1.0, took  # the listener's last poll after the deadline
        [report] = reports
        assert not report.events_uploaded and not report.logs_shipped
        assert spooled(tmp_path), "the acknowledged batch left the spool without being stored"
    finally:
        valve.cancel()
        storage_back.set()
    # The parts the first collector left blocked go on now that storage is back (a real
    # process has exited by then): let them end before a second one works on the spool.
    settled = time.monotonic() + 15
    while time.monotonic() < settled and any(t.name.startswith("shutdown") for t in threading.enumerate()):
        time.sleep(0.05)

    # The next collector on the same disk, storage back: the batch is uploaded.
    restarted = Collector(config(tmp_path, ray_root), LocalStore(tmp_path / "bucket"))
    stop = threading.Event()
    thread, reports = run_in_thread(restarted, stop)
    deadline = time.monotonic() + 30
    while spooled(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    thread.join(DEADLINE + 5)
    assert reports and reports[0].events_uploaded, reports
    assert not spooled(tmp_path)
    stored = [p for p in (tmp_path / "bucket").rglob("*") if p.is_file() and is_event_file_name(p.name)]
    assert len(stored) == 1 and stored[0].read_bytes().count(b"\n") == len(orjson.loads(batch))


def run_exit(body: str) -> subprocess.CompletedProcess[str]:
    script = (
        "import concurrent.futures, logging, sys, threading, time\n"
        "from runtime.collector.main import exit_leaving_blocked_threads\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO)\n"
        "print('shipped', flush=False)\n" + body
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)


def test_exit_leaves_an_upload_blocked_on_storage_behind() -> None:
    """As the log shipper does: a daemon thread submits an upload to a thread pool (its
    worker is a daemon too, yet the interpreter joins it at exit); the upload hangs."""
    started = time.monotonic()
    done = run_exit(
        "pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix='log-upload')\n"
        "submitter = threading.Thread(target=pool.submit, args=(threading.Event().wait,), daemon=True)\n"
        "submitter.start(); submitter.join(); pool.shutdown(wait=False, cancel_futures=True)\n"
        "sys.exit(exit_leaving_blocked_threads(0, work_left=True))\n"
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30
    assert done.stdout == "shipped\n", "stdout not flushed"
    assert "exiting now, leaving 1 thread(s) behind: ['log-upload_0']" in done.stderr, done.stderr


def test_exit_leaves_a_non_daemon_thread_behind() -> None:
    done = run_exit(
        "threading.Thread(target=threading.Event().wait, name='shutdown_0').start()\n"
        "sys.exit(exit_leaving_blocked_threads(4, work_left=False))\n"
    )
    assert done.returncode == 4 and "['shutdown_0']" in done.stderr, done.stderr


def test_exit_returns_the_code_when_all_is_done() -> None:
    done = run_exit("sys.exit(exit_leaving_blocked_threads(3, work_left=False))\n")
    assert done.returncode == 3 and done.stdout == "shipped\n" and done.stderr == "", done.stderr


def _worker_collector(tmp_path: Path) -> Collector:
    """A worker's collector (no logs, no snapshots): only the event path runs."""
    ray_root = tmp_path / "ray"
    ray_root.mkdir()
    (ray_root / "raylet_node_id").write_text(NODE_A)
    (tmp_path / "bucket").mkdir()
    # The in-flight wait is then min(2, 5/4) = 1.25 s.
    cfg = worker_config(tmp_path, ray_root, deadline=5.0)
    return Collector(cfg, LocalStore(tmp_path / "bucket"))


def _held_drain(collector: Collector) -> tuple[threading.Event, threading.Event]:
    """Hold the final upload (as slow storage does) until ``release`` is set; returns
    (drain started, release)."""
    started, release = threading.Event(), threading.Event()
    original = collector.uploader.drain

    def held(deadline: float) -> bool:
        started.set()
        release.wait(5)
        return original(deadline)

    collector.uploader.drain = held  # type: ignore[method-assign]
    return started, release


def test_a_body_completing_after_the_final_rotation_is_refused_not_acknowledged(tmp_path: Path) -> None:
    """Headers came before SIGTERM, the rest of the body after the spool's final
    rotation: a 200 would name a file this shutdown never uploads, so 503 (Ray retries)."""
    collector = _worker_collector(tmp_path)
    drain_started, release = _held_drain(collector)
    stop = threading.Event()
    thread, reports = run_in_thread(collector, stop)
    body = orjson.dumps([event()])
    with connect(collector.bound_port) as sock:
        sock.sendall(post_head(str(len(body))) + body[:10])  # admitted: not draining yet
        time.sleep(0.3)
        stop.set()  # SIGTERM
        assert drain_started.wait(10), "the final upload never started"
        sock.sendall(body[10:])
        answer = read_answer(sock)
    release.set()
    thread.join(15)
    assert answer is not None
    assert answer.status == 503, (answer.status, answer.body)
    assert answer.headers.get("retry-after") and answer.headers["content-type"] == "application/json"
    assert "shutting down" in str(answer.json()["error"])
    assert answer.headers.get("connection") == "close"
    assert reports and reports[0].events_uploaded
    assert not spooled(tmp_path), "a refused batch was written anyway"


def test_a_body_completing_while_the_shutdown_waits_is_acknowledged_and_uploaded(tmp_path: Path) -> None:
    """A request counts as in flight from its headers, not from its body: the
    shutdown waits for it, and its batch goes out with the final upload."""
    collector = _worker_collector(tmp_path)
    stop = threading.Event()
    thread, reports = run_in_thread(collector, stop)
    body = orjson.dumps([event()])
    with connect(collector.bound_port) as sock:
        sock.sendall(post_head(str(len(body))) + body[:10])
        time.sleep(0.3)
        stop.set()  # SIGTERM
        time.sleep(0.3)  # well inside the shutdown's wait for in-flight requests
        sock.sendall(body[10:])
        answer = read_answer(sock)
    thread.join(15)
    assert answer is not None and answer.status == 200, answer
    assert reports and reports[0].events_uploaded
    assert not spooled(tmp_path), "acknowledged during the shutdown but left on local disk"
    stored = [p for p in (tmp_path / "bucket").rglob("*") if p.is_file() and is_event_file_name(p.name)]
    assert len(stored) == 1

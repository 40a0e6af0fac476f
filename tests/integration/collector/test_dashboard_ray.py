"""Node identity and dashboard snapshots against a real Ray 2.60 head.

One head per module, started with ``ray start --head --block`` in a unique short
temp dir on free ports. It is stopped by sending SIGTERM to that one ``ray start``
process (which shuts down everything it launched), then any leftover process whose
command line names our temp dir is killed by PID. ``ray stop --force`` is not used:
it kills every Ray process of the user, including other suites' clusters.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from runtime.collector.config import CollectorConfig
from runtime.collector.dashboard import DashboardClient
from runtime.collector.discovery import NodeIdentity
from runtime.collector.metrics import CollectorMetrics
from runtime.collector.session_files import node_id_from_session_dir, raylet_socket_alive, resolve_session_latest
from runtime.collector.snapshots import (
    CLUSTER_METADATA_URI,
    JOBS_URI,
    PLACEMENT_GROUPS_URI,
    TIMEZONE_URI,
    SnapshotRecorder,
)
from runtime.storage.config import StorageConfig
from runtime.storage.errors import ObjectNotFoundError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not importable in this environment"),
    pytest.mark.timeout(180),
]

CLUSTER = ClusterRef(namespace="ns", name="live")
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class RayHead:
    temp_dir: Path
    gcs_address: str
    dashboard_url: str
    node_ip: str
    session_dir: Path


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _ray_cli() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        pytest.skip("the ray CLI is not installed next to this interpreter")
    return found


def _processes_using(temp_dir: Path) -> list[int]:
    import psutil  # type: ignore[import-untyped]

    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(str(temp_dir) in arg for arg in proc.info["cmdline"] or ()):
                pids.append(proc.info["pid"])
    return [pid for pid in pids if pid != os.getpid()]


def _stop_head(proc: subprocess.Popen[bytes], temp_dir: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    for pid in _processes_using(temp_dir):  # only what our head started
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_until_ready(proc: subprocess.Popen[bytes], temp_dir: Path, dashboard_url: str) -> Path:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}")
        session = resolve_session_latest(temp_dir)
        ready = session is not None and raylet_socket_alive(session) and (temp_dir / "ray_current_cluster").exists()
        if session is not None and ready:
            with contextlib.suppress(requests.RequestException, ValueError, KeyError):
                body = requests.get(f"{dashboard_url}/api/v0/nodes?limit=10000", timeout=5).json()
                if any(n["state"] == "ALIVE" for n in body["data"]["result"]["result"]):
                    return session
        time.sleep(0.5)
    raise RuntimeError(f"Ray head not ready within {START_TIMEOUT:.0f} s")


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    temp_dir = Path(f"/tmp/rh-{secrets.token_hex(3)}")  # short: unix socket paths are limited
    temp_dir.mkdir()
    gcs, dash, agent_http, agent_grpc, metrics, client, runtime_env = _free_ports(7)
    log = temp_dir.with_suffix(".log")
    cmd = [
        _ray_cli(), "start", "--head", "--block", f"--port={gcs}", f"--dashboard-port={dash}",
        "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=1", f"--temp-dir={temp_dir}",
        "--disable-usage-stats", f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
        f"--ray-client-server-port={client}", f"--runtime-env-agent-port={runtime_env}",
    ]  # fmt: skip
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        dashboard_url = f"http://127.0.0.1:{dash}"
        try:
            session = _wait_until_ready(proc, temp_dir, dashboard_url)
        except RuntimeError as exc:
            pytest.fail(f"{exc}\n{log.read_text(errors='replace')[-3000:]}")
        # Ray picks the host's address even on a loopback-only setup; it writes the
        # GCS address (node IP:port) here, independently of the code under test.
        gcs_address = (temp_dir / "ray_current_cluster").read_text().strip()
        yield RayHead(temp_dir, gcs_address, dashboard_url, gcs_address.rsplit(":", 1)[0], session)
    finally:
        _stop_head(proc, temp_dir)
        log.unlink(missing_ok=True)


def _config(tmp_path: Path, tmp_root: Path, **overrides: object) -> CollectorConfig:
    values: dict[str, object] = {
        "role": "Head",
        "cluster": CLUSTER,
        "storage": StorageConfig(backend="local", local_dir=str(tmp_path / "bucket")),
        "ray_tmp_root": tmp_root,
        "poll_interval": 30.0,
    }
    values.update(overrides)
    return CollectorConfig(**values)  # type: ignore[arg-type]


def test_node_id_from_session_dir_and_nodes_api_agree(ray_head: RayHead, tmp_path: Path) -> None:
    from_dir = NodeIdentity(_config(tmp_path, ray_head.temp_dir), None)
    assert from_dir.refresh() is True
    node = from_dir.node_id()
    assert node is not None and len(node) == 56
    assert node == node_id_from_session_dir(ray_head.session_dir)
    assert from_dir.session_name() == ray_head.session_dir.name
    assert (
        from_dir.session_name()
        == requests.get(f"{ray_head.dashboard_url}/api/version", timeout=10).json()["session_name"]
    )

    # An empty temp root: only the dashboard can answer.
    empty = tmp_path / "empty-root"
    empty.mkdir()
    port = ray_head.dashboard_url.rsplit(":", 1)[1]
    config = _config(tmp_path, empty, pod_ip=ray_head.node_ip, fq_ray_ip=f"127.0.0.1:{port}")
    via_api = NodeIdentity(config, DashboardClient.for_head(config))
    via_api.refresh()
    assert via_api.node_id() == node
    assert via_api.session_name() is None

    # POD_IP=127.0.0.1 matches only if Ray reports loopback as the node IP (it
    # reports the host address here), and then the session dir stands in.
    loopback = _config(tmp_path, ray_head.temp_dir, pod_ip="127.0.0.1", fq_ray_ip=f"127.0.0.1:{port}")
    by_loopback = NodeIdentity(loopback, DashboardClient.for_head(loopback))
    by_loopback.refresh()
    assert by_loopback.node_id() == node


def _run_driver(ray_head: RayHead) -> None:
    """A short driver job that creates and removes a placement group."""
    script = (
        "import ray\n"
        f"ray.init(address={ray_head.gcs_address!r}, log_to_driver=False)\n"
        "pg = ray.util.placement_group([{'CPU': 1}], name='hs-it-pg')\n"
        "ray.get(pg.ready(), timeout=60)\n"
        "ray.util.remove_placement_group(pg)\n"
    )
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([sys.executable, "-c", script], check=True, timeout=90, env=env, capture_output=True)


def test_snapshots_from_the_live_dashboard(ray_head: RayHead, tmp_path: Path) -> None:
    _run_driver(ray_head)
    (tmp_path / "bucket").mkdir()
    store = LocalStore(tmp_path / "bucket")
    layout = KeyLayout("")
    config = _config(tmp_path, ray_head.temp_dir, dashboard_address=ray_head.dashboard_url)
    identity = NodeIdentity(config, None)
    identity.refresh()
    session = ray_head.session_dir.name
    metrics = CollectorMetrics()
    recorder = SnapshotRecorder(
        config=config,
        store=store,
        layout=layout,
        identity=identity,
        dashboard=DashboardClient.for_snapshots(config),
        metrics=metrics,
    )
    recorder.start()

    def stored(uri: str) -> bytes | None:
        try:
            return store.get_bytes(layout.endpoint_key(CLUSTER, session, uri))
        except ObjectNotFoundError:
            return None

    deadline = time.monotonic() + 30
    wanted = (CLUSTER_METADATA_URI, TIMEZONE_URI, JOBS_URI, PLACEMENT_GROUPS_URI)
    while any(stored(uri) is None for uri in wanted) and time.monotonic() < deadline:
        time.sleep(0.2)
    recorder.stop(time.monotonic() + 10)

    assert store.get_bytes(layout.marker_key(CLUSTER, session)) == b""
    assert json.loads(stored(CLUSTER_METADATA_URI) or b"")["data"]["rayVersion"] == "2.60.0"
    assert "offset" in json.loads(stored(TIMEZONE_URI) or b"")
    job_list = json.loads(stored(JOBS_URI) or b"")
    assert any(job["type"] == "DRIVER" and job["status"] == "SUCCEEDED" for job in job_list), job_list
    groups = json.loads(stored(PLACEMENT_GROUPS_URI) or b"")["data"]["result"]["result"]
    assert [g["name"] for g in groups] == ["hs-it-pg"]
    # The key keeps the query string, exactly as the history server will look it up.
    assert layout.endpoint_key(CLUSTER, session, PLACEMENT_GROUPS_URI).endswith(
        "/fetched_endpoints/restful__api__v0__placement_groups?detail=1&limit=10000"
    )
    # Each finished driver job's datasets were asked for; without pandas the
    # dashboard answers 503, which is not a snapshot.
    driver_jobs = [job["job_id"] for job in job_list if job["job_id"]]
    sample = metrics.registry.get_sample_value
    tried = sum(sample("ray_history_collector_snapshots_total", {"endpoint": "datasets", "outcome": o}) or 0
                for o in ("stored", "empty", "error"))  # fmt: skip
    assert tried >= len(driver_jobs)
    if importlib.util.find_spec("pandas") is None:
        assert all(stored(f"/api/data/datasets/{job}") is None for job in driver_jobs)

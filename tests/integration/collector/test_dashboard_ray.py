"""Node identity and dashboard snapshots against a real Ray 2.60 head.

One head per module, from the shared launcher (``tests/integration/ray_harness.py``):
``ray start --head --block`` on loopback, in a unique short temp dir on free ports,
stopped by signalling its own process group only (never ``ray stop``, which would
stop other suites' clusters too).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runtime.collector.config import CollectorConfig
from runtime.collector.dashboard import DashboardClient
from runtime.collector.discovery import NodeIdentity
from runtime.collector.metrics import CollectorMetrics
from runtime.collector.session_files import node_id_from_session_dir, raylet_socket_alive, resolve_session_latest
from runtime.collector.snapshot_endpoints import CLUSTER_METADATA_URI, JOBS_URI, PLACEMENT_GROUPS_URI, TIMEZONE_URI
from runtime.collector.snapshots import SnapshotRecorder
from runtime.storage.config import StorageConfig
from runtime.storage.errors import ObjectNotFoundError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore
from tests.integration.emulators.base import free_port
from tests.integration.ray_harness import RayHead, ray_available, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
    pytest.mark.timeout(180),
]

CLUSTER = ClusterRef(namespace="ns", name="live")
START_TIMEOUT = 60.0
#: A documentation address (RFC 5737): no Ray node ever reports it.
UNMATCHED_IP = "192.0.2.1"


def _node_ready(head: RayHead) -> bool:
    """The raylet answers on its socket, Ray wrote ``ray_current_cluster``, and the
    dashboard lists the node as ALIVE (the dashboard alone comes up earlier)."""
    session = resolve_session_latest(head.tmp_root)
    if session is None or not raylet_socket_alive(session) or not (head.tmp_root / "ray_current_cluster").exists():
        return False
    with contextlib.suppress(requests.RequestException, ValueError, KeyError):
        body = requests.get(f"{head.dashboard_url}/api/v0/nodes?limit=10000", timeout=5).json()
        return any(n["state"] == "ALIVE" for n in body["data"]["result"]["result"])
    return False


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    # Ray exports its events there; nothing listens, Ray just retries.
    head = RayHead(export_url=f"http://127.0.0.1:{free_port()}/v1/events")
    try:
        try:
            head.start()
            wait_until(lambda: _node_ready(head), START_TIMEOUT, "the Ray head node to be ALIVE")
        except (RuntimeError, TimeoutError) as exc:
            pytest.fail(f"{exc}\n{head.log_path.read_text(errors='replace')[-3000:]}")
        yield head
    finally:
        head.cleanup()
        head.log_path.unlink(missing_ok=True)


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
    from_dir = NodeIdentity(_config(tmp_path, ray_head.tmp_root), None)
    assert from_dir.refresh() is True
    node = from_dir.node_id()
    assert node is not None and len(node) == 56
    assert node == node_id_from_session_dir(ray_head.session_dir())
    assert from_dir.session_name() == ray_head.session_dir().name
    assert (
        from_dir.session_name()
        == requests.get(f"{ray_head.dashboard_url}/api/version", timeout=10).json()["session_name"]
    )

    # An empty temp root: only the dashboard can answer.
    empty = tmp_path / "empty-root"
    empty.mkdir()
    port = ray_head.dashboard_port
    config = _config(tmp_path, empty, pod_ip=ray_head.node_ip(), fq_ray_ip=f"127.0.0.1:{port}")
    via_api = NodeIdentity(config, DashboardClient.for_head(config))
    via_api.refresh()
    assert via_api.node_id() == node
    assert via_api.session_name() is None

    # A POD_IP the dashboard lists no node for: the session dir stands in.
    unmatched = _config(tmp_path, ray_head.tmp_root, pod_ip=UNMATCHED_IP, fq_ray_ip=f"127.0.0.1:{port}")
    by_session_dir = NodeIdentity(unmatched, DashboardClient.for_head(unmatched))
    by_session_dir.refresh()
    assert by_session_dir.node_id() == node


def _run_driver(ray_head: RayHead) -> None:
    """A short driver job that creates and removes a placement group."""
    script = (
        "import ray\n"
        f"ray.init(address={ray_head.gcs_address()!r}, log_to_driver=False)\n"
        "pg = ray.util.placement_group([{'CPU': 1}], name='hs-it-pg')\n"
        "ray.get(pg.ready(), timeout=60)\n"
        "ray.util.remove_placement_group(pg)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=90, env=ray_head.env, capture_output=True)


def test_snapshots_from_the_live_dashboard(ray_head: RayHead, tmp_path: Path) -> None:
    _run_driver(ray_head)
    (tmp_path / "bucket").mkdir()
    store = LocalStore(tmp_path / "bucket")
    layout = KeyLayout("")
    config = _config(tmp_path, ray_head.tmp_root, dashboard_address=ray_head.dashboard_url)
    identity = NodeIdentity(config, None)
    identity.refresh()
    session = ray_head.session_dir().name
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

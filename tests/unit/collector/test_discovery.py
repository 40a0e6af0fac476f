"""Node ID / session discovery and the dashboard client.

The dashboard is a real HTTP server on loopback serving canned bodies from
``ray-samples/api`` (a test double for exact semantics: statuses, headers, auth).
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.collector.config import CollectorConfig
from runtime.collector.dashboard import (
    AUTH_HEADER,
    DashboardAuthError,
    DashboardClient,
    DashboardUnavailable,
    base_url_from_fq_ip,
)
from runtime.collector.discovery import IdentityChange, NodeIdentity, match_node
from runtime.storage.config import StorageConfig
from runtime.storage.layout import ClusterRef
from tests.support.fake_dashboard import SAMPLES, FakeDashboard

SESSION_A = "session_2026-11-22_01-45-25_333080_9264"
SESSION_B = "session_2026-11-22_01-58-29_266863_14332"
FILE_NODE = "11" * 28
DASH_NODE = "22" * 28
DIR_NODE = "33" * 28
OTHER_NODE = "44" * 28
POD_IP = "10.1.2.3"
NODES = "/api/v0/nodes?limit=10000"


@pytest.fixture
def dashboard() -> Iterator[FakeDashboard]:
    with FakeDashboard.running() as fake:
        yield fake


# ------------------------------------------------------------- Ray temp root
def make_session(root: Path, name: str, node: str | None) -> Path:
    session = root / name
    (session / "logs").mkdir(parents=True, exist_ok=True)
    (session / "sockets").mkdir(exist_ok=True)
    if node is not None:
        (session / f"gcs_server_port_{node}").write_text("6379\n")
    return session


def point_latest(root: Path, name: str) -> None:
    tmp = root / "session_latest.tmp"
    tmp.symlink_to(name)  # relative, as Ray does
    os.replace(tmp, root / "session_latest")


@pytest.fixture
def ray_root(tmp_path: Path) -> Path:
    root = tmp_path / "ray"
    root.mkdir()
    make_session(root, SESSION_A, DIR_NODE)
    point_latest(root, SESSION_A)
    return root


def make_config(tmp_path: Path, ray_root: Path, **overrides: object) -> CollectorConfig:
    values: dict[str, object] = {
        "role": "Head",
        "cluster": ClusterRef(namespace="ns", name="cluster"),
        "storage": StorageConfig(backend="local", local_dir=str(tmp_path / "bucket")),
        "ray_tmp_root": ray_root,
        "pod_ip": POD_IP,
        "fq_ray_ip": "127.0.0.1",
        "poll_interval": 30.0,
    }
    values.update(overrides)
    return CollectorConfig(**values)  # type: ignore[arg-type]


def nodes_body(*entries: dict[str, object]) -> dict[str, object]:
    """An /api/v0/nodes answer shaped like the saved sample, with our entries."""
    sample: dict[str, Any] = json.loads((SAMPLES / "api_v0_nodes_detail.json").read_text())
    template = sample["data"]["result"]["result"][0]
    result = []
    for entry in entries:
        item = copy.deepcopy(template)
        item.update(entry)
        result.append(item)
    sample["data"]["result"]["result"] = result
    sample["data"]["result"]["total"] = len(result)
    return sample


def alive(node: str, ip: str = POD_IP) -> dict[str, object]:
    return {"node_id": node, "node_ip": ip, "state": "ALIVE"}


# --------------------------------------------------------------- match_node
def test_match_node_on_the_saved_sample() -> None:
    body = json.loads((SAMPLES / "api_v0_nodes_detail.json").read_text())
    assert match_node(body, "192.0.2.2") == "98f883cfe30ce800c7aac63e75e2794d48efac54650dde6e279e2c78"
    assert match_node(body, "192.0.2.99") is None


def test_match_node_skips_dead_foreign_and_empty_entries() -> None:
    body = nodes_body(
        {"node_id": OTHER_NODE, "node_ip": POD_IP, "state": "DEAD"},
        alive(FILE_NODE, ip="10.9.9.9"),
        {"node_id": "", "node_ip": POD_IP, "state": "ALIVE"},
        {"node_id": None, "node_ip": POD_IP, "state": "ALIVE"},
        alive(DASH_NODE),
        alive(DIR_NODE),
    )
    assert match_node(body, POD_IP) == DASH_NODE  # first match, like KubeRay's Go collector
    assert match_node(body, POD_IP, prefer=DIR_NODE) == DIR_NODE  # several raylets behind one IP


def test_match_node_normalises_base64_and_upper_case() -> None:
    raw = bytes.fromhex(DASH_NODE.replace("2", "a"))
    b64 = base64.b64encode(raw).decode()
    assert match_node(nodes_body(alive(b64)), POD_IP) == raw.hex()
    assert match_node(nodes_body(alive(DIR_NODE.upper())), POD_IP) == DIR_NODE


def test_match_node_rejects_wrong_shape() -> None:
    with pytest.raises(ValueError):
        match_node({"data": {"result": []}}, POD_IP)
    with pytest.raises(ValueError):
        match_node([], POD_IP)


# ---------------------------------------------------------- node ID order
def test_node_id_order_file_then_dashboard_then_session_dir(
    tmp_path: Path, ray_root: Path, dashboard: FakeDashboard
) -> None:
    (ray_root / "raylet_node_id").write_text(FILE_NODE + "\n")
    dashboard.reply(NODES, nodes_body(alive(DASH_NODE)))
    identity = NodeIdentity(make_config(tmp_path, ray_root), DashboardClient(dashboard.url), dashboard_recheck=0)
    assert identity.refresh() is True
    assert identity.node_id() == FILE_NODE
    assert dashboard.hits(NODES) == 0  # the file answers without a network call

    (ray_root / "raylet_node_id").unlink()
    identity.refresh()
    assert identity.node_id() == DASH_NODE

    dashboard.reply(NODES, nodes_body(alive(DASH_NODE, ip="10.9.9.9")))  # no longer ours
    identity.refresh()
    assert identity.node_id() == DIR_NODE
    assert identity.session_name() == SESSION_A
    assert identity.session_dir() == ray_root / SESSION_A


def test_without_pod_ip_the_dashboard_is_not_asked(tmp_path: Path, ray_root: Path, dashboard: FakeDashboard) -> None:
    dashboard.reply(NODES, nodes_body(alive(DASH_NODE)))
    identity = NodeIdentity(make_config(tmp_path, ray_root, pod_ip=None), DashboardClient(dashboard.url))
    identity.refresh()
    assert identity.node_id() == DIR_NODE
    assert dashboard.hits(NODES) == 0


def test_dashboard_down_falls_back_and_logs_once(
    tmp_path: Path, ray_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    identity = NodeIdentity(make_config(tmp_path, ray_root), DashboardClient(f"http://127.0.0.1:{port}"))
    caplog.set_level(logging.INFO, logger="runtime.collector.discovery")
    for _ in range(4):
        identity.refresh()
    assert identity.node_id() == DIR_NODE
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]


def test_unknown_stays_none_and_run_never_raises(tmp_path: Path) -> None:
    root = tmp_path / "ray"
    root.mkdir()
    identity = NodeIdentity(make_config(tmp_path, root, fq_ray_ip=None), None)
    identity.add_listener(lambda change: (_ for _ in ()).throw(RuntimeError("listener bug")))
    stop = threading.Event()
    runner = threading.Thread(target=identity.run, args=(stop, 0.02))
    runner.start()
    time.sleep(0.1)
    assert identity.node_id() is None
    assert identity.session_name() is None
    # Ray starts late: discovery picks it up on a later pass; a failing listener is contained.
    make_session(root, SESSION_A, DIR_NODE)
    point_latest(root, SESSION_A)
    deadline = time.monotonic() + 5
    while identity.node_id() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    runner.join(5)
    assert not runner.is_alive()
    assert identity.node_id() == DIR_NODE
    assert identity.session_name() == SESSION_A


def test_session_change_is_detected_and_listeners_called(tmp_path: Path, ray_root: Path) -> None:
    identity = NodeIdentity(make_config(tmp_path, ray_root, fq_ray_ip=None), None)
    changes: list[IdentityChange] = []
    identity.add_listener(changes.append)
    assert identity.refresh() is True
    assert changes == [IdentityChange(None, DIR_NODE, None, SESSION_A)]
    assert identity.refresh() is False
    assert len(changes) == 1

    make_session(ray_root, SESSION_B, OTHER_NODE)  # head container restarted
    point_latest(ray_root, SESSION_B)
    assert identity.refresh() is True
    assert changes[-1] == IdentityChange(DIR_NODE, OTHER_NODE, SESSION_A, SESSION_B)
    assert changes[-1].node_changed and changes[-1].session_changed
    assert identity.session_dir() == ray_root / SESSION_B

    (ray_root / "session_latest").unlink()  # between sessions: keep the last known
    assert identity.refresh() is False
    assert identity.session_name() == SESSION_B


@pytest.mark.parametrize("new_dir_names_node", [True, False])
def test_head_restart_with_the_dashboard_down_never_keeps_the_old_node(
    tmp_path: Path, ray_root: Path, dashboard: FakeDashboard, new_dir_names_node: bool
) -> None:
    """Found by the two-node head-restart scenario: the head's dashboard is down while
    Ray starts again, and the last dashboard answer (the previous session's node) was
    kept, so the new session's first logs were filed under the old node's ID."""
    dashboard.reply(NODES, nodes_body(alive(DASH_NODE)))
    identity = NodeIdentity(make_config(tmp_path, ray_root), DashboardClient(dashboard.url), dashboard_recheck=0)
    identity.refresh()
    assert identity.node_id() == DASH_NODE

    dashboard.reply(NODES, b"down", status=503)  # the new head's dashboard is not up yet
    make_session(ray_root, SESSION_B, OTHER_NODE if new_dir_names_node else None)
    point_latest(ray_root, SESSION_B)
    assert identity.refresh() is True
    assert identity.session_name() == SESSION_B
    # The new session's own directory, or unknown until it tells: never the old node.
    assert identity.node_id() == (OTHER_NODE if new_dir_names_node else None)
    identity.refresh()
    assert identity.node_id() == (OTHER_NODE if new_dir_names_node else None)

    dashboard.reply(NODES, nodes_body(alive(OTHER_NODE)))  # the dashboard is back
    identity.refresh()
    assert identity.node_id() == OTHER_NODE


def test_node_id_for_answers_only_for_the_session_discovery_knows(tmp_path: Path, ray_root: Path) -> None:
    identity = NodeIdentity(make_config(tmp_path, ray_root, fq_ray_ip=None), None)
    assert identity.node_id_for(SESSION_A) is None  # nothing discovered yet
    identity.refresh()
    assert identity.node_id_for(SESSION_A) == DIR_NODE
    make_session(ray_root, SESSION_B, OTHER_NODE)
    point_latest(ray_root, SESSION_B)
    assert identity.node_id_for(SESSION_B) is None  # discovery has not looked since
    identity.refresh()
    assert (identity.node_id_for(SESSION_A), identity.node_id_for(SESSION_B)) == (None, OTHER_NODE)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_known_id_rechecked_only_on_trigger(tmp_path: Path, ray_root: Path, dashboard: FakeDashboard) -> None:
    clock = FakeClock()
    dashboard.reply(NODES, nodes_body(alive(DASH_NODE)))
    identity = NodeIdentity(
        make_config(tmp_path, ray_root), DashboardClient(dashboard.url), dashboard_recheck=600, clock=clock
    )
    identity.refresh()
    assert identity.node_id() == DASH_NODE
    clock.now += 120  # past the start-up window
    identity.refresh()
    asked = dashboard.hits(NODES)
    dashboard.reply(NODES, nodes_body(alive(OTHER_NODE)))
    clock.now += 5
    identity.refresh()
    assert dashboard.hits(NODES) == asked  # no trigger, recheck not due: no request
    assert identity.node_id() == DASH_NODE

    # The raylet restarts: its socket is recreated (only its inode and mtime are
    # looked at, so a plain file stands in), which makes us ask again at once.
    (ray_root / SESSION_A / "sockets" / "raylet").write_bytes(b"")
    clock.now += 5
    assert identity.refresh() is True
    assert identity.node_id() == OTHER_NODE


# ----------------------------------------------------------- dashboard client
@pytest.mark.parametrize(
    ("fq_ip", "expected"),
    [
        ("raycluster-head-svc.default.svc.cluster.local", "http://raycluster-head-svc.default.svc.cluster.local:8265"),
        ("localhost", "http://localhost:8265"),
        ("10.0.0.5:9000", "http://10.0.0.5:9000"),
        ("http://head:8265", "http://head:8265"),
        ("https://head.example.com", "https://head.example.com"),
        ("http://head:8265/", "http://head:8265"),
        ("fd00::1", "http://[fd00::1]:8265"),
    ],
)
def test_base_url_from_fq_ip(fq_ip: str, expected: str) -> None:
    assert base_url_from_fq_ip(fq_ip, 8265) == expected


def test_for_head_uses_fq_ray_ip_and_port(tmp_path: Path, ray_root: Path) -> None:
    config = make_config(tmp_path, ray_root, fq_ray_ip="head-svc", dashboard_port=9999)
    client = DashboardClient.for_head(config)
    assert client is not None and client.base_url == "http://head-svc:9999"
    assert DashboardClient.for_head(make_config(tmp_path, ray_root, fq_ray_ip=None)) is None


def test_static_token_header(dashboard: FakeDashboard) -> None:
    dashboard.sample("/timezone", "timezone.json")
    client = DashboardClient(dashboard.url, auth_token="  s3cret \n", auth_mode="")  # trimmed, mode not needed
    resp = client.get("/timezone")
    assert resp.ok and resp.body == (SAMPLES / "timezone.json").read_bytes()
    assert resp.content_type == "application/json"
    assert dashboard.headers_of("/timezone")[0][AUTH_HEADER] == "Bearer s3cret"


def test_no_token_no_header(dashboard: FakeDashboard) -> None:
    dashboard.sample("/timezone", "timezone.json")
    DashboardClient(dashboard.url).get("/timezone")
    assert AUTH_HEADER not in dashboard.headers_of("/timezone")[0]


def test_k8s_token_file_is_reread_per_request(tmp_path: Path, dashboard: FakeDashboard) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    dashboard.sample("/timezone", "timezone.json")
    client = DashboardClient(dashboard.url, auth_token="static", k8s_token_auth=True, token_path=token)
    client.get("/timezone")
    token.write_text("rotated")
    client.get("/timezone")
    assert [h[AUTH_HEADER] for h in dashboard.headers_of("/timezone")] == ["Bearer first", "Bearer rotated"]
    token.write_text("")
    with pytest.raises(DashboardAuthError, match="empty"):
        client.get("/timezone")
    token.unlink()
    with pytest.raises(DashboardAuthError):
        client.get("/timezone")


def test_token_mode_without_token_fails_at_construction() -> None:
    with pytest.raises(DashboardAuthError, match="RAY_AUTH_MODE=token but no token"):
        DashboardClient("http://127.0.0.1:1", auth_mode="TOKEN")
    DashboardClient("http://127.0.0.1:1", auth_mode="token", auth_token="t")  # fine with a token


@pytest.mark.parametrize("status", [401, 403])
def test_401_and_403_are_auth_errors(dashboard: FakeDashboard, status: int) -> None:
    dashboard.reply("/api/v0/cluster_metadata", "Unauthorized", status)
    with pytest.raises(DashboardAuthError, match=str(status)):
        DashboardClient(dashboard.url).get("/api/v0/cluster_metadata")
    assert dashboard.hits("/api/v0/cluster_metadata") == 1  # no retry inside the client


def test_other_statuses_are_returned(dashboard: FakeDashboard) -> None:
    body = dashboard.sample("/api/serve/applications/", "api_serve_applications.txt", 501)
    resp = DashboardClient(dashboard.url).get("/api/serve/applications/")
    assert resp.status == 501 and not resp.ok and resp.body == body


def test_transport_failures_are_unavailable(dashboard: FakeDashboard) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DashboardUnavailable):
        DashboardClient(f"http://127.0.0.1:{port}").get("/timezone", timeout=2)
    dashboard.reply("/slow", "{}", delay=1.0)
    with pytest.raises(DashboardUnavailable):
        DashboardClient(dashboard.url).get("/slow", timeout=0.2)


def test_oversized_body_is_refused(dashboard: FakeDashboard) -> None:
    dashboard.reply("/big", b"x" * 5000)
    with pytest.raises(DashboardUnavailable, match="exceeds"):
        DashboardClient(dashboard.url, max_body=1000).get("/big")

"""``/api/cluster_status?format=1`` text: debug_state parsing and formatting."""

from __future__ import annotations

import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtime.server.index.reader import SessionIndex
from runtime.server.queries.cluster_status import (
    Failure,
    NodeDebugState,
    StatusInputs,
    cluster_status_text,
    demand_key,
    failures_from_node,
    format_memory,
    format_status,
    gather,
    parse_debug_state,
)
from tests.support.sample_session import SAMPLES
from tests.unit.server.queries.factory import Task, create_index, insert_actor, insert_tasks
from tests.unit.server.queries.live_fixture import live

NODE = "98f883cfe30ce800c7aac63e75e2794d48efac54650dde6e279e2c78"


@pytest.fixture(scope="module")
def debug_state() -> bytes:
    with tarfile.open(SAMPLES / "session-logs-sample.tar.gz") as tar:
        for member in tar.getmembers():
            if member.name.endswith("/logs/debug_state.txt"):
                fh = tar.extractfile(member)
                assert fh is not None
                return fh.read()
    raise AssertionError("no debug_state.txt in the sample")


def test_parse_session_a(debug_state: bytes) -> None:
    state = parse_debug_state(debug_state.decode())
    assert state == NodeDebugState(
        node_id=NODE,
        node_name="192.0.2.2",
        node_group="",
        is_idle=True,
        total={"CPU": 2.0, "object_store_memory": 7396079616.0, "memory": 17257519104.0},
        available={"object_store_memory": 7396079616.0, "memory": 17257519104.0, "CPU": 2.0},
    )


def test_parse_multi_instance_and_groups() -> None:
    text = (
        "Node ID: abc\nNode name: 10.0.0.9\ncluster_resource_scheduler state: \n"
        'Local id: 1 Local resources: {"total":{CPU: [10000, 10000, 10000, 10000], GPU: [10000, 10000, 5000, 0],'
        ' memory: [2e+13], node:10.0.0.9: [10000], accelerator_type:A100: [10000]}, "available": {CPU: [10000],'
        ' GPU: [0, 0, 0, 0], memory: [1e+13]}, "labels":{"ray.io/node-group":"gpu-workers"}} is_draining: 0'
        ' is_idle: 0 Cluster resources: node id: 2{"total":{CPU: 999}}\n'
    )
    state = parse_debug_state(text)
    assert state is not None
    assert state.node_group == "gpu-workers" and not state.is_idle
    assert state.total == {"CPU": 4.0, "GPU": 2.5, "memory": 2e9, "accelerator_type:A100": 1.0}
    assert state.used() == {"CPU": 3.0, "GPU": 2.5, "memory": 1e9, "accelerator_type:A100": 1.0}


def test_parse_without_scheduler_section() -> None:
    assert parse_debug_state("NodeManager:\nNode ID: x\n") is None


def test_session_a_text(debug_state: bytes) -> None:
    state = parse_debug_state(debug_state.decode())
    assert state is not None
    text = format_status(StatusInputs(nodes=[state], timestamp=datetime(2026, 11, 22, 1, 57, 7, 545101, tzinfo=UTC)))
    header = "======== Autoscaler status: 2026-11-22 01:57:07.545101 ========"
    assert text == "\n".join(
        [
            header,
            "Node status",
            "-" * len(header),
            "Active:",
            " (no active nodes)",
            "Idle:",
            " 1 default",
            "Pending:",
            " (unavailable in history server)",
            "Recent failures:",
            " (no failures)",
            "",
            "Resources",
            "-" * len(header),
            "Total Usage:",
            " 0.0/2.0 CPU",
            " 0B/16.07GiB memory",
            " 0B/6.89GiB object_store_memory",
            "",
            "From request_resources:",
            " (unavailable in history server)",
            "Pending Demands:",
            " (no resource demands)",
        ]
    )
    # The usage lines are what the live head printed for this node.
    live_text = live("api_cluster_status_format=1.json")["data"]["clusterStatus"]
    assert " 0.0/2.0 CPU\n 0B/16.07GiB memory\n 0B/6.89GiB object_store_memory\n" in live_text
    assert text.split("\n")[2] == live_text.split("\n")[2]  # same rule length as Ray


def test_failures_demands_and_no_nodes() -> None:
    inputs = StatusInputs(
        failures=[
            Failure("workers", "10.0.0.2", "", 100),
            Failure("ab" * 4, "", "i-123", 300),
        ],
        demands={demand_key({"GPU": 0.5, "CPU": 1}): 3, demand_key({"CPU": 2.0}): 1},
    )
    text = format_status(inputs)
    assert "======== Autoscaler status: time unknown ========\nNode status\n" + "-" * 49 in text
    assert "Active:\n (no active nodes)\nIdle:\n (no idle nodes)\n" in text
    assert (
        "Recent failures:\n abababab: NodeTerminated (instance_id: i-123)\n workers: NodeTerminated (ip: 10.0.0.2)\n"
        in text
    )
    assert "Total Usage:\n (no resources)\n" in text
    assert text.endswith(
        "Pending Demands:\n {'CPU': 1.0, 'GPU': 0.5}: 3+ pending tasks/actors\n {'CPU': 2.0}: 1+ pending tasks/actors"
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0B"), (1023, "1023B"), (1024, "1.00KiB"), (9.31 * 1024**3, "9.31GiB"), (3 * 1024**4, "3.00TiB")],
)
def test_format_memory(value: float, text: str) -> None:
    assert format_memory(value) == text


def test_failure_from_raw_node() -> None:
    raw: dict[str, Any] = {
        "node_id": "n1",
        "definition": {"nodeIpAddress": "10.0.0.5", "labels": {"ray.io/node-group": "cpu"}, "instanceId": ""},
        "transitions": [
            {"state": "ALIVE", "timestamp_ns": 1_000_000_000},
            {"state": "DEAD", "timestamp_ns": 2_000_000_000, "deathInfo": {"reason": "UNEXPECTED_TERMINATION"}},
        ],
    }
    assert failures_from_node(raw, "n1") == Failure("cpu", "10.0.0.5", "", 2000)
    raw["transitions"][1]["deathInfo"] = {"reason": "EXPECTED_TERMINATION"}
    assert failures_from_node(raw, "n1") is None
    bare = {
        "node_id": "n2",
        "definition": None,
        "transitions": [{"state": "DEAD", "timestamp": "2026-11-22T01:00:00.5Z"}],
    }
    assert failures_from_node(bare, "n2") == Failure("n2", "", "", 1795309200500)


def test_gather_over_an_index(live_index: SessionIndex, debug_state: bytes) -> None:
    asked: list[str] = []

    def read(node_id: str) -> bytes | None:
        asked.append(node_id)
        return debug_state if node_id == NODE else None

    inputs = gather(live_index, read, None)
    assert asked == [NODE]  # no objects listing in this index: every indexed node is tried
    assert len(inputs.nodes) == 1
    # The latest end of any task or actor in session A.
    ends = [t["end_time_ms"] for t in live("api_v0_tasks_detail_limit10000.json")["data"]["result"]["result"]]
    ends += [a.get("endTime") for a in live("logical_actors.json")["data"]["actors"].values()]
    latest = max(int(e) for e in ends if e)
    assert inputs.timestamp == datetime.fromtimestamp(latest / 1000, tz=UTC)
    text = cluster_status_text(live_index, read, None)
    assert cluster_status_text(live_index, lambda _: None, None) == text  # cached in the index


def test_pending_demands_from_tasks_and_actors(live_index: SessionIndex) -> None:
    inputs = gather(live_index, lambda _: None, datetime(2026, 1, 1, tzinfo=UTC))
    assert inputs.demands == {}  # nothing was pending when session A ended
    assert orjson.dumps(inputs.failures) == b"[]"


def test_pending_demands_grouped_by_shape(tmp_path: Path) -> None:
    conn = create_index(tmp_path / "i.sqlite")
    insert_tasks(
        conn,
        [
            Task(task_id="a", state="PENDING_NODE_ASSIGNMENT", required_resources={"CPU": 1.0}),
            Task(task_id="b", state="PENDING_ARGS_AVAIL", required_resources={"CPU": 1.0}),
            Task(task_id="c", state="RUNNING", required_resources={"CPU": 1.0}),
            Task(task_id="d", state="PENDING_NODE_ASSIGNMENT", required_resources={}),
            Task(task_id="e", state="PENDING_NODE_ASSIGNMENT", required_resources={"GPU": 0.5, "CPU": 1}),
        ],
    )
    insert_actor(conn, "x1", state="PENDING_CREATION", required_resources={"CPU": 1.0})
    insert_actor(conn, "x2", state="ALIVE", required_resources={"CPU": 1.0})
    conn.commit()
    conn.close()
    with SessionIndex(tmp_path / "i.sqlite") as index:
        inputs = gather(index, lambda _: None, None)
    assert inputs.demands == {(("CPU", 1.0),): 3, (("CPU", 1.0), ("GPU", 0.5)): 1}
    assert inputs.timestamp is None


@pytest.mark.parametrize(
    "detail",
    [
        '"total":{' + "a" * 200_000 + "}",  # one huge resource name without a value
        '"total":{' * 20_000,  # the map opened again and again, never closed
        '"total":{' + "CPU: [" * 30_000 + "}",  # values opened, never closed
        '"labels":{' + '"ray.io/node-group":"' * 20_000,
    ],
    ids=["long-name", "reopened-map", "open-values", "open-group"],
)
def test_a_crafted_debug_state_line_parses_in_linear_time(detail: str) -> None:
    """debug_state.txt is in the logs the Ray job writes: the old patterns backtracked
    (a 100 KB map took 113 s, holding the GIL of the whole worker)."""
    text = "Node ID: abc\ncluster_resource_scheduler state:\n" + detail + "\n"
    started = time.perf_counter()
    state = parse_debug_state(text)
    assert time.perf_counter() - started < 1.0
    assert state is not None and state.node_id == "abc"

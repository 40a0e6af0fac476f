"""The lineage summary (port of Ray's to_summary_by_lineage), case by case.

The whole-session equality with Ray's live answers is in test_live_answers.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from werkzeug.datastructures import MultiDict

from runtime.server.index.reader import SessionIndex
from runtime.server.queries.lineage import LineageTask, summarize_by_lineage
from runtime.server.queries.options import parse_task_query
from runtime.server.queries.summary import summarize_tasks
from tests.unit.server.queries.factory import Task, create_index, insert_tasks, refresh_counts

DRIVER = "f" * 40 + "02000000"


def task(
    task_id: str,
    *,
    name: str = "",
    func: str | None = None,
    type: str = "NORMAL_TASK",
    state: str = "FINISHED",
    actor: str = "",
    parent: str = DRIVER,
    ts: int | None = 10,
) -> LineageTask:
    return LineageTask(task_id, name, name if func is None else func, type, state, actor, parent, ts)


def names(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["name"] for n in nodes]


def test_nesting_under_parent_tasks() -> None:
    result = summarize_by_lineage(
        [task("p", name="parent"), task("c1", name="child", parent="p", ts=12), task("c2", name="child", parent="p")],
        {},
    ).to_json()
    (root,) = result["summary"]
    assert root["name"] == "parent" and root["state_counts"] == {"FINISHED": 3}
    (group,) = root["children"]
    assert group["type"] == "GROUP" and group["key"] == "child" and group["link"] is None
    assert group["timestamp"] == 10  # min of the children
    assert [c["key"] for c in group["children"]] == ["c2", "c1"]  # earlier first
    assert result["total_tasks"] == 3 and result["summary_by"] == "lineage"


def test_missing_parent_drops_the_subtree() -> None:
    result = summarize_by_lineage([task("a", name="a"), task("orphan", name="o", parent="gone")], {})
    assert names(result.summary) == ["a"]
    assert result.total_tasks == 2  # Ray still counts the orphan: it is only left out of the tree


def test_actor_tasks_sit_under_their_actor() -> None:
    actor = "ab" * 8
    tasks = [
        task("ffffffffffffffff" + actor, name="Counter.__init__", type="ACTOR_CREATION_TASK", actor=actor, ts=5),
        task("t1", name="Counter.incr", type="ACTOR_TASK", actor=actor, ts=6),
    ]
    result = summarize_by_lineage(tasks, {actor: ("", "Counter")})
    (node,) = result.summary
    assert node["key"] == f"actor:{actor}" and node["type"] == "ACTOR" and node["name"] == "Counter"
    assert node["link"] == {"type": "actor", "id": actor}
    assert [c["type"] for c in node["children"]] == ["ACTOR_CREATION_TASK", "ACTOR_TASK"]
    assert (result.total_actor_scheduled, result.total_actor_tasks) == (1, 1)


def test_actor_repr_name_wins_and_fallbacks() -> None:
    a, b, c = "aa" * 8, "bb" * 8, "cc" * 8
    tasks = [
        task("ffffffffffffffff" + a, name="x", func="Foo.__init__", type="ACTOR_CREATION_TASK", actor=a),
        task("ffffffffffffffff" + b, name="y", func="Bar.__init__", type="ACTOR_CREATION_TASK", actor=b),
        # no actor id on the creation task: derived from its id
        task("ffffffffffffffff" + c, name="z", func="", type="ACTOR_CREATION_TASK", actor=""),
    ]
    result = summarize_by_lineage(tasks, {a: ("Foo(1)", "Foo")})
    assert sorted(names(result.summary)) == ["Bar", "Foo(1)", "UnknownActor"]


def test_actor_without_creation_task_is_dropped() -> None:
    result = summarize_by_lineage([task("t1", name="A.m", type="ACTOR_TASK", actor="dd" * 8)], {})
    assert result.summary == [] and result.total_actor_tasks == 1


def test_sort_order() -> None:
    tasks = [
        task("a", name="done-early", ts=1),
        task("b", name="failed", state="FAILED", ts=5),
        task("c", name="pending", state="PENDING_NODE_ASSIGNMENT", ts=7),
        task("d", name="running", state="RUNNING", ts=9),
        task("e", name="no-time", ts=None),
        task("f", name="done-late", ts=3),
    ]
    assert names(summarize_by_lineage(tasks, {}).summary) == [
        "running",
        "pending",
        "failed",
        "done-early",
        "done-late",
        "no-time",
    ]


def test_attempts_count_on_one_node_and_nil_state() -> None:
    tasks = [
        task("a", name="flaky", state="FINISHED"),
        task("a", name="flaky", state="FAILED"),
        task("b", name="n", state=""),
    ]
    result = summarize_by_lineage(tasks, {})
    counts = {n["name"]: n["state_counts"] for n in result.summary}
    assert counts == {"flaky": {"FINISHED": 1, "FAILED": 1}, "n": {"NIL": 1}}


def test_deep_chains_do_not_overflow() -> None:
    depth = 3000
    tasks = [task("t0", name="level")] + [task(f"t{i}", name="level", parent=f"t{i - 1}") for i in range(1, depth)]
    result = summarize_by_lineage(tasks, {})
    node, levels = result.summary[0], 1
    while node["children"]:
        node, levels = node["children"][0], levels + 1
    assert levels == depth
    assert result.summary[0]["state_counts"] == {"FINISHED": depth}


def test_deep_lineage_serialises_in_a_worker_thread(tmp_path: Path) -> None:
    """Deeper than orjson's nesting limit, in a thread as under gunicorn."""
    depth = 2000
    conn = create_index(tmp_path / "i.sqlite")
    insert_tasks(
        conn,
        [
            Task(task_id=f"{i:08d}", name="level", parent_task_id=(f"{i - 1:08d}" if i else DRIVER))
            for i in range(depth)
        ],
    )
    refresh_counts(conn)
    conn.commit()
    conn.close()
    results: list[bytes] = []

    def run() -> None:
        with SessionIndex(tmp_path / "i.sqlite") as index:
            results.append(summarize_tasks(index, parse_task_query(MultiDict({"summary_by": "lineage"}), summary=True)))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    (body,) = results
    node, levels = json.loads(body)["data"]["result"]["result"]["node_id_to_summary"]["cluster"]["summary"][0], 1
    while node["children"]:
        node, levels = node["children"][0], levels + 1
    assert levels == depth

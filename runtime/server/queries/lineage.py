"""A port of Ray 2.60's ``TaskSummaries.to_summary_by_lineage`` (ray/util/state/common.py).

Pure: takes task attempts in Ray's list order (task id ascending, the newest
attempt first, as the GCS returns them) and the actors' names, returns the nested
summary as plain dicts ready for JSON. Steps as in Ray: index tasks by id (the last
attempt in list order wins), build the ownership tree (actor tasks under their
actor, which sits where its creation task's parent is), merge same-named siblings
into ``GROUP`` nodes (propagating the minimum timestamp), total the state counts
bottom-up and sort every level (running, pending, failed, earlier, creation first).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

#: Parent ids of top-level tasks start with the driver's nil task-id prefix.
DRIVER_TASK_ID_PREFIX = "f" * 40
_ACTOR_CREATION_PREFIX = "f" * 16
_RUNNING = ("RUNNING", "RUNNING_IN_RAY_GET", "RUNNING_IN_RAY_WAIT")
_PENDING = ("PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "PENDING_OBJ_STORE_MEM_AVAIL", "PENDING_ARGS_FETCH")


@dataclass(frozen=True)
class LineageTask:
    """The fields of one task attempt the lineage needs (TaskState names)."""

    task_id: str
    name: str
    func_or_class_name: str
    type: str
    state: str
    actor_id: str
    parent_task_id: str
    creation_time_ms: int | None


@dataclass
class _Node:
    name: str
    key: str
    type: str
    timestamp: int | None = None
    link: dict[str, str] | None = None
    state_counts: dict[str, int] = field(default_factory=dict)
    children: list[_Node] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "type": self.type,
            "timestamp": self.timestamp,
            "state_counts": self.state_counts,
            "children": [c.to_json() for c in self.children],
            "link": self.link,
        }


@dataclass
class LineageSummary:
    summary: list[dict[str, Any]]
    total_tasks: int
    total_actor_tasks: int
    total_actor_scheduled: int

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "total_tasks": self.total_tasks,
            "total_actor_tasks": self.total_actor_tasks,
            "total_actor_scheduled": self.total_actor_scheduled,
            "summary_by": "lineage",
        }


def _is_root_parent(parent_task_id: str) -> bool:
    return not parent_task_id or parent_task_id.startswith(DRIVER_TASK_ID_PREFIX)


class _Builder:
    def __init__(self, tasks: list[LineageTask], actor_names: Mapping[str, tuple[str, str]]) -> None:
        self.tasks_by_id: dict[str, LineageTask] = {}
        self.creation_task_of_actor: dict[str, str] = {}
        for task in tasks:
            self.tasks_by_id[task.task_id] = task
            if task.type == "ACTOR_CREATION_TASK":
                actor_id = task.actor_id
                if not actor_id and task.task_id.startswith(_ACTOR_CREATION_PREFIX):
                    actor_id = task.task_id[len(_ACTOR_CREATION_PREFIX) :]  # creation task id embeds the actor id
                self.creation_task_of_actor[actor_id] = task.task_id
        self.actor_names = actor_names
        self.groups: dict[str, _Node] = {}
        self.roots: list[_Node] = []
        #: Ray reads the actor node's timestamp from the task its outer loop is on.
        self.current: LineageTask | None = None

    def task_group(self, task_id: str) -> _Node | None:
        if task_id in self.groups:
            return self.groups[task_id]
        task = self.tasks_by_id.get(task_id)
        if task is None:
            logger.debug("lineage: no data about task %s; dropping its subtree", task_id)
            return None
        node = _Node(
            name=task.name or task.func_or_class_name,
            key=task.task_id,
            type=task.type,
            timestamp=task.creation_time_ms,
            link={"type": "task", "id": task.task_id},
        )
        self.groups[task.task_id] = node
        if task.type in ("ACTOR_TASK", "ACTOR_CREATION_TASK"):
            actor_id = task.actor_id
            if not actor_id and task.type == "ACTOR_CREATION_TASK":
                actor_id = task.task_id[len(_ACTOR_CREATION_PREFIX) :]
            parent = self.actor_group(actor_id)
            if parent is not None:
                parent.children.append(node)
        elif _is_root_parent(task.parent_task_id):
            self.roots.append(node)
        else:
            parent = self.task_group(task.parent_task_id)
            if parent is not None:
                parent.children.append(node)
        return node

    def actor_group(self, actor_id: str) -> _Node | None:
        key = f"actor:{actor_id}"
        if key in self.groups:
            return self.groups[key]
        creation = self.tasks_by_id.get(self.creation_task_of_actor.get(actor_id, ""))
        if creation is None:
            logger.debug("lineage: no creation task for actor %s; dropping its tasks", actor_id)
            return None
        names = self.actor_names.get(actor_id)
        if names is None:
            name = creation.func_or_class_name.split(".")[0] or "UnknownActor"
        else:
            repr_name, class_name = names
            name = repr_name or class_name
        node = _Node(
            name=name,
            key=key,
            type="ACTOR",
            timestamp=self.current.creation_time_ms if self.current is not None else creation.creation_time_ms,
            link={"type": "actor", "id": actor_id},
        )
        self.groups[key] = node
        if _is_root_parent(creation.parent_task_id):
            self.roots.append(node)
        else:
            parent = self.task_group(creation.parent_task_id)
            if parent is not None:
                parent.children.append(node)
        return node


def _merge_siblings(siblings: list[_Node]) -> tuple[list[_Node], int | None]:
    if not siblings:
        return siblings, None
    groups: dict[str, _Node] = {}
    min_timestamp: int | None = None
    for child in siblings:
        child.children, child_min = _merge_siblings(child.children)
        if child_min and child_min < (child.timestamp or sys.maxsize):
            child.timestamp = child_min
        group = groups.get(child.name)
        if group is None:
            group = groups[child.name] = _Node(name=child.name, key=child.name, type="GROUP")
        group.children.append(child)
        if child.timestamp and child.timestamp < (group.timestamp or sys.maxsize):
            group.timestamp = child.timestamp
            if child.timestamp < (min_timestamp or sys.maxsize):
                min_timestamp = child.timestamp
    return [g if len(g.children) > 1 else g.children[0] for g in groups.values()], min_timestamp


def _sort_level(nodes: list[_Node]) -> None:
    # Stable sorts applied least-significant first, exactly as Ray does.
    nodes.sort(key=lambda n: 0 if n.type == "ACTOR_CREATION_TASK" else 1)
    nodes.sort(key=lambda n: n.timestamp or sys.maxsize)
    nodes.sort(key=lambda n: n.state_counts.get("FAILED", 0), reverse=True)
    nodes.sort(key=lambda n: sum(n.state_counts.get(s, 0) for s in _PENDING), reverse=True)
    nodes.sort(key=lambda n: sum(n.state_counts.get(s, 0) for s in _RUNNING), reverse=True)


def _total(node: _Node) -> _Node:
    # Iterative post-order: lineage chains can be deeper than Python's recursion limit.
    stack: list[tuple[_Node, bool]] = [(node, False)]
    while stack:
        current, done = stack.pop()
        if not current.children:
            continue
        if not done:
            stack.append((current, True))
            stack.extend((c, False) for c in current.children)
            continue
        for child in current.children:
            for state, count in child.state_counts.items():
                current.state_counts[state] = current.state_counts.get(state, 0) + count
        _sort_level(current.children)
    return node


def summarize_by_lineage(tasks: Iterable[LineageTask], actor_names: Mapping[str, tuple[str, str]]) -> LineageSummary:
    """``actor_names``: actor id -> (repr name, class name) for the actors known."""
    task_list = list(tasks)
    # Parent chains recurse once per level (as in Ray); allow any depth a capped list can have.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * len(task_list) + 1000))
    builder = _Builder(task_list, actor_names)
    totals = {"NORMAL_TASK": 0, "ACTOR_TASK": 0, "ACTOR_CREATION_TASK": 0}
    for task in task_list:
        builder.current = task
        group = builder.task_group(task.task_id)
        if group is None:
            continue
        state = task.state or "NIL"
        group.state_counts[state] = group.state_counts.get(state, 0) + 1
        if task.type in totals:
            totals[task.type] += 1
    roots, _ = _merge_siblings(builder.roots)
    roots = [_total(r) for r in roots]
    _sort_level(roots)
    return LineageSummary(
        summary=[r.to_json() for r in roots],
        total_tasks=totals["NORMAL_TASK"],
        total_actor_tasks=totals["ACTOR_TASK"],
        total_actor_scheduled=totals["ACTOR_CREATION_TASK"],
    )

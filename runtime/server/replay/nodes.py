"""Nodes (``NODE_DEFINITION``/``LIFECYCLE`` events) as ``/nodes?view=summary`` elements.

Host metrics a dead session cannot know are placeholders, as in KubeRay's Go
history server, except the columns the Cluster page draws as bars: ``mem`` is
``[total, available, percent, used]`` with the node's last known ``memory``
resource as total and nothing in use (usage was never exported), the object store
is ``objectStoreUsedMemory`` 0 of ``objectStoreAvailableMemory`` = its
``object_store_memory`` resource, and ``disk`` is empty (unknown: no bar rather
than ``0B/0B``). A node still ALIVE in the events also gets an *ended* form
(:mod:`runtime.server.replay.ended`), served once the session is known to be over.
Fields Ray prints as int64 strings (``startTimeMs``, ``endTimeMs``,
``objectStoreBytesAvail``) are strings as in the live answer. ``raw_json`` keeps the
merged definition and every transition for the cluster-status computation:
``{"node_id", "definition": {...hex ids...} | null, "transitions": [{..., "timestamp_ns"}]}``
sorted chronologically.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from runtime.server.replay.ended import NODE_ENDED_MESSAGE, end_of
from runtime.server.replay.ids import IdCache
from runtime.server.replay.timestamps import ts_ns

RAY_TMP_ROOT = "/tmp/ray"  # noqa: S108 - Ray's default temp root, as printed by Ray
NODE_GROUP_LABEL = "ray.io/node-group"
HEAD_GROUP = "headgroup"
HEAD_RESOURCE = "node:__internal_head__"
_DEATH_MESSAGES = {
    "EXPECTED_TERMINATION": "Expected termination",
    "UNEXPECTED_TERMINATION": "Unexpected termination",
    "AUTOSCALER_DRAIN_PREEMPTED": "Terminated due to preemption",
    "AUTOSCALER_DRAIN_IDLE": "Terminated due to idle (no Ray activity)",
}
_RESOURCE_RENAMES = {"object_store_memory": "objectStoreMemory", HEAD_RESOURCE: "node:InternalHead"}


@dataclass(slots=True)
class Node:
    node_id: str
    definition: dict[str, Any] | None = None
    transitions: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeRow:
    node_id: str
    ip: str
    hostname: str
    node_name: str
    state: str
    node_group: str
    is_head: bool
    resources_text: str
    node_json: bytes
    raw_json: bytes
    #: the element once the session has ended (DEAD at its end); None: already DEAD
    ended_json: bytes | None = None


class NodeTable:
    def __init__(self, ids: IdCache) -> None:
        self._ids = ids
        self.nodes: dict[str, Node] = {}

    def _get(self, raw: object) -> Node | None:
        if not raw:
            return None
        node_id = self._ids(raw)
        node = self.nodes.get(node_id)
        if node is None:
            node = self.nodes[node_id] = Node(node_id)
        return node

    def definition(self, payload: dict[str, Any]) -> bool:
        node = self._get(payload.get("nodeId"))
        if node is None:
            return False
        node.definition = payload
        return True

    def lifecycle(self, payload: dict[str, Any]) -> bool:
        transitions = payload.get("stateTransitions")
        node = self._get(payload.get("nodeId")) if transitions else None
        if node is None or type(transitions) is not list:
            return False
        for transition in transitions:
            if type(transition) is dict:
                ns = ts_ns(transition.get("timestamp"))
                if ns is not None:
                    node.transitions.setdefault((str(transition.get("state") or ""), ns), transition)
        return True

    def ips(self) -> dict[str, str]:
        """Hex node id -> IP, from definitions."""
        return {
            node.node_id: str(node.definition.get("nodeIpAddress") or "")
            for node in self.nodes.values()
            if node.definition
        }

    def rows(self, session: str, end_ms: int | None = None) -> list[NodeRow]:
        """One row per node with transitions; ``end_ms`` is the session's last
        recorded moment (None: unknown, no ended form)."""
        return [self._render(node, session, end_ms) for node in self.nodes.values() if node.transitions]

    def _render(self, node: Node, session: str, end_ms: int | None) -> NodeRow:
        d = node.definition or {}
        ordered = sorted(node.transitions.items(), key=lambda kv: (kv[0][1], kv[0][0]))
        (state, last_ns), last = ordered[-1]
        alive = [tr for (name, _), tr in ordered if name == "ALIVE"]
        resources = alive[-1].get("resources") if alive else None
        resources = resources if isinstance(resources, dict) else {}
        labels: dict[str, Any] = d["labels"] if isinstance(d.get("labels"), dict) else {}
        group = str(labels.get(NODE_GROUP_LABEL) or "")
        ip = str(d.get("nodeIpAddress") or "")
        hostname = str(d.get("hostname") or "")
        node_name = str(d.get("nodeName") or "")
        is_head = group == HEAD_GROUP or HEAD_RESOURCE in resources
        start_ns = ts_ns(d.get("startTimestamp"))
        seconds = last_ns / 1e9
        message = None
        if state == "DEAD":
            message = _death_message(last.get("deathInfo"))
        memory = _bytes(resources.get("memory"))
        store = _bytes(resources.get("object_store_memory"))
        summary: dict[str, Any] = {
            "now": seconds,
            "t": seconds,
            "hostname": hostname,
            "ip": ip,
            "cpu": 0,
            "cpus": [0, 0],
            "mem": [memory, memory, 0.0, 0],
            "shm": 0,
            "bootTime": 0,
            "loadAvg": [[0, 0, 0], [0, 0, 0]],
            "networkSpeed": [0, 0],
            "disk": {},
            "gpus": [],
            "tpus": [],
            "workers": [],
            "actors": {},
            "cmdline": [],
            "raylet": {
                "storeStats": {"objectStoreBytesAvail": str(store) if state != "DEAD" else "0"},
                "objectStoreUsedMemory": 0,
                "objectStoreAvailableMemory": store,
                "nodeId": node.node_id,
                "nodeManagerAddress": ip,
                "nodeManagerHostname": hostname,
                "rayletSocketName": f"{RAY_TMP_ROOT}/{session}/sockets/raylet",
                "objectStoreSocketName": f"{RAY_TMP_ROOT}/{session}/sockets/plasma_store",
                "metricsExportPort": "8080",
                "resourcesTotal": {_RESOURCE_RENAMES.get(k, k): v for k, v in resources.items()},
                "nodeName": node_name,
                "instanceId": str(d.get("instanceId") or ""),
                "nodeTypeName": group,
                "instanceTypeName": str(d.get("instanceTypeName") or ""),
                "startTimeMs": str(start_ns // 1_000_000 if start_ns is not None else 0),
                "isHeadNode": is_head,
                "labels": labels,
                "state": state,
                "endTimeMs": str(last_ns // 1_000_000 if state == "DEAD" else 0),
                "stateMessage": message,
            },
        }
        ended_json = None
        end = end_of(state, last_ns // 1_000_000, end_ms)
        if end is not None:
            raylet = {
                **summary["raylet"],
                "storeStats": {"objectStoreBytesAvail": "0"},
                "state": "DEAD",
                "endTimeMs": str(end),
                "stateMessage": NODE_ENDED_MESSAGE,
            }
            ended_json = orjson.dumps({**summary, "now": end / 1000, "t": end / 1000, "raylet": raylet})
        raw = {
            "node_id": node.node_id,
            "definition": {**d, "nodeId": node.node_id} if node.definition else None,
            "transitions": [{**tr, "timestamp_ns": ns} for (_, ns), tr in ordered],
        }
        return NodeRow(
            node_id=node.node_id,
            ip=ip,
            hostname=hostname,
            node_name=node_name,
            state=state,
            node_group=group,
            is_head=is_head,
            resources_text=resources_text(resources),
            node_json=orjson.dumps(summary),
            raw_json=orjson.dumps(raw),
            ended_json=ended_json,
        )


def _bytes(value: object) -> int:
    """A memory resource (Ray sends bytes as a float) as an int; 0 when unusable."""
    try:
        return max(0, int(float(value)))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0


def _death_message(info: object) -> str:
    if not isinstance(info, dict):
        return ""
    reason = _DEATH_MESSAGES.get(str(info.get("reason") or ""))
    detail = str(info.get("reasonMessage") or "")
    if reason is None:
        return detail
    return f"{reason}: {detail}" if detail else reason


def format_memory(value: float) -> str:
    """``9.31GiB`` style: the largest binary unit, two decimals, no space."""
    for unit, power in (("TiB", 4), ("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if value >= 1024**power:
            return f"{value / 1024**power:.2f}{unit}"
    return f"{int(value)}B"


def resources_text(resources: dict[str, Any]) -> str:
    """The ``nodeLogicalResources`` string of one node (nothing is in use: dead)."""
    lines = []
    for key in sorted(resources):
        if key.startswith(("node:", "accelerator_type:")):
            continue
        try:
            value = float(resources[key])
        except (TypeError, ValueError):
            continue
        if key in ("memory", "object_store_memory"):
            lines.append(f"0B/{format_memory(value)} {key}")
        else:
            lines.append(f"0.0/{value:.1f} {key}")
    return "\n".join(lines)

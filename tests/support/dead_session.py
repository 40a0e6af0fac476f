"""A small synthetic stored session of a cluster that is gone: a head still ALIVE in
its events (Ray exports no event when a head is deleted), a worker node with its own
DEAD event, an actor alive at the end and one that died with its node.

Shapes follow Ray 2.60's exported events (``tests/fixtures/ray-samples/events``).
The latest event (a worker-process event, a type the replay does not table) is at
``END``: the session's end.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from runtime.storage.base import ObjectStore
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.sample_session import StoredSample, write_events

SESSION = "session_2026-11-22_01-45-25_333080_9264"
CLUSTER = ClusterRef("default", "gone-cluster")
HEAD_RAW, WORKER_RAW = bytes(range(1, 29)), bytes(range(31, 59))
HEAD_HEX, WORKER_HEX = HEAD_RAW.hex(), WORKER_RAW.hex()
KEEPER_RAW, GONE_RAW = bytes(range(70, 82)) + b"\x02\x00\x00\x00", bytes(range(90, 102)) + b"\x02\x00\x00\x00"
KEEPER_HEX, GONE_HEX = KEEPER_RAW.hex(), GONE_RAW.hex()
GiB = 1024**3
HEAD_RESOURCES = {"CPU": 4.0, "memory": 8.0 * GiB, "object_store_memory": 2.0 * GiB, "node:__internal_head__": 1.0}
WORKER_RESOURCES = {"CPU": 2.0, "memory": 4.0 * GiB, "object_store_memory": 1.0 * GiB}


def at(second: int) -> str:
    return f"2026-11-22T01:46:{second:02d}.000000000Z"


def ms(second: int) -> int:
    return int(datetime(2026, 11, 22, 1, 46, second, tzinfo=UTC).timestamp() * 1000)


END = 45
HEAD_LOG = "raylet.out"
WORKER_DEATH = 30


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _event(n: int, kind: str, key: str, payload: dict[str, Any], *, node: bytes, second: int) -> dict[str, Any]:
    return {
        "eventId": _b64(n.to_bytes(28, "big")),
        "sourceType": "GCS",
        "eventType": kind,
        "timestamp": at(second),
        "severity": "INFO",
        "sessionName": SESSION,
        key: payload,
        "nodeId": _b64(node),
        "message": "",
    }


def events() -> list[dict[str, Any]]:
    head, worker = _b64(HEAD_RAW), _b64(WORKER_RAW)
    found: list[dict[str, Any]] = []

    def add(kind: str, key: str, payload: dict[str, Any], second: int, node: bytes = HEAD_RAW) -> None:
        found.append(_event(len(found) + 1, kind, key, payload, node=node, second=second))

    for node_id, ip, host, group, resources, second in (
        (head, "10.0.0.1", "head-host", "headgroup", HEAD_RESOURCES, 1),
        (worker, "10.0.0.2", "worker-host", "workers", WORKER_RESOURCES, 2),
    ):
        definition: dict[str, Any] = {
            "nodeId": node_id,
            "nodeIpAddress": ip,
            "labels": {"ray.io/node-group": group},
            "startTimestamp": at(second),
            "hostname": host,
            "nodeName": ip,
            "instanceId": "",
            "instanceTypeName": "",
        }
        add("NODE_DEFINITION_EVENT", "nodeDefinitionEvent", definition, second)
        alive: dict[str, Any] = {
            "timestamp": at(second),
            "resources": resources,
            "state": "ALIVE",
            "aliveSubState": "UNSPECIFIED",
        }
        add("NODE_LIFECYCLE_EVENT", "nodeLifecycleEvent", {"nodeId": node_id, "stateTransitions": [alive]}, second)
    death = {"reason": "UNEXPECTED_TERMINATION", "reasonMessage": "health check failed"}
    dead = {"timestamp": at(WORKER_DEATH), "state": "DEAD", "deathInfo": death}
    add("NODE_LIFECYCLE_EVENT", "nodeLifecycleEvent", {"nodeId": worker, "stateTransitions": [dead]}, WORKER_DEATH)
    for actor, name, node_id, pid in ((KEEPER_RAW, "Keeper", head, 4242), (GONE_RAW, "Gone", worker, 4343)):
        actor_definition: dict[str, Any] = {
            "actorId": _b64(actor),
            "jobId": "AgAAAA==",
            "className": name,
            "name": "",
            "isDetached": False,
        }
        add("ACTOR_DEFINITION_EVENT", "actorDefinitionEvent", actor_definition, 5)
        actor_alive: dict[str, Any] = {
            "timestamp": at(6),
            "state": "ALIVE",
            "nodeId": node_id,
            "workerId": _b64(bytes(28)),
            "pid": pid,
        }
        add(
            "ACTOR_LIFECYCLE_EVENT",
            "actorLifecycleEvent",
            {"actorId": _b64(actor), "stateTransitions": [actor_alive]},
            6,
        )
    cause = {"actorDiedErrorContext": {"errorMessage": "the actor's node died", "pid": 4343}}
    gone = {"timestamp": at(WORKER_DEATH), "state": "DEAD", "deathCause": cause}
    add(
        "ACTOR_LIFECYCLE_EVENT",
        "actorLifecycleEvent",
        {"actorId": _b64(GONE_RAW), "stateTransitions": [gone]},
        WORKER_DEATH,
    )
    # The last thing the session recorded: a worker process event (not tabled, but timed).
    add("WORKER_LIFECYCLE_EVENT", "workerLifecycleEvent", {"workerId": _b64(bytes(28))}, END)
    return found


def write_dead_session(store: ObjectStore, layout: KeyLayout, cluster: ClusterRef = CLUSTER) -> StoredSample:
    """The session stored as the collector stores one, marker included, and one log
    file of the head (a dead node's logs stay browsable)."""
    write_events(store, layout, cluster, events())
    store.put_bytes(layout.log_key(cluster, SESSION, HEAD_HEX, HEAD_LOG), b"raylet started\n")
    store.put_bytes(layout.marker_key(cluster, SESSION), b"")
    return StoredSample(
        cluster=cluster, session=SESSION, node_id=HEAD_HEX, session_prefix=layout.session_prefix(cluster, SESSION)
    )

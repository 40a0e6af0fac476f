"""Actors (``ACTOR_DEFINITION``/``LIFECYCLE`` events) and their ``/logical/actors``
objects, in the live dashboard's shape.

Better than KubeRay's Go history server, from fields Ray 2.60 does export: pid and port come from
the latest ALIVE transition (not only from a death cause), the IP from the node's
definition when no death cause names it, the exit detail from a creation-task
failure too, and the job id from the actor id's suffix when no definition arrived.

An actor not DEAD in the events also gets an *ended* form (DEAD at the session's
end, :mod:`runtime.server.replay.ended`), served once the session is known to be over.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from runtime.common.json_bytes import dumps_kept
from runtime.server.replay.ended import actor_ended_message, end_of
from runtime.server.replay.ids import IdCache
from runtime.server.replay.timestamps import to_int, ts_ns

ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD")
_RANK = {name: rank for rank, name in enumerate(ACTOR_STATES)}


@dataclass(slots=True)
class Actor:
    actor_id: str
    definition: dict[str, Any] | None = None
    #: (ns, rank, state, transition) de-duplicated by (state, ns)
    transitions: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ActorRow:
    actor_id: str
    job_id: str
    node_id: str
    worker_id: str
    state: str
    class_name: str
    repr_name: str
    required_resources_json: bytes | None
    actor_json: bytes
    #: the object once the session has ended (DEAD at its end); None: already DEAD
    ended_json: bytes | None = None


class ActorTable:
    def __init__(self, ids: IdCache) -> None:
        self._ids = ids
        self.actors: dict[str, Actor] = {}

    def _get(self, raw: object) -> Actor | None:
        if not raw:
            return None
        actor_id = self._ids(raw)
        actor = self.actors.get(actor_id)
        if actor is None:
            actor = self.actors[actor_id] = Actor(actor_id)
        return actor

    def definition(self, payload: dict[str, Any]) -> bool:
        actor = self._get(payload.get("actorId"))
        if actor is None:
            return False
        actor.definition = payload
        return True

    def lifecycle(self, payload: dict[str, Any]) -> bool:
        transitions = payload.get("stateTransitions")
        actor = self._get(payload.get("actorId")) if transitions else None
        if actor is None or type(transitions) is not list:
            return False
        for transition in transitions:
            if type(transition) is not dict:
                continue
            ns = ts_ns(transition.get("timestamp"))
            if ns is not None:
                actor.transitions.setdefault((str(transition.get("state") or ""), ns), transition)
        return True

    def rows(self, node_ips: dict[str, str], end_ms: int | None = None) -> list[ActorRow]:
        """One row per actor; ``end_ms`` is the session's last recorded moment
        (None: unknown, no ended form)."""
        return [self._render(actor, node_ips, end_ms) for actor in self.actors.values()]

    def _render(self, actor: Actor, node_ips: dict[str, str], end_ms: int | None) -> ActorRow:
        ids = self._ids
        d = actor.definition or {}
        life = _summarise(actor, ids)
        job_id = ids(d.get("jobId")) if d.get("jobId") else (actor.actor_id[-8:] if len(actor.actor_id) == 32 else "")
        obj, resources = self._object(actor, life, job_id, node_ips)
        ended_json = None
        end = end_of(life.state, life.updated_ms, end_ms)
        if end is not None:
            dead = replace(life, state="DEAD", end_ms=end, updated_ms=end, exit_detail=actor_ended_message(life.state))
            ended_json = dumps_kept(self._object(actor, dead, job_id, node_ips)[0])
        return ActorRow(
            actor_id=actor.actor_id,
            job_id=job_id,
            node_id=life.node_id,
            worker_id=life.worker_id,
            state=life.state,
            class_name=str(d.get("className") or ""),
            repr_name=life.repr_name,
            required_resources_json=None if resources is None else dumps_kept(resources),
            actor_json=dumps_kept(obj),  # every actor's row is held until they are all written
            ended_json=ended_json,
        )

    def _object(
        self, actor: Actor, life: _Lifecycle, job_id: str, node_ips: dict[str, str]
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The ``/logical/actors`` object and the actor's required resources."""
        ids = self._ids
        d = actor.definition or {}
        ip = life.ip or node_ips.get(life.node_id, "")
        class_name = str(d.get("className") or "")
        obj: dict[str, Any] = {
            "actorId": actor.actor_id,
            "jobId": job_id,
            "address": {"nodeId": life.node_id, "ipAddress": ip, "port": life.port, "workerId": life.worker_id},
            "name": str(d.get("name") or ""),
            "className": class_name,
        }
        pg = ids(d.get("placementGroupId")) if d.get("placementGroupId") else ""
        if pg and pg.strip("f"):
            obj["placementGroupId"] = pg
        obj["labelSelector"] = d.get("labelSelector") if isinstance(d.get("labelSelector"), dict) else None
        obj["state"] = life.state
        obj["numRestarts"] = str(life.restarts)
        if life.end_ms is not None:
            obj["timestamp"] = float(life.updated_ms)  # last update, as Ray's actor table
        obj["pid"] = life.pid
        if life.start_ms is not None:
            obj["startTime"] = life.start_ms
        if life.end_ms is not None:
            obj["endTime"] = life.end_ms
        obj["reprName"] = life.repr_name
        obj["actorClass"] = class_name
        obj["exitDetail"] = life.exit_detail
        resources = d.get("requiredResources")
        resources = _unbundled(resources, pg) if isinstance(resources, dict) else None
        obj["requiredResources"] = resources
        if d.get("callSite"):
            obj["callSite"] = str(d["callSite"])
        obj.update(_PLACEHOLDERS)
        return obj, resources


@dataclass
class _Lifecycle:
    state: str = ""
    node_id: str = ""
    worker_id: str = ""
    ip: str = ""
    repr_name: str = ""
    pid: int = 0
    port: int = 0
    start_ms: int | None = None
    end_ms: int | None = None
    updated_ms: int = 0
    restarts: int = 0
    exit_detail: str = ""


def _summarise(actor: Actor, ids: IdCache) -> _Lifecycle:
    """What the (chronologically sorted) transitions say, whatever their arrival order."""
    ordered = sorted(actor.transitions.items(), key=lambda kv: (kv[0][1], _RANK.get(kv[0][0], 9)))
    life = _Lifecycle()
    if not ordered:
        return life
    life.state, life.updated_ms = ordered[-1][0][0], ordered[-1][0][1] // 1_000_000
    for (name, ns), tr in ordered:
        if name == "ALIVE":
            if life.start_ms is None:
                life.start_ms = ns // 1_000_000
            if tr.get("nodeId"):
                life.node_id, life.worker_id = ids(tr.get("nodeId")), ids(tr.get("workerId"))
                life.pid, life.port = to_int(tr.get("pid")), to_int(tr.get("port"))
        elif name == "RESTARTING":
            life.restarts += 1
        if tr.get("reprName"):
            life.repr_name = str(tr["reprName"])
    if life.state != "DEAD":
        return life
    # Ray re-reports a dead actor (e.g. at job end): it died at the first DEAD of
    # the final run, and that one names the cause.
    run = len(ordered)
    while run > 0 and ordered[run - 1][0][0] == "DEAD":
        run -= 1
    dead = ordered[run:]
    life.end_ms = dead[0][0][1] // 1_000_000
    cause: dict[str, Any] = next((tr["deathCause"] for _, tr in dead if isinstance(tr.get("deathCause"), dict)), {})
    died, failed = cause.get("actorDiedErrorContext"), cause.get("creationTaskFailureContext")
    if isinstance(died, dict):
        life.pid = to_int(died.get("pid")) or life.pid
        life.ip = str(died.get("nodeIpAddress") or "")
        life.exit_detail = str(died.get("errorMessage") or "")
    elif isinstance(failed, dict):
        life.exit_detail = str(failed.get("formattedExceptionString") or "")
    return life


def _unbundled(resources: dict[str, Any], pg: str) -> dict[str, Any]:
    """An actor in a placement group is defined with Ray's rewritten resources
    (``CPU_group_<pg>``, ``CPU_group_<i>_<pg>``, ``bundle_group_...``); Ray's actor
    table shows the request as made (``CPU``)."""
    suffix = f"_group_{pg}" if pg else ""
    if not suffix or not any(key.endswith(suffix) for key in resources):
        return resources
    plain: dict[str, Any] = {}
    for key, value in resources.items():
        if key.endswith(suffix) and not key.startswith("bundle_group_"):
            plain[key[: -len(suffix)]] = value
        elif "_group_" not in key:
            plain[key] = value
    return plain


#: Live-only process statistics a dead session cannot know.
_PLACEHOLDERS: dict[str, Any] = {"gpus": [], "processStats": None, "tpus": []}

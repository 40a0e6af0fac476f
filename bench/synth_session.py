"""A synthetic stored Ray session shaped like Ray 2.60's real exports, at any size.

    .venv/bin/python bench/synth_session.py --tasks 100000 --out /tmp/synth [--gzip] [--nodes 4] [--jobs 3] [--seed 7]

Writes what the collector would store (``tests/support/sample_session.py`` does the
same for the captured samples): per (reporting node, job) streams of ~10k-event
JSONL objects under ``job_events/``/``node_events/``; base64 ids exactly as Ray
prints them; per task attempt a definition, the owner's lifecycle (pending ...
FINISHED/FAILED with ``rayErrorInfo``) and the executor's RUNNING with the
``taskLogInfo`` split in two events (files + start offsets, then end offsets);
actors with creation tasks and actor tasks, drivers, the hidden dashboard job
01000000, ~1% failed attempts (half retried), a profile event per executed attempt
(as Ray 2.60 sends them: four entries, the task's own extra data), node
definition/lifecycle (one worker node dies), several driver jobs, the session
marker, a stored ``/api/jobs/`` snapshot and a few log files. Deterministic for a
seed. ``n_tasks`` is the exact number of task attempts.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import gzip
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from runtime.storage.base import ObjectStore  # noqa: E402
from runtime.storage.layout import ClusterRef, KeyLayout, event_file_name  # noqa: E402

SESSION = "session_2026-11-22_01-45-25_333080_9264"
EVENTS_PER_FILE = 10_000
BASE_NS = 1_795_311_940_000_000_000  # 2026-11-22T01:45:40Z, seconds after SESSION started
HIDDEN_JOB = 1
NIL_PG = base64.b64encode(b"\xff" * 18).decode()
ENV = '{"working_dir": "gcs://_ray_pkg_f95e4a6ff7e3c029.zip"}'
FUNCS = ("square", "child", "parent", "work", "load_batch", "train_step", "score", "noop")
CLASSES = ("Counter", "Worker", "Echo", "Trainer")
OWNER_STATES = ("PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER")


@dataclass
class SynthSummary:
    cluster: ClusterRef
    session: str
    session_prefix: str
    nodes: list[str]  # hex, head first
    jobs: list[str]  # hex user jobs (the hidden 01000000 excluded)
    attempts: int = 0
    failed: int = 0
    retried: int = 0
    actors: int = 0
    profiled: int = 0
    events: int = 0
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    by_type: dict[str, int] = field(default_factory=dict)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def job_bytes(n: int) -> bytes:
    return n.to_bytes(4, "little")


class _Clock:
    """RFC 3339 nanosecond timestamps, seconds part cached."""

    def __init__(self) -> None:
        self._cache: dict[int, str] = {}

    def __call__(self, ns: int) -> str:
        sec, frac = divmod(ns, 1_000_000_000)
        head = self._cache.get(sec)
        if head is None:
            head = self._cache[sec] = datetime.fromtimestamp(sec, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{head}.{frac:09d}Z"


_PAYLOAD_KEYS = {
    "NODE_DEFINITION_EVENT": "nodeDefinitionEvent",
    "NODE_LIFECYCLE_EVENT": "nodeLifecycleEvent",
    "DRIVER_JOB_DEFINITION_EVENT": "driverJobDefinitionEvent",
    "DRIVER_JOB_LIFECYCLE_EVENT": "driverJobLifecycleEvent",
    "TASK_DEFINITION_EVENT": "taskDefinitionEvent",
    "ACTOR_TASK_DEFINITION_EVENT": "actorTaskDefinitionEvent",
    "TASK_LIFECYCLE_EVENT": "taskLifecycleEvent",
    "TASK_PROFILE_EVENT": "taskProfileEvents",
    "ACTOR_DEFINITION_EVENT": "actorDefinitionEvent",
    "ACTOR_LIFECYCLE_EVENT": "actorLifecycleEvent",
}
_GCS_TYPES = ("NODE", "DRIVER", "ACTOR_DEFINITION", "ACTOR_LIFECYCLE")


@dataclass(frozen=True)
class _Node:
    hex: str
    b64: str
    ip: str


@dataclass(frozen=True)
class _Worker:
    b64: str
    hex: str
    pid: int


@dataclass(frozen=True)
class _Job:
    hex: str
    b64: str
    raw: bytes


@dataclass(frozen=True)
class _Attempt:
    task_id: str  # base64
    job: _Job
    definition: dict[str, Any]
    event_type: str
    start: int  # ns
    node: _Node  # executor
    worker: _Worker
    attempt: int = 0
    failed: bool = False
    logs: bool = False  # executor reports taskLogInfo (normal tasks)


class _Writer:
    """Per-(reporting node, job) streams flushed as collector-style objects."""

    def __init__(self, store: ObjectStore, layout: KeyLayout, summary: SynthSummary, *, gz: bool, rng: random.Random):
        self.store, self.layout, self.summary, self.gz = store, layout, summary, gz
        self.streams: dict[tuple[str, str | None], list[bytes]] = {}
        self.opened = BASE_NS
        self.seq = 0
        self.eid_prefix = rng.randbytes(20)
        self.clock = _Clock()

    def emit(self, source: _Node, job: _Job | None, event_type: str, payload: dict[str, Any], ns: int) -> None:
        self.seq += 1
        event = {
            "eventId": _b64(self.eid_prefix + self.seq.to_bytes(8, "big")),
            "sourceType": "GCS" if event_type.startswith(_GCS_TYPES) else "CORE_WORKER",
            "eventType": event_type,
            "timestamp": self.clock(ns),
            "severity": "INFO",
            "sessionName": self.summary.session,
            _PAYLOAD_KEYS[event_type]: payload,
            "nodeId": source.b64,
            "message": "",
        }
        target = (source.hex, job.hex if job else None)
        lines = self.streams.setdefault(target, [])
        lines.append(orjson.dumps(event))
        self.summary.by_type[event_type] = self.summary.by_type.get(event_type, 0) + 1
        if len(lines) >= EVENTS_PER_FILE:
            self.flush(target)

    def flush(self, target: tuple[str, str | None]) -> None:
        lines = self.streams.pop(target, [])
        if not lines:
            return
        node, job = target
        self.opened += 1_000_003
        body = b"\n".join(lines) + b"\n"
        if self.gz:
            body = gzip.compress(body, compresslevel=1, mtime=0)
        name = event_file_name(node, self.opened, compressed=self.gz)
        cluster, session = self.summary.cluster, self.summary.session
        if job is None:
            key = self.layout.node_events_key(cluster, session, node, name)
        else:
            key = self.layout.job_events_key(cluster, session, node, job, name)
        self.store.put_bytes(key, body)
        self.summary.files += 1
        self.summary.bytes += len(body)
        self.summary.events += len(lines)

    def flush_all(self) -> None:
        for target in sorted(self.streams, key=lambda t: (t[0], t[1] or "")):
            self.flush(target)


def write_synthetic_session(
    store: ObjectStore,
    layout: KeyLayout,
    cluster: ClusterRef,
    session: str = SESSION,
    n_tasks: int = 1000,
    *,
    n_nodes: int = 4,
    n_jobs: int = 3,
    gzip_events: bool = False,
    seed: int = 7,
    logs: bool = True,
) -> SynthSummary:
    """Write one synthetic session; returns what was written."""
    started = time.perf_counter()
    rng = random.Random(seed)
    node_raw = [rng.randbytes(28) for _ in range(max(1, n_nodes))]
    summary = SynthSummary(
        cluster=cluster,
        session=session,
        session_prefix=layout.session_prefix(cluster, session),
        nodes=[raw.hex() for raw in node_raw],
        jobs=[job_bytes(2 + j).hex() for j in range(max(1, n_jobs))],
    )
    writer = _Writer(store, layout, summary, gz=gzip_events, rng=rng)
    _Generator(writer, rng, node_raw, n_jobs=max(1, n_jobs), n_tasks=n_tasks).run()
    writer.flush_all()
    _write_extras(store, layout, summary, logs=logs)
    store.put_bytes(layout.marker_key(cluster, session), b"")
    summary.seconds = round(time.perf_counter() - started, 2)
    return summary


def _pyfunc(cls: str, fn: str) -> dict[str, Any]:
    return {
        "pythonFunctionDescriptor": {
            "moduleName": "workload",
            "className": cls,
            "functionName": fn,
            "functionHash": "" if cls else "a28b4a21",
        }
    }


class _Generator:
    """Every event of the session, stream by stream."""

    def __init__(self, writer: _Writer, rng: random.Random, node_raw: list[bytes], *, n_jobs: int, n_tasks: int):
        self.w, self.rng, self.n_tasks, self.s = writer, rng, n_tasks, writer.summary
        self.clock = writer.clock
        self.nodes = [_Node(raw.hex(), _b64(raw), f"10.0.0.{n + 1}") for n, raw in enumerate(node_raw)]
        self.head = self.nodes[0]
        self.workers = [
            [
                _Worker(_b64(raw), raw.hex(), 10000 + 100 * n + k)
                for k, raw in enumerate(rng.randbytes(28) for _ in range(8))
            ]
            for n in range(len(self.nodes))
        ]
        self.jobs = [_Job(job_bytes(j).hex(), _b64(job_bytes(j)), job_bytes(j)) for j in range(1, n_jobs + 2)]
        self.drivers: dict[str, str] = {}
        self.actors: list[tuple[bytes, _Node, _Worker, str, _Job]] = []
        self.attempts = 0

    def run(self) -> None:
        self._nodes()
        self._drivers()
        self._actors()
        last = self._tasks()
        self._endings(BASE_NS + 5_000_000_000 + (last + 1000) * 40_000 + 60_000_000_000)
        self.s.attempts, self.s.actors = self.attempts, len(self.actors)

    def _definition(self, job: _Job, task_type: str, func: dict[str, Any], name: str, cpu: float) -> dict[str, Any]:
        return {
            "taskType": task_type,
            "language": "PYTHON",
            "taskFunc": func,
            "taskName": name,
            "requiredResources": {"CPU": cpu} if cpu else {},
            "jobId": job.b64,
            "parentTaskId": self.drivers.get(job.hex, _b64(b"\xff" * 24)),
            "placementGroupId": NIL_PG,
            "serializedRuntimeEnv": ENV,
            "refIds": {},
            "labelSelector": {},
            "isDetachedActor": False,
        }

    def _nodes(self) -> None:
        for n, node in enumerate(self.nodes):
            group = "headgroup" if n == 0 else "workergroup"
            resources = {
                "CPU": 8.0,
                "memory": 34359738368.0,
                "object_store_memory": 8589934592.0,
                f"node:{node.ip}": 1.0,
            }
            if n == 0:
                resources["node:__internal_head__"] = 1.0
            self.w.emit(
                self.head,
                None,
                "NODE_DEFINITION_EVENT",
                {
                    "nodeId": node.b64,
                    "nodeIpAddress": node.ip,
                    "labels": {"ray.io/node-id": node.hex, "ray.io/node-group": group},
                    "startTimestamp": self.clock(BASE_NS)[:23] + "Z",
                    "hostname": f"host-{n}",
                    "nodeName": node.ip,
                    "instanceId": "",
                    "instanceTypeName": "",
                },
                BASE_NS,
            )
            self.w.emit(
                self.head,
                None,
                "NODE_LIFECYCLE_EVENT",
                {
                    "nodeId": node.b64,
                    "stateTransitions": [
                        {
                            "timestamp": self.clock(BASE_NS + 1000),
                            "resources": resources,
                            "state": "ALIVE",
                            "aliveSubState": "UNSPECIFIED",
                        }
                    ],
                },
                BASE_NS + 1000,
            )

    def _drivers(self) -> None:
        """Drivers, and the driver jobs Ray reports (none for the hidden 01000000)."""
        for n, job in enumerate(self.jobs):
            driver = _b64(b"\xff" * 20 + job.raw)
            worker = _Worker(_b64(job.raw + b"\xff" * 24), (job.raw + b"\xff" * 24).hex(), 9000 + n)
            definition = {**self._definition(job, "DRIVER_TASK", {}, "", 0), "serializedRuntimeEnv": ""}
            self._attempt(_Attempt(driver, job, definition, "TASK_DEFINITION_EVENT", BASE_NS, self.head, worker))
            self.drivers[job.hex] = driver
            if n == 0:
                continue
            sub = f"raysubmit_synth{n - 1:04d}"
            self.w.emit(
                self.head,
                job,
                "DRIVER_JOB_DEFINITION_EVENT",
                {
                    "jobId": job.b64,
                    "driverPid": str(20000 + n - 1),
                    "driverNodeId": self.head.b64,
                    "entrypoint": f"python job{n - 1}.py",
                    "config": {
                        "serializedRuntimeEnv": ENV,
                        "metadata": {"owner": "synth", "job_submission_id": sub, "job_name": sub},
                    },
                },
                BASE_NS,
            )
            self.w.emit(
                self.head,
                job,
                "DRIVER_JOB_LIFECYCLE_EVENT",
                {"jobId": job.b64, "stateTransitions": [{"state": "CREATED", "timestamp": self.clock(BASE_NS + 5)}]},
                BASE_NS + 5,
            )

    def _actors(self) -> None:
        """User actors, and one JobSupervisor per user job in the hidden job."""
        user_jobs = self.jobs[1:]
        n_actors = max(1, self.n_tasks // 1000)
        for a in range(n_actors + len(user_jobs)):
            supervisor = a >= n_actors
            job = self.jobs[0] if supervisor else user_jobs[a % len(user_jobs)]
            uniq = self.rng.randbytes(12)
            cls = "JobSupervisor" if supervisor else CLASSES[a % len(CLASSES)]
            node = self.nodes[a % len(self.nodes)]
            worker = self.workers[a % len(self.nodes)][a % 8]
            self.actors.append((uniq, node, worker, cls, job))
            actor_b64, t0 = _b64(uniq + job.raw), BASE_NS + 2_000_000_000 + a * 1_000_000
            self.w.emit(
                self.head,
                job,
                "ACTOR_DEFINITION_EVENT",
                {
                    "actorId": actor_b64,
                    "jobId": job.b64,
                    "name": f"actor-{a}" if a % 3 else "",
                    "rayNamespace": "synth",
                    "serializedRuntimeEnv": ENV,
                    "className": cls,
                    "requiredResources": {"CPU": 1.0},
                    "isDetached": supervisor,
                    "placementGroupId": "",
                    "labelSelector": {},
                    "callSite": "",
                    "parentId": "",
                    "refIds": {},
                },
                t0,
            )
            transitions = [
                {
                    "state": state,
                    "timestamp": self.clock(when),
                    "nodeId": node.b64 if state == "ALIVE" else "",
                    "workerId": worker.b64 if state == "ALIVE" else "",
                    "pid": worker.pid if state == "ALIVE" else 0,
                    "port": 20000 + a,
                    "reprName": "",
                    "restartReason": "ACTOR_FAILURE",
                }
                for state, when in (
                    ("DEPENDENCIES_UNREADY", t0),
                    ("PENDING_CREATION", t0 + 1000),
                    ("ALIVE", t0 + 500_000),
                )
            ]
            self.w.emit(
                self.head,
                None,
                "ACTOR_LIFECYCLE_EVENT",
                {"actorId": actor_b64, "stateTransitions": transitions},
                t0 + 500_000,
            )
            definition = self._definition(job, "ACTOR_CREATION_TASK", _pyfunc(cls, "__init__"), f"{cls}.__init__", 1.0)
            self._attempt(
                _Attempt(_b64(b"\xff" * 8 + uniq + job.raw), job, definition, "TASK_DEFINITION_EVENT", t0, node, worker)
            )

    def _tasks(self) -> int:
        """Normal tasks (1% failed, half of those retried) and 10% actor tasks."""
        user_jobs, user_actors = self.jobs[1:], self.actors[: max(1, self.n_tasks // 1000)]
        k = len(self.nodes)
        i = 0
        while self.attempts < self.n_tasks:
            i += 1
            start = BASE_NS + 5_000_000_000 + i * 40_000
            uniq = ((i * 0x9E3779B97F4A7C15) & (2**64 - 1)).to_bytes(8, "big")
            if i % 10 == 3:
                actor, node, worker, cls, job = user_actors[i % len(user_actors)]
                definition = {
                    k2: v
                    for k2, v in self._definition(job, "", {}, "", 0).items()
                    if k2 not in ("taskType", "taskFunc", "taskName")
                }
                definition.update(
                    actorFunc=_pyfunc(cls, "incr"), actorTaskName=f"{cls}.incr", actorId=_b64(actor + job.raw)
                )
                self._attempt(
                    _Attempt(
                        _b64(uniq + actor + job.raw),
                        job,
                        definition,
                        "ACTOR_TASK_DEFINITION_EVENT",
                        start,
                        node,
                        worker,
                    )
                )
                continue
            job = user_jobs[i % len(user_jobs)]
            fn = FUNCS[i % len(FUNCS)]
            node_n = 1 + i % (k - 1) if k > 1 else 0
            worker = self.workers[node_n][(i // k) % 8]
            definition = self._definition(job, "NORMAL_TASK", _pyfunc("", fn), fn if i % 100 else f"{fn}-{i}", 0.25)
            failed = i % 100 == 37
            self.s.failed += failed
            task = _Attempt(
                _b64(uniq + b"\xff" * 12 + job.raw),
                job,
                definition,
                "TASK_DEFINITION_EVENT",
                start,
                self.nodes[node_n],
                worker,
                failed=failed,
                logs=True,
            )
            self._attempt(task)
            if failed and i % 200 == 37 and self.attempts < self.n_tasks:
                self.s.retried += 1
                self._attempt(dataclasses.replace(task, start=start + 50_000_000, attempt=1, failed=False))
        return i

    def _attempt(self, a: _Attempt) -> None:
        """Definition and the owner's lifecycle from the head; the executor's half
        (RUNNING, log info in two events, profile) from the executor's node."""
        self.attempts += 1
        clock, head = self.clock, self.head
        self.w.emit(head, a.job, a.event_type, {**a.definition, "taskId": a.task_id, "taskAttempt": a.attempt}, a.start)
        end = a.start + 2_000_000 + (self.attempts * 7919) % 30_000_000
        transitions = [
            {"state": st, "timestamp": clock(a.start + d)}
            for st, d in zip(OWNER_STATES, (0, 15_000, 800_000), strict=True)
        ]
        transitions.append({"state": "FAILED" if a.failed else "FINISHED", "timestamp": clock(end)})
        owner: dict[str, Any] = {
            "taskId": a.task_id,
            "taskAttempt": a.attempt,
            "jobId": a.job.b64,
            "stateTransitions": transitions,
            "nodeId": a.node.b64,
            "workerId": a.worker.b64,
            "workerPid": 0,
        }
        if a.failed:
            owner["rayErrorInfo"] = {
                "errorMessage": "User exception:\n\x1b[36mray::task()\x1b[39m failed\nValueError: synthetic",
                "errorType": "TASK_EXECUTION_EXCEPTION" if a.attempt else "WORKER_DIED",
            }
        executor = [] if a.failed and self.attempts % 2 else self._executor(a)  # a dead worker lost its half
        owner_first = self.attempts % 2 == 0  # streams are not chronological
        if owner_first:
            self.w.emit(head, a.job, "TASK_LIFECYCLE_EVENT", owner, end)
        for k, payload in enumerate(executor):
            self.w.emit(a.node, a.job, "TASK_LIFECYCLE_EVENT", payload, a.start + 900_000 + k)
        if not owner_first:
            self.w.emit(head, a.job, "TASK_LIFECYCLE_EVENT", owner, end)
        if executor:  # the executing worker reports its profile, as Ray 2.60 does for every task
            self._profile(a, end)

    def _executor(self, a: _Attempt) -> list[dict[str, Any]]:
        states = ["RUNNING"] if a.logs else ["PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY", "RUNNING"]
        start: dict[str, Any] = {
            "taskId": a.task_id,
            "taskAttempt": a.attempt,
            "jobId": a.job.b64,
            "workerPid": a.worker.pid,
            "nodeId": "",
            "workerId": "",
            "stateTransitions": [
                {"state": st, "timestamp": self.clock(a.start + 900_000 + k)} for k, st in enumerate(states)
            ],
        }
        if not a.logs:
            return [start]  # actor tasks never carry taskLogInfo
        base = f"/tmp/ray/{self.s.session}/logs/worker-{a.worker.hex}-{a.job.hex}-{a.worker.pid}"
        offset = (self.attempts * 40) % 1_000_000
        start["taskLogInfo"] = {
            "stdoutFile": base + ".out",
            "stderrFile": base + ".err",
            "stdoutStart": str(offset),
            "stderrStart": str(offset // 2),
        }
        end = {
            "taskId": a.task_id,
            "taskAttempt": a.attempt,
            "jobId": a.job.b64,
            "nodeId": "",
            "workerId": "",
            "workerPid": a.worker.pid,
            "taskLogInfo": {"stdoutEnd": str(offset + 40), "stderrEnd": str(offset // 2)},
        }
        return [start, end]

    def _profile(self, a: _Attempt, end: int) -> None:
        self.s.profiled += 1
        name = a.definition.get("taskName") or a.definition.get("actorTaskName") or ""
        entries = [
            {
                "eventName": event,
                "startTime": str(a.start + 900_000 + 1000 * k),
                "endTime": str(a.start + 901_000 + 1000 * k),
                "extraData": "{}",
            }
            for k, event in enumerate(("task:deserialize_arguments", "task:execute", "task:store_outputs"))
        ]
        entries.append(
            {
                "eventName": f"task::{name}",
                "startTime": str(a.start + 899_000),
                "endTime": str(end),
                "extraData": orjson.dumps({"name": f"__main__.{name}", "task_id": a.task_id}).decode(),
            }
        )
        self.w.emit(
            a.node,
            a.job,
            "TASK_PROFILE_EVENT",
            {
                "taskId": a.task_id,
                "attemptNumber": a.attempt,
                "jobId": a.job.b64,
                "profileEvents": {
                    "componentType": "worker",
                    "componentId": a.worker.b64,
                    "nodeIpAddress": a.node.ip,
                    "events": entries,
                },
            },
            end,
        )

    def _endings(self, t_end: int) -> None:
        """Actors die, jobs finish, the last worker node dies."""
        for a, (uniq, node, worker, _, job) in enumerate(self.actors):
            cause = {
                "actorDiedErrorContext": {
                    "errorMessage": "The actor is dead because all references to the actor were removed.",
                    "nodeIpAddress": node.ip,
                    "pid": worker.pid,
                    "reason": "OUT_OF_SCOPE",
                    "neverStarted": False,
                }
            }
            self.w.emit(
                self.head,
                None,
                "ACTOR_LIFECYCLE_EVENT",
                {
                    "actorId": _b64(uniq + job.raw),
                    "stateTransitions": [
                        {
                            "state": "DEAD",
                            "timestamp": self.clock(t_end + a),
                            "nodeId": "",
                            "workerId": "",
                            "pid": 0,
                            "port": 0,
                            "reprName": "",
                            "restartReason": "ACTOR_FAILURE",
                            "deathCause": cause,
                        }
                    ],
                },
                t_end + a,
            )
        for job in self.jobs[1:]:
            self.w.emit(
                self.head,
                job,
                "DRIVER_JOB_LIFECYCLE_EVENT",
                {"jobId": job.b64, "stateTransitions": [{"state": "FINISHED", "timestamp": self.clock(t_end)}]},
                t_end,
            )
        if len(self.nodes) > 1:
            self.w.emit(
                self.head,
                None,
                "NODE_LIFECYCLE_EVENT",
                {
                    "nodeId": self.nodes[-1].b64,
                    "stateTransitions": [
                        {
                            "timestamp": self.clock(t_end),
                            "state": "DEAD",
                            "deathInfo": {"reason": "UNEXPECTED_TERMINATION", "reasonMessage": "health check failed"},
                        }
                    ],
                },
                t_end,
            )


def jobs_snapshot(summary: SynthSummary, node_ip: str) -> list[dict[str, Any]]:
    """What the collector stores from ``/api/jobs/``: real statuses Ray never exports."""
    snapshot: list[dict[str, Any]] = []
    for j, job in enumerate(summary.jobs):
        failed = j == 1
        start = (BASE_NS // 1_000_000) + 1000 * j
        snapshot.append(
            {
                "type": "SUBMISSION",
                "job_id": job,
                "submission_id": f"raysubmit_synth{j:04d}",
                "driver_info": {"id": job, "node_ip_address": node_ip, "pid": str(20000 + j)},
                "status": "FAILED" if failed else "SUCCEEDED",
                "entrypoint": f"python job{j}.py",
                "message": "Job entrypoint command failed with exit code 3" if failed else "Job finished successfully.",
                "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR" if failed else None,
                "start_time": start,
                "end_time": start + 3_600_000,
                "metadata": {"owner": "synth"},
                "runtime_env": {"working_dir": "gcs://_ray_pkg_f95e4a6ff7e3c029.zip"},
                "driver_agent_http_address": f"http://{node_ip}:52365",
                "driver_node_id": summary.nodes[0],
                "driver_exit_code": 3 if failed else 0,
            }
        )
    snapshot.append(
        {
            "type": "SUBMISSION",
            "job_id": None,
            "submission_id": "raysubmit_synthEntrypointFailed",
            "driver_info": None,
            "status": "FAILED",
            "entrypoint": "python missing.py",
            "message": "Job entrypoint command failed with exit code 2",
            "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR",
            "start_time": BASE_NS // 1_000_000 - 5000,
            "end_time": BASE_NS // 1_000_000 - 4000,
            "metadata": {},
            "runtime_env": {},
            "driver_agent_http_address": f"http://{node_ip}:52365",
            "driver_node_id": summary.nodes[0],
            "driver_exit_code": 2,
        }
    )
    return snapshot


def _write_extras(store: ObjectStore, layout: KeyLayout, s: SynthSummary, *, logs: bool) -> None:
    cluster, session = s.cluster, s.session
    store.put_bytes(layout.endpoint_key(cluster, session, "/api/jobs/"), orjson.dumps(jobs_snapshot(s, "10.0.0.1")))
    store.put_bytes(layout.endpoint_key(cluster, session, "/timezone"), b'{"offset":"+00:00","value":"UTC"}')
    store.put_bytes(
        layout.endpoint_key(cluster, session, "/api/v0/cluster_metadata"),
        b'{"result":true,"msg":"","data":{"rayVersion":"2.60.0","pythonVersion":"3.11.7","rayInitCluster":false}}',
    )
    if not logs:
        return
    head = s.nodes[0]
    jobs_log = []
    for j in range(len(s.jobs)):
        sub = f"raysubmit_synth{j:04d}"
        for k, text in enumerate((f"Started a ray job {sub}.", f"Completed a ray job {sub} with a status SUCCEEDED.")):
            jobs_log.append(
                {
                    "event_id": f"{j:04d}{k:02d}" + "a" * 30,
                    "source_type": "JOBS",
                    "source_hostname": "head",
                    "source_pid": 9625,
                    "message": text,
                    "timestamp": str(BASE_NS // 10**9 + 10 * j + k),
                    "custom_fields": {"submission_id": sub},
                    "severity": "INFO",
                    "label": "",
                }
            )
    store.put_bytes(
        layout.log_key(cluster, session, head, "events/event_JOBS.log"),
        b"\n".join(orjson.dumps(e) for e in jobs_log) + b"\n",
    )
    raylet = {
        "custom_fields": {"job_id": s.jobs[0], "node_id": head},
        "event_id": "b" * 36,
        "host_name": "head",
        "label": "RAY_WORKER_FAILURE",
        "message": "A worker died.\\nSee its logs.",
        "pid": "9601",
        "severity": "ERROR",
        "source_type": "RAYLET",
        "timestamp": BASE_NS // 10**9 + 20,
    }
    store.put_bytes(layout.log_key(cluster, session, head, "events/event_RAYLET.log"), orjson.dumps(raylet) + b"\n")
    for n, node in enumerate(s.nodes):
        store.put_bytes(layout.log_key(cluster, session, node, "raylet.out"), f"raylet of node {n}\n".encode() * 50)
        store.put_bytes(layout.log_key(cluster, session, node, "debug_state.txt"), b"Node ID: " + node.encode() + b"\n")
    store.put_bytes(layout.log_key(cluster, session, head, "gcs_server.out"), b"gcs server started\n" * 20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, required=True, help="task attempts to generate")
    parser.add_argument("--out", required=True, help="local storage directory (created)")
    parser.add_argument("--gzip", action="store_true", help="gzip the event objects")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--cluster", default="synth")
    args = parser.parse_args(argv)
    from runtime.storage.config import StorageConfig, open_store

    store = open_store(StorageConfig(backend="local", local_dir=args.out, create_bucket=True))
    summary = write_synthetic_session(
        store,
        KeyLayout(""),
        ClusterRef(args.namespace, args.cluster),
        SESSION,
        args.tasks,
        n_nodes=args.nodes,
        n_jobs=args.jobs,
        gzip_events=args.gzip,
        seed=args.seed,
    )
    print(
        f"wrote {summary.attempts} task attempts, {summary.events} events in {summary.files} objects "
        f"({summary.bytes / 1e6:.1f} MB) to {args.out} in {summary.seconds:.1f}s; session {summary.session_prefix}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Small session indexes built straight from ``schema.DDL`` (no builder needed).

Rows follow the index contract: hex ids, ms times, ``error_type``/``detail`` (as plain JSON) in
the shape ``/api/v0/tasks`` answers. ``synthetic_tasks`` also feeds the
million-task latency check (``python -m tests.unit.server.queries.factory``).
"""

from __future__ import annotations

import random
import sqlite3
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from runtime.server.index.schema import DDL

DRIVER_PARENT = "f" * 40


@dataclass
class Task:
    task_id: str
    attempt: int = 0
    job_id: str = "02000000"
    actor_id: str = ""
    name: str = ""
    func_name: str = ""
    state: str = "FINISHED"
    type: str = "NORMAL_TASK"
    parent_task_id: str = ""
    node_id: str = "aa" * 28
    worker_id: str = "bb" * 28
    worker_pid: int = 100
    creation_ms: int | None = 1_000
    start_ms: int | None = None
    end_ms: int | None = None
    required_resources: dict[str, float] | None = field(default_factory=lambda: {"CPU": 1.0})
    error_type: str | None = None
    profiling_data: dict[str, Any] | None = None

    def brief(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "attempt_number": self.attempt,
            "name": self.name,
            "state": self.state,
            "job_id": self.job_id,
            "actor_id": self.actor_id or None,
            "type": self.type,
            "func_or_class_name": self.func_name,
            "parent_task_id": self.parent_task_id,
            "node_id": self.node_id or None,
            "worker_id": self.worker_id or None,
            "worker_pid": self.worker_pid or None,
            "error_type": self.error_type,
        }

    def extra(self) -> dict[str, Any]:
        events = [{"state": "PENDING_ARGS_AVAIL", "created_ms": float(self.creation_ms or 0)}]
        if self.state:
            events.append({"state": self.state, "created_ms": float(self.end_ms or self.creation_ms or 0)})
        profile = {} if self.profiling_data is None else {"profiling_data": self.profiling_data}
        return {
            "language": "PYTHON",
            "required_resources": self.required_resources,
            "runtime_env_info": {
                "serialized_runtime_env": "{}",
                "runtime_env_config": {"setup_timeout_seconds": 600, "eager_install": True, "log_files": []},
            },
            "placement_group_id": None,
            "events": events,
            **profile,
            "creation_time_ms": self.creation_ms,
            "start_time_ms": self.start_ms,
            "end_time_ms": self.end_ms,
            "task_log_info": None,
            "error_message": None,
            "is_debugger_paused": None,
            "call_site": None,
            "label_selector": {},
        }


def create_index(path: Path, *, page_size: int | None = None) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    if page_size:
        conn.execute(f"PRAGMA page_size = {int(page_size)}")  # as the builder does for big rows
    conn.executescript(DDL)
    return conn


def insert_tasks(conn: sqlite3.Connection, tasks: Iterable[Task]) -> None:
    conn.executemany(
        "INSERT INTO tasks (task_id, attempt, job_id, actor_id, name, func_name, state, type, parent_task_id,"
        " node_id, worker_id, worker_pid, creation_ms, start_ms, end_ms, error_type, detail)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            (
                t.task_id,
                t.attempt,
                t.job_id,
                t.actor_id,
                t.name,
                t.func_name,
                t.state,
                t.type,
                t.parent_task_id,
                t.node_id,
                t.worker_id,
                t.worker_pid,
                t.creation_ms,
                t.start_ms,
                t.end_ms,
                t.error_type,
                orjson.dumps(t.extra()),
            )
            for t in tasks
        ),
    )


def refresh_counts(conn: sqlite3.Connection) -> None:
    """Fill ``task_counts`` from ``tasks`` (what the builder does at the end)."""
    conn.execute("DELETE FROM task_counts")
    conn.execute(
        "INSERT INTO task_counts (job_id, state, type, name, func_name, n)"
        " SELECT job_id, state, type, name, func_name, COUNT(*) FROM tasks"
        " GROUP BY job_id, state, type, name, func_name"
    )


def insert_actor(
    conn: sqlite3.Connection,
    actor_id: str,
    *,
    job_id: str = "02000000",
    node_id: str = "",
    state: str = "ALIVE",
    class_name: str = "Actor",
    repr_name: str = "",
    required_resources: dict[str, float] | None = None,
    end_ms: int | None = None,
) -> None:
    actor: dict[str, Any] = {
        "actorId": actor_id,
        "jobId": job_id,
        "state": state,
        "address": {"nodeId": node_id, "ipAddress": "", "port": 0, "workerId": ""},
        "className": class_name,
        "actorClass": class_name,
        "reprName": repr_name,
        "numRestarts": "0",
    }
    if end_ms is not None:
        actor["endTime"] = end_ms
    conn.execute(
        "INSERT INTO actors (actor_id, job_id, node_id, state, class_name, repr_name, required_resources_json,"
        " actor_json) VALUES (?,?,?,?,?,?,?,?)",
        (
            actor_id,
            job_id,
            node_id,
            state,
            class_name,
            repr_name,
            None if required_resources is None else orjson.dumps(required_resources),
            orjson.dumps(actor),
        ),
    )


def task_id_for(n: int, job: str = "02000000", actor: str | None = None) -> str:
    """A 48-hex task id shaped like Ray's (unique prefix, actor or nil bytes, job)."""
    prefix = f"{n:016x}"
    middle = actor[:24] if actor else "f" * 24
    return f"{prefix}{middle}{job}"


def synthetic_tasks(
    count: int, *, seed: int = 7, jobs: int = 10, names: int = 50, actors: int = 1000
) -> Iterator[Task]:
    """``count`` attempts: mostly finished normal tasks, some failures and retries,
    a share of actor tasks; names and jobs from small sets (as real workloads)."""
    rng = random.Random(seed)
    states = ["FINISHED"] * 90 + ["FAILED"] * 6 + ["RUNNING"] * 2 + ["PENDING_NODE_ASSIGNMENT"] * 2
    for j in range(jobs):
        yield Task(
            task_id=task_id_for(0, f"{j + 1:08x}"),
            job_id=f"{j + 1:08x}",
            type="DRIVER_TASK",
            state="RUNNING",
            parent_task_id="",
        )
    for n in range(1, count + 1):
        job = f"{rng.randrange(jobs) + 1:08x}"
        ordinal = rng.getrandbits(63)
        if rng.random() < 0.2:
            actor = f"{rng.randrange(actors):024x}{job}"
            func = f"Actor{rng.randrange(5)}.method{rng.randrange(4)}"
            yield Task(
                task_id=task_id_for(ordinal, job, actor),
                job_id=job,
                actor_id=actor,
                name=func,
                func_name=func,
                type="ACTOR_TASK",
                state=rng.choice(states),
                creation_ms=1_700_000_000_000 + n,
                end_ms=1_700_000_000_500 + n,
            )
        else:
            func = f"func_{rng.randrange(names)}"
            yield Task(
                task_id=task_id_for(ordinal, job),
                job_id=job,
                name=func,
                func_name=func,
                state=rng.choice(states),
                parent_task_id=DRIVER_PARENT + job,
                creation_ms=1_700_000_000_000 + n,
                end_ms=1_700_000_000_500 + n,
            )


def build_synthetic(path: Path, count: int, *, page_size: int | None = None, analyze: bool = False) -> None:
    conn = create_index(path, page_size=page_size)
    batch: list[Task] = []
    for task in synthetic_tasks(count):
        batch.append(task)
        if len(batch) >= 50_000:
            insert_tasks(conn, batch)
            batch.clear()
    insert_tasks(conn, batch)
    refresh_counts(conn)
    if analyze:
        conn.execute("ANALYZE")
    conn.commit()
    conn.close()


if __name__ == "__main__":  # build a big index for latency checks
    target = Path(sys.argv[1])
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    started = time.perf_counter()
    build_synthetic(target, size, page_size=16384, analyze=True)
    sys.stderr.write(f"built {size} tasks in {time.perf_counter() - started:.1f}s\n")

"""Tasks the GCS marks FAILED without any task event saying so (Ray 2.60's rules).

Ray's GCS task manager fails a task attempt that has no terminal state (FINISHED or
FAILED) in two cases, and the live State API shows it so; no task event is exported
for either, so a stored session would show such a task RUNNING (or pending) forever:

* **its worker died**: one second after the death (``gcs_mark_task_failed_on_worker_dead_delay_ms``),
  every non-terminal attempt whose events named that worker becomes FAILED at the
  worker's end time, ``WORKER_DIED``, "Worker running the task (<worker>) died with
  exit_type: <n> with error_message: <exit detail>";
* **its job finished**: fifteen seconds after the driver exits
  (``gcs_mark_task_failed_on_job_done_delay_ms``), every non-terminal attempt of the
  job becomes FAILED at the job's end time, ``WORKER_DIED``, "Job finishes (<job>) as
  driver exits. Marking all non-terminal tasks as failed."

Whichever rule fires first (death + 1 s against job end + 15 s) wins, as in the GCS.
Observed against a live Ray 2.60 head (``tests/integration/server/test_gcs_task_failures.py``).
Worker deaths come from ``WORKER_LIFECYCLE_EVENT`` s, job ends from the driver job's
FINISHED transition; the builder collects both (:class:`WorkerDeaths`, the job table)
and hands them to the task renderers as a :class:`FailureContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from runtime.server.replay.ids import IdCache
from runtime.server.replay.timestamps import to_int, ts_ns

WORKER_DEAD_DELAY_MS = 1_000
JOB_DONE_DELAY_MS = 15_000
ERROR_TYPE = "WORKER_DIED"
#: Ray's WorkerExitType (common.proto); the GCS prints the number.
EXIT_TYPES = {
    "SYSTEM_ERROR": 0,
    "INTENDED_SYSTEM_EXIT": 1,
    "USER_ERROR": 2,
    "INTENDED_USER_EXIT": 3,
    "NODE_OUT_OF_MEMORY": 4,
}


def worker_died_message(worker: str, exit_type: int, detail: str) -> str:
    return f"Worker running the task ({worker}) died with exit_type: {exit_type} with error_message: {detail}"


def job_finished_message(job: str) -> str:
    return f"Job finishes ({job}) as driver exits. Marking all non-terminal tasks as failed."


@dataclass(frozen=True, slots=True)
class GcsFailure:
    """The FAILED transition (ms) and error the GCS gives an attempt."""

    ms: int
    error_type: str
    message: str


@dataclass(slots=True)
class FailureContext:
    """What the rules need of the rest of the session: hex worker id -> (end ms,
    exit type number, exit detail) of dead workers, hex job id -> end ms of finished jobs."""

    worker_deaths: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    job_ends: dict[str, int] = field(default_factory=dict)

    def failure(self, worker: str, job: str) -> GcsFailure | None:
        """The GCS's failure of a non-terminal attempt that ran on ``worker`` for ``job``."""
        death = self.worker_deaths.get(worker) if worker else None
        job_end = self.job_ends.get(job) if job else None
        if death is not None and (job_end is None or death[0] + WORKER_DEAD_DELAY_MS <= job_end + JOB_DONE_DELAY_MS):
            return GcsFailure(death[0], ERROR_TYPE, worker_died_message(worker, death[1], death[2]))
        if job_end is not None:
            return GcsFailure(job_end, ERROR_TYPE, job_finished_message(job))
        return None

    def to_json(self) -> bytes:
        return orjson.dumps({"workers": self.worker_deaths, "jobs": self.job_ends})

    @classmethod
    def from_json(cls, data: bytes) -> FailureContext:
        parsed = orjson.loads(data)
        workers = {str(k): (int(v[0]), int(v[1]), str(v[2])) for k, v in parsed.get("workers", {}).items()}
        return cls(workers, {str(k): int(v) for k, v in parsed.get("jobs", {}).items()})


class WorkerDeaths:
    """``WORKER_LIFECYCLE_EVENT`` s: the DEAD transitions (the first, if several)."""

    def __init__(self, ids: IdCache) -> None:
        self._ids = ids
        self.deaths: dict[str, tuple[int, int, str]] = {}

    def lifecycle(self, payload: dict[str, Any]) -> bool:
        worker = self._ids(payload.get("workerId"))
        transitions = payload.get("stateTransitions")
        if not worker or type(transitions) is not list:
            return False
        for transition in transitions:
            if type(transition) is not dict or transition.get("state") != "DEAD":
                continue
            end_ms = to_int(transition.get("endTimeMs"))
            if not end_ms:
                ns = ts_ns(transition.get("timestamp"))
                end_ms = ns // 1_000_000 if ns is not None else 0
            if not end_ms:
                continue
            info = transition.get("deathInfo")
            info = info if type(info) is dict else {}
            exit_type = info.get("exitType")
            number = EXIT_TYPES.get(exit_type, 0) if isinstance(exit_type, str) else to_int(exit_type)
            found = self.deaths.get(worker)
            if found is None or end_ms < found[0]:
                self.deaths[worker] = (end_ms, number, str(info.get("exitDetail") or ""))
        return True

"""Small builders of Ray 2.60-shaped events for the replay tests."""

from __future__ import annotations

import base64
import itertools
from typing import Any

TASK_RAW = bytes.fromhex("0021899358e75e3cffffffffffffffffffffffff02000000")
TASK_B64 = base64.b64encode(TASK_RAW).decode()
TASK_HEX = TASK_RAW.hex()
JOB_B64 = "AgAAAA=="
NODE_B64 = "mPiDz+MM6ADHqsY+deJ5TUjvrFRlDd5uJ54seA=="
NODE_HEX = base64.b64decode(NODE_B64).hex()
WORKER_B64 = "kHK/+wR4A5JFlr+MZxDh9IwliZ+D5qR4HRNgeA=="
WORKER_HEX = base64.b64decode(WORKER_B64).hex()
_ids = itertools.count(1)


def ts(seconds: float, nanos: int = 0) -> str:
    whole = int(seconds)
    return f"2026-11-22T01:45:{whole:02d}.{nanos:09d}Z"


def envelope(event_type: str, key: str, payload: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    return {
        "eventId": event_id or base64.b64encode(next(_ids).to_bytes(28, "big")).decode(),
        "sourceType": "CORE_WORKER",
        "eventType": event_type,
        "timestamp": ts(59),
        "severity": "INFO",
        "sessionName": "session_2026-11-22_01-45-25_333080_9264",
        key: payload,
        "nodeId": NODE_B64,
        "message": "",
    }


def definition(task: str = TASK_B64, attempt: int = 0, name: str = "parent-task", **extra: Any) -> dict[str, Any]:
    payload = {
        "taskId": task,
        "taskAttempt": attempt,
        "taskType": "NORMAL_TASK",
        "language": "PYTHON",
        "taskFunc": {"pythonFunctionDescriptor": {"moduleName": "workload", "className": "", "functionName": "parent"}},
        "taskName": name,
        "requiredResources": {"CPU": 0.25},
        "jobId": JOB_B64,
        "parentTaskId": "//////////////////////////8CAAAA",
        "placementGroupId": "////////////////////////",
        "serializedRuntimeEnv": "{}",
        "refIds": {},
        "labelSelector": {},
        **extra,
    }
    return envelope("TASK_DEFINITION_EVENT", "taskDefinitionEvent", payload)


def lifecycle(
    task: str = TASK_B64, attempt: int = 0, states: tuple[tuple[str, str], ...] = (), **extra: Any
) -> dict[str, Any]:
    payload: dict[str, Any] = {"taskId": task, "taskAttempt": attempt, "jobId": JOB_B64, **extra}
    if states:
        payload["stateTransitions"] = [{"state": state, "timestamp": when} for state, when in states]
    return envelope("TASK_LIFECYCLE_EVENT", "taskLifecycleEvent", payload)


def owner(task: str = TASK_B64, attempt: int = 0, end: str = "FINISHED", **extra: Any) -> dict[str, Any]:
    states = (
        ("PENDING_ARGS_AVAIL", ts(1)),
        ("PENDING_NODE_ASSIGNMENT", ts(1, 500)),
        ("SUBMITTED_TO_WORKER", ts(2)),
        (end, ts(9)),
    )
    return lifecycle(task, attempt, states, nodeId=NODE_B64, workerId=WORKER_B64, workerPid=0, **extra)


def executor(task: str = TASK_B64, attempt: int = 0, **extra: Any) -> dict[str, Any]:
    return lifecycle(task, attempt, (("RUNNING", ts(3)),), nodeId="", workerId="", workerPid=10258, **extra)


def profile_entry(name: str, start: int, end: int, extra: str = "{}") -> dict[str, Any]:
    """One entry as Ray 2.60 writes it: times as strings of int64 ns."""
    return {"eventName": name, "startTime": str(start), "endTime": str(end), "extraData": extra}


def profile(task: str = TASK_B64, attempt: int = 0, entries: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """An executor's TASK_PROFILE_EVENT, shaped like the captured ones (runB)."""
    start = 1_795_311_945_003_300_000
    if entries is None:
        entries = [
            profile_entry("task:deserialize_arguments", start, start + 1000),
            profile_entry("task:execute", start + 1000, start + 2000),
            profile_entry("task:store_outputs", start + 2000, start + 3000),
            profile_entry("task::work", start - 1000, start + 4000, '{"name":"__main__.work","task_id":"x"}'),
        ]
    payload = {
        "taskId": task,
        "attemptNumber": attempt,
        "jobId": JOB_B64,
        "profileEvents": {
            "componentType": "worker",
            "componentId": WORKER_B64,
            "nodeIpAddress": "192.0.2.2",
            "events": entries,
        },
        **extra,
    }
    return envelope("TASK_PROFILE_EVENT", "taskProfileEvents", payload)

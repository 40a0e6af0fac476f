"""Driver jobs (``DRIVER_JOB_DEFINITION``/``LIFECYCLE`` events) as ``/api/jobs/``
objects, merged with the collector's stored snapshot of ``/api/jobs/``.

Ray exports no job status (a FINISHED driver may have failed), so the snapshot
decides status, submission id, message, error type, times, entrypoint, metadata,
runtime env and driver info; jobs only the snapshot knows (an entrypoint that
failed before ``ray.init`` has ``job_id: null``) are listed under their submission
id. Without a snapshot an unknown status stays ``""``: it is never guessed.
Internal jobs without a driver-job event (the dashboard's 01000000) are not jobs
here, as in Ray's own list.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from runtime.server.replay.ids import IdCache
from runtime.server.replay.timestamps import to_int, ts_ns

logger = logging.getLogger(__name__)

#: Snapshot fields that always win over event-derived values.
SNAPSHOT_WINS = (
    "status",
    "submission_id",
    "message",
    "error_type",
    "start_time",
    "end_time",
    "entrypoint",
    "metadata",
    "runtime_env",
    "driver_info",
)
#: Metadata keys Ray's job manager adds to the driver config; /api/jobs/ shows user metadata only.
_INTERNAL_METADATA = ("job_submission_id", "job_name")


@dataclass(slots=True)
class Job:
    job_id: str
    definition: dict[str, Any] | None = None
    transitions: set[tuple[int, str]] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class JobRow:
    job_key: str
    job_id: str | None
    submission_id: str | None
    sort_key: int
    job_json: bytes


class JobTable:
    def __init__(self, ids: IdCache) -> None:
        self._ids = ids
        self.jobs: dict[str, Job] = {}

    def _get(self, raw: object) -> Job | None:
        if not raw:
            return None
        job_id = self._ids(raw)
        job = self.jobs.get(job_id)
        if job is None:
            job = self.jobs[job_id] = Job(job_id)
        return job

    def definition(self, payload: dict[str, Any]) -> bool:
        job = self._get(payload.get("jobId"))
        if job is None:
            return False
        job.definition = payload
        return True

    def lifecycle(self, payload: dict[str, Any]) -> bool:
        transitions = payload.get("stateTransitions")
        job = self._get(payload.get("jobId")) if transitions else None
        if job is None or type(transitions) is not list:
            return False
        for transition in transitions:
            if type(transition) is dict:
                ns = ts_ns(transition.get("timestamp"))
                if ns is not None:
                    job.transitions.add((ns, str(transition.get("state") or "")))
        return True

    def ends_ms(self) -> dict[str, int]:
        """Hex job id -> end (ms) of each job whose last transition is FINISHED."""
        ends = {}
        for job in self.jobs.values():
            ns = _finished_ns(job)
            if ns is not None:
                ends[job.job_id] = ns // 1_000_000
        return ends

    def event_objects(self, node_ips: dict[str, str]) -> dict[str, dict[str, Any]]:
        """Hex job id -> the /api/jobs/ object derived from events alone."""
        return {job.job_id: self._render(job, node_ips) for job in self.jobs.values()}

    def _render(self, job: Job, node_ips: dict[str, str]) -> dict[str, Any]:
        d = job.definition or {}
        config: dict[str, Any] = d["config"] if isinstance(d.get("config"), dict) else {}
        metadata: dict[str, Any] | None = config["metadata"] if isinstance(config.get("metadata"), dict) else None
        submission_id = d.get("submissionId") or (metadata or {}).get("job_submission_id") or None
        if metadata is not None:
            metadata = {
                k: v
                for k, v in metadata.items()
                if k not in _INTERNAL_METADATA or (k == "job_name" and v != submission_id)
            }
        ordered = sorted(job.transitions)
        start = next((ns for ns, state in ordered if state == "CREATED"), None)
        last = ordered[-1][1] if ordered else ""
        end = _finished_ns(job)
        status = str(d.get("status") or "") or ("RUNNING" if last == "CREATED" else "")
        driver_node = self._ids(d.get("driverNodeId")) if d.get("driverNodeId") else None
        obj: dict[str, Any] = {
            "type": str(d.get("type") or "") or ("SUBMISSION" if submission_id else "DRIVER"),
            "job_id": job.job_id,
            "submission_id": submission_id,
            "driver_info": {
                "id": job.job_id,
                "node_ip_address": str(d.get("driverNodeIpAddress") or node_ips.get(driver_node or "", "")),
                "pid": str(to_int(d.get("driverPid"))) if d.get("driverPid") not in (None, "") else "",
            },
            "status": status,
            "entrypoint": str(d.get("entrypoint") or ""),
            "message": d.get("message") or None,
            "error_type": d.get("errorType") or None,
        }
        if start is not None:
            obj["start_time"] = start // 1_000_000
        if end is not None:
            obj["end_time"] = end // 1_000_000
        obj["metadata"] = metadata
        obj["runtime_env"] = _runtime_env(d, config)
        obj["driver_agent_http_address"] = d.get("driverAgentHttpAddress") or None
        obj["driver_node_id"] = driver_node
        obj["driver_exit_code"] = d.get("driverExitCode")
        return obj


def _finished_ns(job: Job) -> int | None:
    """When the job finished (ns): its last transition, if that is FINISHED."""
    if not job.transitions:
        return None
    ns, state = max(job.transitions)
    return ns if state == "FINISHED" else None


def _runtime_env(d: dict[str, Any], config: dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(d.get("runtimeEnv"), dict):
        return dict(d["runtimeEnv"])
    serialized = config.get("serializedRuntimeEnv")
    if not isinstance(serialized, str) or not serialized:
        return None
    try:
        env = orjson.loads(serialized)
    except orjson.JSONDecodeError:
        return None
    return env if isinstance(env, dict) else None


def parse_snapshot(data: bytes | None) -> list[dict[str, Any]]:
    """The stored ``/api/jobs/`` answer (a bare list); anything else is ignored."""
    if not data:
        return []
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        logger.warning("stored /api/jobs/ snapshot is not JSON; using events only")
        return []
    if isinstance(parsed, dict) and isinstance(parsed.get("data"), list):  # tolerate an envelope
        parsed = parsed["data"]
    if not isinstance(parsed, list):
        logger.warning("stored /api/jobs/ snapshot is not a list; using events only")
        return []
    return [job for job in parsed if isinstance(job, dict)]


def merge_jobs(events: dict[str, dict[str, Any]], snapshot: list[dict[str, Any]]) -> list[JobRow]:
    """Event-derived jobs merged with the snapshot's; one row per job."""
    merged: dict[str, dict[str, Any]] = {job_id: dict(obj) for job_id, obj in events.items()}
    by_submission = {obj["submission_id"]: job_id for job_id, obj in merged.items() if obj.get("submission_id")}
    for snap in snapshot:
        raw_id = snap.get("job_id")
        job_id = str(raw_id).lower() if raw_id else None
        submission = snap.get("submission_id") or None
        key = job_id if job_id in merged else by_submission.get(submission) if submission else None
        if key is None:
            key = job_id or (str(submission) if submission else None)
            if key is None:
                continue
            merged[key] = dict(snap)
            continue
        target = merged[key]
        for name, value in snap.items():
            if name in SNAPSHOT_WINS or (value is not None and name != "job_id"):
                target[name] = value
    rows = []
    for key, obj in merged.items():
        job_id = obj.get("job_id")
        submission = obj.get("submission_id")
        rows.append(
            JobRow(
                job_key=key,
                job_id=str(job_id) if job_id else None,
                submission_id=str(submission) if submission else None,
                sort_key=to_int(obj.get("start_time")),
                job_json=orjson.dumps(obj),
            )
        )
    rows.sort(key=lambda row: (row.sort_key, row.job_key))
    return rows

"""What the head snapshots from the dashboard, and the per-session memory that
decides when each endpoint is fetched again.

Three kinds of endpoint:

* fetch-once (``/api/v0/cluster_metadata``, ``/timezone``): stored once per
  session, retried with back-off until then (:class:`OnceState`);
* polled (Serve applications, placement groups, jobs, plus the configured
  extras): stored on every poll (:func:`polled_endpoints`);
* per-job Ray Data datasets: fetched for each job of the job list until a
  terminal job's datasets are stored, or found empty too often
  (:class:`DatasetPollState`).

Pure state, no I/O: :class:`~runtime.collector.snapshots.SnapshotRecorder` fetches and stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import endpoint_storage_name

CLUSTER_METADATA_URI = "/api/v0/cluster_metadata"
TIMEZONE_URI = "/timezone"
SERVE_URI = "/api/serve/applications/"
PLACEMENT_GROUPS_URI = "/api/v0/placement_groups?detail=1&limit=10000"
JOBS_URI = "/api/jobs/"
DATASETS_URI = "/api/data/datasets/{job_id}"
#: Its ``session_name`` says which Ray session the dashboard answers for.
VERSION_URI = "/api/version"

FETCH_ONCE: tuple[tuple[str, str], ...] = ((CLUSTER_METADATA_URI, "cluster_metadata"), (TIMEZONE_URI, "timezone"))
BUILTIN_POLLED: tuple[tuple[str, str], ...] = (
    (SERVE_URI, "serve"),
    (PLACEMENT_GROUPS_URI, "placement_groups"),
    (JOBS_URI, "jobs"),
)
TERMINAL_JOB_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
#: Empty dataset answers after a job turned terminal before it is given up on:
#: stats can land slightly after the job ends, so one empty answer is not final.
EMPTY_TERMINAL_CAP = 2
BACKOFF_INITIAL = 5.0
BACKOFF_MAX = 60.0


def polled_endpoints(extras: tuple[str, ...]) -> tuple[tuple[tuple[str, str], ...], list[tuple[str, InvalidKeyError]]]:
    """(uri, metric name) of the built-ins then the extras, deduplicated by storage
    key (two URIs with one key would overwrite each other); and the extras that
    cannot be stored at all, with the reason, for the caller to report."""
    seen = {endpoint_storage_name(uri) for uri, _ in BUILTIN_POLLED}
    result = list(BUILTIN_POLLED)
    invalid: list[tuple[str, InvalidKeyError]] = []
    for uri in extras:
        try:
            key = endpoint_storage_name(uri)
        except InvalidKeyError as exc:
            invalid.append((uri, exc))
            continue
        if key not in seen:
            seen.add(key)
            result.append((uri, "extra"))
    return tuple(result), invalid


@dataclass
class OnceState:
    """Progress of one fetch-once endpoint in the current session."""

    stored: bool = False
    gave_up: bool = False
    backoff: float = BACKOFF_INITIAL
    next_try: float = 0.0

    def retry_later(self, now: float) -> None:
        """Not stored this time: wait, twice as long as last time (capped)."""
        self.next_try = now + self.backoff
        self.backoff = min(self.backoff * 2, BACKOFF_MAX)


def fresh_once_states() -> dict[str, OnceState]:
    return {uri: OnceState() for uri, _ in FETCH_ONCE}


@dataclass
class DatasetPollState:
    """Per-session memory of the Ray Data per-job state machine."""

    terminal_stored: set[str] = field(default_factory=set)
    empty_runs: dict[str, int] = field(default_factory=dict)

    def should_fetch(self, job_id: str, final: bool) -> bool:
        # Stored terminal jobs never again; the empty cap binds periodic polls only.
        if job_id in self.terminal_stored:
            return False
        return final or self.empty_runs.get(job_id, 0) < EMPTY_TERMINAL_CAP

    def record(self, job_id: str, terminal: bool, stored: bool) -> None:
        # Empties while RUNNING/PENDING do not count: stats come as the job runs.
        if terminal and stored:
            self.terminal_stored.add(job_id)
        elif terminal:
            self.empty_runs[job_id] = self.empty_runs.get(job_id, 0) + 1


def served_session(body: bytes) -> str | None:
    """The session a dashboard answers for (``/api/version``'s ``session_name``); None
    when the answer does not say."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    name = value.get("session_name") if isinstance(value, dict) else None
    return name if isinstance(name, str) and name else None

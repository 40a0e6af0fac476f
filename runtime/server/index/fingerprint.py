"""Fingerprints of a stored session, to tell whether a built index is still current.

``events_fingerprint`` covers every object the build replays: the event objects
(``<node>/node_events/<file>``, ``<node>/job_events/<job>/<file>`` with valid
names) and also the two other build inputs, the log-event files
(``<node>/logs/events/event_*.log``, the ``/events`` data) and the stored
``/api/jobs/`` snapshot (job status), so a late upload of either re-indexes rather
than leaving stale answers. ``objects_fingerprint`` covers every object; when only
it changes (new logs), the object list alone is refreshed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from runtime.storage.base import ObjectInfo
from runtime.storage.layout import endpoint_storage_name
from runtime.storage.session_keys import (
    EndpointSnapshot,
    LogFile,
    SessionKey,
    is_readable_event_file,
    parse_session_key,
    relative_key,
)

#: The stored ``/api/jobs/`` answer: job status the events alone do not carry.
JOBS_SNAPSHOT = endpoint_storage_name("/api/jobs/")


def is_jobs_snapshot(item: SessionKey | None) -> bool:
    return isinstance(item, EndpointSnapshot) and item.name == JOBS_SNAPSHOT


def is_log_events(item: SessionKey | None) -> bool:
    return isinstance(item, LogFile) and item.is_log_events


def is_build_input(item: SessionKey | None) -> bool:
    return is_readable_event_file(item) or is_jobs_snapshot(item) or is_log_events(item)


def _digest(entries: Iterable[tuple[str, int, str]]) -> str:
    h = hashlib.sha256()
    for rel, size, version in sorted(entries):
        h.update(f"{rel}\0{size}\0{version}\n".encode())
    return h.hexdigest()


def fingerprints(listing: Sequence[ObjectInfo], session_prefix: str) -> tuple[str, str]:
    """(events_fingerprint, objects_fingerprint) as hex digests of sorted (rel key, size, version)."""
    everything = [(relative_key(info.key, session_prefix), info.size, info.version or "") for info in listing]
    events = [entry for entry in everything if is_build_input(parse_session_key(entry[0]))]
    return _digest(events), _digest(everything)

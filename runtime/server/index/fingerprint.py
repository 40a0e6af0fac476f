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

from runtime.server.replay.log_events import is_log_event_key
from runtime.storage.base import ObjectInfo
from runtime.storage.layout import (
    ENDPOINTS_DIR,
    JOB_EVENTS_DIR,
    NODE_EVENTS_DIR,
    endpoint_storage_name,
    is_event_file_name,
)

JOBS_SNAPSHOT = f"{ENDPOINTS_DIR}/{endpoint_storage_name('/api/jobs/')}"


def rel_key(key: str, session_prefix: str) -> str:
    return key[len(session_prefix) :] if key.startswith(session_prefix) else key


def is_event_object(rel: str) -> bool:
    """An export-event object the history server reads (server.md §2.1, §6.2)."""
    parts = rel.split("/")
    if len(parts) == 3 and parts[1] == NODE_EVENTS_DIR:
        return is_event_file_name(parts[2])
    if len(parts) == 4 and parts[1] == JOB_EVENTS_DIR and parts[2]:
        return is_event_file_name(parts[3])
    return False


def is_build_input(rel: str) -> bool:
    return is_event_object(rel) or rel == JOBS_SNAPSHOT or is_log_event_key(rel)


def _digest(entries: Iterable[tuple[str, int, str]]) -> str:
    h = hashlib.sha256()
    for rel, size, version in sorted(entries):
        h.update(f"{rel}\0{size}\0{version}\n".encode())
    return h.hexdigest()


def fingerprints(listing: Sequence[ObjectInfo], session_prefix: str) -> tuple[str, str]:
    """(events_fingerprint, objects_fingerprint) as hex digests of sorted (rel key, size, version)."""
    everything = [(rel_key(info.key, session_prefix), info.size, info.version or "") for info in listing]
    events = [entry for entry in everything if is_build_input(entry[0])]
    return _digest(events), _digest(everything)

"""A ``SessionName`` (from a Grafana URL or a PromQL matcher) to the stored session it
names, the caller's right to read it, and its time window once it has ended.

Sessions are known from the collector's markers, which a running cluster's collector
writes too, so live sessions are found the same way. A name no stored session has is
404; a session in a namespace the caller may not read is 403 (each decision audited by
:func:`runtime.server.auth.authorize`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from runtime.server.auth import authorize
from runtime.server.context import Services
from runtime.server.errors import ApiError
from runtime.server.grafana.window import Window
from runtime.server.session_end import has_ended
from runtime.server.sessions import StoredSession, stored_sessions
from runtime.storage.errors import InvalidKeyError, StorageError
from runtime.storage.layout import validate_session_name

logger = logging.getLogger(__name__)

#: The last moment of each node (its ended form once the session is over); the max is
#: the session's end as the index build computed it (``replay.ended``).
_END_SQL = (
    "SELECT max(CAST(json_extract(COALESCE(ended_json, node_json), '$.raylet.endTimeMs') AS INTEGER)),"
    " min(NULLIF(CAST(json_extract(node_json, '$.raylet.startTimeMs') AS INTEGER), 0)) FROM nodes"
)


def readable_session(name: str) -> StoredSession:
    """The stored session ``name`` names, if the caller may read its namespace."""
    try:
        validate_session_name(name)
    except InvalidKeyError as exc:
        raise ApiError(400, f"SessionName {name!r}: {exc}") from None
    try:
        found = next((s for s in stored_sessions().current() if s.session == name), None)
    except StorageError as exc:
        logger.warning("cannot list stored sessions to find %s: %s", name, exc)
        raise ApiError(503, f"cannot list stored sessions: {exc}", headers={"Retry-After": "5"}) from exc
    if found is None:
        raise ApiError(404, f"SessionName {name}: no stored session has this name")
    authorize(found.cluster.namespace, found.cluster.name, found.session)  # ForbiddenError: 403
    return found


def readable_sessions(names: Iterable[str]) -> list[StoredSession]:
    return [readable_session(name) for name in sorted(set(names))]


def ended_window(services: Services, stored: StoredSession) -> Window | None:
    """The session's window once it has ended; None while it may still run (its
    Grafana URLs then pass through unchanged)."""
    cluster, session = stored.cluster, stored.session
    ended = has_ended(services, cluster, session, stored.created_at, None)
    if not ended and not services.indexes.is_indexed(cluster, session):
        return None  # only its end marker could tell, and no index is built to read it
    index = services.indexes.open(cluster, session)
    try:
        if not ended and not has_ended(services, cluster, session, stored.created_at, index):
            return None
        row = index.row(_END_SQL)
    finally:
        index.close()
    created_ms = int(stored.created_at.timestamp() * 1000)
    end_ms, first_ms = (row or (None, None))[0], (row or (None, None))[1]
    # The nodes' own start beats the name's (a head's clock zone is not always UTC).
    start_ms = int(first_ms) if first_ms else created_ms
    if not end_ms:  # no node ever reported: show the hour after the start
        end_ms = start_ms + 3600_000
    return Window.padded(start_ms, int(end_ms))

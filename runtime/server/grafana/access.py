"""A ``SessionName`` (from a Grafana URL or a PromQL matcher) to the stored session it
names, the caller's right to read it, and its time window once it has ended.

Sessions are known from the collector's markers, which a running cluster's collector
writes too, so live sessions are found the same way. The namespace here comes from a
lookup, not from the caller, so a session in a namespace the caller may not read is
answered exactly as a name no stored session has: the same 404, naming no namespace
(the refusal is still in the audit log, :func:`runtime.server.auth.authorize`).
Otherwise the answer would tell the caller that the session exists, and where.

A session name is not unique across clusters (two namespaces may hold the same one),
and a PromQL matcher ``SessionName="<name>"`` selects the series of *every* cluster
with that name. So every stored session of that name must be readable; one that is
not makes the name unreadable (404), rather than serving only the readable ones,
whose pin would still let Prometheus return the other namespace's series.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from runtime.server.auth import ForbiddenError, authorize
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
    """The stored session ``name`` names (the first listed, if clusters share the name) when the
    caller may read every stored session of that name; 404 otherwise, 503 when the
    authorizer cannot be asked."""
    try:
        validate_session_name(name)
    except InvalidKeyError as exc:
        raise ApiError(400, f"SessionName {name!r}: {exc}") from None
    try:
        found = [s for s in stored_sessions().current() if s.session == name]
    except StorageError as exc:
        logger.warning("cannot list stored sessions to find %s: %s", name, exc)
        raise ApiError(503, f"cannot list stored sessions: {exc}", headers={"Retry-After": "5"}) from exc
    if not found:
        raise _absent(name)
    for stored in found:
        try:
            authorize(stored.cluster.namespace, stored.cluster.name, stored.session)
        except ForbiddenError:
            raise _absent(name) from None  # audited as a denial; the caller learns nothing more
    return found[0]


def _absent(name: str) -> ApiError:
    return ApiError(404, f"SessionName {name}: no stored session you may read has this name")


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

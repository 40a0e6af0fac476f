"""Whether the session a request is about has ended, for the state routes (nodes and
actors DEAD at its end) and the Grafana proxy (its absolute time window): one place
gathering the inputs of :func:`runtime.server.queries.ended.session_ended`.

Every input is cheap: the live listing and the stored-session listing are short-TTL
caches, and the collector's end marker is looked up in the index's object list, which
the index cache re-lists every ``--freshness`` seconds.
"""

from __future__ import annotations

import logging
from datetime import datetime

from runtime.server.context import Services
from runtime.server.index.reader import SessionIndex
from runtime.server.queries.ended import session_ended
from runtime.server.sessions import stored_sessions
from runtime.storage.errors import StorageError
from runtime.storage.layout import SESSION_ENDED_NAME, ClusterRef

logger = logging.getLogger(__name__)

_MARKED_SQL = "SELECT 1 FROM objects WHERE rel_key = ?"


def has_ended(
    services: Services, cluster: ClusterRef, session: str, created_at: datetime | None, index: SessionIndex | None
) -> bool:
    """The rule of :mod:`runtime.server.queries.ended` for one stored session. A failed
    listing means "may be running" (its nodes are then shown as the events left them).
    Without ``index`` the end marker is not looked at (no index is built to find it)."""
    key = (cluster.namespace, cluster.name)
    listing = services.live.list_clusters()
    live = {(c.namespace, c.name) for c in listing.clusters} if listing.available else None
    try:
        sessions = stored_sessions().current() if created_at is not None else []
    except StorageError as exc:
        logger.warning("cannot list stored sessions to tell whether %s ended: %s", session, exc)
        sessions = []
    newer = (((s.cluster.namespace, s.cluster.name), s.created_at) for s in sessions)  # newest first, lazily
    marked = index is not None and index.scalar(_MARKED_SQL, (SESSION_ENDED_NAME,)) is not None
    return session_ended(key, created_at, newer, live, marked=marked)

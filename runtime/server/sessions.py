"""Stored sessions, from the ``cluster-metadata/`` markers, behind a short TTL.

KubeRay's Go history server lists every marker on every ``/clusters`` and
``/enter_cluster``; here one listing serves all requests of a few seconds (per
process). A lookup that misses refreshes once before answering "not found", so a
session stored a moment ago can still be entered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from flask import current_app

from runtime.server.selection import LATEST
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import RAYCLUSTER, ClusterRef, KeyLayout

logger = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 5.0
_EXTENSION = "historyserver.sessions"


@dataclass(frozen=True)
class StoredSession:
    """One stored session of one cluster."""

    cluster: ClusterRef
    session: str
    created_at: datetime


class StoredSessions:
    """The decoded marker listing, newest first, re-read at most every ``ttl`` s."""

    def __init__(
        self,
        store: ObjectStore,
        layout: KeyLayout,
        ttl: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.layout = layout
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: list[StoredSession] | None = None
        self._read_at = 0.0

    def current(self, *, refresh: bool = False) -> list[StoredSession]:
        """All stored sessions, newest first. Storage errors propagate."""
        with self._lock:
            now = self._clock()
            if refresh or self._sessions is None or now - self._read_at >= self.ttl:
                self._sessions = self._read()
                self._read_at = self._clock()
            return self._sessions

    def _read(self) -> list[StoredSession]:
        found: list[StoredSession] = []
        for info in self.store.walk(self.layout.markers_prefix()):
            try:
                marker = self.layout.parse_marker_key(info.key)
            except InvalidKeyError as exc:
                logger.debug("skipping marker: %s", exc)
                continue
            found.append(StoredSession(marker.cluster, marker.session, marker.created_at))
        found.sort(key=lambda s: (s.created_at, s.session), reverse=True)
        return found

    def find(self, namespace: str, kind: str, name: str, session: str) -> StoredSession | None:
        """The stored session entered as ``/enter_cluster/ns/kind/name/session``.

        ``raycluster`` matches the cluster name whatever its owner; ``rayjob`` and
        ``rayservice`` match the owner. ``latest`` (or ``""``) = the newest match.
        """
        found = _pick(self.current(), namespace, kind, name, session)
        if found is None:
            found = _pick(self.current(refresh=True), namespace, kind, name, session)
        return found


def _pick(sessions: list[StoredSession], namespace: str, kind: str, name: str, session: str) -> StoredSession | None:
    for candidate in sessions:  # newest first, so the first match is the latest
        cluster = candidate.cluster
        if cluster.namespace != namespace:
            continue
        if kind == RAYCLUSTER:
            if cluster.name != name:
                continue
        elif cluster.owner_kind != kind or cluster.owner_name != name:
            continue
        if session in ("", LATEST) or candidate.session == session:
            return candidate
    return None


def stored_sessions() -> StoredSessions:
    """The app's shared :class:`StoredSessions` (created on first use)."""
    from runtime.server.context import services

    found: StoredSessions | None = current_app.extensions.get(_EXTENSION)
    if found is None:
        svc = services()
        try:
            ttl = float(svc.config.extra.get("sessions_ttl_seconds", DEFAULT_TTL_SECONDS))
        except ValueError:
            ttl = DEFAULT_TTL_SECONDS
        found = current_app.extensions.setdefault(_EXTENSION, StoredSessions(svc.store, svc.layout, ttl))
    return found

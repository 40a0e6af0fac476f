"""Stored sessions, from the ``cluster-metadata/`` markers, behind a short TTL.

KubeRay's Go history server lists every marker on every ``/clusters`` and
``/enter_cluster``; here one listing serves all requests of a few seconds (per
process). A lookup that misses refreshes once before answering "not found", so a
session stored a moment ago can still be entered.

When a listing is slow (``SLOW_READ_SECONDS``: 100,000 markers take seconds), an
expired one keeps answering while a background thread lists again, so only a
process's very first listing makes a request wait for it. The list is in a total
order (:data:`runtime.server.cluster_list.SortKey`), which the history list's cursor
relies on: :meth:`StoredSessions.position_after` finds a page's start by bisection.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from flask import Flask, current_app

from runtime.server.cluster_list import SortKey
from runtime.server.selection import LATEST
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import RAYCLUSTER, ClusterRef, KeyLayout

logger = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 5.0
#: A listing that took this long is refreshed in the background once it expires...
SLOW_READ_SECONDS = 0.1
#: ... and no more often than to keep listing this share of the time.
BACKGROUND_SHARE = 0.1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_EXTENSION = "historyserver.sessions"


@dataclass(frozen=True)
class StoredSession:
    """One stored session of one cluster."""

    cluster: ClusterRef
    session: str
    created_at: datetime
    key: SortKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        c = self.cluster
        micros = (self.created_at - _EPOCH) // _MICROSECOND
        object.__setattr__(self, "key", (micros, self.session, c.namespace, c.owner_kind, c.owner_name, c.name))


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
        self._read_seconds = 0.0
        self._refreshing = False
        self._decoded: dict[str, StoredSession | None] = {}  # marker key -> session (None: invalid)

    def current(self, *, refresh: bool = False) -> list[StoredSession]:
        """All stored sessions, newest first. Storage errors propagate."""
        with self._lock:
            age = self._clock() - self._read_at
            if not refresh and self._sessions is not None:
                if age < self.ttl:
                    return self._sessions
                if self._read_seconds >= SLOW_READ_SECONDS:
                    # Listing is slow: answer from the old one; keep listing at most
                    # 1/BACKGROUND_SHARE of the time so it never hogs a core.
                    due = age >= self._read_seconds / BACKGROUND_SHARE
                    if due and not self._refreshing:
                        self._refreshing = True
                        threading.Thread(
                            target=self._refresh_in_background, name="stored-sessions", daemon=True
                        ).start()
                    return self._sessions
            started = time.monotonic()
            sessions = self._sessions = self._read()
            self._read_seconds = time.monotonic() - started
            self._read_at = self._clock()
            return sessions

    def _refresh_in_background(self) -> None:
        try:
            started = time.monotonic()
            sessions = self._read()
            with self._lock:
                self._read_seconds = time.monotonic() - started
                self._sessions = sessions
                self._read_at = self._clock()
        except Exception:  # the old listing keeps answering; the next expiry tries again
            logger.exception("listing stored sessions in the background failed")
        finally:
            with self._lock:
                self._refreshing = False

    @staticmethod
    def position_after(sessions: list[StoredSession], key: SortKey) -> int:
        """The index of the first session after ``key`` in ``sessions`` (newest first)."""
        low, high = 0, len(sessions)
        while low < high:
            middle = (low + high) // 2
            if sessions[middle].key < key:
                high = middle
            else:
                low = middle + 1
        return low

    def _read(self) -> list[StoredSession]:
        # Markers already decoded by the previous listing are reused: decoding is most
        # of a listing's cost (100,000 markers: 1.7 s decoding, 0.9 s walking a local dir).
        previous, previous_list = self._decoded, self._sessions
        decoded: dict[str, StoredSession | None] = {}
        for info in self.store.walk(self.layout.markers_prefix()):
            if info.key in previous:
                decoded[info.key] = previous[info.key]
                continue
            try:
                marker = self.layout.parse_marker_key(info.key)
            except InvalidKeyError as exc:
                logger.debug("skipping marker: %s", exc)
                decoded[info.key] = None
                continue
            decoded[info.key] = StoredSession(marker.cluster, marker.session, marker.created_at)
        self._decoded = decoded
        if previous_list is not None and decoded.keys() == previous.keys():
            return previous_list  # nothing came or went: the sorted list stands
        found = [s for s in decoded.values() if s is not None]
        found.sort(key=lambda s: s.key, reverse=True)
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


def warm_up(app: Flask) -> threading.Thread:
    """List the stored sessions once in the background, as a worker starts: with
    100,000 markers the first listing takes seconds, and the first ``/clusters`` or
    ``/enter_cluster`` would otherwise wait for it. A failure is only logged: requests
    list again and report it themselves."""

    def run() -> None:
        with app.app_context():
            try:
                sessions = stored_sessions().current()
            except Exception as exc:  # storage down at start: the requests will say so
                logger.warning("listing stored sessions at start failed: %s", exc)
                return
            logger.debug("listed %d stored sessions at start", len(sessions))

    thread = threading.Thread(target=run, name="stored-sessions-warm-up", daemon=True)
    thread.start()
    return thread

"""Head only: the note that collection of a session is over (``session_ended.json``).

Where the history server cannot ask Kubernetes whether a RayCluster still runs (its
API fails, or the server may not list RayClusters), this marker is what tells a dead
session from a running one (:mod:`runtime.server.queries.ended`): nodes and actors
are then shown DEAD at the session's end and the session is indexed ahead.

* written last at shutdown, after every upload, so nothing stored is newer;
* written for the previous session when Ray starts a new one in the same pod;
* deleted when a collector finds a session running (a restarted collector container
  beside a Ray that kept running), so a stale marker lasts only as long as the restart.

gc never deletes on it (a wrong marker must not lose data), only on its own rules.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

import orjson

from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError, ObjectNotFoundError, StorageError
from runtime.storage.layout import ClusterRef, KeyLayout

logger = logging.getLogger(__name__)


class SessionEndMarker:
    def __init__(self, store: ObjectStore, layout: KeyLayout, cluster: ClusterRef) -> None:
        self._store, self._layout, self._cluster = store, layout, cluster
        self._lock = threading.Lock()
        self._reopened: set[str] = set()

    def ended(self, session: str, reason: str) -> bool:
        """Store the marker; True when it is in storage. Never raises."""
        body = orjson.dumps({"endedAt": datetime.now(UTC).isoformat(timespec="seconds"), "reason": reason})
        try:
            self._store.put_bytes(self._layout.session_ended_key(self._cluster, session), body)
        except (StorageError, InvalidKeyError, OSError) as exc:
            logger.warning("could not mark session %s ended: %s", session, exc)
            return False
        with self._lock:
            self._reopened.discard(session)
        logger.info("session %s marked ended (%s)", session, reason)
        return True

    def reopened(self, session: str) -> None:
        """The session runs: delete a marker a previous collector left (once per session
        and process). Never raises."""
        with self._lock:
            if session in self._reopened:
                return
            self._reopened.add(session)
        try:
            self._store.delete(self._layout.session_ended_key(self._cluster, session))
        except ObjectNotFoundError:
            return
        except (StorageError, InvalidKeyError, OSError) as exc:
            with self._lock:
                self._reopened.discard(session)  # try again on the next sighting
            logger.warning("could not clear the end marker of running session %s: %s", session, exc)

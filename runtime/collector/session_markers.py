"""The 0-byte marker that lists a session in the history (head only).

Written as soon as the session is known and again at shutdown, so a killed pod
still leaves its session listed; written once per session per process otherwise.
"""

from __future__ import annotations

import logging
import threading

from runtime.collector.dashboard import ErrorOnce
from runtime.collector.metrics import CollectorMetrics
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError, StorageError
from runtime.storage.layout import ClusterRef, KeyLayout

logger = logging.getLogger(__name__)


class SessionMarkers:
    """Thread-safe: the recorder's thread, the app and shutdown all write markers."""

    def __init__(self, store: ObjectStore, layout: KeyLayout, cluster: ClusterRef, metrics: CollectorMetrics) -> None:
        self._store, self._layout, self._cluster, self._metrics = store, layout, cluster, metrics
        self._lock = threading.Lock()
        self._written: set[str] = set()
        self._errors = ErrorOnce(logger)

    def write(self, session: str, *, force: bool = False) -> bool:
        """True when the marker of ``session`` is in storage. Skipped if this process
        already wrote it (unless ``force``)."""
        with self._lock:
            if session in self._written and not force:
                return True
        try:
            key = self._layout.marker_key(self._cluster, session)
            self._store.put_bytes(key, b"")
        except (StorageError, InvalidKeyError) as exc:
            self._metrics.upload_failures.labels(what="marker", kind=type(exc).__name__).inc()
            self._errors.failure(f"session marker {session}", str(exc))
            return False
        with self._lock:
            first = session not in self._written
            self._written.add(session)
        self._metrics.markers_written.inc()
        self._errors.success(f"session marker {session}")
        if first:
            logger.info("session marker written: %s", key)
        return True

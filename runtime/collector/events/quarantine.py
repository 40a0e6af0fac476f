"""Where invalid events go: a local JSONL file, never storage, never a 400.

Ray resends a rejected batch forever, so one bad event would stop a node's whole
event stream. Instead the bad event is written here with its reason (bounded, so
a broken sender cannot fill the disk) and counted in metrics.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import orjson

from runtime.collector.events.parse import RejectedEvent

logger = logging.getLogger(__name__)


class Quarantine:
    def __init__(self, path: Path, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._warned = False

    def add(self, rejected: Iterable[RejectedEvent]) -> int:
        """Append rejected events; returns how many were kept (the rest only counted)."""
        lines = [
            orjson.dumps({"reason": r.reason, "received_at": time.time(), "event": r.raw.decode("utf-8", "replace")})
            for r in rejected
        ]
        if not lines:
            return 0
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            size = self.path.stat().st_size if self.path.exists() else 0
            data = b"\n".join(lines) + b"\n"
            if size + len(data) > self.max_bytes:
                if not self._warned:
                    logger.warning("quarantine file %s is full; further invalid events are only counted", self.path)
                    self._warned = True
                return 0
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        return len(lines)

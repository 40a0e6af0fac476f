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
from runtime.collector.events.spool_files import NotRegularFileError, open_regular

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
            data = b"\n".join(lines) + b"\n"
            try:
                # Never through a link or into a FIFO: see spool_files' docstring.
                fd = open_regular(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            except NotRegularFileError:
                self._warn_once("quarantine file %s is not a regular file; invalid events are only counted")
                return 0
            try:
                if os.fstat(fd).st_size + len(data) > self.max_bytes:
                    self._warn_once("quarantine file %s is full; further invalid events are only counted")
                    return 0
                os.write(fd, data)
            finally:
                os.close(fd)
        return len(lines)

    def _warn_once(self, message: str) -> None:
        if not self._warned:
            logger.warning(message, self.path)
            self._warned = True

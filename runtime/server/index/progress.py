"""How far an index build has got, in this process and for the others.

The process that holds a session's build lock reports its build's progress into a
:class:`ProgressFile`: the latest value is kept in memory (for its own waiting
requests) and written, at most every ``WRITE_INTERVAL`` seconds and on every phase
change, to ``<index>.progress`` with an atomic rename, so that another gunicorn
worker whose request finds the lock taken can answer with the same figures
(:func:`read_progress`). Figures are only ever what the build counted: a phase
whose size is unknown reports ``None`` for them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

logger = logging.getLogger(__name__)

PROGRESS_SUFFIX = ".progress"
WRITE_INTERVAL = 0.5
#: A build in another process whose progress file cannot be read (not written yet).
ELSEWHERE = "building elsewhere"

#: ``progress(phase, done, total)``; ``done``/``total`` are None when not counted.
ProgressCallback = Callable[[str, int | None, int | None], None]


def no_progress(phase: str, done: int | None, total: int | None) -> None:
    """A :data:`ProgressCallback` for builds nobody watches."""


@dataclass(frozen=True)
class BuildProgress:
    phase: str
    done: int | None = None
    total: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "done": self.done, "total": self.total}

    def percent(self) -> int | None:
        if self.done is None or not self.total:
            return None
        return min(100, self.done * 100 // self.total)


def progress_path(index: Path) -> Path:
    return index.with_name(index.name + PROGRESS_SUFFIX)


class ProgressFile:
    """The progress of the build this process runs for one index (thread-safe)."""

    def __init__(self, index: Path, phase: str = "starting") -> None:
        self.path = progress_path(index)
        self._lock = threading.Lock()
        self._current = BuildProgress(phase)
        self._written_at = 0.0
        self._publish = False  # only the holder of the build lock writes the file

    def current(self) -> BuildProgress:
        with self._lock:
            return self._current

    def publish(self) -> None:
        """This process holds the build lock: from now on the file is written."""
        with self._lock:
            self._publish = True
            current = self._current
        self._write(current)

    def report(self, phase: str, done: int | None = None, total: int | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            changed = phase != self._current.phase
            self._current = current = BuildProgress(phase, done, total)
            due = self._publish and (changed or now - self._written_at >= WRITE_INTERVAL)
            if due:
                self._written_at = now
        if due:
            self._write(current)

    def remove(self) -> None:
        with self._lock:
            self._publish = False
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _write(self, progress: BuildProgress) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(orjson.dumps(progress.as_json()))
            os.replace(tmp, self.path)
        except OSError as exc:  # progress is advisory: never fail a build for it
            logger.debug("cannot write %s: %s", self.path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()


def read_progress(index: Path) -> BuildProgress | None:
    """The progress another process published for ``index``, if any."""
    try:
        data = orjson.loads(progress_path(index).read_bytes())
        done, total = data.get("done"), data.get("total")
        return BuildProgress(
            str(data["phase"]),
            done if isinstance(done, int) else None,
            total if isinstance(total, int) else None,
        )
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None

"""Session summaries for the history list, from indexes that already exist.

``/clusters`` never builds an index: a session is summarised only when its index is
in the cache directory (one directory scan per request tells which are), else its
summary is ``None`` and, if a build is running somewhere, its progress is reported.
A summary is read from the index's small tables (:mod:`runtime.server.index.summary`)
and kept in memory keyed by the index path and the file's inode and mtime, so a
rebuilt index (a new file renamed into place) is read again and the list stays fast.
Nothing is written to the index: listing must not count as using it (its mtime is
the cache's LRU recency).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import current_app

from runtime.server.index.cache import IndexCache
from runtime.server.index.progress import PROGRESS_SUFFIX, read_progress
from runtime.server.index.reader import SessionIndex
from runtime.server.index.summary import NotCurrentError, read_summary
from runtime.server.sessions import StoredSession

logger = logging.getLogger(__name__)

_EXTENSION = "historyserver.summaries"
#: Summaries kept per process (a few hundred bytes each).
MAX_ENTRIES = 20_000
#: Index file names remembered per process (about 150 bytes each).
MAX_NAMES = 400_000


@dataclass(frozen=True)
class SessionState:
    """What the list says about one stored session's index."""

    summary: dict[str, Any] | None  # None: not indexed (or unreadable)
    indexing: dict[str, Any] | None  # a running build's progress, if one is known


NOT_INDEXED = SessionState(None, None)


class Summaries:
    def __init__(self, indexes: IndexCache, max_entries: int = MAX_ENTRIES) -> None:
        self.indexes = indexes
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._cache: OrderedDict[Path, tuple[int, int, dict[str, Any]]] = OrderedDict()
        # An index's name is a digest of the session's key prefix: remembered, so a
        # "failed only" page over 100,000 sessions is set lookups, not digests.
        # Keyed by id() (the listing reuses its session objects; the object is kept
        # beside its name so an id is never taken for a later object's).
        self._names: dict[int, tuple[StoredSession, str]] = {}

    def present(self) -> frozenset[str]:
        """The file names in the cache directory now (indexes and progress files)."""
        try:
            with os.scandir(self.indexes.dir) as entries:
                return frozenset(entry.name for entry in entries)
        except OSError as exc:
            logger.warning("cannot list the index cache directory: %s", exc)
            return frozenset()

    def index_name(self, stored: StoredSession) -> str:
        found = self._names.get(id(stored))
        if found is not None and found[0] is stored:
            return found[1]
        if len(self._names) >= MAX_NAMES:
            self._names.clear()  # sessions come and go: start again rather than grow
        name = self.indexes.path_for(stored.cluster, stored.session).name
        self._names[id(stored)] = (stored, name)
        return name

    def state(self, stored: StoredSession, present: frozenset[str]) -> SessionState:
        name = self.index_name(stored)
        path = self.indexes.dir / name
        if name not in present:
            if name + PROGRESS_SUFFIX in present:
                progress = read_progress(path)
                return SessionState(None, None if progress is None else progress.as_json())
            return NOT_INDEXED
        summary = self._summary(path)
        return NOT_INDEXED if summary is None else SessionState(summary, None)

    def _summary(self, path: Path) -> dict[str, Any] | None:
        try:
            stat = path.stat()
        except OSError:
            return None  # evicted since the directory was scanned
        with self._lock:
            cached = self._cache.get(path)
            if cached is not None and cached[:2] == (stat.st_ino, stat.st_mtime_ns):
                self._cache.move_to_end(path)
                return cached[2]
        try:
            with SessionIndex(path) as index:
                summary = read_summary(index)
        except (sqlite3.Error, NotCurrentError, ValueError) as exc:
            # Another schema (rebuilt on entry) or a file being replaced: no summary yet.
            logger.debug("no summary from %s: %s", path, exc)
            return None
        with self._lock:
            self._cache[path] = (stat.st_ino, stat.st_mtime_ns, summary)
            self._cache.move_to_end(path)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return summary


def session_summaries() -> Summaries:
    """The app's shared :class:`Summaries` (created on first use)."""
    from runtime.server.context import services

    found: Summaries | None = current_app.extensions.get(_EXTENSION)
    if found is None:
        found = current_app.extensions.setdefault(_EXTENSION, Summaries(services().indexes))
    return found

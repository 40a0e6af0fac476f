"""Read access to one built session index (see :mod:`runtime.server.index.schema`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from runtime.server.index.schema import META_STATS
from runtime.server.replay.task_detail import DetailRenderer

#: On every connection: functions and virtual tables a view or trigger names never run
#: (an index file may have been downloaded; its schema is checked then too).
UNTRUSTED_SCHEMA = "PRAGMA trusted_schema = OFF"


class SessionIndex:
    """A read-only connection to one session's SQLite index.

    Opened per request (cheap), so a file replaced by a rebuild or deleted by cache
    eviction never leaves a request half-reading two versions.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._conn.execute(UNTRUSTED_SCHEMA)
        # Many short queries: keep pages and a few MiB of cache per connection.
        self._conn.execute("PRAGMA cache_size = -8192")
        self._conn.execute("PRAGMA query_only = 1")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SessionIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    def row(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        result: tuple[Any, ...] | None = self._conn.execute(sql, params).fetchone()
        return result

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        found = self.row(sql, params)
        return None if found is None else found[0]

    def iter_rows(self, sql: str, params: Sequence[Any] = ()) -> Iterable[tuple[Any, ...]]:
        return self._conn.execute(sql, params)

    def meta(self, key: str) -> str | None:
        value = self.scalar("SELECT value FROM meta WHERE key = ?", (key,))
        return None if value is None else str(value)

    def stats(self) -> dict[str, Any]:
        raw = self.meta(META_STATS)
        return {} if raw is None else dict(orjson.loads(raw))

    def details(self) -> DetailRenderer:
        """Renders ``tasks.detail`` to the detail-only JSON (each text is loaded
        when a row first needs it)."""

        def load(text_id: int) -> bytes | None:
            data = self.scalar("SELECT data FROM task_texts WHERE text_id = ?", (text_id,))
            return None if data is None else bytes(data)

        return DetailRenderer(load)

    def computed(self, key: str) -> bytes | None:
        """A result cached in the index by an earlier request (``None`` if absent)."""
        value = self.scalar("SELECT value FROM computed WHERE key = ?", (key,))
        return None if value is None else bytes(value)

    def store_computed(self, key: str, value: bytes) -> None:
        """Keep a derived result in the index file (best effort, shared by workers)."""
        try:
            with contextlib.closing(sqlite3.connect(self.path, timeout=2.0)) as conn, conn:
                conn.execute(UNTRUSTED_SCHEMA)
                conn.execute("INSERT OR REPLACE INTO computed (key, value) VALUES (?, ?)", (key, value))
        except sqlite3.Error:
            pass  # read-only cache dir or a concurrent rebuild: recomputed next time

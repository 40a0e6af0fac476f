"""A task shard: replays the task events of one id range and writes their rows.

Used in-process for small sessions and by :mod:`runtime.server.replay.worker`
subprocesses for big ones; either way it writes the ``tasks``, ``task_counts`` and
``profile_events`` rows into an SQLite file whose tables come from the index DDL,
tasks in primary-key order (sequential B-tree appends).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.server.index import schema
from runtime.server.replay.decode import decode_events
from runtime.server.replay.render_tasks import INSERT_PROFILE_EVENT, INSERT_TASK, INSERT_TASK_COUNT, TaskRenderer
from runtime.server.replay.session import SessionReplay

#: Task rows are ~1-2 KB; WITHOUT ROWID tables spill rows larger than ~1/4 of a
#: page into overflow pages, so the index uses 16 KiB pages.
PAGE_SIZE = 16384
BULK_PRAGMAS = (
    f"PRAGMA page_size = {PAGE_SIZE}",
    "PRAGMA journal_mode = OFF",
    "PRAGMA synchronous = OFF",
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA cache_size = -65536",
)


@dataclass
class ShardResult:
    events: int = 0
    duplicate_events: int = 0
    bad_lines: int = 0
    bad_events: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    tasks: int = 0
    profile_events: int = 0
    strays: list[dict[str, Any]] = field(default_factory=list)


def split_ddl() -> tuple[list[str], list[str]]:
    """(CREATE TABLE statements, CREATE INDEX statements) of the index schema."""
    # Comments go first: they may contain ';'. The DDL has no '--' inside literals.
    code = "\n".join(line.split("--", 1)[0] for line in schema.DDL.splitlines())
    tables: list[str] = []
    indexes: list[str] = []
    for statement in code.split(";"):
        text = statement.strip()
        if not text or text.upper().startswith("PRAGMA"):
            continue
        (indexes if text.upper().startswith("CREATE INDEX") else tables).append(text)
    return tables, indexes


def create_bulk_db(path: Path) -> sqlite3.Connection:
    """A fresh file with every table of the schema and no secondary index yet."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in BULK_PRAGMAS:
        conn.execute(pragma)
    for statement in split_ddl()[0]:
        conn.execute(statement)
    return conn


class TaskShard:
    def __init__(self, base_ns: int = 0) -> None:
        self.replay = SessionReplay(tasks_only=True, base_ns=base_ns)
        self.bad_lines = 0

    def feed_routed(self, shard: int, blob: bytes) -> None:
        """A :class:`~runtime.server.replay.route.Router` sink (one shard: ``shard`` is 0)."""
        self.feed_blob(blob)

    def feed_blob(self, blob: bytes) -> None:
        """JSON lines routed to this shard."""
        result = decode_events(blob)
        self.bad_lines += result.bad_lines
        self.replay.feed(result.items)

    def write(self, conn: sqlite3.Connection, indexes: bool = False) -> ShardResult:
        """Insert this shard's rows (one transaction); the tables must exist. With
        ``indexes`` the task tables' secondary indexes are created afterwards (the
        shard whose file becomes the index does it, in parallel with the others)."""
        renderer = TaskRenderer(self.replay.tasks)
        conn.execute("BEGIN")
        conn.executemany(INSERT_TASK, renderer.rows(ordered=True))
        conn.executemany(INSERT_TASK_COUNT, renderer.count_rows())
        conn.executemany(INSERT_PROFILE_EVENT, renderer.profile_rows)
        conn.execute("COMMIT")
        if indexes:
            for statement in split_ddl()[1]:
                if " ON tasks " in statement or " ON profile_events " in statement:
                    conn.execute(statement)
        counters = self.replay.counters
        return ShardResult(
            events=counters.events,
            duplicate_events=counters.duplicate_events,
            bad_lines=self.bad_lines,
            bad_events=counters.bad_events,
            by_type=dict(counters.by_type),
            tasks=sum(renderer.counts.values()),
            profile_events=len(renderer.profile_rows),
            strays=self.replay.strays,
        )

"""Task-shard SQLite files: created bare, bulk-loaded, indexed at the end.

Each task shard (in-process, or one :mod:`runtime.server.index.worker` per core)
writes the ``tasks`` and ``task_counts`` rows it rendered into
a file whose tables come from the index DDL, tasks in primary-key order
(sequential B-tree appends), with the texts their detail fields refer to
(``task_texts``, :mod:`runtime.server.replay.task_detail`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from pathlib import Path
from typing import Any

from runtime.server.index import schema
from runtime.server.replay.render_tasks import INSERT_TASK, INSERT_TASK_COUNT, TASK_COLUMNS, TaskRow, insert_tasks_sql
from runtime.server.replay.shard import ShardResult, TaskShard
from runtime.server.replay.task_failures import FailureContext

logger = logging.getLogger(__name__)

#: Texts are content-addressed: a text another shard (or an earlier bucket) stored is the same text.
INSERT_TEXT = "INSERT OR IGNORE INTO task_texts (text_id, data) VALUES (?, ?)"

#: Task rows per INSERT statement (fewer when SQLite allows fewer bound values).
ROWS_PER_INSERT = 64
TASK_FIELDS = TASK_COLUMNS.split(", ")
#: WITHOUT ROWID tables spill rows larger than ~1/4 of a page into overflow pages;
#: chosen when task rows were ~1-2 KB. Rows are ~0.5 KB since schema 7, and 4, 8 and
#: 16 KiB pages insert and index 100,000 of them in the same time.
PAGE_SIZE = 16384
BULK_PRAGMAS = (
    f"PRAGMA page_size = {PAGE_SIZE}",
    "PRAGMA journal_mode = OFF",
    "PRAGMA synchronous = OFF",
    "PRAGMA locking_mode = EXCLUSIVE",
    "PRAGMA cache_size = -65536",
)
#: The page cache while secondary indexes are built. CREATE INDEX sorts its keys
#: in runs of the cache's size, then merges them: runs of 8 MiB built the five task
#: indexes of 1,000,000 rows in 2.9-3.0 s of CPU, runs of 64 MiB in 3.6-5.0 s
#: (bigger in-memory runs sort with fewer CPU-cache hits and fault in more memory).
INDEX_BUILD_PRAGMA = "PRAGMA cache_size = -8192"


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


def write_shards(
    conn: sqlite3.Connection,
    shards: Iterable[TaskShard],
    indexes: bool = False,
    failures: FailureContext | None = None,
) -> ShardResult:
    """Insert the rows of ``shards`` (consecutive id ranges, in ascending order; one
    transaction); the tables must exist. Each shard is rendered and released before
    the next is taken, so a lazy iterable holds one in memory at a time. With
    ``indexes`` the task tables' secondary indexes are created afterwards (an
    in-process build; worker shards are appended to the index file first and
    indexed there, :func:`create_task_indexes`).
    ``failures``: dead workers and finished jobs (:mod:`runtime.server.replay.task_failures`)."""
    result = ShardResult()
    counts: Counter[tuple[str, str, str, str, str]] = Counter()
    conn.execute("BEGIN")
    for shard in shards:
        renderer = shard.renderer(failures)
        _insert_tasks(conn, renderer.rows())
        # bytearrays: sqlite3 binds bytes only after looking for an adapter (see INSERT_TASK)
        conn.executemany(INSERT_TEXT, [(ident, bytearray(data)) for ident, data in renderer.texts.items()])
        counts.update(renderer.counts)
        result.add(shard.result(renderer))
        del shard, renderer  # before the next one is replayed
    conn.executemany(INSERT_TASK_COUNT, [(*key, n) for key, n in counts.items()])
    conn.execute("COMMIT")
    if indexes:
        create_task_indexes(conn)
    return result


def create_task_indexes(conn: sqlite3.Connection) -> None:
    """The ``tasks`` table's secondary indexes, once its rows are all in (the page
    cache set for sorting: :data:`INDEX_BUILD_PRAGMA`)."""
    conn.execute(INDEX_BUILD_PRAGMA)
    for statement in split_ddl()[1]:
        if " ON tasks " in statement:
            conn.execute(statement)


def _insert_tasks(conn: sqlite3.Connection, rows: Iterable[TaskRow]) -> None:
    """Insert rows in order, up to :data:`ROWS_PER_INSERT` per statement: one step of
    SQLite per batch instead of per row takes ~20 % off the inserts' time."""
    per_insert = min(ROWS_PER_INSERT, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(TASK_FIELDS))
    rest: list[TaskRow] = []
    if per_insert > 1:
        conn.executemany(insert_tasks_sql(per_insert), _flat_batches(rows, per_insert, rest))
    else:
        rest.extend(rows)
    conn.executemany(INSERT_TASK, rest)


def _flat_batches(rows: Iterable[TaskRow], size: int, rest: list[TaskRow]) -> Iterator[tuple[Any, ...]]:
    """The values of each ``size`` rows in one tuple; the rows of a last, shorter batch go to ``rest``."""
    it = iter(rows)
    while True:
        batch = list(islice(it, size))
        if len(batch) < size:
            rest.extend(batch)
            return
        yield tuple(chain.from_iterable(batch))


def append_shards(conn: sqlite3.Connection, paths: list[Path], unlink: Callable[[Path], None]) -> None:
    """Shards hold ascending id ranges: appending them in order, before any secondary
    index exists, keeps the B-tree writes sequential. Then equal task_counts keys of
    different shards are summed."""
    for n, shard in enumerate(paths):
        conn.execute("ATTACH DATABASE ? AS shard", (str(shard),))
        conn.execute("BEGIN")
        for table in ("tasks", "task_counts"):
            conn.execute(f"INSERT INTO main.{table} SELECT * FROM shard.{table}")  # noqa: S608 - fixed names
        conn.execute("INSERT OR IGNORE INTO main.task_texts SELECT * FROM shard.task_texts")  # shards share texts
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE shard")
        logger.debug("appended task shard %d", n + 1)
        # Deleting a GB-sized file takes the kernel a while; nobody needs to wait.
        threading.Thread(target=unlink, args=(shard,), name="shard-unlink", daemon=True).start()
    conn.execute("BEGIN")
    conn.execute(
        "CREATE TEMP TABLE counts AS SELECT job_id, state, type, name, func_name, SUM(n) AS n"
        " FROM task_counts GROUP BY job_id, state, type, name, func_name"
    )
    conn.execute("DELETE FROM task_counts")
    conn.execute("INSERT INTO task_counts SELECT * FROM temp.counts")
    conn.execute("DROP TABLE temp.counts")
    conn.execute("COMMIT")

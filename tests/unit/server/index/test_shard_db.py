"""Task rows are inserted many per statement, all of them, in order, whatever SQLite allows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runtime.server.index.shard_db import ROWS_PER_INSERT, create_bulk_db, write_shards
from runtime.server.replay.shard import TaskShard
from runtime.server.replay.task_detail import DetailRenderer
from tests.support.sample_session import load_events


def _rows(path: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT * FROM tasks ORDER BY task_id, attempt").fetchall()


@pytest.mark.parametrize(
    ("variable_limit", "per_insert"), [(32766, ROWS_PER_INSERT), (17 * 7, 7), (17 * 5, 5), (17, 1)]
)
def test_every_row_is_written_whatever_the_bound_values_limit(
    tmp_path: Path, variable_limit: int, per_insert: int
) -> None:
    """Up to 64 rows per INSERT, fewer when SQLite allows fewer bound values (17 a row)."""
    shard = TaskShard()
    shard.replay.feed(load_events())
    expected = len(shard.replay.tasks)
    assert expected % per_insert or per_insert == 1  # a last, shorter batch is exercised

    reference = tmp_path / "one_by_one.sqlite"
    conn = create_bulk_db(reference)
    renderer = shard.renderer()
    conn.executemany(
        "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?)",
        list(renderer.rows()),
    )
    conn.commit()
    conn.close()

    batched = tmp_path / "batched.sqlite"
    conn = create_bulk_db(batched)
    conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, variable_limit)
    assert write_shards(conn, [shard]).tasks == expected
    conn.close()
    rows = _rows(batched)
    assert len(rows) == expected and rows == _rows(reference)
    assert all(row[15] != "" for row in rows)  # no error type is NULL, never ''
    with sqlite3.connect(batched) as db:
        texts = dict(db.execute("SELECT text_id, data FROM task_texts").fetchall())
    assert all(DetailRenderer(texts.get)(row[16]).startswith(b'{"language":') for row in rows)

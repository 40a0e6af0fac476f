"""Stored task details (runtime.server.replay.task_detail): what the index stores,
and that every reader gets the detail JSON back as the renderer made it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from bench.synth_session import write_synthetic_session
from runtime.server.index.build import build_index
from runtime.server.index.reader import SessionIndex
from runtime.server.queries.cluster_status import _PENDING_TASK_STATES, _task_demands
from runtime.server.queries.options import TaskQuery
from runtime.server.queries.tasks import list_tasks
from runtime.server.replay.render_tasks import BRIEF_COLUMNS, DETAIL, TaskRenderer, brief_json, splice_detail
from runtime.server.replay.session import SessionReplay
from runtime.server.replay.shard import TaskShard
from runtime.server.replay.task_detail import DetailRenderer, text_id
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.sample_session import load_events, write_sample_session


def _synthetic_index(tmp_path: Path, processes: int) -> tuple[Path, int]:
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "s"), create_bucket=True))
    synth = write_synthetic_session(store, KeyLayout(""), ClusterRef("default", "synth"), n_tasks=2000, seed=5)
    out = tmp_path / f"i{processes}.sqlite"
    build_index(store, KeyLayout(""), synth.cluster, synth.session, out, processes=processes)
    return out, synth.failed


def test_stored_details_are_compact_and_read_back_as_the_answer(tmp_path: Path) -> None:
    out, failed = _synthetic_index(tmp_path, processes=2)
    with sqlite3.connect(out) as conn:
        sql = f"SELECT {BRIEF_COLUMNS}, detail FROM tasks ORDER BY task_id, attempt"  # noqa: S608 - constants
        stored = conn.execute(sql).fetchall()
        texts = dict(conn.execute("SELECT text_id, data FROM task_texts").fetchall())
    assert len(stored) == 2000 and all(r[-1][0] != ord("{") for r in stored)  # none stored as JSON
    assert all(text_id(data) == ident for ident, data in texts.items())  # content-addressed
    # Shared parts once each (per worker, definition...), whichever shard wrote them; a
    # profile's extra data is in its row (Ray's names the task's id: shared by none).
    assert len(texts) < 400
    with SessionIndex(out) as index:
        render = index.details()
        plain = [(brief_json(r[:-1]), render(r[-1])) for r in stored]
        answer = orjson.loads(list_tasks(index, TaskQuery(limit=10_000, detail=True, exclude_driver=False)))
        brief = orjson.loads(list_tasks(index, TaskQuery(limit=10_000, exclude_driver=False)))
    # ~7x: a profile per task (its times and its extra data) is what tasks share least
    assert sum(len(r[-1]) for r in stored) * 7 < sum(len(e) for _, e in plain)
    assert all(orjson.dumps(orjson.loads(e)) == e for _, e in plain)  # orjson's own bytes, floats included
    # the timeline renders only the rows that hold profiling data: told apart without rendering
    profiled = [b'"profiling_data":' in e for _, e in plain]
    assert [DetailRenderer.has_profile(r[-1]) for r in stored] == profiled and 100 < sum(profiled) < 2000
    tasks = answer["data"]["result"]["result"]
    assert [orjson.loads(splice_detail(b, e)) for b, e in plain] == tasks
    assert len(tasks) == 2000 and sum(1 for t in tasks if t["task_log_info"]) > 1000
    assert sum(1 for t in tasks if "profiling_data" in t) > 100
    # the brief answer is the detail answer without the detail-only fields
    briefs = brief["data"]["result"]["result"]
    assert len(briefs) == 2000 and all(len(b) == 13 for b in briefs)
    assert briefs == [{k: t[k] for k in b} for b, t in zip(briefs, tasks, strict=True)]
    assert sum(1 for t in tasks if t["error_type"]) == failed


def test_every_build_stores_identical_rows_and_texts(tmp_path: Path) -> None:
    """Texts are named by their bytes: shards built apart agree without talking."""
    tables = []
    for processes in (0, 2):
        out, _ = _synthetic_index(tmp_path / str(processes), processes)
        with sqlite3.connect(out) as conn:
            tables.append(
                (
                    conn.execute("SELECT task_id, attempt, detail FROM tasks ORDER BY 1, 2").fetchall(),
                    conn.execute("SELECT * FROM task_texts ORDER BY 1").fetchall(),
                )
            )
    assert tables[0] == tables[1]


def test_plain_json_passes_and_a_missing_text_is_an_error() -> None:
    render = DetailRenderer({}.get)
    assert render(b'{"a":1}') == b'{"a":1}'  # as test factories insert it
    assert not render.has_profile(b'{"a":1}') and render.has_profile(b'{"profiling_data":{}}')
    shard = TaskShard()
    shard.replay.feed(load_events())
    renderer = shard.renderer()
    row = next(r for r in renderer.rows() if r[7] == "NORMAL_TASK")
    with pytest.raises(ValueError, match="does not hold"):
        render(row[DETAIL])
    assert orjson.loads(DetailRenderer(renderer.texts.get)(row[DETAIL]))["language"] == "PYTHON"


def test_pending_demands_read_stored_rows(tmp_path: Path) -> None:
    """Cluster status counts pending tasks by required resources from stored rows."""
    replay = SessionReplay()
    replay.feed(load_events())
    expected: dict[bytes, int] = {}
    renderer = TaskRenderer(replay.tasks)
    for row in renderer.rows():
        resources = orjson.loads(renderer.detail_json(row))["required_resources"]
        if resources is not None:
            key = orjson.dumps(resources)
            expected[key] = expected.get(key, 0) + 1
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "s"), create_bucket=True))
    sample = write_sample_session(store, KeyLayout(""))
    out = tmp_path / "i.sqlite"
    build_index(store, KeyLayout(""), sample.cluster, sample.session, out, processes=0)
    with sqlite3.connect(out) as conn:  # every attempt pending, so every row is read
        conn.execute("UPDATE tasks SET state = ?", (_PENDING_TASK_STATES[0],))
    with SessionIndex(out) as index:
        assert index.scalar("SELECT COUNT(*) FROM tasks WHERE substr(detail, 1, 1) = '{'") == 0
        found = _task_demands(index, ",".join("?" * len(_PENDING_TASK_STATES)))
    assert len(expected) > 1 and dict(found) == expected and found == sorted(found)

"""Task filters as SQL: checked against a brute-force oracle, plus the plans."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from werkzeug.datastructures import MultiDict

from runtime.server.index.reader import SessionIndex
from runtime.server.queries import tasksql
from runtime.server.queries.options import parse_task_query
from runtime.server.queries.tasks import list_tasks
from runtime.server.queries.tasksql import TaskSelection
from tests.unit.server.queries.factory import Task, build_synthetic, create_index, insert_tasks, refresh_counts

SIZE = 3000


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SessionIndex, list[Task]]]:
    from tests.unit.server.queries.factory import synthetic_tasks

    path = tmp_path_factory.mktemp("synthetic") / "index.sqlite"
    build_synthetic(path, SIZE)
    with SessionIndex(path) as index:
        yield index, list(synthetic_tasks(SIZE))


def _matches(task: Task, key: str, pred: str, value: str, exclude_driver: bool) -> bool:
    column = {"task_name": "name", "task_type": "type"}.get(key, key)
    stored = str(getattr(task, column))
    hit = stored.lower() == value.lower()
    return hit if pred == "=" else not hit


def oracle(tasks: list[Task], triples: list[tuple[str, str, str]], exclude_driver: bool = True) -> list[Task]:
    out = [t for t in tasks if not (exclude_driver and t.type == "DRIVER_TASK")]
    for key, pred, value in triples:
        out = [t for t in out if _matches(t, key, pred, value, exclude_driver)]
    return sorted(out, key=lambda t: (t.task_id, t.attempt))


def query_args(triples: list[tuple[str, str, str]], **extra: str) -> MultiDict[str, str]:
    pairs: list[tuple[str, str]] = list(extra.items())
    for key, pred, value in triples:
        pairs += [("filter_keys", key), ("filter_predicates", pred), ("filter_values", value)]
    return MultiDict(pairs)


def _random_filters(rng: random.Random, tasks: list[Task]) -> list[tuple[str, str, str]]:
    sample = rng.choice(tasks)
    pool = [
        ("job_id", sample.job_id),
        ("state", sample.state.lower()),
        ("task_type", sample.type),
        ("task_name", sample.name.upper()),
        ("func_name", sample.func_name),
        ("actor_id", sample.actor_id or "ab" * 8),
        ("task_id", sample.task_id.upper()),
        ("node_id", sample.node_id),
    ]
    picks = rng.sample(pool, rng.randint(1, 3))
    return [(k, rng.choice(["=", "=", "!="]), v) for k, v in picks]


@pytest.mark.parametrize("counts_table", ["small", "huge"])
def test_random_filters_match_oracle(
    synthetic: tuple[SessionIndex, list[Task]], counts_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both count strategies: one pass over task_counts, and index-only counts (used
    when task names are so varied that task_counts is as large as tasks)."""
    if counts_table == "huge":
        monkeypatch.setattr(tasksql, "SMALL_COUNTS_TABLE", 0)
    index, tasks = synthetic
    rng = random.Random(11)
    for _ in range(150):
        triples = _random_filters(rng, tasks)
        exclude = rng.random() < 0.8
        limit = rng.choice([0, 1, 7, 100, 5000])
        query = parse_task_query(query_args(triples, limit=str(limit), exclude_driver=str(exclude).lower()))
        expected = oracle(tasks, triples, exclude)
        body = orjson.loads(list_tasks(index, query))["data"]["result"]
        assert body["num_filtered"] == len(expected), triples
        got = [(t["task_id"], t["attempt_number"]) for t in body["result"]]
        assert got == [(t.task_id, t.attempt) for t in expected[:limit]], triples
        # total counts only what Ray's GCS filters (source side) keep.
        source = [f for f in triples if f[0] in ("job_id", "task_id", "actor_id", "task_name", "state")]
        assert body["total"] == body["num_after_truncation"] == len(oracle(tasks, source, exclude)), triples


def test_counts_paths_agree(synthetic: tuple[SessionIndex, list[Task]]) -> None:
    """task_counts SUM and COUNT over tasks give the same numbers."""
    index, tasks = synthetic
    query = parse_task_query(query_args([("job_id", "=", tasks[20].job_id), ("state", "=", "FINISHED")]))
    selection = TaskSelection(index, query)
    via_counts = selection.counts().num_filtered
    assert via_counts == selection._count_tasks(selection.conditions)


def test_plan_uses_the_selective_index(synthetic: tuple[SessionIndex, list[Task]]) -> None:
    index, tasks = synthetic
    job = tasks[20].job_id
    query = parse_task_query(query_args([("job_id", "=", job), ("state", "=", "RUNNING")]))
    selection = TaskSelection(index, query)
    sql, params = selection.page_sql("task_id", 100)
    plan = " ".join(str(r[-1]) for r in index.rows(f"EXPLAIN QUERY PLAN {sql}", params))
    # RUNNING (2%) is far rarer than one job (10%): walk the state index in order.
    assert "tasks_by_state" in plan
    assert "TEMP B-TREE" not in plan  # rows come out already ordered by (task_id, attempt)


def test_plan_without_filters_walks_primary_key(synthetic: tuple[SessionIndex, list[Task]]) -> None:
    index, _ = synthetic
    selection = TaskSelection(index, parse_task_query(MultiDict()))
    sql, params = selection.page_sql("task_id", 100)
    plan = " ".join(str(r[-1]) for r in index.rows(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "TEMP B-TREE" not in plan
    assert selection.access_hint(100) == ""


def test_task_id_lookup_uses_primary_key(synthetic: tuple[SessionIndex, list[Task]]) -> None:
    index, tasks = synthetic
    query = parse_task_query(query_args([("task_id", "=", tasks[5].task_id)]))
    selection = TaskSelection(index, query)
    sql, params = selection.page_sql("task_id", 1)
    plan = " ".join(str(r[-1]) for r in index.rows(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "PRIMARY KEY" in plan or "USING INDEX sqlite_autoindex" in plan


def _tiny(tmp_path: Path, tasks: list[Task]) -> SessionIndex:
    conn = create_index(tmp_path / "tiny.sqlite")
    insert_tasks(conn, tasks)
    refresh_counts(conn)
    conn.commit()
    conn.close()
    return SessionIndex(tmp_path / "tiny.sqlite")


def test_name_filter_is_case_insensitive_over_spellings(tmp_path: Path) -> None:
    tasks = [
        Task(task_id="a1", name="Square"),
        Task(task_id="a2", name="square"),
        Task(task_id="a3", name="cube"),
    ]
    with _tiny(tmp_path, tasks) as index:
        body = orjson.loads(list_tasks(index, parse_task_query(query_args([("task_name", "=", "SQUARE")]))))
        assert [t["task_id"] for t in body["data"]["result"]["result"]] == ["a1", "a2"]
        body = orjson.loads(list_tasks(index, parse_task_query(query_args([("task_name", "!=", "square")]))))
        assert [t["task_id"] for t in body["data"]["result"]["result"]] == ["a3"]
        body = orjson.loads(list_tasks(index, parse_task_query(query_args([("task_name", "=", "nothing")]))))
        assert body["data"]["result"]["num_filtered"] == 0


def test_nil_state_matches_definition_only_tasks(tmp_path: Path) -> None:
    tasks = [Task(task_id="a1", state=""), Task(task_id="a2", state="FINISHED")]
    with _tiny(tmp_path, tasks) as index:
        body = orjson.loads(list_tasks(index, parse_task_query(query_args([("state", "=", "nil")]))))
        assert [t["task_id"] for t in body["data"]["result"]["result"]] == ["a1"]


def test_detail_rows_are_spliced(tmp_path: Path) -> None:
    task = Task(task_id="a1", name="n", func_name="f", creation_ms=5, end_ms=9)
    with _tiny(tmp_path, [task]) as index:
        brief = orjson.loads(list_tasks(index, parse_task_query(MultiDict())))["data"]["result"]["result"][0]
        detail = orjson.loads(list_tasks(index, parse_task_query(MultiDict({"detail": "1"}))))
        row = detail["data"]["result"]["result"][0]
        assert brief == task.brief()
        assert row == {**task.brief(), **task.extra()}
        assert list(row)[: len(brief)] == list(brief)  # brief fields first, in Ray's order


def test_envelope_shape(tmp_path: Path) -> None:
    with _tiny(tmp_path, [Task(task_id="a1"), Task(task_id="d", type="DRIVER_TASK")]) as index:
        body = orjson.loads(list_tasks(index, parse_task_query(MultiDict({"limit": "0"}))))
    assert body == {
        "result": True,
        "msg": "",
        "data": {
            "result": {
                "total": 1,
                "num_after_truncation": 1,
                "num_filtered": 1,
                "result": [],
                "partial_failure_warning": "",
                "warnings": None,
            }
        },
    }

"""Every query over an index of session A's live rows gives back Ray's live answer."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from werkzeug.datastructures import MultiDict

from runtime.server.index.reader import SessionIndex
from runtime.server.queries import state, tasksql
from runtime.server.queries.options import parse_task_query
from runtime.server.queries.summary import summarize_tasks
from runtime.server.queries.tasks import list_tasks
from runtime.server.queries.timeline import timeline
from tests.unit.server.queries.live_fixture import live

JOB = [("filter_keys", "job_id"), ("filter_predicates", "=")]


def tasks(index: SessionIndex, *pairs: tuple[str, str]) -> Any:
    return orjson.loads(list_tasks(index, parse_task_query(MultiDict(list(pairs)))))


def by_key(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["task_id"], r["attempt_number"]): r for r in rows}


@pytest.mark.parametrize(
    ("pairs", "answer"),
    [
        ((("detail", "1"), ("limit", "10000")), "api_v0_tasks_detail_limit10000.json"),
        ((("limit", "100"),), "api_v0_tasks_nodetail.json"),
        ((("detail", "1"), ("limit", "10000"), *JOB, ("filter_values", "02000000")), "api_v0_tasks_job_02000000.json"),
        ((("detail", "1"), ("limit", "10000"), *JOB, ("filter_values", "03000000")), "api_v0_tasks_job_03000000.json"),
        (
            (
                ("detail", "1"),
                ("limit", "1"),
                ("filter_keys", "task_id"),
                ("filter_predicates", "="),
                ("filter_values", "0021899358e75e3cffffffffffffffffffffffff02000000"),
            ),
            "api_v0_tasks_one_by_task_id.json",
        ),
    ],
)
def test_task_lists(live_index: SessionIndex, pairs: tuple[tuple[str, str], ...], answer: str) -> None:
    got = tasks(live_index, *pairs)
    want = live(answer)
    got_result, want_result = got["data"]["result"], want["data"]["result"]
    for key in ("total", "num_after_truncation", "num_filtered", "partial_failure_warning", "warnings"):
        assert got_result[key] == want_result[key], key
    assert by_key(got_result["result"]) == by_key(want_result["result"])
    # Ray sorts by task id only (attempts as the GCS returned them); we add the attempt.
    got_order = [(r["task_id"], r["attempt_number"]) for r in got_result["result"]]
    assert got_order == sorted(got_order)
    assert [r["task_id"] for r in got_result["result"]] == [r["task_id"] for r in want_result["result"]]


@pytest.mark.parametrize(
    ("pairs", "answer"),
    [
        ((("summary_by", "func_name"),), "api_v0_tasks_summarize_summary_by=func_name.json"),
        ((*JOB, ("filter_values", "02000000")), "api_v0_tasks_summarize_job_02000000.json"),
        ((*JOB, ("filter_values", "03000000")), "api_v0_tasks_summarize_job_03000000.json"),
    ],
)
@pytest.mark.parametrize("counts_table", ["small", "huge"])
def test_summary_by_name(
    live_index: SessionIndex,
    pairs: tuple[tuple[str, str], ...],
    answer: str,
    counts_table: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if counts_table == "huge":  # task_counts too big to scan: summarize a page of tasks instead
        monkeypatch.setattr(tasksql, "SMALL_COUNTS_TABLE", 0)
    got = orjson.loads(summarize_tasks(live_index, parse_task_query(MultiDict(list(pairs)), summary=True)))
    assert got == live(answer)  # dict equality: Ray's key order is first-seen, ours alphabetical


@pytest.mark.parametrize(
    ("pairs", "answer"),
    [
        ((("summary_by", "lineage"),), "api_v0_tasks_summarize_summary_by=lineage.json"),
        (
            (*JOB, ("filter_values", "02000000"), ("summary_by", "lineage")),
            "api_v0_tasks_summarize_lineage_job_02000000.json",
        ),
        (
            (*JOB, ("filter_values", "03000000"), ("summary_by", "lineage")),
            "api_v0_tasks_summarize_lineage_job_03000000.json",
        ),
    ],
)
def test_summary_by_lineage(live_index: SessionIndex, pairs: tuple[tuple[str, str], ...], answer: str) -> None:
    raw = summarize_tasks(live_index, parse_task_query(MultiDict(list(pairs)), summary=True))
    assert orjson.loads(raw) == live(answer)
    # Same order at every level as Ray (lists compare in order).
    got_tree = orjson.loads(raw)["data"]["result"]["result"]["node_id_to_summary"]["cluster"]["summary"]
    assert got_tree == live(answer)["data"]["result"]["result"]["node_id_to_summary"]["cluster"]["summary"]


def test_lineage_is_cached_in_the_index(live_index: SessionIndex) -> None:
    query = parse_task_query(MultiDict({"summary_by": "lineage"}), summary=True)
    first = summarize_tasks(live_index, query)
    keys = [k for (k,) in live_index.rows("SELECT key FROM computed")]
    assert len(keys) == 1 and keys[0].startswith("summarize:v1:lineage:")
    assert live_index.computed(keys[0]) == first
    assert summarize_tasks(live_index, query) == first


@pytest.mark.parametrize(
    ("job", "answer"),
    [
        (None, "api_v0_tasks_timeline_download=1.json"),
        ("02000000", "api_v0_tasks_timeline_job_02000000.json"),
        ("03000000", "api_v0_tasks_timeline_job_03000000.json"),
    ],
)
def test_timeline(live_index: SessionIndex, job: str | None, answer: str) -> None:
    got, want = orjson.loads(timeline(live_index, job)), live(answer)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w)
        for key in ("ts", "dur"):  # the fixture's ns are recovered from Ray's ms floats
            if key in w:
                assert math.isclose(g.pop(key), w.pop(key), abs_tol=0.01)
        assert g == w


def test_actors(live_index: SessionIndex) -> None:
    assert orjson.loads(state.all_actors(live_index)) == live("logical_actors.json")
    want = live("logical_actors_ACTORID.json")
    actor_id = want["data"]["detail"]["actorId"]
    assert orjson.loads(state.one_actor(live_index, actor_id)) == want
    assert orjson.loads(state.one_actor(live_index, actor_id.upper())) == want
    missing = orjson.loads(state.one_actor(live_index, "00" * 16))
    assert missing == {"result": False, "msg": "Actor not found.", "data": {"detail": None}}


def test_actors_by_ids(live_index: SessionIndex) -> None:
    everything = live("logical_actors.json")["data"]["actors"]
    two = sorted(everything)[:2]
    got = orjson.loads(state.all_actors(live_index, [*two, "nope"]))["data"]["actors"]
    assert got == {k: everything[k] for k in two}


def test_jobs(live_index: SessionIndex) -> None:
    jobs = orjson.loads(state.all_jobs(live_index))
    assert sorted(jobs, key=repr) == sorted(live("api_jobs.json"), key=repr)
    assert [j["start_time"] for j in jobs] == sorted(j["start_time"] for j in jobs)
    for job_id, answer in (
        ("02000000", "api_jobs_02000000_by_job_id.json"),
        ("raysubmit_zXeGXHwfPUEBW8Ci", "api_jobs_raysubmit_zXeGXHwfPUEBW8Ci.json"),
        ("wl-job2-fails", "api_jobs_wl-job2-fails.json"),
        ("03000000", "api_jobs_03000000_by_job_id.json"),
        ("raysubmit_DxVK3y6pibPJrgLi", "api_jobs_raysubmit_DxVK3y6pibPJrgLi.json"),
    ):
        found = state.one_job(live_index, job_id)
        assert found is not None and orjson.loads(found) == live(answer), job_id
    assert state.one_job(live_index, "doesnotexist") is None


def test_nodes(live_index: SessionIndex) -> None:
    assert orjson.loads(state.node_summary(live_index)) == live("nodes_view=summary.json")
    assert orjson.loads(state.host_name_list(live_index)) == live("nodes_view=hostNameList.json")
    node_id = live("nodes_NODEID.json")["data"]["detail"]["raylet"]["nodeId"]
    detail = orjson.loads(state.node_detail(live_index, node_id.upper()) or b"null")
    want = live("nodes_NODEID.json")["data"]["detail"]
    assert detail["msg"] == "Node details fetched."
    assert set(detail["data"]["detail"]["actors"]) == set(want["actors"])
    assert state.node_detail(live_index, "ab" * 28) is None


def test_events(live_index: SessionIndex) -> None:
    want = live("events.json")
    # The live head lists a job it was merely asked about (03000000) with no events.
    want["data"]["events"] = {k: v for k, v in want["data"]["events"].items() if v}
    got = orjson.loads(state.all_events(live_index))
    assert got == want
    assert orjson.loads(state.job_events(live_index, "03000000")) == live("events_job_03000000.json")
    empty = orjson.loads(state.job_events(live_index, ""))
    assert empty == {"result": True, "msg": "Job events fetched.", "data": {"jobId": "", "events": []}}

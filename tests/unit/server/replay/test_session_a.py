"""Session A replayed from its real Ray 2.60 events, compared with what the live
dashboard answered for the same session (``ray-samples/api``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from runtime.server.replay.jobs import merge_jobs, parse_snapshot
from runtime.server.replay.render_tasks import TaskRenderer, row_brief_json
from runtime.server.replay.session import SessionReplay
from tests.support.sample_session import API, SESSION_A, load_events

#: Times taken from events vs the GCS tables differ by a few ms.
TIME_TOLERANCE_MS = 5


@pytest.fixture(scope="module")
def replay() -> SessionReplay:
    replay = SessionReplay()
    replay.feed(load_events())
    return replay


def live(name: str) -> Any:
    return orjson.loads((API / name).read_bytes())


def test_counts(replay: SessionReplay) -> None:
    counters = replay.counters
    assert counters.events == 259 and counters.duplicate_events == 0 and counters.bad_events == 0
    assert counters.by_type["TASK_LIFECYCLE_EVENT"] == 111 and counters.by_type["WORKER_LIFECYCLE_EVENT"] == 37
    assert len(replay.tasks) == 48 and len(replay.actors.actors) == 9


def test_tasks_match_the_live_state_api(replay: SessionReplay) -> None:
    renderer = TaskRenderer(replay.tasks)
    rows = {(r[0], r[1]): r for r in renderer.rows()}
    answer = live("api_v0_tasks_detail=1_limit=100.json")["data"]["result"]["result"]
    brief_answer = {
        (t["task_id"], t["attempt_number"]): t for t in live("api_v0_tasks_nodetail.json")["data"]["result"]["result"]
    }
    assert len(answer) == 41  # the live default drops the 7 driver tasks
    for task in answer:
        key = (task["task_id"], task["attempt_number"])
        row = rows[key]
        ours = orjson.loads(renderer.detail_json(row))
        expected = {k: v for k, v in task.items() if k != "profiling_data"}  # not exported in session A
        assert ours == expected, key
        assert list(ours) == list(expected)
        assert orjson.loads(row_brief_json(row)) == brief_answer[key]
        assert list(orjson.loads(row_brief_json(row))) == list(brief_answer[key])


def test_hidden_internal_jobs_are_kept(replay: SessionReplay) -> None:
    rows = list(TaskRenderer(replay.tasks).rows())
    drivers = {r[2] for r in rows if r[7] == "DRIVER_TASK"}
    assert {"01000000", "05000000"} <= drivers


def test_actors_match_the_live_logical_actors(replay: SessionReplay) -> None:
    ours = {row.actor_id: orjson.loads(row.actor_json) for row in replay.actors.rows(replay.nodes.ips())}
    answer = live("logical_actors.json")["data"]["actors"]
    assert set(ours) == set(answer)
    for actor_id, expected in answer.items():
        actor = ours[actor_id]
        for key, value in expected.items():
            if key == "mem":
                continue  # process memory of a live worker
            if key in ("startTime", "endTime", "timestamp"):
                assert abs(actor[key] - value) <= TIME_TOLERANCE_MS, (actor_id, key)
            else:
                assert actor[key] == value, (actor_id, key)


def test_jobs_merged_with_the_stored_snapshot(replay: SessionReplay) -> None:
    snapshot = (API / "api_jobs.json").read_bytes()
    rows = merge_jobs(replay.jobs.event_objects(replay.nodes.ips()), parse_snapshot(snapshot))
    ours = {row.job_key: orjson.loads(row.job_json) for row in rows}
    expected = {job["job_id"] or job["submission_id"]: job for job in live("api_jobs.json")}
    assert set(ours) == set(expected)
    for key, job in expected.items():
        for field, value in job.items():
            if field == "driver_node_id" and key == "04000000":
                # Live leaves it null for a plain driver; its driver-job event names the node.
                assert value is None and ours[key][field] in replay.nodes.ips()
                continue
            assert ours[key][field] == value, (key, field)
    failed = ours["03000000"]
    assert failed["status"] == "FAILED" and failed["submission_id"] == "wl-job2-fails"
    entrypoint_failure = next(row for row in rows if row.job_id is None)
    assert entrypoint_failure.job_key == entrypoint_failure.submission_id == "raysubmit_DxVK3y6pibPJrgLi"


def test_jobs_from_events_alone_never_guess_a_status(replay: SessionReplay) -> None:
    jobs = replay.jobs.event_objects(replay.nodes.ips())
    assert {job["status"] for job in jobs.values()} == {""}
    job = jobs["02000000"]
    assert job["submission_id"] == "raysubmit_zXeGXHwfPUEBW8Ci" and job["type"] == "SUBMISSION"
    assert job["metadata"] == {"owner": "research", "purpose": "history-server-samples"}
    assert job["runtime_env"] == {"working_dir": "gcs://_ray_pkg_f95e4a6ff7e3c029.zip"}
    assert job["driver_info"] == {"id": "02000000", "node_ip_address": "192.0.2.2", "pid": "10225"}
    assert job["start_time"] == 1795311957039 and job["end_time"] == 1795311968420
    assert jobs["04000000"]["type"] == "DRIVER" and jobs["04000000"]["submission_id"] is None


def test_node_summary_matches_the_live_answer(replay: SessionReplay) -> None:
    (row,) = replay.nodes.rows(SESSION_A)
    answer = live("nodes_view=summary.json")["data"]
    expected = answer["summary"][0]
    node = orjson.loads(row.node_json)
    assert row.resources_text == answer["nodeLogicalResources"][row.node_id]
    assert (node["hostname"], node["ip"]) == (expected["hostname"], expected["ip"])
    for key in (
        "nodeId",
        "nodeManagerAddress",
        "nodeManagerHostname",
        "rayletSocketName",
        "objectStoreSocketName",
        "resourcesTotal",
        "nodeName",
        "startTimeMs",
        "isHeadNode",
        "labels",
        "state",
        "instanceId",
        "nodeTypeName",
        "instanceTypeName",
        "endTimeMs",
        "stateMessage",
    ):
        assert node["raylet"][key] == expected["raylet"][key], key
    assert (
        node["raylet"]["storeStats"]["objectStoreBytesAvail"]
        == expected["raylet"]["storeStats"]["objectStoreBytesAvail"]
    )
    raw = orjson.loads(row.raw_json)
    assert raw["definition"]["nodeId"] == row.node_id and raw["transitions"][0]["state"] == "ALIVE"

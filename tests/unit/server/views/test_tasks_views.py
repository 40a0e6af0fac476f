"""The task routes over HTTP: /api/v0/tasks, /summarize, /timeline."""

from __future__ import annotations

import orjson
import pytest

from tests.unit.server.queries.app_fixture import SampleApp, sample_app

JOB2 = "filter_keys=job_id&filter_predicates=%3D&filter_values=02000000"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> SampleApp:
    return sample_app(tmp_path_factory.mktemp("bucket"), tmp_path_factory.mktemp("cache"))


def test_list_and_trailing_slash(served: SampleApp) -> None:
    client = served.client()
    for url in ("/api/v0/tasks", "/api/v0/tasks/"):
        response = client.get(url)
        assert response.status_code == 200
        assert response.mimetype == "application/json"
        body = orjson.loads(response.data)["data"]["result"]
        assert (body["total"], body["num_filtered"], len(body["result"])) == (41, 41, 41)
        assert "events" not in body["result"][0]  # brief form without detail


def test_filters_limit_and_detail(served: SampleApp) -> None:
    body = orjson.loads(served.client().get(f"/api/v0/tasks?detail=1&limit=3&{JOB2}").data)["data"]["result"]
    assert (body["total"], body["num_after_truncation"], body["num_filtered"]) == (34, 34, 34)
    assert len(body["result"]) == 3 and all(t["job_id"] == "02000000" for t in body["result"])
    assert "events" in body["result"][0]


def test_case_insensitive_equality(served: SampleApp) -> None:
    url = "/api/v0/tasks?filter_keys=state&filter_predicates=%3D&filter_values=failed&filter_keys=task_name"
    url += "&filter_predicates=%3D&filter_values=CRASHY-TASK"
    body = orjson.loads(served.client().get(url).data)["data"]["result"]
    assert [(t["name"], t["attempt_number"]) for t in body["result"]] == [("crashy-task", 0)]


def test_drivers_only_when_asked(served: SampleApp) -> None:
    client = served.client()
    url = "/api/v0/tasks?filter_keys=task_type&filter_predicates=%3D&filter_values=DRIVER_TASK"
    assert orjson.loads(client.get(url).data)["data"]["result"]["num_filtered"] == 0
    drivers = orjson.loads(client.get(url + "&exclude_driver=false").data)["data"]["result"]
    assert drivers["num_filtered"] > 0 and {t["type"] for t in drivers["result"]} == {"DRIVER_TASK"}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=abc", "invalid limit"),
        ("limit=-1", "cannot be negative"),
        ("limit=10001", "limit cannot be greater than 10000"),
        ("detail=invalid", "invalid detail"),
        ("exclude_driver=invalid", "invalid exclude_driver"),
        ("timeout=x", "invalid timeout"),
        ("filter_keys=job_id", "must have the same length"),
        ("filter_keys=colour&filter_predicates=%3D&filter_values=red", "unsupported filter key 'colour'"),
        ("filter_keys=job_id&filter_predicates=~&filter_values=1", "unsupported filter predicate"),
    ],
)
def test_bad_options_are_400_json(served: SampleApp, query: str, message: str) -> None:
    for route in ("/api/v0/tasks", "/api/v0/tasks/summarize"):
        response = served.client().get(f"{route}?{query}")
        assert response.status_code == 400
        body = orjson.loads(response.data)
        assert body["result"] is False and message in body["msg"]


def test_bad_options_do_not_build_an_index(tmp_path_factory: pytest.TempPathFactory) -> None:
    fresh = sample_app(tmp_path_factory.mktemp("bucket"), tmp_path_factory.mktemp("cache"))
    assert fresh.client().get("/api/v0/tasks?limit=abc").status_code == 400
    assert not list(fresh.cache_dir.rglob("*.sqlite"))


def test_missing_cookie_is_400(served: SampleApp) -> None:
    response = served.app.test_client().get("/api/v0/tasks")
    assert response.status_code == 400
    assert "Cookie not found" in orjson.loads(response.data)["msg"]


def test_summarize(served: SampleApp) -> None:
    client = served.client()
    by_name = orjson.loads(client.get("/api/v0/tasks/summarize").data)["data"]["result"]
    cluster = by_name["result"]["node_id_to_summary"]["cluster"]
    assert cluster["summary_by"] == "func_name"
    assert (cluster["total_tasks"], cluster["total_actor_tasks"], cluster["total_actor_scheduled"]) == (21, 14, 6)
    assert cluster["summary"]["Counter.incr"] == {
        "func_or_class_name": "Counter.incr",
        "type": "ACTOR_TASK",
        "state_counts": {"FINISHED": 4},
    }
    lineage = orjson.loads(client.get(f"/api/v0/tasks/summarize/?summary_by=lineage&{JOB2}").data)["data"]["result"]
    tree = lineage["result"]["node_id_to_summary"]["cluster"]
    assert tree["summary_by"] == "lineage" and lineage["num_filtered"] == 34
    assert {n["name"] for n in tree["summary"]} >= {"Counter", "parent-task", "BadInit"}
    assert lineage["warnings"] is None


def test_timeline(served: SampleApp) -> None:
    client = served.client()
    response = client.get("/api/v0/tasks/timeline?job_id=02000000")
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert orjson.loads(response.data) == []  # session A exported no profile events
    assert "Content-Disposition" not in response.headers
    download = client.get("/api/v0/tasks/timeline?download=1&job_id=02000000")
    disposition = download.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="timeline-02000000-') and disposition.endswith('.json"')
    plain = client.get("/api/v0/tasks/timeline?download=1").headers["Content-Disposition"]
    assert plain.startswith('attachment; filename="timeline-2') and "None" not in plain

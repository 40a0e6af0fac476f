"""The state routes over HTTP: actors, jobs, nodes, events, cluster status,
timezone / cluster metadata snapshots, metrics probes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from flask.testing import FlaskClient

from tests.support.sample_session import API
from tests.unit.server.queries.app_fixture import SampleApp, sample_app


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> SampleApp:
    return sample_app(tmp_path_factory.mktemp("bucket"), tmp_path_factory.mktemp("cache"))


def get(client: FlaskClient, url: str, status: int = 200) -> Any:
    response = client.get(url)
    assert response.status_code == status, (url, response.data[:300])
    assert response.mimetype == "application/json"
    return orjson.loads(response.data)


def live(name: str) -> Any:
    return orjson.loads((API / name).read_bytes())


def test_actors(served: SampleApp) -> None:
    client = served.client()
    everything = get(client, "/logical/actors")
    assert everything["msg"] == "All actors fetched." and len(everything["data"]["actors"]) == 9
    actor_id = sorted(everything["data"]["actors"])[0]
    one = get(client, f"/logical/actors/{actor_id}")
    assert one == {
        "result": True,
        "msg": "Actor details fetched.",
        "data": {"detail": everything["data"]["actors"][actor_id]},
    }
    two = get(client, f"/logical/actors?ids={actor_id},nothing")
    assert list(two["data"]["actors"]) == [actor_id]


@pytest.mark.parametrize("actor_id", ["0" * 32, "not/an/id"])
def test_unknown_actor_is_200_result_false(served: SampleApp, actor_id: str) -> None:
    body = get(served.client(), f"/logical/actors/{actor_id}")
    assert body == {"result": False, "msg": "Actor not found.", "data": {"detail": None}}


def test_jobs(served: SampleApp) -> None:
    client = served.client()
    for url in ("/api/jobs/", "/api/jobs"):
        jobs = get(client, url)
        assert isinstance(jobs, list) and len(jobs) == 4
        assert [j["start_time"] for j in jobs] == sorted(j["start_time"] for j in jobs)
    by_hex = get(client, "/api/jobs/03000000")
    assert by_hex == get(client, "/api/jobs/wl-job2-fails")  # submission id works too
    assert by_hex["job_id"] == "03000000" and by_hex["status"] == "FAILED"
    assert get(client, "/api/jobs/raysubmit_DxVK3y6pibPJrgLi")["job_id"] is None  # never connected: no job id


def test_unknown_job_is_404_json(served: SampleApp) -> None:
    body = get(served.client(), "/api/jobs/doesnotexist", status=404)
    assert body == {"result": False, "msg": "Job doesnotexist does not exist"}


def test_nodes(served: SampleApp) -> None:
    client = served.client()
    summary = get(client, "/nodes?view=summary")
    assert summary == get(client, "/nodes")  # no view: the summary, as KubeRay's Go history server
    node_id = summary["data"]["summary"][0]["raylet"]["nodeId"]
    assert summary["data"]["nodeLogicalResources"] == live("nodes_view=summary.json")["data"]["nodeLogicalResources"]
    assert get(client, "/nodes?view=hostnamelist")["data"] == {"hostNameList": ["vm"]}
    detail = get(client, f"/nodes/{node_id}")
    assert detail["msg"] == "Node details fetched."
    actors = detail["data"]["detail"]["actors"]
    assert len(actors) == 9 and all(a["address"]["nodeId"] == node_id for a in actors.values())
    assert detail["data"]["detail"]["raylet"] == summary["data"]["summary"][0]["raylet"]


def test_node_errors(served: SampleApp) -> None:
    client = served.client()
    bad_view = get(client, "/nodes?view=physical", status=400)
    assert bad_view["result"] is False and "unsupported view parameter: physical" in bad_view["msg"]
    assert "not found" in get(client, "/nodes/" + "ab" * 28, status=404)["msg"]


def test_events(served: SampleApp) -> None:
    client = served.client()
    for url in ("/events", "/events/"):
        body = get(client, url)
        assert body["msg"] == "All events fetched."
        assert [e["message"] for e in body["data"]["events"]["global"]] == [
            e["message"] for e in live("events.json")["data"]["events"]["global"]
        ]
    job = get(client, "/events?job_id=02000000")
    assert job["msg"] == "Job events fetched." and job["data"]["jobId"] == "02000000"
    assert len(job["data"]["events"]) == 1
    assert get(client, "/events?job_id=")["data"] == {"jobId": "", "events": []}


def test_cluster_status(served: SampleApp) -> None:
    client = served.client()
    assert get(client, "/api/cluster_status") == {
        "result": True,
        "msg": "Got cluster status.",
        "data": {"autoscalingStatus": None, "autoscalingError": None, "clusterStatus": None},
    }
    text = get(client, "/api/cluster_status?format=1")
    assert text["msg"] == "Got formatted cluster status."
    status = text["data"]["clusterStatus"]
    assert status.startswith("======== Autoscaler status: 2026-11-22 ")
    assert "Idle:\n 1 default\n" in status  # from the stored debug_state.txt
    assert " 0.0/2.0 CPU\n 0B/16.07GiB memory\n 0B/6.89GiB object_store_memory\n" in status


def test_cluster_status_without_debug_state(served: SampleApp) -> None:
    status = get(served.client(served.bare), "/api/cluster_status?format=1")["data"]["clusterStatus"]
    assert "Active:\n (no active nodes)\nIdle:\n (no idle nodes)\n" in status
    assert "Total Usage:\n (no resources)\n" in status


def test_snapshots(served: SampleApp) -> None:
    client = served.client()
    assert get(client, "/timezone") == live("timezone.json")
    assert get(client, "/api/v0/cluster_metadata") == live("api_v0_cluster_metadata.json")
    bare = served.client(served.bare)
    assert get(bare, "/timezone") == {"offset": "", "value": ""}
    assert get(bare, "/api/v0/cluster_metadata", status=404) == {"result": False, "msg": "Cluster metadata not found"}


@pytest.mark.parametrize(
    ("url", "msg", "field"),
    [
        ("/api/grafana_health", "Grafana healthcheck failed", "exception"),
        ("/api/prometheus_health", "prometheus healthcheck failed.", "reason"),
    ],
)
def test_metrics_probes_mirror_ray(served: SampleApp, url: str, msg: str, field: str) -> None:
    body = get(served.client(), url, status=500)
    assert body["result"] is False and body["msg"] == msg
    flag = "--grafana-url" if "grafana" in url else "--prometheus-url"
    assert f"no {'Grafana' if 'grafana' in url else 'Prometheus'} is configured" in body["data"][field]
    assert flag in body["data"][field]
    # Same shape as the live head's answer when Grafana/Prometheus is absent.
    name = "api_grafana_health.json" if "grafana" in url else "api_prometheus_health.json"
    assert set(body) == set(live(name)) and set(body["data"]) == set(live(name)["data"])

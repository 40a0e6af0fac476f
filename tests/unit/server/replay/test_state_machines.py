"""Actors, driver jobs and nodes: merge rules and order independence."""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from runtime.server.replay.jobs import merge_jobs, parse_snapshot
from runtime.server.replay.nodes import format_memory, resources_text
from runtime.server.replay.session import SessionReplay
from tests.unit.server.replay.events import NODE_B64, NODE_HEX, WORKER_B64, WORKER_HEX, envelope, ts

ACTOR = "4AKRNGpqk5bx+zXuAgAAAA=="
ACTOR_HEX = "e00291346a6a9396f1fb35ee02000000"


def actor_events() -> list[dict[str, Any]]:
    definition = {
        "actorId": ACTOR,
        "jobId": "AgAAAA==",
        "name": "my-counter",
        "className": "Counter",
        "requiredResources": {"CPU": 0.25},
        "placementGroupId": "",
        "labelSelector": {},
        "callSite": "",
    }
    pending = [{"state": "DEPENDENCIES_UNREADY", "timestamp": ts(1)}, {"state": "PENDING_CREATION", "timestamp": ts(2)}]
    alive = [
        {
            "state": "ALIVE",
            "timestamp": ts(3),
            "nodeId": NODE_B64,
            "workerId": WORKER_B64,
            "pid": 10449,
            "port": 12669,
            "reprName": "Counter(0)",
        }
    ]
    restart = [
        {"state": "RESTARTING", "timestamp": ts(4)},
        {"state": "ALIVE", "timestamp": ts(5), "nodeId": NODE_B64, "workerId": WORKER_B64, "pid": 10450, "port": 12670},
    ]
    cause = {"actorDiedErrorContext": {"errorMessage": "killed", "nodeIpAddress": "192.0.2.9", "pid": 10450}}
    dead = [{"state": "DEAD", "timestamp": ts(6), "deathCause": cause}]
    again = [{"state": "DEAD", "timestamp": ts(40), "deathCause": cause}]  # re-reported at job end
    return [envelope("ACTOR_DEFINITION_EVENT", "actorDefinitionEvent", definition)] + [
        envelope("ACTOR_LIFECYCLE_EVENT", "actorLifecycleEvent", {"actorId": ACTOR, "stateTransitions": trs})
        for trs in (pending, alive, restart, dead, again)
    ]


def render_actor(events: list[dict[str, Any]]) -> dict[str, Any]:
    replay = SessionReplay()
    replay.feed(events)
    (row,) = replay.actors.rows({NODE_HEX: "192.0.2.2"})
    return dict(orjson.loads(row.actor_json))


def test_actor_lifecycle_rules() -> None:
    actor = render_actor(actor_events())
    assert actor["actorId"] == ACTOR_HEX and actor["jobId"] == "02000000" and actor["state"] == "DEAD"
    assert actor["address"] == {"nodeId": NODE_HEX, "ipAddress": "192.0.2.9", "port": 12670, "workerId": WORKER_HEX}
    assert actor["pid"] == 10450 and actor["numRestarts"] == "1" and actor["reprName"] == "Counter(0)"
    assert actor["exitDetail"] == "killed"
    assert actor["startTime"] == 1795311903000 and actor["endTime"] == 1795311906000  # first DEAD of the run
    assert actor["timestamp"] == 1795311940000.0
    assert actor["className"] == actor["actorClass"] == "Counter" and "placementGroupId" not in actor


def test_actor_is_the_same_in_every_order() -> None:
    events = actor_events()
    results = {orjson.dumps(render_actor(list(order))) for order in itertools.permutations(events)}
    assert len(results) == 1


def test_actor_without_definition_takes_job_from_its_id() -> None:
    actor = render_actor(actor_events()[1:3])
    assert actor["jobId"] == "02000000" and actor["state"] == "ALIVE" and actor["address"]["ipAddress"] == "192.0.2.2"
    assert "endTime" not in actor and "timestamp" not in actor


def test_creation_failure_gives_the_exit_detail() -> None:
    cause = {"creationTaskFailureContext": {"formattedExceptionString": "Traceback: boom"}}
    event = envelope(
        "ACTOR_LIFECYCLE_EVENT",
        "actorLifecycleEvent",
        {"actorId": ACTOR, "stateTransitions": [{"state": "DEAD", "timestamp": ts(6), "deathCause": cause}]},
    )
    assert render_actor([event])["exitDetail"] == "Traceback: boom"


def job_events(status: str | None = None) -> list[dict[str, Any]]:
    definition: dict[str, Any] = {
        "jobId": "AwAAAA==",
        "driverPid": "10824",
        "driverNodeId": NODE_B64,
        "entrypoint": "python job2.py",
        "config": {
            "serializedRuntimeEnv": "{}",
            "metadata": {"job_name": "wl-job2-fails", "job_submission_id": "wl-job2-fails", "team": "x"},
        },
    }
    if status:
        definition["status"] = status
    return [
        envelope("DRIVER_JOB_DEFINITION_EVENT", "driverJobDefinitionEvent", definition),
        envelope(
            "DRIVER_JOB_LIFECYCLE_EVENT",
            "driverJobLifecycleEvent",
            {"jobId": "AwAAAA==", "stateTransitions": [{"state": "CREATED", "timestamp": ts(1)}]},
        ),
        envelope(
            "DRIVER_JOB_LIFECYCLE_EVENT",
            "driverJobLifecycleEvent",
            {"jobId": "AwAAAA==", "stateTransitions": [{"state": "FINISHED", "timestamp": ts(9)}]},
        ),
    ]


def jobs_of(events: list[dict[str, Any]], snapshot: bytes | None = None) -> dict[str, dict[str, Any]]:
    replay = SessionReplay()
    replay.feed(events)
    rows = merge_jobs(replay.jobs.event_objects({NODE_HEX: "192.0.2.2"}), parse_snapshot(snapshot))
    return {row.job_key: orjson.loads(row.job_json) for row in rows}


def test_job_from_events() -> None:
    job = jobs_of(job_events())["03000000"]
    assert job["status"] == "" and job["submission_id"] == "wl-job2-fails" and job["type"] == "SUBMISSION"
    assert job["metadata"] == {"team": "x"}
    assert job["start_time"] == 1795311901000 and job["end_time"] == 1795311909000
    assert job["driver_info"] == {"id": "03000000", "node_ip_address": "192.0.2.2", "pid": "10824"}
    assert job["driver_node_id"] == NODE_HEX and job["runtime_env"] == {}


def test_job_status_rules() -> None:
    assert jobs_of(job_events()[:2])["03000000"]["status"] == "RUNNING"  # created, never finished
    assert jobs_of(job_events("STOPPED"))["03000000"]["status"] == "STOPPED"


def test_job_in_any_order() -> None:
    events = job_events()
    assert len({orjson.dumps(jobs_of(list(order))) for order in itertools.permutations(events)}) == 1


def test_snapshot_wins_and_adds_jobs_ray_never_exported() -> None:
    snapshot = [
        {
            "type": "SUBMISSION",
            "job_id": "03000000",
            "submission_id": "wl-job2-fails",
            "status": "FAILED",
            "message": "exit 3",
            "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR",
            "start_time": 5,
            "end_time": 6,
            "driver_exit_code": 3,
            "driver_node_id": None,
        },
        {"type": "SUBMISSION", "job_id": None, "submission_id": "raysubmit_x", "status": "FAILED"},
    ]
    jobs = jobs_of(job_events(), orjson.dumps(snapshot))
    job = jobs["03000000"]
    assert (job["status"], job["message"], job["start_time"], job["driver_exit_code"]) == ("FAILED", "exit 3", 5, 3)
    assert job["driver_node_id"] == NODE_HEX  # a null in the snapshot does not erase a known node
    assert jobs["raysubmit_x"]["job_id"] is None
    # Matched by submission id when the snapshot lacks the job id.
    by_submission = jobs_of(
        job_events(), orjson.dumps([{"job_id": None, "submission_id": "wl-job2-fails", "status": "SUCCEEDED"}])
    )
    assert list(by_submission) == ["03000000"] and by_submission["03000000"]["status"] == "SUCCEEDED"


def test_unusable_snapshots_are_ignored() -> None:
    for data in (b"not json", b'{"a": 1}', b"", None):
        assert parse_snapshot(data) == []
    assert parse_snapshot(b'{"data": [{"job_id": "01"}]}') == [{"job_id": "01"}]


def node_events(dead: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    definition = {
        "nodeId": NODE_B64,
        "nodeIpAddress": "10.0.0.2",
        "labels": {"ray.io/node-group": "workers"},
        "startTimestamp": "2026-11-22T01:45:31.196Z",
        "hostname": "w1",
        "nodeName": "10.0.0.2",
    }
    alive = [
        {
            "timestamp": ts(2),
            "state": "ALIVE",
            "resources": {"CPU": 4.0, "memory": 10 * 1024**3, "object_store_memory": 2 * 1024**3, "node:10.0.0.2": 1.0},
        }
    ]
    events = [
        envelope("NODE_DEFINITION_EVENT", "nodeDefinitionEvent", definition),
        envelope("NODE_LIFECYCLE_EVENT", "nodeLifecycleEvent", {"nodeId": NODE_B64, "stateTransitions": alive}),
    ]
    if dead is not None:
        events.append(
            envelope(
                "NODE_LIFECYCLE_EVENT",
                "nodeLifecycleEvent",
                {"nodeId": NODE_B64, "stateTransitions": [{"timestamp": ts(50), "state": "DEAD", "deathInfo": dead}]},
            )
        )
    return events


def test_dead_node() -> None:
    replay = SessionReplay()
    replay.feed(node_events({"reason": "AUTOSCALER_DRAIN_PREEMPTED", "reasonMessage": "spot reclaimed"}))
    (row,) = replay.nodes.rows("session_x")
    node = orjson.loads(row.node_json)["raylet"]
    assert row.state == "DEAD" and node["stateMessage"] == "Terminated due to preemption: spot reclaimed"
    assert node["endTimeMs"] == "1795311950000" and node["storeStats"]["objectStoreBytesAvail"] == "0"
    assert node["resourcesTotal"]["objectStoreMemory"] == 2 * 1024**3 and not node["isHeadNode"]
    assert row.node_group == "workers" and node["nodeTypeName"] == "workers"
    assert row.resources_text == "0.0/4.0 CPU\n0B/10.00GiB memory\n0B/2.00GiB object_store_memory"


def test_node_without_transitions_is_not_listed() -> None:
    replay = SessionReplay()
    replay.feed(node_events()[:1])
    assert replay.nodes.rows("s") == [] and replay.nodes.ips() == {NODE_HEX: "10.0.0.2"}


def test_memory_format() -> None:
    assert format_memory(17257519104) == "16.07GiB" and format_memory(512) == "512B"
    assert format_memory(3 * 1024**4) == "3.00TiB" and format_memory(1536) == "1.50KiB"
    assert resources_text({"accelerator_type:A100": 1, "GPU": 2, "node:x": 1}) == "0.0/2.0 GPU"

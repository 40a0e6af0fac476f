"""Task-attempt state machine and its order independence."""

from __future__ import annotations

import base64
import itertools
import random
from typing import Any

import orjson
import pytest

from runtime.server.replay.definitions import profile_extra
from runtime.server.replay.render_tasks import TaskRenderer
from runtime.server.replay.session import SessionReplay, base_ns_for
from runtime.server.replay.task_events import EVENT_TYPES, decode_task_blob
from runtime.storage.layout import session_created_at
from tests.unit.server.replay.events import (
    NODE_HEX,
    TASK_B64,
    TASK_HEX,
    WORKER_HEX,
    definition,
    executor,
    lifecycle,
    owner,
    ts,
)


def render(events: list[dict[str, Any]], base_ns: int = 0) -> dict[tuple[str, int], dict[str, Any]]:
    """The rendered tasks, the same whether the task events arrive as dicts or as the
    typed events of a task shard's fast path."""
    replay = SessionReplay(base_ns=base_ns)
    replay.feed(events)
    rendered = _rendered(replay)
    assert _rendered(typed_replay(events, base_ns)) == rendered
    return rendered


def typed_replay(events: list[dict[str, Any]], base_ns: int = 0) -> SessionReplay:
    """``events`` replayed with the task events decoded by ``decode_task_blob`` when
    it takes them (their blob falls back to dicts otherwise, as in a shard)."""
    replay = SessionReplay(base_ns=base_ns)
    task_types = set(EVENT_TYPES.values())
    tasks = [e for e in events if e.get("eventType") in task_types]
    replay.feed(e for e in events if e.get("eventType") not in task_types)
    typed = decode_task_blob(b"\n".join(orjson.dumps(e) for e in tasks)) if tasks else []
    if typed is None:
        replay.feed(tasks)
    else:
        replay.feed_task_events(typed)
    return replay


def _rendered(replay: SessionReplay) -> dict[tuple[str, int], dict[str, Any]]:
    renderer = TaskRenderer(replay.tasks)
    return {(row[0], row[1]): orjson.loads(renderer.detail_json(row)) for row in renderer.rows()}


def one(events: list[dict[str, Any]], base_ns: int = 0) -> dict[str, Any]:
    rendered = render(events, base_ns)
    assert len(rendered) == 1
    return next(iter(rendered.values()))


def test_lifecycle_before_definition_and_split_owner_executor() -> None:
    task = one([executor(), owner(), definition()])
    assert task["task_id"] == TASK_HEX
    assert task["state"] == "FINISHED"
    assert task["name"] == "parent-task" and task["func_or_class_name"] == "parent"
    assert task["node_id"] == NODE_HEX and task["worker_id"] == WORKER_HEX and task["worker_pid"] == 10258
    assert [e["state"] for e in task["events"]] == [
        "PENDING_ARGS_AVAIL",
        "PENDING_NODE_ASSIGNMENT",
        "SUBMITTED_TO_WORKER",
        "RUNNING",
        "FINISHED",
    ]
    assert task["creation_time_ms"] == task["events"][0]["created_ms"]
    assert task["start_time_ms"] is not None and task["end_time_ms"] is not None
    assert task["placement_group_id"] is None and task["actor_id"] is None
    assert task["required_resources"] == {"CPU": 0.25}
    assert task["runtime_env_info"]["serialized_runtime_env"] == "{}"


def test_compact_transitions_render_the_same_times() -> None:
    events = [definition(), owner(), executor()]
    base = base_ns_for(session_created_at("session_2026-11-22_01-45-25_333080_9264"))
    assert one(events) == one(events, base_ns=base)


def test_definition_only_has_empty_state() -> None:
    task = one([definition()])
    assert task["state"] == "" and task["events"] == [] and task["creation_time_ms"] is None


def test_attempts_are_isolated() -> None:
    failed = owner(attempt=0, end="FAILED", rayErrorInfo={"errorType": "WORKER_DIED", "errorMessage": ""})
    rendered = render([definition(attempt=0), definition(attempt=1), failed, owner(attempt=1), executor(attempt=1)])
    first, second = rendered[(TASK_HEX, 0)], rendered[(TASK_HEX, 1)]
    assert first["state"] == "FAILED" and first["error_type"] == "WORKER_DIED" and first["error_message"] == ""
    assert first["worker_pid"] is None and first["start_time_ms"] is None
    assert second["state"] == "FINISHED" and second["error_type"] is None and second["worker_pid"] == 10258


def test_transitions_are_deduplicated_and_replay_is_idempotent() -> None:
    events = [definition(), owner(), executor()]
    once = one(events)
    # Re-sent events get new ids (Ray's retries keep them, the collector may not).
    again = [dict(e, eventId=f"copy-{n}") for n, e in enumerate(events * 3)]
    assert one(events + again) == once
    assert len(once["events"]) == 5


def test_same_timestamp_different_states_are_both_kept() -> None:
    task = one([lifecycle(states=(("PENDING_ARGS_AVAIL", ts(1)), ("PENDING_NODE_ASSIGNMENT", ts(1))))])
    assert [e["state"] for e in task["events"]] == ["PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT"]


def test_metadata_only_lifecycle_keeps_state_and_fields() -> None:
    before = one([definition(), owner(), executor()])
    log_only = lifecycle(workerPid=999, taskLogInfo={"stdoutEnd": "40"})
    after = one([definition(), owner(), executor(), log_only])
    assert after["state"] == before["state"] and after["worker_pid"] == before["worker_pid"] == 10258
    assert after["task_log_info"]["stdout_end"] == 40


START = {"stdoutFile": "/tmp/ray/w.out", "stderrFile": "/tmp/ray/w.err", "stdoutStart": "37", "stderrStart": "5"}
END = {"stdoutEnd": "77", "stderrEnd": "5"}


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_split_task_log_info_converges_in_either_order(order: tuple[int, int]) -> None:
    parts = [executor(taskLogInfo=START), lifecycle(taskLogInfo=END)]
    task = one([definition(), owner(), parts[order[0]], parts[order[1]]])
    assert task["task_log_info"] == {
        "stdout_file": "/tmp/ray/w.out",
        "stderr_file": "/tmp/ray/w.err",
        "stdout_start": 37,
        "stdout_end": 77,
        "stderr_start": 5,
        "stderr_end": 5,
    }


def test_numeric_log_offsets_are_accepted() -> None:
    task = one([executor(taskLogInfo={"stdoutFile": "/o", "stdoutStart": 3, "stdoutEnd": 9})])
    assert task["task_log_info"]["stdout_start"] == 3 and task["task_log_info"]["stdout_end"] == 9


def test_every_order_gives_the_same_task_including_error_info() -> None:
    """KubeRay's Go history server lets the last processed event win: an early
    RUNNING processed late erased the error. Here the newest transition wins."""
    failed = owner(
        end="FAILED",
        rayErrorInfo={"errorType": "TASK_EXECUTION_EXCEPTION", "errorMessage": "\x1b[36mboom\x1b[39m"},
        isDebuggerPaused=False,
        actorReprName="Counter(1)",
    )
    running = executor(isDebuggerPaused=True, actorReprName="Counter(0)", taskLogInfo=START)
    end = lifecycle(taskLogInfo=END)
    events = [definition(), failed, running, end]
    results = [orjson.dumps(one(list(p))) for p in itertools.permutations(events)]
    assert len(set(results)) == 1
    task = orjson.loads(results[0])
    assert task["state"] == "FAILED"
    assert task["error_type"] == "TASK_EXECUTION_EXCEPTION"
    assert task["error_message"] == "boom"  # ANSI colours stripped, as Ray's State API answers
    assert task["is_debugger_paused"] is False  # from the FAILED event: newest transition
    assert task["worker_pid"] == 10258 and task["node_id"] == NODE_HEX


def test_null_never_erases_a_known_value() -> None:
    later_without = lifecycle(states=(("FINISHED", ts(30)),), nodeId="", workerId="", workerPid=0)
    task = one([definition(), owner(), executor(), later_without])
    assert task["node_id"] == NODE_HEX and task["worker_id"] == WORKER_HEX and task["worker_pid"] == 10258


def test_base64_and_hex_spellings_are_one_task() -> None:
    task = one([definition(task=TASK_HEX.upper()), owner(task=TASK_B64), executor(task=TASK_HEX)])
    assert task["task_id"] == TASK_HEX and task["state"] == "FINISHED" and task["name"] == "parent-task"


def test_invalid_events_are_counted() -> None:
    replay = SessionReplay()
    replay.feed([lifecycle(), definition(task=""), {"eventType": 7}, "not an event", {"eventId": "x"}])
    assert replay.counters.bad_events == 5
    assert len(replay.tasks) == 0


def test_actor_creation_task_gets_its_actor_id() -> None:
    task_id = "ffffffffffffffff3e74c855688adc217ece9ea202000000"
    created = definition(task=task_id, taskType="ACTOR_CREATION_TASK", name="BadInit.__init__")
    assert one([created])["actor_id"] == "3e74c855688adc217ece9ea202000000"


def test_actor_task_definition() -> None:
    event = definition()
    payload = event.pop("taskDefinitionEvent")
    payload.pop("taskFunc")
    payload.pop("taskName")
    payload.update(
        actorFunc={"pythonFunctionDescriptor": {"className": "Counter", "functionName": "incr"}},
        actorTaskName="Counter.incr",
        actorId="4AKRNGpqk5bx+zXuAgAAAA==",
    )
    event.update(eventType="ACTOR_TASK_DEFINITION_EVENT", actorTaskDefinitionEvent=payload)
    task = one([event])
    assert task["type"] == "ACTOR_TASK" and task["name"] == "Counter.incr"
    assert task["func_or_class_name"] == "Counter.incr" and task["actor_id"] == "e00291346a6a9396f1fb35ee02000000"


def test_profile_events_become_profiling_data() -> None:
    from tests.unit.server.replay.events import envelope

    entries = [
        {
            "eventName": "task:execute",
            "startTime": "1795311961054531500",
            "endTime": "1795311961937047900",
            "extraData": "{}",
        },
        {
            "eventName": "task::parent-task",
            "startTime": "1795311961054330600",
            "endTime": "1795311961937100600",
            "extraData": '{"name": "__main__.parent", "task_id": "x"}',
        },
        {"eventName": "bad", "startTime": "later", "endTime": "1"},
    ]
    body = {
        "componentType": "worker",
        "componentId": "kHK/+wR4A5JFlr+MZxDh9IwliZ+D5qR4HRNgeA==",
        "nodeIpAddress": "192.0.2.2",
        "events": entries,
    }
    payload = {"taskId": TASK_B64, "attemptNumber": 0, "jobId": "AgAAAA==", "profileEvents": body}
    profile = envelope("TASK_PROFILE_EVENT", "taskProfileEvents", payload)
    task = one([definition(), owner(), profile, dict(profile, eventId="again")])
    data = task["profiling_data"]
    assert data["component_type"] == "worker" and data["component_id"] == WORKER_HEX
    assert data["node_ip_address"] == "192.0.2.2"
    assert [e["event_name"] for e in data["events"]] == ["task:execute", "task::parent-task"]
    assert data["events"][0]["start_time"] == pytest.approx(1795311961054.5315)
    assert data["events"][1]["extra_data"] == {"name": "__main__.parent", "task_id": "x"}
    assert list(task).index("profiling_data") == list(task).index("events") + 1


def test_profile_function_name_when_no_definition() -> None:
    from tests.unit.server.replay.events import envelope

    entry = {"eventName": "task::square", "startTime": "1", "endTime": "2", "extraData": '{"name": "m.square"}'}
    body = {"componentType": "worker", "componentId": "", "nodeIpAddress": "", "events": [entry]}
    payload = {"taskId": TASK_B64, "attemptNumber": 0, "jobId": "AgAAAA==", "profileEvents": body}
    task = one([envelope("TASK_PROFILE_EVENT", "taskProfileEvents", payload)])
    assert task["func_or_class_name"] == "square" and task["job_id"] == "02000000"


def test_a_task_entrys_extra_data_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's task:: extra data names its task: each is parsed for the function name, and
    its JSON is kept from that parse rather than parsed again to render the detail."""
    from tests.unit.server.replay.events import envelope

    extra = '{"name": "m.square", "task_id": "x"}'
    entry = {"eventName": "task::square", "startTime": "1", "endTime": "2", "extraData": extra}
    body = {"componentType": "worker", "componentId": "", "nodeIpAddress": "", "events": [entry]}
    payload = {"taskId": TASK_B64, "attemptNumber": 0, "jobId": "AgAAAA==", "profileEvents": body}
    parsed: list[object] = []
    loads = orjson.loads

    def counting_loads(data: str | bytes) -> object:
        if data == extra:
            parsed.append(data)
        return loads(data)

    monkeypatch.setattr(orjson, "loads", counting_loads)
    replay = SessionReplay()
    replay.feed([envelope("TASK_PROFILE_EVENT", "taskProfileEvents", payload)])
    assert len(parsed) == 1  # for the function name
    (task,) = _rendered(replay).values()
    monkeypatch.undo()
    assert task["profiling_data"]["events"][0]["extra_data"] == {"name": "m.square", "task_id": "x"}
    assert task["func_or_class_name"] == "square" and len(parsed) == 1


@pytest.mark.parametrize(
    ("extra", "func", "stored"),
    [
        ('{"name": "m.f", "task_id": "x"}', "f", b'{"name":"m.f","task_id":"x"}'),
        ('{"task_id": "x"}', "", b'{"task_id":"x"}'),
        ('{"name": ""}', "", b'{"name":""}'),
        ('["m.f"]', "", b'["m.f"]'),
        ("not json", "", b"{}"),
    ],
)
def test_profile_extra_names_the_function_and_reencodes(extra: str, func: str, stored: bytes) -> None:
    assert profile_extra("task::f", extra) == (func, stored)


def test_unknown_state_from_a_newer_ray_is_kept() -> None:
    task = one([lifecycle(states=(("PENDING_ARGS_AVAIL", ts(1)), ("SOME_NEW_STATE", ts(2)), ("RUNNING", ts(3))))])
    known = one([lifecycle(states=(("PENDING_ARGS_AVAIL", ts(1)), ("RUNNING", ts(3))))])
    assert task["state"] == "RUNNING" and [e["state"] for e in task["events"]][1] == "SOME_NEW_STATE"
    # stored by name, its times are those of the same known transitions
    assert (task["creation_time_ms"], task["start_time_ms"]) == (known["creation_time_ms"], known["start_time_ms"])
    assert task["creation_time_ms"] is not None and task["start_time_ms"] is not None


def test_other_timestamp_precisions_are_understood() -> None:
    task = one(
        [lifecycle(states=(("PENDING_ARGS_AVAIL", "2026-11-22T01:45:01.5Z"), ("RUNNING", "2026-11-22T02:45:02+01:00")))]
    )
    assert [e["created_ms"] for e in task["events"]] == [1795311901500.0, 1795311902000.0]


def test_ordered_attempts_are_sorted_by_task_id_then_attempt() -> None:
    """The builder inserts rows in primary-key order (a WITHOUT ROWID table appends
    fastest so): by hex task id, then attempt, whatever order they arrived in and
    whichever spelling (base64 or hex) their events used."""
    rng = random.Random(7)
    raw_ids = [rng.randbytes(24) for _ in range(300)]
    events = []
    for n, raw in enumerate(raw_ids):
        spelled = raw.hex() if n % 3 == 0 else base64.b64encode(raw).decode()
        for attempt in reversed(range(1 + n % 4)):  # later attempts first
            events.append(lifecycle(spelled, attempt, (("RUNNING", ts(3)),)))
    rng.shuffle(events)
    replay = typed_replay(events)
    keys = [(task_id, attempt) for task_id, attempt, _ in replay.tasks.attempts()]
    assert keys == sorted((raw.hex(), attempt) for n, raw in enumerate(raw_ids) for attempt in range(1 + n % 4))

"""The typed fast path of a task shard (msgspec) and its fall back to the tolerant dict path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from runtime.server.index.shard_db import create_bulk_db, write_shards
from runtime.server.replay.render_tasks import TaskRenderer
from runtime.server.replay.session import SessionReplay
from runtime.server.replay.shard import TaskShard
from runtime.server.replay.task_events import (
    EVENT_TYPES,
    DefinitionEvent,
    LifecycleEvent,
    ProfileEvent,
    Transition,
    decode_task_blob,
)
from tests.support.sample_session import RUN_A, RUN_B, load_events
from tests.unit.server.replay.events import TASK_B64, definition, envelope, executor, lifecycle, owner, ts
from tests.unit.server.replay.test_tasks import one, typed_replay


def blob(*events: dict[str, Any]) -> bytes:
    return b"\n".join(orjson.dumps(e) for e in events)


def test_exact_task_events_are_decoded_typed_skipping_what_no_table_reads() -> None:
    profile = envelope("TASK_PROFILE_EVENT", "taskProfileEvents", {"taskId": TASK_B64, "profileEvents": {}})
    events = decode_task_blob(blob(definition(), owner(), profile) + b"\n")
    assert events is not None
    assert [type(e) for e in events] == [DefinitionEvent, LifecycleEvent, ProfileEvent]
    first = events[1].payload
    assert first is not None
    assert first.task_id == TASK_B64 and first.worker_pid == 0
    assert first.state_transitions == [Transition(ts(1), "PENDING_ARGS_AVAIL"), *first.state_transitions[1:]]
    assert not hasattr(events[1], "session_name")


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("another event type", blob(owner(), envelope("NODE_DEFINITION_EVENT", "nodeDefinitionEvent", {}))),
        ("no event type", blob(owner(), {"taskLifecycleEvent": {"taskId": TASK_B64}})),
        ("a blank line", blob(owner()) + b"\n\n" + blob(executor())),
        ("a malformed line", blob(owner()) + b'\n{"eventType": '),
        ("invalid UTF-8", blob(owner()) + b"\n" + blob(lifecycle()).replace(b"CORE_WORKER", b"\xff\xfe")),
        ("an encoded surrogate", blob(owner()) + b"\n" + blob(lifecycle()).replace(b"CORE_WORKER", b"\xed\xa0\x80")),
        ("a lone surrogate", blob(owner()) + b"\n" + blob(lifecycle()).replace(b"CORE_WORKER", b"\\ud800")),
        ("two objects on a line", blob(owner()) + b"\n" + blob(owner()).replace(b"\n", b"") + b"," + blob(owner())),
        ("two values on a line", blob(owner()) + b" " + blob(executor())),
        ("a legacy JSON array", b"[" + blob(owner()) + b"]"),
        ("a payload that is no object", blob(envelope("TASK_LIFECYCLE_EVENT", "taskLifecycleEvent", [1]))),  # type: ignore[arg-type]
        ("transitions that are no list", blob(lifecycle(stateTransitions="RUNNING", taskLogInfo={"stdoutFile": "a"}))),
        ("a transition that is no object", blob(lifecycle(stateTransitions=[["RUNNING", ts(3)]]))),
        ("a definition that is no object", blob(envelope("TASK_DEFINITION_EVENT", "taskDefinitionEvent", "x"))),  # type: ignore[arg-type]
        ("nothing", b" \n "),
    ],
)
def test_anything_but_exact_task_events_falls_back_to_dicts(name: str, data: bytes) -> None:
    assert decode_task_blob(data) is None, name


def _shard_outcome(data: bytes) -> tuple[object, ...]:
    shard = TaskShard()
    shard.feed_blob(data)
    counters = shard.replay.counters
    rows = list(TaskRenderer(shard.replay.tasks).rows())
    return (counters.events, counters.duplicate_events, counters.bad_events, dict(counters.by_type),
            shard.bad_lines, shard.replay.strays, rows)  # fmt: skip


def test_a_line_the_tolerant_path_rejects_is_a_bad_line_not_a_crash() -> None:
    shard = TaskShard()
    shard.feed_blob(blob(definition(), owner()) + b"\n" + blob(executor()).replace(b"CORE_WORKER", b"\xff"))
    assert shard.bad_lines == 1 and shard.replay.counters.events == 2
    assert len(shard.replay.tasks) == 1


def test_the_routers_line_count_stands_in_for_counting() -> None:
    two_on_one_line = blob(owner()) + b"\n" + blob(owner()) + b" " + blob(executor())
    assert decode_task_blob(two_on_one_line, 2) is None
    assert decode_task_blob(two_on_one_line, 3) is not None  # trusted: the router counts what it joins
    assert decode_task_blob(blob(owner(), executor()), 2) is not None


def test_non_ascii_utf8_stays_on_the_typed_path() -> None:
    events = decode_task_blob(blob(definition(name="tâche ✓"), lifecycle(states=(("RUNNING", ts(3)),))))
    assert events is not None and events[0].payload is not None
    assert events[0].payload.task_name == "tâche ✓"  # type: ignore[union-attr]


def test_an_out_of_range_number_in_an_unread_field_is_the_one_difference() -> None:
    """orjson rejects 1e999 wherever it is; the typed path skips fields it does not read."""
    line = blob(owner()).replace(b'"CORE_WORKER"', b"1e999")
    assert decode_task_blob(line) is not None
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(line)


def test_a_shard_counts_the_same_on_either_path() -> None:
    """A blob that falls back (it holds a stray) and the same blob's task events on the
    fast path give the same counts and rows; duplicates and bad payloads included."""
    stray = envelope("ACTOR_DEFINITION_EVENT", "actorDefinitionEvent", {"taskId": TASK_B64})
    dup = owner()
    events = [definition(), dup, dup, executor(), lifecycle(), envelope("TASK_PROFILE_EVENT", "taskProfileEvents", {})]
    typed = _shard_outcome(blob(*events))
    fallback = _shard_outcome(blob(*events, stray))
    assert decode_task_blob(blob(*events)) is not None
    assert fallback[-2] == [stray]
    assert typed[:3] == (5, 1, 2)  # the lifecycle event with no transitions and the empty profile are bad
    assert fallback[:5] == (typed[0] + 0, *typed[1:5])  # the stray is counted by the process it goes to
    assert fallback[-1] == typed[-1]


@pytest.mark.parametrize(
    "odd",
    [
        {"states": (("FINISHED", ts(20)),), "nodeId": ["x"], "workerId": {"a": 1}},
        {"stateTransitions": [{"state": ["RUNNING"], "timestamp": ts(3)}, {"timestamp": ts(4)}, 7]},
        {"stateTransitions": [{"state": "RUNNING", "timestamp": 3}], "workerPid": "12"},
    ],
)
def test_hostile_values_neither_crash_nor_differ_between_paths(odd: dict[str, Any]) -> None:
    """A list where an id or a state belongs once crashed the replay (unhashable)."""
    states = odd.pop("states", ())
    events = [definition(), owner(), lifecycle(states=states, **odd)]
    task = one(events)  # both paths, compared
    assert task["state"] == "FINISHED"
    dicts = SessionReplay()
    dicts.feed(events)
    assert len(typed_replay(events).tasks) == len(dicts.tasks) == 1


def test_a_state_ray_does_not_know_is_rendered_as_valid_json() -> None:
    """States beyond Ray 2.60's (a newer Ray, or anything a client sent) keep their name;
    a quote in one once broke the detail JSON of its task."""
    odd = lifecycle(states=(('NEW"STATE\\', ts(20)),))
    task = one([definition(), owner(), odd])  # both paths, parsed
    assert task["state"] == 'NEW"STATE\\'
    assert [e["state"] for e in task["events"]][-1] == 'NEW"STATE\\'


@pytest.mark.parametrize("run", [RUN_A, RUN_B])
def test_real_ray_events_render_the_same_on_either_path(run: str) -> None:
    """Ray 2.60's own events (both captured runs) take the typed path whole and give
    the same rows, counts and failure context as the dict path."""
    events = load_events(run)
    dicts = SessionReplay()
    dicts.feed(events)
    typed = typed_replay(events)
    task_types = set(EVENT_TYPES.values())
    assert decode_task_blob(blob(*(e for e in events if e.get("eventType") in task_types))) is not None
    assert list(TaskRenderer(typed.tasks).rows()) == list(TaskRenderer(dicts.tasks).rows())
    assert (typed.counters.events, typed.counters.bad_events, typed.counters.by_type) == (
        dicts.counters.events,
        dicts.counters.bad_events,
        dicts.counters.by_type,
    )
    assert len(dicts.tasks) > 10


def test_numbers_beyond_64_bits_neither_crash_nor_differ_between_paths(tmp_path: Path) -> None:
    """Ray's numbers are int64; a number beyond it (msgspec keeps it an int, orjson
    reads it as a float) once crashed the whole build wherever it landed: a pid or an
    attempt in SQLite, a log offset or a resource in the detail, a profile time.
    Each is now unusable like text: 0, or the profile entry skipped."""
    wide = b"99999999999999999999999"
    timing = {"eventName": "task:execute", "startTime": "@WIDE@", "endTime": "@WIDE@", "extraData": "{}"}
    body = {"componentType": "worker", "componentId": "", "nodeIpAddress": "", "events": [timing]}
    profile = {"taskId": TASK_B64, "attemptNumber": "@WIDE@", "jobId": "AgAAAA==", "profileEvents": body}
    log = {"stdoutFile": "out", "stdoutStart": "@WIDE@", "stderrFile": "err", "stderrEnd": "@WIDE@"}
    events = [
        definition(requiredResources={"CPU": "@WIDE@"}),
        lifecycle(states=(("PENDING_ARGS_AVAIL", ts(1)), ("FINISHED", ts(9))), workerPid="@WIDE@"),
        executor(taskLogInfo=log),
        lifecycle(attempt="@WIDE@", states=(("RUNNING", ts(4)),)),  # type: ignore[arg-type]
        envelope("TASK_PROFILE_EVENT", "taskProfileEvents", profile),
    ]
    data = blob(*events).replace(b'"@WIDE@"', wide)
    typed = _shard_outcome(data)
    dicts = _shard_outcome(data + b"\n" + blob(envelope("NODE_DEFINITION_EVENT", "nodeDefinitionEvent", {})))
    assert decode_task_blob(data) is not None and typed[-1] == dicts[-1]
    shard = TaskShard()
    shard.feed_blob(data)
    renderer = shard.renderer()
    (row,) = renderer.rows()  # the wide attempt is attempt 0, like unparsable text
    detail = orjson.loads(renderer.detail_json(row))
    assert detail["worker_pid"] == 10258 and detail["required_resources"] == {"CPU": 1e23}
    assert detail["task_log_info"]["stdout_start"] == detail["task_log_info"]["stderr_end"] == 0
    assert detail["profiling_data"]["events"] == []
    conn = create_bulk_db(tmp_path / "tasks.sqlite")
    shard = TaskShard()
    shard.feed_blob(data)
    assert write_shards(conn, [shard]).tasks == 1


def test_a_definitions_maps_stay_raw_and_render_as_the_dict_path_does() -> None:
    """Nested maps are kept as the event's JSON text and mapped once per distinct
    text: spacing does not reach the answer, and numbers keep their JSON type."""
    spaced = blob(definition(requiredResources={"CPU": 1, "GPU": 0.5})).replace(
        b'"requiredResources":{"CPU":1,"GPU":0.5}', b'"requiredResources": { "CPU" : 1 , "GPU": 0.5 }'
    )
    assert b'"CPU" : 1' in spaced
    other = blob(definition(task="Qw+iitRiKD////////////////8CAAAA", name="other", requiredResources={"CPU": 1.0}))
    shard = TaskShard()
    shard.feed_blob(spaced + b"\n" + other)
    renderer = shard.renderer()
    details = {row[4]: renderer.detail_json(row) for row in renderer.rows()}
    assert b'"required_resources":{"CPU":1,"GPU":0.5}' in details["parent-task"]
    assert b'"required_resources":{"CPU":1.0}' in details["other"]
    assert one([orjson.loads(spaced)])["required_resources"] == {"CPU": 1, "GPU": 0.5}  # both paths


def test_a_definition_with_a_non_text_field_takes_the_dict_path() -> None:
    odd = definition(language=5, callSite=["x"])
    assert decode_task_blob(blob(odd)) is None
    task = one([odd, owner()])  # both paths, compared
    assert task["language"] == "5" and task["call_site"] == "['x']"


@pytest.mark.parametrize("log", [{}, {"stdoutFd": 3}])
def test_log_info_without_any_known_field_is_no_log_info(log: dict[str, Any]) -> None:
    """On both paths: nothing to merge (the task keeps null log info), and an event
    that carries nothing else is bad."""
    task = one([definition(), owner(), lifecycle(taskLogInfo=log)])  # both paths, compared
    assert task["task_log_info"] is None
    alone = blob(lifecycle(taskLogInfo=log))
    stray = blob(envelope("NODE_DEFINITION_EVENT", "nodeDefinitionEvent", {}))
    assert decode_task_blob(alone) is not None
    assert _shard_outcome(alone)[2] == _shard_outcome(alone + b"\n" + stray)[2] == 1  # bad on either path


def test_a_log_file_name_that_is_no_text_is_kept_as_text() -> None:
    odd = executor(taskLogInfo={"stdoutFile": ["o"], "stderrFile": 7, "stdoutStart": "1"})
    task = one([definition(), owner(), odd])  # both paths, compared
    assert task["task_log_info"]["stdout_file"] == "['o']" and task["task_log_info"]["stderr_file"] == "7"

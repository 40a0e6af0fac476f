"""The native build's C scan of lifecycle and definition task events (``runtime/server/replay/_lifecycle.c``).

Every test replays the same blobs twice, with the scan and without it (the typed and
tolerant Python paths alone), and asserts the same attempts and counters: the scan takes a
line only when it knows exactly what those paths do with it. Outside ``make test-native``
the C module is compiled here with the system's C compiler.
"""

from __future__ import annotations

import base64
import json
import random
from types import ModuleType
from typing import Any

import orjson
import pytest

from runtime.server.replay import ids, task_events, tasks
from runtime.server.replay.shard import TaskShard
from tests.support.native_build import c_extension
from tests.support.sample_session import RUN_A, RUN_B, load_events
from tests.unit.server.replay.events import (
    NODE_B64,
    TASK_B64,
    WORKER_B64,
    definition,
    envelope,
    executor,
    lifecycle,
    owner,
    profile,
    profile_entry,
    ts,
)

ATTEMPT_FIELDS = (
    "job", "definition", "name", "transitions", "log", "node", "node_ns", "worker", "worker_ns", "pid",
    "pid_ns", "error", "error_ns", "debugger", "debugger_ns", "repr_name", "repr_ns", "seen",
)  # fmt: skip
BASE_NS = 1_795_000_000 * 10**9


@pytest.fixture(scope="module")
def scan_module(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The C module: the native build's own, else compiled here from the source."""
    directory = tmp_path_factory.mktemp("native")
    return c_extension("runtime.server.replay._lifecycle", task_events.native_lifecycle, directory)


@pytest.fixture
def native(scan_module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(task_events, "native_lifecycle", scan_module)
    monkeypatch.setattr(tasks, "native_lifecycle", scan_module)
    return scan_module


def replayed(blobs: list[bytes], *, scan: bool, monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> Any:
    """What a shard holds after ``blobs``: every attempt's fields and the counters."""
    with monkeypatch.context() as patch:
        patch.setattr(task_events, "native_lifecycle", module if scan else None)
        shard = TaskShard(BASE_NS)
        for blob in blobs:
            shard.feed_blob(blob, None)
    table = shard.replay.tasks
    attempts = [
        (task_id, attempt, [_plain(getattr(state, name)) for name in ATTEMPT_FIELDS] + [_profile(state.profile)])
        for task_id, attempt, state in table.attempts()
    ]
    counters = shard.replay.counters
    return (
        attempts,
        counters.events,
        counters.duplicate_events,
        counters.bad_events,
        dict(counters.by_type),
        (
            shard.bad_lines,
            list(table.state_names),
        ),
    )


def _plain(value: object) -> object:
    return list(value) if isinstance(value, list) else value


def _profile(profile: Any) -> object:
    if profile is None:
        return None
    return (profile.component_type, profile.component_id, profile.node_ip, dict(profile.events), profile.func_name)


def assert_same(blobs: list[bytes], monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> None:
    with_scan = replayed(blobs, scan=True, monkeypatch=monkeypatch, module=module)
    without = replayed(blobs, scan=False, monkeypatch=monkeypatch, module=module)
    assert with_scan == without


def line(event: dict[str, Any]) -> bytes:
    # json, not orjson: some cases hold integers beyond 64 bits.
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()


def payload_line(**payload: Any) -> bytes:
    return line(envelope("TASK_LIFECYCLE_EVENT", "taskLifecycleEvent", {"taskId": TASK_B64, **payload}))


RUNNING = [{"state": "RUNNING", "timestamp": ts(3)}]
LOG = {"stdoutFile": "/tmp/ray/w.out", "stderrFile": "/tmp/ray/w.err", "stdoutStart": "10", "stderrStart": "20"}


@pytest.mark.parametrize(
    ("name", "taken"),
    [
        ("definitions of one template", [1, 1, 1, 1]),
        ("definitions with escapes and non-ASCII", [1, 1, 1, 0, 0, 0, 0]),
        ("definitions with nulls, absences and odd values", [1] * 6 + [0] * 10),
        ("actor task definitions", [1, 1, 1, 1, 0]),
    ],
)
def test_takes_the_definitions_it_reads_exactly(name: str, taken: list[int], native: ModuleType) -> None:
    """Definitions are taken in the shapes DefinitionPayload decodes to the same values
    (escapes only where the text is a template key, compared as written); the rest,
    surrogates, a name to decode or a value msgspec rejects, is the Python path's."""
    assert [native.scan(text)[0].count for text in CASES[name]] == taken


@pytest.mark.parametrize(
    ("name", "taken"),
    [
        ("profile events as Ray writes them", [1, 1, 1, 1]),
        ("profile entries with escapes, nulls and absences", [1] * 8 + [0] * 4),
        ("profile times", [1, 1, 1] + [0] * 17),
        ("profile components, jobs and attempts", [1] * 9 + [0, 1, 0, 0, 0, 0]),
        ("bad profile events", [0] * 14),
        ("profiles of one attempt", [1] * 7),
    ],
)
def test_takes_the_profile_events_it_reads_exactly(name: str, taken: list[int], native: ModuleType) -> None:
    """Profile events are taken when TaskTable.profile reads their values as they are:
    ids plain strings, times int64 (strings of digits as Ray writes them, or numbers of
    up to 18 digits), names and extra data strings with any escape but a surrogate, or
    null. Whatever int() or str() would convert, and every bad event, is the Python path's."""
    assert [native.scan(text)[0].count for text in CASES[name]] == taken


def test_takes_ray_lifecycle_and_definition_events_and_leaves_the_rest(native: ModuleType) -> None:
    data = b"\n".join([line(definition()), line(owner()), line(executor()), payload_line(rayErrorInfo={"x": 1})])
    scan, others, runs = native.scan(data)
    assert scan.count == 3
    assert runs == [3, 1]
    assert [orjson.loads(o)["eventType"] for o in others] == ["TASK_LIFECYCLE_EVENT"]


@pytest.mark.parametrize("run", [RUN_A, RUN_B])
def test_captured_ray_sessions_replay_the_same(run: str, native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [e for e in load_events(run) if str(e.get("eventType", "")).startswith(("TASK_", "ACTOR_TASK_"))]
    data = b"\n".join(orjson.dumps(e) for e in events)
    assert native.scan(data)[0].count > 0
    assert_same([data], monkeypatch, native)
    assert_same([orjson.dumps(e) for e in events], monkeypatch, native)  # one event a blob


OTHER_TASKS = [base64.b64encode(n.to_bytes(8, "big") + b"\xff" * 12 + b"\x02\0\0\0").decode() for n in range(1, 5)]
ANOTHER_TASKS = [base64.b64encode(n.to_bytes(8, "big") + b"\xff" * 12 + b"\x02\0\0\0").decode() for n in range(5, 13)]


def actor_definition(task: str = TASK_B64, **extra: Any) -> dict[str, Any]:
    payload = {
        "taskId": task,
        "taskAttempt": 0,
        "actorTaskName": "A.f",
        "actorFunc": {"pythonFunctionDescriptor": {"moduleName": "workload", "className": "A", "functionName": "f"}},
        "actorId": "8m7lPZJAfyfNr6O/AgAAAA==",
        "requiredResources": {},
        "jobId": "AgAAAA==",
        "parentTaskId": "//////////////////////////8CAAAA",
        **extra,
    }
    return envelope("ACTOR_TASK_DEFINITION_EVENT", "actorTaskDefinitionEvent", payload)


TEMPLATE_CHANGES: list[dict[str, Any]] = [
    {},
    {"taskType": "ACTOR_CREATION_TASK"},
    {"language": "JAVA"},
    {"taskFunc": {"pythonFunctionDescriptor": {"moduleName": "m", "functionName": "g"}}},
    {"requiredResources": {"CPU": 1}},
    {"labelSelector": {"a": "b"}},
    {"fallbackStrategy": {"options": [{"label_selector": {}}]}},
    {"actorId": "8m7lPZJAfyfNr6O/AgAAAA=="},
    {"parentTaskId": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    {"placementGroupId": "AAAAAAAAAAAAAAAAAAAAAAAA"},
    {"serializedRuntimeEnv": '{"pip": ["x"]}'},
    {"callSite": "here"},
    {"jobId": "AwAAAA=="},
]


T0 = 1_795_311_945_003_300_000
DROP: Any = object()  # a field left out


def _dropped(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _dropped(v) for k, v in value.items() if v is not DROP}
    if isinstance(value, list):
        return [_dropped(v) for v in value]
    return value


def profile_line(entry: dict[str, Any] | None = None, body: dict[str, Any] | None = None, **payload: Any) -> bytes:
    """A profile event of one entry (Ray's shape) with fields of the entry, of
    ``profileEvents`` or of the payload changed (DROP: absent)."""
    event = profile(entries=[{**profile_entry("task:execute", T0, T0 + 1000), **(entry or {})}])
    inner = event["taskProfileEvents"]
    inner["profileEvents"].update(body or {})
    inner.update(payload)
    return line(_dropped(event))


def profile_times(start: Any, end: Any = "7") -> bytes:
    return profile_line({"startTime": start, "endTime": end})


CASES: dict[str, list[bytes]] = {
    "owner, executor, definition": [line(owner()), line(executor()), line(definition())],
    "attempts beyond the first": [line(owner(attempt=1)), line(executor(attempt=2)), line(owner(attempt=-1))],
    "a duplicate event": [line(e) for e in [owner()] * 2] + [line(executor())],
    "no, null and numeric event ids": [
        payload_line(stateTransitions=RUNNING, workerPid=7).replace(b'"eventId":', b'"eventIdX":'),
        line({**executor(), "eventId": None}),
        line({**executor(), "eventId": 12}),
    ],
    "log info of every kind": [
        payload_line(taskLogInfo=LOG),
        payload_line(taskLogInfo={"stdoutEnd": "99", "stderrEnd": 5}),
        payload_line(taskLogInfo={"stdoutFile": "", "stdoutStart": 0}),
        payload_line(taskLogInfo={"stdoutFile": None, "stderrEnd": None}),
        payload_line(taskLogInfo={}),
        payload_line(taskLogInfo={"stdoutStart": "+5", "stdoutEnd": "1e3"}),
        payload_line(taskLogInfo={"stdoutStart": "", "stderrEnd": 1.5}),
        payload_line(taskLogInfo={"stdoutFile": 7}),
        payload_line(taskLogInfo={"stdoutStart": "-3", "stdoutEnd": "0099"}),
        payload_line(taskLogInfo={"stdoutEnd": "99999999999999999999"}),
        payload_line(taskLogInfo=None, stateTransitions=RUNNING),
    ],
    "ends before files": [
        payload_line(taskLogInfo={"stdoutEnd": "99"}),
        payload_line(taskLogInfo=LOG, stateTransitions=RUNNING),
        payload_line(taskLogInfo={"stdoutEnd": "0", "stderrEnd": "7"}),
    ],
    "carried fields": [
        payload_line(stateTransitions=RUNNING, nodeId=NODE_B64, workerId=WORKER_B64, workerPid=-4),
        payload_line(stateTransitions=RUNNING, nodeId="", workerId=None, workerPid=0),
        payload_line(stateTransitions=RUNNING, nodeId=12, workerPid="77"),
        payload_line(stateTransitions=RUNNING, workerPid=2**63),
        payload_line(stateTransitions=RUNNING, workerPid=1.5),
        payload_line(stateTransitions=[{"state": "FINISHED", "timestamp": ts(2)}], nodeId="AAAA"),
        payload_line(stateTransitions=RUNNING, nodeId="ffff"),
    ],
    "optional carried fields": [
        payload_line(stateTransitions=RUNNING, rayErrorInfo={"errorType": "X", "errorMessage": "m"}),
        payload_line(stateTransitions=RUNNING, isDebuggerPaused=True),
        payload_line(stateTransitions=RUNNING, isDebuggerPaused=None, actorReprName=None, rayErrorInfo=None),
        payload_line(stateTransitions=RUNNING, actorReprName="A(1)"),
        payload_line(stateTransitions=RUNNING, actorReprName=""),
    ],
    "timestamps": [
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-11-22T01:45:03.123456Z"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-11-22T01:45:03.123456789+00:00"}]),
        payload_line(stateTransitions=[{"state": "FAILED", "timestamp": "9999-12-31T23:59:59.999999999Z"}]),
        payload_line(stateTransitions=[{"state": "FAILED", "timestamp": "1677-01-01T00:00:00.000000001Z"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-13-22T01:45:03.123456789Z"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-02-30T01:45:03.123456789Z"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-11-22T01:45:03.12345678aZ"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-11-22T01:45:03.1234_5678Z"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-11-22T01:45:03. 12345678Z"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "1969-12-31T23:59:59.000000000Z"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-11-22T01:45:03.123456789Z"}] * 2),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": 5}]),
        payload_line(stateTransitions=[{"state": "RUNNING"}]),
        payload_line(stateTransitions=[{"state": "RUNNING", "timestamp": "2026-11-22T01:45:03.123456789Z", "x": []}]),
    ],
    "states": [
        payload_line(stateTransitions=[{"state": "NEW_STATE", "timestamp": ts(4)}]),
        payload_line(stateTransitions=[{"state": None, "timestamp": ts(4)}]),
        payload_line(
            stateTransitions=[
                {"state": "NIL", "timestamp": ts(4)},
                {"state": "GETTING_AND_PINNING_ARGS", "timestamp": ts(5)},
            ]
        ),
    ],
    "bad events": [
        payload_line(),
        payload_line(stateTransitions=[]),
        payload_line(stateTransitions=None, taskLogInfo=None),
        payload_line(taskId="", stateTransitions=RUNNING),
        payload_line(taskId=None, stateTransitions=RUNNING),
        payload_line(taskId=5, stateTransitions=RUNNING),
        line(envelope("TASK_LIFECYCLE_EVENT", "taskLifecycleEvent", None)),  # type: ignore[arg-type]
        payload_line(stateTransitions=[], taskLogInfo={"stdoutFile": "a"}),
    ],
    "attempt numbers": [
        payload_line(stateTransitions=RUNNING, taskAttempt=None),
        payload_line(stateTransitions=RUNNING, taskAttempt="2"),
        payload_line(stateTransitions=RUNNING, taskAttempt=1.0),
        payload_line(stateTransitions=RUNNING, taskAttempt=2**70),
        payload_line(stateTransitions=RUNNING, taskAttempt=True),
    ],
    "jobs": [
        payload_line(stateTransitions=RUNNING, jobId=None),
        payload_line(stateTransitions=RUNNING, jobId=""),
        payload_line(stateTransitions=RUNNING, jobId=3),
        payload_line(stateTransitions=RUNNING, jobId="AwAAAA=="),
    ],
    "strict JSON only": [
        payload_line(stateTransitions=RUNNING).replace(TASK_B64.encode(), b"\\u0041" + TASK_B64[1:].encode()),
        payload_line(stateTransitions=RUNNING).replace(b'"message":""', b'"message":"a\\nb"'),
        payload_line(stateTransitions=RUNNING).replace(b'"message":""', b'"message":1e999'),
        payload_line(stateTransitions=RUNNING).replace(b'"message":""', b'"message":-0.5E+3'),
        payload_line(stateTransitions=RUNNING).replace(b'"message":""', b'"message":[[[{"a":[true,false,null]}]]]'),
        payload_line(stateTransitions=RUNNING).replace(b'"message":""', b'"message":' + b"[" * 70 + b"]" * 70),
        payload_line(stateTransitions=RUNNING) + b"\r",
        payload_line(stateTransitions=RUNNING).replace(b",", b" ,\t"),
        b"  " + payload_line(stateTransitions=RUNNING) + b" ",
        payload_line(stateTransitions=RUNNING).replace(b'"message":""', b'"message":"\xc3\xa9"'),
        payload_line(stateTransitions=RUNNING, taskId="t\u00e9sk"),
    ],
    "duplicate keys": [
        payload_line(stateTransitions=RUNNING).replace(b'"taskId"', b'"taskId":"AAAA","taskId"'),
        payload_line(stateTransitions=RUNNING).replace(
            b'"stateTransitions"', b'"stateTransitions":[],"stateTransitions"'
        ),
        payload_line(stateTransitions=RUNNING).replace(b'"eventType"', b'"eventType":"X","eventType"'),
        payload_line(stateTransitions=RUNNING).replace(b'"message"', b'"eventId":"again","message"'),
    ],
    "with definitions and profiles between": [
        line(definition(task=TASK_B64)),
        line(owner()),
        line(envelope("TASK_PROFILE_EVENT", "taskProfileEvents", {"taskId": TASK_B64, "profileEvents": {}})),
        line(executor()),
        line(envelope("ACTOR_TASK_DEFINITION_EVENT", "actorTaskDefinitionEvent", {"taskId": TASK_B64})),
    ],
    "definitions of one template": [
        line(definition(task=OTHER_TASKS[0], name="a")),
        line(definition(task=OTHER_TASKS[1], name="b")),
        line(definition(task=OTHER_TASKS[2], name="a", attempt=1)),
        line(definition(task=OTHER_TASKS[3], name="")),
    ],
    "a duplicate definition": [line(e) for e in [definition()] * 2] + [line(definition(task=OTHER_TASKS[0]))],
    "definitions with escapes and non-ASCII": [
        line(definition(serializedRuntimeEnv=json.dumps({"env_vars": {"A": 'x"y\\z'}}), callSite="a\nb\tc")),
        line(definition(callSite="caf\u00e9 \u2603", refIds={"k": 'a"b'})),
        line(definition(task=OTHER_TASKS[0])).replace(b'"language":"PYTHON"', b'"language":"PYTH\\u004fN"'),
        line(definition(task=OTHER_TASKS[1], callSite="x")).replace(b'"callSite":"x"', b'"callSite":"\\ud83d\\ude00"'),
        line(definition(task=OTHER_TASKS[2], callSite="x")).replace(b'"callSite":"x"', b'"callSite":"\\ud800"'),
        line(definition(task=OTHER_TASKS[3], callSite="x")).replace(b'"callSite":"x"', b'"callSite":"\\x"'),
        line(definition(name='say "hi"')),
    ],
    "definitions with nulls, absences and odd values": [
        line(definition(name=None, taskType=None, language=None, jobId=None, requiredResources=None)),  # type: ignore[arg-type]
        line(definition(labelSelector=None, fallbackStrategy=None, callSite=None, actorId=None)),
        line(envelope("TASK_DEFINITION_EVENT", "taskDefinitionEvent", {"taskId": OTHER_TASKS[0]})),
        line(definition(task=OTHER_TASKS[1], fallbackStrategy={"options": [{"label_selector": {"zone": "a"}}]})),
        line(definition(task=OTHER_TASKS[2], taskAttempt=None)),
        line(definition(task=OTHER_TASKS[3], requiredResources={"CPU": 1e3, "GPU": -0.5, "x": [True, None]})),
        line(definition(name=5)),  # type: ignore[arg-type]
        line(definition(taskType=5)),
        line(definition(task="")),
        line(definition(task=None)),  # type: ignore[arg-type]
        line(definition(attempt="1")),  # type: ignore[arg-type]
        line(definition(attempt=1.5)),  # type: ignore[arg-type]
        line(definition(attempt=2**70)),
        line(envelope("TASK_DEFINITION_EVENT", "taskDefinitionEvent", None)),  # type: ignore[arg-type]
        line(definition()).replace(b'"taskName"', b'"taskName":"x","taskName"'),
        line(definition()).replace(b'"requiredResources":', b'"requiredResources":' + b"[" * 70 + b"]" * 70 + b',"r":'),
    ],
    # Each after the first differs from it in one field of the template: none may share its Definition.
    "definitions one template field apart": [
        line(definition(task=task, **change))
        for task, change in zip([TASK_B64, *OTHER_TASKS, *ANOTHER_TASKS], TEMPLATE_CHANGES, strict=True)
    ],
    "definitions that differ only where they are not read": [
        line(definition(actorFunc={"f": 1})),
        line(definition(task=OTHER_TASKS[0], taskFunc={"g": 2}, actorFunc={"f": 1})),
        line(actor_definition(task=OTHER_TASKS[1], actorFunc={"g": 2}, taskFunc={"f": 1})),
        line(actor_definition(task=OTHER_TASKS[2], actorFunc={"f": 1}, taskFunc={"g": 2})),
    ],
    "a task and an actor task of the same fields": [
        line(definition(taskFunc={"f": 1}, actorId="8m7lPZJAfyfNr6O/AgAAAA==")),
        line(
            envelope(
                "ACTOR_TASK_DEFINITION_EVENT",
                "actorTaskDefinitionEvent",
                {
                    **definition(task=OTHER_TASKS[0], actorId="8m7lPZJAfyfNr6O/AgAAAA==")["taskDefinitionEvent"],
                    "taskFunc": None,
                    "actorFunc": {"f": 1},
                },
            )
        ),
    ],
    "actor task definitions": [
        line(actor_definition()),
        line(actor_definition(task=OTHER_TASKS[0], actorTaskName="A.g")),
        line(actor_definition(task=OTHER_TASKS[1], taskName="ignored", taskFunc={"ignored": 1})),
        line(actor_definition(task=OTHER_TASKS[2], actorTaskName=None)),
        line(definition(task=OTHER_TASKS[3])).replace(
            b'"eventType":"TASK_DEFINITION_EVENT"', b'"eventType":"ACTOR_TASK_DEFINITION_EVENT"'
        ),
    ],
    "profile events as Ray writes them": [
        line(profile()),
        line(profile(attempt=1)),
        line(profile(task=OTHER_TASKS[0], entries=[profile_entry("submit_task", T0, T0 + 5)] * 2)),
        line(profile(task=OTHER_TASKS[1], attempt=None)),
    ],
    "profile entries with escapes, nulls and absences": [
        line(profile()).replace(b"task:execute", b'task:\\u00e9x\\u4e2d\\n\\/\\\\\\"e'),
        profile_line({"eventName": None, "extraData": None}),
        profile_line({"eventName": DROP, "extraData": DROP}),
        profile_line({"eventName": "", "extraData": ""}),
        profile_line({"eventName": "task::f", "extraData": '{"name": "m.f\u00e9 \u4e2d", "x": "\\"}'}),
        profile_line({"eventName": "task::g", "extraData": '{"name":"m.g"}', "other": {"a": ["\n", 1.5e3]}}),
        profile_line({"eventName": "task::h", "extraData": "not json"}),
        profile_line({"eventName": "task::i", "extraData": "{}"}),
        line(profile()).replace(b"task:execute", b"task:\\ud83d\\ude00"),  # a surrogate pair
        profile_line({"extraData": 5}),
        profile_line({"extraData": {}}),
        profile_line({"eventName": 5}),
    ],
    "profile times": [
        profile_times(5, 7),
        profile_times("0000012", "-5"),
        profile_times("9223372036854775807", "-9223372036854775808"),
        profile_times(-(2**62), 2**59),
        profile_times("9223372036854775808"),
        profile_times("-9223372036854775809"),
        profile_times("99999999999999999999"),
        profile_times(T0),  # a 19-digit number
        profile_times("+5"),
        profile_times(" 5"),
        profile_times("1_000"),
        profile_times("1e3"),
        profile_times(""),
        profile_times("-"),
        profile_times(1.5),
        profile_times(True),
        profile_times(None),
        profile_times(DROP),
        profile_times("5", DROP),
        profile_times("\u0665"),  # a digit int() reads
    ],
    "profile components, jobs and attempts": [
        profile_line(body={"componentType": None, "componentId": None, "nodeIpAddress": None}),
        profile_line(body={"componentType": DROP, "componentId": DROP, "nodeIpAddress": DROP}),
        profile_line(body={"componentType": "", "componentId": "", "nodeIpAddress": ""}, taskId=OTHER_TASKS[0]),
        profile_line(body={"componentType": "driver", "x": {"y": "\u00e9"}}, taskId=OTHER_TASKS[1]),
        profile_line(jobId=None, taskId=OTHER_TASKS[2]),
        profile_line(jobId="", taskId=OTHER_TASKS[2]),
        profile_line(jobId=DROP, attemptNumber=DROP, taskId=OTHER_TASKS[3]),
        profile_line(attemptNumber=2**40, other=[1, {"a": None}]),
        profile_line(attemptNumber=-1),
        profile_line(body={"componentType": 5}, taskId=ANOTHER_TASKS[0]),
        profile_line(body={"componentId": "a\u00e9"}, taskId=ANOTHER_TASKS[1]),
        profile_line(jobId=5, taskId=ANOTHER_TASKS[2]),
        profile_line(attemptNumber="1", taskId=ANOTHER_TASKS[3]),
        profile_line(attemptNumber=1.0, taskId=ANOTHER_TASKS[4]),
        profile_line(attemptNumber=True, taskId=ANOTHER_TASKS[5]),
    ],
    "bad profile events": [
        profile_line(body={"events": []}),
        profile_line(body={"events": None}),
        profile_line(body={"events": DROP}),
        profile_line(body={"events": [5, profile_entry("a", 1, 2)]}),
        profile_line(body={"events": {"a": 1}}),
        profile_line(profileEvents=None),
        profile_line(profileEvents=DROP),
        profile_line(taskId=""),
        profile_line(taskId=None),
        profile_line(taskId=5),
        line(envelope("TASK_PROFILE_EVENT", "taskProfileEvents", None)),  # type: ignore[arg-type]
        profile_line().replace(b'"startTime"', b'"startTime":"3","startTime"'),
        profile_line().replace(b'"events"', b'"events":[],"events"'),
        profile_line().replace(b'"jobId"', b'"jobId":null,"jobId"'),
    ],
    "profiles of one attempt": [
        line(profile(entries=[profile_entry("task::a", 1, 2, '{"name":"m.a"}'), profile_entry("x", 3, 4, "1")])),
        line(profile(entries=[profile_entry("x", 3, 4, "2"), profile_entry("task::b", 5, 6, '{"name":"m.b"}')])),
        line(profile(entries=[profile_entry("task::c", 7, 8, "{}"), profile_entry("task::d", 7, 8, "")])),
        line(profile(jobId="AwAAAA==")),
        line(owner()),
        *[line(e) for e in [profile(attempt=3)] * 2],
    ],
    "a profile event before the lifecycle": [
        line(profile(jobId="AwAAAA==")),
        line(owner()),
        line(executor()),
        line(definition()),
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_shape_replays_as_without_the_scan(
    name: str, native: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = CASES[name]
    assert_same([b"\n".join(lines)], monkeypatch, native)
    assert_same(lines, monkeypatch, native)
    # Beside lines the scan takes: a blob that mixes them, and one whose bad line sends all of it the tolerant way.
    assert_same([b"\n".join([line(owner()), *lines, line(executor())])], monkeypatch, native)
    assert_same([b"\n".join([line(owner()), *lines, b'{"eventType": '])], monkeypatch, native)
    assert_same([b"\n".join([line(owner()), b"", *lines])], monkeypatch, native)


def _lifecycle_text(job: str, event_id: str, second: int, **extra: Any) -> str:
    payload = {"taskId": TASK_B64, "jobId": job, "stateTransitions": [{"state": "RUNNING", "timestamp": ts(second)}]}
    event = {"eventId": event_id, "eventType": "TASK_LIFECYCLE_EVENT", "taskLifecycleEvent": {**payload, **extra}}
    return json.dumps(event, separators=(",", ":"))


def test_values_that_do_not_follow_lines_keep_their_order(native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: the other lines decoded together let a blank line and a line of
    two values trade places across a taken line (the first-wins job came from the wrong
    event). Decoded run by run, such a blob goes the way it would without the scan."""
    data = "\n".join(
        [
            _lifecycle_text("", "x", 3, rayErrorInfo={"errorType": "E"}),
            "",
            _lifecycle_text("AgAAAA==", "a", 3),
            _lifecycle_text("AwAAAA==", "b", 4) + " " + _lifecycle_text("BAAAAA==", "c", 5),
        ]
    ).encode()
    assert native.scan(data)[2] == [0, 2, 1, 1]
    assert_same([data], monkeypatch, native)


def test_an_object_split_around_a_taken_line_is_not_joined(native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: with the taken line removed, the two halves of a broken object
    around it joined into a valid event, and a blob the typed path rejects was replayed
    typed (the tolerant path counts its bad lines instead)."""
    data = "\n".join(
        [
            '{"eventType":"TASK_PROFILE_EVENT","eventId":"p","x":',
            _lifecycle_text("AgAAAA==", "a", 3),
            "1}",
            _lifecycle_text("AwAAAA==", "b", 4) + " " + _lifecycle_text("AwAAAA==", "c", 5),
        ]
    ).encode()
    assert task_events.decode_task_blob(data) is None
    assert_same([data], monkeypatch, native)
    with monkeypatch.context() as patch:
        patch.setattr(task_events, "native_lifecycle", native)
        assert task_events.scan_task_blob(data) is None


def test_mutated_lines_replay_as_without_the_scan(native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random damage to real lines (bytes dropped, doubled or replaced by JSON's
    delimiters, escapes and digits) never makes the two paths disagree."""
    rng = random.Random(20261127)
    seeds = [line(owner()), line(executor()), payload_line(taskLogInfo=LOG, stateTransitions=RUNNING)]
    seeds += [line(definition(callSite='a"b')), line(actor_definition()), line(profile())]
    tokens = [b'"', b"\\", b",", b":", b"{", b"}", b"[", b"]", b"0", b"-", b"e", b" ", b"\t", b"\r", b"n", b"\xc3\xa9"]
    blobs = []
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            action = rng.random()
            if action < 0.35:
                del data[at]
            elif action < 0.7:
                data[at:at] = rng.choice(tokens)
            else:
                data[at : at + 1] = data[at : at + 1] * 2
        blobs.append(bytes(data))
    assert_same(blobs, monkeypatch, native)
    for start in range(0, len(blobs), 50):
        assert_same([b"\n".join(blobs[start : start + 50])], monkeypatch, native)


def test_many_attempts_and_ids(native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = []
    for n in range(300):
        task = base64.b64encode(n.to_bytes(8, "big") + b"\xff" * 12 + b"\x02\0\0\0").decode()
        lines += [line(owner(task=task, attempt=n % 3)), line(executor(task=task, attempt=n % 3))]
    assert_same([b"\n".join(lines[i : i + 64]) for i in range(0, len(lines), 64)], monkeypatch, native)


@pytest.mark.parametrize("at", range(40))
@pytest.mark.parametrize(
    ("planted", "taken"),
    [
        (b"~", True),
        (b"\xc3\xa9", True),  # UTF-8 bytes are string bytes like any other
        (b"\x7f", True),
        (b'\\"', False),  # an escape: msgspec's to read
        (b"\\n", False),
        (b"\x01", False),  # a raw control character: not JSON
        (b"\t", False),
        (b'"', False),  # the string ends there, and junk follows
    ],
)
def test_a_string_stops_at_its_first_quote_escape_or_control_byte(
    at: int, planted: bytes, taken: bool, native: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strings are read sixteen, then eight, then one byte at a time: whatever the offset
    of the byte that ends one and however many bytes follow it (so that each of the three
    loops meets it), the scan takes exactly the lines it took a byte at a time, with the
    same values as the Python path."""
    lines = []
    for tail in range(20):
        data = payload_line(taskLogInfo={**LOG, "stdoutFile": "/" + "a" * at + "~" + "b" * tail})
        assert data.count(b"~") == 1
        lines.append(data.replace(b"~", planted))
    # The blocks run to the end of the line: only a string near its end meets the last two loops.
    end = payload_line(taskLogInfo=LOG)
    assert end.endswith(b'"message":""}')
    lines.append(end[:-2] + b"a" * at + planted + b'"}')
    for data in lines:
        assert native.scan(data)[0].count == int(taken), data[-60:]
    assert_same(lines, monkeypatch, native)


def test_hex_id_answers_as_the_python_function_or_defers(native: ModuleType) -> None:
    """``hex_id`` in C (task ids, once each) answers exactly what ``ids.hex_id`` does for
    an all-hex or canonical base64 text, and None for anything else: never another id."""
    rng = random.Random(20261127)
    taken: list[str] = []
    texts: list[object] = [
        "",
        "=",
        "====",
        "AA==",
        "AB==",
        "AAB=",
        "AAA=",
        "A===",
        "AAAA",
        "ab",
        "AbCdEf09",
        "abc",
        "abcg",
        "0g",
    ]
    texts += ["AA==\n", " AAAA", "AA-_", "AA_A", "AAA", "AAAAA", "é" * 4, "AAé=", 12345, None, b"AAAA", "ff" * 40]
    for size in (1, 2, 3, 4, 8, 24, 28, 48, 49):
        data = rng.randbytes(size)
        taken += [base64.b64encode(data).decode(), data.hex(), data.hex().upper()]
    texts += taken + [text[:-1] for text in taken] + [text + "=" for text in taken]
    for text in texts:
        fast = native.hex_id(text)
        assert fast is None or fast == ids.hex_id(text), text
    assert all(native.hex_id(text) == ids.hex_id(text) for text in taken)  # the fast path takes them


@pytest.mark.parametrize("at", range(40))
def test_an_escaped_string_is_read_across_blocks(at: int, native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A template field with escapes at any offset is read to its true end (the escaped
    quote does not end it), and a control byte anywhere in it leaves the line."""
    site = "a" * at + '"' + "b" * 19 + "\\" + "c" * at
    data = line(definition(callSite=site))
    assert native.scan(data)[0].count == 1
    assert_same([b"\n".join([data, line(definition(task=OTHER_TASKS[0], callSite=site))])], monkeypatch, native)
    bad = data.replace(b"b" * 19, b"b" * 9 + b"\x01" + b"b" * 9)
    assert native.scan(bad)[0].count == 0
    assert_same([bad], monkeypatch, native)


def test_profile_entry_names_are_decoded_once_per_text_and_interned(
    native: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan hands each entry name over as the table's interned object (so that
    TaskTable._intern finds it with its hash cached), for more distinct names than the
    scan has slots for (some share one), for names of equal length, and for escaped
    spellings; Ray's usual extra data "{}" is one shared object. The replay is the same
    as without the scan."""
    names = [f"task:step{n:03d}" for n in range(100)] + ["task::f", "task::g", "task:\\u00e9"]
    lines = []
    for n, task in enumerate(OTHER_TASKS):
        entries = [profile_entry(name, T0 + 10 * k, T0 + 10 * k + 5) for k, name in enumerate(names)]
        entries.append(profile_entry("task::f", T0 - n, T0 + n, '{"name":"m.f","task_id":"x"}'))
        lines.append(line(profile(task=task, entries=entries)).replace(b"task:\\\\u00e9", b"task:\\u00e9"))
    blob = b"\n".join(lines)
    table = TaskShard(BASE_NS).replay.tasks
    handed: list[list[tuple[str, int, int, str]]] = []

    def profile_of(*args: Any) -> None:
        handed.append(args[4])
        table._scanned_profile(*args)

    scan = native.scan(blob)[0]
    assert scan.count == len(OTHER_TASKS)
    native.apply(
        scan, 0, scan.count, table._attempts, tasks.Attempt, table._ids, tasks.SECOND_NS, tasks.ts_ns,
        table._strings, table.base_ns, table._scanned_templates, table._names, table._learn_definition,
        tasks._RAW_TEMPLATES_LIMIT, tasks._TEMPLATES_LIMIT, profile_of,
    )  # fmt: skip
    assert len(handed) == len(OTHER_TASKS)
    for entries in handed:
        assert [entry[0] for entry in entries[: len(names)]] == [*names[:-1], "task:\u00e9"]
        for name, _start, _end, _extra in entries:
            assert name is table._strings[name]
    empty = [extra for entries in handed for _n, _s, _e, extra in entries if extra == "{}"]
    assert len(empty) == len(OTHER_TASKS) * len(names)
    assert all(extra is empty[0] for extra in empty)
    assert_same([blob], monkeypatch, native)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 63, 64, 65, 127, 128, 130, 200])
def test_is_ascii_answers_as_bytes_isascii(size: int, native: ModuleType) -> None:
    """The check every blob gets before its typed decode, with a non-ASCII byte at every
    position of every 64-byte step and of the tail."""
    plain = bytes(range(32, 127)) * 3
    data = plain[:size]
    assert native.is_ascii(data) is data.isascii() is True
    for at in range(size):
        for planted in (0x80, 0xC3, 0xFF, 0x7F):
            mutated = data[:at] + bytes([planted]) + data[at + 1 :]
            assert native.is_ascii(mutated) is mutated.isascii(), (at, planted)
    with pytest.raises(TypeError):
        native.is_ascii(bytearray(data))


def test_many_ids_and_attempts_in_one_blob(native: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan remembers, for the rest of a call, each task id text and attempt's Attempt
    and each raw node or worker id's hex id, in fewer slots than there are ids here
    (some share one): every attempt still gets its own transitions, node and worker,
    as without the scan, for two attempts of one id and ids that differ anywhere."""
    lines = []
    for n in range(300):
        task = base64.b64encode(n.to_bytes(8, "big") + b"\xff" * 12 + b"\x02\0\0\0").decode()
        node = base64.b64encode(bytes([n % 97]) * 28).decode()
        worker = base64.b64encode(n.to_bytes(2, "big") + b"\x01" * 26).decode()
        for attempt in (0, 1):
            states = (("SUBMITTED_TO_WORKER", ts(2, attempt)), ("RUNNING", ts(3, n)))
            lines.append(line(lifecycle(task, attempt, states, nodeId=node, workerId=worker, workerPid=n + 1)))
            lines.append(line(executor(task=task, attempt=attempt)))
    assert_same([b"\n".join(lines)], monkeypatch, native)

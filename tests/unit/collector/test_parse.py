"""Parsing and sorting event batches: grouping as KubeRay's Go collector
("the reference") does, bad events
quarantined instead of failing the batch."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from runtime.collector.events.parse import (
    BatchRejected,
    ParsedBatch,
    SpoolTarget,
    job_of,
    parse_batch,
    parse_timestamp_ns,
)
from tests.unit.collector.samples import accepted_batches, all_events

SESSION = "session_2026-11-22_01-58-29_266863_14332"


def event(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "eventId": "AAAA",
        "eventType": "TASK_DEFINITION_EVENT",
        "timestamp": "2026-11-22T01:59:00.082993524Z",
        "sessionName": SESSION,
        "nodeId": "qXYzogrvb/n1CRZPjVOVTZfXa78Hq2Fp4FM+jg==",
    }
    base.update(fields)
    return base


def lines_of(batch: ParsedBatch) -> list[tuple[SpoolTarget, dict[str, object]]]:
    return [(target, orjson.loads(line)) for target, lines in batch.groups.items() for line in lines]


def test_every_real_batch_parses_without_rejects() -> None:
    accepted = 0
    for body in accepted_batches():
        batch = parse_batch(body)
        assert batch.rejected == []
        assert sum(batch.type_counts.values()) == batch.accepted
        accepted += batch.accepted
    assert accepted == len(all_events())


def test_real_events_group_like_the_reference() -> None:
    counts: Counter[str] = Counter()
    for body in accepted_batches():
        for target, event in lines_of(parse_batch(body)):
            kind = "node" if target.job is None else "job"
            counts[f"{event['eventType']}:{kind}"] += 1
            assert target.session == SESSION
            assert target.node is not None and len(target.node) == 56
    # Node, actor lifecycle and worker events have no job: node_events.
    assert counts["NODE_DEFINITION_EVENT:job"] == 0
    assert counts["ACTOR_LIFECYCLE_EVENT:job"] == 0
    assert counts["WORKER_LIFECYCLE_EVENT:job"] == 0
    job_types = (
        "TASK_DEFINITION_EVENT",
        "TASK_LIFECYCLE_EVENT",
        "DRIVER_JOB_DEFINITION_EVENT",
        "ACTOR_DEFINITION_EVENT",
    )
    for typ in job_types:
        assert counts[f"{typ}:node"] == 0 and counts[f"{typ}:job"] > 0


def test_lines_keep_every_field() -> None:
    original = event(taskDefinitionEvent={"jobId": "AgAAAA==", "taskId": "x", "big": "18446744073709551615"})
    [(target, stored)] = lines_of(parse_batch(orjson.dumps([original])))
    assert stored == original
    node = "a97633a20aef6ff9f509164f8d53954d97d76bbf07ab6169e0533e8e"
    assert target == SpoolTarget(SESSION, node, "02000000")


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"driverJobDefinitionEvent": {"jobId": "AQAAAA=="}}, "01000000"),
        ({"taskProfileEvents": {"jobId": "AgAAAA=="}}, "02000000"),
        ({"actorDefinitionEvent": {"jobId": 7}}, "7"),
        ({"actorLifecycleEvent": {"actorId": "x"}}, None),
        ({"taskDefinitionEvent": {"jobId": ""}}, None),
        ({"taskDefinitionEvent": {}}, None),
        ({"taskDefinitionEvent": {"jobId": "../../x"}}, None),
    ],
)
def test_job_of(payload: dict[str, object], expected: str | None) -> None:
    assert job_of(payload) == expected


def test_node_types_ignore_nested_job() -> None:
    node_event = event(eventType="NODE_DEFINITION_EVENT", taskDefinitionEvent={"jobId": "AQAAAA=="})
    [(target, _event)] = lines_of(parse_batch(orjson.dumps([node_event])))
    assert target.job is None


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("2026-11-22T01:45:31.197192869Z", 1795311931197192869),
        ("2026-11-22T01:45:31Z", 1795311931000000000),
        ("2026-11-22T01:45:31.196Z", 1795311931196000000),
        ("2026-11-22T02:45:31.5+01:00", 1795311931500000000),
        ("2026-11-22T01:45:31.1234567891234Z", 1795311931123456789),
    ],
)
def test_timestamps_with_up_to_nine_digits(text: str, nanos: int) -> None:
    assert parse_timestamp_ns(text) == nanos


@pytest.mark.parametrize(
    "text", ["2026-11-22T01:45:31.1z", "2026-11-22T01:45:31", "2026-11-22 01:45:31Z", "2026-13-22T01:45:31Z", "x"]
)
def test_bad_timestamps(text: str) -> None:
    with pytest.raises(ValueError):
        parse_timestamp_ns(text)


def test_invalid_events_are_quarantined_not_fatal() -> None:
    items = [
        event(),
        event(sessionName="../etc"),
        event(timestamp="yesterday"),
        {"eventType": "X"},
        5,
        event(eventType="SOMETHING_NEW"),
    ]
    batch = parse_batch(orjson.dumps(items))
    assert [r.reason for r in batch.rejected] == [
        "invalid_session_name",
        "invalid_timestamp",
        "invalid_session_name",
        "not_an_object",
    ]
    assert batch.type_counts == {"TASK_DEFINITION_EVENT": 1, "OTHER": 1}
    assert batch.accepted == 2


@pytest.mark.parametrize("body", [b"not json", b'{"a": 1}', b'"text"', b"[1, 2", b""])
def test_bodies_that_are_not_arrays_are_rejected(body: bytes) -> None:
    with pytest.raises(BatchRejected):
        parse_batch(body)


@pytest.mark.parametrize("body", [b"[]", b"null"])
def test_empty_batches(body: bytes) -> None:
    batch = parse_batch(body)
    assert batch.accepted == 0 and batch.rejected == []


def _job_lifecycle(*states: object) -> dict[str, object]:
    transitions = [{"state": s, "timestamp": "2026-11-22T01:59:08.491781511Z"} for s in states]
    return event(
        eventType="DRIVER_JOB_LIFECYCLE_EVENT",
        driverJobLifecycleEvent={"jobId": "AgAAAA==", "stateTransitions": transitions},
    )


def test_finished_driver_jobs_are_counted() -> None:
    """Ray 2.60's driver job lifecycle events (as captured in runB-all-types): CREATED when
    the driver connects, FINISHED when it leaves; only FINISHED asks for a poll."""
    body = orjson.dumps(
        [
            _job_lifecycle("CREATED"),
            _job_lifecycle("FINISHED"),
            _job_lifecycle("CREATED", "FINISHED"),
            _job_lifecycle(None),
            event(eventType="DRIVER_JOB_LIFECYCLE_EVENT", driverJobLifecycleEvent="FINISHED"),
            event(
                eventType="TASK_DEFINITION_EVENT", driverJobLifecycleEvent={"stateTransitions": [{"state": "FINISHED"}]}
            ),
        ]
    )
    batch = parse_batch(body)
    assert batch.jobs_ended == 2 and batch.accepted == 6


def test_real_batches_report_each_finished_job() -> None:
    finished = sum(parse_batch(body).jobs_ended for body in accepted_batches())
    lifecycle = [e for e in all_events() if e.get("eventType") == "DRIVER_JOB_LIFECYCLE_EVENT"]
    states = [t["state"] for e in lifecycle for t in e["driverJobLifecycleEvent"]["stateTransitions"]]  # type: ignore[index]
    assert finished == states.count("FINISHED") > 0


def test_decoding_a_batch_costs_little_more_than_its_lines() -> None:
    """A whole batch decoded at once held every event as Python objects, and orjson
    gave each serialised line a ~4 KiB buffer: a 60 MiB batch of small events peaked
    above 1 GiB in a sidecar limited to 256Mi. Now: the lines and one event."""
    import tracemalloc

    one = orjson.dumps({**event(), "x": "y" * 100})
    body = b"[" + b",".join([one] * ((8 << 20) // (len(one) + 1))) + b"]"
    tracemalloc.start()
    try:
        batch = parse_batch(body)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert batch.accepted > 20000 and not batch.rejected
    assert peak < 1.5 * len(body), f"decoding an {len(body) >> 20} MiB batch peaked at {peak >> 20} MiB"


@pytest.mark.parametrize(
    "body",
    [
        b' \n[ {"a": "x,]}", "b": [1, {"c": "\\"]"}]}, 3, "s,", null, [] ] \n',
        b"[]",
        b"[ ]",
        b"[[]]",
        b"[1,]",
        b"[,1]",
        b"[1]x",
        b"[1}",
        b"[{]}",
        b'["a]',
        b"[1 2]",
        b"[1,,2]",
        b'["\\ud800"]',
        b"[NaN]",
        b"[\xff]",
        b"[18446744073709551616]",
    ],
)
def test_the_array_is_read_exactly_as_a_whole_body_decode_would(body: bytes) -> None:
    """Events are decoded one at a time; what is accepted or refused is unchanged."""
    from runtime.collector.events.parse import _decode, _elements

    try:
        whole: object = orjson.loads(body)
    except orjson.JSONDecodeError:
        whole = BatchRejected
    try:
        piecewise: object = [_decode(element) for element in _elements(body)]
    except BatchRejected:
        piecewise = BatchRejected
    assert piecewise == whole


@pytest.mark.parametrize(
    ("job", "filed"),
    [
        ("job." + "x" * 124, "job." + "x" * 124),  # the longest a storage key holds
        ("job." + "x" * 125, None),
        ("job." + "x" * 150, None),  # safe characters, but no key can hold it
        ("j" * 172, None),  # base64 of 129 bytes: 258 hex digits
        ("AgAAAA==", "02000000"),  # base64, as Ray sends it
        ("..", None),
        ("a/b", None),
    ],
)
def test_a_job_id_is_filed_only_when_a_storage_key_can_hold_it(job: str, filed: str | None) -> None:
    """The parser took job IDs of up to 255 characters, the key layout 128: such a
    batch got 200 and its file could never be uploaded. Now one rule (the layout's):
    an unusable job ID files the event under node_events, as an unsafe one always did."""
    from runtime.storage.errors import InvalidKeyError
    from runtime.storage.layout import validate_job_id

    item = event(eventType="DRIVER_JOB_DEFINITION_EVENT", driverJobDefinitionEvent={"jobId": job})
    assert job_of(item) == filed
    try:
        expected: str | None = validate_job_id(job)
    except InvalidKeyError:
        expected = None
    assert filed == expected
    [(target, _line)] = lines_of(parse_batch(orjson.dumps([item])))
    assert target.job == filed


def test_small_and_large_batches_are_parsed_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's usual batch (about 1 MiB) is decoded whole, a larger one element by element:
    the same body gives the same spool lines and refusals either way."""
    from runtime.collector.events import parse

    items: list[object] = [event(), {"eventType": "NOT_A_RAY_EVENT"}, 3, None, {**event(), "x": ["]", ","]}]
    body = orjson.dumps(items * 50)
    whole = parse_batch(body)
    monkeypatch.setattr(parse, "WHOLE_DECODE_MAX", 0)
    piecewise = parse_batch(body)
    assert (whole.accepted, whole.groups, whole.rejected) == (piecewise.accepted, piecewise.groups, piecewise.rejected)
    assert whole.accepted == 100 and len(whole.rejected) == 150
    with pytest.raises(BatchRejected):
        parse_batch(b"[1, 2")

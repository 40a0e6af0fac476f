"""Id and timestamp normalisation; envelope checks and eventId de-duplication."""

from __future__ import annotations

import pytest

from runtime.server.replay.ids import IdCache, hex_id, is_nil
from runtime.server.replay.session import SessionReplay, base_ns_for
from runtime.server.replay.timestamps import in_int64, to_int, ts_ns
from runtime.storage.layout import session_created_at
from tests.unit.server.replay.events import definition, owner


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("AgAAAA==", "02000000"),
        ("YWJjZA==", "61626364"),
        ("ABCDEF", "abcdef"),
        ("4AKRNGpqk5bx-zXuAgAAAA", "e00291346a6a9396f1fb35ee02000000"),  # URL-safe, unpadded
        ("", ""),
        (None, ""),
        ("not an id!", "not an id!"),  # kept as given, like KubeRay's Go history server
    ],
)
def test_hex_id(raw: object, expected: str) -> None:
    assert hex_id(raw) == expected
    assert IdCache()(raw) == expected


def test_nil_ids() -> None:
    assert is_nil("ffff") and not is_nil("") and not is_nil("ff00")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22T01:45:31.197192869Z", 1795311931197192869),
        ("2026-11-22T01:45:31.196Z", 1795311931196000000),
        ("2026-11-22T01:45:31Z", 1795311931000000000),
        ("2026-11-22T02:45:31.5+01:00", 1795311931500000000),
        ("yesterday", None),
        (17, None),
    ],
)
def test_timestamps(text: object, expected: int | None) -> None:
    assert ts_ns(text) == expected


def test_int64_strings() -> None:
    assert to_int("10225") == 10225 and to_int(7) == 7 and to_int(None) == 0 and to_int("x") == 0
    assert to_int("1.0") == 1


@pytest.mark.parametrize(
    ("value", "fits"),
    [
        (0, True), (-1, True), (2**62 - 1, True), (2**62, True), (-(2**62), True), (-(2**62) - 1, True),
        (2**63 - 1, True), (-(2**63), True), (2**63, False), (-(2**63) - 1, False), (2**70, False), (-(2**70), False),
    ],
)  # fmt: skip
def test_int64_bounds_either_side_of_the_unboxed_ints(value: int, fits: bool) -> None:
    """The compiled check tries the 63-bit ints held unboxed first, then the int64 bounds."""
    assert in_int64(value) is fits
    assert to_int(value) == (value if fits else 0) and to_int(str(value)) == (value if fits else 0)


def test_base_for_session_names() -> None:
    created = session_created_at("session_2026-11-22_01-45-25_333080_9264")
    assert base_ns_for(created) == (1795311925 - 2 * 86400) * 10**9
    assert base_ns_for(session_created_at("no-time-here")) == 0


def test_duplicate_event_ids_are_dropped_and_counted() -> None:
    replay = SessionReplay()
    events = [definition(), owner()]
    replay.feed(events)
    replay.feed(events)
    counters = replay.counters
    assert counters.events == 2 and counters.duplicate_events == 2
    assert counters.by_type == {"TASK_DEFINITION_EVENT": 1, "TASK_LIFECYCLE_EVENT": 1}


def test_unknown_types_are_counted_not_errors() -> None:
    replay = SessionReplay()
    replay.feed([{"eventId": "w", "eventType": "WORKER_DEFINITION_EVENT", "workerDefinitionEvent": {}}])
    assert replay.counters.by_type == {"WORKER_DEFINITION_EVENT": 1} and replay.counters.bad_events == 0


def test_task_shard_sets_other_events_aside() -> None:
    replay = SessionReplay(tasks_only=True)
    node = {"eventId": "n", "eventType": "NODE_DEFINITION_EVENT", "nodeDefinitionEvent": {"nodeId": "AQ=="}}
    replay.feed([definition(), node])
    assert replay.strays == [node] and replay.counters.events == 1 and not replay.nodes.nodes

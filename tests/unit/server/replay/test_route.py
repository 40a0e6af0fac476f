"""Routing task events to task shards by id range, without parsing them."""

from __future__ import annotations

import base64

import orjson
import pytest

from runtime.server.replay.ids import hex_id
from runtime.server.replay.route import Router, shard_of_hex
from tests.unit.server.replay.events import definition, owner

RAW_IDS = [bytes([first]) + bytes(range(7)) + b"\xff" * 12 + b"\x02\x00\x00\x00" for first in range(0, 256, 7)]


def route(data: bytes, shards: int = 4) -> tuple[dict[int, list[dict[str, object]]], list[object], Router]:
    out: dict[int, list[dict[str, object]]] = {}
    other: list[object] = []

    def sink(shard: int, blob: bytes, lines: int) -> None:
        split = blob.split(b"\n")
        assert len(split) == lines and all(split), "the batch's number of lines, none empty"
        out.setdefault(shard, []).extend(orjson.loads(line) for line in split)

    router = Router(shards, sink, other.append)
    router.feed(data)
    router.flush()
    return out, other, router


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 8])
def test_every_spelling_of_an_id_goes_to_the_shard_of_its_hex(shards: int) -> None:
    for raw in RAW_IDS:
        spellings = [
            base64.b64encode(raw).decode(),
            raw.hex(),
            raw.hex().upper(),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
        ]
        expected = shard_of_hex(raw.hex(), shards)
        for spelling in spellings:
            out, other, _ = route(orjson.dumps(definition(task=spelling)), shards)
            assert list(out) == [expected], (spelling, shards)
            assert not other


def test_shards_hold_ascending_id_ranges() -> None:
    ids = sorted(raw.hex() for raw in RAW_IDS)
    shards = [shard_of_hex(i, 4) for i in ids]
    assert shards == sorted(shards) and set(shards) == {0, 1, 2, 3}


def test_all_hex_32_character_id_is_routed_as_hex() -> None:
    task = "0123456789abcdef0123456789abcdef"  # valid base64 too, but to_hex_id reads hex
    out, _, _ = route(orjson.dumps(definition(task=task)), 4)
    assert list(out) == [shard_of_hex(hex_id(task), 4)] == [0]


def test_spaced_json_arrays_and_non_task_events() -> None:
    spaced = orjson.dumps(definition(), option=orjson.OPT_INDENT_2).replace(b"\n", b"")
    node = {"eventId": "n", "eventType": "NODE_DEFINITION_EVENT", "nodeDefinitionEvent": {"nodeId": "AQ=="}}
    data = b"\n".join([spaced, orjson.dumps(node), b"{broken", b""])
    out, other, router = route(data)
    assert sum(len(v) for v in out.values()) == 1
    assert other == [node] and router.bad_lines == 1
    array = orjson.dumps([definition(), owner(), node])
    out, other, _ = route(array)
    assert sum(len(v) for v in out.values()) == 2 and other == [node]


def test_event_without_a_task_id_goes_to_the_owner_of_the_other_tables() -> None:
    out, other, _ = route(orjson.dumps(definition(task="")))
    assert not out and len(other) == 1

"""The native build's router loop in C (``runtime/server/replay/_route.c``).

Each test routes the same event objects through ``Router`` with the C loop and with its
Python loop and asserts the same calls, in the same order: every batch handed to the sink
(shard, bytes, number of lines), every event that is no task's, and the bad lines.
Outside ``make test-native`` the C module is compiled here with the system's C compiler.
"""

from __future__ import annotations

import base64
import random
from types import ModuleType
from typing import Any

import orjson
import pytest

from runtime.server.replay import route
from runtime.server.replay.route import Router
from tests.support.native_build import c_extension
from tests.unit.server.replay.events import definition, envelope, executor, owner


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    built = getattr(route, "_route", None)  # imported by route.py in the native build only
    module = c_extension("runtime.server.replay._route", built, tmp_path_factory.mktemp("native"))
    return module.RouterCore  # type: ignore[no-any-return]


def routed(objects: list[bytes], shards: int, batch_lines: int, native: Any) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    saved = route.native_core
    route.native_core = native
    try:
        router = Router(
            shards, lambda shard, blob, lines: calls.append(("sink", shard, blob, lines)), calls.append, batch_lines
        )
    finally:
        route.native_core = saved
    for data in objects:
        router.feed(data)
    router.flush()
    calls.append(("bad", router.bad_lines))
    return calls


def assert_same(objects: list[bytes], core: Any) -> None:
    for shards in (1, 2, 3, 16):
        for batch_lines in (1, 3, 1024):
            assert routed(objects, shards, batch_lines, core) == routed(objects, shards, batch_lines, None)


def ids() -> list[str]:
    raws = [bytes([first]) + bytes(range(7)) + b"\xff" * 12 + b"\x02\x00\x00\x00" for first in range(0, 256, 17)]
    spellings = []
    for raw in raws:
        spellings += [
            base64.b64encode(raw).decode(),
            raw.hex(),
            raw.hex().upper(),
            base64.urlsafe_b64encode(raw).decode(),
            raw.hex()[:32],
            "0123456789abcdef0123456789abcdeX",
        ]
    return spellings


def lines() -> list[bytes]:
    out = []
    for task in ids():
        out += [orjson.dumps(owner(task=task)), orjson.dumps(executor(task=task)), orjson.dumps(definition(task=task))]
    out += [
        orjson.dumps(envelope("NODE_DEFINITION_EVENT", "nodeDefinitionEvent", {"nodeId": "AAAA"})),
        orjson.dumps(owner()).replace(b'"taskId":"', b'"taskId": "'),
        orjson.dumps(owner()) + b"\r",
        b"   ",
        b"",
        b"{not json",
        b'{"taskId":"',
        b'{"taskId":"' + b"A" * 31,
        b'{"taskId":"' + b"a" * 32,
        b'{"taskId":"' + b"a" * 47 + b'"',
        b'{"x":{"taskId":"' + b"A" * 32 + b'"},"taskLifecycleEvent":{"taskId":"' + b"B" * 32 + b'"}}',
        b'{"taskLifecycleEvent":{"taskId":12}}',
        b'{"taskLifecycleEvent":{"taskId":"' + b"\xc3\xa9" * 16 + b'"}}',
    ]
    return out


def test_every_kind_of_line_routes_as_in_python(core: Any) -> None:
    every = lines()
    assert_same([b"\n".join(every)], core)
    assert_same(every, core)
    assert_same([b"\n" + b"\n".join(every) + b"\n\n"], core)
    assert_same([b"  \n" + b"\n".join(every[:5])], core)


def test_the_key_is_found_at_every_offset_past_lookalikes(core: Any) -> None:
    """The C loop looks for the key 16 positions at a time (its quote, and its 'I' five
    bytes on) and then byte by byte near the line's end: the key at each offset from a
    line's start and from its end, behind keys that share those two bytes or more."""
    task = b"A" * 8 + b"Q" * 24  # 32 base64 characters: shard 0 of 16
    later = b"/" * 32  # the last shard
    decoys = [b"", b'"nodeId":"x",', b'"taskIdx":"' + later + b'",', b'"taskId" :"x",', b'"tasKId":"x",', b'"taskI']
    objects = []
    for decoy in decoys:
        for pad in range(0, 40):
            head = b"{" + b" " * pad + decoy
            objects.append(head + b'"taskId":"' + task + b'","then":"' + later + b'"}')
            objects.append(head + b'"taskId":"' + task + b'"')  # the id closes the line
            objects.append(head + b'"taskId":"' + task[: pad % 33])  # cut short
    assert_same([b"\n".join(objects)], core)


def test_legacy_arrays_and_bodies_with_nothing(core: Any) -> None:
    events = [owner(), executor(), definition(), envelope("NODE_DEFINITION_EVENT", "nodeDefinitionEvent", {})]
    assert_same([orjson.dumps(events), b"[1, 2", b"{}", b"", b" \n ", b"[]", b'{"a": 1}'], core)


def test_damaged_lines_route_as_in_python(core: Any) -> None:
    rng = random.Random(20261127)
    seeds = lines()[:30]
    tokens = [b'"', b"\\", b":", b"{", b"}", b"\n", b" ", b"A", b"0", b"-", b"_", b"\xff"]
    objects = []
    for _ in range(400):
        data = bytearray(b"\n".join(rng.sample(seeds, 5)))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            if rng.random() < 0.5:
                del data[at : at + rng.randint(1, 12)]
            else:
                data[at:at] = rng.choice(tokens)
        objects.append(bytes(data))
    assert_same(objects, core)


def test_a_failing_sink_drops_its_batch_as_in_python(core: Any) -> None:
    every = lines()

    def run(native: Any) -> list[Any]:
        seen: list[Any] = []

        def sink(shard: int, blob: bytes, count: int) -> None:
            seen.append((shard, blob, count))
            if len(seen) == 1:
                raise RuntimeError("worker gone")

        saved = route.native_core
        route.native_core = native
        try:
            router = Router(1, sink, seen.append, 2)
        finally:
            route.native_core = saved
        with pytest.raises(RuntimeError):
            router.feed(b"\n".join(every[:5]))
        router.feed(b"\n".join(every[5:8]))
        router.flush()
        return seen

    assert run(core) == run(None)


def test_a_core_never_initialised_raises_instead_of_crashing(core: Any) -> None:
    """Found in review: a RouterCore made without __init__ read through its null batches."""
    bare = core.__new__(core)
    for call in (
        lambda: bare.feed(b'{"taskId":"' + b"A" * 32 + b'"}'),
        lambda: bare.feed(b'{"x":1}'),
        lambda: bare.append(0, b"x"),
        lambda: bare.flush(0),
    ):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()

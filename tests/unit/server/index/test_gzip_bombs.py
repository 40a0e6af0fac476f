"""Decompression bombs (docs/security-model.md): a writer stores a small ``.gz`` event
object that inflates without bound. The server inflates a bounded window at a time,
stops at the object's allowance (100x its stored size, at least 1 MiB, at most 1 GiB),
skips the object as a gzip error and builds the rest; the in-process/child choice
judges ``.gz`` objects by what they likely inflate to, not their stored size."""

from __future__ import annotations

import dataclasses
import gzip
import logging
import sqlite3
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtime.server.config import ServerConfig
from runtime.server.index.build import build_index
from runtime.server.index.cache import IndexCache
from runtime.server.index.sources import StreamCounts, read_one, stream_lines
from runtime.server.metrics import ServerMetrics
from runtime.server.replay.decode import InflateLimitError, decode_object, gunzip, inflate_allowance
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout, event_file_name
from tests.support.sample_session import StoredSample, write_sample_session

pytestmark = pytest.mark.hostile

LAYOUT = KeyLayout("")
INFLATED = 256 * 1024 * 1024
MiB = 1024 * 1024
TASKS = "SELECT * FROM tasks ORDER BY task_id, attempt"


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """~260 KB of gzip inflating to 256 MiB of ``a`` and one newline (~1000:1)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"a" * (8 * MiB)
    parts = [c.compress(block) for _ in range(INFLATED // len(block))]
    return b"".join(parts) + c.compress(b"\n") + c.flush()


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True))


@dataclasses.dataclass
class World:
    storage: StorageConfig
    store: ObjectStore
    sample: StoredSample
    key: str


def _world(root: Path, bomb: bytes | None, *, compress: bool = False) -> World:
    storage = StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True)
    store = open_store(storage)
    sample = write_sample_session(store, LAYOUT, ClusterRef("team-b", "raycluster-b"), logs=False, compress=compress)
    name = event_file_name(sample.node_id, 1_763_775_999_000_000_000, compressed=True)
    key = LAYOUT.node_events_key(sample.cluster, sample.session, sample.node_id, name)
    if bomb is not None:
        store.put_bytes(key, bomb)
    return World(storage, store, sample, key)


def _build(world: World, out: Path, **kwargs: Any) -> Any:
    return build_index(world.store, LAYOUT, world.sample.cluster, world.sample.session, out, **kwargs)


def _rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(TASKS).fetchall()


def _peak(run: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_read_one_skips_a_bomb_after_a_bounded_window(
    tmp_path: Path, bomb: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    world = _world(tmp_path, bomb)
    (info,) = world.store.walk(world.key)
    with caplog.at_level(logging.WARNING):
        read, peak = _peak(lambda: read_one(world.store, info, streaming=True))
    assert read.data == b"" and not read.gzip_ok and not read.streamed
    # Its allowance (100x its stored size) plus one step, not the 256 MiB it inflates to.
    bound = inflate_allowance(len(bomb)) + 16 * MiB
    assert peak < bound, f"{len(bomb)} stored bytes: read peaked at {peak / MiB:.0f} MiB"
    assert world.key in caplog.text and "decompression bomb" in caplog.text


def test_an_inline_build_skips_the_bomb_and_keeps_the_rest(tmp_path: Path, bomb: bytes) -> None:
    clean = _build(_world(tmp_path / "clean", None), tmp_path / "clean.sqlite")
    world = _world(tmp_path / "bombed", bomb)
    stats, peak = _peak(lambda: _build(world, tmp_path / "bombed.sqlite"))
    assert peak < 128 * MiB, f"{len(bomb)} stored bytes: the build peaked at {peak / MiB:.0f} MiB"
    assert stats.gzip_errors == 1 and stats.bad_lines == clean.bad_lines + 1
    assert (stats.events, stats.tasks, stats.files) == (clean.events, clean.tasks, clean.files + 1)
    assert _rows(tmp_path / "bombed.sqlite") == _rows(tmp_path / "clean.sqlite")


def test_the_index_cache_build_memory_is_bounded_against_a_bomb(tmp_path: Path, bomb: bytes) -> None:
    world = _world(tmp_path, bomb)
    config = ServerConfig(
        storage=world.storage, cache_dir=tmp_path / "cache", freshness_seconds=3600, shared_index="off"
    )
    metrics = ServerMetrics()
    cache = IndexCache(config, store=world.store, layout=LAYOUT, metrics=metrics)
    _, peak = _peak(lambda: cache.ensure(world.sample.cluster, world.sample.session, wait=300))
    # docs/design.md: "memory stays bounded"; this build runs in the serving process.
    assert peak < 128 * MiB, f"{len(bomb)} stored bytes: inline build peaked at {peak / MiB:.0f} MiB"
    inline = metrics.registry.get_sample_value("historyserver_session_load_duration_seconds_count", {"mode": "inline"})
    assert inline == 1


def test_a_streamed_bomb_stops_at_its_allowance(tmp_path: Path, bomb: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = _build(_world(tmp_path / "clean", None), tmp_path / "clean.sqlite")
    world = _world(tmp_path / "bombed", bomb)
    monkeypatch.setattr("runtime.server.index.sources.STREAM_ABOVE", 1000)  # every object streamed
    stats, peak = _peak(lambda: _build(world, tmp_path / "bombed.sqlite"))
    assert peak < 128 * MiB, f"{len(bomb)} stored bytes: the streamed build peaked at {peak / MiB:.0f} MiB"
    assert stats.gzip_errors == 1 and stats.events == clean.events
    assert _rows(tmp_path / "bombed.sqlite") == _rows(tmp_path / "clean.sqlite")
    with pytest.raises(InflateLimitError):
        list(stream_lines(world.store, world.store.stat(world.key)))


@pytest.mark.parametrize("chunk", [7, 4096])
def test_a_streamed_line_over_the_limit_is_dropped_and_counted(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Checked as a line stays unfinished across pieces: with a limit below the
    piece size (not so in production: 64 MiB against 16 MiB) a line within one piece
    passes."""
    limit = 100 if chunk < 100 else 10_000
    monkeypatch.setattr("runtime.server.index.sources.STREAM_CHUNK", chunk)
    monkeypatch.setattr("runtime.server.index.sources.INFLATE_STEP", 5)  # drains zlib a few bytes at a time
    monkeypatch.setattr("runtime.server.index.sources.STREAM_MAX_LINE", limit)
    short = [orjson.dumps({"eventId": str(n)}) + b"\n" for n in range(6)]
    body = b"".join(short[:2]) + b"x" * 500 + b"\n" + b"".join(short[2:4]) + b"y" * 300 + b"\n" + b"".join(short[4:])
    store.put_bytes("x/plain", body)
    store.put_bytes("x/padded.gz", gzip.compress(body[:90]) + b"\0\0" + gzip.compress(body[90:]))
    expected = (b"".join(short), 2) if limit < 300 else (body, 0)
    for key in ("x/plain", "x/padded.gz"):
        counts = StreamCounts()
        blobs = list(stream_lines(store, store.stat(key), counts))
        assert (b"".join(blobs), counts.long_lines) == expected


def test_an_unending_streamed_line_holds_at_most_the_limit(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runtime.server.index.sources.STREAM_CHUNK", 1 * MiB)
    monkeypatch.setattr("runtime.server.index.sources.STREAM_MAX_LINE", 4 * MiB)
    store.put_bytes("x/long", b"z" * (48 * MiB) + b"\n" + orjson.dumps({"eventId": "1"}) + b"\n")
    counts = StreamCounts()
    blobs, peak = _peak(lambda: list(stream_lines(store, store.stat("x/long"), counts)))
    assert blobs == [b'{"eventId":"1"}\n'] and counts.long_lines == 1
    assert peak < 16 * MiB, f"a 48 MiB line: stream peaked at {peak / MiB:.0f} MiB"


def test_a_gz_object_too_big_to_hold_is_streamed_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _world(tmp_path, None, compress=True)
    whole = _build(world, tmp_path / "whole.sqlite")
    monkeypatch.setattr("runtime.server.index.sources.WHOLE_INFLATED_MAX", 1000)
    monkeypatch.setattr("runtime.server.index.sources.STREAM_CHUNK", 4096)
    (info, *_) = [i for i in world.store.walk(world.sample.session_prefix) if i.key.endswith(".jsonl.gz")]
    assert read_one(world.store, info, streaming=True).streamed
    streamed = _build(world, tmp_path / "streamed.sqlite")
    assert dataclasses.replace(streamed, seconds=0) == dataclasses.replace(whole, seconds=0)
    assert _rows(tmp_path / "streamed.sqlite") == _rows(tmp_path / "whole.sqlite")


def test_gunzip_is_bounded_and_passes_real_event_files(bomb: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InflateLimitError):
        gunzip(bomb)
    result = decode_object("x.jsonl.gz", bomb)
    assert result.gzip_error and result.items == [] and result.bad_lines == 1
    # Unusually regular events (fixed shape, sequential ids and timestamps) compress ~20x.
    events = b"".join(
        orjson.dumps({"eventId": f"{n:032x}", "eventType": "TASK_LIFECYCLE_EVENT", "timestamp": 1_700_000_000_000 + n})
        + b"\n"
        for n in range(200_000)
    )
    packed = gzip.compress(events, compresslevel=9)
    assert len(events) / len(packed) > 15
    assert gunzip(packed) == (events, True)
    # Stepping through zlib a few bytes at a time changes nothing: members, padding, truncation.
    monkeypatch.setattr("runtime.server.replay.decode.INFLATE_STEP", 5)
    two = gzip.compress(events[:1000]) + b"\0\0\0" + gzip.compress(events[1000:5000])
    assert gunzip(two) == (events[:5000], True)
    data, ok = gunzip(two[:-40])
    assert not ok and events[:5000].startswith(data) and len(data) > 1000


def test_a_gzip_session_is_sized_by_what_it_inflates_to(tmp_path: Path) -> None:
    world = _world(tmp_path, None, compress=True)
    prefix = world.sample.session_prefix
    stored = sum(i.size for i in world.store.walk(prefix) if i.key.endswith(".jsonl.gz"))
    # Its stored bytes fit the in-process limit; what they inflate to does not.
    config = ServerConfig(
        storage=world.storage,
        cache_dir=tmp_path / "cache",
        freshness_seconds=3600,
        shared_index="off",
        subprocess_build_bytes=stored * 2,
    )
    metrics = ServerMetrics()
    cache = IndexCache(config, store=world.store, layout=LAYOUT, metrics=metrics)
    cache.ensure(world.sample.cluster, world.sample.session, wait=300)
    child = metrics.registry.get_sample_value(
        "historyserver_session_load_duration_seconds_count", {"mode": "subprocess"}
    )
    assert child == 1


def test_an_unending_streamed_json_array_holds_at_most_the_limit(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object starting with '[' was collected whole, however big: 2x the object held.
    Up to what read_one holds of any object it is still replayed whole."""
    monkeypatch.setattr("runtime.server.index.sources.STREAM_CHUNK", 1 * MiB)
    monkeypatch.setattr("runtime.server.index.sources.STREAM_MAX_LINE", 1 * MiB)
    monkeypatch.setattr("runtime.server.index.sources.WHOLE_INFLATED_MAX", 4 * MiB)
    fits = b"[" + b'{"eventId":"1"},' * (MiB // 8) + b'{"eventId":"2"}]'  # 2 MiB: over a line's limit
    store.put_bytes("x/fits", fits)
    assert list(stream_lines(store, store.stat("x/fits"))) == [fits]
    store.put_bytes("x/array", b"[" + b'{"eventId":"1"},' * (3 * MiB))
    counts = StreamCounts()
    blobs, peak = _peak(lambda: list(stream_lines(store, store.stat("x/array"), counts)))
    assert blobs == [] and counts.long_lines == 1
    assert peak < 16 * MiB, f"a 48 MiB array: stream peaked at {peak / MiB:.0f} MiB"

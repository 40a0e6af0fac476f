"""Building a session index from a store laid out exactly like the collector's."""

from __future__ import annotations

import dataclasses
import gzip
import logging
import re
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.synth_session import write_synthetic_session
from runtime.server.index import schema
from runtime.server.index.build import build_index
from runtime.server.index.fingerprint import fingerprints
from runtime.server.index.index_file import refresh_objects
from runtime.server.index.reader import SessionIndex
from runtime.server.load_errors import SessionLoadError
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.session_keys import is_readable_event_file, parse_session_key
from tests.support.sample_session import StoredSample, load_events, write_events, write_sample_session

LAYOUT = KeyLayout("")


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True))


@pytest.fixture
def sample(store: ObjectStore) -> StoredSample:
    return write_sample_session(store, LAYOUT)


def build(store: ObjectStore, sample: Any, out: Path, **kwargs: Any) -> Any:
    return build_index(store, LAYOUT, sample.cluster, sample.session, out, **kwargs)


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def test_session_a(store: ObjectStore, sample: StoredSample, tmp_path: Path) -> None:
    out = tmp_path / "a.sqlite"
    stats = build(store, sample, out)
    assert (stats.files, stats.unreadable_files, stats.events, stats.duplicate_events) == (8, 0, 259, 0)
    assert (stats.bad_lines, stats.bad_events, stats.processes) == (0, 0, 0)
    assert (stats.tasks, stats.actors, stats.jobs, stats.nodes) == (48, 9, 4, 1)
    assert stats.log_events == 7 and stats.by_type["TASK_DEFINITION_EVENT"] == 34
    with SessionIndex(out) as index:
        assert index.scalar("SELECT COUNT(*) FROM tasks") == 48
        assert index.scalar("SELECT SUM(n) FROM task_counts") == 48
        assert index.meta(schema.META_SCHEMA_VERSION) == str(schema.SCHEMA_VERSION)
        assert index.meta(schema.META_SESSION) == sample.session
        assert orjson.loads(index.meta(schema.META_CLUSTER) or "{}")["name"] == sample.cluster.name
        assert index.stats()["tasks"] == 48
        listing = list(store.walk(sample.session_prefix))
        assert (index.meta(schema.META_EVENTS_FINGERPRINT), index.meta(schema.META_OBJECTS_FINGERPRINT)) == (
            fingerprints(listing, sample.session_prefix)
        )
        assert index.scalar("SELECT COUNT(*) FROM objects") == len(listing)
        assert index.scalar("SELECT size FROM objects WHERE rel_key = ?", (f"{sample.node_id}/logs/raylet.out",))
        names = {r[0] for r in index.rows("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"tasks_by_job", "tasks_by_state", "tasks_by_actor", "tasks_by_name", "tasks_by_type"} <= names
        failed = orjson.loads(index.scalar("SELECT job_json FROM jobs WHERE job_id = '03000000'"))
        assert failed["status"] == "FAILED" and failed["submission_id"] == "wl-job2-fails"
        assert index.scalar("SELECT job_key FROM jobs WHERE job_id IS NULL") == "raysubmit_DxVK3y6pibPJrgLi"
        assert index.scalar("SELECT job_id FROM jobs WHERE submission_id = 'wl-job2-fails'") == "03000000"
    assert rows(out, "PRAGMA journal_mode") == [("wal",)]
    assert not Path(f"{out}-wal").exists() or Path(f"{out}-wal").stat().st_size == 0


@pytest.mark.parametrize(("processes", "spill"), [(2, False), (2, True), (3, True)])
def test_parallel_build_equals_in_process_build(  # noqa: PLR0917 - pytest fixtures and parameters
    store: ObjectStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    processes: int,
    spill: bool,
) -> None:
    """Workers that replay their whole range live, or spill it to disk and replay
    it one bucket at a time, write exactly what the in-process build writes."""
    cluster = ClusterRef("default", "synth")
    synth = write_synthetic_session(store, LAYOUT, cluster, n_tasks=3000, n_nodes=3)
    inline, parallel = tmp_path / "inline.sqlite", tmp_path / "parallel.sqlite"
    one = build(store, synth, inline, processes=0)
    if spill:
        monkeypatch.setattr("runtime.server.index.build.SPILL_ABOVE_BYTES", 0)
    monkeypatch.setenv("HISTORY_INDEX_TRACE", "1")  # workers say how they replayed
    with caplog.at_level(logging.DEBUG, logger="runtime.server.index.build"):
        two = build(store, synth, parallel, processes=processes)
    assert (one.processes, two.processes) == (0, processes)
    ignore = {"seconds", "processes"}
    assert {k: v for k, v in dataclasses.asdict(one).items() if k not in ignore} == {
        k: v for k, v in dataclasses.asdict(two).items() if k not in ignore
    }
    assert one.tasks == synth.attempts == 3000
    for table, order in (
        ("tasks", "task_id, attempt"),
        ("task_texts", "text_id"),
        ("task_counts", "job_id, state, type, name, func_name"),
        ("actors", "actor_id"),
        ("jobs", "job_key"),
        ("nodes", "node_id"),
        ("log_events", "job_id, event_id"),
    ):
        sql = f"SELECT * FROM {table} ORDER BY {order}"  # noqa: S608 - test constants
        assert rows(inline, sql) == rows(parallel, sql), table
    assert not list(tmp_path.glob("parallel.sqlite.shard*"))
    assert not list(tmp_path.glob("*.zst"))
    replayed = sorted(int(n) for n in re.findall(r"replayed spilled bucket (\d+)", caplog.text))
    # each worker replays the first bucket of its range live, the others from disk
    firsts = {next(b for b in range(16) if b * processes // 16 == n) for n in range(processes)}
    assert replayed == ([b for b in range(16) if b not in firsts] if spill else [])


def test_synthetic_session_is_indexed_as_generated(store: ObjectStore, tmp_path: Path) -> None:
    synth = write_synthetic_session(store, LAYOUT, ClusterRef("default", "synth"), n_tasks=2000, seed=3)
    stats = build(store, synth, tmp_path / "s.sqlite")
    assert stats.tasks == 2000 and stats.events == synth.events and stats.by_type == synth.by_type
    assert stats.bad_lines == stats.bad_events == stats.duplicate_events == 0
    with SessionIndex(tmp_path / "s.sqlite") as index:
        assert index.scalar("SELECT COUNT(*) FROM tasks WHERE state = 'FAILED'") == synth.failed
        assert index.scalar("SELECT COUNT(*) FROM tasks WHERE attempt = 1") == synth.retried
        render = index.details()
        details = [orjson.loads(render(bytes(e))) for (e,) in index.rows("SELECT detail FROM tasks")]
        assert sum(1 for d in details if d.get("profiling_data")) == synth.profiled
        logs = [d["task_log_info"] for d in details if d["task_log_info"]]
        assert sum(1 for log in logs if log["stdout_end"] > log["stdout_start"]) > 1500  # split log info
        statuses = dict(index.rows("SELECT job_key, json_extract(job_json, '$.status') FROM jobs"))
        assert statuses[synth.jobs[1]] == "FAILED" and statuses["raysubmit_synthEntrypointFailed"] == "FAILED"
        assert index.scalar("SELECT COUNT(*) FROM nodes WHERE state = 'DEAD'") == 1
        assert index.scalar("SELECT COUNT(*) FROM actors") == synth.actors


def test_synthetic_sessions_are_deterministic(tmp_path: Path) -> None:
    contents = []
    for run in range(2):
        store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / f"s{run}"), create_bucket=True))
        write_synthetic_session(store, LAYOUT, ClusterRef("default", "synth"), n_tasks=500, seed=11, gzip_events=True)
        contents.append({info.key: store.get_bytes(info.key) for info in store.walk("")})
    assert contents[0] == contents[1]


def test_all_event_objects_unreadable_is_a_load_error(store: ObjectStore, sample: StoredSample, tmp_path: Path) -> None:
    listing = [
        ObjectInfo(
            key=f"{sample.session_prefix}{sample.node_id}/node_events/{sample.node_id}-2026-11-22-01-{n}.jsonl",
            size=10,
            version="1",
        )
        for n in range(3)
    ]
    with pytest.raises(SessionLoadError, match="read 0 of 3"):
        build(store, sample, tmp_path / "x.sqlite", listing=listing)


def test_some_unreadable_objects_are_counted(store: ObjectStore, sample: StoredSample, tmp_path: Path) -> None:
    listing = list(store.walk(sample.session_prefix))
    ghost = ObjectInfo(
        key=f"{sample.session_prefix}{sample.node_id}/node_events/{sample.node_id}-2026-11-22-01-9.jsonl",
        size=10,
        version="1",
    )
    stats = build(store, sample, tmp_path / "x.sqlite", listing=[*listing, ghost])
    assert stats.unreadable_files == 1 and stats.tasks == 48


def test_empty_session(store: ObjectStore, tmp_path: Path) -> None:
    cluster = ClusterRef("default", "empty")
    session = "session_2026-11-22_01-45-25_333080_1"
    store.put_bytes(LAYOUT.log_key(cluster, session, "ab", "raylet.out"), b"hello\n")
    stats = build_index(store, LAYOUT, cluster, session, tmp_path / "e.sqlite")
    assert stats.files == 0 and stats.tasks == 0
    assert rows(tmp_path / "e.sqlite", "SELECT rel_key FROM objects") == [("ab/logs/raylet.out",)]


def test_corrupt_and_truncated_objects_still_load(store: ObjectStore, tmp_path: Path) -> None:
    cluster = ClusterRef("default", "damaged")
    events = [{**e, "sessionName": "session_2026-11-22_01-45-25_333080_2"} for e in load_events()]
    keys = write_events(store, LAYOUT, cluster, events, files_per_target=2, compress=True)
    session = "session_2026-11-22_01-45-25_333080_2"
    truncated = keys[0]
    body = store.get_bytes(truncated)
    store.put_bytes(truncated, body[: len(body) * 2 // 3])
    damaged = keys[1]
    plain = gzip.decompress(store.get_bytes(damaged)).split(b"\n")
    plain.insert(1, b'{"eventId": "half an ev')
    plain.insert(2, b"")
    store.put_bytes(damaged, gzip.compress(b"\n".join(plain)))
    store.put_bytes(keys[2], b"this is not gzip")
    stats = build_index(store, LAYOUT, cluster, session, tmp_path / "d.sqlite")
    assert stats.unreadable_files == 0 and stats.gzip_errors == 2
    assert stats.bad_lines >= 3
    assert 0 < stats.events < 259 and stats.tasks > 0


def test_duplicate_event_objects_are_deduplicated(store: ObjectStore, sample: StoredSample, tmp_path: Path) -> None:
    write_events(store, LAYOUT, sample.cluster, load_events(), base_ns=1_800_000_000_000_000_000)
    stats = build(store, sample, tmp_path / "dup.sqlite")
    assert stats.events == 259 and stats.duplicate_events == 259 and stats.tasks == 48


def test_refresh_objects_rewrites_only_the_object_list(
    store: ObjectStore, sample: StoredSample, tmp_path: Path
) -> None:
    out = tmp_path / "r.sqlite"
    build(store, sample, out)
    before = rows(out, "SELECT key, value FROM meta WHERE key != 'objects_fingerprint' ORDER BY key")
    store.put_bytes(LAYOUT.log_key(sample.cluster, sample.session, sample.node_id, "late.log"), b"late\n")
    listing = list(store.walk(sample.session_prefix))
    refresh_objects(out, listing, sample.session_prefix)
    assert rows(out, "SELECT COUNT(*) FROM objects") == [(len(listing),)]
    assert rows(out, "SELECT value FROM meta WHERE key = 'objects_fingerprint'") == [
        (fingerprints(listing, sample.session_prefix)[1],)
    ]
    assert rows(out, "SELECT key, value FROM meta WHERE key != 'objects_fingerprint' ORDER BY key") == before


def test_fingerprints(sample: StoredSample, store: ObjectStore) -> None:
    listing = list(store.walk(sample.session_prefix))
    events, everything = fingerprints(listing, sample.session_prefix)
    log = ObjectInfo(key=f"{sample.session_prefix}{sample.node_id}/logs/new.log", size=1, version="v")
    assert fingerprints([*listing, log], sample.session_prefix) == (
        events,
        fingerprints([*listing, log], sample.session_prefix)[1],
    )
    assert fingerprints([*listing, log], sample.session_prefix)[1] != everything
    bigger = [dataclasses.replace(info, size=info.size + 1) if "/job_events/" in info.key else info for info in listing]
    assert fingerprints(bigger, sample.session_prefix)[0] != events
    event_log = ObjectInfo(key=f"{sample.session_prefix}{sample.node_id}/logs/events/event_X.log", size=1)
    assert fingerprints([*listing, event_log], sample.session_prefix)[0] != events  # /events input
    assert fingerprints(list(reversed(listing)), sample.session_prefix) == (events, everything)


def is_event_object(rel: str) -> bool:
    return is_readable_event_file(parse_session_key(rel))


def test_event_object_names() -> None:
    assert is_event_object("n1/node_events/n1-2026-11-22-01")
    assert is_event_object("n1/job_events/02000000/n1-2026-11-22-01-1795311940.jsonl.gz")
    assert not is_event_object("n1/node_events/foo.txt")
    assert not is_event_object("n1/job_events/n1-2026-11-22-01.jsonl")
    assert not is_event_object("n1/logs/events/event_GCS.log")


def test_a_failing_worker_fails_the_build_cleanly(
    store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synth = write_synthetic_session(store, LAYOUT, ClusterRef("default", "synth"), n_tasks=2000)
    monkeypatch.setattr("runtime.server.index.pool.sys.executable", "/bin/false")
    with pytest.raises(SessionLoadError, match="failed"):
        build(store, synth, tmp_path / "f.sqlite", processes=2)
    assert not list(tmp_path.glob("f.sqlite.shard*")) and not list(tmp_path.glob("*.stderr"))


def test_a_spill_that_cannot_be_written_fails_the_build_never_drops_tasks(
    store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The builder writes the workers' spill files: a full disk there must fail the
    build (a worker given part of its range would write a shorter index), and
    nothing of it stays on disk."""
    synth = write_synthetic_session(store, LAYOUT, ClusterRef("default", "synth"), n_tasks=2000)
    monkeypatch.setattr("runtime.server.index.build.SPILL_ABOVE_BYTES", 0)

    def full_disk(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("runtime.server.index.spill.BucketSpill.write", full_disk)
    with pytest.raises(SessionLoadError, match="No space left on device"):
        build(store, synth, tmp_path / "f.sqlite", processes=2)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("f.sqlite")]


@pytest.mark.parametrize("compress", [False, True])
def test_big_objects_are_streamed_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: bool
) -> None:
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "s"), create_bucket=True))
    sample = write_sample_session(store, LAYOUT, compress=compress)
    whole = build(store, sample, tmp_path / "whole.sqlite")
    monkeypatch.setattr("runtime.server.index.sources.STREAM_ABOVE", 1000)
    monkeypatch.setattr("runtime.server.index.sources.STREAM_CHUNK", 4096)
    streamed = build(store, sample, tmp_path / "streamed.sqlite")
    assert dataclasses.replace(streamed, seconds=0) == dataclasses.replace(whole, seconds=0)
    sql = "SELECT * FROM tasks ORDER BY task_id, attempt"
    assert rows(tmp_path / "whole.sqlite", sql) == rows(tmp_path / "streamed.sqlite", sql)


def test_streamed_legacy_array_and_gzip_members(
    store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.server.index.sources import stream_lines

    monkeypatch.setattr("runtime.server.index.sources.STREAM_CHUNK", 7)
    lines = b"".join(orjson.dumps({"eventId": str(n)}) + b"\n" for n in range(20))
    store.put_bytes("x/plain", lines)
    store.put_bytes("x/array", b"  " + orjson.dumps([{"eventId": "1"}, {"eventId": "2"}]))
    store.put_bytes("x/two.gz", gzip.compress(lines[:50]) + gzip.compress(lines[50:]))
    for key, expected in (("x/plain", lines), ("x/two.gz", lines)):
        blobs = list(stream_lines(store, store.stat(key)))
        assert b"".join(blobs) == expected and all(b.endswith(b"\n") for b in blobs)
    (array,) = stream_lines(store, store.stat("x/array"))
    assert orjson.loads(array) == [{"eventId": "1"}, {"eventId": "2"}]

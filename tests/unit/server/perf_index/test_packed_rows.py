"""Packed task JSON (runtime.server.replay.pack): what the index stores, and that
every reader gets the rendered JSON back byte for byte."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from bench.synth_session import write_synthetic_session
from runtime.server.index.build import build_index
from runtime.server.index.reader import SessionIndex
from runtime.server.queries.cluster_status import _PENDING_TASK_STATES, _task_demands
from runtime.server.queries.options import TaskQuery
from runtime.server.queries.tasks import list_tasks
from runtime.server.replay.pack import Unpacker, make_dict, packer
from runtime.server.replay.render_tasks import BRIEF_COLUMNS, EXTRA, TaskRenderer, brief_json, splice_detail
from runtime.server.replay.session import SessionReplay
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.sample_session import load_events, write_sample_session

SAMPLE = b'{"task_id":"0cd093a086dc8c3affffffffffffffffffffffff02000000","attempt_number":0,"name":"parent"}'


def test_pack_round_trip_and_plain_values() -> None:
    pack = packer(3, make_dict([SAMPLE, SAMPLE]))
    packed = pack(SAMPLE)
    assert packed[0] == 3 and len(packed) < len(SAMPLE) / 3
    unpack = Unpacker({3: make_dict([SAMPLE, SAMPLE])}.get)
    assert unpack(packed) == SAMPLE
    assert pack(b"{}") == b"{}"  # a value that would not shrink stays plain JSON
    assert unpack(b'{"a":1}') == b'{"a":1}'


def test_unknown_dictionary_is_an_error() -> None:
    packed = packer(5, make_dict([SAMPLE]))(SAMPLE)
    with pytest.raises(ValueError, match="dictionary 5"):
        Unpacker({0: b"x"}.get)(packed)
    with pytest.raises(ValueError, match="out of range"):
        packer(ord("{"), b"")


def test_stored_rows_are_packed_and_read_back_as_rendered(tmp_path: Path) -> None:
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "s"), create_bucket=True))
    synth = write_synthetic_session(store, KeyLayout(""), ClusterRef("default", "synth"), n_tasks=2000, seed=5)
    out = tmp_path / "i.sqlite"
    build_index(store, KeyLayout(""), synth.cluster, synth.session, out, processes=2)
    with sqlite3.connect(out) as conn:
        sql = f"SELECT {BRIEF_COLUMNS}, extra_json FROM tasks ORDER BY task_id, attempt"  # noqa: S608 - constants
        stored = conn.execute(sql).fetchall()
        dict_nos = [r[0] for r in conn.execute("SELECT dict_no FROM task_dicts ORDER BY 1")]
    assert dict_nos == list(range(16))  # one per first hex digit, whichever shard wrote it
    packed = [r for r in stored if r[-1][0] != ord("{")]
    assert len(packed) == len(stored) == 2000
    assert all(r[-1][0] == int(r[0][0], 16) for r in stored)
    raw = sum(len(r[-1]) for r in stored)
    with SessionIndex(out) as index:
        unpack = index.unpacker()
        plain = [(brief_json(r[:-1]), unpack(r[-1])) for r in stored]
        answer = orjson.loads(list_tasks(index, TaskQuery(limit=10_000, detail=True, exclude_driver=False)))
        brief = orjson.loads(list_tasks(index, TaskQuery(limit=10_000, exclude_driver=False)))
    assert raw * 5 < sum(len(e) for _, e in plain)
    tasks = answer["data"]["result"]["result"]
    assert [orjson.loads(splice_detail(b, e)) for b, e in plain] == tasks
    assert len(tasks) == 2000 and sum(1 for t in tasks if t["task_log_info"]) > 1000
    # the brief answer is the detail answer without the detail-only fields
    briefs = brief["data"]["result"]["result"]
    assert len(briefs) == 2000 and all(len(b) == 13 for b in briefs)
    assert briefs == [{k: t[k] for k in b} for b, t in zip(briefs, tasks, strict=True)]
    assert sum(1 for t in tasks if t["error_type"]) == synth.failed


def test_pending_demands_read_packed_rows(tmp_path: Path) -> None:
    """Cluster status counts pending tasks by required resources from packed rows."""
    replay = SessionReplay()
    replay.feed(load_events())
    expected: dict[bytes, int] = {}
    for row in TaskRenderer(replay.tasks).rows():
        resources = orjson.loads(row[EXTRA])["required_resources"]
        if resources is not None:
            key = orjson.dumps(resources)
            expected[key] = expected.get(key, 0) + 1
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "s"), create_bucket=True))
    sample = write_sample_session(store, KeyLayout(""))
    out = tmp_path / "i.sqlite"
    build_index(store, KeyLayout(""), sample.cluster, sample.session, out, processes=0)
    with sqlite3.connect(out) as conn:  # every attempt pending, so every row is read
        conn.execute("UPDATE tasks SET state = ?", (_PENDING_TASK_STATES[0],))
    with SessionIndex(out) as index:
        assert index.scalar("SELECT COUNT(*) FROM tasks WHERE substr(extra_json, 1, 1) = '{'") == 0
        found = _task_demands(index, ",".join("?" * len(_PENDING_TASK_STATES)))
    assert len(expected) > 1 and dict(found) == expected and found == sorted(found)

"""Descriptor exhaustion through made-up sessions (#14 item 3): the spool keeps at
most ``max_open_files`` descriptors and a batch may name at most
``max_targets_per_batch`` spool targets, so one sender cannot make the collector
fail for everyone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runtime.collector.events.parse import SpoolTarget
from runtime.collector.events.spool import Spool
from tests.unit.collector.hostile_support import NODE, event, open_fds, post, served

pytestmark = pytest.mark.hostile

S = "session_2026-11-22_01-58-29_266863_14332"


def sessions_batch(first: int, count: int) -> bytes:
    return json.dumps([event(f"session_attack_{i:06d}") for i in range(first, first + count)]).encode()


def test_21000_sessions_in_three_posts_then_a_legitimate_event_is_200(tmp_path: Path) -> None:
    """With the default limits each 7,000-session POST is refused with 413 before
    anything is opened, and the next legitimate batch is stored."""
    with served(tmp_path, max_request_size=64 << 20) as srv:
        before = open_fds()
        for n in range(3):
            answer = post(srv.port, sessions_batch(n * 7000, 7000))
            assert answer is not None and answer.status == 413
            message = str(answer.json()["error"])
            assert "7000 distinct (session, node, job) spool targets" in message and "limit of 1000" in message
        legit = post(srv.port, json.dumps([event(S)]).encode())
        assert legit is not None and legit.status == 200, legit
        assert open_fds() - before <= 5
        assert srv.receiver.spool.file_count == 1


def test_21000_sessions_accepted_under_a_raised_batch_limit_keep_descriptors_bounded(tmp_path: Path) -> None:
    """An operator who raises ``--max-targets-per-batch``: the three POSTs are stored,
    yet at most ``max_open_files`` descriptors stay open, and every later event
    still gets 200 (the old spool reached 19,999 of 20,000 descriptors, then 500
    for everyone)."""
    with served(tmp_path, max_request_size=64 << 20, fsync=False, max_open_files=64) as srv:
        srv.receiver.max_targets_per_batch = 7000
        before = open_fds()
        for n in range(3):
            answer = post(srv.port, sessions_batch(n * 7000, 7000))
            assert answer is not None and answer.status == 200, answer
        assert srv.receiver.spool.open_files <= 64
        assert open_fds() - before <= 64 + 5
        legit = post(srv.port, json.dumps([event(S)]).encode())
        assert legit is not None and legit.status == 200
        # A file closed by the cap is reopened in append mode: nothing is lost.
        again = post(srv.port, sessions_batch(0, 1))
        assert again is not None and again.status == 200
        srv.receiver.spool.rotate_all()
        first = [r for r in srv.ready if r.session == "session_attack_000000"]
        assert len(first) == 1 and first[0].lines == 2
        assert len(first[0].path.read_bytes().splitlines()) == 2
        assert len(srv.ready) == 21001


def test_a_file_closed_by_the_cap_was_synced_before_the_batch_was_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk first still holds: closing a descriptor the batch wrote to syncs it, so
    every file of the batch is on disk when ``write`` returns."""
    spool = Spool(
        tmp_path / "spool", "c_ns", max_file_size=1 << 20, rotation_interval=300.0, fsync=True,
        on_ready=lambda _r: None, max_open_files=2,
    )  # fmt: skip
    synced: set[int] = set()
    closed_unsynced: list[int] = []
    real_sync, real_close = os.fdatasync, os.close

    def sync(fd: int) -> None:
        synced.add(fd)
        real_sync(fd)

    def close(fd: int) -> None:
        if fd not in synced:
            closed_unsynced.append(fd)
        synced.discard(fd)
        real_close(fd)

    monkeypatch.setattr("runtime.collector.events.spool.os.fdatasync", sync)
    monkeypatch.setattr("runtime.collector.events.spool.os.fsync", sync)  # new files' directories
    monkeypatch.setattr("runtime.collector.events.spool.os.close", close)
    targets = [SpoolTarget(S, NODE, f"{j:08x}") for j in range(5)]
    assert spool.write({t: [b'{"n":1}'] for t in targets}) == 5
    assert spool.open_files == 2
    assert closed_unsynced == []
    assert spool.write({targets[0]: [b'{"n":2}']}) == 1  # reopened, appended
    spool.rotate_all()
    monkeypatch.undo()
    spool.close()


def test_resume_cuts_a_torn_tail_of_a_file_closed_by_the_cap(tmp_path: Path) -> None:
    ready: list[object] = []
    spool = Spool(
        tmp_path / "spool", "c_ns", max_file_size=1 << 20, rotation_interval=300.0, fsync=True,
        on_ready=ready.append, max_open_files=1,
    )  # fmt: skip
    a, b = SpoolTarget(S, NODE, "01000000"), SpoolTarget(S, NODE, "02000000")
    spool.write({a: [b'{"a":1}']})
    spool.write({b: [b'{"b":1}']})  # closes a's descriptor
    assert spool.open_files == 1
    (closed,) = (tmp_path / "spool" / "c_ns" / S / NODE / "job_events" / "01000000").glob("*.jsonl.open")
    with open(closed, "ab") as fh:
        fh.write(b'{"torn":')  # a crash mid-append of a batch never acknowledged
    # The process dies here: a new spool resumes from disk.
    resumed = Spool(
        tmp_path / "spool", "c_ns", max_file_size=1 << 20, rotation_interval=300.0, fsync=True,
        on_ready=ready.append, max_open_files=1,
    ).resume()  # fmt: skip
    contents = sorted(r.path.read_bytes() for r in resumed)
    assert contents == [b'{"a":1}\n', b'{"b":1}\n']

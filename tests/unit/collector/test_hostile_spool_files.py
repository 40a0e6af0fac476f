"""A Ray job that can write the event spool (a spool left under ``$RAY_TMP_ROOT``, the
volume both containers share) swaps spool files for links and FIFOs: the collector
never ships a link's target, never blocks on a FIFO, never truncates through a link
and still starts when the spool holds junk (docs/security-model.md)."""

from __future__ import annotations

import gzip
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.collector.events.parse import RejectedEvent, SpoolTarget
from runtime.collector.events.quarantine import Quarantine
from runtime.collector.events.spool import Spool
from runtime.collector.events.uploader import EventUploader
from runtime.collector.metrics import CollectorMetrics
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore

pytestmark = pytest.mark.hostile

S = "session_2026-11-22_01-58-29_266863_14332"
NODE = "a" * 56
CLUSTER_KEY = "raycluster_ns"
SECRET = b"SECRET-SERVICE-ACCOUNT-TOKEN\n"


@dataclass
class Collector:
    spool: Spool
    uploader: EventUploader
    bucket: Path
    metrics: CollectorMetrics

    def stored(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.bucket)): p.read_bytes()
            for p in self.bucket.rglob("*")
            if p.is_file() and ".staging" not in p.parts
        }

    def drain(self, seconds: float = 5.0) -> bool:
        return self.uploader.drain(time.monotonic() + seconds)


@contextmanager
def collector(tmp_path: Path, *, compression: bool = False, resume: bool = False) -> Iterator[Collector]:
    bucket = tmp_path / "bucket"
    bucket.mkdir(exist_ok=True)
    uploader: EventUploader | None = None

    def on_ready(ready: object) -> None:
        assert uploader is not None
        uploader.submit(ready)  # type: ignore[arg-type]

    spool = Spool(
        tmp_path / "event-data", CLUSTER_KEY, max_file_size=1 << 20, rotation_interval=300.0, fsync=False,
        on_ready=on_ready,
    )  # fmt: skip
    metrics = CollectorMetrics()
    uploader = EventUploader(
        store=LocalStore(bucket), layout=KeyLayout(""), cluster=ClusterRef("ns", "raycluster"), spool=spool,
        node_id=lambda: NODE, metrics=metrics, quarantine=Quarantine(tmp_path / "q.jsonl"),
        compression=compression, workers=2,
    )  # fmt: skip
    if resume:
        for ready in spool.resume():
            uploader.submit(ready)
    uploader.start()
    try:
        yield Collector(spool, uploader, bucket, metrics)
    finally:
        uploader.stop(timeout=2.0)


def secret_file(tmp_path: Path) -> Path:
    secret = tmp_path / "token"
    secret.write_bytes(SECRET)
    return secret


def active_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "event-data").rglob("*.jsonl.open"))


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "gzip"])
def test_an_active_file_swapped_for_a_link_is_dropped_not_shipped(tmp_path: Path, compression: bool) -> None:
    """The job replaces the active file with a link to a secret; the next rotation
    renames the link and the upload (or the gzip before it) must refuse it."""
    secret = secret_file(tmp_path)
    with collector(tmp_path, compression=compression) as c:
        c.spool.write({SpoolTarget(S, NODE, None): [b'{"a":1}']})
        (active,) = active_files(tmp_path)
        active.unlink()
        active.symlink_to(secret)
        c.spool.rotate_all()
        assert c.drain()
        assert not any(SECRET.strip() in data for data in c.stored().values())
        assert c.stored() == {}
        assert c.metrics.upload_failures.labels(what="events", kind="NotRegularFileError")._value.get() == 1
        assert not list((tmp_path / "event-data").rglob("*.jsonl*"))  # the link left the spool
        # The size rotation accounted for, not the link's: the budget does not leak.
        assert c.spool.used_bytes == 0 and c.spool.file_count == 0
    assert secret.read_bytes() == SECRET


def test_fifos_swapped_in_do_not_block_the_uploads_behind_them(tmp_path: Path) -> None:
    """Two FIFOs (one per upload worker) used to block both workers in open() for good."""
    with collector(tmp_path) as c:
        c.spool.write({SpoolTarget(S, NODE, "01000000"): [b'{"a":1}'], SpoolTarget(S, NODE, "02000000"): [b'{"b":1}']})
        for active in active_files(tmp_path):
            active.unlink()
            os.mkfifo(active)
        c.spool.rotate_all()
        c.spool.write({SpoolTarget(S, NODE, None): [b'{"legit":1}']})
        c.spool.rotate_all()
        assert c.drain(5.0)
        assert list(c.stored().values()) == [b'{"legit":1}\n']


def test_a_reopened_active_file_that_became_a_fifo_fails_the_batch_at_once(tmp_path: Path) -> None:
    """A file the descriptor cap closed is reopened by name on its next write: a FIFO
    there would have blocked that open (under the spool's lock) until a reader came."""
    spool = Spool(
        tmp_path / "event-data", CLUSTER_KEY, max_file_size=1 << 20, rotation_interval=300.0, fsync=False,
        on_ready=lambda _r: None, max_open_files=1,
    )  # fmt: skip
    first, second = SpoolTarget(S, NODE, "01000000"), SpoolTarget(S, NODE, "02000000")
    spool.write({first: [b'{"a":1}']})
    spool.write({second: [b'{"b":1}']})  # closes the first file's descriptor (cap of 1)
    (closed,) = [p for p in active_files(tmp_path) if "01000000" in p.parts]
    closed.unlink()
    os.mkfifo(closed)
    started = time.monotonic()
    with pytest.raises(OSError):
        spool.write({first: [b'{"c":1}']})
    assert time.monotonic() - started < 2.0
    assert spool.write({second: [b'{"d":1}']}) == 1  # everyone else carries on


def test_resume_skips_links_and_fifos_and_truncates_nothing_through_them(tmp_path: Path) -> None:
    """Junk planted while the collector was down: a dangling link used to crash every
    start (FileNotFoundError in resume), a link named like an active file had its
    target's last line cut, a link named like a ready file had its target shipped."""
    secret = secret_file(tmp_path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"line1\nno-newline-tail")
    node_dir = tmp_path / "event-data" / CLUSTER_KEY / S / NODE / "node_events"
    job_dir = tmp_path / "event-data" / CLUSTER_KEY / S / NODE / "job_events" / "02000000"
    node_dir.mkdir(parents=True)
    job_dir.mkdir(parents=True)
    (node_dir / "1700000000000000000.jsonl").symlink_to(secret)
    (node_dir / "1700000000000000001.jsonl").symlink_to(tmp_path / "missing")
    (job_dir / "1700000000000000002.jsonl.open").symlink_to(victim)
    os.mkfifo(job_dir / "1700000000000000003.jsonl.open")
    (node_dir / "1700000000000000004.jsonl").write_bytes(b'{"legit":1}\n')

    with collector(tmp_path, resume=True) as c:
        assert c.drain()
        stored = c.stored()
    assert list(stored.values()) == [b'{"legit":1}\n']
    assert victim.read_bytes() == b"line1\nno-newline-tail"
    assert secret.read_bytes() == SECRET
    assert not [p for p in (tmp_path / "event-data").rglob("*") if p.is_symlink() or p.is_fifo()]


def test_an_active_file_deleted_under_the_spool_does_not_stop_the_other_rotations(tmp_path: Path) -> None:
    """The shutdown's final rotation used to stop at the first file it could not rename,
    leaving every later one unsent until the next start."""
    with collector(tmp_path) as c:
        c.spool.write({SpoolTarget(S, NODE, f"0{n}000000"): [b'{"n":%d}' % n] for n in range(1, 4)})
        first, *_ = active_files(tmp_path)
        first.unlink()
        assert c.spool.rotate_all() == 3
        assert c.drain()
        assert sorted(c.stored().values()) == [b'{"n":2}\n', b'{"n":3}\n']
        assert c.spool.file_count == 0 and c.spool.used_bytes == 0


def test_the_quarantine_file_is_never_written_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched\n")
    quarantine = Quarantine(tmp_path / "q.jsonl")
    quarantine.path.symlink_to(victim)
    assert quarantine.add([RejectedEvent(reason="invalid_json", raw=b"{")]) == 0
    assert victim.read_bytes() == b"untouched\n"
    quarantine.path.unlink()
    assert quarantine.add([RejectedEvent(reason="invalid_json", raw=b"{")]) == 1
    assert b"invalid_json" in quarantine.path.read_bytes()


def test_resume_after_a_crash_between_gzip_and_unlink_warns_about_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    node_dir = tmp_path / "event-data" / CLUSTER_KEY / S / NODE / "node_events"
    node_dir.mkdir(parents=True)
    for n in range(20):  # both names, in whatever order the directory lists them
        (node_dir / f"17000000000000000{n:02d}.jsonl").write_bytes(b'{"a":1}\n')
        (node_dir / f"17000000000000000{n:02d}.jsonl.gz").write_bytes(gzip.compress(b'{"a":1}\n'))
    with caplog.at_level(logging.WARNING), collector(tmp_path, resume=True) as c:
        assert c.drain()
        assert len(c.stored()) == 20
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text

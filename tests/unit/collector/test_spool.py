"""The disk-first spool: appends, rotation, accounting and recovery after a crash."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from runtime.collector.events.parse import SpoolTarget
from runtime.collector.events.spool import Spool
from runtime.collector.events.spool_files import ReadyFile

NODE = "a" * 56
S = "session_2026-11-22_01-58-29_266863_14332"


class Collected(list[ReadyFile]):
    def __call__(self, ready: ReadyFile) -> None:
        self.append(ready)


def make(tmp_path: Path, **kwargs: object) -> tuple[Spool, Collected]:
    ready = Collected()
    options: dict[str, object] = {"max_file_size": 1 << 20, "rotation_interval": 300.0, "fsync": True}
    options.update(kwargs)
    spool = Spool(tmp_path / "spool", "c_ns", on_ready=ready, **options)  # type: ignore[arg-type]
    return spool, ready


def test_events_are_grouped_per_session_node_and_job(tmp_path: Path) -> None:
    spool, ready = make(tmp_path)
    job = SpoolTarget(S, NODE, "02000000")
    node = SpoolTarget(S, NODE, None)
    assert spool.write({job: [b'{"a":1}', b'{"a":2}'], node: [b'{"n":1}']}) == 3
    spool.rotate_all()
    by_job = {r.job: r for r in ready}
    assert by_job["02000000"].path.read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert by_job["02000000"].lines == 2
    assert by_job[None].path.read_bytes() == b'{"n":1}\n'
    assert by_job["02000000"].path.parent == tmp_path / "spool" / "c_ns" / S / NODE / "job_events" / "02000000"
    assert spool.used_bytes == sum(r.size for r in ready)


def test_node_falls_back_then_unknown(tmp_path: Path) -> None:
    spool, ready = make(tmp_path)
    spool.write({SpoolTarget(S, None, None): [b"{}"]}, fallback_node="b" * 56)
    spool.write({SpoolTarget(S, None, "01000000"): [b"{}"]}, fallback_node=None)
    spool.rotate_all()
    assert sorted(str(r.node) for r in ready) == ["None", "b" * 56]
    unknown = next(r for r in ready if r.node is None)
    assert "_unknown" in unknown.path.parts


def test_rotation_by_size_happens_on_the_write_path(tmp_path: Path) -> None:
    spool, ready = make(tmp_path, max_file_size=100)
    target = SpoolTarget(S, NODE, None)
    spool.write({target: [b"x" * 60]})
    assert ready == []
    spool.write({target: [b"y" * 60]})
    assert len(ready) == 1 and ready[0].size == 122
    spool.write({target: [b"z"]})
    spool.rotate_all()
    assert len(ready) == 2 and ready[1].path != ready[0].path


def test_rotation_by_age(tmp_path: Path) -> None:
    spool, ready = make(tmp_path, rotation_interval=0.0)
    spool.write({SpoolTarget(S, NODE, None): [b"{}"]})
    assert spool.rotate_due() == 1
    assert len(ready) == 1


def test_release_deletes_and_accounts(tmp_path: Path) -> None:
    spool, ready = make(tmp_path)
    spool.write({SpoolTarget(S, NODE, "01000000"): [b"{}" * 10]})
    spool.rotate_all()
    assert spool.used_bytes > 0 and spool.file_count == 1
    spool.release(ready[0])
    assert spool.used_bytes == 0 and spool.file_count == 0
    assert not (tmp_path / "spool" / "c_ns" / S).exists()  # empty dirs pruned


def test_compress_replaces_the_file_atomically(tmp_path: Path) -> None:
    spool, ready = make(tmp_path)
    spool.write({SpoolTarget(S, NODE, None): [b'{"k":"v"}'] * 100})
    spool.rotate_all()
    gz = spool.compress(ready[0])
    assert gz.compressed and gz.path.name.endswith(".jsonl.gz")
    assert not ready[0].path.exists()
    assert gzip.decompress(gz.path.read_bytes()) == b'{"k":"v"}\n' * 100
    assert spool.used_bytes == gz.size


def test_resume_after_a_crash(tmp_path: Path) -> None:
    spool, _ = make(tmp_path)
    target = SpoolTarget(S, NODE, "02000000")
    spool.write({target: [b'{"a":1}', b'{"a":2}']})
    spool.write({SpoolTarget(S, None, None): [b'{"u":1}']})
    active = next((tmp_path / "spool").rglob("*.jsonl.open"))
    # simulate the process dying while an unacknowledged batch was half-written
    with open(active, "ab") as fh:
        fh.write(b'{"a":3, "tru')
    (active.parent / "123.jsonl.gz.tmp").write_bytes(b"partial gzip")
    other = tmp_path / "spool" / "other_ns" / S / NODE / "node_events"
    other.mkdir(parents=True)
    (other / "5.jsonl").write_bytes(b"{}\n")

    restarted, _ = make(tmp_path)
    found = restarted.resume()
    assert len(found) == 2
    job_file = next(r for r in found if r.job == "02000000")
    assert job_file.path.read_bytes() == b'{"a":1}\n{"a":2}\n'  # torn line cut
    assert job_file.lines is None
    assert next(r for r in found if r.job is None).node is None  # still unknown
    assert not list((tmp_path / "spool").rglob("*.tmp"))
    assert restarted.used_bytes == sum(r.size for r in found) + 3  # the other cluster's file counts


def test_resume_prefers_a_finished_gzip_twin(tmp_path: Path) -> None:
    directory = tmp_path / "spool" / "c_ns" / S / NODE / "node_events"
    directory.mkdir(parents=True)
    (directory / "7.jsonl").write_bytes(b"{}\n")
    (directory / "7.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    spool, _ = make(tmp_path)
    found = spool.resume()
    assert [r.path.name for r in found] == ["7.jsonl.gz"]
    assert not (directory / "7.jsonl").exists()


def test_write_failure_rotates_the_wedged_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool, ready = make(tmp_path)
    target = SpoolTarget(S, NODE, None)
    spool.write({target: [b'{"ok":1}']})

    def broken(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("runtime.collector.events.spool.os.write", broken)
    with pytest.raises(OSError):
        spool.write({target: [b'{"lost":1}']})
    monkeypatch.undo()
    assert len(ready) == 1 and ready[0].path.read_bytes() == b'{"ok":1}\n'  # salvaged
    spool.write({target: [b'{"next":1}']})  # a fresh file
    spool.rotate_all()
    assert ready[1].path.read_bytes() == b'{"next":1}\n'


def _synced_dirs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories fsynced from now on (by the path their descriptor names)."""
    synced: list[Path] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.is_dir():
            synced.append(path)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_a_new_file_and_the_directories_made_for_it_are_durable_before_the_ack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fdatasync makes a file's data durable, not its name (fsync(2): "Calling fsync() does
    not necessarily ensure that the entry in the directory containing the file has also
    reached disk. For that an explicit fsync() on a file descriptor for the directory is
    also needed."). A batch acknowledged into a new file must survive a power loss."""
    spool, _ready = make(tmp_path)
    (tmp_path / "spool" / "c_ns").mkdir(parents=True)
    synced = _synced_dirs(monkeypatch)
    spool.write({SpoolTarget(S, NODE, "02000000"): [b"{}"]})
    job_dir = tmp_path / "spool" / "c_ns" / S / NODE / "job_events" / "02000000"
    # Every directory made for the file, and the one that already held the first of them.
    assert synced == [job_dir, *list(job_dir.parents)[:3], tmp_path / "spool" / "c_ns"]
    # The next file of the same job, after a rotation: only its own directory is new to sync.
    spool.rotate_all()
    synced.clear()
    spool.write({SpoolTarget(S, NODE, "02000000"): [b"{}"]})
    assert synced == [job_dir]
    # Appending to an existing file syncs no directory.
    synced.clear()
    spool.write({SpoolTarget(S, NODE, "02000000"): [b"{}"]})
    assert synced == []


def test_without_fsync_no_directory_is_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool, _ready = make(tmp_path, fsync=False)
    synced = _synced_dirs(monkeypatch)
    spool.write({SpoolTarget(S, NODE, None): [b"{}"]})
    assert synced == []

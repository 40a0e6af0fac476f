"""A worker's spill files: records back in order per bucket, a cut file is an error."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from runtime.server.index.spill import BucketSpill, remove_spill_files


def test_interleaved_buckets_read_back_in_order(tmp_path: Path) -> None:
    rng = random.Random(5)
    spill = BucketSpill(tmp_path / "shard.sqlite")
    written: dict[int, list[tuple[bytes, int]]] = {}
    for n in range(300):  # buckets written in turn, as the router's batches arrive
        bucket = rng.choice((0, 3, 15))
        lines = rng.randrange(1, 3000)
        blob = b'{"n":%d}\n' % n * lines
        spill.write(bucket, blob, lines)
        written.setdefault(bucket, []).append((blob, lines))
    assert spill.finish() == [0, 3, 15]
    assert (
        sum(p.stat().st_size for p in tmp_path.iterdir())
        < sum(len(b) for blobs in written.values() for b, _ in blobs) / 5
    )
    for bucket in (0, 3, 15):
        assert list(spill.read(bucket)) == written[bucket]
    assert list(tmp_path.iterdir()) == []  # each file is deleted once read


def test_a_cut_file_is_an_error_not_a_shorter_replay(tmp_path: Path) -> None:
    spill = BucketSpill(tmp_path / "s")
    spill.write(2, b"x" * 100_000, 1)
    spill.finish()
    path = spill.path(2)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(Exception, match=r"cut short|end marker"):
        list(spill.read(2))


def test_remove_drops_open_and_closed_files(tmp_path: Path) -> None:
    spill = BucketSpill(tmp_path / "s")
    spill.write(1, b"a\n", 1)
    spill.write(9, b"b\n", 1)
    (tmp_path / "other.bucket01.zst").write_bytes(b"")  # another shard's: kept
    spill.remove()
    assert [p.name for p in tmp_path.iterdir()] == ["other.bucket01.zst"]
    remove_spill_files(tmp_path / "other")
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_record_is_an_error_naming_the_file(tmp_path: Path) -> None:
    spill = BucketSpill(tmp_path / "s")
    spill.write(4, b'{"n":1}\n' * 5000, 5000)
    spill.finish()
    path = spill.path(4)
    data = bytearray(path.read_bytes())
    data[8:12] = b"\0\0\0\0"  # the frame's magic number
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match=r"s\.bucket04\.zst holds a damaged record"):
        list(spill.read(4))

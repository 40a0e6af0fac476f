"""One contract, four backends: every test here runs against local, fake-gcs-server,
moto (S3) and Azurite, through stores built from environment variables exactly as
the collector and the history server build them."""

from __future__ import annotations

import hashlib
import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError, ObjectNotFoundError, PermanentStorageError
from tests.integration.conftest import TEST_RETRY, new_bucket_name
from tests.integration.emulators.base import Emulator

pytestmark = pytest.mark.integration

PG_KEY = "c/s/fetched_endpoints/restful__api__v0__placement_groups?detail=1&limit=10000"


def test_bytes_round_trip_and_overwrite(store: ObjectStore) -> None:
    store.put_bytes("a/b/c.txt", b"first")
    assert store.get_bytes("a/b/c.txt") == b"first"
    store.put_bytes("a/b/c.txt", b"second, longer")
    assert store.get_bytes("a/b/c.txt") == b"second, longer"


def test_keys_with_query_characters_are_verbatim(store: ObjectStore) -> None:
    store.put_bytes(PG_KEY, b'{"pg": 1}')
    assert store.get_bytes(PG_KEY) == b'{"pg": 1}'
    assert store.exists(PG_KEY)
    for near_miss in (PG_KEY.split("?", maxsplit=1)[0], PG_KEY.replace("10000", "100"), PG_KEY + "&x=1"):
        with pytest.raises(ObjectNotFoundError):
            store.get_bytes(near_miss)
    assert [o.key for o in store.list("c/s/fetched_endpoints/").objects] == [PG_KEY]


def test_unusual_but_valid_characters(store: ObjectStore) -> None:
    key = "logs/job-driver-raysubmit_DxVK3y6pibPJrgLi.log+v=1,x:y@z~%20 ü"
    store.put_bytes(key, b"x")
    assert store.get_bytes(key) == b"x"
    assert [o.key for o in store.list("logs/").objects] == [key]


def test_reads_never_fall_back_to_a_similar_key(store: ObjectStore) -> None:
    store.put_bytes("sess/node/logs/nested/raylet.out", b"nested")
    with pytest.raises(ObjectNotFoundError):
        store.get_bytes("sess/node/logs/raylet.out")
    with pytest.raises(ObjectNotFoundError):
        store.get_bytes("sess/node/logs/raylet.ou")
    with pytest.raises(ObjectNotFoundError):
        store.stat("sess/node/logs/nested")


def test_range_reads(store: ObjectStore) -> None:
    data = bytes(range(256)) * 4
    store.put_bytes("r", data)
    assert store.get_range("r", 10, 20) == data[10:30]
    assert store.get_range("r", 1000) == data[1000:]
    assert store.get_range("r", 1000, 100) == data[1000:]
    assert store.get_range("r", len(data)) == b""
    assert store.get_range("r", len(data) + 50, 10) == b""
    assert store.get_range("r", 5, 0) == b""


def test_tail_reads(store: ObjectStore) -> None:
    data = b"line1\nline2\nline3\n"
    store.put_bytes("t", data)
    assert store.get_tail("t", 6) == b"line3\n"
    assert store.get_tail("t", 10_000) == data
    assert store.get_tail("t", 0) == b""


def test_empty_objects(store: ObjectStore) -> None:
    store.put_bytes("marker", b"")
    assert store.get_bytes("marker") == b""
    assert store.get_range("marker", 0, 10) == b""
    assert store.get_range("marker", 3) == b""
    assert store.get_tail("marker", 5) == b""
    assert store.stat("marker").size == 0
    assert store.exists("marker")


def test_stat_and_versions(store: ObjectStore) -> None:
    store.put_bytes("v", b"one")
    first = store.stat("v")
    assert first.key == "v" and first.size == 3
    assert first.updated is not None and first.updated.tzinfo is not None
    store.put_bytes("v", b"three")
    second = store.stat("v")
    assert second.size == 5
    assert second.version != first.version


def test_missing_keys_are_missing_everywhere(store: ObjectStore, emulator: Emulator, bucket: str) -> None:
    for read in (
        lambda: store.get_bytes("no/such"),
        lambda: store.get_range("no/such", 5, 5),
        lambda: store.get_range("no/such", 0, 0),
        lambda: store.get_tail("no/such", 5),
        lambda: store.stat("no/such"),
        lambda: list(store.iter_chunks("no/such")),
    ):
        with pytest.raises(ObjectNotFoundError) as info:
            read()
        assert "no/such" in str(info.value) and emulator.backend in str(info.value)
        assert bucket in str(info.value)
    assert not store.exists("no/such")


def test_one_level_listing(store: ObjectStore) -> None:
    for key in (
        "h/session_2/n1/logs/a",
        "h/session_1/n1/logs/a",
        "h/session_1/n2/node_events/e",
        "h/marker",
        "h/zeta",
        "h/sessionless",
        "other/x",
    ):
        store.put_bytes(key, b"x")
    top = store.list("h/")
    assert [o.key for o in top.objects] == ["h/marker", "h/sessionless", "h/zeta"]
    assert top.prefixes == ["h/session_1/", "h/session_2/"]
    mid_name = store.list("h/session_")
    assert mid_name.prefixes == ["h/session_1/", "h/session_2/"]
    assert mid_name.objects == []
    assert store.list("h/session_1/").prefixes == ["h/session_1/n1/", "h/session_1/n2/"]
    root = store.list("")
    assert root.prefixes == ["h/", "other/"]
    assert store.list("nothing/here/").objects == []


def test_recursive_walk_is_sorted_and_scoped(store: ObjectStore) -> None:
    keys = ["w/b/2", "w/a/1", "w/a/deep/er/3", "w/c", "wx/outside"]
    for key in keys:
        store.put_bytes(key, key.encode())
    walked = list(store.walk("w/"))
    assert [o.key for o in walked] == sorted(k for k in keys if k.startswith("w/"))
    assert [o.size for o in walked] == [len(o.key) for o in walked]
    assert [o.key for o in store.walk("w/a")] == ["w/a/1", "w/a/deep/er/3"]


def test_listing_pages_past_one_thousand(store: ObjectStore) -> None:
    keys = [f"many/obj-{i:05d}" for i in range(1010)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda k: store.put_bytes(k, b""), keys))
    assert [o.key for o in store.walk("many/")] == keys
    assert len(store.list("many/").objects) == 1010


def test_delete(store: ObjectStore) -> None:
    store.put_bytes("d/x/y", b"1")
    store.put_bytes("d/z", b"2")
    store.delete("d/x/y")
    assert not store.exists("d/x/y")
    store.delete("d/x/y")  # idempotent
    store.delete("never/existed")
    listing = store.list("d/")
    assert [o.key for o in listing.objects] == ["d/z"]
    assert listing.prefixes == []


def test_streams_files_and_chunked_reads(store: ObjectStore, tmp_path: Path) -> None:
    size = 21 * 1024 * 1024 + 123  # crosses every backend's chunk/part boundary
    src = tmp_path / "big.bin"
    block = os.urandom(1024 * 1024)
    with open(src, "wb") as fh:
        for _ in range(21):
            fh.write(block)
        fh.write(os.urandom(123))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()

    store.put_file("big/file.bin", src)
    assert store.stat("big/file.bin").size == size
    hasher = hashlib.sha256()
    for chunk in store.iter_chunks("big/file.bin", chunk_size=5 * 1024 * 1024):
        hasher.update(chunk)
    assert hasher.hexdigest() == digest
    out = tmp_path / "down.bin"
    assert store.download_file("big/file.bin", out) == size
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest
    assert store.get_tail("big/file.bin", 123) == src.read_bytes()[-123:]

    with open(src, "rb") as fh:  # a stream whose size is not given
        store.put_stream("big/stream.bin", fh)
    assert store.stat("big/stream.bin").size == size


def test_put_file_uploads_what_the_file_held_when_it_started(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "growing.log"
    src.write_bytes(b"a" * 1000)
    store.put_file("g.log", src)
    with open(src, "ab") as fh:
        fh.write(b"b" * 10)
    assert store.get_bytes("g.log") == b"a" * 1000


def test_non_seekable_stream(store: ObjectStore) -> None:
    read_fd, write_fd = os.pipe()
    payload = os.urandom(3 * 1024 * 1024)
    with ThreadPoolExecutor(max_workers=1) as pool:

        def feed() -> None:
            with os.fdopen(write_fd, "wb") as w:
                w.write(payload)

        future = pool.submit(feed)
        with os.fdopen(read_fd, "rb") as r:
            store.put_stream("pipe", r)
        future.result()
    assert store.get_bytes("pipe") == payload


def test_invalid_keys_are_rejected_before_io(store: ObjectStore) -> None:
    for key in ("../escape", "/abs", "a//b", "a/./b", "trailing/", ""):
        with pytest.raises(InvalidKeyError):
            store.put_bytes(key, b"x")
        with pytest.raises(InvalidKeyError):
            store.get_bytes(key)
    with pytest.raises(InvalidKeyError):
        store.list("../")


def test_missing_bucket_is_reported_not_created(emulator: Emulator) -> None:
    missing = new_bucket_name()
    with emulator.make_store_unchecked(missing) as store:
        with pytest.raises(PermanentStorageError, match="bucket does not exist") as info:
            store.check()
        assert missing in str(info.value)
        for action in (
            lambda: store.get_bytes("k"),
            lambda: store.stat("k"),
            lambda: store.list("p/"),
            lambda: list(store.walk("p/")),
            lambda: store.put_bytes("k", b"x"),
        ):
            with pytest.raises(PermanentStorageError, match="bucket does not exist"):
                action()
        with pytest.raises(PermanentStorageError):
            store.check()  # still missing: nothing above created it
        store.check(create=True)
        store.put_bytes("k", b"x")
        assert store.get_bytes("k") == b"x"


def test_open_store_fails_fast_on_a_missing_bucket(emulator: Emulator) -> None:
    with pytest.raises(PermanentStorageError, match="does not exist"):
        emulator.make_store(new_bucket_name(), retry=TEST_RETRY)


def test_readers_see_whole_objects_while_a_writer_replaces_them(store: ObjectStore) -> None:
    old, new = b"o" * 300_000, b"n" * 500_000
    store.put_bytes("atomic", old)

    def writer() -> None:
        for _ in range(5):
            store.put_stream("atomic", io.BytesIO(new), size=len(new))
            store.put_stream("atomic", io.BytesIO(old), size=len(old))

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(writer)
        while not future.done():
            assert store.get_bytes("atomic") in (old, new)
        future.result()


@pytest.mark.hostile
def test_put_open_file_sends_the_opened_file_not_what_its_name_points_at_now(
    store: ObjectStore, tmp_path: Path
) -> None:
    """The collector checks the file it opened, then uploads from that descriptor
    (#14 item 1): a link swapped in under the name meanwhile changes nothing. Over
    8 MiB, so S3 takes its multipart path (which reopens the file per part)."""
    content = os.urandom(9 * 1024 * 1024)
    src = tmp_path / "checked.log"
    src.write_bytes(content)
    secret = tmp_path / "secret"
    secret.write_bytes(b"not a log")
    with open(src, "rb") as fh:
        src.unlink()
        src.symlink_to(secret)
        store.put_open_file("opened.log", fh)
    assert hashlib.sha256(store.get_bytes("opened.log")).hexdigest() == hashlib.sha256(content).hexdigest()

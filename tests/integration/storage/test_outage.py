"""A storage endpoint that dies mid-test: the error is clear, and calls recover
when it comes back. Each test gets its own emulator process to kill."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.storage.errors import StorageUnavailableError
from runtime.storage.retry import RetryPolicy
from tests.integration.conftest import new_bucket_name
from tests.integration.emulators.base import Emulator
from tests.integration.emulators.registry import EMULATORS, PROCESS_BACKENDS

pytestmark = pytest.mark.integration

QUICK = RetryPolicy(attempts=2, initial_delay=0.05, max_delay=0.2, deadline=3)
PATIENT = RetryPolicy(attempts=100, initial_delay=0.1, max_delay=0.5, deadline=45)


@pytest.fixture(params=PROCESS_BACKENDS)
def own_emulator(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Emulator]:
    emulator = EMULATORS[str(request.param)](tmp_path / "emu")
    emulator.workdir.mkdir(parents=True)
    emulator.start()
    yield emulator
    emulator.stop()


def test_outage_is_reported_clearly_then_recovers(own_emulator: Emulator) -> None:
    bucket = new_bucket_name()
    own_emulator.create_bucket(bucket)
    store = own_emulator.make_store(bucket, retry=QUICK)
    store.put_bytes("before/outage", b"kept")
    time.sleep(own_emulator.persist_seconds)

    own_emulator.kill()
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as info:
        store.get_bytes("before/outage")
    assert time.monotonic() - started < 30
    message = str(info.value)
    assert own_emulator.backend in message and bucket in message and "before/outage" in message
    assert "after retries" in message
    with pytest.raises(StorageUnavailableError):
        store.put_bytes("during/outage", b"x")
    with pytest.raises(StorageUnavailableError):
        store.list("before/")

    own_emulator.restart()
    store.put_bytes("after/outage", b"back")
    assert store.get_bytes("after/outage") == b"back"
    if own_emulator.keeps_data_across_restart:
        assert store.get_bytes("before/outage") == b"kept"
    store.close()


def test_a_call_made_during_the_outage_succeeds_when_storage_returns(own_emulator: Emulator) -> None:
    bucket = new_bucket_name()
    own_emulator.create_bucket(bucket)
    store = own_emulator.make_store(bucket, retry=PATIENT)
    time.sleep(own_emulator.persist_seconds)  # the new bucket must survive the kill
    own_emulator.kill()

    def come_back() -> None:
        time.sleep(2.0)
        own_emulator.restart()

    thread = threading.Thread(target=come_back)
    thread.start()
    try:
        store.put_bytes("written/while/down", b"eventually")  # retried until it is back
    finally:
        thread.join()
    assert store.get_bytes("written/while/down") == b"eventually"
    store.close()


class _SlowFile(io.RawIOBase):
    """A seekable file whose reads are paced, so an upload is surely in flight
    when the emulator dies."""

    def __init__(self, path: Path, pause: float) -> None:
        super().__init__()
        self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._pause = pause

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        time.sleep(self._pause)
        return self._fh.readinto(memoryview(buffer)[: 1024 * 1024])

    def close(self) -> None:
        self._fh.close()
        super().close()


def test_an_upload_cut_by_a_crash_completes_intact_after_restart(own_emulator: Emulator, tmp_path: Path) -> None:
    bucket = new_bucket_name()
    own_emulator.create_bucket(bucket)
    time.sleep(own_emulator.persist_seconds)  # the new bucket must survive the kill
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(24 * 1024 * 1024 + 5))
    store = own_emulator.make_store(bucket, retry=PATIENT)
    errors: list[BaseException] = []

    def upload() -> None:
        try:
            with io.BufferedReader(_SlowFile(src, pause=0.03), buffer_size=1024 * 1024) as stream:
                store.put_stream("cut/payload.bin", stream, size=src.stat().st_size)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=upload)
    thread.start()
    time.sleep(0.3)
    assert thread.is_alive(), "the upload finished before the crash; slow it down"
    own_emulator.kill()
    time.sleep(1.5)
    own_emulator.restart()
    thread.join(timeout=120)
    assert not thread.is_alive() and not errors, errors
    assert hashlib.sha256(store.get_bytes("cut/payload.bin")).digest() == hashlib.sha256(src.read_bytes()).digest()
    store.close()

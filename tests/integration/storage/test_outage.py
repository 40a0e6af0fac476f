"""A storage endpoint that dies mid-test: the error is clear, and calls recover
when it comes back. Each test gets its own emulator process to kill."""

from __future__ import annotations

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

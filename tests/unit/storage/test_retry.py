"""The retry policy: transient errors retried with backoff, others not, and the
budget turned into one clear StorageUnavailableError."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from runtime.storage.base import ErrorKind
from runtime.storage.errors import PermanentStorageError, StorageUnavailableError
from runtime.storage.local import LocalStore
from runtime.storage.retry import RetryPolicy, TransientError


def test_transient_errors_are_retried_until_success() -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TransientError(ConnectionError("boom"))
        return "ok"

    assert RetryPolicy(attempts=5, initial_delay=0.001, max_delay=0.01).call(flaky, describe="t") == "ok"
    assert len(calls) == 3


def test_budget_by_attempts() -> None:
    calls = []

    def down() -> None:
        calls.append(1)
        raise TransientError(ConnectionError("down"))

    with pytest.raises(TransientError):
        RetryPolicy(attempts=4, initial_delay=0.001, max_delay=0.001, deadline=0).call(down, describe="t")
    assert len(calls) == 4


def test_budget_by_deadline() -> None:
    """Retrying stops at the first failure past the deadline, long before the attempts
    run out. Checked on the attempts' own times, not against a wall-clock bound: at most
    one attempt (the last) ends 0.5 s or more after the first, however loaded the machine."""
    calls: list[float] = []

    def down() -> None:
        calls.append(time.monotonic())
        raise TransientError(ConnectionError("x"))

    with pytest.raises(TransientError):
        RetryPolicy(attempts=200, initial_delay=0.01, max_delay=0.05, deadline=0.5).call(down, describe="t")
    assert len(calls) < 200, "the deadline did not stop the retries"
    past_deadline = [t for t in calls if t - calls[0] >= 0.5]
    assert len(past_deadline) <= 1, f"{len(past_deadline)} attempts after the deadline"
    assert calls[-2] - calls[0] < 0.5


def test_non_transient_errors_are_not_retried() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("nope")

    with pytest.raises(ValueError):
        RetryPolicy(attempts=5, initial_delay=0.001).call(broken, describe="t")
    assert len(calls) == 1


def test_invalid_policy() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)


class FlakyLocalStore(LocalStore):
    """A real local store whose first N uploads fail mid-stream."""

    def __init__(self, root: Path, failures: int, retry: RetryPolicy) -> None:
        super().__init__(root, retry)
        self.failures = failures
        self.attempts = 0

    def _put_stream(self, key: str, stream: io.RawIOBase, size: int | None) -> None:  # type: ignore[override]
        self.attempts += 1
        if self.attempts <= self.failures:
            stream.read(5)  # consume part of the stream, then fail
            raise ConnectionResetError("connection reset by peer")
        super()._put_stream(key, stream, size)  # type: ignore[arg-type]

    def _classify(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, ConnectionResetError):
            return ErrorKind.TRANSIENT
        return super()._classify(exc)


def test_streams_are_rewound_between_attempts(tmp_path: Path) -> None:
    store = FlakyLocalStore(tmp_path, failures=2, retry=RetryPolicy(attempts=5, initial_delay=0.001))
    store.put_stream("k", io.BytesIO(b"0123456789"))
    assert store.get_bytes("k") == b"0123456789"
    assert store.attempts == 3


def test_budget_exhaustion_is_one_clear_error(tmp_path: Path) -> None:
    store = FlakyLocalStore(tmp_path, failures=100, retry=RetryPolicy(attempts=3, initial_delay=0.001, deadline=0))
    with pytest.raises(StorageUnavailableError) as info:
        store.put_bytes("a/key", b"x")
    message = str(info.value)
    assert "local directory" in message and "'a/key'" in message and "connection reset" in message
    assert store.attempts == 3


def test_non_seekable_streams_get_one_attempt(tmp_path: Path) -> None:
    class OneWay(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b: bytearray) -> int:  # type: ignore[override]
            return 0

    store = FlakyLocalStore(tmp_path, failures=100, retry=RetryPolicy(attempts=5, initial_delay=0.001))
    with pytest.raises(StorageUnavailableError):
        store.put_stream("k", OneWay())  # type: ignore[arg-type]
    assert store.attempts == 1


def test_permanent_errors_surface_immediately(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "missing", retry=RetryPolicy(attempts=5, initial_delay=0.001))
    with pytest.raises(PermanentStorageError, match="bucket does not exist"):
        store.get_bytes("a")

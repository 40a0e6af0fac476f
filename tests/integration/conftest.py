"""Fixtures for the integration suites: real emulators on loopback ports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.storage.base import ObjectStore
from runtime.storage.retry import RetryPolicy
from tests.integration.emulators.base import Emulator
from tests.integration.emulators.registry import EMULATORS, EmulatorPool

#: Tests fail fast instead of waiting out production-sized retry budgets.
TEST_RETRY = RetryPolicy(attempts=3, initial_delay=0.05, max_delay=0.5, deadline=5)


@pytest.fixture(scope="session")
def emulator_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorPool]:
    pool = EmulatorPool(tmp_path_factory.mktemp("emulators"))
    yield pool
    pool.stop_all()


@pytest.fixture(params=list(EMULATORS))
def emulator(request: pytest.FixtureRequest, emulator_pool: EmulatorPool) -> Emulator:
    """Each storage backend in turn, its emulator already running."""
    return emulator_pool.get(str(request.param))


def new_bucket_name() -> str:
    """Valid on all four backends: lower-case, digits, hyphens, 3-63 chars."""
    return f"t-{uuid.uuid4().hex[:20]}"


@pytest.fixture
def bucket(emulator: Emulator) -> str:
    name = new_bucket_name()
    emulator.create_bucket(name)
    return name


@pytest.fixture
def store(emulator: Emulator, bucket: str) -> Iterator[ObjectStore]:
    """A store on a fresh, empty bucket, built from env as production does."""
    with emulator.make_store(bucket, retry=TEST_RETRY) as built:
        yield built


@pytest.fixture
def own_workdir(tmp_path: Path) -> Path:
    return tmp_path

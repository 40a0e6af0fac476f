"""Shared indexes on the real emulators (fake-gcs-server, moto, Azurite): a second server
with an empty cache downloads the index the first one uploaded instead of building it
and answers the same; ``read`` writes nothing; on Azure the indexes may live in a
container of their own, and an identity that may only read gets its answers although
every upload is refused."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask import Flask

from runtime.server.app import create_app
from runtime.server.config import ServerConfig
from runtime.server.context import app_services
from runtime.server.index.fingerprint import fingerprints
from runtime.server.index.shared import index_version
from runtime.server.metrics import ServerMetrics
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.errors import StorageError
from runtime.storage.layout import KeyLayout
from tests.integration.conftest import TEST_RETRY
from tests.integration.emulators.azurite import ACCOUNT, ACCOUNT_KEY, AzuriteEmulator
from tests.integration.emulators.base import Emulator
from tests.integration.emulators.registry import EmulatorPool
from tests.support.sample_session import RUN_B, StoredSample, write_sample_session

pytestmark = pytest.mark.integration

LAYOUT = KeyLayout("")
ROUTES = ("/api/v0/tasks?limit=1000", "/api/jobs/", "/logical/actors", "/nodes?view=summary", "/events")
DEADLINE = 120.0


@pytest.fixture(params=["gcs", "s3", "azureblob"])
def cloud(request: pytest.FixtureRequest, emulator_pool: EmulatorPool) -> Emulator:
    return emulator_pool.get(str(request.param))


def _bucket(emulator: Emulator) -> str:
    name = f"t-{uuid.uuid4().hex[:20]}"
    emulator.create_bucket(name)
    return name


def _app(emulator: Emulator, bucket: str, cache: Path, mode: str, store: ObjectStore, **extra: object) -> Flask:
    storage = StorageConfig.from_env(emulator.env(bucket))
    config = ServerConfig(
        storage=storage,
        cache_dir=cache,
        freshness_seconds=3600,
        build_wait=DEADLINE,
        kubernetes="off",
        shared_index=mode,
        **extra,  # type: ignore[arg-type]
    )
    return create_app(config, store=store, metrics=ServerMetrics())


def _answers(app: Flask, sample: StoredSample) -> dict[str, bytes]:
    client = app.test_client()
    cookies = {"cluster_name": sample.cluster.name, "cluster_namespace": sample.cluster.namespace}
    cookies |= {"session_name": sample.session, "owner_kind": "", "owner_name": ""}
    for name, value in cookies.items():
        client.set_cookie(name, value)
    answers = {}
    for route in ROUTES:
        response = client.get(route)
        assert response.status_code == 200, (route, response.get_data(as_text=True)[:500])
        answers[route] = response.get_data()
    return answers


def _metric(app: Flask, name: str, **labels: str) -> float:
    return app_services(app).metrics.registry.get_sample_value(name, labels) or 0.0


def _wait_for_uploads(app: Flask) -> None:
    shared = app_services(app).indexes.shared
    assert shared is not None and shared.wait_for_uploads(DEADLINE)


def _index_keys(store: ObjectStore) -> list[str]:
    return sorted(info.key for info in store.walk(LAYOUT.index_root_prefix()))


@pytest.fixture
def sample_store(cloud: Emulator) -> Iterator[tuple[str, ObjectStore, StoredSample]]:
    bucket = _bucket(cloud)
    with cloud.make_store(bucket, retry=TEST_RETRY) as store:
        yield bucket, store, write_sample_session(store, LAYOUT)


def test_a_second_server_downloads_instead_of_building(
    cloud: Emulator, sample_store: tuple[str, ObjectStore, StoredSample], tmp_path: Path
) -> None:
    bucket, store, sample = sample_store
    reader_first = _app(cloud, bucket, tmp_path / "r0", "read", store)
    _answers(reader_first, sample)
    assert _index_keys(store) == [], "read never writes"

    writer = _app(cloud, bucket, tmp_path / "w", "write", store)
    expected = _answers(writer, sample)
    _wait_for_uploads(writer)
    assert _metric(writer, "historyserver_shared_index_uploads_total", result="ok") == 1
    keys = _index_keys(store)
    events_fp, _ = fingerprints(list(store.walk(sample.session_prefix)), sample.session_prefix)
    assert keys == sorted(LAYOUT.index_keys(sample.cluster, sample.session, index_version(), events_fp))

    started = time.perf_counter()
    second = _app(cloud, bucket, tmp_path / "r1", "read", store)
    assert _answers(second, sample) == expected
    assert time.perf_counter() - started < DEADLINE
    assert _metric(second, "historyserver_index_builds_total", outcome="ok") == 0, "no build ran"
    assert _metric(second, "historyserver_shared_index_downloads_total", result="ok") == 1
    assert _index_keys(store) == keys


# ------------------------------------------------------------------ Azure only
@pytest.fixture
def azurite(emulator_pool: EmulatorPool) -> AzuriteEmulator:
    emulator = emulator_pool.get("azureblob")
    assert isinstance(emulator, AzuriteEmulator)
    return emulator


def test_azure_indexes_in_a_container_of_their_own(azurite: AzuriteEmulator, tmp_path: Path) -> None:
    bucket, index_container = _bucket(azurite), _bucket(azurite)
    with (
        azurite.make_store(bucket, retry=TEST_RETRY) as store,
        azurite.make_store(index_container, retry=TEST_RETRY) as indexes,
    ):
        sample = write_sample_session(store, LAYOUT)
        writer = _app(azurite, bucket, tmp_path / "w", "write", store, shared_index_container=index_container)
        expected = _answers(writer, sample)
        _wait_for_uploads(writer)
        assert _index_keys(store) == [], "nothing written to the history container"
        assert len(_index_keys(indexes)) == 2
        reader = _app(azurite, bucket, tmp_path / "r", "read", store, shared_index_container=index_container)
        assert _answers(reader, sample) == expected
        assert _metric(reader, "historyserver_index_builds_total", outcome="ok") == 0


def _read_only_store(azurite: AzuriteEmulator, container: str) -> ObjectStore:
    """The history container through a SAS that may read and list, nothing else."""
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    sas = generate_container_sas(
        ACCOUNT,
        container,
        account_key=ACCOUNT_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    env = azurite.env(container)
    env["AZURE_STORAGE_CONNECTION_STRING"] = (
        f"BlobEndpoint=http://127.0.0.1:{azurite.port}/{ACCOUNT};SharedAccessSignature={sas}"
    )
    return open_store(StorageConfig.from_env(env), retry=TEST_RETRY, check=False)


def test_a_read_only_identity_answers_although_uploads_are_refused(
    azurite: AzuriteEmulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = _bucket(azurite)
    with azurite.make_store(bucket, retry=TEST_RETRY) as store:
        sample = write_sample_session(store, LAYOUT)
        expected = _answers(_app(azurite, bucket, tmp_path / "ref", "off", store), sample)
        with _read_only_store(azurite, bucket) as read_only:
            with pytest.raises(StorageError, match=r"(?i)authoriz|permission|403"):
                read_only.put_bytes("probe", b"x")  # the SAS really refuses writes
            writer = _app(azurite, bucket, tmp_path / "w", "write", read_only)
            assert _answers(writer, sample) == expected
            _wait_for_uploads(writer)
        assert _metric(writer, "historyserver_shared_index_uploads_total", result="failed") == 1
        assert _index_keys(store) == []
        assert len([r for r in caplog.records if "cannot publish the shared index" in r.getMessage()]) == 1


def test_gc_deletes_an_ended_sessions_indexes_from_azures_index_container(
    azurite: AzuriteEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.cli import main as cli_main

    bucket, index_container = _bucket(azurite), _bucket(azurite)
    with (
        azurite.make_store(bucket, retry=TEST_RETRY) as store,
        azurite.make_store(index_container, retry=TEST_RETRY) as indexes,
    ):
        ended = write_sample_session(store, LAYOUT)
        # Azurite keeps write times to the second, and a session named less than a day
        # later ends another only if it was also written later (retention.py): a tie
        # keeps both, in case a clock change reordered the names.
        time.sleep(1.1)
        running = write_sample_session(store, LAYOUT, run=RUN_B)  # newer: ends the first
        assert running.session > ended.session
        writer = _app(azurite, bucket, tmp_path / "w", "write", store, shared_index_container=index_container)
        for sample in (ended, running):
            _answers(writer, sample)
        _wait_for_uploads(writer)
        before = _index_keys(indexes)
        assert len(before) == 4
        time.sleep(1.5)  # Azurite keeps the real write times: the sessions must age past --older-than
        for name, value in azurite.env(bucket).items():
            monkeypatch.setenv(name, value)
        argv = ["gc", "--older-than=1s", "--json", f"--shared-index-container={index_container}"]
        assert cli_main.main([*argv, "--dry-run"]) == 0
        rows = {row["session"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
        assert rows[ended.session]["action"] == "would delete"
        assert len(rows[ended.session]["index_objects"]) == 2 and _index_keys(indexes) == before
        assert cli_main.main(argv) == 0
        capsys.readouterr()
        left = _index_keys(indexes)
        assert left == [k for k in before if f"/{running.session}/" in k] and len(left) == 2

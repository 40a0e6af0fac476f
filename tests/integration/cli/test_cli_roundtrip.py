"""export -> import across backends on real emulators, and two history servers (one
on the original, one on the imported copy) giving identical API answers."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import requests

from runtime.storage.layout import KeyLayout
from tests.integration.cli.cli_runner import run_cli
from tests.integration.conftest import TEST_RETRY, new_bucket_name
from tests.integration.emulators.base import Emulator
from tests.integration.emulators.registry import EmulatorPool
from tests.integration.server.harness import HistoryServerProcess
from tests.support.cluster_entries import without_index_state
from tests.support.sample_session import write_sample_session

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Each backend exports into a different one, so every backend is read and written once.
IMPORT_INTO = {"local": "s3", "gcs": "azureblob", "s3": "gcs", "azureblob": "local"}
COMPARED = ("/api/jobs/", "/api/v0/tasks?limit=10000&detail=1", "/logical/actors", "/nodes?view=summary")


class EnvConfiguredServer(HistoryServerProcess):
    """``historyserver`` configured by the environment alone (any backend)."""

    def __init__(self, storage_env: dict[str, str], cache_dir: Path) -> None:
        super().__init__(cache_dir, cache_dir, env=storage_env)
        self.args = [a for a in self.args if not a.startswith(("--storage-backend=", "--local-storage-dir="))]


def _answers(server: HistoryServerProcess, session: str) -> dict[str, object]:
    client = server.session("default", "raycluster-demo", session)
    found: dict[str, object] = {}
    for route in COMPARED:
        response = client.get(f"{server.url}{route}", timeout=60)
        assert response.status_code == 200, (route, response.text[:300])
        body = response.json()
        if route.startswith("/nodes"):
            for node in body["data"]["summary"]:  # "now" is the time of the request
                node.pop("now", None)
        found[route] = body
    return found


@pytest.mark.parametrize("source_backend", list(IMPORT_INTO))
def test_export_import_round_trip(source_backend: str, emulator_pool: EmulatorPool, tmp_path: Path) -> None:
    source, target = emulator_pool.get(source_backend), emulator_pool.get(IMPORT_INTO[source_backend])
    source_bucket, source_env = _bucket(source)
    _target_bucket, target_env = _bucket(target)
    with source.make_store(source_bucket, retry=TEST_RETRY) as store:
        sample = write_sample_session(store, KeyLayout(""))
        stored = sum(1 for _ in store.walk(sample.session_prefix)) + 1

    archive = tmp_path / "session.tar.gz"
    exported = run_cli("export", "raycluster-demo", sample.session, "-o", str(archive), "--json", env=source_env)
    assert exported.returncode == 0, exported.stderr
    assert orjson.loads(exported.stdout)["objects"] == stored

    imported = run_cli("import", str(archive), "--json", env=target_env)
    assert imported.returncode == 0, imported.stderr
    assert orjson.loads(imported.stdout)["written"] == stored
    again = run_cli("import", str(archive), "--json", env=target_env)
    assert again.returncode == 0 and orjson.loads(again.stdout)["unchanged"] == stored

    with (
        EnvConfiguredServer(source_env, tmp_path / "cache-src") as original,
        EnvConfiguredServer(target_env, tmp_path / "cache-dst") as copy,
    ):
        # The same sessions; whether each server has indexed them yet is its own.
        assert without_index_state(requests.get(f"{copy.url}/clusters", timeout=30).json()) == without_index_state(
            requests.get(f"{original.url}/clusters", timeout=30).json()
        )
        before, after = _answers(original, sample.session), _answers(copy, sample.session)
    for route in COMPARED:
        assert after[route] == before[route], route
    tasks = before["/api/v0/tasks?limit=10000&detail=1"]
    assert isinstance(tasks, dict) and tasks["data"]["result"]["total"] == 41


def _bucket(emulator: Emulator) -> tuple[str, dict[str, str]]:
    """A fresh bucket on ``emulator`` and the environment that selects it."""
    name = new_bucket_name()
    emulator.create_bucket(name)
    return name, dict(emulator.env(name))

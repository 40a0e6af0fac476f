"""``ray-history`` against a real history server (gunicorn) over the captured Ray 2.60 session."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import requests

from runtime.storage.config import StorageConfig, open_store
from tests.integration.cli.cli_runner import run_cli
from tests.integration.server.harness import HistoryServerProcess
from tests.support.cluster_entries import without_index_state
from tests.support.sample_session import SAMPLES, StoredSample, write_sample_session

pytestmark = pytest.mark.integration

PARENT_TASK = "0021899358e75e3cffffffffffffffffffffffff02000000"  # has task_log_info
BOOM_TASK = "32b0eec39cfa87acffffffffffffffffffffffff02000000"  # died before reporting its log


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HistoryServerProcess, StoredSample, Path]]:
    bucket = tmp_path_factory.mktemp("bucket")
    storage = StorageConfig(backend="local", local_dir=str(bucket), create_bucket=True)
    with open_store(storage) as store:
        sample = write_sample_session(store, storage.layout)
    with HistoryServerProcess(bucket, tmp_path_factory.mktemp("cache")) as server:
        yield server, sample, bucket


def _json(*args: str) -> object:
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


def test_clusters_table_and_json(served: tuple[HistoryServerProcess, StoredSample, Path]) -> None:
    server, sample, _ = served
    table = run_cli("clusters", "--server", server.url)
    assert table.returncode == 0, table.stderr
    assert "raycluster-demo" in table.stdout and sample.session in table.stdout and "NAMESPACE" in table.stdout
    entries = _json("clusters", "--server", server.url, "--json")
    assert entries == requests.get(f"{server.url}/clusters", timeout=30).json()


def test_jobs(served: tuple[HistoryServerProcess, StoredSample, Path]) -> None:
    server, sample, _ = served
    jobs = _json("jobs", "raycluster-demo", "--server", server.url, "--json")
    assert isinstance(jobs, list)
    statuses = {job["submission_id"] or job["job_id"]: job["status"] for job in jobs}
    assert statuses == {
        "raysubmit_DxVK3y6pibPJrgLi": "FAILED",
        "raysubmit_zXeGXHwfPUEBW8Ci": "SUCCEEDED",
        "wl-job2-fails": "FAILED",
        "04000000": "SUCCEEDED",
    }
    table = run_cli("jobs", "raycluster-demo", sample.session, "--server", server.url)
    assert table.returncode == 0 and "wl-job2-fails" in table.stdout and "FAILED" in table.stdout


def test_tasks_with_filters(served: tuple[HistoryServerProcess, StoredSample, Path]) -> None:
    server, _, _ = served
    base = ("tasks", "raycluster-demo", "--server", server.url, "--json")
    failed = _json(*base, "--filter", "state=FAILED")
    assert isinstance(failed, dict) and failed["num_filtered"] == 7
    assert {t["state"] for t in failed["result"]} == {"FAILED"}
    not_actor = _json(*base, "--filter", "state=FAILED", "--filter", "type!=ACTOR_TASK")
    assert isinstance(not_actor, dict)
    assert {t["name"] for t in not_actor["result"]} == {"crashy-task", "boom-task", "flaky-task", "BadInit.__init__"}
    limited = _json(*base, "--limit", "3", "--detail")
    assert isinstance(limited, dict) and len(limited["result"]) == 3 and "events" in limited["result"][0]
    drivers = _json(*base, "--filter", "type=DRIVER_TASK", "--no-exclude-driver")
    assert isinstance(drivers, dict) and drivers["num_filtered"] > 0
    bad = run_cli(*base, "--filter", "colour=red")
    assert bad.returncode == 2 and "unsupported filter key 'colour'" in bad.stderr


def test_logs_by_file_and_task(served: tuple[HistoryServerProcess, StoredSample, Path]) -> None:
    server, sample, _ = served
    with tarfile.open(SAMPLES / "session-logs-sample.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/logs/raylet.out"))
        raylet = tar.extractfile(member).read()  # type: ignore[union-attr]
    by_file = run_cli(
        "logs",
        "raycluster-demo",
        "--server",
        server.url,
        "--node",
        sample.node_id,
        "--file",
        "raylet.out",
        "--lines",
        "5",
    )
    assert by_file.returncode == 0, by_file.stderr
    assert by_file.stdout.encode() == b"".join(io.BytesIO(raylet).readlines()[-5:])

    by_task = run_cli("logs", "raycluster-demo", "--server", server.url, "--task-id", PARENT_TASK)
    assert by_task.returncode == 0, by_task.stderr
    client = server.session("default", "raycluster-demo", sample.session)
    direct = client.get(f"{server.url}/api/v0/logs/file", params={"task_id": PARENT_TASK}, timeout=30)
    assert direct.status_code == 200 and direct.text.strip()
    assert by_task.stdout == direct.text

    followed = run_cli("logs", "raycluster-demo", "--server", server.url, "--task-id", PARENT_TASK, "-f")
    assert followed.returncode == 0 and followed.stdout == direct.text  # a stored session's stream ends

    listing = _json("logs", "raycluster-demo", "--server", server.url, "--node", sample.node_id, "--json")
    assert isinstance(listing, dict) and "raylet.out" in listing["raylet"]


def test_not_found_names_what_is_missing(served: tuple[HistoryServerProcess, StoredSample, Path]) -> None:
    server, sample, _ = served
    missing = run_cli("jobs", "no-such-cluster", "--server", server.url)
    assert missing.returncode == 1 and "no-such-cluster" in missing.stderr and "Traceback" not in missing.stderr
    old = run_cli("jobs", "raycluster-demo", "session_2020-01-01_00-00-00_000000_1", "--server", server.url)
    assert old.returncode == 1 and "session_2020-01-01_00-00-00_000000_1" in old.stderr
    no_file = run_cli("logs", "raycluster-demo", "--server", server.url, "--node", sample.node_id, "--file", "nope.log")
    assert no_file.returncode == 1 and "nope.log" in no_file.stderr
    no_log = run_cli("logs", "raycluster-demo", "--server", server.url, "--task-id", BOOM_TASK, "--err")
    assert no_log.returncode == 1 and BOOM_TASK in no_log.stderr


def test_storage_mode_answers_like_the_server(
    served: tuple[HistoryServerProcess, StoredSample, Path], tmp_path: Path
) -> None:
    server, _, bucket = served
    storage = ("--storage-backend=local", f"--local-storage-dir={bucket}", f"--cache-dir={tmp_path}")
    for command in (("clusters",), ("jobs", "raycluster-demo"), ("tasks", "raycluster-demo", "--limit", "50")):
        local, remote = _json(*command, "--json", *storage), _json(*command, "--json", "--server", server.url)
        if command == ("clusters",):  # whether each process has indexed the session yet is its own
            local, remote = without_index_state(local), without_index_state(remote)
        assert local == remote

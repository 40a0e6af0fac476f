"""Log routes for a stored session, compared with the live dashboard's answers."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.storage.base import ObjectStore
from runtime.storage.layout import KeyLayout
from runtime.storage.local import LocalStore
from tests.support.app_world import FakeLive, enter, server_config, stored_session_a
from tests.support.sample_session import API, SAMPLES, StoredSample

ACTOR = "e00291346a6a9396f1fb35ee02000000"  # my-counter (Counter)
ACTOR_WORKER_FILE = "worker-d0a8f005c56f97e8340b4984aeb8c85c79dac291b10857ec09616a86-02000000-10449"
TASK_WITH_LOG = "e082c90ab8422b00ffffffffffffffffffffffff02000000"  # square: stdout [37, 77)
TASK_FILE = "worker-9072bffb047803924596bf8c6710e1f48c25899f83e6a4781d136078-02000000-10258.out"
NOISY_TASK = "f81ec6ff838b16dbffffffffffffffffffffffff02000000"  # its worker died: no task_log_info
ACTOR_TASK = "4e42fef2e4fc2164e00291346a6a9396f1fb35ee02000000"  # Counter.incr


class CountingStore(LocalStore):
    """A local store recording the bytes each ranged read returned."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[tuple[str, int, int | None]] = []

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        data = super()._get_range(key, start, length)
        self.reads.append((key, start, len(data)))
        return data


def tarball_logs() -> dict[str, bytes]:
    """Session A's ``logs/`` tree as stored: relative path -> bytes."""
    found: dict[str, bytes] = {}
    with tarfile.open(SAMPLES / "session-logs-sample.tar.gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if member.isfile() and len(parts) >= 3 and parts[1] == "logs":
                fh = tar.extractfile(member)
                assert fh is not None
                found["/".join(parts[2:])] = fh.read()
    return found


LOGS = tarball_logs()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, CountingStore, StoredSample]]:
    root = tmp_path_factory.mktemp("logs-views")
    config = server_config(root)
    store = CountingStore(root / "store")
    _, sample = stored_session_a(config)
    layout = KeyLayout("")
    # Extra objects: a line far over 64 KiB, and a big file for the ranged-tail check.
    long_line = b"L" * (200 * 1024)
    store.put_bytes(
        layout.log_key(sample.cluster, sample.session, sample.node_id, "long.log"),
        b"head\n" + long_line + b"\n" + long_line + b"END\n",
    )
    big = b"".join(b"%08d \x1b[32mINFO\x1b[0m some log text\n" % i for i in range(200_000))
    store.put_bytes(layout.log_key(sample.cluster, sample.session, sample.node_id, "big.log"), big)
    yield create_app(config, store=store, live=FakeLive()), store, sample


@pytest.fixture
def client(world: tuple[Flask, ObjectStore, StoredSample]) -> FlaskClient:
    client = world[0].test_client()
    enter(client, world[2])
    return client


@pytest.fixture
def node(world: tuple[Flask, ObjectStore, StoredSample]) -> str:
    return world[2].node_id


def _live(name: str) -> dict[str, list[str]]:
    result: dict[str, list[str]] = orjson.loads((API / name).read_bytes())["data"]["result"]
    return result


def _assert_like_live(ours: dict[str, list[str]], live: dict[str, list[str]]) -> None:
    """Same category for every name both know; ours lacks only what was never stored
    (empty directories, files created after the tarball was taken)."""
    ours_by_name = {n: c for c, names in ours.items() for n in names}
    stored_dirs = {p.split("/")[0] + "/" for p in LOGS if "/" in p}
    for category, names in live.items():
        for name in names:
            if name.endswith("/") and name not in stored_dirs:
                assert name not in ours_by_name  # empty directory: nothing stored
            elif name.endswith("/") or name in LOGS:
                assert ours_by_name.get(name) == category, name


# ---------------------------------------------------------------- listing
def test_listing_matches_the_live_dashboard(client: FlaskClient, node: str) -> None:
    answer = client.get(f"/api/v0/logs?node_id={node}")
    assert answer.status_code == 200
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    body = answer.get_json()
    assert (body["result"], body["msg"]) == (True, "")
    ours = body["data"]["result"]
    _assert_like_live(ours, _live("api_v0_logs_node_id.json"))
    top_level = {p.split("/")[0] + ("/" if "/" in p else "") for p in LOGS} | {"long.log", "big.log"}
    assert {n for names in ours.values() for n in names} == top_level


def test_glob_matches_the_live_dashboard(client: FlaskClient, node: str) -> None:
    ours = client.get(f"/api/v0/logs?node_id={node}&glob=*worker*").get_json()["data"]["result"]
    _assert_like_live(ours, _live("api_v0_logs_node_id_glob_worker.json"))
    assert set(ours) == {"worker_out", "worker_err", "core_worker"}


def test_glob_keeps_its_base_directory_so_names_open(client: FlaskClient, node: str) -> None:
    ours = client.get(f"/api/v0/logs?node_id={node}&glob=events/event_*.log").get_json()["data"]["result"]
    names = [n for names in ours.values() for n in names]
    assert "events/event_GCS.log" in names and all(n.startswith("events/") for n in names)
    opened = client.get(f"/api/v0/logs/file?node_id={node}&filename=events/event_GCS.log&lines=-1")
    assert opened.status_code == 200
    assert opened.data == LOGS["events/event_GCS.log"]
    deep = client.get(f"/api/v0/logs?node_id={node}&glob=**/supervisor-*.log").get_json()["data"]["result"]
    assert sorted(n for names in deep.values() for n in names) == sorted(p for p in LOGS if "supervisor-" in p)


def test_listing_without_node_uses_the_only_node_and_node_ip_works(client: FlaskClient, node: str) -> None:
    by_id = client.get(f"/api/v0/logs?node_id={node}").get_json()
    assert client.get("/api/v0/logs").get_json() == by_id
    assert client.get("/api/v0/logs?node_ip=192.0.2.2").get_json() == by_id
    assert client.get("/api/v0/logs?node_ip=192.0.2.99").status_code == 404
    assert client.get(f"/api/v0/logs?node_id={'ab' * 28}").get_json()["data"]["result"] == {}


@pytest.mark.parametrize(
    "query", ["node_id=../evil", "node_id=a/b", "glob=../*", "glob=/etc/*", "glob=a//b", "glob=..", "glob=a\\b"]
)
def test_listing_rejects_traversal(client: FlaskClient, query: str) -> None:
    answer = client.get(f"/api/v0/logs?{query}")
    assert answer.status_code == 400
    assert answer.get_json()["result"] is False


# ------------------------------------------------------------------- file
def test_last_lines_like_the_live_dashboard(client: FlaskClient, node: str) -> None:
    answer = client.get(f"/api/v0/logs/file?node_id={node}&filename=raylet.out&lines=50")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Content-Disposition"] == 'inline; filename="raylet.out"'
    live = (API / "api_v0_logs_file_raylet_out_50.txt").read_bytes()
    # The live answer was taken earlier than the tarball: compare the shape, and the bytes with the file.
    assert answer.data.count(b"\n") == live.count(b"\n") == 50 and answer.data.endswith(b"\n")
    assert answer.data == b"".join(LOGS["raylet.out"].splitlines(keepends=True)[-50:])


def test_ansi_filter(client: FlaskClient, node: str) -> None:
    raw = client.get(f"/api/v0/logs/file?node_id={node}&filename=big.log&lines=3").data
    assert b"\x1b[" in raw
    clean = client.get(f"/api/v0/logs/file?node_id={node}&filename=big.log&lines=3&filter_ansi_code=True").data
    assert clean == b"00199997 INFO some log text\n00199998 INFO some log text\n00199999 INFO some log text\n"
    live = (API / "api_v0_logs_file_gcs_server_out_20.txt").read_bytes()
    assert b"\x1b" not in live  # the live answer was filtered the same way


def test_tail_of_a_big_file_reads_only_its_end(
    world: tuple[Flask, CountingStore, StoredSample], client: FlaskClient, node: str
) -> None:
    store = world[1]
    store.reads.clear()
    answer = client.get(f"/api/v0/logs/file?node_id={node}&filename=big.log&lines=100")
    assert answer.status_code == 200 and answer.data.count(b"\n") == 100
    big_reads = [r for r in store.reads if r[0].endswith("/big.log")]
    assert sum(length for _, _, length in big_reads) <= 64 * 1024  # the object is 8.8 MB


def test_whole_file_is_streamed(
    world: tuple[Flask, CountingStore, StoredSample], client: FlaskClient, node: str
) -> None:
    answer = client.get(f"/api/v0/logs/file?node_id={node}&filename=big.log&lines=-1")
    assert answer.is_streamed
    data = answer.get_data()
    assert len(data) == 200_000 * len(b"00000000 \x1b[32mINFO\x1b[0m some log text\n")
    clean = client.get(f"/api/v0/logs/file?node_id={node}&filename=big.log&lines=-1&filter_ansi_code=true").data
    assert b"\x1b" not in clean and clean.count(b"\n") == 200_000


def test_lines_longer_than_64_kib(client: FlaskClient, node: str) -> None:
    answer = client.get(f"/api/v0/logs/file?node_id={node}&filename=long.log&lines=2")
    assert answer.status_code == 200
    assert answer.data == b"L" * (200 * 1024) + b"\n" + b"L" * (200 * 1024) + b"END\n"


def test_lines_defaults_and_cap(client: FlaskClient, node: str) -> None:
    assert client.get(f"/api/v0/logs/file?node_id={node}&filename=big.log").data.count(b"\n") == 1000
    assert client.get(f"/api/v0/logs/file?node_id={node}&filename=big.log&lines=0").data.count(b"\n") == 1000
    assert client.get(f"/api/v0/logs/file?node_id={node}&filename=big.log&lines=50000").data.count(b"\n") == 10000


def test_download_filename_makes_an_attachment(client: FlaskClient, node: str) -> None:
    answer = client.get(f"/api/v0/logs/file?node_id={node}&filename=raylet.out&download_filename=../raylet%22.txt")
    assert answer.headers["Content-Disposition"] == 'attachment; filename="raylet_.txt"'


def test_missing_file_is_404_naming_it(client: FlaskClient, node: str) -> None:
    answer = client.get(f"/api/v0/logs/file?node_id={node}&filename=does-not-exist.log&lines=10")
    assert answer.status_code == 404
    assert answer.get_json() == {"result": False, "msg": f"log file not found: {node}/logs/does-not-exist.log"}


def test_actor_logs_equal_the_live_answers(client: FlaskClient) -> None:
    for suffix in ("out", "err"):
        answer = client.get(f"/api/v0/logs/file?actor_id={ACTOR}&suffix={suffix}&lines=1000&filter_ansi_code=true")
        assert answer.status_code == 200, answer.data
        assert answer.data == (API / f"api_v0_logs_file_actor_counter_{suffix}.txt").read_bytes()
        assert answer.headers["Content-Disposition"] == f'inline; filename="{ACTOR_WORKER_FILE}.{suffix}"'


def test_task_log_is_its_byte_range(client: FlaskClient) -> None:
    answer = client.get(f"/api/v0/logs/file?task_id={TASK_WITH_LOG}&suffix=out&lines=1000")
    assert answer.status_code == 200
    assert answer.data == LOGS[TASK_FILE][37:77] == b"[stdout] square(1) running in pid 10258\n"


def test_task_without_log_info_is_404_not_a_guess(client: FlaskClient) -> None:
    answer = client.get(f"/api/v0/logs/file?task_id={NOISY_TASK}&attempt_number=0&suffix=out&lines=1000")
    assert answer.status_code == 404
    live = (API / "api_v0_logs_file_task_noisy_out.txt").read_text()
    assert live.startswith("Could not find log file for task attempt")
    assert answer.get_json()["msg"].startswith(f"Could not find log file for task attempt {NOISY_TASK}(0)")


def test_actor_task_asks_for_the_actor_id(client: FlaskClient) -> None:
    answer = client.get(f"/api/v0/logs/file?task_id={ACTOR_TASK}")
    assert answer.status_code == 400
    assert f"actor({ACTOR})" in answer.get_json()["msg"]


def test_pid_node_ip_and_submission(client: FlaskClient) -> None:
    answer = client.get("/api/v0/logs/file?node_ip=192.0.2.2&pid=10449&lines=-1")
    assert answer.status_code == 200 and answer.data == LOGS[f"{ACTOR_WORKER_FILE}.out"]
    answer = client.get("/api/v0/logs/file?submission_id=raysubmit_zXeGXHwfPUEBW8Ci&lines=-1")
    assert answer.data == LOGS["job-driver-raysubmit_zXeGXHwfPUEBW8Ci.log"]
    assert client.get("/api/v0/logs/file?node_ip=192.0.2.2&pid=1&lines=-1").status_code == 404
    assert client.get("/api/v0/logs/file?node_ip=192.0.2.77&filename=raylet.out").status_code == 404
    assert client.get(f"/api/v0/logs/file?task_id={'0' * 48}").status_code == 400


def test_stream_is_finite_for_a_stored_session(client: FlaskClient, node: str) -> None:
    query = f"node_id={node}&filename=raylet.out&lines=20"
    streamed = client.get(f"/api/v0/logs/stream?{query}")
    assert streamed.status_code == 200
    assert streamed.headers["X-Log-Stream"] == "finite"
    assert streamed.data == client.get(f"/api/v0/logs/file?{query}").data


def test_other_media_type_is_400(client: FlaskClient, node: str) -> None:
    answer = client.get(f"/api/v0/logs/tail?node_id={node}&filename=raylet.out")
    assert answer.status_code == 400
    assert "unsupported media_type: tail" in answer.get_json()["msg"]


def test_no_cookies_is_400(world: tuple[Flask, ObjectStore, StoredSample], node: str) -> None:
    answer = world[0].test_client().get(f"/api/v0/logs?node_id={node}")
    assert answer.status_code == 400
    assert "Cookie not found" in answer.get_json()["msg"]

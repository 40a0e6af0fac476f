"""Session markers and dashboard snapshots (cases from KubeRay's Go collector, ``poll_test.go``).

Real local storage, a real Ray-shaped temp root, and a real loopback HTTP server
scripted per URI. Most tests drive ``SnapshotRecorder.tick`` with a fake clock so
every poll cycle is explicit; two tests run the real background thread.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.collector.dashboard import DashboardClient
from runtime.collector.discovery import NodeIdentity
from runtime.collector.metrics import CollectorMetrics
from runtime.collector.snapshot_endpoints import (
    BUILTIN_POLLED,
    CLUSTER_METADATA_URI,
    JOBS_URI,
    PLACEMENT_GROUPS_URI,
    SERVE_URI,
    TIMEZONE_URI,
    VERSION_URI,
)
from runtime.collector.snapshots import SnapshotRecorder
from runtime.storage.errors import ObjectNotFoundError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore
from runtime.storage.retry import RetryPolicy
from tests.support.fake_dashboard import SAMPLES, FakeDashboard, Reply
from tests.unit.collector.test_discovery import (
    DIR_NODE,
    OTHER_NODE,
    SESSION_A,
    SESSION_B,
    FakeClock,
    make_config,
    make_session,
    point_latest,
)

SERVE_APPS = {"applications": {"app1": {"name": "app1", "status": "RUNNING"}}}
SERVE_EMPTY: dict[str, object] = {"applications": {}}
DATASETS = {"datasets": [{"dataset": "ds_1", "state": "FINISHED", "progress": 10}]}
DATASETS_EMPTY: dict[str, object] = {"datasets": []}
FAST_RETRY = RetryPolicy(attempts=1, deadline=0)


def version(session: str) -> dict[str, str]:
    """Ray 2.60's ``/api/version`` answer for ``session``."""
    return {"version": "4", "ray_version": "2.60.0", "session_name": session}


def ds_uri(job: str) -> str:
    return f"/api/data/datasets/{job}"


def jobs(*entries: tuple[str | None, str]) -> list[dict[str, object]]:
    return [
        {"type": "SUBMISSION", "job_id": job, "submission_id": f"sub-{i}", "status": status}
        for i, (job, status) in enumerate(entries)
    ]


@dataclass
class Rig:
    recorder: SnapshotRecorder
    store: LocalStore
    layout: KeyLayout
    fake: FakeDashboard
    identity: NodeIdentity
    metrics: CollectorMetrics
    clock: FakeClock
    root: Path

    def key(self, uri: str, session: str = SESSION_A) -> str:
        return self.layout.endpoint_key(make_cluster(), session, uri)

    def stored(self, uri: str, session: str = SESSION_A) -> bytes | None:
        try:
            return self.store.get_bytes(self.key(uri, session))
        except ObjectNotFoundError:
            return None

    def cycle(self) -> None:
        """One periodic poll: advance past the poll interval and tick."""
        self.clock.now += 30.0
        self.recorder.tick()

    def outcome(self, endpoint: str, outcome: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "ray_history_collector_snapshots_total", {"endpoint": endpoint, "outcome": outcome}
        )
        return value or 0.0

    def markers(self) -> float:
        return self.metrics.registry.get_sample_value("ray_history_collector_markers_written_total") or 0.0

    def switch_session(self, name: str = SESSION_B, node: str = OTHER_NODE) -> None:
        """Ray restarted: a new session directory, and the dashboard answers for it."""
        self.fake.reply(VERSION_URI, version(name))
        make_session(self.root, name, node)
        point_latest(self.root, name)
        self.identity.refresh()


def make_cluster() -> ClusterRef:
    return ClusterRef(namespace="ns", name="cluster")


@pytest.fixture
def fake() -> Iterator[FakeDashboard]:
    with FakeDashboard.running() as server:
        yield server


def build(tmp_path: Path, fake: FakeDashboard, *, real_clock: bool = False, **overrides: object) -> Rig:
    root = tmp_path / "ray"
    root.mkdir(exist_ok=True)
    make_session(root, SESSION_A, DIR_NODE)
    point_latest(root, SESSION_A)
    (tmp_path / "bucket").mkdir(exist_ok=True)
    overrides.setdefault("fq_ray_ip", None)
    config = make_config(tmp_path, root, **overrides)
    store = LocalStore(tmp_path / "bucket", retry=FAST_RETRY)
    layout = KeyLayout("")
    identity = NodeIdentity(config, None)
    identity.refresh()
    metrics = CollectorMetrics()
    clock = FakeClock()
    recorder = SnapshotRecorder(
        config=config,
        store=store,
        layout=layout,
        identity=identity,
        dashboard=DashboardClient(fake.url),
        metrics=metrics,
        **({} if real_clock else {"clock": clock}),
    )
    return Rig(recorder, store, layout, fake, identity, metrics, clock, root)


def serve_defaults(fake: FakeDashboard, job_list: list[dict[str, object]] | None = None) -> None:
    fake.sample(CLUSTER_METADATA_URI, "api_v0_cluster_metadata.json")
    fake.sample(TIMEZONE_URI, "timezone.json")
    fake.reply(SERVE_URI, SERVE_APPS)
    fake.sample(PLACEMENT_GROUPS_URI, "api_v0_placement_groups_detail_limit10000.json")
    fake.reply(JOBS_URI, job_list if job_list is not None else [])
    fake.reply(VERSION_URI, version(SESSION_A))


# ------------------------------------------------------------------ markers
def test_marker_written_at_startup_with_exact_key_and_again_at_stop(tmp_path: Path, fake: FakeDashboard) -> None:
    rig = build(tmp_path, fake)  # the dashboard answers nothing useful: markers do not depend on it
    rig.recorder.tick()
    key = f"cluster-metadata/raycluster/ns_cluster/{SESSION_A}"
    assert rig.layout.marker_key(make_cluster(), SESSION_A) == key
    assert rig.store.get_bytes(key) == b""
    rig.cycle()
    rig.cycle()
    assert rig.markers() == 1  # idempotent within the process
    rig.store.delete(key)
    rig.recorder.stop(rig.clock() + 10)
    assert rig.store.get_bytes(key) == b""  # written again at shutdown
    assert rig.markers() == 2


def test_marker_failure_returns_false_and_is_retried(tmp_path: Path, fake: FakeDashboard) -> None:
    rig = build(tmp_path, fake)
    (tmp_path / "bucket").rmdir()
    assert rig.recorder.write_marker(SESSION_A) is False
    failures = rig.metrics.registry.get_sample_value(
        "ray_history_collector_upload_failures_total", {"what": "marker", "kind": "PermanentStorageError"}
    )
    assert failures == 1
    assert rig.recorder.tick() <= 5.0  # comes back soon to retry the marker
    (tmp_path / "bucket").mkdir()
    rig.clock.now += 5
    rig.recorder.tick()
    assert rig.store.get_bytes(f"cluster-metadata/raycluster/ns_cluster/{SESSION_A}") == b""


def test_owner_marker_key(tmp_path: Path, fake: FakeDashboard) -> None:
    owned = ClusterRef(namespace="default", name="rj-x7k2p", owner_kind="RayJob", owner_name="rj")
    rig = build(tmp_path, fake, cluster=owned)
    assert rig.recorder.write_marker(SESSION_A)
    assert rig.store.get_bytes(f"cluster-metadata/rayjob/default_rj_rj-x7k2p/{SESSION_A}") == b""


# ---------------------------------------------------------- URIs and keys
def test_exact_uris_keys_and_verbatim_bodies(tmp_path: Path, fake: FakeDashboard) -> None:
    jobs_body = (SAMPLES / "api_jobs.json").read_bytes()  # includes a submission with job_id null
    serve_defaults(fake)
    fake.reply(JOBS_URI, jobs_body)
    for job in ("03000000", "02000000", "04000000"):
        fake.reply(ds_uri(job), DATASETS)
    rig = build(tmp_path, fake)
    rig.recorder.tick()

    uris = [path for path, _ in fake.requests]
    assert uris == [
        CLUSTER_METADATA_URI,
        TIMEZONE_URI,
        SERVE_URI,
        PLACEMENT_GROUPS_URI,
        JOBS_URI,
        VERSION_URI,  # the answers are stored only if the dashboard still serves this session
        ds_uri("03000000"),
        ds_uri("02000000"),
        ds_uri("04000000"),
    ]
    prefix = f"cluster-history/raycluster/ns/cluster/{SESSION_A}/fetched_endpoints/"
    assert rig.key(PLACEMENT_GROUPS_URI) == prefix + "restful__api__v0__placement_groups?detail=1&limit=10000"
    assert rig.key(JOBS_URI) == prefix + "restful__api__jobs"
    assert rig.stored(PLACEMENT_GROUPS_URI) == (SAMPLES / "api_v0_placement_groups_detail_limit10000.json").read_bytes()
    assert rig.stored(JOBS_URI) == jobs_body
    assert rig.stored(CLUSTER_METADATA_URI) == (SAMPLES / "api_v0_cluster_metadata.json").read_bytes()
    assert rig.stored(TIMEZONE_URI) == (SAMPLES / "timezone.json").read_bytes()
    assert json.loads(rig.stored(SERVE_URI) or b"") == SERVE_APPS
    assert json.loads(rig.stored(ds_uri("02000000")) or b"") == DATASETS
    assert rig.outcome("placement_groups", "stored") == 1
    assert rig.outcome("jobs", "stored") == 1
    assert rig.outcome("datasets", "stored") == 3


def test_non_200_answers_are_not_snapshots(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("02000000", "SUCCEEDED")))
    fake.sample(SERVE_URI, "api_serve_applications.txt", 501)  # Serve not installed
    fake.sample(ds_uri("02000000"), "api_data_datasets_02000000.txt", 503)  # pandas missing
    fake.reply(PLACEMENT_GROUPS_URI, "boom", 500)
    rig = build(tmp_path, fake)
    rig.recorder.tick()
    assert rig.stored(SERVE_URI) is None
    assert rig.stored(PLACEMENT_GROUPS_URI) is None
    assert rig.stored(ds_uri("02000000")) is None
    assert rig.stored(JOBS_URI) is not None
    assert rig.outcome("serve", "error") == 1
    assert rig.outcome("datasets", "error") == 1


def test_additional_endpoints_deduplicated_and_polled(tmp_path: Path, fake: FakeDashboard) -> None:
    builtins_before = tuple(BUILTIN_POLLED)
    extras = ("/api/jobs", "/api/train/v2/runs/v1", "/api/train/v2/runs/v1", SERVE_URI, "no-slash", "/a/../b")
    serve_defaults(fake)
    fake.reply("/api/train/v2/runs/v1", {"runs": []})
    rig = build(tmp_path, fake, additional_endpoints=extras)
    assert rig.recorder.polled_endpoints == (SERVE_URI, PLACEMENT_GROUPS_URI, JOBS_URI, "/api/train/v2/runs/v1")
    assert builtins_before == BUILTIN_POLLED
    rig.recorder.tick()
    assert fake.hits("/api/jobs") == 0
    assert rig.stored("/api/train/v2/runs/v1") == b'{"runs": []}'
    assert rig.key("/api/train/v2/runs/v1").endswith("/fetched_endpoints/restful__api__train__v2__runs__v1")
    assert rig.outcome("extra", "stored") == 1


# -------------------------------------------------------------- fetch-once
def test_fetch_once_per_session(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake)
    rig = build(tmp_path, fake)
    for _ in range(4):
        rig.cycle()
    assert fake.hits(CLUSTER_METADATA_URI) == 1
    assert fake.hits(TIMEZONE_URI) == 1
    assert fake.hits(SERVE_URI) == 4

    rig.switch_session()  # head container restarted; KubeRay's Go collector never re-fetches here
    rig.recorder.tick()
    assert fake.hits(CLUSTER_METADATA_URI) == 2
    assert rig.stored(CLUSTER_METADATA_URI, SESSION_B) is not None
    assert rig.stored(TIMEZONE_URI, SESSION_B) is not None
    assert rig.stored(SERVE_URI, SESSION_B) is not None  # polled at once in the new session
    assert rig.store.get_bytes(f"cluster-metadata/raycluster/ns_cluster/{SESSION_B}") == b""


def test_fetch_once_retries_empty_and_failed_with_backoff(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake)
    body = (SAMPLES / "api_v0_cluster_metadata.json").read_bytes()
    fake.script(CLUSTER_METADATA_URI, Reply(200, b""), Reply(503, b"not ready"), Reply(200, body))
    rig = build(tmp_path, fake)
    rig.recorder.tick()  # empty body: does not count
    assert rig.stored(CLUSTER_METADATA_URI) is None
    assert rig.outcome("cluster_metadata", "empty") == 1
    rig.clock.now += 4
    rig.recorder.tick()
    assert fake.hits(CLUSTER_METADATA_URI) == 1  # backoff 5 s
    rig.clock.now += 1
    assert rig.recorder.tick() == pytest.approx(10.0)  # 503; the next try is 10 s away
    assert fake.hits(CLUSTER_METADATA_URI) == 2
    rig.clock.now += 9
    rig.recorder.tick()
    assert fake.hits(CLUSTER_METADATA_URI) == 2
    rig.clock.now += 1
    rig.recorder.tick()
    assert rig.stored(CLUSTER_METADATA_URI) == body
    rig.clock.now += 1000
    rig.recorder.tick()
    assert fake.hits(CLUSTER_METADATA_URI) == 3


def test_fetch_once_gives_up_on_401(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake)
    fake.reply(CLUSTER_METADATA_URI, "Unauthorized", 401)
    rig = build(tmp_path, fake)
    for _ in range(3):
        rig.clock.now += 120
        rig.recorder.tick()
    rig.recorder.stop(rig.clock() + 10)
    assert fake.hits(CLUSTER_METADATA_URI) == 1
    assert fake.hits(TIMEZONE_URI) == 1  # the other endpoint is unaffected
    assert rig.stored(TIMEZONE_URI) is not None


# ------------------------------------------------------------------ datasets
def test_datasets_empty_never_stored_and_running_empties_do_not_count(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("01000000", "RUNNING")))
    fake.reply(ds_uri("01000000"), DATASETS_EMPTY)
    rig = build(tmp_path, fake)
    for _ in range(4):
        rig.cycle()
    assert fake.hits(ds_uri("01000000")) == 4
    assert rig.stored(ds_uri("01000000")) is None
    fake.reply(JOBS_URI, jobs(("01000000", "SUCCEEDED")))
    rig.cycle()
    rig.cycle()
    assert fake.hits(ds_uri("01000000")) == 6
    rig.cycle()  # two empty answers after the job ended: capped
    assert fake.hits(ds_uri("01000000")) == 6
    assert rig.outcome("datasets", "skipped") == 1
    assert rig.stored(ds_uri("01000000")) is None


def test_terminal_job_fetched_once_when_stored(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("02000000", "SUCCEEDED"), ("03000000", "RUNNING")))
    fake.reply(ds_uri("02000000"), DATASETS)
    fake.reply(ds_uri("03000000"), DATASETS)
    rig = build(tmp_path, fake)
    for _ in range(3):
        rig.cycle()
    assert fake.hits(ds_uri("02000000")) == 1
    assert fake.hits(ds_uri("03000000")) == 3  # non-terminal: re-fetched and re-stored
    assert rig.outcome("datasets", "stored") == 4
    rig.recorder.stop(rig.clock() + 10)
    assert fake.hits(ds_uri("02000000")) == 1  # the final poll skips it too


def test_failed_terminal_fetch_retried_and_late_stats_captured(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("02000000", "FAILED"), ("05000000", "STOPPED")))
    fake.script(ds_uri("02000000"), Reply(503, b"No module named 'pandas'"), Reply(200, json.dumps(DATASETS).encode()))
    fake.script(
        ds_uri("05000000"), Reply(200, json.dumps(DATASETS_EMPTY).encode()), Reply(200, json.dumps(DATASETS).encode())
    )
    rig = build(tmp_path, fake)
    rig.cycle()
    assert rig.stored(ds_uri("02000000")) is None
    assert rig.stored(ds_uri("05000000")) is None
    rig.cycle()
    assert json.loads(rig.stored(ds_uri("02000000")) or b"") == DATASETS
    assert json.loads(rig.stored(ds_uri("05000000")) or b"") == DATASETS
    rig.cycle()
    assert fake.hits(ds_uri("02000000")) == 2
    assert fake.hits(ds_uri("05000000")) == 2


def test_only_succeeded_failed_stopped_are_terminal(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("01000000", "PENDING"), ("02000000", "FINISHED"), ("03000000", "STOPPED")))
    for job in ("01000000", "02000000", "03000000"):
        fake.reply(ds_uri(job), DATASETS_EMPTY)
    rig = build(tmp_path, fake)
    for _ in range(4):
        rig.cycle()
    assert fake.hits(ds_uri("01000000")) == 4
    assert fake.hits(ds_uri("02000000")) == 4
    assert fake.hits(ds_uri("03000000")) == 2


def test_final_poll_reuses_state_but_retries_capped_jobs(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("02000000", "SUCCEEDED"), ("03000000", "SUCCEEDED")))
    fake.reply(ds_uri("02000000"), DATASETS)
    fake.reply(ds_uri("03000000"), DATASETS_EMPTY)
    rig = build(tmp_path, fake)
    for _ in range(3):
        rig.cycle()
    assert fake.hits(ds_uri("03000000")) == 2  # capped
    fake.reply(ds_uri("03000000"), DATASETS)
    rig.recorder.stop(rig.clock() + 10)
    assert fake.hits(ds_uri("02000000")) == 1  # stored earlier: skipped
    assert fake.hits(ds_uri("03000000")) == 3  # one more try past the cap
    assert json.loads(rig.stored(ds_uri("03000000")) or b"") == DATASETS


def test_session_change_resets_dataset_state(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("02000000", "SUCCEEDED")))
    fake.reply(ds_uri("02000000"), DATASETS)
    rig = build(tmp_path, fake)
    rig.cycle()
    rig.cycle()
    assert fake.hits(ds_uri("02000000")) == 1
    rig.switch_session()
    rig.recorder.tick()
    assert fake.hits(ds_uri("02000000")) == 2
    assert rig.stored(ds_uri("02000000"), SESSION_A) is not None
    assert rig.stored(ds_uri("02000000"), SESSION_B) is not None


def test_final_poll_reuses_state_only_for_the_same_session(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("02000000", "SUCCEEDED")))
    fake.reply(ds_uri("02000000"), DATASETS)
    rig = build(tmp_path, fake)
    rig.cycle()
    rig.switch_session()  # no periodic cycle in the new session before shutdown
    rig.recorder.stop(rig.clock() + 10)
    assert fake.hits(ds_uri("02000000")) == 2
    assert rig.stored(ds_uri("02000000"), SESSION_B) is not None
    assert rig.stored(CLUSTER_METADATA_URI, SESSION_B) is not None  # fetch-once tried in the final poll
    assert rig.store.get_bytes(f"cluster-metadata/raycluster/ns_cluster/{SESSION_B}") == b""


def test_unparsable_bodies_are_stored(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake, jobs(("02000000", "SUCCEEDED")))
    fake.reply(SERVE_URI, "<html>not json</html>")
    fake.reply(ds_uri("02000000"), "[1, 2]")
    rig = build(tmp_path, fake)
    rig.recorder.tick()
    rig.recorder.stop(rig.clock() + 10)
    assert rig.stored(SERVE_URI) == b"<html>not json</html>"
    assert rig.stored(ds_uri("02000000")) == b"[1, 2]"


# --------------------------------------------------------------------- Serve
def test_serve_empty_overwrites_on_periodic_but_not_on_final(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake)
    rig = build(tmp_path, fake)
    rig.cycle()
    assert json.loads(rig.stored(SERVE_URI) or b"") == SERVE_APPS
    fake.reply(SERVE_URI, SERVE_EMPTY)
    rig.cycle()
    assert json.loads(rig.stored(SERVE_URI) or b"") == SERVE_EMPTY  # the live truth
    fake.reply(SERVE_URI, SERVE_APPS)
    rig.cycle()
    fake.reply(SERVE_URI, SERVE_EMPTY)
    rig.recorder.stop(rig.clock() + 10)
    assert json.loads(rig.stored(SERVE_URI) or b"") == SERVE_APPS  # the dying controller's answer is ignored
    assert rig.outcome("serve", "empty") == 1


# -------------------------------------------------------- background thread
def test_thread_writes_marker_follows_session_and_stops(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake)
    rig = build(tmp_path, fake, real_clock=True, poll_interval=60.0)
    rig.recorder.start()
    deadline = time.monotonic() + 10
    while rig.stored(JOBS_URI) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rig.stored(CLUSTER_METADATA_URI) is not None
    # A new session wakes the thread through the identity listener, long before
    # the 60 s poll interval.
    rig.switch_session()
    marker_b = f"cluster-metadata/raycluster/ns_cluster/{SESSION_B}"
    deadline = time.monotonic() + 5
    while not rig.store.exists(marker_b) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rig.store.exists(marker_b)
    rig.recorder.stop(time.monotonic() + 10)
    seen = len(fake.requests)
    time.sleep(0.3)
    assert len(fake.requests) == seen
    thread = rig.recorder._thread
    assert thread is not None and not thread.is_alive()


def test_in_flight_answer_after_stop_is_not_stored(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake)
    periodic = json.dumps({"applications": {"old": {}}}).encode()
    final = json.dumps(SERVE_APPS).encode()
    in_flight = threading.Event()  # the periodic answer is held until the test opens it
    fake.script(SERVE_URI, Reply(200, periodic, gate=in_flight), Reply(200, final))
    rig = build(tmp_path, fake, real_clock=True, poll_interval=60.0)
    rig.recorder.start()
    deadline = time.monotonic() + 60
    while fake.hits(SERVE_URI) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.hits(SERVE_URI) == 1, "the periodic poll never asked"
    # A safety valve far past stop()'s own budget: stop() must return while the
    # periodic answer is still held, i.e. without waiting for it (no timing margin).
    valve = threading.Timer(60.0, in_flight.set)
    valve.start()
    try:
        rig.recorder.stop(time.monotonic() + 6.0)  # waits up to 2 s for the thread, then polls itself
        assert not in_flight.is_set(), "stop() waited for the in-flight periodic answer"
        assert rig.stored(SERVE_URI) == final
    finally:
        valve.cancel()
        in_flight.set()  # the periodic answer arrives now, after stop()
    thread = rig.recorder._thread
    assert thread is not None
    thread.join(60)
    assert not thread.is_alive()
    assert rig.stored(SERVE_URI) == final  # the late periodic answer never overwrote it
    assert rig.stored(PLACEMENT_GROUPS_URI) is not None  # stored by the final poll


def test_a_restarted_heads_answers_are_not_stored_under_the_old_session(tmp_path: Path, fake: FakeDashboard) -> None:
    """Found by the two-node head-restart scenario: Ray restarted on the head, discovery
    still named the old session, and the new dashboard's empty job list replaced the old
    session's stored one (its jobs lost their status). ``/api/version`` names the session
    the dashboard serves; a poll for another session is not stored."""
    serve_defaults(fake, jobs(("02000000", "SUCCEEDED")))
    fake.reply(VERSION_URI, version(SESSION_A))
    rig = build(tmp_path, fake)
    rig.cycle()
    first = rig.stored(JOBS_URI)
    assert first is not None and b"SUCCEEDED" in first
    fake.reply(JOBS_URI, [])  # the new session's dashboard, same address
    fake.reply(VERSION_URI, version(SESSION_B))
    rig.cycle()
    assert rig.stored(JOBS_URI) == first, "the old session keeps its job list"
    assert rig.outcome("version", "other_session") == 1
    rig.switch_session()  # discovery catches up: the new session's answers go to it
    rig.recorder.tick()
    assert rig.stored(JOBS_URI, SESSION_B) == b"[]"


# ------------------------------------------------------------ a job ends
def test_a_finished_job_is_polled_for_within_seconds(tmp_path: Path, fake: FakeDashboard) -> None:
    """KubeRay may delete a RayJob's cluster seconds after the job ends; its final status
    exists only in /api/jobs/. So the aggregator's FINISHED event makes the recorder poll
    after 1, 5 and 15 s instead of waiting up to the 30 s of the periodic poll."""
    serve_defaults(fake, jobs(("02000000", "RUNNING")))
    rig = build(tmp_path, fake)
    rig.recorder.tick()
    assert fake.hits(JOBS_URI) == 1
    fake.reply(JOBS_URI, jobs(("02000000", "SUCCEEDED")))
    rig.clock.now += 3
    assert rig.recorder.tick() == pytest.approx(27.0)  # nothing asked for: the periodic poll is next
    assert fake.hits(JOBS_URI) == 1

    rig.recorder.job_ended()
    assert rig.recorder.tick() == pytest.approx(1.0)
    assert fake.hits(JOBS_URI) == 1
    rig.clock.now += 1
    assert rig.recorder.tick() == pytest.approx(4.0)
    assert fake.hits(JOBS_URI) == 2
    assert json.loads(rig.stored(JOBS_URI) or b"[]")[0]["status"] == "SUCCEEDED"
    rig.clock.now += 4
    assert rig.recorder.tick() == pytest.approx(10.0)
    rig.clock.now += 10
    assert rig.recorder.tick() == pytest.approx(12.0)  # t = 18: back to the periodic schedule (t = 30)
    assert fake.hits(JOBS_URI) == 4


def test_job_end_polls_are_bounded(tmp_path: Path, fake: FakeDashboard) -> None:
    serve_defaults(fake)
    rig = build(tmp_path, fake)
    rig.recorder.tick()
    for _ in range(1000):  # a flood of FINISHED events
        rig.recorder.job_ended()
        rig.clock.now += 0.001
    polls = 0
    for _ in range(100):
        before = fake.hits(JOBS_URI)
        rig.clock.now += 1
        rig.recorder.tick()
        polls += fake.hits(JOBS_URI) - before
    assert polls <= 16 + 4  # the pending bound, plus the periodic polls of those 100 s

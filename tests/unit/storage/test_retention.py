"""runtime/storage/retention.py: which sessions whole-session retention deletes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runtime.storage.base import ObjectInfo
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.retention import Decision, SessionRecord, select, summarise

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CUTOFF = NOW - timedelta(days=30)
OLD = CUTOFF - timedelta(days=5)
RECENT = CUTOFF + timedelta(days=5)
DEMO = ClusterRef("default", "raycluster-demo")
OTHER = ClusterRef("team-a", "svc-raycluster-x", owner_kind="rayservice", owner_name="svc")
S1 = "session_2026-01-01_00-00-00_000001_1"
S2 = "session_2026-02-01_00-00-00_000001_1"
S3 = "session_2026-03-01_00-00-00_000001_1"


def _record(cluster: ClusterRef, session: str, newest: datetime | None) -> SessionRecord:
    return SessionRecord(cluster, session, newest=newest, objects=3, bytes=10, has_marker=True)


def _by_session(decisions: list[Decision]) -> dict[tuple[str, str], Decision]:
    return {(d.record.cluster.name, d.record.session): d for d in decisions}


def _deleted(decisions: list[Decision]) -> set[tuple[str, str]]:
    return {key for key, d in _by_session(decisions).items() if d.delete}


# --------------------------------------------------------------- rule (a)
def test_a_newer_session_ends_the_older_ones_and_the_newest_is_kept_without_a_live_check() -> None:
    records = [_record(DEMO, S1, OLD), _record(DEMO, S2, OLD), _record(DEMO, S3, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF, live=None))
    assert decisions["raycluster-demo", S1].delete
    assert decisions["raycluster-demo", S2].delete
    assert f"newer session of the cluster exists ({S2})" in decisions["raycluster-demo", S1].reason
    newest = decisions["raycluster-demo", S3]
    assert not newest.delete
    assert "liveness was not checked" in newest.reason


def test_a_newer_session_of_another_cluster_ends_nothing() -> None:
    records = [_record(DEMO, S1, OLD), _record(OTHER, S2, OLD)]
    assert _deleted(select(records, cutoff=CUTOFF)) == set()


def test_a_live_cluster_running_for_months_keeps_its_session_whole() -> None:
    # A RayService running since January: every object is older than the cutoff.
    records = [_record(OTHER, S1, OLD)]
    (decision,) = select(records, cutoff=CUTOFF, live={("team-a", "svc-raycluster-x")})
    assert not decision.delete
    assert decision.reason == "running: the newest session of a live RayCluster"


def test_a_live_clusters_older_sessions_are_ended_by_its_newer_one() -> None:
    records = [_record(DEMO, S1, OLD), _record(DEMO, S2, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF, live={("default", "raycluster-demo")}))
    assert decisions["raycluster-demo", S1].delete
    assert not decisions["raycluster-demo", S2].delete


# ------------------------------------------------- clocks in session names
# Ray names a session with the head's local time, read here as UTC. On the DST fall-back
# night in New York (2026-11-01) a head that crashed in the session started 01:45 EDT
# (05:45Z) and restarted 25 minutes later names the new one 01:10 EST (06:10Z).
CRASHED = "session_2026-11-01_01-45-00_000000_10"
RESTARTED = "session_2026-11-01_01-10-00_000000_11"
NOV_1 = datetime(2026, 11, 1, 6, 30, tzinfo=UTC)
LATER = NOV_1 + timedelta(days=25)  # both idle since Nov 1: older than the cutoff


@pytest.mark.parametrize("live", [None, {("default", "raycluster-demo")}])
def test_a_clock_set_back_does_not_end_the_running_session(live: set[tuple[str, str]] | None) -> None:
    records = [_record(DEMO, CRASHED, NOV_1), _record(DEMO, RESTARTED, NOV_1)]
    decisions = _by_session(select(records, cutoff=LATER - timedelta(days=20), live=live))
    kept = decisions["raycluster-demo", RESTARTED]
    assert not kept.delete, kept.reason
    assert f"may be running: {CRASHED} is named less than 26h later but was not written to later" in kept.reason


def test_a_running_session_written_after_its_named_successor_is_not_ended_by_it() -> None:
    # The running session wrote last: the one whose name sorts later is the one that ended.
    records = [_record(DEMO, CRASHED, NOV_1 - timedelta(minutes=30)), _record(DEMO, RESTARTED, NOV_1)]
    decisions = _by_session(select(records, cutoff=LATER, live=None))
    assert not decisions["raycluster-demo", RESTARTED].delete


def test_a_close_successor_written_later_ends_a_session() -> None:
    # An ordinary restart 20 minutes later: names that close could be reordered by a
    # clock change, but the successor's objects were written later too.
    first = "session_2026-11-01_10-00-00_000000_1"
    second = "session_2026-11-01_10-20-00_000000_2"
    records = [_record(DEMO, first, NOV_1), _record(DEMO, second, NOV_1 + timedelta(hours=1))]
    decisions = _by_session(select(records, cutoff=LATER))
    assert decisions["raycluster-demo", first].delete
    assert f"a newer session of the cluster exists ({second})" in decisions["raycluster-demo", first].reason
    assert not decisions["raycluster-demo", second].delete


def test_a_successor_named_more_than_a_day_later_ends_a_session_written_up_to_a_day_after_it() -> None:
    # Logs of an ended session may be uploaded after its successor's last write.
    records = [_record(DEMO, S1, OLD), _record(DEMO, S2, OLD - timedelta(hours=25))]
    assert _deleted(select(records, cutoff=CUTOFF)) == {("raycluster-demo", S1)}


@pytest.mark.parametrize("live", [None, {("default", "raycluster-demo")}])
def test_a_session_named_far_later_by_a_fast_clock_does_not_end_the_running_one(
    live: set[tuple[str, str]] | None,
) -> None:
    """The head's clock ran a year fast, then was fixed: the long-ended session is named
    2027 and the running (idle) one 2026. Ordered by name alone, gc deleted the running
    session and kept the stale one for ever."""
    stale = "session_2027-06-01_00-00-00_000001_1"
    running = "session_2026-03-01_00-00-00_000001_2"
    records = [_record(DEMO, stale, OLD - timedelta(days=160)), _record(DEMO, running, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF, live=live))
    kept = decisions["raycluster-demo", running]
    assert not kept.delete
    assert f"may be running: {stale} is named later but was last written more than 26h before it" in kept.reason


# --------------------------------------------------------------- rule (b)
def test_a_cluster_that_is_not_live_has_ended_all_its_sessions() -> None:
    records = [_record(DEMO, S2, OLD), _record(OTHER, S3, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF, live={("team-a", "svc-raycluster-x")}))
    gone = decisions["raycluster-demo", S2]
    assert gone.delete
    assert "RayCluster default/raycluster-demo is not live" in gone.reason
    assert not decisions["svc-raycluster-x", S3].delete


def test_an_empty_live_set_is_known_and_differs_from_no_check() -> None:
    records = [_record(DEMO, S2, OLD)]
    assert _deleted(select(records, cutoff=CUTOFF, live=set())) == {("raycluster-demo", S2)}
    assert _deleted(select(records, cutoff=CUTOFF, live=None)) == set()


def test_liveness_matches_namespace_and_name() -> None:
    records = [_record(DEMO, S2, OLD)]
    assert _deleted(select(records, cutoff=CUTOFF, live={("team-a", "raycluster-demo")})) == {("raycluster-demo", S2)}


# ----------------------------------------------------------------- cutoff
def test_an_ended_session_written_to_recently_is_kept() -> None:
    records = [_record(DEMO, S1, RECENT), _record(DEMO, S2, RECENT + timedelta(days=1))]
    decisions = _by_session(select(records, cutoff=CUTOFF))
    kept = decisions["raycluster-demo", S1]
    assert not kept.delete
    assert "within the retention period" in kept.reason


@pytest.mark.parametrize(
    ("newest", "deleted"),
    [
        (CUTOFF - timedelta(microseconds=1), True),
        (CUTOFF, False),  # "ended before the cutoff" is strict
        (CUTOFF + timedelta(microseconds=1), False),
    ],
)
def test_cutoff_edges(newest: datetime, deleted: bool) -> None:
    records = [_record(DEMO, S1, newest), _record(DEMO, S2, RECENT)]
    assert (("raycluster-demo", S1) in _deleted(select(records, cutoff=CUTOFF))) is deleted


def test_an_ended_session_without_modification_times_is_kept() -> None:
    records = [_record(DEMO, S1, None), _record(DEMO, S2, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF))
    assert not decisions["raycluster-demo", S1].delete
    assert "no modification times" in decisions["raycluster-demo", S1].reason


def test_a_session_name_without_a_start_time_is_never_ordered_against_others() -> None:
    records = [_record(DEMO, "hand-upload", OLD), _record(DEMO, S2, OLD)]
    decisions = _by_session(select(records, cutoff=CUTOFF))
    assert not decisions["raycluster-demo", "hand-upload"].delete
    assert "no start time" in decisions["raycluster-demo", "hand-upload"].reason
    # ... unless the cluster is known to be gone.
    assert ("raycluster-demo", "hand-upload") in _deleted(select(records, cutoff=CUTOFF, live=set()))


def test_every_session_gets_exactly_one_decision_in_a_stable_order() -> None:
    records = [_record(OTHER, S1, OLD), _record(DEMO, S3, OLD), _record(DEMO, S1, OLD)]
    decisions = select(records, cutoff=CUTOFF)
    assert [(d.record.cluster.name, d.record.session) for d in decisions] == [
        ("raycluster-demo", S1),
        ("raycluster-demo", S3),
        ("svc-raycluster-x", S1),
    ]


# -------------------------------------------------------------- summarise
def test_summarise_folds_every_object_and_the_marker_into_its_session() -> None:
    layout = KeyLayout("root")
    prefix = layout.session_prefix(DEMO, S1)
    node = "ab" * 28
    infos = [
        ObjectInfo(layout.log_key(DEMO, S1, node, "raylet.out"), 100, OLD),
        ObjectInfo(layout.node_events_key(DEMO, S1, node, "x-2026-01-01-00.jsonl"), 50, RECENT),
        ObjectInfo(layout.endpoint_key(DEMO, S1, "/api/jobs/"), 7, OLD),
        ObjectInfo(prefix + "something/else", 1, OLD),  # not a layout kind, still the session's
        ObjectInfo(layout.marker_key(DEMO, S1), 0, OLD - timedelta(days=1)),
        ObjectInfo(layout.marker_key(OTHER, S2), 0, OLD),  # a marker whose objects are gone
        ObjectInfo(KeyLayout("elsewhere").log_key(DEMO, S1, node, "raylet.out"), 5, OLD),
        ObjectInfo("root/cluster-metadata/raycluster/not-a-marker", 0, OLD),
    ]
    records = {(r.cluster, r.session): r for r in summarise(layout, infos)}
    assert set(records) == {(DEMO, S1), (OTHER, S2)}
    demo = records[DEMO, S1]
    assert (demo.objects, demo.bytes, demo.newest, demo.has_marker) == (5, 158, RECENT, True)
    other = records[OTHER, S2]
    assert (other.objects, other.newest, other.has_marker) == (1, OLD, True)


def test_summarise_a_session_whose_marker_is_gone() -> None:
    # What a gc run that stopped midway leaves: it deletes the marker first.
    layout = KeyLayout()
    infos = [ObjectInfo(layout.log_key(DEMO, S1, "ab", "raylet.out"), 1, OLD)]
    (record,) = summarise(layout, infos)
    assert not record.has_marker
    assert record.newest == OLD

"""``ray-history gc`` on the four storage backends (local dir, fake-gcs-server, moto S3,
Azurite): exactly the ended sessions past the cutoff are deleted, nothing else, and
``--dry-run`` deletes nothing.

Emulators stamp objects with the time they were written, so "old" and "recent" are two
rounds of writes ``GAP`` seconds apart, and ``--older-than`` puts the cutoff in the
middle of the gap. Each run's JSON output states its cutoff; the test checks it did
fall in the gap, so a machine too slow for the margin fails loudly instead of testing
something else.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import orjson
import pytest

from runtime.storage.base import ObjectStore
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.cli.cli_runner import run_cli
from tests.integration.conftest import TEST_RETRY, new_bucket_name
from tests.integration.emulators.registry import EMULATORS, EmulatorPool

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GAP = 8.0
ROOT = "hist"
NODE = "cd" * 28
DEMO = ClusterRef("default", "raycluster-demo")
SVC = ClusterRef("serve", "svc-raycluster-x2k9", owner_kind="rayservice", owner_name="svc")
YOUNG = ClusterRef("team-a", "young")
S1 = "session_2026-01-01_00-00-00_000001_1"
S2 = "session_2026-02-01_00-00-00_000001_1"
S3 = "session_2026-03-01_00-00-00_000001_1"


def _write(store: ObjectStore, layout: KeyLayout, cluster: ClusterRef, session: str) -> None:
    """A session as the collector files it: logs, node and job events, a snapshot, the marker."""
    store.put_bytes(layout.log_key(cluster, session, NODE, "raylet.out"), b"raylet\n" * 100)
    store.put_bytes(layout.log_key(cluster, session, NODE, "events/event_GCS.log"), b"{}\n")
    store.put_bytes(layout.node_events_key(cluster, session, NODE, f"{NODE}-2026-01-01-00-1.jsonl"), b"[]\n")
    job_event = f"{NODE}-2026-01-01-00-2.jsonl.gz"
    store.put_bytes(layout.job_events_key(cluster, session, NODE, "01000000", job_event), b"\x1f\x8b")
    store.put_bytes(layout.endpoint_key(cluster, session, "/api/v0/cluster_metadata"), b"{}")
    store.put_bytes(layout.marker_key(cluster, session), b"")


def _snapshot(store: ObjectStore) -> dict[str, tuple[int, str | None]]:
    return {info.key: (info.size, info.version) for info in store.walk("")}


def _session_keys(snapshot: dict[str, tuple[int, str | None]], layout: KeyLayout, c: ClusterRef, s: str) -> set[str]:
    return {k for k in snapshot if k.startswith(layout.session_prefix(c, s)) or k == layout.marker_key(c, s)}


def _gc(env: dict[str, str], mid_gap: float, *extra: str) -> list[dict[str, str]]:
    """Run gc with the cutoff at ``mid_gap`` (epoch seconds) as of now."""
    older_than = time.time() - mid_gap
    done = run_cli("gc", f"--older-than={older_than:.3f}s", f"--storage-root-dir={ROOT}", "--json", *extra, env=env)
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


def _cutoff(rows: list[dict[str, str]]) -> float:
    (cutoff,) = {row["cutoff"] for row in rows}
    return datetime.strptime(cutoff, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize("backend", list(EMULATORS))
def test_gc_deletes_exactly_the_ended_sessions_past_the_cutoff(backend: str, emulator_pool: EmulatorPool) -> None:
    emulator = emulator_pool.get(backend)
    bucket = new_bucket_name()
    emulator.create_bucket(bucket)
    env = emulator.env(bucket)
    layout = KeyLayout(ROOT)
    with emulator.make_store(bucket, retry=TEST_RETRY) as store:
        # Old round: two ended sessions, and the newest sessions of their clusters.
        for cluster, session in ((DEMO, S1), (DEMO, S2), (SVC, S1), (SVC, S2)):
            _write(store, layout, cluster, session)
        store.put_bytes("unrelated/object.txt", b"not a session")  # outside the layout: never touched
        old = _snapshot(store)
        old_end = max(info.updated.timestamp() for info in store.walk("") if info.updated is not None)
        time.sleep(GAP)
        # Recent round: a cluster whose first session ended recently, and a late write
        # making one ended session of SVC recent again.
        for cluster, session in ((YOUNG, S1), (YOUNG, S2), (SVC, S3)):
            _write(store, layout, cluster, session)
        recent = {k: v for k, v in _snapshot(store).items() if k not in old}
        recent_start = min(
            info.updated.timestamp() for info in store.walk("") if info.key in recent and info.updated is not None
        )
        before = _snapshot(store)
        mid_gap = old_end + GAP / 2

        dry = _gc(env, mid_gap, "--dry-run")
        assert _snapshot(store) == before, "--dry-run deleted something"
        assert old_end < _cutoff(dry) < recent_start, "gc started too late: its cutoff left the gap"
        planned = {(row["cluster"], row["session"]): row["action"] for row in dry}
        assert planned == {
            ("raycluster-demo", S1): "would delete",  # ended by S2, old
            ("raycluster-demo", S2): "kept",  # newest of its cluster: may be running, old objects and all
            ("svc-raycluster-x2k9", S1): "would delete",
            ("svc-raycluster-x2k9", S2): "would delete",  # ended by S3
            ("svc-raycluster-x2k9", S3): "kept",
            ("young", S1): "kept",  # ended by S2, but recently
            ("young", S2): "kept",
        }

        done = _gc(env, mid_gap)
        assert old_end < _cutoff(done) < recent_start, "gc started too late: its cutoff left the gap"
        deleted = {(row["cluster"], row["session"]) for row in done if row["action"] == "deleted"}
        assert deleted == {("raycluster-demo", S1), ("svc-raycluster-x2k9", S1), ("svc-raycluster-x2k9", S2)}
        assert not [row for row in done if row["action"] not in ("deleted", "kept")]
        gone = (
            _session_keys(before, layout, DEMO, S1)
            | _session_keys(before, layout, SVC, S1)
            | _session_keys(before, layout, SVC, S2)
        )
        assert len(gone) == 18
        # Nothing else changed: the kept sessions are whole, object for object and version for version.
        assert _snapshot(store) == {k: v for k, v in before.items() if k not in gone}
        assert _session_keys(before, layout, DEMO, S2) <= set(_snapshot(store))

        again = _gc(env, mid_gap)
        assert not [row for row in again if row["action"] != "kept"]

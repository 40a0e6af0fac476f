"""Keys a collector of one namespace writes, built by the runtime's own layout
(``runtime/storage/layout.py``), for the per-cloud tests of namespace-scoped write grants."""

from __future__ import annotations

from runtime.storage.layout import ClusterRef, KeyLayout

SESSION = "session_2024-01-01_00-00-00_000000_1"


def collector_keys(root_dir: str, namespace: str) -> dict[str, str]:
    """One key of each kind a collector of ``namespace`` writes: logs, events, the session's
    end note and markers, for a bare RayCluster, a RayJob's and a RayService's."""
    layout = KeyLayout(root_dir)
    bare = ClusterRef(namespace, "raycluster-x")
    job = ClusterRef(namespace, "raycluster-y", owner_kind="rayjob", owner_name="job-1")
    serve = ClusterRef(namespace, "raycluster-z", owner_kind="rayservice", owner_name="svc-1")
    node = "a" * 56
    return {
        "log": layout.log_key(bare, SESSION, node, "raylet.out"),
        "job-log": layout.log_key(job, SESSION, node, "worker.log"),
        "events": layout.node_events_key(serve, SESSION, node, f"{node}-2024-01-01-00-1.jsonl"),
        "ended": layout.session_ended_key(bare, SESSION),
        "marker": layout.marker_key(bare, SESSION),
        "job-marker": layout.marker_key(job, SESSION),
        "serve-marker": layout.marker_key(serve, SESSION),
    }


def index_keys(root_dir: str, namespace: str) -> dict[str, str]:
    """The shared index objects (data and manifest) of sessions of ``namespace``: no collector may write them."""
    layout = KeyLayout(root_dir)
    bare = ClusterRef(namespace, "raycluster-x")
    job = ClusterRef(namespace, "raycluster-y", owner_kind="rayjob", owner_name="job-1")
    return {
        "index": layout.index_keys(bare, SESSION, "v1-s1", "f" * 64)[0],
        "job-index": layout.index_keys(job, SESSION, "v1-s1", "f" * 64)[1],
    }

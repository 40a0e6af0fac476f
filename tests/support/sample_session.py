"""Write a stored session into an ObjectStore exactly as the collector files it.

The events are the real Ray 2.60 batches of ``tests/fixtures/ray-samples`` (session A =
``runA-kuberay-config``, whose logs tarball and live API answers are also saved),
grouped with the collector's own parser into ``node_events`` / ``job_events``
objects; logs come from the session's ``logs/`` tarball and the endpoint
snapshots from the saved live responses.
"""

from __future__ import annotations

import gzip
import tarfile
from dataclasses import dataclass
from pathlib import Path

import orjson

from runtime.collector.events.parse import parse_batch
from runtime.common.ids import to_hex_id
from runtime.storage.base import ObjectStore
from runtime.storage.layout import ClusterRef, KeyLayout, event_file_name

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES = REPO_ROOT / "tests" / "fixtures" / "ray-samples"
EVENTS = SAMPLES / "events"
API = SAMPLES / "api"
SESSION_A = "session_2026-11-22_01-45-25_333080_9264"
RUN_A = "runA-kuberay-config"
RUN_B = "runB-all-types"
#: The endpoint snapshots the collector stores for session A (uri -> saved answer).
SESSION_A_ENDPOINTS = {
    "/api/v0/cluster_metadata": "api_v0_cluster_metadata.json",
    "/timezone": "timezone.json",
    "/api/jobs/": "api_jobs.json",
    "/api/v0/placement_groups?detail=1&limit=10000": "api_v0_placement_groups_detail_limit10000.json",
}


@dataclass(frozen=True)
class StoredSample:
    cluster: ClusterRef
    session: str
    node_id: str  # hex
    session_prefix: str


def load_events(run: str = RUN_A) -> list[dict[str, object]]:
    """Every event of one captured run, in capture order."""
    events: list[dict[str, object]] = orjson.loads((EVENTS / run / "_all_events.json").read_bytes())
    return events


def session_of(events: list[dict[str, object]]) -> str:
    return str(events[0]["sessionName"])


def head_node_of(events: list[dict[str, object]]) -> str:
    for event in events:
        if event.get("eventType") == "NODE_DEFINITION_EVENT":
            return to_hex_id(str(event["nodeId"]))
    return to_hex_id(str(events[0]["nodeId"]))


def write_events(
    store: ObjectStore,
    layout: KeyLayout,
    cluster: ClusterRef,
    events: list[dict[str, object]],
    *,
    files_per_target: int = 1,
    compress: bool = False,
    base_ns: int = 1_763_775_925_000_000_000,
) -> list[str]:
    """File ``events`` as the collector would; returns the keys written."""
    batch = parse_batch(orjson.dumps(events))
    keys: list[str] = []
    for n, (target, lines) in enumerate(sorted(batch.groups.items(), key=lambda kv: repr(kv[0]))):
        assert target.node is not None
        chunk = max(1, -(-len(lines) // files_per_target))
        for part in range(0, len(lines), chunk):
            name = event_file_name(target.node, base_ns + n * 1000 + part, compressed=compress)
            body = b"\n".join(lines[part : part + chunk]) + b"\n"
            if compress:
                body = gzip.compress(body)
            if target.job is None:
                key = layout.node_events_key(cluster, target.session, target.node, name)
            else:
                key = layout.job_events_key(cluster, target.session, target.node, target.job, name)
            store.put_bytes(key, body)
            keys.append(key)
    return keys


def write_logs(store: ObjectStore, layout: KeyLayout, cluster: ClusterRef, session: str, node_id: str) -> int:
    """Upload session A's ``logs/`` tree under the node; returns the file count."""
    count = 0
    with tarfile.open(SAMPLES / "session-logs-sample.tar.gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            parts = member.name.split("/")
            if len(parts) < 3 or parts[1] != "logs":
                continue
            fh = tar.extractfile(member)
            assert fh is not None
            store.put_bytes(layout.log_key(cluster, session, node_id, "/".join(parts[2:])), fh.read())
            count += 1
    return count


def write_endpoints(
    store: ObjectStore, layout: KeyLayout, cluster: ClusterRef, session: str, endpoints: dict[str, str] | None = None
) -> None:
    for uri, file_name in (endpoints or SESSION_A_ENDPOINTS).items():
        store.put_bytes(layout.endpoint_key(cluster, session, uri), (API / file_name).read_bytes())


def write_sample_session(
    store: ObjectStore,
    layout: KeyLayout,
    cluster: ClusterRef | None = None,
    *,
    run: str = RUN_A,
    logs: bool = True,
    endpoints: bool = True,
    compress: bool = False,
    files_per_target: int = 1,
) -> StoredSample:
    """Session A (or B) stored completely: marker, events, logs, endpoint snapshots."""
    cluster = cluster or ClusterRef("default", "raycluster-demo")
    events = load_events(run)
    session = session_of(events)
    node = head_node_of(events)
    write_events(store, layout, cluster, events, files_per_target=files_per_target, compress=compress)
    if logs and run == RUN_A:
        write_logs(store, layout, cluster, session, node)
    if endpoints and run == RUN_A:
        write_endpoints(store, layout, cluster, session)
    store.put_bytes(layout.marker_key(cluster, session), b"")
    return StoredSample(
        cluster=cluster, session=session, node_id=node, session_prefix=layout.session_prefix(cluster, session)
    )

"""A Flask app over a local store holding session A (``write_sample_session``), with a
fake :class:`LiveDirectory`: the world of the view tests (/clusters, /sessions/...,
logs, endpoints, access control, the CLI's ``open``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.config import ServerConfig
from runtime.server.live.discovery import LiveCluster, LiveDirectory, LiveDiscoveryError, LiveListing
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import RAYCLUSTER, ClusterRef, KeyLayout
from tests.support.sample_session import StoredSample, write_sample_session

DEMO = ClusterRef("default", "raycluster-demo")
OLDER = "session_2026-11-01_08-00-00_000001_1"
JOB_CLUSTER = ClusterRef("team-a", "rayjob-nightly-x7k2p", "rayjob", "rayjob-nightly")
JOB_SESSION = "session_2026-10-05_12-30-00_123456_7"


@dataclass
class FakeLive(LiveDirectory):
    """An in-memory LiveDirectory; ``fail`` makes lookups raise, ``available=False``
    makes listings report an outage."""

    clusters: list[LiveCluster] = field(default_factory=list)
    available: bool = True
    fail: bool = False

    def list_clusters(self) -> LiveListing:
        if not self.available:
            return LiveListing([], available=False, error="forbidden")
        return LiveListing(list(self.clusters))

    def get(self, namespace: str, name: str) -> LiveCluster | None:
        if self.fail:
            raise LiveDiscoveryError("API server unreachable")
        return next((c for c in self.clusters if (c.namespace, c.name) == (namespace, name)), None)

    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        if self.fail:
            raise LiveDiscoveryError("API server unreachable")
        if kind == RAYCLUSTER:
            return self.get(namespace, name)
        return next(
            (c for c in self.clusters if c.namespace == namespace and (c.owner_kind, c.owner_name) == (kind, name)),
            None,
        )


def live_cluster(
    namespace: str = "default", name: str = "raycluster-demo", owner: tuple[str, str] = ("", "")
) -> LiveCluster:
    return LiveCluster(
        namespace=namespace,
        name=name,
        owner_kind=owner[0] or RAYCLUSTER,
        owner_name=owner[1],
        created_at=datetime(2026, 11, 22, 3, 0, 0, tzinfo=UTC),
        base_url="http://127.0.0.1:9",
    )


def server_config(root: Path, **extra: str) -> ServerConfig:
    storage = StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True)
    return ServerConfig(storage=storage, cache_dir=root / "cache", freshness_seconds=3600, extra=dict(extra))


def stored_session_a(config: ServerConfig) -> tuple[ObjectStore, StoredSample]:
    store = open_store(config.storage)
    return store, write_sample_session(store, KeyLayout(""), DEMO)


def enter(client: FlaskClient, sample: StoredSample) -> None:
    answer = client.get(f"/enter_cluster/{sample.cluster.namespace}/raycluster/{sample.cluster.name}/{sample.session}")
    assert answer.status_code == 200, answer.get_data(as_text=True)


def app_world(root: Path, live: LiveDirectory, *, logs: bool = True) -> tuple[Flask, ObjectStore, StoredSample]:
    """Session A, an older session of the same cluster and a RayJob's cluster in another
    namespace (with a ``raylet.out`` each when ``logs``), served with ``live``."""
    config = server_config(root, sessions_ttl_seconds="0")
    store, sample = stored_session_a(config)
    layout = KeyLayout("")
    for cluster, session, line in ((DEMO, OLDER, b"older session\n"), (JOB_CLUSTER, JOB_SESSION, b"job line\n")):
        store.put_bytes(layout.marker_key(cluster, session), b"")
        if logs:
            store.put_bytes(layout.log_key(cluster, session, sample.node_id, "raylet.out"), line)
    return create_app(config, store=store, live=live), store, sample

"""A history-server app over a local bucket holding session A, for view tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.config import ServerConfig
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef
from tests.support.sample_session import StoredSample, write_sample_session


@dataclass
class SampleApp:
    app: Flask
    store: ObjectStore
    cache_dir: Path
    sample: StoredSample
    bare: StoredSample  # the same events without logs and endpoint snapshots

    def client(self, sample: StoredSample | None = None) -> FlaskClient:
        """A test client whose cookies select ``sample`` (session A by default)."""
        chosen = sample or self.sample
        client = self.app.test_client()
        for name, value in {
            "cluster_name": chosen.cluster.name,
            "cluster_namespace": chosen.cluster.namespace,
            "session_name": chosen.session,
            "owner_kind": chosen.cluster.owner_kind if chosen.cluster.owner_name else "",
            "owner_name": chosen.cluster.owner_name,
        }.items():
            client.set_cookie(name, value)
        return client


def sample_app(bucket: Path, cache_dir: Path) -> SampleApp:
    storage = StorageConfig(backend="local", local_dir=str(bucket), create_bucket=True)
    app = create_app(ServerConfig(storage=storage, cache_dir=cache_dir))
    store = open_store(storage)
    sample = write_sample_session(store, storage.layout)
    bare = write_sample_session(
        store, storage.layout, ClusterRef("default", "bare-cluster"), logs=False, endpoints=False
    )
    return SampleApp(app=app, store=store, cache_dir=cache_dir, sample=sample, bare=bare)

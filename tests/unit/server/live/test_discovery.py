"""Static, combined and "none" live directories, and choosing one from the config."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from runtime.server.config import LiveClusterURL
from runtime.server.live.directory import live_directory_from_config
from runtime.server.live.discovery import (
    CombinedLiveDirectory,
    LiveCluster,
    LiveDirectory,
    LiveDiscoveryError,
    LiveListing,
    NoLiveDirectory,
    StaticLiveDirectory,
    UnavailableLiveDirectory,
)
from tests.unit.server.live.servers import server_config

STATIC = [
    LiveClusterURL("default", "demo", "http://127.0.0.1:8265/"),
    LiveClusterURL("team-a", "other", "http://10.0.0.5:8265"),
]


def test_static_directory() -> None:
    created = datetime(2026, 11, 22, tzinfo=UTC)
    live = StaticLiveDirectory(STATIC, created_at=created)
    listing = live.list_clusters()
    assert listing.available and [c.key for c in listing.clusters] == ["default/demo", "team-a/other"]
    demo = live.get("default", "demo")
    assert demo == LiveCluster("default", "demo", "raycluster", "", created, "http://127.0.0.1:8265")
    assert demo.ready
    assert live.get("team-a", "demo") is None
    assert live.find_for_owner("default", "RayCluster", "demo") == demo
    assert live.find_for_owner("default", "rayjob", "demo") is None
    with pytest.raises(ValueError, match="unsupported resource kind"):
        live.find_for_owner("default", "pod", "demo")


class _Broken(LiveDirectory):
    def list_clusters(self) -> LiveListing:
        return LiveListing([], available=False, error="API down")

    def get(self, namespace: str, name: str) -> LiveCluster | None:
        raise LiveDiscoveryError("API down")

    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        raise LiveDiscoveryError("API down")

    def describe(self) -> str:
        return "broken"


def test_combined_static_first_and_errors_reported() -> None:
    live = CombinedLiveDirectory([StaticLiveDirectory(STATIC), _Broken()])
    listing = live.list_clusters()
    assert [c.key for c in listing.clusters] == ["default/demo", "team-a/other"]
    assert listing.available is False and listing.error == "broken: API down"
    assert live.get("default", "demo") is not None  # answered before the broken source is asked
    with pytest.raises(LiveDiscoveryError):
        live.get("default", "missing")


def test_none_and_unavailable() -> None:
    assert NoLiveDirectory().list_clusters() == LiveListing([], True, None)
    assert NoLiveDirectory().get("default", "x") is None
    unavailable = UnavailableLiveDirectory("no token")
    assert unavailable.list_clusters() == LiveListing([], False, "no token")
    assert unavailable.find_for_owner("default", "rayjob", "x") is None


def test_from_config(tmp_path: Path) -> None:
    outside = {"HOME": str(tmp_path)}
    assert isinstance(live_directory_from_config(server_config(tmp_path), env=outside), NoLiveDirectory)
    static = live_directory_from_config(server_config(tmp_path, live_clusters=tuple(STATIC)), env=outside)
    assert isinstance(static, StaticLiveDirectory)
    inside = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    off = live_directory_from_config(server_config(tmp_path, kubernetes="off"), env=inside)
    assert isinstance(off, NoLiveDirectory)
    both = live_directory_from_config(server_config(tmp_path, live_clusters=tuple(STATIC)), env=inside)
    assert isinstance(both, CombinedLiveDirectory)  # static + (unavailable) Kubernetes
    assert both.list_clusters().available is False
    with pytest.raises(LiveDiscoveryError, match="--kubernetes"):
        live_directory_from_config(server_config(tmp_path, kubernetes="sometimes"), env=outside)
    with pytest.raises(LiveDiscoveryError, match="--kubeconfig"):
        live_directory_from_config(
            server_config(tmp_path, kubernetes="kubeconfig", kubeconfig=str(tmp_path / "nope")), env=outside
        )

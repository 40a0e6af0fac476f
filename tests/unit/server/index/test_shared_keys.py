"""Shared-index keys and manifests: where they live, how they parse, what a reader refuses."""

from __future__ import annotations

import hashlib

import pytest

from runtime.server.index.schema import SCHEMA_VERSION
from runtime.server.index.shared_manifest import (
    SHARE_FORMAT,
    Manifest,
    ManifestError,
    download_problem,
    index_version,
    manifest_problem,
)
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.session_keys import IndexObject, parse_index_key, parse_key

SESSION = "session_2026-11-22_01-45-25_333080_9264"
FP = "ab" * 32
BARE = ClusterRef("team-a", "demo")
OWNED = ClusterRef("team-a", "demo-xyz", owner_kind="rayjob", owner_name="nightly")


@pytest.mark.parametrize("root", ["", "prod/ray"])
@pytest.mark.parametrize("cluster", [BARE, OWNED])
def test_keys_round_trip_and_stay_outside_what_kuberay_lists(root: str, cluster: ClusterRef) -> None:
    layout = KeyLayout(root)
    data, manifest = layout.index_keys(cluster, SESSION, index_version(), FP)
    base = (root + "/" if root else "") + "history-index/"
    assert data.startswith(base) and manifest.startswith(base)
    assert data.endswith(f"/{SESSION}/{index_version()}/{FP}.sqlite.zst")
    assert manifest.endswith(f"/{SESSION}/{index_version()}/{FP}.manifest.json")
    assert data.startswith(layout.index_session_prefix(cluster, SESSION))
    # KubeRay's Go server lists cluster-metadata/ and cluster-history/ only.
    for key in (data, manifest):
        assert not key.startswith((layout.history_prefix(), layout.markers_prefix()))
        assert parse_key(layout, key) is None  # never taken for a session's object
    assert parse_index_key(layout, data) == IndexObject(cluster, SESSION, index_version(), FP, manifest=False)
    assert parse_index_key(layout, manifest) == IndexObject(cluster, SESSION, index_version(), FP, manifest=True)


def test_the_version_names_share_format_and_schema() -> None:
    assert index_version() == f"v{SHARE_FORMAT}-s{SCHEMA_VERSION}"


@pytest.mark.parametrize(
    ("version", "fingerprint"),
    [("../v1", FP), ("v1/x", FP), ("V1", FP), ("v1", "AB" * 32), ("v1", "ab"), ("v1", FP + "/x"), ("v1", "../" + FP)],
)
def test_bad_versions_and_fingerprints_are_refused(version: str, fingerprint: str) -> None:
    with pytest.raises(InvalidKeyError):
        KeyLayout("").index_keys(BARE, SESSION, version, fingerprint)


@pytest.mark.parametrize(
    "key",
    [
        f"history-index/raycluster/team-a/demo/{SESSION}/v1-s1/{FP}.sqlite.zst.tmp",
        f"history-index/raycluster/team-a/demo/{SESSION}/v1-s1/{FP}.sqlite",
        f"history-index/raycluster/team-a/demo/{SESSION}/{FP}.sqlite.zst",
        f"history-index/raycluster/team-a/demo/{SESSION}/v1-s1/x/{FP}.sqlite.zst",
        f"history-index/raycluster/Team/demo/{SESSION}/v1-s1/{FP}.sqlite.zst",
        f"history-index/rayjob/team-a/demo/{SESSION}/v1-s1/{FP}.sqlite.zst",
        f"cluster-history/raycluster/team-a/demo/{SESSION}/v1-s1/{FP}.sqlite.zst",
        f"history-index/raycluster/team-a/demo/{SESSION}/v1-s1/{'AB' * 32}.manifest.json",
    ],
)
def test_keys_the_layout_does_not_build_are_not_index_objects(key: str) -> None:
    assert parse_index_key(KeyLayout(""), key) is None


def _manifest(**changes: object) -> Manifest:
    fields: dict[str, object] = {
        "share_format": SHARE_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "events_fingerprint": FP,
        "compression": "zstd",
        "sha256": hashlib.sha256(b"index").hexdigest(),
        "size": 5,
        "index_size": 50,
        "builder": "0.1.0",
    }
    fields.update(changes)
    return Manifest(**fields)  # type: ignore[arg-type]


def test_a_manifest_round_trips() -> None:
    manifest = _manifest()
    assert Manifest.parse(manifest.to_bytes()) == manifest
    assert manifest_problem(manifest, FP, 50) is None
    assert download_problem(manifest, hashlib.sha256(b"index").hexdigest(), 5, 50) is None


@pytest.mark.parametrize(
    ("raw", "what"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"share_format": 1}', "'schema_version'"),
        (_manifest().to_bytes().replace(b'"size":5', b'"size":"5"'), "'size'"),
        (_manifest().to_bytes().replace(b'"size":5', b'"size":true'), "'size'"),
        (b" " * 70000, "more than"),
    ],
)
def test_malformed_manifests_are_refused(raw: bytes, what: str) -> None:
    with pytest.raises(ManifestError, match=what):
        Manifest.parse(raw)


@pytest.mark.parametrize(
    ("manifest", "what"),
    [
        (_manifest(share_format=SHARE_FORMAT + 1), "share format"),
        (_manifest(schema_version=SCHEMA_VERSION + 1), "index schema"),
        (_manifest(events_fingerprint="cd" * 32), "fingerprint"),
        (_manifest(compression="gzip"), "compression"),
        (_manifest(sha256="XYZ"), "sha256"),
        (_manifest(size=0), "sizes"),
        (_manifest(index_size=-1), "sizes"),
        (_manifest(index_size=51), "more than this session's index may take (50 bytes)"),
        (_manifest(size=66_000, index_size=50), "cannot be a zstd index of 50 bytes"),
    ],
)
def test_foreign_manifests_are_refused(manifest: Manifest, what: str) -> None:
    problem = manifest_problem(manifest, FP, 50)
    assert problem is not None and what in problem


def test_downloads_that_differ_from_the_manifest_are_refused() -> None:
    manifest = _manifest()
    assert "4 bytes downloaded" in str(download_problem(manifest, manifest.sha256, 4, 50))
    wrong = hashlib.sha256(b"indeX").hexdigest()
    assert "differs" in str(download_problem(manifest, wrong, 5, 50))
    assert "decompressed to 49" in str(download_problem(manifest, manifest.sha256, 5, 49))

"""Export/import of one session between two local stores (real files), and the manifest rules."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import orjson
import pytest

from runtime.cli.archive import ArchiveError, Manifest, ManifestEntry, parse_manifest, sha256_hex
from runtime.cli.errors import CliError
from runtime.cli.export import find_session_objects, write_archive
from runtime.cli.importer import import_archive
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.sample_session import StoredSample, write_sample_session

CLUSTER = ClusterRef("default", "raycluster-demo")
PREFIX = "cluster-history/raycluster/default/raycluster-demo/session_2026-11-22_01-45-25_333080_9264/"
MARKER = "cluster-metadata/raycluster/default_raycluster-demo/session_2026-11-22_01-45-25_333080_9264"
SESSION = "session_2026-11-22_01-45-25_333080_9264"


def _store(path: Path, root: str = "") -> tuple[ObjectStore, KeyLayout]:
    config = StorageConfig(backend="local", local_dir=str(path), create_bucket=True, root_dir=root)
    return open_store(config), config.layout


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[ObjectStore, KeyLayout, StoredSample]:
    store, layout = _store(tmp_path_factory.mktemp("src"), root="history/v1")
    sample = write_sample_session(store, layout)
    write_sample_session(store, layout, ClusterRef("default", "other-cluster"), logs=False)
    return store, layout, sample


def _export(source: tuple[ObjectStore, KeyLayout, StoredSample], out: Path) -> Manifest:
    store, layout, _sample = source
    found = find_session_objects(
        store, layout, namespace="default", kind="raycluster", name="raycluster-demo", session="latest"
    )
    return write_archive(store, layout, found, out, quiet=True)


def _all(store: ObjectStore, prefix: str) -> dict[str, bytes]:
    return {info.key: store.get_bytes(info.key) for info in store.walk(prefix)}


def test_round_trip_into_another_root(source: tuple[ObjectStore, KeyLayout, StoredSample], tmp_path: Path) -> None:
    src, _layout, sample = source
    manifest = _export(source, tmp_path / "s.tar.gz")
    # only this session and its marker, keys relative to the root, sha256 of the stored bytes
    keys = [entry.key for entry in manifest.objects]
    assert keys[-1] == MARKER and all(k.startswith(PREFIX) for k in keys[:-1])
    assert len(keys) == len(list(src.walk(sample.session_prefix))) + 1
    first = manifest.objects[0]
    assert first.sha256 == sha256_hex(src.get_bytes(f"history/v1/{first.key}"))
    with tarfile.open(tmp_path / "s.tar.gz") as tar:
        names = tar.getnames()
    assert names[-1] == "manifest.json" and names[0].startswith("objects/" + PREFIX)

    dst, dst_layout = _store(tmp_path / "dst")
    result = import_archive(tmp_path / "s.tar.gz", dst, dst_layout, overwrite=False, quiet=True)
    assert len(result.written) == len(keys) and not result.unchanged
    original = {k.removeprefix("history/v1/"): v for k, v in _all(src, "history/v1/").items()}
    copied = _all(dst, "")
    assert copied == {k: v for k, v in original.items() if k.startswith(PREFIX) or k == MARKER}

    again = import_archive(tmp_path / "s.tar.gz", dst, dst_layout, overwrite=False, quiet=True)
    assert (len(again.written), len(again.overwritten), len(again.unchanged)) == (0, 0, len(keys))


def test_conflicts_refuse_then_overwrite(source: tuple[ObjectStore, KeyLayout, StoredSample], tmp_path: Path) -> None:
    manifest = _export(source, tmp_path / "s.tar")
    dst, layout = _store(tmp_path / "dst")
    import_archive(tmp_path / "s.tar", dst, layout, overwrite=False, quiet=True)
    victim = next(e for e in manifest.objects if e.size > 10)
    dst.put_bytes(victim.key, b"changed")
    fresh = manifest.objects[1].key
    dst.delete(fresh)
    with pytest.raises(CliError, match="with different content") as raised:
        import_archive(tmp_path / "s.tar", dst, layout, overwrite=False, quiet=True)
    assert victim.key in str(raised.value) and "--overwrite" in str(raised.value)
    assert not dst.exists(fresh)  # nothing written when refusing
    result = import_archive(tmp_path / "s.tar", dst, layout, overwrite=True, quiet=True)
    assert result.overwritten == [victim.key] and result.written == [fresh]
    assert sha256_hex(dst.get_bytes(victim.key)) == victim.sha256


def _flip_one_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x01])


def test_a_same_size_conflict_is_found_by_its_sha256(
    source: tuple[ObjectStore, KeyLayout, StoredSample], tmp_path: Path
) -> None:
    """The target holds an object of the right size with other bytes: a conflict, not 'unchanged'."""
    manifest = _export(source, tmp_path / "s.tar")
    dst, layout = _store(tmp_path / "dst")
    import_archive(tmp_path / "s.tar", dst, layout, overwrite=False, quiet=True)
    victim = next(e for e in manifest.objects if e.size > 10)
    dst.put_bytes(victim.key, _flip_one_byte(dst.get_bytes(victim.key)))
    assert dst.stat(victim.key).size == victim.size
    with pytest.raises(CliError, match=r"^1 object\(s\) already exist .* with different content") as raised:
        import_archive(tmp_path / "s.tar", dst, layout, overwrite=False, quiet=True)
    assert victim.key in str(raised.value)
    result = import_archive(tmp_path / "s.tar", dst, layout, overwrite=True, quiet=True)
    assert result.overwritten == [victim.key] and result.written == []
    assert sha256_hex(dst.get_bytes(victim.key)) == victim.sha256


def _rewrite(archive: Path, out: Path, change: dict[str, bytes | None]) -> None:
    """Copy ``archive`` replacing (or dropping, with None) the named members."""
    with tarfile.open(archive) as src, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name in change:
                replaced = change[member.name]
                if replaced is None:
                    continue
                data = replaced
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))


def test_damaged_archives_are_refused(source: tuple[ObjectStore, KeyLayout, StoredSample], tmp_path: Path) -> None:
    manifest = _export(source, tmp_path / "s.tar")
    dst, layout = _store(tmp_path / "dst")
    target = next(e for e in manifest.objects if e.size > 0)
    member = "objects/" + target.key
    original = source[0].get_bytes(f"history/v1/{target.key}")
    cases = {
        "tampered": ({member: b"evil"}, "bytes, the manifest says"),
        # Same size, one byte flipped: only the sha256 comparison can tell.
        "tampered-same-size": ({member: _flip_one_byte(original)}, "does not match its sha256"),
        "missing": ({member: None}, "missing"),
        "no-manifest": ({"manifest.json": None}, "no manifest.json"),
    }
    for name, (change, message) in cases.items():
        _rewrite(tmp_path / "s.tar", tmp_path / f"{name}.tar", change)
        with pytest.raises(ArchiveError, match=message):
            import_archive(tmp_path / f"{name}.tar", dst, layout, overwrite=False, quiet=True)
    assert not list(dst.walk(""))
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ArchiveError, match="not a tar"):
        import_archive(tmp_path / "junk.tar", dst, layout, overwrite=False, quiet=True)
    with pytest.raises(CliError, match="does not exist"):
        import_archive(tmp_path / "absent.tar", dst, layout, overwrite=False, quiet=True)


def test_unknown_session_names_it(source: tuple[ObjectStore, KeyLayout, StoredSample]) -> None:
    store, layout, _ = source
    with pytest.raises(CliError, match="no stored session 'latest' of raycluster default/nope"):
        find_session_objects(store, layout, namespace="default", kind="raycluster", name="nope", session="latest")


def _manifest(objects: list[dict[str, object]]) -> bytes:
    body = Manifest(CLUSTER, SESSION, objects=[ManifestEntry(PREFIX + "a", 1, "0" * 64)])
    decoded = orjson.loads(body.to_json())
    decoded["objects"] = objects
    return orjson.dumps(decoded)


@pytest.mark.parametrize(
    ("objects", "message"),
    [
        ([{"key": "cluster-history/raycluster/default/other/s/x", "size": 1, "sha256": "0" * 64}], "outside"),
        ([{"key": "../etc/passwd", "size": 1, "sha256": "0" * 64}], "objects\\[0\\].key"),
        ([{"key": PREFIX + "a", "size": -1, "sha256": "0" * 64}], "size"),
        ([{"key": PREFIX + "a", "size": 1, "sha256": "xyz"}], "sha256"),
        ([{"key": PREFIX + "a", "size": 1, "sha256": "0" * 64}] * 2, "listed twice"),
    ],
)
def test_manifest_rules(objects: list[dict[str, object]], message: str) -> None:
    with pytest.raises(ArchiveError, match=message):
        parse_manifest(_manifest(objects))


def test_manifest_round_trip_and_format() -> None:
    good = [{"key": MARKER, "size": 0, "sha256": sha256_hex(b"")}]
    parsed = parse_manifest(_manifest(good))
    assert parsed.cluster == CLUSTER and parsed.session == SESSION and parsed.objects[0].key == MARKER
    with pytest.raises(ArchiveError, match="not a ray-history export"):
        parse_manifest(b'{"format": "zip"}')
    with pytest.raises(ArchiveError, match="not valid JSON"):
        parse_manifest(b"{")

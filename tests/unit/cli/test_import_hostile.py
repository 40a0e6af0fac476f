"""``ray-history import`` given hostile (or merely unlucky) archives and targets: every key is
checked as the target will write it before anything is written, a manifest cannot inflate
without bound, a stored session never changes without ``--overwrite``, and a failed
``--overwrite`` leaves the session unlisted (never listed and half replaced), saying so."""

from __future__ import annotations

import hashlib
import io
import tarfile
import tracemalloc
from pathlib import Path

import orjson
import pytest

from runtime.cli import main as cli_main
from runtime.cli.archive import ArchiveError
from runtime.cli.errors import CliError
from runtime.cli.importer import MAX_MANIFEST_BYTES, import_archive
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.errors import PermanentStorageError
from runtime.storage.layout import KeyLayout

SESSION = "session_2026-11-22_01-45-25_333080_9264"
PREFIX = f"cluster-history/raycluster/default/raycluster-demo/{SESSION}/"
MARKER = f"cluster-metadata/raycluster/default_raycluster-demo/{SESSION}"
CAPITAL_MARKER = f"cluster-metadata/RayCluster/default_raycluster-demo/{SESSION}"
LOG_A = PREFIX + "ab12/logs/raylet.out"
LOG_B = PREFIX + "ab12/logs/worker.out"
EVENTS = PREFIX + "ab12/node_events/ab12-2026-11-22-01-1.jsonl"


def _manifest(objects: dict[str, bytes]) -> bytes:
    return orjson.dumps(
        {
            "format": "ray-history-session-export",
            "version": 1,
            "created_at": "",
            "source": "",
            "cluster": {"namespace": "default", "name": "raycluster-demo", "owner_kind": "raycluster"},
            "session": SESSION,
            "objects": [
                {"key": k, "size": len(v), "sha256": hashlib.sha256(v).hexdigest()} for k, v in objects.items()
            ],
        }
    )


def _archive(path: Path, objects: dict[str, bytes]) -> Path:
    """An archive as export writes it (members, then the manifest), of any keys."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [*((f"objects/{k}", v) for k, v in objects.items()), ("manifest.json", _manifest(objects))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _target(path: Path, root: str = "") -> tuple[ObjectStore, KeyLayout]:
    config = StorageConfig(backend="local", local_dir=str(path), create_bucket=True, root_dir=root)
    return open_store(config), config.layout


def _stored(path: Path, marker: str = MARKER) -> tuple[ObjectStore, KeyLayout]:
    """A target that stores (and lists) the session: two logs and its marker."""
    store, layout = _target(path)
    store.put_bytes(LOG_A, b"real raylet log")
    store.put_bytes(LOG_B, b"real worker log")
    store.put_bytes(marker, b"")
    return store, layout


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def _import_cli(archive: Path, target: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = ["import", str(archive), "--storage-backend=local", f"--local-storage-dir={target}", "--create-bucket"]
    try:
        code = cli_main.main([*argv, "-q", *extra])
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 1
    return code, capsys.readouterr().err


def test_an_object_and_a_folder_of_the_same_key_are_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``P/a`` and ``P/a/b`` (legal in a flat bucket) used to pass verification, write ``P/a``,
    then stop with an InvalidKeyError traceback on the local backend."""
    archive = _archive(tmp_path / "x.tar", {PREFIX + "a": b"one", PREFIX + "a/b": b"two", MARKER: b""})
    code, err = _import_cli(archive, tmp_path / "dst", capsys=capsys)
    assert code == 1 and "Traceback" not in err
    assert f"{PREFIX}a/b' lies under '{PREFIX}a'" in err and "nothing was written" in err
    assert _files(tmp_path / "dst") == []


def test_a_key_lying_under_a_stored_object_is_refused_before_writing(tmp_path: Path) -> None:
    """The target already holds ``P/a``: the archive's ``P/a/b`` cannot be written there."""
    store, layout = _target(tmp_path / "dst")
    store.put_bytes(PREFIX + "a", b"stored")
    archive = _archive(tmp_path / "x.tar", {PREFIX + "0": b"first", PREFIX + "a/b": b"two", MARKER: b""})
    with pytest.raises(CliError, match=r"an object local://.* already holds"):
        import_archive(archive, store, layout, overwrite=True, quiet=True)
    assert _files(tmp_path / "dst") == [PREFIX + "a"]


def test_a_key_too_long_under_the_storage_root_is_refused_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1024 bytes relative to the root passes the manifest's check; with --storage-root-dir
    prepended it is too long for storage, which used to be found after other objects were
    written (and raised a traceback)."""
    long_key = PREFIX + "ab12/logs/" + "y" * (1024 - len(PREFIX) - len("ab12/logs/"))
    assert len(long_key.encode()) == 1024
    archive = _archive(tmp_path / "x.tar", {PREFIX + "00/logs/a.log": b"first", long_key: b"x", MARKER: b""})
    code, err = _import_cli(archive, tmp_path / "dst", "--storage-root-dir=history/v1", capsys=capsys)
    assert code == 1 and "Traceback" not in err
    assert "under --storage-root-dir=history/v1 is refused" in err and "longer than 1024 bytes" in err
    assert _files(tmp_path / "dst") == []


def test_invalid_key_errors_are_clean_cli_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever still raises the storage layer's InvalidKeyError (a ValueError) ends in a
    message naming the key, exit 1, not a traceback."""
    from runtime.cli import transfer
    from runtime.storage.errors import InvalidKeyError

    def refuse(_args: object) -> int:
        raise InvalidKeyError(f"key {LOG_A!r} lies under an existing object")

    monkeypatch.setattr(transfer, "run_import", refuse)
    code, err = _import_cli(tmp_path / "x.tar", tmp_path / "dst", capsys=capsys)
    assert code == 1 and f"ray-history import: invalid key: key {LOG_A!r} lies under" in err


class _Spaces(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        self.left -= size
        return b" " * size


def test_a_manifest_bomb_is_refused_unread(tmp_path: Path) -> None:
    """A 1 MB .tar.gz whose manifest.json inflates to 256 MiB (an attachment to a bug report)
    used to be read whole: the import held gigabytes for a small file."""
    inflated = 256 * 1024 * 1024
    assert inflated > MAX_MANIFEST_BYTES
    archive = tmp_path / "bug-report.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = inflated
        tar.addfile(info, _Spaces(inflated))
    assert archive.stat().st_size < 2 * 1024 * 1024
    store, layout = _target(tmp_path / "dst")
    tracemalloc.start()
    try:
        with pytest.raises(ArchiveError, match=r"manifest\.json is 268435456 bytes, more than the 64 MiB"):
            import_archive(archive, store, layout, overwrite=False, quiet=True)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


@pytest.mark.parametrize("marker", [MARKER, CAPITAL_MARKER])
def test_an_archive_cannot_add_objects_to_a_stored_session_without_overwrite(tmp_path: Path, marker: str) -> None:
    """New keys were never conflicts: anyone's archive of the same session could merge forged
    task events into a stored, listed session without --overwrite (also when its marker's
    kind segment is capitalised)."""
    store, layout = _stored(tmp_path / "dst", marker)
    archive = _archive(tmp_path / "a.tar", {LOG_A: b"real raylet log", EVENTS: b'{"forged": true}\n', MARKER: b""})
    with pytest.raises(CliError, match=r"is already stored .* would add 1 object.*--overwrite") as raised:
        import_archive(archive, store, layout, overwrite=False, quiet=True)
    assert EVENTS in str(raised.value)
    assert not store.exists(EVENTS)
    result = import_archive(archive, store, layout, overwrite=True, quiet=True)
    assert result.written == [EVENTS] and store.exists(EVENTS)
    assert [info.key for info in store.walk("cluster-metadata/")] == [MARKER]


def test_an_identical_archive_of_a_stored_session_still_imports_as_unchanged(tmp_path: Path) -> None:
    """A subset of what is stored, byte for byte (a second import): nothing to refuse."""
    store, layout = _stored(tmp_path / "dst", CAPITAL_MARKER)
    archive = _archive(tmp_path / "a.tar", {LOG_A: b"real raylet log", MARKER: b""})
    result = import_archive(archive, store, layout, overwrite=False, quiet=True)
    assert (result.written, result.overwritten, len(result.unchanged)) == ([], [], 2)
    assert store.exists(CAPITAL_MARKER) and not store.exists(MARKER)


def test_a_failed_overwrite_leaves_the_session_unlisted_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload failing midway used to leave the session listed with one log replaced and
    the other not; now its marker goes first and the error names what was left and what
    to run. Running it again completes the import."""
    store, layout = _stored(tmp_path / "dst")
    archive = _archive(tmp_path / "a.tar", {LOG_A: b"new raylet log!", LOG_B: b"new worker log!", MARKER: b""})
    real_put = store.put_stream
    calls: list[str] = []

    def flaky_put(key, stream, size=None):  # type: ignore[no-untyped-def]
        calls.append(key)
        if len(calls) == 2:
            raise PermanentStorageError("quota exceeded", backend="local", bucket="x", key=key)
        return real_put(key, stream, size=size)

    monkeypatch.setattr(store, "put_stream", flaky_put)
    with pytest.raises(PermanentStorageError) as raised:
        import_archive(archive, store, layout, overwrite=True, quiet=True)
    assert not store.exists(MARKER)  # unlisted, not listed and half replaced
    assert store.get_bytes(LOG_A) == b"new raylet log!" and store.get_bytes(LOG_B) == b"real worker log"
    note = " ".join(raised.value.__notes__)
    assert "stopped after writing 1 of 3" in note and "no longer listed" in note and "again with --overwrite" in note

    monkeypatch.setattr(store, "put_stream", real_put)
    result = import_archive(archive, store, layout, overwrite=True, quiet=True)
    assert store.exists(MARKER) and store.get_bytes(LOG_B) == b"new worker log!"
    assert result.overwritten == [LOG_B] and result.written == [MARKER]


def test_the_partial_state_is_printed_by_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storage error during the upload prints the note under it (no traceback)."""
    _stored(tmp_path / "dst")
    archive = _archive(tmp_path / "a.tar", {LOG_A: b"new raylet log!", MARKER: b""})
    from runtime.storage.local import LocalStore

    def fail(self: LocalStore, key: str, stream: object, size: int | None) -> None:
        raise PermanentStorageError("disk full", backend="local", bucket="x", key=key)

    monkeypatch.setattr(LocalStore, "_put_stream", fail)
    code, err = _import_cli(archive, tmp_path / "dst", "--overwrite", capsys=capsys)
    assert code == 1 and "storage error" in err and "disk full" in err
    assert "is no longer listed" in err and "run the same import again with --overwrite" in err

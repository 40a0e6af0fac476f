"""The archive ``ray-history export -o FILE`` writes (job logs carry credentials), and the
marker it archives (as stored: its kind segment may be capitalised)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from runtime.cli import main as cli_main
from runtime.cli.importer import import_archive
from runtime.storage.config import StorageConfig, open_store

SESSION = "session_2026-11-22_01-45-25_333080_9264"
PREFIX = f"cluster-history/raycluster/default/raycluster-demo/{SESSION}/"
MARKER = f"cluster-metadata/raycluster/default_raycluster-demo/{SESSION}"
CAPITAL_MARKER = f"cluster-metadata/RayCluster/default_raycluster-demo/{SESSION}"


def _export(tmp_path: Path, out: Path, marker: str = MARKER) -> int:
    source = tmp_path / "src"
    with open_store(StorageConfig(backend="local", local_dir=str(source), create_bucket=True)) as store:
        store.put_bytes(PREFIX + "ab12/logs/worker.out", b"AWS_SECRET_ACCESS_KEY=hunter2\n")
        store.put_bytes(marker, b"")
    argv = ["export", "raycluster-demo", SESSION, "-o", str(out), "-q"]
    try:
        code = cli_main.main([*argv, "--storage-backend=local", f"--local-storage-dir={source}"])
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 1
    return code


def test_the_archive_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """The archive (job logs, often with credentials in them) used to be created with the
    umask's 0644: readable by every user of the machine."""
    old = os.umask(0o022)
    try:
        assert _export(tmp_path, tmp_path / "s.tar.gz") == 0
    finally:
        os.umask(old)
    assert (tmp_path / "s.tar.gz").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []
    with tarfile.open(tmp_path / "s.tar.gz") as tar:
        assert tar.getnames()[-1] == "manifest.json"


def test_a_planted_part_symlink_is_not_followed(tmp_path: Path) -> None:
    """``.FILE.part`` had a fixed name, opened following symlinks: another user of a shared
    directory could plant it and have the export overwrite any file the exporter may write."""
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (shared / ".s.tar.part").symlink_to(victim)
    assert _export(tmp_path, shared / "s.tar") == 0
    assert victim.read_text() == "precious\n"
    assert (shared / ".s.tar.part").is_symlink() and tarfile.is_tarfile(shared / "s.tar")


def test_a_failed_export_leaves_no_partial_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "missing-dir" / "s.tar"
    code = _export(tmp_path, out)
    assert code == 1 and "cannot write the archive" in capsys.readouterr().err
    assert not out.parent.exists()


def test_a_session_with_a_capitalised_marker_exports_and_imports(tmp_path: Path) -> None:
    """The server lists a session whose marker's kind segment is capitalised (and gc deletes
    it); export rebuilt the marker key in lower case and failed with 'not found'. The marker
    is read as stored and archived as the layout spells it, which any import accepts."""
    code = _export(tmp_path, tmp_path / "s.tar", CAPITAL_MARKER)
    assert code == 0
    with tarfile.open(tmp_path / "s.tar") as tar:
        assert "objects/" + MARKER in tar.getnames()
    config = StorageConfig(backend="local", local_dir=str(tmp_path / "dst"), create_bucket=True)
    with open_store(config) as target:
        result = import_archive(tmp_path / "s.tar", target, config.layout, overwrite=False, quiet=True)
        assert MARKER in result.written and target.exists(PREFIX + "ab12/logs/worker.out")

"""``python -m runtime.storage check`` on local storage: every step, the session count, the flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.storage.__main__ import main
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout

SESSION = "session_2026-11-22_01-45-25_333080_9264"


def _seed(root: Path) -> None:
    store = open_store(StorageConfig(backend="local", local_dir=str(root), create_bucket=True))
    layout = KeyLayout("")
    for cluster in (ClusterRef("team-a", "c"), ClusterRef("team-a", "d"), ClusterRef("team-b", "c")):
        store.put_bytes(layout.marker_key(cluster, SESSION), b"")


def test_every_step_passes_and_counts_every_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(tmp_path)
    assert main(["check", "--storage-backend=local", f"--local-storage-dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    for step in ("bucket reachable", "write", "read", "streamed write", "list", "delete", "history"):
        assert f"ok   {step}" in out, out
    assert "3 stored sessions\n" in out and out.endswith("All checks passed.\n")
    assert not any((tmp_path / "_selfcheck").rglob("probe*")), "the probes are deleted"


def test_namespace_counts_only_that_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(tmp_path)
    argv = ["check", "--storage-backend=local", f"--local-storage-dir={tmp_path}", "--namespace", "team-a"]
    assert main(argv) == 0
    assert "2 stored sessions of namespace team-a\n" in capsys.readouterr().out


@pytest.mark.parametrize("namespace", ["Team_A", "../x", ""])
def test_a_bad_namespace_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], namespace: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "--storage-backend=local", f"--local-storage-dir={tmp_path}", "--namespace", namespace])
    assert exit_info.value.code == 2
    assert "error: --namespace:" in capsys.readouterr().err

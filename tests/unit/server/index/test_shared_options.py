"""``--shared-index`` / ``SHARED_INDEX`` and ``--shared-index-container``: parsed, checked,
and refused with a message naming the flag."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.server.options import load_config


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """load_config() reconfigures the root logger; give the next test its own back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _base(tmp_path: Path) -> list[str]:
    (tmp_path / "store").mkdir(exist_ok=True)
    return ["--storage-backend=local", f"--local-storage-dir={tmp_path / 'store'}", f"--cache-dir={tmp_path / 'c'}"]


def test_read_is_the_default_and_the_env_sets_it(tmp_path: Path) -> None:
    assert load_config(_base(tmp_path), env={}).shared_index == "read"
    assert load_config(_base(tmp_path), env={"SHARED_INDEX": "write"}).shared_index == "write"
    assert load_config([*_base(tmp_path), "--shared-index=off"], env={}).shared_index == "off"


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--shared-index=sometimes"], {}, "--shared-index=sometimes"),
        (["--shared-index=read"], {"SHARED_INDEX": "write"}, "contradicts SHARED_INDEX=write"),
        (["--shared-index-container=indexes"], {}, "--shared-index-container=indexes: only for"),
        (["--shared-index-container=Bad_Name"], {}, "--shared-index-container=Bad_Name"),
        ([], {"SHARED_INDEX_CONTAINER": "indexes"}, "--shared-index-container=indexes"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str], named: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        load_config([*_base(tmp_path), *argv], env=env)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err

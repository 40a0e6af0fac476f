"""Each setting is declared once (runtime/common/settings.py); the parsers, the
environment reading and the README's tables all come from that declaration."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from runtime.collector import settings as collector_settings
from runtime.collector.config import build_parser as collector_parser
from runtime.common.settings import Setting, SettingError, add_arguments, markdown_table
from runtime.common.validators import positive_int, tcp_port
from runtime.server import settings as server_settings
from runtime.server.options import build_parser as server_parser

README = Path(__file__).resolve().parents[2] / "README.md"
TABLES = {"collector": collector_settings.table, "server": server_settings.table}


@pytest.mark.parametrize(
    ("settings", "parser"),
    [(collector_settings.SETTINGS, collector_parser), (server_settings.SETTINGS, server_parser)],
)
def test_every_declared_flag_is_parsed_and_every_visible_one_documented(
    settings: tuple[Setting[Any], ...], parser: Any
) -> None:
    assert "--help" in parser().format_help()  # every help text renders (argparse %-formats them)
    flags = {option for action in parser()._actions for option in action.option_strings}
    rendered = markdown_table(settings)
    for setting in settings:
        if setting.flag:
            assert setting.flag in flags
        if not setting.hidden:
            assert f"`{setting.flag or setting.env}" in rendered


@pytest.mark.parametrize("binary", sorted(TABLES))
def test_readme_holds_the_generated_tables(binary: str) -> None:
    assert TABLES[binary]() in README.read_text()


def _parser(*settings: Setting[Any]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="demo")
    add_arguments(parser, settings)
    return parser


def test_flag_and_environment_must_agree_and_errors_name_the_setting() -> None:
    workers = Setting("--workers", "WORKERS", positive_int, 2, "parallel uploads")
    parser = _parser(workers)
    assert workers.read(parser.parse_args([]), {}) == 2
    assert workers.read(parser.parse_args(["--workers=3"]), {"WORKERS": "03"}) == 3  # equal once parsed
    assert workers.read(None, {"WORKERS": " 4 "}) == 4
    with pytest.raises(SettingError, match="--workers=3 contradicts WORKERS=4; set only one"):
        workers.read(parser.parse_args(["--workers=3"]), {"WORKERS": "4"})
    with pytest.raises(SettingError, match="WORKERS=0: must be a positive integer"):
        workers.read(None, {"WORKERS": "0"})


def test_flag_only_settings_are_checked_while_parsing(capsys: pytest.CaptureFixture[str]) -> None:
    port = Setting("--port", None, tcp_port, 8080, "listen port")
    assert _parser(port).parse_args(["--port=81"]).port == 81
    with pytest.raises(SystemExit) as exited:
        _parser(port).parse_args(["--port=70000"])
    assert exited.value.code == 2
    assert "demo: error: --port=70000: must be a TCP port (1-65535)" in capsys.readouterr().err

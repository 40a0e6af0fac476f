"""Each setting is declared once (runtime/common/settings.py); the parsers, the
environment reading and the documentation's reference tables all come from that
declaration. The docs site's generated tables (docs/hooks/generated.py) are checked
here as well as by the strict docs build, so docs and code cannot drift."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from runtime.collector import settings as collector_settings
from runtime.collector.config import build_parser as collector_parser
from runtime.common.settings import Setting, SettingError, add_arguments, markdown_table
from runtime.common.validators import positive_int, tcp_port
from runtime.server import settings as server_settings
from runtime.server.options import build_parser as server_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _load_generated() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generated", DOCS / "hooks" / "generated.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generated = _load_generated()


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


def _committed_blocks() -> dict[str, list[tuple[Path, str]]]:
    found: dict[str, list[tuple[Path, str]]] = {}
    for page in generated.pages():
        for name, body in generated.blocks(page.read_text(encoding="utf-8")):
            found.setdefault(name, []).append((page, body))
    return found


def test_the_reference_pages_hold_the_binaries_own_tables() -> None:
    """What `historyserver`/`collector` declare is what the reference page shows, verbatim."""
    flags = (DOCS / "reference" / "flags.md").read_text(encoding="utf-8")
    assert collector_settings.table() in flags
    assert server_settings.table() in flags


@pytest.mark.parametrize("name", sorted(generated.GENERATORS))
def test_every_generated_block_is_in_the_docs_and_current(name: str) -> None:
    blocks = _committed_blocks().get(name)
    assert blocks, f"no page holds <!-- generated: {name} -->"
    expected = generated.GENERATORS[name]()
    for page, body in blocks:
        assert body == expected, (
            f"{page.relative_to(REPO)}: generated block {name} is stale; run .venv/bin/python docs/hooks/generated.py"
        )


def test_no_page_names_an_unknown_generator() -> None:
    assert set(_committed_blocks()) <= set(generated.GENERATORS)


def test_the_docs_build_refuses_a_stale_block() -> None:
    from mkdocs.exceptions import PluginError

    class Page:
        class file:  # noqa: N801 - mimics mkdocs' page.file
            src_path = "reference/flags.md"

    current = (
        "<!-- generated: storage-flags -->\n" + generated.GENERATORS["storage-flags"]() + "<!-- end generated -->\n"
    )
    assert generated.on_page_markdown(current, Page(), None, None) == current
    drifted = current.replace("key prefix inside the bucket", "the bucket's prefix")
    with pytest.raises(PluginError, match="storage-flags differ from the code"):
        generated.on_page_markdown(drifted, Page(), None, None)
    assert generated.refresh(drifted) == current


_READERS = ("get", "require", "choice", "positive_int", "dns_label", "dns_subdomain", "section")


def _keys_the_stack_readers_accept() -> set[str]:
    """Every key literal the stack configuration readers look up (``s.get("nodeCount", ...)``,
    ``_read_section(root, "cluster", ...)``): the keys `pulumi up` accepts."""
    keys: set[str] = set()
    for module in ("config.py", "config_access.py", "config_values.py"):
        for node in ast.walk(ast.parse((REPO / "infra" / module).read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr in _READERS:
                literal = node.args[0] if node.args else None
            elif isinstance(node.func, ast.Name) and node.func.id == "_read_section" and len(node.args) > 1:
                literal = node.args[1]
            else:
                continue
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                keys.add(literal.value)
        keys |= _keys_read_in_loops(module)
    return keys


def _keys_read_in_loops(module: str) -> set[str]:
    """``for name, reader in (("gcp", _gcp), ...): _read_section(root, name, reader)``."""
    keys: set[str] = set()
    for node in ast.walk(ast.parse((REPO / "infra" / module).read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple)):
            continue
        if "_read_section" not in ast.unparse(node):
            continue
        for item in node.iter.elts:
            first = item.elts[0] if isinstance(item, ast.Tuple) and item.elts else item
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                keys.add(first.value)
    return keys


def test_the_stack_reference_lists_exactly_the_keys_the_program_reads() -> None:
    documented = {key.rsplit(".", 1)[-1] for key, _, _ in generated.stack_rows()}
    accepted = _keys_the_stack_readers_accept()
    assert accepted - documented == set(), "read by infra/config*.py but not in the stack settings reference"
    assert documented - accepted == set(), "in the stack settings reference but read by no infra/config*.py reader"
    for key, _, meaning in generated.stack_rows():
        assert meaning.strip(), key


def test_the_readme_is_a_front_page_linking_into_the_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / target).is_file(), f"README links to a missing {target}"


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

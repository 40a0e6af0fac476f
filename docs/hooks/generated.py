"""The reference tables of the docs, generated from the code that defines them.

A page holds each table between two markers::

    <!-- generated: collector-settings -->
    | flag | ... |
    <!-- end generated -->

The tables are committed (so the Markdown reads on its own, on GitHub too), and both
``mkdocs build`` (this file is a hook in mkdocs.yml) and tests/unit/test_settings_docs.py
fail when one differs from what the code generates now: docs and code cannot drift.
``python docs/hooks/generated.py`` rewrites the stale blocks in place.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

log = logging.getLogger("mkdocs.hooks.generated")

BLOCK = re.compile(r"<!-- generated: (?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- end generated -->", re.DOTALL)


# --- tables ----------------------------------------------------------------------------------------


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _argparse_rows(parser: argparse.ArgumentParser) -> Iterator[str]:
    formatter = argparse.HelpFormatter(parser.prog)
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.option_strings:
            names = ", ".join(f"`{option}`" for option in action.option_strings)
            if action.nargs != 0 and action.metavar:
                names += f" `{action.metavar}`"
        else:
            names = f"`{action.metavar or action.dest}` (argument)"
        default = action.default
        if default in (None, False, argparse.SUPPRESS) or action.required:
            shown = "required" if action.required else ""
        else:
            shown = f"`{default}`"
        help_text = formatter._expand_help(action) if action.help else ""
        yield f"| {names} | {_cell(shown)} | {_cell(help_text)} |"


def argparse_table(parser: argparse.ArgumentParser) -> str:
    """Every visible option of ``parser`` (sub-commands aside) as a Markdown table."""
    lines = ["| option | default | meaning |", "|---|---|---|", *_argparse_rows(parser)]
    return "\n".join(lines) + "\n"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def collector_settings() -> str:
    from runtime.collector import settings

    return settings.table()


def server_settings() -> str:
    from runtime.server import settings

    return settings.table()


def storage_flags() -> str:
    from runtime.storage.config import add_storage_arguments

    parser = argparse.ArgumentParser(prog="storage", add_help=False)
    add_storage_arguments(parser)
    return argparse_table(parser)


def cli_commands() -> str:
    """One section per ``ray-history`` command, the quickstart's included."""
    from runtime.cli.main import build_parser

    commands = _subparsers(build_parser(["quickstart"]))
    parts = []
    for name, parser in commands.items():
        summary = parser.description or ""
        parts.append(
            f"## `ray-history {name}`\n\n" + (f"{_cell(summary)}\n\n" if summary else "") + argparse_table(parser)
        )
    return "\n".join(parts)


def quickstart_flags() -> str:
    from runtime.quickstart.options import add_arguments

    parser = argparse.ArgumentParser(prog="python -m runtime.quickstart", add_help=False)
    add_arguments(parser)
    return argparse_table(parser)


def _metric_rows(metrics: object) -> Iterator[str]:
    from prometheus_client.metrics import MetricWrapperBase

    for metric in vars(metrics).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        # The exposition appends _total to counters; name what a query uses.
        name = metric._name + ("_total" if metric._type == "counter" and not metric._name.endswith("_total") else "")
        labels = ", ".join(f"`{label}`" for label in metric._labelnames)
        yield f"| `{name}` | {metric._type} | {labels} | {_cell(metric._documentation)} |"


def _metrics_table(metrics: object) -> str:
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|", *_metric_rows(metrics)]
    return "\n".join(lines) + "\n"


def collector_metrics() -> str:
    from runtime.collector.metrics import CollectorMetrics

    return _metrics_table(CollectorMetrics())


def server_metrics() -> str:
    from runtime.server.metrics import ServerMetrics

    return _metrics_table(ServerMetrics())


# --- stack settings ----------------------------------------------------------------------------------

#: Where a dataclass field's key is not its name in camelCase.
_KEY_OF_FIELD = {("access", "modes"): "auth", ("access", "front_door"): "trustedHeader"}
#: Fields the program derives from other keys: not settings of their own.
_DERIVED = {("access.ingress", "iap")}  # from access.trustedHeader.kind: iap
#: Fields whose class documents them outside an ``Attributes:`` list.
_EXTRA_DOCS = {
    ("access.trustedHeader", "kind"): "the front door: ``iap`` (GKE) or ``alb`` (AWS).",
    ("access.trustedHeader", "iap_audience"): "``iap``: the expected audience "
    "(``/projects/NUMBER/global/backendServices/ID``).",
    ("access.trustedHeader", "alb_arn"): "``alb``: the load balancer's ARN.",
}


def _settings_classes() -> dict[str, type]:
    """Every dataclass of the loaded ``infra`` modules, by name: annotations name classes that
    their module imports only for type checking."""
    import infra.config  # noqa: F401 - loads every module the readers build settings from

    return {
        name: value
        for module_name, module in list(sys.modules.items())
        if module_name.startswith("infra.")
        for name, value in vars(module).items()
        if isinstance(value, type) and dataclasses.is_dataclass(value)
    }


def _nested(annotation: object, classes: dict[str, type]) -> type | None:
    """The settings class a field holds (``X`` or ``X | None``), if it is one."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    for name in re.split(r"\s*\|\s*", text):
        if name in classes:
            return classes[name]
    return None


def _stack_sections() -> list[tuple[str, type]]:
    """(key path, settings class) of every section, found by walking the typed settings
    from :class:`infra.config_model.StackConfig` down (a new section is found, not listed)."""
    from infra.config_model import StackConfig

    classes = _settings_classes()
    sections: list[tuple[str, type]] = []

    def walk(path: str, cls: type) -> None:
        sections.append((path, cls))
        for field in dataclasses.fields(cls):
            nested = _nested(field.type, classes)
            if nested is not None:
                key = _KEY_OF_FIELD.get((path, field.name), _camel(field.name))
                walk(f"{path}.{key}" if path else key, nested)

    walk("", StackConfig)
    return sections


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` list of a Google-style class docstring: name -> text."""
    doc = cls.__doc__ or ""
    if "Attributes:" not in doc:
        return {}
    docs: dict[str, str] = {}
    current: list[str] = []
    for line in doc.split("Attributes:", 1)[1].splitlines():
        # "name: text", or "a, b, c: text" for fields described together.
        match = re.match(r"^\s{8}(\w+(?:, \w+)*): (.*)$", line)
        if match:
            current = match.group(1).split(", ")
            for name in current:
                docs[name] = match.group(2).strip()
        elif current and line.strip():
            for name in current:
                docs[name] += " " + line.strip()
    return docs


def _rst_to_md(text: str) -> str:
    return text.replace("``", "`")


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        if dataclasses.is_dataclass(value):
            return "see below"
    else:
        return "required"
    if value in ("", None, (), {}):
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(str(item) for item in value) + "]`"
    return f"`{value}`"


def stack_rows() -> list[tuple[str, str, str]]:
    """(key, default, meaning) of every stack setting, from the dataclasses' docstrings."""
    sections = _stack_sections()
    section_paths = {path for path, _ in sections}
    summaries = {path: (cls.__doc__ or "").strip().splitlines()[0] for path, cls in sections}
    rows = []
    for path, cls in sections:
        docs = _attribute_docs(cls)
        for field in dataclasses.fields(cls):
            if (path, field.name) in _DERIVED:
                continue
            key = _KEY_OF_FIELD.get((path, field.name), _camel(field.name))
            full = f"{path}.{key}" if path else key
            # A field holding a whole section is described by that section's class.
            text = docs.get(field.name) or _EXTRA_DOCS.get((path, field.name)) or summaries.get(full)
            if text is None:
                raise LookupError(f"{cls.__name__}.{field.name} ({full}) has no documentation")
            default = "see below" if full in section_paths else _default(field)
            rows.append((full, default, _rst_to_md(text)))
    return rows


def stack_settings() -> str:
    lines = ["| key (`ray-history-server:`...) | default | meaning |", "|---|---|---|"]
    lines += [f"| `{key}` | {_cell(default)} | {_cell(meaning)} |" for key, default, meaning in stack_rows()]
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "collector-settings": collector_settings,
    "server-settings": server_settings,
    "storage-flags": storage_flags,
    "cli-commands": cli_commands,
    "quickstart-flags": quickstart_flags,
    "collector-metrics": collector_metrics,
    "server-metrics": server_metrics,
    "stack-settings": stack_settings,
}


# --- checking and refreshing pages ---------------------------------------------------------------------


def _importable() -> None:
    """Put the repository on sys.path: mkdocs runs from .venv/bin and restores sys.path after
    loading a hook, and ``infra`` is not an installed package."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def blocks(markdown: str) -> Iterator[tuple[str, str]]:
    """(name, committed body) of each generated block in a page."""
    for match in BLOCK.finditer(markdown):
        yield match.group("name"), match.group("body")


def stale(markdown: str) -> list[str]:
    """Names of the blocks whose committed body is not what the code generates now."""
    _importable()
    problems = []
    for name, body in blocks(markdown):
        if name not in GENERATORS:
            problems.append(f"{name} (no such generator)")
        elif body != GENERATORS[name]():
            problems.append(name)
    return problems


def refresh(markdown: str) -> str:
    _importable()

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        return f"<!-- generated: {name} -->\n{GENERATORS[name]()}<!-- end generated -->"

    return BLOCK.sub(replace, markdown)


def pages() -> Iterable[Path]:
    return sorted(DOCS.rglob("*.md"))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs hook: refuse to build a page whose generated tables are stale."""
    from mkdocs.exceptions import PluginError

    problems = stale(markdown)
    if problems:
        raise PluginError(
            f"{page.file.src_path}: generated block(s) {', '.join(problems)} differ from the code; "
            "run `.venv/bin/python docs/hooks/generated.py`"
        )
    return markdown


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in pages():
        text = path.read_text(encoding="utf-8")
        if stale(text):
            path.write_text(refresh(text), encoding="utf-8")
            log.info("rewrote %s", path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One declaration per setting: flag, environment variable, parser, default, help.

A :class:`Setting` generates its argparse flag (:func:`add_arguments`), reads its
value from the flag or the environment (:meth:`Setting.read`, the one merge every
binary uses) and its row of the documentation table (:func:`markdown_table`).

The merge, as the collector has always done it: a flag and an environment variable
that both carry a value must agree (after parsing), else :class:`SettingError`
names both; values that do not parse are errors too, never silently ignored. Every
error reads ``--flag=value: problem`` or ``ENV_NAME=value: problem``.

Three kinds of setting, told apart by what is declared:

* flag and environment variable: the flag stays a string until :meth:`Setting.read`
  compares it with the environment;
* environment only (``flag=None``): read by :meth:`Setting.read`;
* flag only (``env=None``, or ``env_fallback_elsewhere``): parsed while argparse
  reads the command line, so ``args.<dest>`` is already typed and a bad value exits
  2 from ``parse_args`` with the same message shape.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

T = TypeVar("T")


class SettingError(ValueError):
    """A value that does not parse, or a flag and an environment variable that
    disagree; the message names the flag or variable and the value."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One setting of one binary.

    Attributes:
        flag: ``--name`` (None: environment only).
        env: the environment variable (None: flag only).
        parse: text -> value; raises ValueError saying what is wrong.
        default: the value when neither is set.
        help: what it means (one line, Markdown backticks allowed).
        shown_default: the default as the docs show it (Markdown), when ``default``
            does not say it well (``5m`` rather than ``300.0``, ``required``).
        aliases: older spellings of the flag, accepted and documented.
        group: the ``--help`` section.
        hidden: accepted but not listed (compatibility flags that mean nothing here).
        metavar: how ``--help`` and the docs show the value.
        repeat: the flag may be given several times; the value is a list.
        switch: a flag without a value (``store_true``).
        env_fallback_elsewhere: the variable is read where the value is used (logging
            is set up before anything else) and the flag simply wins: no comparison.
        same: how two parsed values are compared (default ``==``).
    """

    flag: str | None
    env: str | None
    parse: Callable[[str], T]
    default: T
    help: str
    shown_default: str | None = None
    aliases: tuple[str, ...] = ()
    group: str = ""
    hidden: bool = False
    metavar: str | None = None
    repeat: bool = False
    switch: bool = False
    env_fallback_elsewhere: bool = False
    same: Callable[[T, T], bool] | None = None

    @property
    def dest(self) -> str:
        """The ``argparse.Namespace`` attribute."""
        if self.flag:
            return self.flag.lstrip("-").replace("-", "_")
        return str(self.env).lower()

    @property
    def parsed_by_argparse(self) -> bool:
        return self.flag is not None and (self.env is None or self.env_fallback_elsewhere)

    def shown(self) -> str:
        """The default, as Markdown."""
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None or self.default == []:
            return "none"
        if isinstance(self.default, bool):
            return "`true`" if self.default else "`false`"
        return f"`{self.default}`"

    def read(self, args: argparse.Namespace | None, env: Mapping[str, str]) -> T:
        """The value from the flag (in ``args``) or the environment, else the default."""
        raw = getattr(args, self.dest, None) if (args is not None and self.flag) else None
        if self.parsed_by_argparse:
            return self.default if raw is None else raw
        flag_text = raw.strip() if isinstance(raw, str) and raw.strip() else None
        env_text = (env.get(self.env, "").strip() or None) if self.env else None
        flag_value = self._convert(flag_text, str(self.flag)) if flag_text is not None else None
        env_value = self._convert(env_text, str(self.env)) if env_text is not None else None
        if flag_value is not None and env_value is not None:
            agree = self.same(flag_value, env_value) if self.same else flag_value == env_value
            if not agree:
                raise SettingError(f"{self.flag}={flag_text} contradicts {self.env}={env_text}; set only one")
        if flag_value is not None:
            return flag_value
        return env_value if env_value is not None else self.default

    def _convert(self, text: str, source: str) -> T:
        try:
            return self.parse(text)
        except ValueError as exc:
            raise SettingError(f"{source}={text}: {exc}") from exc


class Checked(argparse.Action):
    """Parses a flag-only setting while argparse reads the command line; a bad
    value exits 2 with ``--flag=value: problem`` (argparse's own ``type=`` would
    say ``argument --flag: ...`` in a different shape)."""

    def __init__(self, option_strings: Sequence[str], dest: str, parse: Callable[[str], Any], repeat: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(option_strings, dest, **kwargs)
        self.parse, self.repeat = parse, repeat

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        text = str(values)
        try:
            value = self.parse(text)
        except ValueError as exc:
            _fail(parser, f"{option_string}={text}: {exc}")
        if self.repeat:
            value = [*(getattr(namespace, self.dest, None) or []), value]
        setattr(namespace, self.dest, value)


def _fail(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.error(message)


def _plain(markdown: str) -> str:
    # argparse %-formats help strings: a literal "%" ("503 from 80 %") must be doubled.
    return markdown.replace("`", "").replace("%", "%%")


def _help(setting: Setting[Any]) -> str:
    if setting.hidden:
        return argparse.SUPPRESS
    where = f"env {setting.env}; " if setting.env else ""
    shown = _plain(setting.shown())
    return f"{_plain(setting.help)} ({where}{shown if shown == 'required' else 'default ' + shown})"


def add_arguments(parser: argparse.ArgumentParser, settings: Sequence[Setting[Any]]) -> None:
    """Add every flag of ``settings``, in sections named by their ``group``."""
    groups: dict[str, Any] = {"": parser}
    for setting in settings:
        if setting.flag is None:
            continue
        if setting.group not in groups:
            groups[setting.group] = parser.add_argument_group(setting.group)
        target = groups[setting.group]
        names = (setting.flag, *setting.aliases)
        common: dict[str, Any] = {"dest": setting.dest, "help": _help(setting)}
        if setting.metavar:
            common["metavar"] = setting.metavar
        if setting.switch:
            target.add_argument(*names, action="store_true", **common)
        elif setting.parsed_by_argparse:
            default = list(setting.default) if setting.repeat else setting.default
            target.add_argument(
                *names, action=Checked, parse=setting.parse, repeat=setting.repeat, default=default, **common
            )
        else:  # compared with the environment by Setting.read
            target.add_argument(*names, **common)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(settings: Sequence[Setting[Any]], *, env_column: bool = True) -> str:
    """The settings as a Markdown table (hidden ones left out), for the README."""
    if env_column:
        lines = ["| flag | environment variable | default | meaning |", "|---|---|---|---|"]
    else:
        lines = ["| flag | default | meaning |", "|---|---|---|"]
    for setting in settings:
        if setting.hidden:
            continue
        flag = "—"
        if setting.flag:
            flag = f"`{setting.flag}{' ' + setting.metavar if setting.metavar else ''}`"
            if setting.aliases:
                flag += " (older name " + ", ".join(f"`{alias}`" for alias in setting.aliases) + ")"
        env = f"`{setting.env}`" if setting.env else "—"
        if env_column:
            lines.append(f"| {flag} | {env} | {_cell(setting.shown())} | {_cell(setting.help)} |")
        else:
            if setting.env:
                flag += f" (env {env})"
            lines.append(f"| {flag} | {_cell(setting.shown())} | {_cell(setting.help)} |")
    return "\n".join(lines) + "\n"

"""Parsers for flag and environment values, shared by every entry point.

Each raises ValueError saying only what is wrong ("must be a TCP port (1-65535)");
the caller names the setting and the value, always in one shape:
``--flag=value: problem`` or ``ENV_NAME=value: problem`` (see
:mod:`runtime.common.settings`), so every binary words a bad value the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.common.durations import parse_duration

#: Go's ``strconv.ParseBool`` words plus yes/no/on/off (what KubeRay's env values use).
TRUE_WORDS = frozenset({"1", "t", "true", "y", "yes", "on"})
FALSE_WORDS = frozenset({"0", "f", "false", "n", "no", "off"})


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("must be a whole number") from None


def positive_int(text: str) -> int:
    number = whole_number(text)
    if number <= 0:
        raise ValueError("must be a positive integer")
    return number


def tcp_port(text: str) -> int:
    number = whole_number(text)
    if not 0 < number < 65536:
        raise ValueError("must be a TCP port (1-65535)")
    return number


def boolean(text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError("expected true or false")


def duration(*, allow_zero: bool = False) -> Callable[[str], float]:
    """A Go duration (``30s``, ``5m``, a bare number of seconds) that must be > 0
    (or >= 0 with ``allow_zero``)."""

    def parse(text: str) -> float:
        seconds = parse_duration(text)
        if seconds < 0 or (seconds == 0 and not allow_zero):
            raise ValueError(f"must be {'>= 0' if allow_zero else '> 0'}")
        return seconds

    return parse


positive_duration = duration()


def positive_seconds(text: str) -> float:
    """A plain number of seconds (``2.5``), > 0."""
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError("must be a number of seconds") from None
    if seconds <= 0:
        raise ValueError("must be > 0")
    return seconds


def choice(*allowed: str) -> Callable[[str], str]:
    """One of ``allowed`` (exact spelling)."""

    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text

    return parse

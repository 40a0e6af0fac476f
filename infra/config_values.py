"""Reading the stack's configuration values: the typed readers and the section
walker :mod:`infra.config` (and :mod:`infra.config_access`) build the settings with.
Every error is a :class:`ConfigError` naming the offending ``ray-history-server:<key>``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import TypeVar

NAMESPACE = "ray-history-server"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

T = TypeVar("T")


class ConfigError(ValueError):
    """A stack configuration value is missing or invalid; the message names the key."""


def _key(path: str) -> str:
    return f"{NAMESPACE}:{path}"


# --- value readers ------------------------------------------------------------------------------


def _decode(path: str, value: object, kind: type) -> object:
    """Decode Pulumi's string form of an object / list / number / bool."""
    if isinstance(value, str) and kind is not str:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            if kind in (dict, list):
                raise ConfigError(f"{_key(path)} must be {_TYPE_NAMES[kind]} (got {value!r})") from None
    return value


_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    dict: "an object",
    list: "a list",
}


def _typed(path: str, value: object, kind: type[T]) -> T:
    decoded = _decode(path, value, kind)
    # bool is an int in Python; a boolean where a number is expected is still an error.
    if isinstance(decoded, kind) and not (kind is int and isinstance(decoded, bool)):
        return decoded
    if kind is str and isinstance(decoded, int | float) and not isinstance(decoded, bool):
        return str(decoded)  # type: ignore[return-value]  # YAML turned a version-like value into a number
    raise ConfigError(f"{_key(path)} must be {_TYPE_NAMES[kind]} (got {value!r})")


class _Section:
    """Reads the keys of one object, remembering which were consumed to reject typos."""

    def __init__(self, path: str, raw: Mapping[str, object]) -> None:
        self.path = path
        self.raw = raw
        self.used: set[str] = set()

    def _full(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, kind: type[T], default: T) -> T:
        self.used.add(key)
        if key not in self.raw or self.raw[key] is None or self.raw[key] == "":
            return default
        return _typed(self._full(key), self.raw[key], kind)

    def require(self, key: str, kind: type[T], why: str) -> T:
        self.used.add(key)
        if key not in self.raw or self.raw[key] in (None, ""):
            raise ConfigError(f"{_key(self._full(key))} is required {why}")
        return _typed(self._full(key), self.raw[key], kind)

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str:
        value = self.get(key, str, default or "")
        if value not in choices:
            shown = repr(value) if value else "nothing"
            raise ConfigError(f"{_key(self._full(key))} must be one of {', '.join(choices)} (got {shown})")
        return value

    def positive_int(self, key: str, default: int) -> int:
        value = self.get(key, int, default)
        if value < 1:
            raise ConfigError(f"{_key(self._full(key))} must be at least 1 (got {value})")
        return value

    def dns_label(self, key: str, default: str) -> str:
        value = self.get(key, str, default)
        if not _DNS_LABEL.match(value):
            raise ConfigError(
                f"{_key(self._full(key))} must be a Kubernetes name: lower-case letters, digits and '-', "
                f"at most 63 characters (got {value!r})"
            )
        return value

    def dns_subdomain(self, key: str, default: str) -> str:
        value = self.get(key, str, default)
        if not _DNS_SUBDOMAIN.match(value):
            raise ConfigError(
                f"{_key(self._full(key))} must be a Kubernetes object name: lower-case letters, digits, '-' and '.', "
                f"at most 253 characters (got {value!r})"
            )
        return value

    def section(self, key: str) -> _Section | None:
        self.used.add(key)
        if key not in self.raw or self.raw[key] in (None, ""):
            return None
        return _Section(self._full(key), _typed(self._full(key), self.raw[key], dict))

    def reject_unknown(self) -> None:
        unknown = sorted(set(self.raw) - self.used)
        if unknown:
            known = ", ".join(sorted(self.used))
            raise ConfigError(f"{_key(self._full(unknown[0]))} is not a known key (known here: {known})")


def _read_section(parent: _Section, key: str, read: Callable[[_Section], T]) -> T | None:
    section = parent.section(key)
    if section is None:
        return None
    value = read(section)
    section.reject_unknown()
    return value

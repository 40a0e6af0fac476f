"""Which ``Host`` headers the history server answers (DNS-rebinding defence).

A page on ``attacker.example`` whose name is made to resolve to the server's
address would otherwise be served with the browser's same-origin trust. Only the
names listed here are answered. IP literals are always accepted: rebinding needs
a *name* the attacker controls, and kubelet probes and Prometheus scrape with
``Host: <podIP>:<port>``. Ports are ignored (``localhost:8080`` is ``localhost``).

No Flask here: :mod:`runtime.server.options` and :mod:`runtime.server.config` use it
in gunicorn's master process.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

SERVICE_NAME = "historyserver"
#: What a person on the machine (or through ``kubectl port-forward``) types.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ALLOW_ALL = "*"
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_PORT = re.compile(r"\d{1,5}")


def default_allowed_hosts(cluster_domain: str = "cluster.local", namespace: str | None = None) -> tuple[str, ...]:
    """Loopback, the in-cluster Service's names, and any ``*.svc.<cluster domain>``.

    ``historyserver.<ns>`` and ``historyserver.<ns>.svc`` need the pod's namespace
    (a one-label wildcard would also accept ``historyserver.com``, a public name an
    attacker can own); ``*.svc.<domain>`` is safe because that domain only
    resolves inside the cluster.
    """
    names = [*LOOPBACK_NAMES, SERVICE_NAME]
    if namespace:
        names += [f"{SERVICE_NAME}.{namespace}", f"{SERVICE_NAME}.{namespace}.svc"]
    names.append(f"*.svc.{cluster_domain.strip('.')}")
    return tuple(names)


def parse_allowed_hosts(text: str) -> tuple[str, ...]:
    """``--allowed-hosts`` entries (comma-separated): ``name``, ``*.domain`` (any
    name under it), an IP address, or ``*`` (every host). Raises ValueError."""
    entries: list[str] = []
    for raw in text.split(","):
        entry = raw.strip().lower().rstrip(".")
        if not entry:
            continue
        if entry == ALLOW_ALL or _ip(entry.strip("[]")) is not None:
            entries.append(entry.strip("[]"))
            continue
        name = entry.removeprefix("*.")
        if not _HOSTNAME.fullmatch(name):
            raise ValueError(f"{raw.strip()!r} is not a host name, '*.domain', an IP address or '*' (no ports)")
        entries.append(entry)
    return tuple(entries)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def host_name(header: str) -> str | None:
    """The name part of a Host header (``name``, ``name:port``, ``[v6]:port``),
    lower-cased without a trailing dot; ``None`` when it is not well-formed."""
    header = header.strip().lower()
    if header.startswith("["):
        name, sep, rest = header[1:].partition("]")
        if not sep or (rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:]))):
            return None
        return name if _ip(name) is not None else None
    name, sep, port = header.rpartition(":") if header.count(":") == 1 else (header, "", "")
    if sep and not _PORT.fullmatch(port):
        return None
    name = name.rstrip(".")
    if _ip(name) is not None or _HOSTNAME.fullmatch(name):
        return name
    return None


@dataclass(frozen=True)
class HostPolicy:
    """Which Host headers are answered."""

    allow_all: bool
    names: frozenset[str]
    suffixes: tuple[str, ...]  # ".svc.cluster.local" for "*.svc.cluster.local"

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> HostPolicy:
        listed = [e.lower().rstrip(".") for e in entries]
        suffixes = tuple(e[1:] for e in listed if e.startswith("*."))
        names = frozenset(e for e in listed if not e.startswith("*.") and e != ALLOW_ALL)
        return cls(allow_all=ALLOW_ALL in listed, names=names, suffixes=suffixes)

    def allows(self, header: str | None) -> bool:
        if self.allow_all or header is None:  # no Host at all (HTTP/1.0): no browser sent it
            return True
        name = host_name(header)
        if name is None:
            return False
        return _ip(name) is not None or name in self.names or name.endswith(self.suffixes)

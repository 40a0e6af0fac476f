"""``--authz static``: a YAML file naming, per namespace, the users and groups that may read it.

::

    namespaces:
      team-a:                       # a namespace name or a glob (team-*, *)
        users: [alice@example.com]
        groups: [team-a-devs, "platform-*"]

Names and namespaces match with shell globs (``fnmatch``, case-sensitive). The file is
re-read when its modification time changes; a file that no longer parses keeps the last
good policy and logs an error (the server never falls open to "no policy").
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from runtime.server.auth.model import AuthUnavailableError, Identity

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NamespaceRule:
    namespace: str
    users: tuple[str, ...]
    groups: tuple[str, ...]

    def admits(self, who: Identity, namespace: str) -> bool:
        if not fnmatch.fnmatchcase(namespace, self.namespace):
            return False
        if any(fnmatch.fnmatchcase(who.user, pattern) for pattern in self.users):
            return True
        return any(fnmatch.fnmatchcase(group, pattern) for group in who.groups for pattern in self.groups)


def parse_policy(text: str, source: str) -> tuple[NamespaceRule, ...]:
    """The rules of a policy document; ValueError naming ``source`` and the bad entry."""
    document: Any = yaml.safe_load(text) or {}
    namespaces = document.get("namespaces") if isinstance(document, dict) else None
    if not isinstance(namespaces, dict):
        raise ValueError(f"{source}: expected a mapping 'namespaces: {{NAMESPACE: {{users: [...], groups: [...]}}}}'")
    rules = []
    for namespace, raw_entry in namespaces.items():
        entry = raw_entry or {}
        if not isinstance(entry, dict) or set(entry) - {"users", "groups"}:
            raise ValueError(f"{source}: namespaces.{namespace} may only have 'users' and 'groups' lists")
        lists = {}
        for key in ("users", "groups"):
            values = entry.get(key) or []
            if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
                raise ValueError(f"{source}: namespaces.{namespace}.{key} must be a list of names")
            lists[key] = tuple(values)
        rules.append(NamespaceRule(str(namespace), lists["users"], lists["groups"]))
    return tuple(rules)


class StaticPolicy:
    """The policy file, re-read on change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mtime: float | None = None
        self._rules: tuple[NamespaceRule, ...] | None = None
        self._load()
        if self._rules is None:
            raise ValueError(f"--authz-policy={path}: cannot read a policy (see the log)")

    def _load(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
            if mtime == self._mtime:
                return
            rules = parse_policy(self.path.read_text(), str(self.path))
        except (OSError, ValueError, yaml.YAMLError) as error:
            logger.error("authorization policy %s not (re)loaded: %s", self.path, error)
            return
        self._rules, self._mtime = rules, mtime
        logger.info("authorization policy %s loaded: %d namespace rule(s)", self.path, len(rules))

    def may_read(self, who: Identity, namespace: str) -> bool:
        with self._lock:
            self._load()
            rules = self._rules
        if rules is None:  # never loaded: cannot happen after __init__, but never allow on it
            raise AuthUnavailableError("authorization policy unavailable")
        return any(rule.admits(who, namespace) for rule in rules)

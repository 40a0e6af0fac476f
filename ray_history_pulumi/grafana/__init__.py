"""Ray's Grafana dashboards, shipped as package data (see :mod:`ray_history_pulumi.grafana.generate`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Dashboard:
    """One dashboard: its file name (as Ray names it), uid and JSON text."""

    file_name: str
    uid: str
    content: str

    @property
    def compact(self) -> str:
        """The JSON without Ray's indentation: a third of the size, so a ConfigMap stays far below 1 MiB."""
        return json.dumps(json.loads(self.content), separators=(",", ":"), sort_keys=False)


def dashboards() -> list[Dashboard]:
    """Every vendored dashboard, sorted by file name."""
    found = []
    folder = resources.files(__package__).joinpath("dashboards")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            text = entry.read_text(encoding="utf-8")
            parsed: dict[str, Any] = json.loads(text)
            found.append(Dashboard(file_name=entry.name, uid=str(parsed["uid"]), content=text))
    return found


def dashboard_uids() -> list[str]:
    """Ray's default uids, the default dashboard first (the Ray Dashboard's Metrics tab embeds it)."""
    uids = [d.uid for d in dashboards()]
    return sorted(uids, key=lambda uid: (uid != "rayDefaultDashboard", uid))

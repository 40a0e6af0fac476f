"""Ray's log categories, exactly as the dashboard's ``_categorize_log_files``."""

from __future__ import annotations

from collections.abc import Iterable

#: The order the live dashboard answered in for session A; empty ones are omitted.
CATEGORY_ORDER = (
    "internal",
    "worker_err",
    "worker_out",
    "core_worker",
    "driver",
    "gcs_server",
    "autoscaler",
    "agent",
    "raylet",
    "dashboard",
)


def category_of(name: str) -> str:
    """The category of one listed name (a path relative to ``logs/``); first rule wins."""
    if "worker" in name and name.endswith(".out"):
        return "worker_out"
    if "worker" in name and name.endswith(".err"):
        return "worker_err"
    if "core-worker" in name and name.endswith(".log"):
        return "core_worker"
    if "core-driver" in name and name.endswith(".log"):
        return "driver"
    if "raylet." in name:
        return "raylet"
    if "gcs_server." in name:
        return "gcs_server"
    if "log_monitor" in name:
        return "internal"
    if "monitor" in name:
        return "autoscaler"
    if "agent." in name:
        return "agent"
    if "dashboard." in name:
        return "dashboard"
    return "internal"


def categorize(names: Iterable[str]) -> dict[str, list[str]]:
    """``{category: [names...]}`` in :data:`CATEGORY_ORDER`, names in input order."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(category_of(name), []).append(name)
    return {category: groups[category] for category in CATEGORY_ORDER if category in groups}

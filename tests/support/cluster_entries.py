"""``/clusters`` entries compared across two servers (or a server and the CLI on the
bucket): the index state of each entry (``indexed``, ``summary``, ``indexing``) is the
answering process's own, since each indexes sessions in its own time (index-ahead)."""

from __future__ import annotations

from typing import Any

INDEX_STATE = ("indexed", "summary", "indexing")


def without_index_state(entries: Any) -> list[dict[str, Any]]:
    assert isinstance(entries, list), entries
    return [{k: v for k, v in entry.items() if k not in INDEX_STATE} for entry in entries]

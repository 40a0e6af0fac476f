"""The session index as a :class:`~runtime.server.logs.resolve.LogCatalog`.

Log names come from the ``objects`` table (every stored object of the session,
keys relative to the session prefix, e.g. ``<node>/logs/raylet.out``), so a log
listing or a worker-file lookup costs an indexed range scan, not a storage listing.
"""

from __future__ import annotations

from typing import Any

import orjson

from runtime.server.index.reader import SessionIndex
from runtime.server.logs.resolve import ActorLogRow, TaskLogRow
from runtime.storage.session_keys import LOGS_INFIX, is_node_dir, log_rel_key, logs_rel_prefix

#: The node segment of every ``<node>/logs/...`` key, in SQL: one pass over the
#: objects table instead of every key through Python. It must agree with
#: :func:`runtime.storage.session_keys.parse_session_key` (a test checks it).
NODES_WITH_LOGS_SQL = (
    "SELECT DISTINCT substr(rel_key, 1, instr(rel_key, '/') - 1) FROM objects "
    "WHERE substr(rel_key, instr(rel_key, '/'), ?) = ?"
)
NODES_WITH_LOGS_PARAMS = (len(LOGS_INFIX), LOGS_INFIX)


def _range(prefix: str) -> tuple[str, str]:
    """Bounds for ``prefix <= key < next(prefix)``: an index range, unlike LIKE
    (whose ``_`` and ``%`` would be wildcards)."""
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


class IndexCatalog:
    """Log lookups answered by one session's SQLite index."""

    def __init__(self, index: SessionIndex) -> None:
        self.index = index

    def nodes_with_logs(self) -> list[str]:
        rows = self.index.rows(NODES_WITH_LOGS_SQL, NODES_WITH_LOGS_PARAMS)
        return sorted(str(r[0]) for r in rows if r[0] and is_node_dir(str(r[0])))

    def nodes_for_ip(self, ip: str) -> list[str]:
        rows = self.index.rows("SELECT node_id FROM nodes WHERE ip = ? ORDER BY (state = 'ALIVE') DESC, node_id", (ip,))
        return [str(r[0]) for r in rows]

    def log_files(self, node_id: str, under: str = "") -> list[str]:
        base = logs_rel_prefix(node_id)
        prefix = f"{base}{under}/" if under else base
        low, high = _range(prefix)
        rows = self.index.rows(
            "SELECT rel_key FROM objects WHERE rel_key >= ? AND rel_key < ? ORDER BY rel_key", (low, high)
        )
        return [str(r[0])[len(base) :] for r in rows]

    def has_log(self, node_id: str, path: str) -> bool:
        key = log_rel_key(node_id, path)
        return self.index.row("SELECT 1 FROM objects WHERE rel_key = ?", (key,)) is not None

    def task_attempts(self, task_id: str) -> dict[int, TaskLogRow]:
        rows = self.index.rows(
            "SELECT attempt, type, actor_id, node_id, worker_id, detail FROM tasks WHERE task_id = ?", (task_id,)
        )
        render = self.index.details()
        found = {}
        for r in rows:
            log = _log_info(render(bytes(r[5])))
            found[int(r[0])] = TaskLogRow(
                type=str(r[1] or ""),
                actor_id=str(r[2] or ""),
                node_id=str(r[3] or ""),
                worker_id=str(r[4] or ""),
                stdout_file=_opt_str(log.get("stdout_file")),
                stderr_file=_opt_str(log.get("stderr_file")),
                stdout_start=_opt_int(log.get("stdout_start")),
                stdout_end=_opt_int(log.get("stdout_end")),
                stderr_start=_opt_int(log.get("stderr_start")),
                stderr_end=_opt_int(log.get("stderr_end")),
            )
        return found

    def actor(self, actor_id: str) -> ActorLogRow | None:
        row = self.index.row("SELECT node_id, worker_id FROM actors WHERE actor_id = ?", (actor_id,))
        if row is None:
            return None
        return ActorLogRow(node_id=str(row[0] or ""), worker_id=str(row[1] or ""))


def _log_info(detail_json: bytes) -> dict[str, Any]:
    """The ``task_log_info`` object of a task row's detail fields ({} when none)."""
    try:
        info = orjson.loads(detail_json).get("task_log_info")
    except (orjson.JSONDecodeError, AttributeError):
        return {}
    return info if isinstance(info, dict) else {}


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _opt_int(value: object) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(str(value))
    except ValueError:
        return None

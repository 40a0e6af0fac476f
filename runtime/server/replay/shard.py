"""A task shard: replays the task events of one id range and renders their rows.

Used in-process for small sessions and by the :mod:`runtime.server.index.worker`
subprocesses for big ones; :func:`runtime.server.index.shard_db.write_shards`
writes what it rendered. Pure: no file, no database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.server.replay.decode import decode_events
from runtime.server.replay.render_tasks import TaskRenderer
from runtime.server.replay.session import SessionReplay
from runtime.server.replay.task_events import ScannedBlob, typed_task_blob
from runtime.server.replay.task_failures import FailureContext


@dataclass
class ShardResult:
    events: int = 0
    duplicate_events: int = 0
    bad_lines: int = 0
    bad_events: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    tasks: int = 0
    profile_events: int = 0
    last_ms: int = 0  # the latest task transition (0: none)
    strays: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: ShardResult) -> None:
        """Fold in the result of another part of the same id range (a spilled
        worker replays its range one bucket at a time)."""
        self.events += other.events
        self.duplicate_events += other.duplicate_events
        self.bad_lines += other.bad_lines
        self.bad_events += other.bad_events
        for name, n in other.by_type.items():
            self.by_type[name] = self.by_type.get(name, 0) + n
        self.tasks += other.tasks
        self.profile_events += other.profile_events
        self.last_ms = max(self.last_ms, other.last_ms)
        self.strays.extend(other.strays)


class TaskShard:
    def __init__(self, base_ns: int = 0) -> None:
        self.replay = SessionReplay(tasks_only=True, base_ns=base_ns)
        self.bad_lines = 0

    def feed_routed(self, shard: int, blob: bytes, lines: int) -> None:
        """A :class:`~runtime.server.replay.route.Router` sink (one shard: ``shard`` is 0)."""
        self.feed_blob(blob, lines)

    def feed_blob(self, blob: bytes, lines: int | None = None) -> None:
        """JSON lines routed to this shard (``lines`` of them, when the router said):
        typed when every line is a task event of the exact shape (nearly always),
        else decoded the tolerant way."""
        typed = typed_task_blob(blob, lines)
        if isinstance(typed, ScannedBlob):  # the native build: lifecycle, definition and profile events scanned in C
            self.replay.feed_scanned(typed)
            return
        if typed is not None:
            self.replay.feed_task_events(typed)
            return
        result = decode_events(blob)
        self.bad_lines += result.bad_lines
        self.replay.feed(result.items)

    def renderer(self, failures: FailureContext | None = None) -> TaskRenderer:
        """The rows of every replayed task (rendered lazily, as they are consumed);
        ``failures``: what the GCS's task failure rules need of the rest of the session."""
        return TaskRenderer(self.replay.tasks, failures)

    def result(self, renderer: TaskRenderer) -> ShardResult:
        """The counters, once ``renderer``'s rows have all been consumed (it counts
        tasks and profile events while rendering)."""
        counters = self.replay.counters
        return ShardResult(
            events=counters.events,
            duplicate_events=counters.duplicate_events,
            bad_lines=self.bad_lines,
            bad_events=counters.bad_events,
            by_type=dict(counters.by_type),
            tasks=sum(renderer.counts.values()),
            profile_events=renderer.profile_events,
            last_ms=renderer.last_ns // 1_000_000,
            strays=self.replay.strays,
        )

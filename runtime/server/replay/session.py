"""One session's replay: envelope checks, eventId de-duplication, dispatch by type.

Pure and order independent: feeding the same events in any order (or twice) gives
the same tables. Unknown event types (WORKER_*, PLACEMENT_GROUP_*, ...) are counted
and ignored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runtime.server.replay.actors import ActorTable
from runtime.server.replay.attempt import BAD, DUPLICATE
from runtime.server.replay.ended import LastMoment
from runtime.server.replay.ids import IdCache
from runtime.server.replay.jobs import JobTable
from runtime.server.replay.nodes import NodeTable
from runtime.server.replay.task_events import (
    EVENT_TYPES,
    ScannedBlob,
    TaskEvent,
    definition_from_dict,
    lifecycle_from_dict,
)
from runtime.server.replay.task_failures import FailureContext, WorkerDeaths
from runtime.server.replay.task_feed import apply_scanned, apply_typed
from runtime.server.replay.tasks import TaskTable
from runtime.server.replay.timestamps import ts_ns

Handler = Callable[[dict[str, Any]], bool]
TaskHandler = Callable[[dict[str, Any], int | None], int]


@dataclass
class ReplayCounters:
    events: int = 0  # unique events seen (duplicates excluded)
    duplicate_events: int = 0
    bad_events: int = 0  # not an object, no/odd eventType, missing payload, rejected by its handler
    by_type: Counter[str] = field(default_factory=Counter)


def base_ns_for(created: datetime | None) -> int:
    """A compact-encoding base for a session's task transitions: two days before
    ``created``, the time in its name (Ray names sessions in the head's local time;
    :func:`runtime.storage.layout.session_created_at` reads it)."""
    if created is None:
        return 0
    return (int(created.timestamp()) - 2 * 86400) * 1_000_000_000


class SessionReplay:
    """All tables of a session; with ``tasks_only`` (a task shard) any other event is
    set aside in :attr:`strays` for the process that owns those tables."""

    def __init__(self, tasks_only: bool = False, base_ns: int = 0) -> None:
        self.strays: list[dict[str, Any]] = []
        self.ids = IdCache()
        self.tasks = TaskTable(self.ids, base_ns)
        self.actors = ActorTable(self.ids)
        self.jobs = JobTable(self.ids)
        self.nodes = NodeTable(self.ids)
        self.workers = WorkerDeaths(self.ids)
        self.counters = ReplayCounters()
        #: the latest envelope time of the events that are not task events (task
        #: events, nearly all, are timed by their transitions: TaskRenderer.last_ns)
        self.last = LastMoment()
        # eventIds are de-duplicated by their hash: Ray's are 28 random bytes, so a
        # 64-bit collision is ~1e-6 likely even at ten million events. Task events
        # (nearly all) keep theirs on their attempt (TaskTable), the rest here.
        self._seen: set[int] = set()
        tasks = self.tasks
        self._task_handlers: dict[object, tuple[str, TaskHandler]] = {
            "TASK_DEFINITION_EVENT": (
                "taskDefinitionEvent",
                lambda p, m: tasks.definition(definition_from_dict(p), m, typed=False),
            ),
            "ACTOR_TASK_DEFINITION_EVENT": (
                "actorTaskDefinitionEvent",
                lambda p, m: tasks.definition(definition_from_dict(p), m, True, typed=False),
            ),
            "TASK_LIFECYCLE_EVENT": ("taskLifecycleEvent", lambda p, m: tasks.lifecycle(lifecycle_from_dict(p), m)),
            "TASK_PROFILE_EVENT": ("taskProfileEvents", tasks.profile),
        }
        self._handlers: dict[object, tuple[str, Handler]] = {
            "ACTOR_DEFINITION_EVENT": ("actorDefinitionEvent", self.actors.definition),
            "ACTOR_LIFECYCLE_EVENT": ("actorLifecycleEvent", self.actors.lifecycle),
            "DRIVER_JOB_DEFINITION_EVENT": ("driverJobDefinitionEvent", self.jobs.definition),
            "DRIVER_JOB_LIFECYCLE_EVENT": ("driverJobLifecycleEvent", self.jobs.lifecycle),
            "NODE_DEFINITION_EVENT": ("nodeDefinitionEvent", self.nodes.definition),
            "NODE_LIFECYCLE_EVENT": ("nodeLifecycleEvent", self.nodes.lifecycle),
            "WORKER_LIFECYCLE_EVENT": ("workerLifecycleEvent", self.workers.lifecycle),
        }
        if tasks_only:
            self._handlers.clear()
        self._tasks_only = tasks_only

    def failure_context(self) -> FailureContext:
        """Dead workers and finished jobs: what the GCS's task failure rules need."""
        return FailureContext(dict(self.workers.deaths), self.jobs.ends_ms())

    def feed_task_events(self, events: list[TaskEvent]) -> None:
        """Apply task events decoded by :func:`~runtime.server.replay.task_events.decode_task_blob`:
        the task branch of :meth:`feed`, for typed events."""
        # Counted by type in C, once per blob; the rare duplicates are taken back.
        kinds = Counter(map(type, events))
        duplicates, bad = apply_typed(self.tasks, events, kinds)
        self._count_typed(kinds, len(events), duplicates, bad)

    def feed_scanned(self, blob: ScannedBlob) -> None:
        """Apply a blob of task events whose lifecycle, definition and profile events were scanned in C, in
        the blob's order: each run of scanned events in C, the others as typed events."""
        self._count_typed(*apply_scanned(self.tasks, blob))

    def _count_typed(self, kinds: Counter[type[Any]], events: int, duplicates: int, bad: int) -> None:
        counters = self.counters
        counters.by_type.update({EVENT_TYPES[kind]: n for kind, n in kinds.items() if n})
        counters.events += events - duplicates
        counters.duplicate_events += duplicates
        counters.bad_events += bad

    def feed(self, items: Iterable[object]) -> None:
        """Apply decoded events (anything that is not an event object counts as bad)."""
        seen = self._seen
        task_handlers, handlers = self._task_handlers, self._handlers
        counters = self.counters
        by_type = counters.by_type
        events = duplicates = bad = 0
        for event in items:
            if type(event) is not dict:
                events += 1
                bad += 1
                continue
            event_id = event.get("eventId")
            marker = hash(event_id) if type(event_id) is str else None
            event_type = event.get("eventType")
            task_entry = task_handlers.get(event_type)
            if task_entry is not None:
                payload = event.get(task_entry[0])
                result = task_entry[1](payload, marker) if type(payload) is dict else BAD
                if result == DUPLICATE:
                    duplicates += 1
                    continue
                events += 1
                by_type[event_type] += 1  # type: ignore[index]
                if result == BAD:
                    bad += 1
                continue
            if marker is not None:
                if marker in seen:
                    duplicates += 1
                    continue
                seen.add(marker)
            entry = handlers.get(event_type)
            if entry is None and self._tasks_only:
                self.strays.append(event)  # counted (and timed) by the process it is handed to
                continue
            self.last.see(ts_ns(event.get("timestamp")))
            if entry is None:
                events += 1
                if type(event_type) is str and event_type:
                    by_type[event_type] += 1
                else:
                    bad += 1
                continue
            events += 1
            by_type[event_type] += 1  # type: ignore[index]
            payload = event.get(entry[0])
            if type(payload) is not dict or not entry[1](payload):
                bad += 1
        counters.events += events
        counters.duplicate_events += duplicates
        counters.bad_events += bad

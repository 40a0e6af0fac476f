"""Typed task events applied to a :class:`~runtime.server.replay.tasks.TaskTable`: the
per-event loop of a task shard's fast path, in a compiled module (``setup.py``).

Interpreted, dispatching each definition and profile event cost ~8 % of a shard
worker's CPU (``perf`` of a 100k-task build); :class:`~runtime.server.replay.session.SessionReplay`
calls these and keeps the counting.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from runtime.server.replay.attempt import BAD, DUPLICATE
from runtime.server.replay.task_events import (
    ActorTaskDefinitionEvent,
    DefinitionEvent,
    LifecycleEvent,
    ProfileEvent,
    ScannedBlob,
)
from runtime.server.replay.tasks import TaskTable

#: The kinds of event the native scan takes, in the order of its counts.
_SCANNED = (LifecycleEvent, DefinitionEvent, ActorTaskDefinitionEvent, ProfileEvent)


def apply_typed(tasks: TaskTable, events: list[Any], kinds: Counter[type[Any]]) -> tuple[int, int]:
    """Apply typed task events (the union ``task_events.TaskEvent``); each duplicate is
    taken back from ``kinds``. Answers (duplicates, bad events)."""
    duplicates = bad = 0
    for event in events:
        event_id = event.event_id
        payload = event.payload
        kind = type(event)
        if payload is None:
            result = BAD
        else:
            marker = hash(event_id) if type(event_id) is str else None
            if kind is LifecycleEvent:
                result = tasks.lifecycle(payload, marker)
            elif kind is DefinitionEvent:
                result = tasks.definition(payload, marker)
            elif kind is ActorTaskDefinitionEvent:
                result = tasks.definition(payload, marker, True)
            elif kind is ProfileEvent:
                result = tasks.profile(payload, marker)
            else:
                raise TypeError(f"not a typed task event: {kind.__name__}")
        if result == DUPLICATE:
            duplicates += 1
            kinds[kind] -= 1
        elif result == BAD:
            bad += 1
    return duplicates, bad


def apply_scanned(tasks: TaskTable, blob: ScannedBlob) -> tuple[Counter[type[Any]], int, int, int]:
    """Apply a blob whose lifecycle, definition and profile events were scanned in C, in the
    blob's order: each run of scanned events in C, the others typed. Answers the events
    by type (the duplicates taken back), how many events, duplicates and bad events."""
    others = blob.others
    kinds: Counter[type[Any]] = Counter(map(type, others))
    scan = blob.scan
    duplicates = bad = taken = done = 0
    scanned_run = True  # runs alternate, scanned first
    for n in blob.runs:
        if scanned_run:
            if n:
                counts, repeated, wrong = tasks.apply_scanned(scan, taken, taken + n)
                for kind, count, duplicate in zip(_SCANNED, counts, repeated, strict=True):
                    kinds[kind] += count - duplicate
                    duplicates += duplicate
                bad += wrong
                taken += n
        elif n:
            found, wrong = apply_typed(tasks, others[done : done + n], kinds)
            duplicates += found
            bad += wrong
            done += n
        scanned_run = not scanned_run
    return kinds, taken + done, duplicates, bad

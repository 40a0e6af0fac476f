"""Ray "log events" (``<node>/logs/events/event_*.log``) for ``/events``.

One JSON object per line, snake_case. Kept: lines up to 2 MiB that parse to an
object with an ``event_id``; ``timestamp`` as a string *or* a number (KubeRay's Go history
server rejects numbers, but Ray's RAYLET events carry one). Grouped by
``custom_fields.job_id`` (else ``global``), de-duplicated by ``event_id`` (last one
wins), each job trimmed to its newest 10 000 once it passes 11 000. The stored
object is the live dashboard's: every key camelCased recursively, ``\\n``/``\\r``
sequences in ``message`` turned into newlines, plus ``time`` (UTC) as Ray adds.

These files are in the logs a Ray job writes, so what is held is bounded: each event
as its JSON bytes (a parsed dict took ~25x the line), a job trimmed while being fed
once it holds twice :data:`TRIM_TO`, and at most :data:`MAX_HELD` events in all (later
ones are counted in ``bad_lines``). Trimming while fed keeps the rows of trimming at
the end as long as a re-sent event keeps its timestamp, as Ray's do; an event re-sent
with an older one after its first copy was trimmed away is kept where the end trim
would have dropped it for the newer ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from runtime.common.json_bytes import dumps_kept

MAX_LINE_BYTES = 2 * 1024 * 1024
TRIM_ABOVE = 11_000
TRIM_TO = 10_000
#: Events held at once across all jobs: past it, a new event is not kept.
MAX_HELD = 500_000
GLOBAL = "global"
LogEventRow = tuple[str, float, str, bytes]


@dataclass
class LogEvents:
    """Collects the events of every log-event file of a session."""

    by_job: dict[str, dict[str, tuple[float, bytes]]] = field(default_factory=dict)
    bad_lines: int = 0
    files: int = 0
    _camel: dict[str, str] = field(default_factory=dict)
    _trimmed: set[str] = field(default_factory=set)  # jobs trimmed while fed: trimmed again at the end
    _held: int = 0

    def feed(self, data: bytes, new_file: bool = True) -> None:
        """Whole lines of a log-event file (``new_file=False``: a further part of one)."""
        self.files += new_file
        for raw in data.split(b"\n"):
            if len(raw) > MAX_LINE_BYTES:
                self.bad_lines += 1
                continue
            line = raw.strip()
            if not line:
                continue
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.bad_lines += 1
                continue
            if not isinstance(event, dict) or not event.get("event_id"):
                self.bad_lines += 1
                continue
            self._add(event)

    def _add(self, event: dict[str, Any]) -> None:
        custom = event.get("custom_fields")
        job = custom.get("job_id") if isinstance(custom, dict) else None
        job_key = job if isinstance(job, str) and job else GLOBAL
        ts = _numeric(event.get("timestamp"))
        message = event.get("message")
        if isinstance(message, str) and "\\" in message:
            event["message"] = message.replace("\\n", "\n").replace("\\r", "\n")
        converted = self._convert(event)
        if isinstance(converted, dict) and "time" not in converted:
            converted["time"] = _format_time(ts)
        events = self.by_job.setdefault(job_key, {})
        event_id = str(event["event_id"])
        if events.pop(event_id, None) is None:  # last write wins, and counts as the newest arrival
            if self._held >= MAX_HELD:
                self.bad_lines += 1
                return
            self._held += 1
        events[event_id] = (ts, dumps_kept(converted))  # up to MAX_HELD of them
        if len(events) >= 2 * TRIM_TO:
            self._trim(job_key, events)

    def _trim(self, job: str, events: dict[str, tuple[float, bytes]]) -> None:
        """Keep the job's newest :data:`TRIM_TO` (by time, then arrival, as :meth:`rows`
        orders them): an event dropped here would not have been among them at the end
        (unless re-sent later with an older time, see the module's docstring)."""
        newest = sorted(events.items(), key=lambda kv: kv[1][0])[-TRIM_TO:]
        self._held -= len(events) - len(newest)
        events.clear()
        events.update(newest)
        self._trimmed.add(job)

    def _convert(self, value: object) -> object:
        if isinstance(value, dict):
            return {self._key(str(k)): self._convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._convert(v) for v in value]
        return value

    def _key(self, key: str) -> str:
        found = self._camel.get(key)
        if found is None:
            head, *rest = key.split("_")
            found = self._camel[key] = head + "".join(part[:1].upper() + part[1:] for part in rest)
        return found

    def count(self) -> int:
        return sum(len(events) for events in self.by_job.values())

    def rows(self) -> list[LogEventRow]:
        rows: list[LogEventRow] = []
        for job, events in self.by_job.items():
            items = sorted(events.items(), key=lambda kv: kv[1][0])
            if len(items) > TRIM_ABOVE or job in self._trimmed:
                items = items[-TRIM_TO:]
            rows.extend((job, ts, event_id, data) for event_id, (ts, data) in items)
        return rows


def _numeric(value: object) -> float:
    if isinstance(value, bool):
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return 0.0
    return 0.0


def _format_time(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return ""

"""Routing task events to task shards by the task id's range, without parsing them.

Task events are almost all of a session (four or more per task attempt), so the
builder spreads them over processes. Each JSON line is routed by a byte search for
``"taskId":"`` and the first character of the id: the first hex digit of the
decoded id picks the shard, so shard ``i`` holds only ids below shard ``i+1``'s
(their rows are appended in key order) and every spelling of one id (hex or
base64) lands in the same shard. Lines this cannot route (spaces in the JSON, an
odd id, a legacy JSON array) are parsed here and routed by their parsed task id;
events without a task id go to ``other``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from runtime.server.replay.ids import hex_id

# The native build's per-line loop in C (setup.py); absent, Router.feed's own loop runs.
native_core: Any
try:
    from runtime.server.replay import _route

    native_core = _route.RouterCore
except ImportError:  # the source form
    native_core = None

#: The finest routing: one bucket per first hex digit of a task id. ``Router(BUCKETS, ...)``
#: routes to buckets; bucket ``b`` belongs to shard ``b * shards // BUCKETS``.
BUCKETS = 16

_KEY = b'"taskId":"'
_KEY_LEN = len(_KEY)
_QUOTE = ord('"')
_HEX = re.compile(rb"[0-9a-fA-F]+")
_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_URLSAFE = {ord("-"): 62, ord("_"): 63}
TASK_PAYLOADS = ("taskDefinitionEvent", "actorTaskDefinitionEvent", "taskLifecycleEvent", "taskProfileEvents")
_WHITESPACE = b" \t\r\n"


def _hex_route(line: bytes, start: int, length: int, otherwise: int) -> int:
    """-1 (route after parsing) for an all-hex 32-character id, -2 (route as hex)
    for an all-hex 48-character one, else ``otherwise``."""
    if _HEX.fullmatch(line, start, start + length):
        return -1 if length == 32 else -2
    return otherwise


def shard_of_hex(hex_value: str, shards: int) -> int:
    """The shard of a normalised id: by its first hex digit."""
    try:
        nibble = int(hex_value[:1], 16)
    except ValueError:
        nibble = hash(hex_value) & 15
    return nibble * shards // BUCKETS


def _tables(shards: int) -> tuple[list[int], list[int]]:
    b64 = [-1] * 256
    for value, char in enumerate(_B64):
        b64[char] = (value >> 2) * shards // BUCKETS
    for char, value in _URLSAFE.items():
        b64[char] = (value >> 2) * shards // BUCKETS
    hexa = [-1] * 256
    for char in b"0123456789abcdefABCDEF":
        hexa[char] = int(chr(char), 16) * shards // BUCKETS
    return b64, hexa


def task_id_of(item: dict[str, object]) -> object:
    for key in TASK_PAYLOADS:
        payload = item.get(key)
        if isinstance(payload, dict):
            return payload.get("taskId")
    return None


class Router:
    """Splits event objects into per-shard batches of JSON lines: ``sink(shard, blob,
    lines)`` gets each batch with its number of lines (none of them empty)."""

    def __init__(
        self,
        shards: int,
        sink: Callable[[int, bytes, int], None],
        other: Callable[[object], None],
        batch_lines: int = 2048,
    ) -> None:
        self.shards = shards
        self._sink = sink
        self._other = other
        self._batch_lines = batch_lines
        self._b64, self._hex = _tables(shards)
        self._lines: list[list[bytes]] = [[] for _ in range(shards)]
        self.bad_lines = 0
        # The same rules in C: batches there, lines it cannot route come back to _slow.
        self._core: Any = native_core(shards, sink, self._slow, batch_lines) if native_core is not None else None

    def feed(self, data: bytes) -> None:  # noqa: PLR0912 - the per-line hot loop is inlined on purpose
        """One decoded (gunzipped) event object."""
        # Not stripped: a copy of the whole object for its final newline. Blank and
        # whitespace-only lines have no task id and end in _slow, which drops them.
        body = data if data[:1] not in _WHITESPACE else data.lstrip(_WHITESPACE)
        if not body:
            return
        if body[:1] == b"[":
            try:
                items = orjson.loads(body)
            except orjson.JSONDecodeError:
                self.bad_lines += 1
                return
            if not isinstance(items, list):
                self.bad_lines += 1
                return
            for item in items:
                self._route_item(item, None)
            return
        if self._core is not None:
            self._core.feed(body)
            return
        b64, hexa, lines = self._b64, self._hex, self._lines
        limit = self._batch_lines
        for line in body.split(b"\n"):
            at = line.find(_KEY)
            if at >= 0:
                start = at + _KEY_LEN
                try:
                    if line[start + 32] == _QUOTE:  # Ray's 24-byte ids: 32 base64 characters
                        shard = b64[line[start]]
                        # An all-hex id is hex to to_hex_id: two samples rule out most
                        # base64 ids before the full check.
                        if hexa[line[start + 16]] >= 0 and hexa[line[start + 9]] >= 0 and hexa[line[start]] >= 0:
                            shard = _hex_route(line, start, 32, shard)
                    elif line[start + 48] == _QUOTE:
                        shard = _hex_route(line, start, 48, -1)
                        if shard == -2:
                            shard = hexa[line[start]]
                    else:
                        shard = -1
                except IndexError:
                    shard = -1
                if shard >= 0:
                    batch = lines[shard]
                    batch.append(line)
                    if len(batch) >= limit:
                        self._flush(shard)
                    continue
            self._slow(line)

    def _slow(self, line: bytes) -> None:
        line = line.strip(_WHITESPACE)
        if not line:
            return
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.bad_lines += 1
            return
        self._route_item(item, line)

    def _route_item(self, item: object, line: bytes | None) -> None:
        raw = task_id_of(item) if isinstance(item, dict) else None
        if not raw or not isinstance(raw, (str, int)):
            self._other(item)
            return
        shard = shard_of_hex(hex_id(raw), self.shards)
        data = line if line is not None else orjson.dumps(item)
        if self._core is not None:
            self._core.append(shard, data)
            return
        self._lines[shard].append(data)
        if len(self._lines[shard]) >= self._batch_lines:
            self._flush(shard)

    def _flush(self, shard: int) -> None:
        if self._core is not None:
            self._core.flush(shard)
            return
        lines = self._lines[shard]
        if lines:
            self._lines[shard] = []
            self._sink(shard, b"\n".join(lines), len(lines))

    def flush(self) -> None:
        for shard in range(self.shards):
            self._flush(shard)

"""Parsing and sorting one POSTed batch of Ray events. Pure: bytes in, decisions out.

Compatible with the grouping of KubeRay's Go collector ("the reference"): node events by
type, job events by the nested ``jobId`` of seven payload keys, IDs as lower-case
hex, unknown types and unsafe job IDs under ``node_events``. Different on purpose:

* an invalid event inside a valid array is set aside (quarantined) instead of
  failing the batch with 400, because Ray resends a rejected batch forever and the
  node would stop reporting anything;
* events are filed under the node that reported them (the envelope's ``nodeId``),
  not whatever node the collector currently believes it runs on.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from runtime.common.ids import to_hex_id_or_none
from runtime.common.timestamps import parse_timestamp_ns
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_job_id, validate_session_name

#: Payload keys whose ``jobId`` files an event under ``job_events/{job}``, in the
#: reference's lookup order.
JOB_PAYLOAD_KEYS = (
    "driverJobDefinitionEvent",
    "driverJobLifecycleEvent",
    "taskDefinitionEvent",
    "taskLifecycleEvent",
    "taskProfileEvents",
    "actorTaskDefinitionEvent",
    "actorDefinitionEvent",
)
NODE_EVENT_TYPES = frozenset({"NODE_DEFINITION_EVENT", "NODE_LIFECYCLE_EVENT"})
#: Event types Ray 2.60's schema defines; anything else is counted as OTHER so a
#: misbehaving sender cannot blow up metric cardinality.
KNOWN_EVENT_TYPES = frozenset(
    {
        "NODE_DEFINITION_EVENT",
        "NODE_LIFECYCLE_EVENT",
        "DRIVER_JOB_DEFINITION_EVENT",
        "DRIVER_JOB_LIFECYCLE_EVENT",
        "TASK_DEFINITION_EVENT",
        "TASK_LIFECYCLE_EVENT",
        "TASK_PROFILE_EVENT",
        "ACTOR_TASK_DEFINITION_EVENT",
        "ACTOR_DEFINITION_EVENT",
        "ACTOR_LIFECYCLE_EVENT",
        "WORKER_DEFINITION_EVENT",
        "WORKER_LIFECYCLE_EVENT",
        "PLACEMENT_GROUP_DEFINITION_EVENT",
        "PLACEMENT_GROUP_LIFECYCLE_EVENT",
        "SUBMISSION_JOB_DEFINITION_EVENT",
        "SUBMISSION_JOB_LIFECYCLE_EVENT",
        "PLATFORM_EVENT",
    }
)

#: What the array scan looks at: a whole string (a bracket or comma inside one is
#: not structure) or one structural byte; numbers, literals, colons and whitespace
#: are skipped (the decoding of each element checks them).
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[\[\]{},]', re.DOTALL)
_ARRAY_START = re.compile(rb"[ \t\r\n]*\[")
_BLANK = re.compile(rb"[ \t\r\n]*")
_QUOTE, _COMMA, _CLOSE_ARRAY = ord('"'), ord(","), ord("]")
_OPENERS = frozenset(b"[{")
#: A body that is not an array is decoded for its error message only up to this size.
_SMALL_BODY = 64 * 1024
#: Arrays up to this size are decoded whole (orjson, ~2 ms for Ray's usual 1,000-event
#: batch of ~1 MiB; parsing then peaks at ~15x the body, 30 MiB at most); larger ones
#: element by element (:func:`_elements`: ~3x the body, but its scan costs ~7x the
#: decode: a whole batch parsed 8 ms against 26 ms, so the usual batch does not pay it).
WHOLE_DECODE_MAX = 2 * 1024 * 1024
_HEX_NODE = re.compile(r"[0-9a-f]{1,128}")


class BatchRejected(ValueError):  # noqa: N818 - reads as what happened to the batch
    """The body is not a JSON array: answered with 400, nothing written."""


@dataclass(frozen=True, slots=True)
class SpoolTarget:
    """Which spool file an event goes to: one per (session, node, category).

    ``job`` is the hex job ID for ``job_events/{job}``, or None for ``node_events``.
    ``node`` is the reporting node (hex), or None when the event does not say.
    """

    session: str
    node: str | None
    job: str | None


@dataclass(frozen=True, slots=True)
class RejectedEvent:
    reason: str
    raw: bytes


@dataclass(slots=True)
class ParsedBatch:
    """A decoded batch, already grouped the way the spool writes it: one list of
    JSON lines per target (no per-event objects, so a 1000-event batch costs
    little more than its own bytes)."""

    groups: dict[SpoolTarget, list[bytes]] = field(default_factory=dict)
    type_counts: Counter[str] = field(default_factory=Counter)
    rejected: list[RejectedEvent] = field(default_factory=list)
    #: driver jobs this batch reports FINISHED (the head then polls for their final status)
    jobs_ended: int = 0

    @property
    def accepted(self) -> int:
        return sum(len(lines) for lines in self.groups.values())


def job_of(event: dict[str, object]) -> str | None:
    """Hex job ID from the first payload key that has one, else None (also when it is
    not one a storage key can hold: the event is then filed under ``node_events``)."""
    for key in JOB_PAYLOAD_KEYS:
        payload = event.get(key)
        if isinstance(payload, dict):
            raw = payload.get("jobId")
            if raw not in (None, ""):
                # The storage layout's own rule: a job ID filed here must be one its key
                # can hold, or the spooled file could never be uploaded.
                try:
                    return validate_job_id(str(raw))
                except InvalidKeyError:
                    return None
    return None


def job_finished(event: dict[str, object]) -> bool:
    """A ``DRIVER_JOB_LIFECYCLE_EVENT`` with a ``FINISHED`` transition."""
    payload = event.get("driverJobLifecycleEvent")
    transitions = payload.get("stateTransitions") if isinstance(payload, dict) else None
    return isinstance(transitions, list) and any(
        isinstance(step, dict) and step.get("state") == "FINISHED" for step in transitions
    )


class _Targets:
    """SpoolTargets for one batch, shared between its events (a batch has a
    handful of targets, and decoding the same base64 IDs 1000 times is waste)."""

    def __init__(self) -> None:
        self._targets: dict[tuple[str, object, str | None], SpoolTarget] = {}
        self._nodes: dict[object, str | None] = {}

    def get(self, event: dict[str, object], session: str) -> SpoolTarget:
        event_type = event.get("eventType")
        job = None if event_type in NODE_EVENT_TYPES else job_of(event)
        raw_node = event.get("nodeId")
        key = (session, raw_node if isinstance(raw_node, str) else None, job)
        target = self._targets.get(key)
        if target is None:
            target = SpoolTarget(session=session, node=self._node(key[1]), job=job)
            self._targets[key] = target
        return target

    def _node(self, raw: object) -> str | None:
        if raw not in self._nodes:
            node = to_hex_id_or_none(raw)
            self._nodes[raw] = node if node is not None and _HEX_NODE.fullmatch(node) else None
        return self._nodes[raw]


def check_event(item: object) -> tuple[dict[str, object] | None, str]:
    """(event, "") when the event can be filed, else (None, reason)."""
    if not isinstance(item, dict):
        return None, "not_an_object"
    session = item.get("sessionName")
    try:
        validate_session_name(session)  # type: ignore[arg-type]  # the key's own rule; non-strings fail it
    except InvalidKeyError:
        return None, "invalid_session_name"
    timestamp = item.get("timestamp")
    if not isinstance(timestamp, str):
        return None, "missing_timestamp"
    try:
        parse_timestamp_ns(timestamp)
    except ValueError:
        return None, "invalid_timestamp"
    return item, ""


def _elements(body: bytes) -> Iterator[memoryview]:
    """The elements of the JSON array ``body`` (which starts with ``[`` after
    whitespace), as undecoded slices, in order.

    Only strings and structural bytes are looked at: enough to find the commas at
    the array's own level. Each slice is then decoded on its own (by orjson, which
    checks it fully), so a body is valid here exactly when ``orjson.loads`` would
    take it whole: what lies between the slices is ``[``, ``,``, ``]`` and
    whitespace, checked here. Raises BatchRejected for what is not such an array.
    """
    view = memoryview(body)
    depth = 0
    start = 0
    commas = 0
    for match in _TOKEN.finditer(body):
        pos = match.start()
        char = body[pos]
        if char == _QUOTE:
            continue
        if char in _OPENERS:
            depth += 1
            if depth == 1:
                start = pos + 1
            continue
        if char == _COMMA:
            if depth == 1:
                commas += 1
                yield view[start:pos]
                start = pos + 1
            continue
        depth -= 1  # a closing bracket
        if depth == 0:
            if char != _CLOSE_ARRAY:
                raise BatchRejected(f"body is not valid JSON: unbalanced '}}' at char {pos}")
            if not _BLANK.fullmatch(body, pos + 1):
                raise BatchRejected(f"body is not valid JSON: data after the array's end at char {pos + 1}")
            if commas or not _BLANK.fullmatch(body, start, pos):  # "[]" has no element
                yield view[start:pos]
            return
    raise BatchRejected("body is not valid JSON: the array is not closed")


def _items(body: bytes) -> Iterator[object]:
    """The decoded elements of the JSON array ``body``, in order; each is released by
    this generator once the next is asked for."""
    if len(body) > WHOLE_DECODE_MAX:
        for element in _elements(body):
            yield _decode(element)
        return
    data = _decode(memoryview(body))
    if not isinstance(data, list):  # the body starts with "[": only a list decodes
        raise BatchRejected("body must be a JSON array of Ray events")
    data.reverse()
    while data:
        yield data.pop()


def _decode(element: memoryview) -> object:
    try:
        return orjson.loads(element)
    except orjson.JSONDecodeError as exc:
        raise BatchRejected(f"body is not valid JSON: {exc}") from exc


def parse_batch(body: bytes) -> ParsedBatch:
    """Decode a POST body and decide, per event, where it goes or why it cannot.

    Raises BatchRejected when the body is not JSON or not an array. ``null`` and
    ``[]`` are empty batches (the reference answers 200 to both).

    A large array is decoded one event at a time (:data:`WHOLE_DECODE_MAX`): decoding a
    whole batch at once held every event as Python objects together, and each
    serialised line took a 4 KiB buffer (:func:`_exact`): some 18 times the body's
    size in all (a 60 MiB batch peaked above 1 GiB in a sidecar limited to 256Mi).
    Now the peak is the body, its serialised lines and one event (a few times the
    body for a batch under that size).
    """
    if not _ARRAY_START.match(body):
        return _not_an_array(body)
    batch = ParsedBatch()
    targets = _Targets()
    for item in _items(body):
        event, reason = check_event(item)
        if event is None:
            batch.rejected.append(RejectedEvent(reason=reason, raw=_dump(item)))
            continue
        try:
            line = _exact(orjson.dumps(event))
        except TypeError:  # e.g. an integer beyond 64 bits
            batch.rejected.append(RejectedEvent(reason="unencodable", raw=_dump(item)))
            continue
        event_type = event.get("eventType")
        batch.type_counts[
            event_type if isinstance(event_type, str) and event_type in KNOWN_EVENT_TYPES else "OTHER"
        ] += 1
        if event_type == "DRIVER_JOB_LIFECYCLE_EVENT" and job_finished(event):
            batch.jobs_ended += 1
        target = targets.get(event, str(event["sessionName"]))
        lines = batch.groups.get(target)
        if lines is None:
            batch.groups[target] = [line]
        else:
            lines.append(line)
    return batch


def _not_an_array(body: bytes) -> ParsedBatch:
    """``null`` is an empty batch; anything else that is not an array is refused,
    naming what it is (decoded only when small: a large one is refused unread)."""
    if len(body) > _SMALL_BODY:
        raise BatchRejected("body must be a JSON array of Ray events")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BatchRejected(f"body is not valid JSON: {exc}") from exc
    if data is None:
        return ParsedBatch()
    raise BatchRejected(f"body must be a JSON array of Ray events, got a JSON {type(data).__name__}")


def _exact(data: bytes) -> bytes:
    """A copy of ``data`` in an object of its own size: orjson (3.13) hands back each
    result in a buffer of about 4 KiB, so a batch of 200-byte events held twenty times
    its size until written."""
    return bytes(memoryview(data))


def _dump(item: object) -> bytes:
    try:
        return _exact(orjson.dumps(item))
    except TypeError:  # orjson refuses integers beyond 64 bits
        return repr(item).encode("utf-8", "replace")

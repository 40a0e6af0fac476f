"""A task's detail-only fields, stored compactly and rendered to JSON when read (schema 7).

The detail form of a ``/api/v0/tasks`` row is ~1.4 KB of JSON, nearly all of it
parts that many tasks share: a definition's resources, runtime env and labels, a
worker's log file names, the names of profile events. Rendering that JSON and
zstd-packing it for every task was a third of a build's per-task CPU; a request
reads at most a page of rows. So the build stores what the JSON is made of
(:class:`DetailEncoder`) and a request renders it (:class:`DetailRenderer`, ~3.5 us
a row against ~1.5 us to unpack zstd), byte for byte the JSON the build used to
store.

Stored form (``tasks.detail``): plain JSON (first byte ``{``; test factories insert
it) or a msgpack array, trailing nulls dropped::

    [definition, transitions, log, error_message, is_debugger_paused, profile]

* ``definition``: the text id of the definition's JSON head and tail (``NUL``
  between them; 0: no definition event);
* ``transitions``, oldest first: ``[ranks, ms, step, step, ...]``, ``ranks`` one
  byte per transition, its rank in :data:`~runtime.server.replay.attempt.TASK_STATES`
  (a request renders a whole sequence of ranks, shared by most tasks, with one
  format), then the first transition's ms and the ms from each to the next; or
  ``[[ms, name], ...]`` when a state is one Ray 2.60 does not know;
* ``log``: ``[text id of [stdout_file, stderr_file], stdout_start, stdout_end,
  stderr_start, stderr_end]``;
* ``profile``: ``[text id of its JSON head, [event name's text id, start_time,
  end_time, extra_data's JSON, ...]]``. The extra data is stored in the row (schema
  8): Ray's ``task::`` entry names its own task, so as a shared text it was a text
  per task, hashed and inserted into ``task_texts`` at random ids by every shard and
  again by the append (~10 % of a build's instructions, v4 synthetic session).

Texts live once per index in ``task_texts``, under an id derived from their bytes
(a 63-bit BLAKE2b prefix), so shards built apart agree on ids without talking to
each other, and every build of a session stores identical rows. Two texts with one
id would take about 2**31 attempts by the session's own author and could only
garble that session's task details.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable, Iterable
from itertools import accumulate
from typing import Any, Final

import msgspec
import orjson

from runtime.server.replay.attempt import TASK_STATES, Definition, LogInfo, Profile
from runtime.server.replay.definitions import reencoded_extra
from runtime.server.replay.ids import is_nil
from runtime.server.replay.timestamps import in_int64

Fragment = orjson.Fragment
_PLAIN = ord("{")
_SIX_FIELDS = b"\x96"  # msgpack: an array of 6
_PROFILED = b'"profiling_data":'
_NULL = b"null"
_FLAGS = {None: _NULL, True: b"true", False: b"false"}
_MIDDLE = (
    b',"creation_time_ms":%b,"start_time_ms":%b,"end_time_ms":%b,"task_log_info":%b,'
    b'"error_message":%b,"is_debugger_paused":%b'
)
_LOG_OFFSETS = b'%b%d,"stdout_end":%d,"stderr_start":%d,"stderr_end":%d}'
_NO_DEF_HEAD = b'{"language":"","required_resources":null,"runtime_env_info":null,"placement_group_id":null,"events":'
_NO_DEF_TAIL = b',"call_site":null,"label_selector":{},"fallback_strategy":{"options":[]}}'
#: What a transition to each state means for creation/start/end times (0: nothing).
CREATED, RUNNING, ENDED = 1, 2, 3
KINDS = {"PENDING_ARGS_AVAIL": CREATED, "RUNNING": RUNNING, "FINISHED": ENDED, "FAILED": ENDED}
_KNOWN_KINDS = [KINDS.get(name, 0) for name in TASK_STATES]
_EVENT_HEADS = [orjson.dumps({"state": name})[:-1] + b',"created_ms":' for name in TASK_STATES]


#: An empty 8-byte BLAKE2b to copy: a copy takes ~2/3 of the time of a new one set up
#: from its parameters, and a profiled task adds a text of its own (Ray's extra data).
_TEXT_HASH = hashlib.blake2b(digest_size=8)


def text_id(data: bytes) -> int:
    """The id of a text in ``task_texts``: derived from its bytes, positive in SQLite's int64."""
    digest = _TEXT_HASH.copy()
    digest.update(data)
    return int.from_bytes(digest.digest(), "big") >> 1


class DetailEncoder:
    """Encodes attempts' detail fields at build time; :attr:`texts` collects every
    text the encoded rows refer to (``text id -> bytes``), for ``task_texts``."""

    def __init__(self) -> None:
        self.texts: dict[int, bytes] = {}
        # text ids by what the text is made of, one map per kind of text
        self._logs: dict[tuple[str, str], int] = {}
        self._profiles: dict[tuple[str, str, str], int] = {}
        self._names: dict[str, int] = {}
        self._heads: dict[tuple[Any, ...], bytes] = {}
        self._tails: dict[tuple[Any, ...], bytes] = {}
        self._encode_into = msgspec.msgpack.Encoder().encode_into

    def _text(self, data: bytes) -> int:
        ident = text_id(data)
        self.texts[ident] = data
        return ident

    def definition(self, d: Definition) -> int:
        """The text id of a definition's head and tail (call once per distinct definition)."""
        head_key = (d.language, d.resources, d.runtime_env, d.placement_group)
        head = self._heads.get(head_key)
        if head is None:
            pg = d.placement_group
            body = orjson.dumps(
                {
                    "language": d.language,
                    "required_resources": Fragment(d.resources),
                    "runtime_env_info": Fragment(d.runtime_env),
                    "placement_group_id": pg if pg and not is_nil(pg) else None,
                }
            )
            head = self._heads[head_key] = body[:-1] + b',"events":'
        tail_key = (d.call_site, d.labels, d.fallback)
        tail = self._tails.get(tail_key)
        if tail is None:
            labels, fallback = Fragment(d.labels), Fragment(d.fallback)
            body = orjson.dumps({"call_site": d.call_site, "label_selector": labels, "fallback_strategy": fallback})
            tail = self._tails[tail_key] = b"," + body[1:]
        return self._text(head + b"\0" + tail)  # orjson never writes a raw NUL

    def log(self, log: LogInfo) -> list[Any]:
        key = (log[0], log[3])
        ident = self._logs.get(key)
        if ident is None:
            ident = self._logs[key] = self._text(orjson.dumps(key))
        return [ident, log[1], log[2], log[4], log[5]]

    def profile(self, prof: Profile) -> list[Any]:
        key = (prof.component_type, prof.component_id, prof.node_ip)
        head = self._profiles.get(key)
        if head is None:
            body = orjson.dumps({"component_type": key[0], "component_id": key[1], "node_ip_address": key[2]})
            head = self._profiles[key] = self._text(body[:-1] + b',"events":')
        flat: list[Any] = []
        names = self._names
        for (name, start, end), extra in prof.events.items():
            name_id = names.get(name)
            if name_id is None:
                name_id = names[name] = self._text(orjson.dumps(name))
            flat.append(name_id)  # appends: compiled, += of a tuple builds and frees the tuple
            flat.append(_ms(start))
            flat.append(_ms(end))
            flat.append(_extra_json(extra))
        return [head, flat]

    def encode(self, fields: list[Any]) -> bytearray:
        """The stored form of ``[definition, transitions, log, error_message,
        is_debugger_paused, profile]`` (see the module's docstring); pops trailing nulls.
        A bytearray: sqlite3 binds one as it is, while for ``bytes`` it first looks for
        an adapter (a failed attribute lookup per row, ~0.3 us)."""
        while fields and fields[-1] is None:
            fields.pop()
        stored = bytearray()
        self._encode_into(fields, stored)
        return stored


def time_positions(kinds: Iterable[int]) -> tuple[int, int, int]:
    """Among transitions (oldest first) of these :data:`KINDS`, the positions of the
    one giving the creation time (the first PENDING_ARGS_AVAIL), the start time (the
    first RUNNING) and the end time (the last FINISHED or FAILED); -1: none."""
    created = running = ended = -1
    for n, kind in enumerate(kinds):
        if kind == CREATED:
            if created < 0:
                created = n
        elif kind == RUNNING:
            if running < 0:
                running = n
        elif kind == ENDED:
            ended = n
    return created, running, ended


def _shape(ranks: bytes) -> tuple[bytes, int, int, int]:
    """The ``events`` JSON of a sequence of ranks with ``%d`` for each ms, and the
    positions of the creation, start and end times in it."""
    parts = [_EVENT_HEADS[rank] + b"%d.0}" for rank in ranks]
    return b"[" + b",".join(parts) + b"]", *time_positions(_KNOWN_KINDS[rank] for rank in ranks)


def _named_events(transitions: list[Any]) -> tuple[bytes, bytes, bytes, bytes]:
    """The ``events`` JSON of ``[[ms, name], ...]`` and its creation, start and end times."""
    parts = [b"%d.0" % ms for ms, _ in transitions]
    events = b",".join(
        orjson.dumps({"state": name})[:-1] + b',"created_ms":' + part + b"}"
        for part, (_, name) in zip(parts, transitions, strict=True)
    )
    positions = time_positions(KINDS.get(name, 0) for _, name in transitions)
    creation, start, end = (parts[n] if n >= 0 else _NULL for n in positions)
    return b"[" + events + b"]", creation, start, end


#: Up to 2**53 an int is exactly a double: one IEEE division is then the correctly rounded quotient.
_EXACT_INT: Final = 2**53


def _ms(ns: int) -> float:
    """``ns / 1_000_000`` rounded once, as Python divides ints. Compiled (mypyc), that
    expression turns both ints into doubles first, and ns since the epoch are beyond a
    double's 53 bits (1795311948774222000 ns gave 1795311948774.2222 ms). Beyond 2**53
    (within int64) the whole ms are exact (< 2**53) and the fraction, rounded to within
    2**-53, can carry the sum over a rounding boundary only if the sum lies on it, where
    the fraction is exact (tests compare every boundary shape with Python's quotient)."""
    if -_EXACT_INT <= ns <= _EXACT_INT:
        return float(ns) / 1e6
    if in_int64(ns):  # (% rather than a product: mypyc multiplies ints from 2**30, or negative, as objects)
        return ns // 1_000_000 + ns % 1_000_000 / 1e6
    return operator.truediv(ns, 1_000_000)  # type: ignore[no-any-return]


def _extra_json(extra: str | bytes) -> bytes:
    """Bytes are the State API's answer already (:func:`~runtime.server.replay.definitions.profile_extra`)."""
    return extra if isinstance(extra, bytes) else reencoded_extra(extra)


class DetailRenderer:
    """Stored detail fields to the detail-only JSON; ``load(text_id)`` fetches a text
    the first time a row needs it (a page of rows shares most of them)."""

    def __init__(self, load: Callable[[int], bytes | None]) -> None:
        self._load = load
        self._defs: dict[int, tuple[bytes, bytes]] = {}
        self._logs: dict[int, bytes] = {}  # the JSON of a log's file names, up to stdout_start
        self._texts: dict[int, bytes] = {}
        self._shapes: dict[bytes, tuple[bytes, int, int, int]] = {}
        self._decode = msgspec.msgpack.Decoder().decode

    def _text(self, ident: int) -> bytes:
        found = self._texts.get(ident)
        if found is None:
            found = self._load(ident)
            if found is None:
                raise ValueError(f"stored task detail names text {ident}, which the index does not hold")
            self._texts[ident] = found
        return found

    @staticmethod
    def has_profile(stored: bytes) -> bool:
        """Whether a stored detail holds profiling data, without rendering it: the
        profile is the last field and trailing nulls are dropped, so exactly the
        six-field arrays (msgpack fixarray 6) hold one."""
        if stored[:1] == b"{":
            return _PROFILED in stored
        return stored[:1] == _SIX_FIELDS

    def __call__(self, stored: bytes | bytearray) -> bytes:
        """A stored detail (bytes from the index; a just-rendered row's bytearray) as JSON."""
        if not stored or stored[0] == _PLAIN:
            return bytes(stored)
        fields = self._decode(stored)
        fields += [None] * (6 - len(fields))
        definition, transitions, log, error_message, debugger, profile = fields
        if definition:
            pair = self._defs.get(definition)
            if pair is None:
                head, _, tail = self._text(definition).partition(b"\0")
                pair = self._defs[definition] = (head, tail)
            head, tail = pair
        else:
            head, tail = _NO_DEF_HEAD, _NO_DEF_TAIL
        if not transitions:
            events, creation, start, end = b"[]", _NULL, _NULL, _NULL
        elif type(transitions[0]) is bytes:
            shape = self._shapes.get(transitions[0])
            if shape is None:
                shape = self._shapes[transitions[0]] = _shape(transitions[0])
            template, created, running, ended = shape
            times = tuple(accumulate(transitions[1:]))
            events = template % times
            # %d.0 is how orjson writes these floats (|ms| < 1e16)
            creation = b"%d.0" % times[created] if created >= 0 else _NULL
            start = b"%d.0" % times[running] if running >= 0 else _NULL
            end = b"%d.0" % times[ended] if ended >= 0 else _NULL
        else:
            events, creation, start, end = _named_events(transitions)
        middle = _MIDDLE % (
            creation,
            start,
            end,
            _NULL if log is None else self._log_info(log),
            _NULL if error_message is None else orjson.dumps(error_message),
            _FLAGS[debugger],
        )
        profiled = b"" if profile is None else b',"profiling_data":' + self._profile(profile)
        return b"".join((head, events, profiled, middle, tail))

    def _log_info(self, log: list[Any]) -> bytes:
        prefix = self._logs.get(log[0])
        if prefix is None:
            out, err = orjson.loads(self._text(log[0]))
            files = orjson.dumps({"stdout_file": out, "stderr_file": err})
            prefix = self._logs[log[0]] = files[:-1] + b',"stdout_start":'
        return _LOG_OFFSETS % (prefix, log[1], log[2], log[3], log[4])

    def _profile(self, profile: list[Any]) -> bytes:
        head, flat = profile
        text = self._text
        events = [
            {
                "start_time": flat[n + 1],
                "end_time": flat[n + 2],
                "extra_data": Fragment(flat[n + 3]),
                "event_name": Fragment(text(flat[n])),
            }
            for n in range(0, len(flat), 4)
        ]
        return text(head) + orjson.dumps(events) + b"}"

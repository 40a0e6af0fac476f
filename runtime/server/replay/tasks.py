"""Task attempts (``TASK_DEFINITION``/``LIFECYCLE``/``PROFILE`` events), kept compact for sessions of millions of tasks.

One attempt is an :class:`~runtime.server.replay.attempt.Attempt` keyed by the
task id *as it arrived* plus the attempt number; ids are hex-normalised once, when
rendering (:meth:`TaskTable.attempts` merges keys that turn out to be the same id
spelt in two encodings).

Every merge is order independent, fixing the last-event-wins bug of KubeRay's
Go history server (whichever event it processes last overwrites): error info,
debugger flag, actor repr name, node id, worker id and worker pid each come from
the lifecycle event whose latest transition is the newest among the events that
carried that field, and a missing/null value never erases a known one.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, cast

import msgspec
import orjson

from runtime.common.json_bytes import dumps_kept
from runtime.server.replay.attempt import (
    APPLIED,
    BAD,
    DUPLICATE,
    STATE_BITS,
    STATE_MASK,
    TASK_STATES,
    Attempt,
    Definition,
    LogInfo,
    Profile,
    merge_attempts,
    merge_log_info,
    seen_before,
)
from runtime.server.replay.definitions import func_name, profile_extra, runtime_env_info, snake_keys
from runtime.server.replay.ids import IdCache, hex_id
from runtime.server.replay.task_events import (
    NO_LOG_INFO,
    ActorTaskDefinitionEvent,
    DefinitionEvent,
    DefinitionPayload,
    LifecyclePayload,
    TaskLogInfo,
    Transition,
    decode_task_blob,
    native_lifecycle,
)
from runtime.server.replay.timestamps import INT64_MAX, NANOS_LEN, SECOND_NS, in_int64, to_int, ts_ns


class TaskTable:
    """All task attempts of a session and the three event handlers feeding them.

    Handlers take the payload and the event's eventId hash (or None) and answer
    BAD (invalid, counted as a bad event), APPLIED or DUPLICATE."""

    def __init__(self, ids: IdCache, base_ns: int = 0) -> None:
        """``base_ns``: an instant before the session's events; transitions are kept
        as ``(ns - base_ns) << 6 | rank`` (within two of CPython's 30-bit int digits
        for years after it: smaller and faster than the ns themselves)."""
        self._ids = ids
        self.base_ns = base_ns
        self._templates: dict[tuple[Any, ...], Definition] = {}  # keyed by the plain tuple of its fields
        self._raw_templates: dict[tuple[Any, ...], Definition] = {}  # keyed by the event's own fields
        self._scanned_templates: dict[bytes, Definition] = {}  # keyed by the fields' text (native scan)
        self._names: dict[str, str] = {}
        self._attempts: dict[object, Attempt] = {}
        self._codes: dict[object, int] = {name: rank for rank, name in enumerate(TASK_STATES)}
        self.state_names: list[str] = list(TASK_STATES)
        self._strings: dict[str, str] = {}  # interned repeated strings (func names, log paths)
        self._frags: dict[bytes, bytes] = {}  # interned JSON of small maps (resources, labels)
        self._envs: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self._attempts)

    # ------------------------------------------------------------- handlers
    def _attempt(self, raw: object, attempt: object) -> Attempt:
        attempt = to_int(attempt)
        key = raw if attempt == 0 else (raw, attempt)
        state = self._attempts.get(key)
        if state is None:
            state = self._attempts[key] = Attempt()
        return state

    def definition(
        self, payload: DefinitionPayload, marker: int | None = None, actor_task: bool = False, typed: bool = True
    ) -> int:
        """``typed``: decoded by :mod:`~runtime.server.replay.task_events` (its scalar
        fields are strings or None), so the event's raw fields can key the template."""
        p = payload
        raw = p.task_id
        if not raw or type(raw) is not str:
            return BAD
        state = self._attempt(raw, p.task_attempt or 0)
        if seen_before(state, marker):
            return DUPLICATE
        key: tuple[Any, ...] | None = None
        shared = None
        if typed:  # most tasks share a definition: skip decoding its maps again
            func = p.actor_func if actor_task else p.task_func
            # The maps' raw JSON as one bytes (hashed once): a NUL cannot occur in JSON text.
            maps = _NUL.join((func, p.required_resources, p.label_selector, p.fallback_strategy))
            key = (
                actor_task, p.task_type, p.language, maps, p.actor_id, p.parent_task_id,
                p.placement_group_id, p.serialized_runtime_env, p.call_site, p.job_id,
            )  # fmt: skip
            shared = self._raw_templates.get(key)
        if shared is None:
            fields = self._definition(p, actor_task)
            shared = self._templates.get(fields)
            if shared is None:
                shared = Definition._make(fields)
                if len(self._templates) < _TEMPLATES_LIMIT:
                    self._templates[fields] = shared
            if key is not None and len(self._raw_templates) < _RAW_TEMPLATES_LIMIT:
                self._raw_templates[key] = shared
        state.definition = shared
        name = p.actor_task_name if actor_task else p.task_name
        name = name if type(name) is str else str(name or "")
        shared_name = self._names.get(name)
        if shared_name is None:
            shared_name = name
            if len(self._names) < _TEMPLATES_LIMIT:  # names often repeat ("square"); ids never do
                self._names[name] = name
        state.name = shared_name
        return APPLIED

    def lifecycle(self, payload: LifecyclePayload, marker: int | None = None) -> int:  # noqa: PLR0912, PLR0915
        # The hot path of a replay (three or more per attempt): _attempt, ts_ns and
        # the carried fields are inlined.
        raw = payload.task_id
        if not raw or type(raw) is not str:
            return BAD
        transitions = payload.state_transitions
        log = payload.task_log_info
        if log is not None and type(log) is TaskLogInfo and log == NO_LOG_INFO:
            log = None
        if not transitions and not log:
            return BAD
        attempt = payload.task_attempt
        if attempt:
            attempt = to_int(attempt)
        key = (raw, attempt) if attempt else raw
        state = self._attempts.get(key)
        if state is None:
            state = self._attempts[key] = Attempt()
        if marker is not None:
            seen = state.seen
            if seen is None:
                state.seen = [marker]
            elif marker in seen:
                return DUPLICATE
            else:
                seen.append(marker)
        if not state.job:
            job = payload.job_id
            if job:
                state.job = self._ids(job)
        if log is not None and type(log) is TaskLogInfo:
            self._merge_log(state, log)
        if not transitions or type(transitions) is not list:
            return APPLIED  # metadata only: never touches state or the carried fields
        codes = state.transitions
        if codes is None:
            codes = state.transitions = []
        latest = -1
        base = self.base_ns
        seconds = SECOND_NS
        state_codes = self._codes
        ns: int | None
        for transition in transitions:
            try:
                text = transition.timestamp
                if len(text) == NANOS_LEN and text[29] == "Z" and text[19] == ".":
                    ns = seconds[text[:19]] + int(text[20:29])
                else:
                    ns = ts_ns(text)  # another precision or offset
                code = state_codes[transition.state]
            except (KeyError, TypeError, ValueError, IndexError):
                ns, code = self._slow_transition(transition)
            if ns is None:
                continue
            packed = ((ns - base) << STATE_BITS) | code
            if packed not in codes:
                codes.append(packed)
            if ns > latest:  # noqa: PLR1730 - cheaper than calling max() per transition
                latest = ns
        if latest < 0:
            return APPLIED
        # Carried fields: from the event with the newest transition; null never erases.
        known = self._ids.known
        value = payload.node_id
        if value and latest >= state.node_ns:
            state.node = (type(value) is str and known.get(value)) or self._ids(value)
            state.node_ns = latest
        value = payload.worker_id
        if value and latest >= state.worker_ns:
            state.worker = (type(value) is str and known.get(value)) or self._ids(value)
            state.worker_ns = latest
        value = payload.worker_pid
        if value and latest >= state.pid_ns:
            if type(value) is not int or value > INT64_MAX:
                value = to_int(value)  # text, or beyond int64 (0: unusable, which never erases)
            if value:
                state.pid = value
                state.pid_ns = latest
        if payload.ray_error_info is not None or payload.is_debugger_paused is not None or payload.actor_repr_name:
            self._carry_optional(state, payload, latest)  # absent unless set
        return APPLIED

    def apply_scanned(self, scan: Any, start: int, stop: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """:meth:`lifecycle`, :meth:`definition` and :meth:`profile` for the events
        ``start..stop`` of a native scan (:func:`~runtime.server.replay.task_events.scan_task_blob`),
        in C on the same attempts; answers how many of each kind (lifecycle, definition,
        actor task definition, profile) were taken and were duplicates, and how many were bad."""
        if native_lifecycle is None:
            raise RuntimeError("the native lifecycle scan is not built")
        counts: tuple[tuple[int, ...], tuple[int, ...], int] = native_lifecycle.apply(
            scan, start, stop, self._attempts, Attempt, self._ids, SECOND_NS, ts_ns, self._strings, self.base_ns,
            self._scanned_templates, self._names, self._learn_definition, _RAW_TEMPLATES_LIMIT, _TEMPLATES_LIMIT,
            self._scanned_profile,
        )  # fmt: skip
        return counts

    def _learn_definition(self, line: bytes) -> tuple[int, Definition | None]:
        """A definition event of a template the native scan has not met yet: applied
        here; answers the handler's result and, when applied, the attempt's Definition
        (which the scan keeps for the events of the same template)."""
        events = decode_task_blob(line, 1)
        event = events[0] if events else None
        if not isinstance(event, (DefinitionEvent, ActorTaskDefinitionEvent)) or event.payload is None:
            raise ValueError("the native scan took a line that is not a typed definition event")
        actor_task = isinstance(event, ActorTaskDefinitionEvent)
        payload = event.payload
        event_id = event.event_id
        marker = hash(event_id) if type(event_id) is str else None
        result = self.definition(payload, marker, actor_task)
        if result != APPLIED:
            return result, None
        return result, self._attempt(payload.task_id, payload.task_attempt or 0).definition

    def _slow_transition(self, transition: Transition) -> tuple[int | None, int]:
        ns = ts_ns(transition.timestamp)
        name = transition.state
        code = self._codes.get(name) if type(name) is str else None
        if code is None:
            code = self._new_state(name)
        return ns, code

    def _carry_optional(self, state: Attempt, payload: LifecyclePayload, latest: int) -> None:
        error = payload.ray_error_info
        if error and type(error) is dict and latest >= state.error_ns:
            state.error = (error.get("errorType") or None, str(error.get("errorMessage") or ""))
            state.error_ns = latest
        paused = payload.is_debugger_paused
        if paused is not None and latest >= state.debugger_ns:
            state.debugger = bool(paused)
            state.debugger_ns = latest
        repr_name = payload.actor_repr_name
        if repr_name and latest >= state.repr_ns:
            state.repr_name = str(repr_name)
            state.repr_ns = latest

    def _new_state(self, name: object) -> int:
        """A status this code does not know (a newer Ray): give it the next rank."""
        text = name if isinstance(name, str) and name else "NIL"
        code = self._codes.get(text)
        if code is None:
            code = len(self.state_names) if len(self.state_names) <= STATE_MASK else 0
            if code:
                self.state_names.append(text)
            self._codes[text] = code
        return code

    def _merge_log(self, state: Attempt, info: TaskLogInfo) -> None:
        """Ray sends files + start offsets and the end offsets in separate events, in
        either order: a file name sets file and start, a non-zero start sets start,
        an end replaces a zero end or is replaced only by a non-zero one."""
        out_file, err_file = info.stdout_file, info.stderr_file
        # Each event carries either the start or the end offsets: no call for the others.
        out_start, out_end, err_start, err_end = info.stdout_start, info.stdout_end, info.stderr_start, info.stderr_end
        update: LogInfo = [
            self._intern(out_file if type(out_file) is str else str(out_file)) if out_file else "",
            0 if out_start is None else to_int(out_start),
            0 if out_end is None else to_int(out_end),
            self._intern(err_file if type(err_file) is str else str(err_file)) if err_file else "",
            0 if err_start is None else to_int(err_start),
            0 if err_end is None else to_int(err_end),
        ]
        merge_log_info(state, update)

    def profile(self, payload: dict[str, Any], marker: int | None = None) -> int:
        raw = payload.get("taskId")
        body = payload.get("profileEvents")
        if not raw or type(raw) is not str or type(body) is not dict:
            return BAD
        entries = body.get("events")
        if not entries or type(entries) is not list:
            return BAD
        state = self._attempt(raw, payload.get("attemptNumber") or 0)
        if seen_before(state, marker):
            return DUPLICATE
        job = payload.get("jobId")
        if job and not state.job:
            state.job = self._ids(job)
        prof = self._profile_of(state, body.get("componentType"), body.get("componentId"), body.get("nodeIpAddress"))
        for entry in entries:
            if type(entry) is not dict:
                continue
            try:
                start = int(entry.get("startTime"))  # type: ignore[arg-type]
                end = int(entry.get("endTime"))  # type: ignore[arg-type]
            except (TypeError, ValueError, OverflowError):
                continue
            if not (in_int64(start) and in_int64(end)):
                continue  # Ray's are int64 ns: beyond it, unusable like text
            name = str(entry.get("eventName") or "")
            extra = entry.get("extraData")
            self._add_profile_event(prof, self._intern(name), start, end, extra if isinstance(extra, str) else "")
        return APPLIED

    def _profile_of(self, state: Attempt, component_type: object, component_id: object, node_ip: object) -> Profile:
        """The attempt's Profile, made from the first profile event's component."""
        prof = state.profile
        if prof is None:
            prof = state.profile = Profile(
                self._intern(str(component_type or "")), self._ids(component_id), self._intern(str(node_ip or ""))
            )
        return prof

    def _add_profile_event(self, prof: Profile, name: str, start: int, end: int, extra: str) -> None:
        """``name`` interned (:meth:`_intern`; the native scan hands names over interned)."""
        stored: str | bytes = extra
        if name.startswith("task::") and extra and extra != "{}":
            # Ray's task:: extra data names the task: parsed once, for the function name and
            # for the JSON the detail answers (rendering would parse it again)
            func, stored = profile_extra(name, extra)
            prof.func_name = func or prof.func_name
        prof.events.setdefault((name, start, end), stored)

    def _scanned_profile(
        self,
        state: Attempt,
        component_type: str | None,
        component_id: str | None,
        node_ip: str | None,
        entries: list[tuple[str, int, int, str]],
    ) -> None:
        """The rest of :meth:`profile` for an event the native scan took and applied up
        to its entries (attempt, duplicate check, job id); ``entries`` are (name, start,
        end, extra data), each as :meth:`profile` reads it, the name already interned."""
        prof = self._profile_of(state, component_type, component_id, node_ip)
        for name, start, end, extra in entries:
            self._add_profile_event(prof, name, start, end, extra)

    # ------------------------------------------------------------ internals
    def _intern(self, text: str) -> str:
        found = self._strings.get(text)
        if found is None:
            self._strings[text] = found = text
        return found

    def _frag(self, value: object) -> bytes:
        data = dumps_kept(value)
        found = self._frags.get(data)
        if found is None:
            self._frags[data] = found = data
        return found

    def _env(self, serialized: object) -> bytes:
        text = serialized if isinstance(serialized, str) else ""
        found = self._envs.get(text)
        if found is None:
            found = self._envs[text] = runtime_env_info(text)
        return found

    def _definition(self, p: DefinitionPayload, actor_task: bool) -> tuple[Any, ...]:
        """The :class:`Definition` fields of a definition event, as a plain tuple."""
        ids = self._ids
        # A plain dict: converted from a dict, the fields typed ``str | None`` hold
        # whatever the event had, and compiled code (mypyc) checks an attribute's
        # annotation as it reads it.
        f = msgspec.structs.asdict(p)
        if actor_task:
            task_type, func, actor = "ACTOR_TASK", p.actor_func, f["actor_id"]
        else:
            task_type, func, actor = str(f["task_type"] or ""), p.task_func, None
        resources = _loads(p.required_resources)
        labels = _loads(p.label_selector)
        fallback = _loads(p.fallback_strategy)
        call_site = f["call_site"]
        return (
            self._intern(task_type),
            self._intern(str(f["language"] or "")),
            self._intern(func_name(_loads(func))),
            self._frag(resources) if isinstance(resources, dict) else b"{}",
            ids(actor) if actor else "",
            ids(f["parent_task_id"]),
            ids(f["placement_group_id"]),
            self._env(f["serialized_runtime_env"]),
            str(call_site) if call_site else None,
            self._frag(labels) if isinstance(labels, dict) else b"{}",
            self._frag(snake_keys(fallback)) if isinstance(fallback, dict) and fallback else _NO_FALLBACK,
            ids(f["job_id"]),
        )

    # -------------------------------------------------------------- results
    def attempts(self) -> list[tuple[str, int, Attempt]]:
        """(hex task id, attempt, state) for every attempt, sorted by (task id, attempt),
        each exactly once: an id that arrived in two spellings (hex and base64) is one
        attempt, the later arrivals folded into the first."""
        retried = False  # else every id has one attempt
        fast_hex = native_lifecycle.hex_id if native_lifecycle is not None else _no_fast_hex
        converted: list[tuple[str, int, Attempt]] = []
        for key, state in self._attempts.items():
            raw, attempt = (key, 0) if isinstance(key, str) else cast(tuple[str, int], key)
            if attempt:
                retried = True
            converted.append((fast_hex(raw) or hex_id(raw), attempt, state))  # each task id converted once
        # By (task id, attempt): two stable sorts on single keys, which list.sort compares
        # as plain str and int, 2-3x faster than comparing tuples (100k attempts: 62 ms
        # against 150 ms). Without retries every attempt is 0: the id alone orders them.
        # Stable: the spellings of one attempt stay adjacent in their arrival order.
        if retried:
            converted.sort(key=itemgetter(1))
        converted.sort(key=itemgetter(0))
        return _merged_adjacent(converted)


def _merged_adjacent(rows: list[tuple[str, int, Attempt]]) -> list[tuple[str, int, Attempt]]:
    """Sorted rows with each (id, attempt) once, later spellings folded into the first
    (equal keys are adjacent: no dict of every id, whose keys would each be hashed)."""
    if all(rows[n][0] != rows[n - 1][0] or rows[n][1] != rows[n - 1][1] for n in range(1, len(rows))):
        return rows
    merged: list[tuple[str, int, Attempt]] = []
    for row in rows:
        if merged and merged[-1][0] == row[0] and merged[-1][1] == row[1]:
            merge_attempts(merged[-1][2], row[2])
        else:
            merged.append(row)
    return merged


def _no_fast_hex(raw: object) -> str | None:
    """Without the native build every id takes :func:`hex_id`."""
    return None


_NO_FALLBACK = b'{"options":[]}'
_NUL = b"\0"


def _loads(raw: msgspec.Raw) -> Any:
    """A raw JSON field's value as ``orjson.loads`` reads it (None when absent or
    beyond orjson, such as ``1e999``, which the dict path rejects with its line)."""
    if not raw:
        return None
    try:
        return orjson.loads(bytes(raw))
    except orjson.JSONDecodeError:
        return None


_TEMPLATES_LIMIT = 1 << 16
#: Raw keys hold the maps' JSON text: fewer of them (a session has tens of distinct
#: definitions; one with a call site per task would only fill this cache).
_RAW_TEMPLATES_LIMIT = 1 << 12

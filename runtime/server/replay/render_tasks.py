"""Task attempts as ``tasks`` / ``task_counts`` rows.

A ``/api/v0/tasks`` row without ``detail`` is rendered from the columns when read
(:func:`brief_json`: every one of its fields is a column) and ``extra_json`` holds
the detail-only fields, in the key order and with the value types
of Ray 2.60's live answers (a captured one is
``tests/fixtures/ray-samples/api/api_v0_tasks_detail=1_limit=100.json``):
unknown ids, pids and times are ``null``; ``runtime_env_info`` is an object.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from runtime.server.replay.attempt import STATE_BITS, STATE_MASK, Definition, Profile
from runtime.server.replay.ids import is_nil
from runtime.server.replay.task_failures import FailureContext, GcsFailure
from runtime.server.replay.tasks import TaskTable

Fragment = orjson.Fragment
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EMPTY = Fragment(b"{}")
_NO_FALLBACK = Fragment(b'{"options":[]}')
_CREATED, _RUNNING, _ENDED = 1, 2, 3
_KINDS = {"PENDING_ARGS_AVAIL": _CREATED, "RUNNING": _RUNNING, "FINISHED": _ENDED, "FAILED": _ENDED}
_NO_DEF_HEAD = b'{"language":"","required_resources":null,"runtime_env_info":null,"placement_group_id":null,"events":'
_NO_DEF_TAIL = b',"call_site":null,"label_selector":{},"fallback_strategy":{"options":[]}}'

#: Column order of the ``tasks`` table as inserted by the builder.
TASK_COLUMNS = (
    "task_id, attempt, job_id, actor_id, name, func_name, state, type, parent_task_id, node_id, worker_id, "
    "worker_pid, creation_ms, start_ms, end_ms, error_type, extra_json"
)
INSERT_TASK = f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES ({', '.join('?' * 17)})"  # noqa: S608 - constants
INSERT_TASK_COUNT = "INSERT INTO task_counts (job_id, state, type, name, func_name, n) VALUES (?, ?, ?, ?, ?, ?)"

TaskRow = tuple[Any, ...]
#: Position of the detail-only JSON in a :data:`TaskRow`.
EXTRA = 16
#: The columns :func:`brief_json` renders, in the order of its keys.
BRIEF_COLUMNS = (
    "task_id, attempt, name, state, job_id, actor_id, type, func_name, parent_task_id, node_id, worker_id, "
    "worker_pid, error_type"
)
_BRIEF_OF_ROW = (0, 1, 4, 6, 2, 3, 7, 5, 8, 9, 10, 11, 15)  # BRIEF_COLUMNS' positions in a TaskRow


def brief_json(columns: Sequence[Any]) -> bytes:
    """The ``/api/v0/tasks`` row (without ``detail``) of the values of :data:`BRIEF_COLUMNS`."""
    (task_id, attempt, name, state, job, actor, task_type, func, parent, node, worker, pid, error_type) = columns
    return orjson.dumps(
        {
            "task_id": task_id,
            "attempt_number": attempt,
            "name": name,
            "state": state,
            "job_id": job,
            "actor_id": actor or None,
            "type": task_type,
            "func_or_class_name": func,
            "parent_task_id": parent,
            "node_id": node or None,
            "worker_id": worker or None,
            "worker_pid": pid or None,
            "error_type": error_type,
        }
    )


def row_brief_json(row: TaskRow) -> bytes:
    """A rendered row's ``/api/v0/tasks`` object."""
    return brief_json([row[n] for n in _BRIEF_OF_ROW])


def detail_json(row: TaskRow) -> bytes:
    """A rendered row's ``/api/v0/tasks?detail=1`` object (its extra_json not packed)."""
    return splice_detail(row_brief_json(row), row[EXTRA])


def splice_detail(brief: bytes, extra_json: bytes) -> bytes:
    """The detail form: the brief object with the detail-only fields spliced in."""
    if len(extra_json) <= 2:  # b"{}"
        return brief
    return brief[:-1] + b"," + extra_json[1:]


class TaskRenderer:
    """Renders attempts; keeps the per-filter-column counts for ``task_counts``."""

    def __init__(self, table: TaskTable, failures: FailureContext | None = None) -> None:
        """``failures``: dead workers and finished jobs, for the GCS's failure rules
        (:mod:`runtime.server.replay.task_failures`); None applies none."""
        self._table = table
        self._failures = failures
        self._frags: dict[bytes, orjson.Fragment] = {}
        self._extra: dict[str, object] = {"{}": {}, "": {}}
        self._heads: dict[tuple[Any, ...], bytes] = {}
        self._tails: dict[tuple[Any, ...], bytes] = {}
        self.counts: Counter[tuple[str, str, str, str, str]] = Counter()
        self.profile_events = 0  # rendered so far
        #: the latest transition of any attempt rendered so far (ns; 0: none)
        self.last_ns = 0

    def _frag(self, data: bytes) -> orjson.Fragment:
        found = self._frags.get(data)
        if found is None:
            found = self._frags[data] = Fragment(data)
        return found

    def rows(self, ordered: bool = False) -> Iterator[TaskRow]:  # noqa: PLR0912, PLR0915 - hot loop, inlined
        """One ``tasks`` row per attempt; in primary-key order when ``ordered``.

        ``extra_json`` is assembled from a prefix and a suffix cached per distinct
        definition fields (most tasks share them) around the per-attempt middle."""
        names = self._table.state_names
        base = self._table.base_ns
        kinds = [_KINDS.get(name, 0) for name in names] + [0] * (STATE_MASK + 1 - len(names))
        event_heads = [orjson.dumps({"state": name})[:-1].decode() + ',"created_ms":' for name in names]
        counts = self.counts
        dumps = orjson.dumps
        top = 0
        failures = self._failures
        failed = names.index("FAILED")
        def_texts: dict[int, tuple[bytes, bytes]] = {}
        for task_id, attempt, st in self._table.attempts(ordered):
            d = st.definition
            codes = sorted(st.transitions) if st.transitions else None
            err = st.error
            if failures is not None and not (codes and kinds[codes[-1] & STATE_MASK] == _ENDED):
                gcs = _gcs_failure(codes, kinds, st.worker, (d.job if d is not None else "") or st.job, failures)
                if gcs is not None:
                    codes = [*(codes or ()), ((gcs.ms * 1_000_000 - base) << STATE_BITS) | failed]
                    codes.sort()
                    err = (gcs.error_type, gcs.message)
            state = ""
            creation = start = end = None
            events = "[]"
            if codes:
                parts = []
                for code in codes:
                    low = code & STATE_MASK
                    ms = ((code >> STATE_BITS) + base) // 1_000_000
                    parts.append(f"{event_heads[low]}{ms}.0}}")
                    kind = kinds[low]
                    if kind:
                        if kind == _CREATED:
                            if creation is None:
                                creation = ms
                        elif kind == _RUNNING:
                            if start is None:
                                start = ms
                        else:
                            end = ms
                state = names[codes[-1] & STATE_MASK]
                if codes[-1] > top:
                    top = codes[-1]
                    self.last_ns = (top >> STATE_BITS) + base
                events = "[" + ",".join(parts) + "]"
            if d is not None:
                task_type, name, func, job = d.type, st.name, d.func, d.job or st.job
                actor, parent = d.actor, d.parent
                texts = def_texts.get(id(d))
                if texts is None:  # each definition is held by its attempts: its id is its own here
                    texts = def_texts[id(d)] = (self._head(d), self._tail(d))
                head, tail = texts
            else:
                task_type, name, job, actor, parent = "", "", st.job, "", ""
                func = st.profile.func_name if st.profile is not None else ""
                head, tail = _NO_DEF_HEAD, _NO_DEF_TAIL
            if not actor and task_type == "ACTOR_CREATION_TASK" and len(task_id) == 48:
                actor = task_id[16:]  # creation task id = 8 nil bytes + actor id
            node, worker, pid = st.node, st.worker, st.pid
            log = st.log
            middle = {
                "creation_time_ms": None if creation is None else float(creation),
                "start_time_ms": None if start is None else float(start),
                "end_time_ms": None if end is None else float(end),
                "task_log_info": None
                if log is None
                else {
                    "stdout_file": log[0],
                    "stderr_file": log[3],
                    "stdout_start": log[1],
                    "stdout_end": log[2],
                    "stderr_start": log[4],
                    "stderr_end": log[5],
                },
                "error_message": _strip_ansi(err[1]) if err is not None else None,
                "is_debugger_paused": st.debugger,
            }
            prof = st.profile
            profile = b""
            if prof is not None:
                profile = b',"profiling_data":' + dumps(self._profile(prof))
            extra = b"".join((head, events.encode(), profile, b",", dumps(middle)[1:-1], tail))
            counts[(job, state, task_type, name, func)] += 1
            yield (
                task_id,
                attempt,
                job,
                actor,
                name,
                func,
                state,
                task_type,
                parent,
                node,
                worker,
                pid,
                creation,
                start,
                end,
                err[0] if err is not None else None,
                extra,
            )

    def _head(self, d: Definition) -> bytes:
        """``{"language":..,"required_resources":..,"runtime_env_info":..,"placement_group_id":..,"events":``"""
        key = (d.language, d.resources, d.runtime_env, d.placement_group)
        found = self._heads.get(key)
        if found is None:
            pg = d.placement_group
            body = orjson.dumps(
                {
                    "language": d.language,
                    "required_resources": Fragment(d.resources),
                    "runtime_env_info": Fragment(d.runtime_env),
                    "placement_group_id": pg if pg and not is_nil(pg) else None,
                }
            )
            found = self._heads[key] = body[:-1] + b',"events":'
        return found

    def _tail(self, d: Definition) -> bytes:
        """``,"call_site":..,"label_selector":..,"fallback_strategy":..}``"""
        key = (d.call_site, d.labels, d.fallback)
        found = self._tails.get(key)
        if found is None:
            body = orjson.dumps(
                {
                    "call_site": d.call_site,
                    "label_selector": Fragment(d.labels),
                    "fallback_strategy": Fragment(d.fallback),
                }
            )
            found = self._tails[key] = b"," + body[1:]
        return found

    def _profile(self, prof: Profile) -> dict[str, Any]:
        events = []
        ctype, cid, ip = prof.component_type, prof.component_id, prof.node_ip
        for (name, start, end), extra in prof.events.items():
            events.append(
                {
                    "start_time": start / 1_000_000,
                    "end_time": end / 1_000_000,
                    "extra_data": self._extra_data(extra),
                    "event_name": name,
                }
            )
        self.profile_events += len(events)
        return {"component_type": ctype, "component_id": cid, "node_ip_address": ip, "events": events}

    def _extra_data(self, text: str) -> object:
        found = self._extra.get(text)
        if found is not None:
            return found
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = {}
        if len(self._extra) < 4096:
            self._extra[text] = value
        return value


def _gcs_failure(
    codes: list[int] | None, kinds: list[int], worker: str, job: str, failures: FailureContext
) -> GcsFailure | None:
    """The GCS's failure of an attempt without a terminal transition (sorted ``codes``)."""
    if codes and any(kinds[code & STATE_MASK] == _ENDED for code in codes):
        return None
    return failures.failure(worker, job)


def _strip_ansi(text: str | None) -> str | None:
    """Ray's State API answers error messages without the terminal colour codes."""
    if not text or "\x1b" not in text:
        return text
    return _ANSI.sub("", text)

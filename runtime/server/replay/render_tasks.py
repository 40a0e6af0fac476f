"""Task attempts as ``tasks`` / ``task_counts`` rows.

A ``/api/v0/tasks`` row without ``detail`` is rendered from the columns when read
(:func:`brief_json`: every one of its fields is a column) and ``detail`` holds
the detail-only fields in their stored form (:mod:`runtime.server.replay.task_detail`),
rendered when read in the key order and with the value types of Ray 2.60's live
answers (a captured one is
``tests/fixtures/ray-samples/api/api_v0_tasks_detail=1_limit=100.json``):
unknown ids, pids and times are ``null``; ``runtime_env_info`` is an object.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from runtime.server.replay.attempt import STATE_BITS, STATE_MASK, TASK_STATES
from runtime.server.replay.task_detail import ENDED, KINDS, DetailEncoder, DetailRenderer, time_positions
from runtime.server.replay.task_failures import FailureContext, GcsFailure
from runtime.server.replay.tasks import TaskTable

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Column order of the ``tasks`` table as inserted by the builder.
TASK_COLUMNS = (
    "task_id, attempt, job_id, actor_id, name, func_name, state, type, parent_task_id, node_id, worker_id, "
    "worker_pid, creation_ms, start_ms, end_ms, error_type, detail"
)
#: A row's error_type is '' for none, stored as NULL: sqlite3 binds ``None`` only after
#: looking for an adapter (a failed attribute lookup, ~1 us), nearly every row would pay it.
_ROW_VALUES = f"({', '.join('?' * 15)}, NULLIF(?, ''), ?)"
INSERT_TASK = f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES {_ROW_VALUES}"  # noqa: S608 - constants


def insert_tasks_sql(rows: int) -> str:
    """One INSERT of ``rows`` task rows (their values flattened, in :data:`TASK_COLUMNS` order)."""
    return f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES {', '.join([_ROW_VALUES] * rows)}"  # noqa: S608 - constants


INSERT_TASK_COUNT = "INSERT INTO task_counts (job_id, state, type, name, func_name, n) VALUES (?, ?, ?, ?, ?, ?)"

TaskRow = tuple[Any, ...]
#: Position of the stored detail-only fields in a :data:`TaskRow`.
DETAIL = 16
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
            "error_type": error_type or None,  # '' in a rendered row, NULL in the table
        }
    )


def row_brief_json(row: TaskRow) -> bytes:
    """A rendered row's ``/api/v0/tasks`` object."""
    return brief_json([row[n] for n in _BRIEF_OF_ROW])


def splice_detail(brief: bytes, extra_json: bytes) -> bytes:
    """The detail form: the brief object with the detail-only fields spliced in."""
    if len(extra_json) <= 2:  # b"{}"
        return brief
    return brief[:-1] + b"," + extra_json[1:]


class TaskRenderer:
    """Renders attempts; keeps the per-filter-column counts for ``task_counts`` and
    the texts the rows' detail fields refer to (:attr:`texts`, for ``task_texts``)."""

    def __init__(self, table: TaskTable, failures: FailureContext | None = None) -> None:
        """``failures``: dead workers and finished jobs, for the GCS's failure rules
        (:mod:`runtime.server.replay.task_failures`); None applies none."""
        self._table = table
        self._failures = failures
        self._encoder = DetailEncoder()
        self.texts = self._encoder.texts
        #: attempts by (job, state, type, name, func); a plain dict: compiled, a Counter's
        #: item updates go through the generic mapping protocol
        self.counts: dict[tuple[str, str, str, str, str], int] = {}
        self.profile_events = 0  # rendered so far
        #: the latest transition of any attempt rendered so far (ns; 0: none)
        self.last_ns = 0

    def detail_json(self, row: TaskRow) -> bytes:
        """A rendered row's ``/api/v0/tasks?detail=1`` object."""
        return splice_detail(row_brief_json(row), DetailRenderer(self.texts.get)(row[DETAIL]))

    def rows(self) -> Iterator[TaskRow]:  # noqa: PLR0912, PLR0915 - hot loop, inlined
        """One ``tasks`` row per attempt, in primary-key order."""
        names = self._table.state_names
        base = self._table.base_ns
        known = len(TASK_STATES)
        kinds = [KINDS.get(name, 0) for name in names] + [0] * (STATE_MASK + 1 - len(names))
        counts = self.counts
        encoder = self._encoder
        encode = encoder.encode
        top = 0
        failures = self._failures
        failed = names.index("FAILED")
        definitions: dict[int, int] = {}
        # per sequence of ranks (most tasks share one), keyed by its digits in bijective base
        # 65 (an int: no bytes made and hashed per attempt): the ranks as bytes, where its
        # times are, and whether it goes by name
        shapes: dict[int, tuple[bytes, int, int, int, bool]] = {}
        for task_id, attempt, st in self._table.attempts():
            d = st.definition
            codes = st.transitions or None
            if codes is not None:
                codes.sort()  # in place: no reader of an attempt relies on the arrival order
            err = st.error
            if failures is not None and not (codes and kinds[codes[-1] & STATE_MASK] == ENDED):
                gcs = _gcs_failure(codes, kinds, st.worker, (d.job if d is not None else "") or st.job, failures)
                if gcs is not None:
                    codes = [*(codes or ()), ((gcs.ms * 1_000_000 - base) << STATE_BITS) | failed]
                    codes.sort()
                    err = (gcs.error_type, gcs.message)
            state = ""
            creation = start = end = None
            transitions: list[Any] | None = None
            if codes:
                shape_key = 0
                for code in codes:
                    shape_key = shape_key * 65 + (code & STATE_MASK) + 1
                # a comprehension, not appends: compiled, each append was a method call
                times = [((code >> STATE_BITS) + base) // 1_000_000 for code in codes]
                shape = shapes.get(shape_key)
                if shape is None:
                    ranks = bytes([code & STATE_MASK for code in codes])
                    shape = shapes[shape_key] = (
                        ranks,
                        *time_positions(kinds[rank] for rank in ranks),
                        max(ranks) >= known,  # a state Ray 2.60 does not know: stored by name
                    )
                sequence, created, running, ended, by_name = shape
                creation = times[created] if created >= 0 else None
                start = times[running] if running >= 0 else None
                end = times[ended] if ended >= 0 else None
                if by_name:
                    transitions = [[ms, names[rank]] for rank, ms in zip(sequence, times, strict=True)]
                else:  # the ranks, then the first ms and the steps to the next
                    transitions = [sequence, times[0]]
                    for n in range(1, len(times)):
                        transitions.append(times[n] - times[n - 1])
                state = names[codes[-1] & STATE_MASK]
                if codes[-1] > top:
                    top = codes[-1]
                    self.last_ns = (top >> STATE_BITS) + base
            if d is not None:
                task_type, name, func, job = d.type, st.name, d.func, d.job or st.job
                actor, parent = d.actor, d.parent
                definition = definitions.get(id(d))
                if definition is None:  # each definition is held by its attempts: its id is its own here
                    definition = definitions[id(d)] = encoder.definition(d)
            else:
                task_type, name, job, actor, parent = "", "", st.job, "", ""
                func = st.profile.func_name if st.profile is not None else ""
                definition = 0
            if not actor and task_type == "ACTOR_CREATION_TASK" and len(task_id) == 48:
                actor = task_id[16:]  # creation task id = 8 nil bytes + actor id
            log = st.log
            prof = st.profile
            if prof is not None:
                self.profile_events += len(prof.events)
            detail = encode(
                [
                    definition,
                    transitions,
                    None if log is None else encoder.log(log),
                    _strip_ansi(err[1]) if err is not None else None,
                    st.debugger,
                    None if prof is None else encoder.profile(prof),
                ]
            )
            key = (job, state, task_type, name, func)
            counts[key] = counts.get(key, 0) + 1
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
                st.node,
                st.worker,
                st.pid,
                creation,
                start,
                end,
                (err[0] or "") if err is not None else "",
                detail,
            )


def _gcs_failure(
    codes: list[int] | None, kinds: list[int], worker: str, job: str, failures: FailureContext
) -> GcsFailure | None:
    """The GCS's failure of an attempt without a terminal transition (sorted ``codes``)."""
    if codes and any(kinds[code & STATE_MASK] == ENDED for code in codes):
        return None
    return failures.failure(worker, job)


def _strip_ansi(text: str | None) -> str | None:
    """Ray's State API answers error messages without the terminal colour codes."""
    if not text or "\x1b" not in text:
        return text
    return _ANSI.sub("", text)

"""The compact state of one task attempt: :class:`Attempt` (``__slots__``), its
shared :class:`Definition` and its :class:`Profile`, and the order-independent
merges shared by the event handlers (:mod:`runtime.server.replay.tasks`) and by the
merge of two spellings of one task id.

Transitions are single ints ``(ns - base_ns) << 6 | status rank`` in a list, so
sorting orders them chronologically (ties by Ray's status order) and the (state, ns)
de-duplication is a membership test. Lists, not ``array('q')``: CPython 3.11 converts
each int appended to or read from such an array through a slow generic path, which
cost a build ~5 % of its instructions (callgrind, 12k tasks); the ints take ~150 bytes
more per attempt, and a big session's worker holds one bucket of attempts at a time.
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: Ray's TaskStatus enum, in order (the rank breaks timestamp ties).
TASK_STATES = (
    "NIL",
    "PENDING_ARGS_AVAIL",
    "PENDING_NODE_ASSIGNMENT",
    "PENDING_OBJ_STORE_MEM_AVAIL",
    "PENDING_ARGS_FETCH",
    "SUBMITTED_TO_WORKER",
    "PENDING_ACTOR_TASK_ARGS_FETCH",
    "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY",
    "RUNNING",
    "RUNNING_IN_RAY_GET",
    "RUNNING_IN_RAY_WAIT",
    "FINISHED",
    "FAILED",
    "GETTING_AND_PINNING_ARGS",
)
STATE_BITS = 6
STATE_MASK = (1 << STATE_BITS) - 1

#: Handler results.
BAD, APPLIED, DUPLICATE = 0, 1, 2

#: ``Attempt.log``: ``[stdout_file, stdout_start, stdout_end, stderr_file, stderr_start, stderr_end]``.
LogInfo = list[Any]


class Definition(NamedTuple):
    """The fields of a definition event that tasks share (one value per distinct
    definition, interned by :class:`~runtime.server.replay.tasks.TaskTable`): the
    task name is not one of them (see :attr:`Attempt.name`)."""

    type: str
    language: str
    func: str
    resources: bytes  # JSON object
    actor: str  # hex actor id ('' for a normal task)
    parent: str  # hex parent task id
    placement_group: str  # hex placement group id
    runtime_env: bytes  # JSON object
    call_site: str | None
    labels: bytes  # JSON object
    fallback: bytes  # JSON object
    job: str  # hex job id


class Profile:
    """The profile events of one attempt (``TASK_PROFILE_EVENT``)."""

    __slots__ = ("component_id", "component_type", "events", "func_name", "node_ip")

    def __init__(self, component_type: str, component_id: str, node_ip: str) -> None:
        self.component_type = component_type
        self.component_id = component_id  # hex
        self.node_ip = node_ip
        #: (name, start, end) -> extra data: Ray's text, or (bytes) already the JSON the State API answers
        self.events: dict[tuple[str, int, int], str | bytes] = {}
        self.func_name = ""  # from a ``task::`` event's extra data


class Attempt:
    """One task attempt. Each carried field (node, worker, pid, error, debugger flag,
    actor repr name) has the newest transition ns of the event it came from beside
    it (``*_ns``, -1 until set)."""

    __slots__ = (
        "debugger",
        "debugger_ns",
        "definition",
        "error",
        "error_ns",
        "job",
        "log",
        "name",
        "node",
        "node_ns",
        "pid",
        "pid_ns",
        "profile",
        "repr_name",
        "repr_ns",
        "seen",
        "transitions",
        "worker",
        "worker_ns",
    )

    def __init__(self) -> None:
        self.job = ""  # hex job id from lifecycle/profile events ('' unknown)
        self.definition: Definition | None = None
        self.name = ""  # task name (the definition is shared between tasks, the name is not)
        self.transitions: list[int] | None = None
        self.log: LogInfo | None = None
        self.node = ""
        self.node_ns = -1
        self.worker = ""
        self.worker_ns = -1
        self.pid = 0
        self.pid_ns = -1
        self.error: tuple[str | None, str] | None = None  # (error_type, error_message)
        self.error_ns = -1
        self.debugger: bool | None = None
        self.debugger_ns = -1
        self.repr_name = ""
        self.repr_ns = -1
        self.profile: Profile | None = None
        self.seen: list[int] | None = None  # the eventId hashes applied (de-duplication)


#: The carried fields of an :class:`Attempt`, each with the slot of its transition ns.
CARRIED = (
    ("node", "node_ns"),
    ("worker", "worker_ns"),
    ("pid", "pid_ns"),
    ("error", "error_ns"),
    ("debugger", "debugger_ns"),
    ("repr_name", "repr_ns"),
)


def seen_before(state: Attempt, marker: int | None) -> bool:
    """Record an eventId hash on its attempt; True when it was applied already.
    Per attempt, not one session-wide set: a few list slots (and an int each) instead
    of a set entry per event that the whole session keeps."""
    if marker is None:
        return False
    seen = state.seen
    if seen is None:
        state.seen = [marker]
        return False
    if marker in seen:
        return True
    seen.append(marker)
    return False


def merge_log_info(state: Attempt, update: LogInfo) -> None:
    current = state.log
    if current is None:
        state.log = update
        return
    for base in (0, 3):
        file_name, start, end = update[base], update[base + 1], update[base + 2]
        if file_name:
            current[base] = file_name
            current[base + 1] = start
        elif start:
            current[base + 1] = start
        if end or not current[base + 2]:
            current[base + 2] = end


def merge_attempts(into: Attempt, other: Attempt) -> None:
    """Fold ``other`` into ``into`` with the same rules as the event handlers."""
    into.job = into.job or other.job
    if other.definition is not None and into.definition is None:
        into.definition, into.name = other.definition, other.name
    if other.transitions:
        codes = list(into.transitions or ())
        into.transitions = codes + [c for c in other.transitions if c not in codes]
    if other.log is not None:
        merge_log_info(into, list(other.log))
    for field, field_ns in CARRIED:
        if getattr(other, field_ns) > getattr(into, field_ns):
            setattr(into, field, getattr(other, field))
            setattr(into, field_ns, getattr(other, field_ns))
    if other.profile is not None:
        if into.profile is None:
            into.profile = other.profile
        else:
            for key, extra in other.profile.events.items():
                into.profile.events.setdefault(key, extra)
            into.profile.func_name = into.profile.func_name or other.profile.func_name

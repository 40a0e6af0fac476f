"""The compact state of one task attempt: slot layout, and the order-independent
merges shared by the event handlers (:mod:`runtime.server.replay.tasks`) and by the
merge of two spellings of one task id.

An attempt is a plain list (``S_*`` slots). Transitions are single ints
``(ns - base_ns) << 6 | status rank`` (an ``array('q')`` when they fit, else a
list), so sorting orders them chronologically (ties by Ray's status order) and
the (state, ns) de-duplication is a membership test.
"""

from __future__ import annotations

from array import array
from typing import Any

from runtime.server.replay.timestamps import to_int

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

# Attempt slots.
S_JOB = 0  # hex job id from lifecycle/profile events ('' unknown)
S_DEF = 1  # Definition tuple (D_* slots) or None
S_TRS = 2  # list of transition ints, or None
S_LOG = 3  # [stdout_file, stdout_start, stdout_end, stderr_file, stderr_start, stderr_end] or None
S_NODE, S_NODE_NS = 4, 5
S_WORKER, S_WORKER_NS = 6, 7
S_PID, S_PID_NS = 8, 9
S_ERR, S_ERR_NS = 10, 11  # (error_type, error_message)
S_DBG, S_DBG_NS = 12, 13
S_REPR, S_REPR_NS = 14, 15
S_PROF = 16  # Profile list (P_* slots) or None
S_NAME = 17  # task name (the definition tuple is shared between tasks, the name is not)
S_SEEN = 18  # array of the eventId hashes applied to this attempt (de-duplication), or None
N_SLOTS = 19

#: Handler results.
BAD, APPLIED, DUPLICATE = 0, 1, 2

# Definition tuple slots (D_NAME is always ""; see S_NAME).
D_TYPE, D_LANG, D_FUNC, D_NAME, D_RESOURCES, D_ACTOR, D_PARENT, D_PG = 0, 1, 2, 3, 4, 5, 6, 7
D_ENV, D_CALL_SITE, D_LABELS, D_FALLBACK, D_JOB = 8, 9, 10, 11, 12

# Profile slots: component type, component id (hex), node ip, {(name, start, end): extra}, task:: name.
P_CTYPE, P_CID, P_IP, P_EVENTS, P_FNAME = 0, 1, 2, 3, 4


def new_attempt() -> list[Any]:
    return ["", None, None, None, "", -1, "", -1, 0, -1, None, -1, None, -1, "", -1, None, "", None]


def seen_before(state: list[Any], marker: int | None) -> bool:
    """Record an eventId hash on its attempt; True when it was applied already.
    Per attempt, not one session-wide set: a few array slots instead of ~70 bytes
    of set entry and int object per event."""
    if marker is None:
        return False
    seen = state[S_SEEN]
    if seen is None:
        state[S_SEEN] = array("q", (marker,))
        return False
    if marker in seen:
        return True
    seen.append(marker)
    return False


def offset(value: object) -> int:
    if value is None:
        return 0
    return value if type(value) is int else to_int(value)


def merge_log_info(state: list[Any], update: list[Any]) -> None:
    current = state[S_LOG]
    if current is None:
        state[S_LOG] = update
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


def merge_attempts(into: list[Any], other: list[Any]) -> None:
    """Fold ``other`` into ``into`` with the same rules as the event handlers."""
    into[S_JOB] = into[S_JOB] or other[S_JOB]
    if other[S_DEF] is not None and into[S_DEF] is None:
        into[S_DEF], into[S_NAME] = other[S_DEF], other[S_NAME]
    if other[S_TRS]:
        codes = list(into[S_TRS] or ())
        into[S_TRS] = codes + [c for c in other[S_TRS] if c not in codes]
    if other[S_LOG] is not None:
        merge_log_info(into, list(other[S_LOG]))
    for value_slot in (S_NODE, S_WORKER, S_PID, S_ERR, S_DBG, S_REPR):
        if other[value_slot + 1] > into[value_slot + 1]:
            into[value_slot], into[value_slot + 1] = other[value_slot], other[value_slot + 1]
    if other[S_PROF] is not None:
        if into[S_PROF] is None:
            into[S_PROF] = other[S_PROF]
        else:
            for key, extra in other[S_PROF][P_EVENTS].items():
                into[S_PROF][P_EVENTS].setdefault(key, extra)
            into[S_PROF][P_FNAME] = into[S_PROF][P_FNAME] or other[S_PROF][P_FNAME]

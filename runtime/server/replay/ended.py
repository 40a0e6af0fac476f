"""What a stored session shows once it has ended (issue #19: honest dead sessions).

Ray exports no "cluster stopped" event: a head that is deleted takes its GCS with
it, so nodes, actors and workers that were alive stay ALIVE in the events forever.
Once the session is known to be over (:mod:`runtime.server.queries.ended`), each of
them is shown DEAD, its end time the session's end: the last moment any stored event
records (an event's own timestamp or a transition in it), never before its own last
transition. A row whose events say DEAD already keeps what the events say.

The ended forms are rendered at build time next to the plain ones (``ended_json``),
so serving either costs the same.
"""

from __future__ import annotations

NODE_ENDED_MESSAGE = (
    "The cluster ended: no death event was stored for this node; "
    "its end time is the last moment the session's stored events record."
)


def actor_ended_message(state: str) -> str:
    return (
        f"The cluster ended while this actor was {state or 'in an unknown state'}: no death event was stored "
        "for it; its end time is the last moment the session's stored events record."
    )


def end_of(state: str, last_ms: int, session_end_ms: int | None) -> int | None:
    """The end time to show once the session has ended (ms), or None: the row needs
    no ended form (its events say DEAD, or the session's end is unknown)."""
    if state == "DEAD" or session_end_ms is None:
        return None
    return max(session_end_ms, last_ms)


class LastMoment:
    """The latest time (ns) seen among a session's events."""

    __slots__ = ("ns",)

    def __init__(self) -> None:
        self.ns = 0

    def see(self, ns: int | None) -> None:
        if ns is not None and ns > self.ns:
            self.ns = ns

    @property
    def ms(self) -> int | None:
        return self.ns // 1_000_000 if self.ns else None

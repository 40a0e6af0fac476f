"""Whether a stored session has ended: the rule of ``ray-history gc``
(:mod:`runtime.storage.retention`) and of indexing ahead
(:mod:`runtime.server.index.ahead`), so the three never disagree.

A session has ended when a newer session of the same cluster is stored (a cluster
runs one session at a time: Ray starts a new one at every head start), or when live
discovery answered and the cluster is not among the live ones, or -- where liveness is
unknown, and for display and indexing only, which a wrong guess does not harm, never
for gc's deletions -- when the head collector marked it ended (``session_ended.json``: written last at its shutdown,
deleted by a collector that finds the session running again; the one signal where no
Kubernetes API can be asked, e.g. the quickstart). Anything else -- the newest session
of a live cluster, or of a cluster whose liveness is unknown and no end marked -- may
still be running, and its nodes and actors are shown as the events left them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime

#: A cluster as live discovery and the stored markers both name it: (namespace, name).
ClusterKey = tuple[str, str]


def session_ended(
    cluster: ClusterKey,
    created_at: datetime | None,
    stored: Iterable[tuple[ClusterKey, datetime]],
    live: Collection[ClusterKey] | None,
    *,
    marked: bool = False,
) -> bool:
    """``stored``: (cluster, creation time) of the stored sessions, newest first (it
    is read only down to this session's time); ``live``: the live clusters, or None
    when they could not be listed; ``marked``: the collector's end marker is stored
    (it counts only where liveness is unknown: a cluster discovery lists as running is
    running its newest session, whatever a stale marker says)."""
    if live is not None and cluster not in live:
        return True
    unknown_end = live is None and marked
    if created_at is None:  # not a Ray session name: no "newer" can be told
        return unknown_end
    for key, when in stored:
        if when <= created_at:
            break
        if key == cluster:
            return True
    return unknown_end

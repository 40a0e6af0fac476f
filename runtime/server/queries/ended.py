"""Whether a stored session has ended: the rule of ``ray-history gc``
(:mod:`runtime.storage.retention`) and of indexing ahead
(:mod:`runtime.server.index.ahead`), so the three never disagree.

A session has ended when a newer session of the same cluster is stored (a cluster
runs one session at a time: Ray starts a new one at every head start), or when live
discovery answered and the cluster is not among the live ones. Anything else -- the
newest session of a live cluster, or of a cluster whose liveness is unknown -- may
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
) -> bool:
    """``stored``: (cluster, creation time) of the stored sessions, newest first (it
    is read only down to this session's time); ``live``: the live clusters, or None
    when they could not be listed."""
    if live is not None and cluster not in live:
        return True
    if created_at is None:  # not a Ray session name: no "newer" can be told
        return False
    for key, when in stored:
        if when <= created_at:
            return False
        if key == cluster:
            return True
    return False

"""Whole-session retention: which stored sessions ``ray-history gc`` deletes.

Pure: a listing of the bucket (and, optionally, the set of live RayClusters) in,
one decision per session out. The bucket's own age rule deletes objects one by
one, so a cluster running for months loses its early logs while still running
and a finished session ends up half-deleted; here a session is kept or deleted
whole, and only once it has *ended*:

* a newer session of the same cluster exists in storage (Ray starts a new
  session at every head start, and a cluster runs one session at a time). "Newer"
  by the time in its name, which is the head's *local* time: a DST change or a
  clock set back can name the running session earlier than the one it replaced, so
  a name less than :data:`NAME_CLOCK_SLACK` later counts only if that session was
  also written to later, and a name further apart only if that session was written
  to no more than :data:`NAME_CLOCK_SLACK` before it (a head clock that ran fast
  names a long-ended session "later"); or
* the live set is known and the cluster is not in it (its RayCluster is gone).

The collector's end marker (``session_ended.json``) is not a third rule: any job of
the namespace holds the credential that writes it. A session's end time is the
newest modification time of any of its objects (marker included); it is deleted
when that time lies strictly before the cutoff. Whatever cannot be shown to have
ended -- the newest session of a live cluster, or of a cluster whose liveness is
unknown -- is kept, however old its objects are.

A session's shared indexes (``history-index/``, written by history servers) go with
it. They do not count as "written to": an index uploaded yesterday for a session
that ended a year ago does not keep it. An index whose session is already gone (an
upload that raced a gc run) forms a record of its own, dated by the index.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from runtime.storage.base import ObjectInfo
from runtime.storage.layout import ClusterRef, KeyLayout, SessionMarker, session_created_at
from runtime.storage.session_keys import IndexObject, StoredObject, parse_index_key, parse_key

#: A live RayCluster as the Kubernetes API names it: (namespace, name).
LiveKey = tuple[str, str]
#: How far apart two session names' times must be to order the sessions by name alone.
#: Names carry the head's local time and UTC offsets span UTC-12 to UTC+14, so a DST
#: change or a new time zone on the head moves one name by less than this.
NAME_CLOCK_SLACK = timedelta(hours=26)


@dataclass
class SessionRecord:
    """What the listing says about one stored session."""

    cluster: ClusterRef
    session: str
    #: Newest modification time of its objects: when it was last written to.
    newest: datetime | None = None
    objects: int = 0
    bytes: int = 0
    has_marker: bool = False
    #: Its markers exactly as listed (the kind segment is read case-insensitively, so
    #: the key rebuilt from the parsed marker may not be the stored one).
    marker_keys: list[str] = field(default_factory=list)
    #: Its shared index objects (data and manifests, every version).
    index_keys: list[str] = field(default_factory=list)
    index_bytes: int = 0
    index_newest: datetime | None = None

    @property
    def created_at(self) -> datetime | None:
        """The start time its name carries (None for names without one)."""
        return session_created_at(self.session)

    def add(self, info: ObjectInfo) -> None:
        self.objects += 1
        self.bytes += info.size
        if info.updated is not None and (self.newest is None or info.updated > self.newest):
            self.newest = info.updated

    def add_index(self, info: ObjectInfo) -> None:
        self.index_keys.append(info.key)
        self.index_bytes += info.size
        if info.updated is not None and (self.index_newest is None or info.updated > self.index_newest):
            self.index_newest = info.updated

    def date_orphan_index(self) -> None:
        """Only index objects and no session: it was last written when they were."""
        if self.objects == 0:
            self.newest = self.index_newest


@dataclass(frozen=True)
class Decision:
    """Keep or delete one session, and why (shown by ``--dry-run``)."""

    record: SessionRecord
    delete: bool
    reason: str


def summarise(layout: KeyLayout, infos: Iterable[ObjectInfo]) -> list[SessionRecord]:
    """Fold a listing of the history, marker and index prefixes into one record per session.

    Keys the layout does not build (another root, malformed names) are not anyone's
    session and are left out: gc never touches them.
    """
    records: dict[tuple[ClusterRef, str], SessionRecord] = {}
    for info in infos:
        parsed: SessionMarker | StoredObject | IndexObject | None = parse_key(layout, info.key)
        if parsed is None:
            parsed = parse_index_key(layout, info.key)
        if parsed is None:
            continue
        key = (parsed.cluster, parsed.session)
        record = records.get(key)
        if record is None:
            record = records[key] = SessionRecord(parsed.cluster, parsed.session)
        if isinstance(parsed, IndexObject):
            record.add_index(info)
            continue
        record.add(info)
        if isinstance(parsed, SessionMarker):
            record.has_marker = True
            record.marker_keys.append(info.key)
    for record in records.values():
        record.date_orphan_index()
    return sorted(records.values(), key=_order)


def select(
    records: Iterable[SessionRecord], *, cutoff: datetime, live: Collection[LiveKey] | None = None
) -> list[Decision]:
    """One decision per session: delete exactly those that ended before ``cutoff``.

    ``live`` is the set of live RayClusters, or None when liveness was not checked
    (then only a newer session proves that one has ended).
    """
    by_cluster: dict[ClusterRef, list[SessionRecord]] = defaultdict(list)
    for record in records:
        by_cluster[record.cluster].append(record)
    decisions: list[Decision] = []
    for cluster in sorted(by_cluster, key=_cluster_order):
        sessions = sorted(by_cluster[cluster], key=_order)
        for record in sessions:
            ended = _ended_because(record, sessions, live)
            decisions.append(
                _decide(record, ended, cutoff) if ended else Decision(record, False, _why_kept(record, sessions, live))
            )
    return decisions


def _ended_because(record: SessionRecord, sessions: list[SessionRecord], live: Collection[LiveKey] | None) -> str:
    """Why ``record`` has certainly ended, or "" when it may still be running."""
    started = record.created_at
    if started is not None:
        later = [s for s in sessions if _succeeds(s, record, started)]
        if later:
            successor = min(later, key=_order)
            return f"ended: a newer session of the cluster exists ({successor.session})"
    if live is not None and (record.cluster.namespace, record.cluster.name) not in live:
        return f"ended: RayCluster {record.cluster.namespace}/{record.cluster.name} is not live"
    return ""


def _succeeds(other: SessionRecord, record: SessionRecord, started: datetime) -> bool:
    """Whether ``other`` certainly started after ``record`` (which started at ``started``)."""
    created = other.created_at
    if created is None or created <= started or other.newest is None:
        return False
    if record.newest is None:  # nothing to compare (and kept all the same: no modification times)
        return created - started > NAME_CLOCK_SLACK
    if created - started > NAME_CLOCK_SLACK:
        # Far apart by name, but a head clock that ran fast (or was set back) names a
        # session "later" that ended long before: the successor must also have been
        # written to within a day of ``record``'s last write (an ended session's last
        # logs may be uploaded just after its successor started).
        return other.newest >= record.newest - NAME_CLOCK_SLACK
    # Names this close may be in the wrong order: the one written to last is the one
    # that may still run, so it is never ended by the other.
    return other.newest > record.newest


def _decide(record: SessionRecord, ended: str, cutoff: datetime) -> Decision:
    if record.newest is None:
        return Decision(record, False, f"{ended}, but the storage reports no modification times")
    last = f"last written {record.newest.isoformat(timespec='seconds')}"
    if record.newest < cutoff:
        return Decision(record, True, f"{ended}; {last}, before the cutoff")
    return Decision(record, False, f"{ended}; {last}, within the retention period")


def _why_kept(record: SessionRecord, sessions: list[SessionRecord], live: Collection[LiveKey] | None) -> str:
    """Why a session that has not provably ended is kept."""
    started = record.created_at
    if started is None:
        return "may be running: its name carries no start time, so no newer session can end it"
    named_later = [(t, s) for s in sessions if (t := s.created_at) is not None and t > started]
    if named_later:
        created, later = min(named_later, key=lambda pair: _order(pair[1]))
        hours = NAME_CLOCK_SLACK.total_seconds() / 3600
        if created - started <= NAME_CLOCK_SLACK:
            return (
                f"may be running: {later.session} is named less than {hours:g}h later "
                "but was not written to later (session names carry the head's local time)"
            )
        return (
            f"may be running: {later.session} is named later but was last written more than {hours:g}h "
            "before it (a head clock that was wrong names sessions out of order)"
        )
    if live is None:
        return "may be running: the newest session of its cluster, whose liveness was not checked"
    return "running: the newest session of a live RayCluster"


def _cluster_order(cluster: ClusterRef) -> tuple[str, str, str, str]:
    return (cluster.namespace, cluster.name, cluster.owner_kind, cluster.owner_name)


def _order(record: SessionRecord) -> tuple[tuple[str, str, str, str], bool, datetime | None, str]:
    created = record.created_at
    # Sessions without a start time sort first: never "newer" than anything.
    return (_cluster_order(record.cluster), created is not None, created, record.session)

"""The parsing side of :mod:`runtime.storage.layout`: what a stored key is.

:class:`~runtime.storage.layout.KeyLayout` builds every key; this module reads
them back, so no other package splits a key or matches a directory name. Most
readers know the session and hold keys relative to its prefix
(``<node>/logs/raylet.out``), hence :func:`parse_session_key`; :func:`parse_key`
decodes a whole key (marker or cluster-history object) and exists mainly so a
property test can round-trip every builder.

The rules are structural and deliberately lax about *values*: the history server
reads what any writer (this collector, KubeRay's Go collector, a hand upload) put
in the bucket, so a node directory is not required to be hex here. Only what the
builder guarantees for every key it writes is required: the right number of
segments, the fixed directory names in their positions and non-empty node, job
and file segments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import (
    CLUSTER_KINDS,
    ENDPOINTS_DIR,
    INDEX_DATA_SUFFIX,
    INDEX_MANIFEST_SUFFIX,
    JOB_EVENTS_DIR,
    LOGS_DIR,
    NODE_EVENTS_DIR,
    RAYCLUSTER,
    ClusterRef,
    KeyLayout,
    SessionMarker,
    endpoint_storage_name,
    is_event_file_name,
    validate_session_name,
)

#: ``<node>/logs/...``: what follows the node directory of a log key. Exported for
#: the SQL that finds log nodes in an index without loading every key into Python.
LOGS_INFIX = f"/{LOGS_DIR}/"
#: Ray's structured log-event files, ``<node>/logs/events/event_<SOURCE>.log``.
LOG_EVENTS_SUBDIR = "events"
LOG_EVENT_FILE_PREFIX = "event_"
LOG_EVENT_FILE_SUFFIX = ".log"
#: Ray names its session directories ``session_<time>_<pid>``.
SESSION_DIR_PREFIX = "session_"
_HEX = frozenset("0123456789abcdef")


# --------------------------------------------------------------- key kinds
@dataclass(frozen=True, slots=True)
class NodeEventFile:
    """``<node>/node_events/<name>``: export events not tied to a job."""

    node: str
    name: str

    @property
    def readable(self) -> bool:
        """Whether the history server replays it (the name has the writer's shape)."""
        return is_event_file_name(self.name)


@dataclass(frozen=True, slots=True)
class JobEventFile:
    """``<node>/job_events/<job>/<name>``: export events of one job."""

    node: str
    job: str
    name: str

    @property
    def readable(self) -> bool:
        return is_event_file_name(self.name)


@dataclass(frozen=True, slots=True)
class LogFile:
    """``<node>/logs/<path>``; ``path`` is relative to the node's ``logs/`` directory."""

    node: str
    path: str

    @property
    def is_log_events(self) -> bool:
        """``events/event_*.log`` directly (Ray's structured log events, ``/events``)."""
        sub, _, name = self.path.partition("/")
        return (
            sub == LOG_EVENTS_SUBDIR
            and "/" not in name
            and len(name) >= len(LOG_EVENT_FILE_PREFIX) + len(LOG_EVENT_FILE_SUFFIX)
            and name.startswith(LOG_EVENT_FILE_PREFIX)
            and name.endswith(LOG_EVENT_FILE_SUFFIX)
        )

    @property
    def on_node_dir(self) -> bool:
        """Whether the node segment is a hex node ID (what the builder writes)."""
        return is_node_dir(self.node)


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """``fetched_endpoints/<name>``: a stored dashboard answer."""

    name: str

    def is_snapshot_of(self, uri: str) -> bool:
        """Whether this is where :meth:`KeyLayout.endpoint_key` files ``uri``."""
        try:
            return self.name == endpoint_storage_name(uri)
        except InvalidKeyError:
            return False


#: What lies under one session prefix. None from the parsers: none of these.
SessionKey = NodeEventFile | JobEventFile | LogFile | EndpointSnapshot


@dataclass(frozen=True, slots=True)
class StoredObject:
    """A decoded ``cluster-history`` key: whose session, and what in it (None: an
    object of a kind the layout does not define)."""

    cluster: ClusterRef
    session: str
    item: SessionKey | None


@dataclass(frozen=True, slots=True)
class IndexObject:
    """A decoded ``history-index`` key: one session's shared index (data or manifest)."""

    cluster: ClusterRef
    session: str
    version: str
    fingerprint: str
    manifest: bool


# ----------------------------------------------------------------- parsers
def relative_key(key: str, session_prefix: str) -> str:
    """``key`` relative to ``session_prefix`` (unchanged if it lies elsewhere)."""
    return key[len(session_prefix) :] if key.startswith(session_prefix) else key


def split_event_path(parts: Sequence[str]) -> tuple[str, str | None, str] | None:
    """``(node, job or None, name)`` of ``node/node_events/name`` or
    ``node/job_events/job/name`` given as path segments; None for anything else.
    Shared by stored keys and the collector's spool, which mirrors this layout."""
    if len(parts) == 3 and parts[1] == NODE_EVENTS_DIR:
        node, _, name = parts
        job = None
    elif len(parts) == 4 and parts[1] == JOB_EVENTS_DIR:
        node, _, job, name = parts
        if not job:
            return None
    else:
        return None
    return (node, job, name) if node and name else None


def event_dir_parts(job: str | None) -> tuple[str, ...]:
    """The directories between a node and an event file (``node_events`` or
    ``job_events/<job>``), for layouts that mirror the stored one on disk."""
    return (JOB_EVENTS_DIR, job) if job else (NODE_EVENTS_DIR,)


def parse_session_key(rel: str) -> SessionKey | None:
    """Classify a key relative to its session prefix; None for other objects."""
    parts = rel.split("/")
    if len(parts) >= 3 and parts[1] == LOGS_DIR:
        path = "/".join(parts[2:])
        return LogFile(parts[0], path) if parts[0] and path else None
    if len(parts) == 2 and parts[0] == ENDPOINTS_DIR:
        return EndpointSnapshot(parts[1]) if parts[1] else None
    found = split_event_path(parts)
    if found is None:
        return None
    node, job, name = found
    return NodeEventFile(node, name) if job is None else JobEventFile(node, job, name)


def is_readable_event_file(item: SessionKey | None) -> bool:
    """An event object the history server replays (the right place and name)."""
    return isinstance(item, (NodeEventFile, JobEventFile)) and item.readable


def is_node_dir(name: str) -> bool:
    """A node directory as the builder writes it: lower-case hex."""
    return bool(name) and _HEX.issuperset(name)


def looks_like_session_name(name: str) -> bool:
    """A Ray session directory name by its prefix (a cheap guess, not a validation)."""
    return name.startswith(SESSION_DIR_PREFIX)


def parse_key(layout: KeyLayout, key: str) -> SessionMarker | StoredObject | None:
    """Decode any key of ``layout``: a session marker, an object of a session, or
    None for keys the layout does not build (other roots, malformed names)."""
    markers = layout.markers_prefix()
    if key.startswith(markers):
        try:
            return layout.parse_marker_key(key)
        except InvalidKeyError:
            return None
    history = layout.history_prefix()
    if not key.startswith(history):
        return None
    decoded = _cluster_session(key[len(history) :].split("/"))
    if decoded is None:
        return None
    cluster, session, rest = decoded
    return StoredObject(cluster, session, parse_session_key("/".join(rest)))


def parse_index_key(layout: KeyLayout, key: str) -> IndexObject | None:
    """Decode a shared-index key (``history-index/...``, data or manifest); None for others."""
    root = layout.index_root_prefix()
    if not key.startswith(root):
        return None
    decoded = _cluster_session(key[len(root) :].split("/"))
    if decoded is None:
        return None
    cluster, session, rest = decoded
    if len(rest) != 2:
        return None
    version, name = rest
    for suffix, manifest in ((INDEX_MANIFEST_SUFFIX, True), (INDEX_DATA_SUFFIX, False)):
        if name.endswith(suffix):
            fingerprint = name.removesuffix(suffix)
            try:
                rebuilt = layout.index_keys(cluster, session, version, fingerprint)
            except InvalidKeyError:
                return None
            if key not in rebuilt:
                return None
            return IndexObject(cluster, session, version, fingerprint, manifest)
    return None


def _cluster_session(parts: list[str]) -> tuple[ClusterRef, str, list[str]] | None:
    """``{kind}/{ns}/[{owner}/]{cluster}/{session}/rest...`` -> (cluster, session, rest)."""
    kind = parts[0]
    width = 3 if kind == RAYCLUSTER else 4  # {ns}/{cluster}/{session} or {ns}/{owner}/{cluster}/{session}
    if kind not in CLUSTER_KINDS or len(parts) < width + 2:
        return None
    try:
        if kind == RAYCLUSTER:
            cluster = ClusterRef(namespace=parts[1], name=parts[2])
        else:
            cluster = ClusterRef(namespace=parts[1], name=parts[3], owner_kind=kind, owner_name=parts[2])
        session = validate_session_name(parts[width])
    except InvalidKeyError:
        return None
    if cluster.owner_kind != kind:  # an owner kind with an empty owner name: not built
        return None
    return cluster, session, parts[width + 1 :]


# ---------------------------------------------- session-relative lookup keys
def logs_rel_prefix(node: str) -> str:
    """``<node>/logs/``: a node's logs as the index's ``objects`` table keys them.
    Not validated: it is a lookup key, and an unknown node just finds nothing."""
    return f"{node}{LOGS_INFIX}"


def log_rel_key(node: str, path: str) -> str:
    """``<node>/logs/<path>`` relative to the session prefix (a lookup key, see above)."""
    return f"{node}{LOGS_INFIX}{path}"

"""The storage key layout: the one contract between collector and history server.

Byte-compatible with KubeRay's Go history server ("the reference" below), so a bucket written by either
implementation is readable by the other::

    {root}/cluster-metadata/raycluster/{ns}_{cluster}/{session}                 (0-byte marker)
    {root}/cluster-metadata/{rayjob|rayservice}/{ns}_{owner}_{cluster}/{session}
    {root}/cluster-history/raycluster/{ns}/{cluster}/{session}/...              (P = cluster prefix)
    {root}/cluster-history/{rayjob|rayservice}/{ns}/{owner}/{cluster}/{session}/...
    P/{session}/{node}/logs/{relative path}
    P/{session}/{node}/node_events/{node}-{YYYY-MM-DD-HH}-{nanos}.jsonl[.gz]
    P/{session}/{node}/job_events/{job}/{node}-{YYYY-MM-DD-HH}-{nanos}.jsonl[.gz]
    P/{session}/fetched_endpoints/restful__{path with / -> __, query kept}
    P/{session}/session_ended.json                                          (ours: collection over)
    P/{session}/metrics/{grafana/dashboards/*.json | prometheus/prometheus.yml}   (head, once)
    {root}/history-index/{kind}/{ns}/[{owner}/]{cluster}/{session}/{version}/{fingerprint}.sqlite.zst
    {root}/history-index/{kind}/{ns}/[{owner}/]{cluster}/{session}/{version}/{fingerprint}.manifest.json

``history-index/`` holds the history server's shared session indexes (ours only: KubeRay's
Go server lists ``cluster-metadata/`` and ``cluster-history/`` and never looks there).

Nothing else in the code base builds or parses these keys (the parsing side is
:mod:`runtime.storage.session_keys`). Every component that
comes from outside is checked against a whitelist, so ``..``, absolute paths and
separators inside one component are rejected before any I/O.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from runtime.common.ids import InvalidIdError, to_hex_id
from runtime.storage.errors import InvalidKeyError

CLUSTER_HISTORY = "cluster-history"
CLUSTER_METADATA = "cluster-metadata"
INDEX_DIR = "history-index"
#: ``python -m runtime.storage check``'s probe objects; every identity may write, read and list here.
PROBE_DIR = "_selfcheck"
INDEX_DATA_SUFFIX = ".sqlite.zst"
INDEX_MANIFEST_SUFFIX = ".manifest.json"
LOGS_DIR = "logs"
NODE_EVENTS_DIR = "node_events"
JOB_EVENTS_DIR = "job_events"
ENDPOINTS_DIR = "fetched_endpoints"
ENDPOINT_PREFIX = "restful__"
#: ``P/{session}/session_ended.json``: not a node directory, so neither server reads it
#: as one; KubeRay's Go server never lists it.
SESSION_ENDED_NAME = "session_ended.json"
METRICS_DIR = "metrics"

RAYCLUSTER = "raycluster"
RAYJOB = "rayjob"
RAYSERVICE = "rayservice"
OWNER_KINDS = (RAYJOB, RAYSERVICE)
CLUSTER_KINDS = (RAYCLUSTER, RAYJOB, RAYSERVICE)

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9._-]+$")
_FILE_SEGMENT = re.compile(r"^[A-Za-z0-9._@+=,:~%-]+$")
_ENDPOINT_URI = re.compile(r"^/[A-Za-z0-9._~%/?&=,:+-]*$")
_NODE_ID = re.compile(r"^[0-9a-f]+$")
_ROOT_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")
_INDEX_VERSION = re.compile(r"^v[0-9]+(-[a-z0-9]+)*$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{16,128}$")

#: The history server reads only event files whose name matches this.
EVENT_FILE_RE = re.compile(r"-\d{4}-\d{2}-\d{2}-\d{2}(-\d+)?(\.jsonl)?(\.gz)?\Z")
#: Session names carry their creation time; the reader derives dates from it.
SESSION_TIME_RE = re.compile(r"session_(\d{4}-\d{2}-\d{2})_(\d{2}-\d{2}-\d{2})_(\d{6})")
_SESSION_TIME_PARTS = re.compile(r"session_(\d{4})-(\d{2})-(\d{2})_(\d{2})-(\d{2})-(\d{2})_(\d{6})")

MAX_LOG_DEPTH = 8


# ---------------------------------------------------------------- validators
def _reject(what: str, value: object, rule: str) -> InvalidKeyError:
    return InvalidKeyError(f"invalid {what} {value!r}: {rule}")


def validate_namespace(value: str) -> str:
    """A Kubernetes namespace: DNS-1123 label."""
    if not isinstance(value, str) or len(value) > 63 or not _DNS1123_LABEL.fullmatch(value):
        raise _reject("namespace", value, "must be a DNS-1123 label (lower-case a-z, 0-9, '-', at most 63)")
    return value


def validate_k8s_name(value: str, what: str = "cluster name") -> str:
    """A Kubernetes object name: DNS-1123 subdomain."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(value):
        raise _reject(what, value, "must be a DNS-1123 subdomain (lower-case a-z, 0-9, '-', '.')")
    return value


def validate_session_name(value: str) -> str:
    """A Ray session directory name, e.g. ``session_2026-11-22_01-45-25_333080_9264``."""
    if not isinstance(value, str) or len(value) > 255 or value in (".", "..") or not _SAFE_COMPONENT.fullmatch(value):
        raise _reject("session name", value, "only A-Z a-z 0-9 '.' '_' '-' are allowed")
    return value


def validate_node_id(value: str) -> str:
    """A node ID as it appears in keys: lower-case hex (base64 is converted)."""
    if not isinstance(value, str) or not value:
        raise _reject("node id", value, "must be non-empty")
    try:
        hex_id = to_hex_id(value)
    except InvalidIdError as exc:
        raise _reject("node id", value, "must be hex or base64") from exc
    if len(hex_id) > 128 or not _NODE_ID.fullmatch(hex_id):
        raise _reject("node id", value, "must be hex")
    return hex_id


def validate_job_id(value: str) -> str:
    """A job ID as it appears in keys: hex when decodable, else a safe component."""
    if not isinstance(value, str) or not value:
        raise _reject("job id", value, "must be non-empty")
    with contextlib.suppress(InvalidIdError):  # not an ID Ray encodes: keep as is
        value = to_hex_id(value)
    if value in (".", "..") or len(value) > 128 or not _SAFE_COMPONENT.fullmatch(value):
        raise _reject("job id", value, "only A-Z a-z 0-9 '.' '_' '-' are allowed")
    return value


def validate_file_name(value: str, what: str = "file name") -> str:
    """One path segment of a log or event file name."""
    if not isinstance(value, str) or len(value) > 255 or value in (".", "..") or not _FILE_SEGMENT.fullmatch(value):
        raise _reject(what, value, "one path segment of A-Z a-z 0-9 and . _ @ + = , : ~ % -")
    return value


def validate_log_path(value: str) -> str:
    """A log file path relative to a node's ``logs/`` directory (``events/event_GCS.log``)."""
    if not isinstance(value, str) or not value:
        raise _reject("log path", value, "must be non-empty")
    if value.startswith("/"):
        raise _reject("log path", value, "must be relative")
    segments = value.split("/")
    if len(segments) > MAX_LOG_DEPTH:
        raise _reject("log path", value, f"at most {MAX_LOG_DEPTH} levels deep")
    for segment in segments:
        validate_file_name(segment, "log path segment")
    return value


def validate_endpoint_uri(value: str) -> str:
    """A dashboard request URI (path + optional query) stored as a snapshot."""
    if not isinstance(value, str) or not _ENDPOINT_URI.fullmatch(value) or len(value) > 512:
        raise _reject("endpoint", value, "must be an absolute path with an optional query string")
    path = value.split("?", 1)[0]
    if any(seg in (".", "..") for seg in path.split("/")) or "//" in path:
        raise _reject("endpoint", value, "must not contain '.', '..' or empty segments")
    return value


def normalise_root(root: str) -> str:
    """The storage root dir (``--storage-root-dir``): '' or clean segments, no slashes
    at either end."""
    root = (root or "").strip().strip("/")
    if not root:
        return ""
    for segment in root.split("/"):
        if segment in ("", ".", "..") or not _ROOT_SEGMENT.fullmatch(segment):
            raise _reject("storage root dir", root, "segments of A-Z a-z 0-9 '.' '_' '-', no '..'")
    return root


# --------------------------------------------------------------- value types
@dataclass(frozen=True)
class ClusterRef:
    """Which Ray cluster a key belongs to.

    ``owner_kind`` is ``raycluster`` for a bare RayCluster, or ``rayjob`` /
    ``rayservice`` with ``owner_name`` set to the CR that created the cluster. Like
    KubeRay's Go history server, an owner kind without an owner name files under ``raycluster``.
    """

    namespace: str
    name: str
    owner_kind: str = RAYCLUSTER
    owner_name: str = ""

    def __post_init__(self) -> None:
        validate_namespace(self.namespace)
        validate_k8s_name(self.name, "cluster name")
        kind = (self.owner_kind or RAYCLUSTER).strip().lower()
        if kind not in CLUSTER_KINDS:
            raise _reject("owner kind", self.owner_kind, f"must be one of {', '.join(CLUSTER_KINDS)}")
        owner = (self.owner_name or "").strip()
        if kind == RAYCLUSTER or not owner:
            kind, owner = RAYCLUSTER, ""
        else:
            validate_k8s_name(owner, "owner name")
        object.__setattr__(self, "owner_kind", kind)
        object.__setattr__(self, "owner_name", owner)

    @property
    def has_owner(self) -> bool:
        return self.owner_kind != RAYCLUSTER


@dataclass(frozen=True)
class SessionMarker:
    """A decoded ``cluster-metadata`` marker: one stored session of one cluster."""

    cluster: ClusterRef
    session: str
    created_at: datetime
    key: str


def session_created_at(session: str) -> datetime | None:
    """The creation time encoded in a session name, as UTC (like the reference)."""
    match = _SESSION_TIME_PARTS.search(session)
    if not match:
        return None
    # int() fields instead of strptime: a listing of 100,000 markers decodes this many
    # names, and strptime was half of the first /clusters' time.
    year, month, day, hour, minute, second, micros = map(int, match.groups())
    try:
        return datetime(year, month, day, hour, minute, second, micros, tzinfo=UTC)
    except ValueError:  # e.g. month 13
        return None


def endpoint_storage_name(uri: str) -> str:
    """``/api/v0/placement_groups?detail=1&limit=10000`` ->
    ``restful__api__v0__placement_groups?detail=1&limit=10000``."""
    validate_endpoint_uri(uri)
    return ENDPOINT_PREFIX + uri.strip("/").replace("/", "__")


def event_file_name(node_id: str, opened_ns: int, *, compressed: bool = False) -> str:
    """``{node}-{YYYY-MM-DD-HH}-{nanos}.jsonl[.gz]``; the hour is UTC (the reference
    uses the process's local zone, which is UTC in its image)."""
    node = validate_node_id(node_id)
    hour = datetime.fromtimestamp(opened_ns / 1e9, tz=UTC).strftime("%Y-%m-%d-%H")
    return f"{node}-{hour}-{opened_ns}.jsonl" + (".gz" if compressed else "")


def is_event_file_name(name: str) -> bool:
    """Whether the history server should read this event object."""
    return bool(EVENT_FILE_RE.search(name))


# -------------------------------------------------------------------- layout
class KeyLayout:
    """Builds and parses every key under one storage root (``--storage-root-dir``)."""

    def __init__(self, root: str = "") -> None:
        self.root = normalise_root(root)

    def _join(self, *parts: str) -> str:
        return "/".join(p for p in (self.root, *parts) if p)

    def root_prefix(self) -> str:
        """``{root}/``, or ``""`` at the bucket root: every key of ours starts with it."""
        return f"{self.root}/" if self.root else ""

    def probe_prefix(self) -> str:
        """``{root}/_selfcheck/``: the storage check's probe objects. The one prefix every
        identity may list (a collector lists nothing else), so a bucket is probed there."""
        return self._join(PROBE_DIR) + "/"

    # cluster-history --------------------------------------------------------
    def history_prefix(self) -> str:
        """``{root}/cluster-history/``: every session's objects lie below it."""
        return self._join(CLUSTER_HISTORY) + "/"

    def cluster_prefix(self, cluster: ClusterRef) -> str:
        """``{root}/cluster-history/{kind}/{ns}/[{owner}/]{cluster}`` (no trailing /)."""
        if cluster.has_owner:
            return self._join(CLUSTER_HISTORY, cluster.owner_kind, cluster.namespace, cluster.owner_name, cluster.name)
        return self._join(CLUSTER_HISTORY, RAYCLUSTER, cluster.namespace, cluster.name)

    def session_prefix(self, cluster: ClusterRef, session: str) -> str:
        """Everything stored for one session, with a trailing ``/``."""
        return f"{self.cluster_prefix(cluster)}/{validate_session_name(session)}/"

    def node_prefix(self, cluster: ClusterRef, session: str, node_id: str) -> str:
        return f"{self.session_prefix(cluster, session)}{validate_node_id(node_id)}/"

    def logs_prefix(self, cluster: ClusterRef, session: str, node_id: str) -> str:
        return f"{self.node_prefix(cluster, session, node_id)}{LOGS_DIR}/"

    def log_key(self, cluster: ClusterRef, session: str, node_id: str, relpath: str) -> str:
        return self.logs_prefix(cluster, session, node_id) + validate_log_path(relpath)

    def node_events_prefix(self, cluster: ClusterRef, session: str, node_id: str) -> str:
        return f"{self.node_prefix(cluster, session, node_id)}{NODE_EVENTS_DIR}/"

    def node_events_key(self, cluster: ClusterRef, session: str, node_id: str, filename: str) -> str:
        return self.node_events_prefix(cluster, session, node_id) + validate_file_name(filename)

    def job_events_prefix(self, cluster: ClusterRef, session: str, node_id: str, job_id: str | None = None) -> str:
        base = f"{self.node_prefix(cluster, session, node_id)}{JOB_EVENTS_DIR}/"
        return base if job_id is None else f"{base}{validate_job_id(job_id)}/"

    def job_events_key(self, cluster: ClusterRef, session: str, node_id: str, job_id: str, filename: str) -> str:
        return self.job_events_prefix(cluster, session, node_id, job_id) + validate_file_name(filename)

    def endpoints_prefix(self, cluster: ClusterRef, session: str) -> str:
        return f"{self.session_prefix(cluster, session)}{ENDPOINTS_DIR}/"

    def endpoint_key(self, cluster: ClusterRef, session: str, uri: str) -> str:
        """Where the snapshot of dashboard request ``uri`` is stored."""
        return self.endpoints_prefix(cluster, session) + endpoint_storage_name(uri)

    def metrics_config_key(self, cluster: ClusterRef, session: str, relpath: str) -> str:
        """Where a file of the session's ``metrics/`` directory (Ray's generated Grafana
        dashboards, its Prometheus config) is stored; ``relpath`` relative to it."""
        return f"{self.session_prefix(cluster, session)}{METRICS_DIR}/{validate_log_path(relpath)}"

    def session_ended_key(self, cluster: ClusterRef, session: str) -> str:
        """The head collector's note that it stopped collecting ``session`` (written last
        at its shutdown, deleted when a collector finds the session running again)."""
        return f"{self.session_prefix(cluster, session)}{SESSION_ENDED_NAME}"

    # history-index ----------------------------------------------------------
    def index_root_prefix(self) -> str:
        """``{root}/history-index/``: the shared indexes (a write grant is scoped to it)."""
        return self._join(INDEX_DIR) + "/"

    def index_session_prefix(self, cluster: ClusterRef, session: str) -> str:
        """Every shared index object of one session (all versions), with a trailing ``/``;
        the cluster part is spelt as under ``cluster-history``."""
        cluster_part = self.cluster_prefix(cluster).removeprefix(self.history_prefix())
        return f"{self.index_root_prefix()}{cluster_part}/{validate_session_name(session)}/"

    def index_keys(self, cluster: ClusterRef, session: str, version: str, fingerprint: str) -> tuple[str, str]:
        """(data key, manifest key) of the shared index of one session built from the
        build inputs whose fingerprint is ``fingerprint``, in index format ``version``."""
        if not _INDEX_VERSION.fullmatch(version):
            raise _reject("index version", version, "v<digits> with optional -<lower-case tags>")
        if not _FINGERPRINT.fullmatch(fingerprint):
            raise _reject("index fingerprint", fingerprint, "16-128 lower-case hex digits")
        base = f"{self.index_session_prefix(cluster, session)}{version}/{fingerprint}"
        return base + INDEX_DATA_SUFFIX, base + INDEX_MANIFEST_SUFFIX

    # cluster-metadata -------------------------------------------------------
    def markers_prefix(self) -> str:
        return self._join(CLUSTER_METADATA) + "/"

    def namespace_prefixes(self, namespace: str) -> list[str]:
        """Every key prefix of one namespace's sessions: its history objects
        ``{root}/cluster-history/{kind}/{ns}/`` and its markers
        ``{root}/cluster-metadata/{kind}/{ns}_``, for every cluster kind. A namespace
        holds no ``_`` (an RFC 1123 label), so ``{ns}_`` never matches another
        namespace's markers, nor ``{ns}/`` its objects (a collector's grant is these)."""
        validate_namespace(namespace)
        history = [f"{self._join(CLUSTER_HISTORY, kind, namespace)}/" for kind in CLUSTER_KINDS]
        return history + [f"{self.markers_prefix()}{kind}/{namespace}_" for kind in CLUSTER_KINDS]

    def marker_key(self, cluster: ClusterRef, session: str) -> str:
        """The 0-byte object whose existence lists the session in the history."""
        if cluster.has_owner:
            middle = f"{cluster.namespace}_{cluster.owner_name}_{cluster.name}"
        else:
            middle = f"{cluster.namespace}_{cluster.name}"
        return f"{self.markers_prefix()}{cluster.owner_kind}/{middle}/{validate_session_name(session)}"

    def parse_marker_key(self, key: str) -> SessionMarker:
        """Decode a marker key; InvalidKeyError for anything that is not one."""
        prefix = self.markers_prefix()
        if not key.startswith(prefix):
            raise InvalidKeyError(f"{key!r} is not under {prefix!r}")
        parts = key[len(prefix) :].split("/")
        if len(parts) != 3:
            raise InvalidKeyError(f"marker {key!r} must be {{kind}}/{{namespace}}_[{{owner}}_]{{cluster}}/{{session}}")
        kind, middle, session = parts
        kind = kind.lower()
        names = middle.split("_")
        if kind == RAYCLUSTER and len(names) == 2:
            cluster = ClusterRef(namespace=names[0], name=names[1])
        elif kind in OWNER_KINDS and len(names) == 3 and names[1]:
            cluster = ClusterRef(namespace=names[0], name=names[2], owner_kind=kind, owner_name=names[1])
        else:
            raise InvalidKeyError(f"marker {key!r}: {middle!r} does not fit owner kind {kind!r}")
        validate_session_name(session)
        created = session_created_at(session)
        if created is None:
            raise InvalidKeyError(f"marker {key!r}: session name carries no session_YYYY-MM-DD_HH-MM-SS_ffffff time")
        return SessionMarker(cluster=cluster, session=session, created_at=created, key=key)

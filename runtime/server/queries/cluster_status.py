"""``/api/cluster_status?format=1``: ``ray status``-like text rebuilt from what
the session left behind.

Pure parts: :func:`parse_debug_state` (a raylet's ``debug_state.txt``) and
:func:`format_status`. :func:`gather` collects the inputs from the index and the
stored ``debug_state.txt`` files.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson

from runtime.server.index.reader import SessionIndex
from runtime.server.index.schema import META_OBJECTS_FINGERPRINT
from runtime.storage.session_keys import LogFile, log_rel_key, parse_session_key

logger = logging.getLogger(__name__)

_RESOURCE_SCALE = 10_000.0
# Every pattern here is linear in the line: ``debug_state.txt`` is in the logs the Ray
# job writes, and a backtracking pattern on a crafted 100 KB line held the GIL for minutes.
_NODE_GROUP_START = re.compile(r'"ray\.io/node-group"\s*:\s*"')
_TOTAL_START = re.compile(r'"total"\s*:\s*\{')
_AVAILABLE_START = re.compile(r'"available"\s*:\s*\{')
_RESOURCE_NAME = re.compile(r"[A-Za-z0-9_:./\-]+")
_NUMBER = re.compile(r"[0-9.eE+\-]+")
_MAP_SEPARATORS = re.compile(r"[\[\],]")
#: What is read of a node's debug_state.txt (Ray's is a few KiB; the scheduler
#: section is near the top).
MAX_DEBUG_STATE_BYTES = 1024 * 1024

#: DEAD reasons that are not failures.
_EXPECTED_DEATHS = ("EXPECTED_TERMINATION", "AUTOSCALER_DRAIN_IDLE")
MAX_FAILURES = 20


@dataclass
class NodeDebugState:
    node_id: str = ""
    node_name: str = ""
    node_group: str = ""
    is_idle: bool = False
    total: dict[str, float] = field(default_factory=dict)
    available: dict[str, float] = field(default_factory=dict)

    def used(self) -> dict[str, float]:
        return {k: max(0.0, v - self.available.get(k, 0.0)) for k, v in self.total.items()}


def _resource_map(text: str) -> dict[str, float]:
    """``CPU: [20000, 10000], node:10.0.0.1: [10000], GPU: 5000`` as resource -> units."""
    resources: dict[str, float] = {}
    for entry in _top_level_entries(text):
        key, colon, raw = entry.rpartition(":")  # names may hold colons; values never do
        key, raw = key.strip(), raw.strip()
        if not colon or not _RESOURCE_NAME.fullmatch(key) or key.startswith("node:"):
            continue
        if raw.startswith("[") and raw.endswith("]"):
            parts = [v for v in raw[1:-1].split(",") if v.strip()]
        elif _NUMBER.fullmatch(raw):
            parts = [raw]
        else:
            continue
        try:
            values = [float(v) for v in parts]
        except ValueError:
            continue
        resources[key] = sum(values) / _RESOURCE_SCALE
    return resources


def _top_level_entries(text: str) -> list[str]:
    """``text`` split at the commas outside ``[...]``."""
    entries: list[str] = []
    depth = start = 0
    for sep in _MAP_SEPARATORS.finditer(text):
        char = sep.group()
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        elif depth == 0:
            entries.append(text[start : sep.start()])
            start = sep.end()
    entries.append(text[start:])
    return entries


def _braced_after(start: re.Pattern[str], text: str) -> str | None:
    """What lies between the first match of ``start`` (ending in ``{``) and the next ``}``."""
    found = start.search(text)
    if found is None:
        return None
    end = text.find("}", found.end())
    return text[found.end() : end] if end >= 0 else None


def parse_debug_state(text: str) -> NodeDebugState | None:
    """The local node's state, or ``None`` when the file has no scheduler section."""
    state = NodeDebugState()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Node ID:"):
            state.node_id = line[len("Node ID:") :].strip()
        elif line.startswith("Node name:"):
            state.node_name = line[len("Node name:") :].strip()
        elif "cluster_resource_scheduler state:" in line:
            detail = lines[i + 1] if i + 1 < len(lines) else ""
            state.is_idle = "is_idle: 1" in detail
            if found := _NODE_GROUP_START.search(detail):
                end = detail.find('"', found.end())
                if end > found.end():
                    state.node_group = detail[found.end() : end]
            # The first maps on the line are the local node's ("Local resources").
            if (total := _braced_after(_TOTAL_START, detail)) is not None:
                state.total = _resource_map(total)
            if (available := _braced_after(_AVAILABLE_START, detail)) is not None:
                state.available = _resource_map(available)
            return state
    return None


@dataclass(frozen=True)
class Failure:
    node_type: str
    ip: str
    instance_id: str
    at_ms: int


@dataclass
class StatusInputs:
    nodes: list[NodeDebugState] = field(default_factory=list)
    timestamp: datetime | None = None
    failures: list[Failure] = field(default_factory=list)
    #: resource shape -> number of pending tasks/actors asking for it
    demands: dict[tuple[tuple[str, float], ...], int] = field(default_factory=dict)


def format_memory(value: float) -> str:
    """``9.31GiB`` (largest binary unit, 2 decimals), else ``<int>B``."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:.2f}{unit}"
    return f"{int(value)}B"


def format_value(resource: str, value: float) -> str:
    return format_memory(value) if "memory" in resource.lower() else repr(float(value))


def demand_key(resources: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """Group equal shapes (to 4 decimals, as KubeRay's Go history server's ``name:%.4f`` key)."""
    return tuple(sorted((str(k), round(float(v), 4)) for k, v in resources.items()))


def _dict_repr(shape: tuple[tuple[str, float], ...]) -> str:
    return "{" + ", ".join(f"{k!r}: {float(v)!r}" for k, v in shape) + "}"


def format_status(inputs: StatusInputs) -> str:
    active: Counter[str] = Counter()
    idle: Counter[str] = Counter()
    total: dict[str, float] = {}
    used: dict[str, float] = {}
    for node in inputs.nodes:
        (idle if node.is_idle else active)[node.node_group or "default"] += 1
        for key, value in node.total.items():
            total[key] = total.get(key, 0.0) + value
        for key, value in node.used().items():
            used[key] = used.get(key, 0.0) + value
    stamp = inputs.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f") if inputs.timestamp else "time unknown"
    header = f"======== Autoscaler status: {stamp} ========"
    dashes = "-" * len(header)  # as Ray: the rule is as long as the header line
    out = [header, "Node status", dashes, "Active:"]
    out += [f" {active[g]} {g}" for g in sorted(active)] or [" (no active nodes)"]
    out.append("Idle:")
    out += [f" {idle[g]} {g}" for g in sorted(idle)] or [" (no idle nodes)"]
    out += ["Pending:", " (unavailable in history server)", "Recent failures:"]
    failures = sorted(inputs.failures, key=lambda f: f.at_ms, reverse=True)[:MAX_FAILURES]
    out += [
        f" {f.node_type}: NodeTerminated " + (f"(ip: {f.ip})" if f.ip else f"(instance_id: {f.instance_id})")
        for f in failures
    ] or [" (no failures)"]
    out += ["", "Resources", dashes, "Total Usage:"]
    keys = [k for k in sorted(total) if not k.startswith("accelerator_type:")]
    usage = [f" {format_value(k, used.get(k, 0.0))}/{format_value(k, total[k])} {k}" for k in keys]
    out += usage or [" (no resources)"]
    out += ["", "From request_resources:", " (unavailable in history server)", "Pending Demands:"]
    out += [
        f" {_dict_repr(shape)}: {count}+ pending tasks/actors"
        for shape, count in sorted(inputs.demands.items(), key=lambda kv: (-kv[1], kv[0]))
    ] or [" (no resource demands)"]
    return "\n".join(out)


def timestamp_from_ms(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def failures_from_node(raw: Mapping[str, object], node_id: str) -> Failure | None:
    """The node's latest DEAD transition if it was not an expected termination.

    ``raw`` is the index's ``nodes.raw_json``: ``{"node_id", "definition": {...},
    "transitions": [{..., "timestamp_ns"}]}`` with the events' camelCase fields.
    """
    definition = raw.get("definition")
    if not isinstance(definition, dict):
        definition = {}
    transitions = raw.get("transitions") or raw.get("stateTransitions") or []
    dead: list[tuple[int, str]] = []
    if isinstance(transitions, list):
        for t in transitions:
            if not isinstance(t, dict) or t.get("state") != "DEAD":
                continue
            info = t.get("deathInfo")
            reason = str(info.get("reason", "")) if isinstance(info, dict) else ""
            ns = t.get("timestamp_ns")
            at_ms = int(ns) // 1_000_000 if isinstance(ns, int) else _ms(t.get("timestamp"))
            dead.append((at_ms, reason))
    if not dead:
        return None
    at_ms, reason = max(dead, key=lambda d: d[0])
    if reason in _EXPECTED_DEATHS:
        return None
    labels = definition.get("labels")
    if not isinstance(labels, dict):
        labels = {}
    return Failure(
        node_type=str(labels.get("ray.io/node-group") or node_id),
        ip=str(definition.get("nodeIpAddress") or ""),
        instance_id=str(definition.get("instanceId") or ""),
        at_ms=at_ms,
    )


def _ms(value: object) -> int:
    """A transition time: ms number, or an RFC 3339 string (0 when unreadable)."""
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value:
        if value.isdigit():
            return int(value)
        text = value.rstrip("Z")
        if "." in text:  # Python parses at most 6 fractional digits; Ray writes 9
            head, frac = text.split(".", 1)
            text = f"{head}.{frac[:6]}"
        try:
            return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)
        except ValueError:
            return 0
    return 0


# ------------------------------------------------------------------ gathering
_PENDING_TASK_STATES = (
    "PENDING_ARGS_AVAIL",
    "PENDING_NODE_ASSIGNMENT",
    "PENDING_OBJ_STORE_MEM_AVAIL",
    "PENDING_ARGS_FETCH",
)
_PENDING_ACTOR_STATES = ("PENDING_CREATION", "DEPENDENCIES_UNREADY")
DEBUG_STATE = "debug_state.txt"
#: A cheap pre-filter only: LIKE is case-insensitive and its ``_`` matches any
#: character, so every row is parsed again before it counts.
_DEBUG_STATE_LIKE = f"%{log_rel_key('', DEBUG_STATE)}"
#: Parallel reads of the nodes' debug_state.txt (one small object per node).
_READ_WORKERS = 8


def debug_state_nodes(index: SessionIndex) -> list[str]:
    """Nodes whose ``debug_state.txt`` to read: those the objects listing shows one
    for; if the index has no listing, every indexed node (a miss is tolerated)."""
    listed = set()
    for (key,) in index.rows("SELECT rel_key FROM objects WHERE rel_key LIKE ?", (_DEBUG_STATE_LIKE,)):
        item = parse_session_key(str(key))
        if isinstance(item, LogFile) and item.path == DEBUG_STATE:
            listed.add(item.node)
    if listed:
        return sorted(listed)
    has_listing = index.scalar("SELECT 1 FROM objects LIMIT 1") is not None
    return [] if has_listing else [str(r[0]) for r in index.rows("SELECT node_id FROM nodes ORDER BY node_id")]


def _demands(rows: list[tuple[object, ...]], into: dict[tuple[tuple[str, float], ...], int]) -> None:
    for raw, count in rows:
        if raw is None:
            continue
        try:
            resources = orjson.loads(raw) if isinstance(raw, (bytes, str)) else None
        except orjson.JSONDecodeError:
            continue
        if not isinstance(resources, dict) or not resources:
            continue
        try:
            key = demand_key({str(k): float(v) for k, v in resources.items()})
        except (TypeError, ValueError):
            continue
        into[key] = into.get(key, 0) + int(str(count))


def _task_demands(index: SessionIndex, marks: str) -> list[tuple[object, ...]]:
    """(required_resources JSON, pending attempts) per distinct resources; the JSON
    is stored compactly, so it is read here rather than by SQLite's json_extract."""
    render = index.details()
    counts: dict[bytes, int] = {}
    sql = f"SELECT detail FROM tasks WHERE state IN ({marks})"  # noqa: S608 - placeholders only
    for (stored,) in index.iter_rows(sql, _PENDING_TASK_STATES):
        try:
            detail = orjson.loads(render(stored))
        except orjson.JSONDecodeError:
            continue
        resources = detail.get("required_resources") if isinstance(detail, dict) else None
        if resources is not None:
            key = orjson.dumps(resources)
            counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items())


def gather(
    index: SessionIndex, read_debug_state: Callable[[str], bytes | None], session_time: datetime | None
) -> StatusInputs:
    """Everything :func:`format_status` needs; ``read_debug_state(node_id)`` returns
    the file's bytes or ``None`` when it is not stored."""
    inputs = StatusInputs()
    nodes = debug_state_nodes(index)
    with ThreadPoolExecutor(max_workers=max(1, min(_READ_WORKERS, len(nodes)))) as pool:
        for node_id, raw in zip(nodes, pool.map(read_debug_state, nodes), strict=True):
            parsed = parse_debug_state(raw.decode("utf-8", "replace")) if raw else None
            if parsed is None:
                logger.debug("cluster status: no usable debug_state.txt for node %s", node_id)
                continue
            inputs.nodes.append(parsed)
    # The last moment the session did something: latest end of any task or actor.
    last_task = index.scalar("SELECT MAX(end_ms) FROM tasks")
    last_actor = index.scalar(
        "SELECT MAX(CAST(json_extract(CAST(actor_json AS TEXT), '$.endTime') AS INTEGER)) FROM actors"
    )
    ends = [int(v) for v in (last_task, last_actor) if v]
    inputs.timestamp = timestamp_from_ms(max(ends)) if ends else session_time
    for node_id, raw in index.rows("SELECT node_id, raw_json FROM nodes WHERE state = 'DEAD'"):
        try:
            merged = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(merged, dict) and (failure := failures_from_node(merged, str(node_id))) is not None:
            inputs.failures.append(failure)
    marks = ",".join("?" * len(_PENDING_TASK_STATES))
    _demands(_task_demands(index, marks), inputs.demands)
    marks = ",".join("?" * len(_PENDING_ACTOR_STATES))
    _demands(
        index.rows(
            f"SELECT required_resources_json, COUNT(*) FROM actors WHERE state IN ({marks}) GROUP BY 1",  # noqa: S608
            _PENDING_ACTOR_STATES,
        ),
        inputs.demands,
    )
    return inputs


def cluster_status_text(
    index: SessionIndex, read_debug_state: Callable[[str], bytes | None], session_time: datetime | None
) -> str:
    """The text, kept in the index per objects fingerprint (late log uploads change it)."""
    key = f"cluster_status:v1:{index.meta(META_OBJECTS_FINGERPRINT) or ''}"
    cached = index.computed(key)
    if cached is not None:
        return cached.decode()
    text = format_status(gather(index, read_debug_state, session_time))
    index.store_computed(key, text.encode())
    return text

"""Every collector setting, declared once: flag (GKE-guide and current-KubeRay
spellings), the environment variable KubeRay >= 1.7 injects, parser, default and
meaning. :mod:`runtime.collector.config` builds the parser and the configuration
from these; :func:`table` is the README's table.

Names and defaults follow KubeRay's Go collector (the reference implementation).
"""

from __future__ import annotations

from typing import Any

from runtime.common.settings import Setting, markdown_table
from runtime.common.validators import boolean, positive_duration, positive_int, tcp_port

HEAD = "Head"
WORKER = "Worker"
DEFAULT_TMP_ROOT = "/tmp/ray"  # noqa: S108 - Ray's own default temp root, shared with the Ray container
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - kubelet probes reach the pod IP
CLUSTER = "cluster"
EVENTS = "events"
OPS = "logs, snapshots and shutdown"


def role(text: str) -> str:
    normalised = text.strip().lower()
    if normalised == "head":
        return HEAD
    if normalised == "worker":
        return WORKER
    raise ValueError("must be Head or Worker")


def endpoints(text: str) -> tuple[str, ...]:
    """Comma-separated dashboard paths, each starting with ``/``."""
    found = tuple(item.strip() for item in text.split(",") if item.strip())
    for endpoint in found:
        if not endpoint.startswith("/"):
            raise ValueError(f"{endpoint!r} must start with '/'")
    return found


def _text(text: str) -> str:
    return text


def _lower(text: str) -> str:
    return text.lower()


ROLE = Setting("--role", "RAY_ROLE", role, WORKER, "`Head` also writes markers and snapshots", group=CLUSTER)
CLUSTER_NAME = Setting("--ray-cluster-name", "RAY_CLUSTER_NAME", _text, "", "the RayCluster", "required", group=CLUSTER)
CLUSTER_NAMESPACE = Setting(
    "--ray-cluster-namespace", "RAY_CLUSTER_NAMESPACE", _text, "default", "its namespace", group=CLUSTER
)
OWNER_KIND = Setting(
    "--owner-kind", "OWNER_KIND", _lower, "", "RayJob or RayService that owns the cluster (with `--owner-name`)",
    "none", group=CLUSTER,
)  # fmt: skip
OWNER_NAME = Setting(
    "--owner-name", "OWNER_NAME", _text, "", "name of that RayJob / RayService (with `--owner-kind`)", "none",
    group=CLUSTER,
)  # fmt: skip
DASHBOARD_ADDRESS = Setting(
    "--ray-dashboard-address", "RAY_DASHBOARD_ADDRESS", _text, "http://localhost:8265",
    "head dashboard for snapshots", group=CLUSTER,
)  # fmt: skip
TMP_ROOT = Setting(
    "--ray-tmp-root", "RAY_TMP_ROOT", _text, DEFAULT_TMP_ROOT, "Ray's temp root, shared with the Ray container",
    group=CLUSTER,
)  # fmt: skip

EVENTS_PORT = Setting("--events-port", "EVENTS_PORT", tcp_port, 8084, "event receiver port", group=EVENTS)
EVENTS_HOST = Setting(
    "--events-host",
    "EVENTS_HOST",
    _text,
    ALL_INTERFACES,
    "event receiver address",
    group=EVENTS,
)
ENABLE_EVENTS = Setting(
    "--enable-event-collector", "ENABLE_EVENT_COLLECTOR", boolean, True, "receive and upload Ray events", group=EVENTS
)
ENABLE_LOGS = Setting(
    "--enable-log-collector", "ENABLE_LOG_COLLECTOR", boolean, True, "ship Ray's log files", group=EVENTS
)
EVENT_DATA_DIR = Setting[str | None](
    "--event-data-dir", "RAY_COLLECTOR_EVENT_DATA_DIR", _text, None, "local spool", "`$RAY_TMP_ROOT/event-data`",
    group=EVENTS,
)  # fmt: skip
ROTATION_INTERVAL = Setting(
    "--event-rotation-interval", "RAY_COLLECTOR_EVENT_ROTATION_INTERVAL", positive_duration, 300.0,
    "rotate spool files after", "`5m`", group=EVENTS,
)  # fmt: skip
MAX_FILE_SIZE_MB = Setting(
    "--event-max-file-size-mb", "RAY_COLLECTOR_EVENT_MAX_FILE_SIZE_MB", positive_int, 100, "or at this size",
    group=EVENTS,
)  # fmt: skip
MAX_DISK_MB = Setting(
    "--event-max-disk-mb", "RAY_COLLECTOR_EVENT_MAX_DISK_MB", positive_int, 200, "spool budget (503 from 80 %)",
    group=EVENTS,
)  # fmt: skip
COMPRESSION = Setting(
    "--event-compression-enabled", "RAY_COLLECTOR_EVENT_COMPRESSION_ENABLED", boolean, False, "upload `.jsonl.gz`",
    group=EVENTS,
)  # fmt: skip
FSYNC = Setting(
    "--event-fsync", "RAY_COLLECTOR_EVENT_FSYNC", boolean, True, "fdatasync before acknowledging", group=EVENTS
)
#: Ray 2.60's aggregator agent posts at most 1000 events per batch
#: (RAY_DASHBOARD_AGGREGATOR_AGENT_MAX_EVENT_SEND_BATCH_SIZE) and resends a refused
#: one forever, so a legitimate batch over the limit would stall the node's events:
#: captured events weigh 0.5-8 KiB, but a failure storm's tracebacks can be larger,
#: hence 32 KiB per event on average. The bodies held at once
#: (receiver.DEFAULT_BODY_BUDGET) plus the one batch being written stay within the
#: sidecar's 256Mi memory limit (infra/sidecar.py).
DEFAULT_MAX_REQUEST_MB = 32
MAX_REQUEST_MB = Setting(
    "--max-request-mb", "RAY_COLLECTOR_MAX_REQUEST_MB", positive_int, DEFAULT_MAX_REQUEST_MB,
    "largest accepted POST (413 above); raising it raises the collector's memory use", group=EVENTS,
)  # fmt: skip
MAX_TARGETS = Setting(
    "--max-targets-per-batch", "RAY_COLLECTOR_MAX_TARGETS_PER_BATCH", positive_int, 1000,
    "distinct (session, node, job) a POST may name (413 above)", group=EVENTS,
)  # fmt: skip
MAX_OPEN_SPOOL_FILES = Setting(
    "--max-open-spool-files", "RAY_COLLECTOR_MAX_OPEN_SPOOL_FILES", positive_int, 256,
    "spool files kept open, least recently used closed", group=EVENTS,
)  # fmt: skip
MAX_CONNECTIONS = Setting(
    "--max-connections", "RAY_COLLECTOR_MAX_CONNECTIONS", positive_int, 32, "connections served at once (503 above)",
    group=EVENTS,
)  # fmt: skip
HEADER_TIMEOUT = Setting(
    "--request-header-timeout", "RAY_COLLECTOR_REQUEST_HEADER_TIMEOUT", positive_duration, 10.0,
    "request line and headers within", "`10s`", group=EVENTS,
)  # fmt: skip
BODY_TIMEOUT = Setting(
    "--request-body-timeout", "RAY_COLLECTOR_REQUEST_BODY_TIMEOUT", positive_duration, 60.0, "request body within",
    "`60s`", group=EVENTS,
)  # fmt: skip

LOG_UPLOAD_INTERVAL = Setting(
    "--log-upload-interval", "RAY_COLLECTOR_LOG_UPLOAD_INTERVAL", positive_duration, 30.0,
    "a growing log is re-uploaded at most this often", "`30s`", group=OPS,
)  # fmt: skip
POLL_INTERVAL = Setting(
    "--poll-interval", "RAY_COLLECTOR_POLL_INTERVAL", positive_duration, 30.0, "dashboard snapshots", "`30s`",
    group=OPS,
)  # fmt: skip
SHUTDOWN_DEADLINE = Setting(
    "--shutdown-deadline", "RAY_COLLECTOR_SHUTDOWN_DEADLINE", positive_duration, 25.0, "everything uploaded within",
    "`25s`", group=OPS,
)  # fmt: skip
UPLOAD_WORKERS = Setting(
    "--upload-workers", "RAY_COLLECTOR_UPLOAD_WORKERS", positive_int, 2, "parallel uploads", group=OPS
)
# The environment is read by configure_logging (logging starts before the rest); the flag wins.
LOG_LEVEL = Setting[str | None](
    "--log-level", "LOG_LEVEL", _text, None, "`DEBUG`, `INFO`, `WARNING`", "`INFO`", group=OPS,
    env_fallback_elsewhere=True,
)  # fmt: skip
LOG_FORMAT = Setting[str | None](
    "--log-format", "LOG_FORMAT", _text, None, "`json` for one JSON object per line", "`text`", group=OPS,
    env_fallback_elsewhere=True,
)  # fmt: skip
# Accepted for compatibility with older manifests; KubeRay's Go collector parses and ignores them.
LOG_BATCHING = Setting[str | None]("--log-batching", None, _text, None, "ignored", group=OPS, hidden=True)
PUSH_INTERVAL = Setting[str | None]("--push-interval", None, _text, None, "ignored", group=OPS, hidden=True)

# Environment only, as in KubeRay's Go collector.
POD_IP = Setting[str | None](None, "POD_IP", _text, None, "this pod's IP, to find the node ID via `/api/v0/nodes`")
FQ_RAY_IP = Setting[str | None](None, "FQ_RAY_IP", _text, None, "the head service's DNS name, for the same lookup")
DASHBOARD_PORT = Setting(None, "RAY_DASHBOARD_PORT", tcp_port, 8265, "the head dashboard's port, for the same lookup")
ADDITIONAL_ENDPOINTS = Setting[tuple[str, ...]](
    None, "RAY_COLLECTOR_ADDITIONAL_ENDPOINTS", endpoints, (), "extra dashboard paths to snapshot, comma-separated",
    "none",
)  # fmt: skip
AUTH_TOKEN = Setting[str | None](None, "RAY_AUTH_TOKEN", _text, None, "dashboard token (Ray token auth)", "—")
K8S_TOKEN_AUTH = Setting(
    None, "RAY_ENABLE_K8S_TOKEN_AUTH", boolean, False, "authenticate to the dashboard with the pod's token"
)
AUTH_MODE = Setting(None, "RAY_AUTH_MODE", _lower, "", "Ray's auth mode, as the reference", "—")

SETTINGS: tuple[Setting[Any], ...] = (
    ROLE, CLUSTER_NAME, CLUSTER_NAMESPACE, OWNER_KIND, OWNER_NAME, DASHBOARD_ADDRESS, TMP_ROOT,
    EVENTS_PORT, EVENTS_HOST, ENABLE_EVENTS, ENABLE_LOGS, EVENT_DATA_DIR, ROTATION_INTERVAL, MAX_FILE_SIZE_MB,
    MAX_DISK_MB, COMPRESSION, FSYNC, MAX_REQUEST_MB, MAX_TARGETS, MAX_OPEN_SPOOL_FILES, MAX_CONNECTIONS,
    HEADER_TIMEOUT, BODY_TIMEOUT,
    LOG_UPLOAD_INTERVAL, POLL_INTERVAL, SHUTDOWN_DEADLINE, UPLOAD_WORKERS, LOG_LEVEL, LOG_FORMAT, LOG_BATCHING,
    PUSH_INTERVAL,
    POD_IP, FQ_RAY_IP, DASHBOARD_PORT, ADDITIONAL_ENDPOINTS, AUTH_TOKEN, K8S_TOKEN_AUTH, AUTH_MODE,
)  # fmt: skip


def table() -> str:
    """The collector's settings (storage ones aside) as a Markdown table."""
    return markdown_table(SETTINGS)

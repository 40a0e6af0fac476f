"""Collector configuration: flags (GKE-guide and current-KubeRay spellings) and
environment variables (what KubeRay >= 1.7 injects into its sidecar), merged.

Names and defaults follow the reference (``collector.md`` §1). Two deliberate
differences: a flag and an environment variable that disagree stop the process
with a message naming both (the reference silently lets the env win), and
numeric or boolean values that do not parse are errors, not silently ignored.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from runtime.collector.durations import parse_duration
from runtime.storage.config import StorageConfig, add_storage_arguments
from runtime.storage.errors import InvalidKeyError, StorageConfigError
from runtime.storage.layout import RAYCLUSTER, ClusterRef
from runtime.storage.settings import parse_bool

T = TypeVar("T")

HEAD = "Head"
WORKER = "Worker"
DEFAULT_TMP_ROOT = "/tmp/ray"  # noqa: S108 - Ray's own default temp root, shared with the Ray container


class CollectorConfigError(ValueError):
    """A setting that cannot work; the message names the flag or env var."""


@dataclass(frozen=True)
class CollectorConfig:
    """Everything the collector needs, validated.

    Attributes:
        role: ``Head`` or ``Worker``; the head also writes session markers and
            dashboard snapshots.
        cluster: which cluster (namespace, name, owning RayJob/RayService) keys go under.
        storage: where history is written.
        events_host / events_port: where the event receiver listens (Ray's
            aggregator agent posts to ``http://localhost:<port>/v1/events``).
        ray_tmp_root: Ray's temp root shared with the Ray container (``session_latest``,
            ``prev-logs``, ``raylet_node_id``).
        event_data_dir: the local spool for event batches (disk-first).
        dashboard_address: the head's dashboard, for snapshots (head only).
        fq_ray_ip / dashboard_port / pod_ip: how to find this node's ID through the
            head dashboard's ``/api/v0/nodes``.
    """

    role: str
    cluster: ClusterRef
    storage: StorageConfig
    events_host: str = "0.0.0.0"  # noqa: S104 - kubelet probes reach the pod IP
    events_port: int = 8084
    ray_tmp_root: Path = Path(DEFAULT_TMP_ROOT)
    event_data_dir: Path = Path(DEFAULT_TMP_ROOT) / "event-data"
    enable_event_collector: bool = True
    enable_log_collector: bool = True
    event_rotation_interval: float = 300.0
    event_max_file_size: int = 100 * 1024 * 1024
    event_max_disk: int = 200 * 1024 * 1024
    event_compression: bool = False
    event_fsync: bool = True
    max_request_size: int = 64 * 1024 * 1024
    # Limits against a hostile client of the events port (docs/security-model.md).
    max_targets_per_batch: int = 1000
    max_open_spool_files: int = 256
    max_connections: int = 32
    request_header_timeout: float = 10.0
    request_body_timeout: float = 60.0
    dashboard_address: str = "http://localhost:8265"
    fq_ray_ip: str | None = None
    dashboard_port: int = 8265
    pod_ip: str | None = None
    additional_endpoints: tuple[str, ...] = ()
    poll_interval: float = 30.0
    log_upload_interval: float = 30.0
    shutdown_deadline: float = 25.0
    upload_workers: int = 2
    auth_token: str | None = field(default=None, repr=False)
    k8s_token_auth: bool = False
    auth_mode: str = ""

    @property
    def is_head(self) -> bool:
        return self.role == HEAD


# ------------------------------------------------------------------ argparse
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="collector",
        description=(
            "Ray History Server collector: runs beside a Ray node, receives Ray events on "
            "POST /v1/events, ships logs and dashboard snapshots to object storage. Every "
            "flag has an environment variable (KubeRay >= 1.7 configures it by env alone)."
        ),
    )
    add_storage_arguments(parser)
    ray = parser.add_argument_group("cluster")
    ray.add_argument("--role", help="Head or Worker (env RAY_ROLE; default Worker)")
    ray.add_argument("--ray-cluster-name", help="RayCluster name (env RAY_CLUSTER_NAME; required)")
    ray.add_argument("--ray-cluster-namespace", help="namespace (env RAY_CLUSTER_NAMESPACE; default 'default')")
    ray.add_argument("--owner-kind", help="RayJob or RayService that owns the cluster (env OWNER_KIND)")
    ray.add_argument("--owner-name", help="name of that RayJob/RayService (env OWNER_NAME)")
    ray.add_argument("--ray-dashboard-address", help="head dashboard URL (env RAY_DASHBOARD_ADDRESS)")
    ray.add_argument("--ray-tmp-root", help=f"Ray temp root shared with Ray (env RAY_TMP_ROOT; {DEFAULT_TMP_ROOT})")

    events = parser.add_argument_group("events")
    events.add_argument("--events-port", help="event receiver port (env EVENTS_PORT; default 8084)")
    events.add_argument("--events-host", help="event receiver address (env EVENTS_HOST; default 0.0.0.0)")
    events.add_argument("--enable-event-collector", help="true/false (env ENABLE_EVENT_COLLECTOR)")
    events.add_argument("--enable-log-collector", help="true/false (env ENABLE_LOG_COLLECTOR)")
    events.add_argument("--event-data-dir", help="local spool (env RAY_COLLECTOR_EVENT_DATA_DIR)")
    events.add_argument("--event-rotation-interval", help="e.g. 5m (env RAY_COLLECTOR_EVENT_ROTATION_INTERVAL)")
    events.add_argument("--event-max-file-size-mb", help="rotate at (env RAY_COLLECTOR_EVENT_MAX_FILE_SIZE_MB)")
    events.add_argument("--event-max-disk-mb", help="spool budget (env RAY_COLLECTOR_EVENT_MAX_DISK_MB)")
    events.add_argument(
        "--event-compression-enabled", help="gzip uploads (env RAY_COLLECTOR_EVENT_COMPRESSION_ENABLED)"
    )
    events.add_argument("--event-fsync", help="fsync before acknowledging (env RAY_COLLECTOR_EVENT_FSYNC; true)")
    events.add_argument("--max-request-mb", help="largest accepted POST (env RAY_COLLECTOR_MAX_REQUEST_MB; 64)")
    events.add_argument(
        "--max-targets-per-batch",
        help="distinct (session, node, job) a POST may name, 413 above (env RAY_COLLECTOR_MAX_TARGETS_PER_BATCH; 1000)",
    )
    events.add_argument(
        "--max-open-spool-files",
        help="spool files kept open, least recently used closed (env RAY_COLLECTOR_MAX_OPEN_SPOOL_FILES; 256)",
    )
    events.add_argument(
        "--max-connections",
        help="connections served at once, 503 above (env RAY_COLLECTOR_MAX_CONNECTIONS; 32)",
    )
    events.add_argument(
        "--request-header-timeout",
        help="request line and headers within (env RAY_COLLECTOR_REQUEST_HEADER_TIMEOUT; 10s)",
    )
    events.add_argument(
        "--request-body-timeout", help="request body within (env RAY_COLLECTOR_REQUEST_BODY_TIMEOUT; 60s)"
    )

    ops = parser.add_argument_group("logs, snapshots and shutdown")
    ops.add_argument(
        "--log-upload-interval",
        help="re-upload a growing log at most every (env RAY_COLLECTOR_LOG_UPLOAD_INTERVAL; 30s)",
    )
    ops.add_argument("--poll-interval", help="dashboard snapshot interval (env RAY_COLLECTOR_POLL_INTERVAL; 30s)")
    ops.add_argument("--shutdown-deadline", help="finish uploads within (env RAY_COLLECTOR_SHUTDOWN_DEADLINE; 25s)")
    ops.add_argument("--upload-workers", help="parallel uploads (env RAY_COLLECTOR_UPLOAD_WORKERS; 2)")
    ops.add_argument("--log-level", help="DEBUG, INFO, WARNING (env LOG_LEVEL)")
    ops.add_argument("--log-format", help="text or json (env LOG_FORMAT; text)")
    # Accepted for compatibility with older manifests; the reference parses and ignores them.
    ops.add_argument("--log-batching", help=argparse.SUPPRESS)
    ops.add_argument("--push-interval", help=argparse.SUPPRESS)
    return parser


# ------------------------------------------------------------------- merging
class _Settings:
    """Flag-or-env lookup that refuses contradictions and names what is wrong."""

    def __init__(self, args: argparse.Namespace | None, env: Mapping[str, str]) -> None:
        self.args = args
        self.env = env

    def get(self, flag: str, env_name: str | None, default: T, convert: Callable[[str], T]) -> T:
        dest = flag.lstrip("-").replace("-", "_")
        flag_raw = getattr(self.args, dest, None) if (self.args is not None and dest) else None
        flag_text = flag_raw.strip() if isinstance(flag_raw, str) and flag_raw.strip() else None
        env_text = (self.env.get(env_name, "").strip() or None) if env_name else None
        flag_value = self._convert(flag_text, flag, convert) if flag_text is not None else None
        env_value = self._convert(env_text, str(env_name), convert) if env_text is not None else None
        if flag_value is not None and env_value is not None and flag_value != env_value:
            raise CollectorConfigError(f"{flag}={flag_text} contradicts {env_name}={env_text}; set only one")
        if flag_value is not None:
            return flag_value
        return env_value if env_value is not None else default

    @staticmethod
    def _convert(text: str, source: str, convert: Callable[[str], T]) -> T:
        try:
            return convert(text)
        except ValueError as exc:
            raise CollectorConfigError(f"{source}={text}: {exc}") from exc


def _positive_int(text: str) -> int:
    number = int(text)
    if number <= 0:
        raise ValueError("must be a positive integer")
    return number


def _positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError("must be > 0")
    return seconds


def _bool(text: str) -> bool:
    try:
        return parse_bool(text, "value")
    except StorageConfigError as exc:
        raise ValueError("expected true or false") from exc


def _role(text: str) -> str:
    normalised = text.strip().lower()
    if normalised == "head":
        return HEAD
    if normalised == "worker":
        return WORKER
    raise ValueError("must be Head or Worker")


def _port(text: str) -> int:
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError("must be a TCP port (1-65535)")
    return port


def load_config(args: argparse.Namespace | None, env: Mapping[str, str] | None = None) -> CollectorConfig:
    """Build the configuration from parsed flags and the environment."""
    env = dict(os.environ if env is None else env)
    s = _Settings(args, env)

    name = s.get("--ray-cluster-name", "RAY_CLUSTER_NAME", "", str)
    if not name:
        raise CollectorConfigError("the cluster name is required: pass --ray-cluster-name or set RAY_CLUSTER_NAME")
    namespace = s.get("--ray-cluster-namespace", "RAY_CLUSTER_NAMESPACE", "default", str)
    owner_kind = s.get("--owner-kind", "OWNER_KIND", "", str.lower)
    owner_name = s.get("--owner-name", "OWNER_NAME", "", str)
    if owner_kind == RAYCLUSTER:
        owner_kind, owner_name = "", ""
    if bool(owner_kind) != bool(owner_name):
        raise CollectorConfigError(
            "--owner-kind (OWNER_KIND) and --owner-name (OWNER_NAME) must be set together or not at all"
        )
    try:
        cluster = ClusterRef(namespace=namespace, name=name, owner_kind=owner_kind or RAYCLUSTER, owner_name=owner_name)
    except InvalidKeyError as exc:
        raise CollectorConfigError(
            f"cluster identity (--ray-cluster-name / --ray-cluster-namespace / --owner-*): {exc}"
        ) from exc

    try:
        storage = StorageConfig.from_args(args, env)
    except StorageConfigError as exc:
        raise CollectorConfigError(str(exc)) from exc

    ray_tmp_root = Path(s.get("--ray-tmp-root", "RAY_TMP_ROOT", DEFAULT_TMP_ROOT, str))
    enable_events = s.get("--enable-event-collector", "ENABLE_EVENT_COLLECTOR", True, _bool)
    enable_logs = s.get("--enable-log-collector", "ENABLE_LOG_COLLECTOR", True, _bool)
    if not enable_events and not enable_logs:
        raise CollectorConfigError(
            "--enable-event-collector and --enable-log-collector are both false: nothing to collect"
        )
    max_disk_mb = s.get("--event-max-disk-mb", "RAY_COLLECTOR_EVENT_MAX_DISK_MB", 200, _positive_int)
    max_file_mb = s.get("--event-max-file-size-mb", "RAY_COLLECTOR_EVENT_MAX_FILE_SIZE_MB", 100, _positive_int)
    extras = tuple(
        item.strip() for item in env.get("RAY_COLLECTOR_ADDITIONAL_ENDPOINTS", "").split(",") if item.strip()
    )
    for endpoint in extras:
        if not endpoint.startswith("/"):
            raise CollectorConfigError(f"RAY_COLLECTOR_ADDITIONAL_ENDPOINTS: {endpoint!r} must start with '/'")

    return CollectorConfig(
        role=s.get("--role", "RAY_ROLE", WORKER, _role),
        cluster=cluster,
        storage=storage,
        events_host=s.get("--events-host", "EVENTS_HOST", "0.0.0.0", str),  # noqa: S104
        events_port=s.get("--events-port", "EVENTS_PORT", 8084, _port),
        ray_tmp_root=ray_tmp_root,
        # Derived from RAY_TMP_ROOT (the reference hard-codes /tmp/ray/event-data).
        event_data_dir=Path(
            s.get("--event-data-dir", "RAY_COLLECTOR_EVENT_DATA_DIR", str(ray_tmp_root / "event-data"), str)
        ),
        enable_event_collector=enable_events,
        enable_log_collector=enable_logs,
        event_rotation_interval=s.get(
            "--event-rotation-interval", "RAY_COLLECTOR_EVENT_ROTATION_INTERVAL", 300.0, _positive_duration
        ),
        event_max_file_size=max_file_mb * 1024 * 1024,
        event_max_disk=max_disk_mb * 1024 * 1024,
        event_compression=s.get("--event-compression-enabled", "RAY_COLLECTOR_EVENT_COMPRESSION_ENABLED", False, _bool),
        event_fsync=s.get("--event-fsync", "RAY_COLLECTOR_EVENT_FSYNC", True, _bool),
        max_request_size=s.get("--max-request-mb", "RAY_COLLECTOR_MAX_REQUEST_MB", 64, _positive_int) * 1024 * 1024,
        max_targets_per_batch=s.get(
            "--max-targets-per-batch", "RAY_COLLECTOR_MAX_TARGETS_PER_BATCH", 1000, _positive_int
        ),
        max_open_spool_files=s.get("--max-open-spool-files", "RAY_COLLECTOR_MAX_OPEN_SPOOL_FILES", 256, _positive_int),
        max_connections=s.get("--max-connections", "RAY_COLLECTOR_MAX_CONNECTIONS", 32, _positive_int),
        request_header_timeout=s.get(
            "--request-header-timeout", "RAY_COLLECTOR_REQUEST_HEADER_TIMEOUT", 10.0, _positive_duration
        ),
        request_body_timeout=s.get(
            "--request-body-timeout", "RAY_COLLECTOR_REQUEST_BODY_TIMEOUT", 60.0, _positive_duration
        ),
        dashboard_address=s.get(
            "--ray-dashboard-address", "RAY_DASHBOARD_ADDRESS", "http://localhost:8265", str
        ).rstrip("/"),
        fq_ray_ip=env.get("FQ_RAY_IP", "").strip() or None,
        dashboard_port=s.get("", "RAY_DASHBOARD_PORT", 8265, _port),  # env only, as in the reference
        pod_ip=env.get("POD_IP", "").strip() or None,
        additional_endpoints=extras,
        poll_interval=s.get("--poll-interval", "RAY_COLLECTOR_POLL_INTERVAL", 30.0, _positive_duration),
        log_upload_interval=s.get(
            "--log-upload-interval", "RAY_COLLECTOR_LOG_UPLOAD_INTERVAL", 30.0, _positive_duration
        ),
        shutdown_deadline=s.get("--shutdown-deadline", "RAY_COLLECTOR_SHUTDOWN_DEADLINE", 25.0, _positive_duration),
        upload_workers=s.get("--upload-workers", "RAY_COLLECTOR_UPLOAD_WORKERS", 2, _positive_int),
        auth_token=env.get("RAY_AUTH_TOKEN", "").strip() or None,
        k8s_token_auth=_bool(env["RAY_ENABLE_K8S_TOKEN_AUTH"]) if env.get("RAY_ENABLE_K8S_TOKEN_AUTH") else False,
        auth_mode=env.get("RAY_AUTH_MODE", "").strip().lower(),
    )

"""Collector configuration: flags (GKE-guide and current-KubeRay spellings) and
environment variables (what KubeRay >= 1.7 injects into its sidecar), merged.

Names and defaults follow KubeRay's Go collector ("the reference"). Two deliberate
differences: a flag and an environment variable that disagree stop the process
with a message naming both (the reference silently lets the env win), and
numeric or boolean values that do not parse are errors, not silently ignored.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from runtime.collector import settings as cs
from runtime.collector.settings import DEFAULT_TMP_ROOT, HEAD
from runtime.common.settings import Setting, SettingError, add_arguments
from runtime.storage.config import StorageConfig, add_storage_arguments
from runtime.storage.errors import InvalidKeyError, StorageConfigError
from runtime.storage.layout import RAYCLUSTER, ClusterRef

T = TypeVar("T")


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
    max_request_size: int = cs.DEFAULT_MAX_REQUEST_MB * 1024 * 1024
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
    add_arguments(parser, cs.SETTINGS)
    return parser


# ------------------------------------------------------------------- merging
def load_config(args: argparse.Namespace | None, env: Mapping[str, str] | None = None) -> CollectorConfig:
    """Build the configuration from parsed flags and the environment."""
    env = dict(os.environ if env is None else env)
    try:
        return _load(args, env)
    except SettingError as exc:
        raise CollectorConfigError(str(exc)) from exc


def _load(args: argparse.Namespace | None, env: Mapping[str, str]) -> CollectorConfig:
    def get(setting: Setting[T]) -> T:
        return setting.read(args, env)

    name = get(cs.CLUSTER_NAME)
    if not name:
        raise CollectorConfigError("the cluster name is required: pass --ray-cluster-name or set RAY_CLUSTER_NAME")
    namespace = get(cs.CLUSTER_NAMESPACE)
    owner_kind = get(cs.OWNER_KIND)
    owner_name = get(cs.OWNER_NAME)
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

    ray_tmp_root = Path(get(cs.TMP_ROOT))
    enable_events = get(cs.ENABLE_EVENTS)
    enable_logs = get(cs.ENABLE_LOGS)
    if not enable_events and not enable_logs:
        raise CollectorConfigError(
            "--enable-event-collector and --enable-log-collector are both false: nothing to collect"
        )
    max_disk_mb = get(cs.MAX_DISK_MB)
    max_file_mb = get(cs.MAX_FILE_SIZE_MB)
    extras = get(cs.ADDITIONAL_ENDPOINTS)

    return CollectorConfig(
        role=get(cs.ROLE),
        cluster=cluster,
        storage=storage,
        events_host=get(cs.EVENTS_HOST),
        events_port=get(cs.EVENTS_PORT),
        ray_tmp_root=ray_tmp_root,
        # Derived from RAY_TMP_ROOT (the reference hard-codes /tmp/ray/event-data).
        event_data_dir=Path(get(cs.EVENT_DATA_DIR) or ray_tmp_root / "event-data"),
        enable_event_collector=enable_events,
        enable_log_collector=enable_logs,
        event_rotation_interval=get(cs.ROTATION_INTERVAL),
        event_max_file_size=max_file_mb * 1024 * 1024,
        event_max_disk=max_disk_mb * 1024 * 1024,
        event_compression=get(cs.COMPRESSION),
        event_fsync=get(cs.FSYNC),
        max_request_size=get(cs.MAX_REQUEST_MB) * 1024 * 1024,
        max_targets_per_batch=get(cs.MAX_TARGETS),
        max_open_spool_files=get(cs.MAX_OPEN_SPOOL_FILES),
        max_connections=get(cs.MAX_CONNECTIONS),
        request_header_timeout=get(cs.HEADER_TIMEOUT),
        request_body_timeout=get(cs.BODY_TIMEOUT),
        dashboard_address=get(cs.DASHBOARD_ADDRESS).rstrip("/"),
        fq_ray_ip=get(cs.FQ_RAY_IP),
        dashboard_port=get(cs.DASHBOARD_PORT),
        pod_ip=get(cs.POD_IP),
        additional_endpoints=extras,
        poll_interval=get(cs.POLL_INTERVAL),
        log_upload_interval=get(cs.LOG_UPLOAD_INTERVAL),
        shutdown_deadline=get(cs.SHUTDOWN_DEADLINE),
        upload_workers=get(cs.UPLOAD_WORKERS),
        auth_token=get(cs.AUTH_TOKEN),
        k8s_token_auth=get(cs.K8S_TOKEN_AUTH),
        auth_mode=get(cs.AUTH_MODE),
    )

"""The three services of the quickstart -- a Ray head, the collector beside it and
the history server -- as commands and environments built from the options. The
settings mirror what KubeRay gives a Ray pod and its collector sidecar."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runtime.common.ray_export import event_export_env
from runtime.quickstart.options import QuickstartOptions
from runtime.quickstart.ports import free_port
from runtime.quickstart.processes import ManagedProcess
from runtime.quickstart.ray_auth import RayToken

LOOPBACK = "127.0.0.1"
RAY_BIN = Path(sys.executable).with_name("ray")
#: Variables of the caller's shell that would configure the collector or the history
#: server differently from the flags below (a flag and a variable that disagree stop them).
_FOREIGN_PREFIXES = (
    "STORAGE_",
    "LOCAL_STORAGE_DIR",
    "GCS_BUCKET",
    "S3_",
    "AZURE_STORAGE_",
    "RAY_CLUSTER_",
    "RAY_COLLECTOR_",
    "RAY_ROLE",
    "RAY_TMP_ROOT",
    "RAY_DASHBOARD_ADDRESS",
    "RAY_DASHBOARD_PORT",
    "RAY_ADDRESS",
    "OWNER_KIND",
    "OWNER_NAME",
    "EVENTS_PORT",
    "EVENTS_HOST",
    "POD_IP",
    "FQ_RAY_IP",
    "HISTORYSERVER_",
    # Ray's token auth: the demo's own token only (runtime.quickstart.ray_auth).
    "RAY_AUTH_",
    "RAY_ENABLE_K8S_TOKEN_AUTH",
)


def clean_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without the variables the quickstart sets itself."""
    return {key: value for key, value in environ.items() if not key.startswith(_FOREIGN_PREFIXES)}


@dataclass(frozen=True)
class RayLayout:
    """Where this run's Ray head lives: its temp root and ports."""

    temp_dir: Path
    gcs_port: int
    dashboard_port: int

    @property
    def dashboard_url(self) -> str:
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    def session_dir(self) -> Path:
        return (self.temp_dir / "session_latest").resolve()


def ray_head(options: QuickstartOptions, layout: RayLayout, log_path: Path, token: RayToken) -> ManagedProcess:
    """``ray start --head --block`` with event export to the collector and token auth
    (Ray listens on every interface even with a loopback node IP). Ray's internal
    ports (client server, agent, metrics) are picked free, so only the four ports
    a person may need to change are fixed."""
    export_url = f"http://{LOOPBACK}:{options.events_port}/v1/events"
    # Job entrypoints and workers must run this environment's python, with Ray.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {
        **clean_environment(os.environ),
        **event_export_env(export_url),
        "PATH": path,
        "RAY_USAGE_STATS_ENABLED": "0",
        # Ray's OOM killer counts every process on the laptop: a busy IDE or browser
        # would get the tiny sample job's workers killed. The demo needs ~1 GiB.
        "RAY_memory_monitor_refresh_ms": "0",
        **token.env(),
    }
    cmd = [
        str(RAY_BIN), "start", "--head", "--block",
        f"--port={layout.gcs_port}",
        f"--node-ip-address={LOOPBACK}",
        f"--dashboard-host={LOOPBACK}",
        f"--dashboard-port={layout.dashboard_port}",
        "--include-dashboard=true",
        "--num-cpus=2",
        f"--temp-dir={layout.temp_dir}",
        f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        "--disable-usage-stats",
    ]  # fmt: skip
    return ManagedProcess("ray head", cmd, env, log_path)


def collector(options: QuickstartOptions, layout: RayLayout, log_path: Path, token: RayToken) -> ManagedProcess:
    """A head collector configured by environment only, as KubeRay >= 1.7 runs it
    (with ``authOptions.mode: token``: the token file's path)."""
    env = {
        **clean_environment(os.environ),
        "STORAGE_BACKEND": "local",
        "LOCAL_STORAGE_DIR": str(options.storage_dir),
        "STORAGE_CREATE_BUCKET": "true",
        "RAY_CLUSTER_NAME": options.cluster_name,
        "RAY_CLUSTER_NAMESPACE": options.namespace,
        "RAY_ROLE": "head",
        "RAY_TMP_ROOT": str(layout.temp_dir),
        "RAY_DASHBOARD_ADDRESS": layout.dashboard_url,
        "EVENTS_PORT": str(options.events_port),
        "EVENTS_HOST": LOOPBACK,
        # Short intervals: the sample job runs for seconds, not hours.
        "RAY_COLLECTOR_POLL_INTERVAL": "5s",
        "RAY_COLLECTOR_LOG_UPLOAD_INTERVAL": "5s",
        "RAY_COLLECTOR_EVENT_ROTATION_INTERVAL": "10s",
        **token.env(),
    }
    return ManagedProcess("collector", [sys.executable, "-m", "runtime.collector.main"], env, log_path)


def history_server(options: QuickstartOptions, log_path: Path) -> ManagedProcess:
    cmd = [
        sys.executable, "-m", "runtime.server.main",
        "--storage-backend=local",
        f"--local-storage-dir={options.storage_dir}",
        f"--host={options.host}",
        f"--port={options.server_port}",
        "--kubernetes=off",
    ]  # fmt: skip
    if options.cache_dir is not None:
        cmd.append(f"--cache-dir={options.cache_dir}")
    env = {**clean_environment(os.environ), "PYTHONUNBUFFERED": "1"}
    return ManagedProcess("history server", cmd, env, log_path)

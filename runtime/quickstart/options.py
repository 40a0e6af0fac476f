"""The quickstart's command line: flags, defaults and their validation."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from runtime.common.settings import Checked
from runtime.common.validators import positive_seconds, tcp_port
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_k8s_name, validate_namespace

DEFAULT_STORAGE_DIR = ".ray-history"
DEFAULT_CLUSTER = "quickstart"
DEFAULT_NAMESPACE = "default"
DEFAULT_SERVER_PORT = 8080
DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_GCS_PORT = 6379
DEFAULT_EVENTS_PORT = 8084
#: ``ray start``'s default --min-worker-port/--max-worker-port: Ray refuses to start
#: when one of its own ports is inside, and a worker could take the collector's.
RAY_WORKER_PORTS = range(10002, 20000)
#: Ray puts Unix sockets under its temp dir; their paths must stay below ~107 bytes.
MAX_RAY_TEMP_DIR_LENGTH = 48


class OptionsError(ValueError):
    """A flag has a bad value; the message names the flag."""


@dataclass(frozen=True)
class QuickstartOptions:
    storage_dir: Path
    cluster_name: str
    namespace: str
    host: str
    server_port: int
    dashboard_port: int
    gcs_port: int
    events_port: int
    cache_dir: Path | None
    ray_temp_dir: Path | None
    serve: bool
    ray_start_timeout: float
    job_timeout: float

    def ports_by_flag(self) -> dict[str, int]:
        """Every fixed port with the flag that chooses it, in start order."""
        return {
            "--gcs-port": self.gcs_port,
            "--dashboard-port": self.dashboard_port,
            "--events-port": self.events_port,
            "--port": self.server_port,
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The quickstart's flags, for ``python -m runtime.quickstart`` and ``ray-history quickstart``."""
    parser.add_argument(
        "--storage-dir",
        default=DEFAULT_STORAGE_DIR,
        help=f"local storage directory shared by the collector and the history server (default {DEFAULT_STORAGE_DIR})",
    )
    parser.add_argument("--cluster-name", default=DEFAULT_CLUSTER, help=f"cluster name (default {DEFAULT_CLUSTER})")
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"namespace (default {DEFAULT_NAMESPACE})")
    parser.add_argument("--host", default="127.0.0.1", help="address the history server listens on (127.0.0.1)")
    parser.add_argument(
        "--port",
        action=Checked,
        parse=tcp_port,
        default=DEFAULT_SERVER_PORT,
        help=f"history server port (default {DEFAULT_SERVER_PORT})",
    )
    parser.add_argument(
        "--dashboard-port",
        action=Checked,
        parse=tcp_port,
        default=DEFAULT_DASHBOARD_PORT,
        help=f"Ray dashboard port while the cluster runs (default {DEFAULT_DASHBOARD_PORT})",
    )
    parser.add_argument(
        "--gcs-port",
        action=Checked,
        parse=tcp_port,
        default=DEFAULT_GCS_PORT,
        help=f"Ray GCS port (default {DEFAULT_GCS_PORT})",
    )
    parser.add_argument(
        "--events-port",
        action=Checked,
        parse=tcp_port,
        default=DEFAULT_EVENTS_PORT,
        help=f"collector's event receiver port (default {DEFAULT_EVENTS_PORT})",
    )
    parser.add_argument("--cache-dir", help="history server index cache (default: the history server's own default)")
    parser.add_argument(
        "--ray-temp-dir",
        help="Ray's temp root for this run (default: a new /tmp/rayqs-* directory, removed at the end)",
    )
    parser.add_argument(
        "--no-serve",
        "--exit-after-ready",
        dest="serve",
        action="store_false",
        help="stop once the history server answered and the URLs are printed, instead of serving until Ctrl-C",
    )
    parser.add_argument(
        "--ray-start-timeout",
        action=Checked,
        parse=positive_seconds,
        default=120.0,
        help="seconds to wait for the Ray dashboard to come up (default 120)",
    )
    parser.add_argument(
        "--job-timeout",
        action=Checked,
        parse=positive_seconds,
        default=300.0,
        help="seconds to wait for the sample job to finish (default 300)",
    )


def options_from_args(args: argparse.Namespace) -> QuickstartOptions:
    """Check what argparse cannot (names, distinct ports, paths); raise :class:`OptionsError`."""
    try:
        validate_k8s_name(args.cluster_name, "cluster name")
    except InvalidKeyError as exc:
        raise OptionsError(f"--cluster-name: {exc}") from None
    try:
        validate_namespace(args.namespace)
    except InvalidKeyError as exc:
        raise OptionsError(f"--namespace: {exc}") from None
    options = QuickstartOptions(
        storage_dir=Path(args.storage_dir).expanduser().resolve(),
        cluster_name=args.cluster_name,
        namespace=args.namespace,
        host=args.host,
        server_port=args.port,
        dashboard_port=args.dashboard_port,
        gcs_port=args.gcs_port,
        events_port=args.events_port,
        cache_dir=Path(args.cache_dir).expanduser().resolve() if args.cache_dir else None,
        ray_temp_dir=Path(args.ray_temp_dir).expanduser().resolve() if args.ray_temp_dir else None,
        serve=args.serve,
        ray_start_timeout=args.ray_start_timeout,
        job_timeout=args.job_timeout,
    )
    _check_distinct_ports(options)
    _check_paths(options)
    return options


def _check_distinct_ports(options: QuickstartOptions) -> None:
    seen: dict[int, str] = {}
    for flag, port in options.ports_by_flag().items():
        if flag != "--port" and port in RAY_WORKER_PORTS:
            first, last = RAY_WORKER_PORTS[0], RAY_WORKER_PORTS[-1]
            raise OptionsError(f"{flag}={port} is inside Ray's worker port range {first}-{last}: choose another")
        if port in seen:
            raise OptionsError(f"{flag} and {seen[port]} are both {port}: each needs its own port")
        seen[port] = flag


def _check_paths(options: QuickstartOptions) -> None:
    if options.storage_dir.exists() and not options.storage_dir.is_dir():
        raise OptionsError(f"--storage-dir: {options.storage_dir} exists and is not a directory")
    parent = _existing_ancestor(options.storage_dir)
    if not os.access(parent, os.W_OK):
        raise OptionsError(f"--storage-dir: cannot create or write {options.storage_dir} ({parent} is not writable)")
    temp = options.ray_temp_dir
    if temp is not None and len(str(temp)) > MAX_RAY_TEMP_DIR_LENGTH:
        raise OptionsError(
            f"--ray-temp-dir: {temp} is {len(str(temp))} characters long; Ray's socket paths under it would pass "
            f"the 107-byte Unix limit, use a path of at most {MAX_RAY_TEMP_DIR_LENGTH} characters"
        )
    if temp is not None and temp.exists() and any(temp.iterdir()):
        raise OptionsError(f"--ray-temp-dir: {temp} is not empty; give a new or empty directory")


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")

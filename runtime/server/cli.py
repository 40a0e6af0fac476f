"""``historyserver`` entry point: flags -> :class:`ServerConfig` -> gunicorn.

``historyserver --storage-backend=local --local-storage-dir=DIR --port 8080`` is
the whole command; gunicorn runs embedded (gthread workers, settings in
:mod:`runtime.server.gunicorn_conf`). The GKE guide's spelling
``historyserver --runtime-class-name=gcs --ray-root-dir=log`` works too.

Flags the reference has but that mean nothing here (its in-memory snapshot cache,
its client-side API rate limits, the API-server service proxy, token injection)
are accepted with a warning, so existing manifests keep starting.

Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for bad configuration
(the message names the flag), 1 when storage is unusable at start.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path

from runtime.cli_common import configure_logging, limit_malloc_arenas, open_configured_store
from runtime.collector.durations import parse_duration
from runtime.server.config import (
    DEFAULT_FRESHNESS_SECONDS,
    DEFAULT_PORT,
    DEFAULT_PROXY_TIMEOUT,
    LiveClusterURL,
    ServerConfig,
)
from runtime.server.hosts import default_allowed_hosts, parse_allowed_hosts
from runtime.server.live.discovery import KUBERNETES_MODES, LiveDiscoveryError, live_directory_from_config
from runtime.storage.config import add_storage_arguments
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_k8s_name, validate_namespace

logger = logging.getLogger("runtime.server")

CACHE_DIR_ENV = "HISTORYSERVER_CACHE_DIR"
ALLOWED_HOSTS_ENV = "HISTORYSERVER_ALLOWED_HOSTS"
#: Where a pod finds its namespace (the downward API's env var, else the mounted
#: service account), for the default allowed names historyserver.<ns>[.svc].
POD_NAMESPACE_ENV = "POD_NAMESPACE"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: In the image this directory exists and belongs to the server's user.
DEFAULT_CACHE_DIR = Path("/var/cache/historyserver")
DEFAULT_CACHE_MAX_SIZE = "20Gi"
UNBOUNDED = 2**63 - 1
#: Reference flags without meaning here: (flag, takes a value, why it is ignored).
IGNORED_FLAGS = (
    ("--session-cache-size", True, "indexes live on disk, bounded by --cache-max-size"),
    ("--session-cache-max-memory", True, "indexes live on disk, bounded by --cache-max-size"),
    ("--session-cache-ttl", True, "indexes are kept until --cache-max-size needs the room"),
    ("--session-process-timeout", True, "use --build-timeout"),
    ("--kube-api-qps", True, "lookups are cached for a few seconds instead"),
    ("--kube-api-burst", True, "lookups are cached for a few seconds instead"),
    ("--use-kubernetes-proxy", False, "live clusters are reached through cluster DNS"),
    ("--use-auth-token-mode", False, "Ray token auth headers are passed through from the client, not injected"),
)


# ------------------------------------------------------------ value parsers
_QUANTITY = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<suffix>[KMGTPE]i|[kMGTPE]|[eE][+-]?\d+)?")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(text: str) -> int:
    """Bytes in a Kubernetes quantity: ``20Gi``, ``8G``, ``8589934592``, ``2e9``,
    ``8.5Gi`` (as the reference accepts); ``8GiB``, ``lots``, negatives are errors."""
    match = _QUANTITY.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a size like 20Gi, 500Mi or 8G")
    try:
        number = Decimal(match["number"])
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a size like 20Gi, 500Mi or 8G") from None
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        number *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        number *= _DECIMAL[suffix]
    elif suffix:
        number *= Decimal(10) ** int(suffix[1:])
    return int(number.to_integral_value(rounding="ROUND_CEILING"))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return value


def _seconds(allow_zero: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"{text!r} must be {'>= 0' if allow_zero else '> 0'}")
        return value

    return parse


def _size(text: str) -> int:
    try:
        value = parse_quantity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return UNBOUNDED if value == 0 else value  # "0" disables the bound, as in the reference


def _live_cluster(text: str) -> LiveClusterURL:
    """``[namespace/]name=http(s)://host[:port][/prefix]``."""
    from urllib.parse import urlsplit

    ident, sep, url = text.partition("=")
    if not sep or not ident or not url:
        raise argparse.ArgumentTypeError(f"{text!r}: expected [namespace/]name=URL")
    namespace, _, name = ident.rpartition("/")
    namespace = namespace or "default"
    try:
        validate_namespace(namespace)
        validate_k8s_name(name)
    except InvalidKeyError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"{text!r}: the URL must be http(s)://host[:port][/path]")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return LiveClusterURL(namespace=namespace, name=name, url=url.rstrip("/"))


def _dashboard_dir(text: str) -> Path:
    path = Path(text).expanduser()
    if not (path / "index.html").is_file():
        raise argparse.ArgumentTypeError(f"{text!r} holds no index.html (the Ray Dashboard build directory)")
    return path


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="historyserver",
        description=(
            "Ray History Server: the Ray Dashboard (UI and API) for clusters that no longer exist, "
            "read from the collector's object storage; live clusters are proxied."
        ),
    )
    add_storage_arguments(parser)

    serve = parser.add_argument_group("serving")
    serve.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")  # noqa: S104
    serve.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"listen port (default {DEFAULT_PORT})")
    serve.add_argument("--workers", type=_positive_int, default=1, help="gunicorn worker processes (default 1)")
    serve.add_argument("--threads", type=_positive_int, default=8, help="threads per worker (default 8)")
    serve.add_argument(
        "--dashboard-dir", type=_dashboard_dir, help="Ray Dashboard build (default: from the ray package)"
    )
    serve.add_argument(
        "--clusters-limit", type=_positive_int, default=1000, help="stored sessions listed by /clusters (default 1000)"
    )
    serve.add_argument("--secure-cookies", action="store_true", help="mark cookies Secure (serving over HTTPS)")
    serve.add_argument(
        "--allowed-hosts",
        help=f"extra Host names answered, comma-separated: name, *.domain, or * for any (env {ALLOWED_HOSTS_ENV}); "
        "always allowed: IP addresses, localhost, historyserver[.<namespace>[.svc]], *.svc.<cluster domain>",
    )

    cache = parser.add_argument_group("session index cache")
    cache.add_argument(
        "--cache-dir",
        help=f"per-session indexes (env {CACHE_DIR_ENV}; default {DEFAULT_CACHE_DIR}, "
        "or ~/.cache/historyserver when that is not writable)",
    )
    cache.add_argument(
        "--cache-max-size",
        type=_size,
        default=_size(DEFAULT_CACHE_MAX_SIZE),
        help=f"bound on the index directory, a Kubernetes quantity (default {DEFAULT_CACHE_MAX_SIZE}; 0 = unbounded)",
    )
    cache.add_argument(
        "--freshness-seconds",
        type=_seconds(allow_zero=True),
        default=DEFAULT_FRESHNESS_SECONDS,
        help=f"re-list a session's objects at most this often (default {DEFAULT_FRESHNESS_SECONDS:g})",
    )
    cache.add_argument(
        "--build-timeout", type=_seconds(allow_zero=False), default=900.0, help="cap per index build (default 15m)"
    )

    live = parser.add_argument_group("live clusters")
    live.add_argument(
        "--live-cluster",
        type=_live_cluster,
        action="append",
        default=[],
        metavar="[NS/]NAME=URL",
        help="a live cluster's dashboard URL (repeatable; namespace defaults to 'default')",
    )
    live.add_argument("--kubernetes", choices=KUBERNETES_MODES, default="auto", help="RayCluster discovery")
    live.add_argument("--kubeconfig", help="kubeconfig for --kubernetes=kubeconfig (default ~/.kube/config)")
    live.add_argument("--kubeconfigs", help=argparse.SUPPRESS)  # the reference's spelling
    live.add_argument("--cluster-domain", default="cluster.local", help="DNS suffix of services (cluster.local)")
    live.add_argument(
        "--proxy-timeout",
        type=_seconds(allow_zero=False),
        default=DEFAULT_PROXY_TIMEOUT,
        help=f"seconds to wait for a proxied answer (a log stream's headers too; its body may take as long "
        f"as the log grows) (default {DEFAULT_PROXY_TIMEOUT:g})",
    )
    live.add_argument(
        "--max-live-streams",
        type=_positive_int,
        help="live log streams proxied at once per worker; more get 503 (default: half of --threads)",
    )

    ops = parser.add_argument_group("logging")
    ops.add_argument("--log-level", help="DEBUG, INFO, WARNING (env LOG_LEVEL)")
    ops.add_argument("--log-format", choices=("text", "json"), help="env LOG_FORMAT (default text)")

    for flag, takes_value, _why in IGNORED_FLAGS:
        if takes_value:
            parser.add_argument(flag, help=argparse.SUPPRESS)
        else:  # Go booleans: --flag, --flag=true, --flag=false
            parser.add_argument(flag, nargs="?", const="true", help=argparse.SUPPRESS)
    return parser


# ------------------------------------------------------------------ config
def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def _cache_dir(parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str]) -> Path:
    flag = args.cache_dir
    from_env = env.get(CACHE_DIR_ENV, "").strip() or None
    if flag and from_env and Path(flag) != Path(from_env):
        parser.error(f"--cache-dir={flag} contradicts {CACHE_DIR_ENV}={from_env}; set only one")
    chosen = flag or from_env
    if chosen:
        path = Path(chosen).expanduser()
        if not _writable_dir(path):
            parser.error(f"--cache-dir={chosen}: cannot create or write to this directory")
        return path
    if _writable_dir(DEFAULT_CACHE_DIR):
        return DEFAULT_CACHE_DIR
    # Outside the image (a laptop, CI) /var/cache is root's: use the user's cache.
    fallback = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "historyserver"
    if not _writable_dir(fallback):
        parser.error(f"--cache-dir: neither {DEFAULT_CACHE_DIR} nor {fallback} is writable; pass --cache-dir")
    logger.warning("%s is not writable; caching session indexes in %s", DEFAULT_CACHE_DIR, fallback)
    return fallback


def _pod_namespace(env: Mapping[str, str]) -> str | None:
    namespace = env.get(POD_NAMESPACE_ENV, "").strip()
    if not namespace:
        try:
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            return None
    try:
        return validate_namespace(namespace)
    except InvalidKeyError:
        logger.warning("ignoring pod namespace %r: not a namespace name", namespace)
        return None


def _allowed_hosts(
    parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str], cluster_domain: str
) -> tuple[str, ...]:
    """The defaults plus ``--allowed-hosts`` / ``HISTORYSERVER_ALLOWED_HOSTS`` (one of them)."""
    flag = args.allowed_hosts
    from_env = env.get(ALLOWED_HOSTS_ENV, "").strip() or None
    try:
        flag_hosts = parse_allowed_hosts(flag) if flag is not None else None
        env_hosts = parse_allowed_hosts(from_env) if from_env is not None else None
    except ValueError as exc:
        parser.error(f"--allowed-hosts: {exc}")
    if flag_hosts is not None and env_hosts is not None and set(flag_hosts) != set(env_hosts):
        parser.error(f"--allowed-hosts={flag} contradicts {ALLOWED_HOSTS_ENV}={from_env}; set only one")
    extra = flag_hosts if flag_hosts is not None else env_hosts or ()
    defaults = default_allowed_hosts(cluster_domain, _pod_namespace(env))
    return tuple(dict.fromkeys((*defaults, *extra)))


def _kubeconfig(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    listed = [p.strip() for p in (args.kubeconfigs or "").split(",") if p.strip()]
    if len(listed) > 1:
        parser.error(f"--kubeconfigs={args.kubeconfigs}: only one kubeconfig is supported")
    if listed and args.kubeconfig and listed[0] != args.kubeconfig:
        parser.error(f"--kubeconfigs={listed[0]} contradicts --kubeconfig={args.kubeconfig}")
    return args.kubeconfig or (listed[0] if listed else None)


def config_from_args(
    parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> ServerConfig:
    """Validate the parsed flags into a :class:`ServerConfig` (checks and opens the
    storage once: exit 2 for a configuration error, 1 when it is unreachable)."""
    env = os.environ if env is None else env
    for flag, _takes_value, why in IGNORED_FLAGS:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            logger.warning("%s=%s is accepted for compatibility and ignored: %s", flag, value, why)
    storage, store = open_configured_store(parser, args, env)
    store.close()
    kubeconfig = _kubeconfig(parser, args)
    kubernetes = args.kubernetes
    if kubeconfig and kubernetes == "in-cluster":
        parser.error("--kubeconfig contradicts --kubernetes=in-cluster")
    if len({(c.namespace, c.name) for c in args.live_cluster}) != len(args.live_cluster):
        parser.error("--live-cluster: the same [namespace/]name is given twice")
    cluster_domain = args.cluster_domain.strip(".")
    return ServerConfig(
        storage=storage,
        cache_dir=_cache_dir(parser, args, env),
        host=args.host,
        port=args.port,
        workers=args.workers,
        threads=args.threads,
        cache_max_bytes=args.cache_max_size,
        freshness_seconds=args.freshness_seconds,
        build_timeout=args.build_timeout,
        live_clusters=tuple(args.live_cluster),
        kubernetes=kubernetes,
        kubeconfig=kubeconfig,
        cluster_domain=cluster_domain,
        dashboard_dir=args.dashboard_dir,
        clusters_limit=args.clusters_limit,
        proxy_timeout=args.proxy_timeout,
        secure_cookies=args.secure_cookies,
        allowed_hosts=_allowed_hosts(parser, args, env, cluster_domain),
        max_live_streams=args.max_live_streams,
    )


def load_config(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> ServerConfig:
    """Parse ``argv`` (flags as on the command line) into a checked configuration."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    config = config_from_args(parser, args, env)
    try:
        # Built once here only to fail early on an unusable --kubernetes/--kubeconfig;
        # each worker builds its own.
        live_directory_from_config(config, env).close()
    except LiveDiscoveryError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return config


def main(argv: list[str] | None = None) -> int:
    limit_malloc_arenas()
    config = load_config(argv)
    from runtime.server.wsgi import HistoryServerApplication

    logger.info(
        "history server on %s:%d (storage %s, cache %s, %d worker(s) x %d threads, hosts %s)",
        config.host,
        config.port,
        config.storage.backend,
        config.cache_dir,
        config.workers,
        config.threads,
        ", ".join(config.allowed_hosts),
    )
    HistoryServerApplication(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

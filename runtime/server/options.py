"""Flags and environment -> :class:`ServerConfig`, for both ways the server starts.

``historyserver`` (:mod:`runtime.server.main`) and a gunicorn started by hand
(:mod:`runtime.server.gunicorn_conf` with ``HISTORYSERVER_ARGS``,
:mod:`runtime.server.wsgi`) load their configuration here, so neither entry point
imports the other. The settings themselves are declared in
:mod:`runtime.server.settings`.

Flags KubeRay's Go history server has but that mean nothing here (its in-memory snapshot cache,
its client-side API rate limits, the API-server service proxy, token injection)
are accepted with a warning, so existing manifests keep starting.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from runtime.common.process import configure_logging
from runtime.common.settings import SettingError, add_arguments
from runtime.server import settings as ss
from runtime.server.auth.config import AuthConfig, parse_auth
from runtime.server.auth.front_door_settings import FrontDoorSettings, parse_front_door
from runtime.server.auth.oidc_settings import OidcSettings, parse_oidc
from runtime.server.config import MetricsConfig, ServerConfig
from runtime.server.hosts import default_allowed_hosts
from runtime.server.live.directory import live_directory_from_config
from runtime.server.live.discovery import LiveDiscoveryError
from runtime.storage.config import add_storage_arguments, open_configured_store
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_namespace

logger = logging.getLogger("runtime.server")

#: The flags of a gunicorn started by hand (``create_from_env``, ``gunicorn_conf``).
ARGS_ENV = "HISTORYSERVER_ARGS"
CACHE_DIR_ENV = ss.CACHE_DIR_ENV
ALLOWED_HOSTS_ENV = ss.ALLOWED_HOSTS_ENV
DEFAULT_CACHE_DIR = ss.DEFAULT_CACHE_DIR
#: Where a pod finds its namespace (the downward API's env var, else the mounted
#: service account), for the default allowed names historyserver.<ns>[.svc].
POD_NAMESPACE_ENV = "POD_NAMESPACE"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="historyserver",
        description=(
            "Ray History Server: the Ray Dashboard (UI and API) for clusters that no longer exist, "
            "read from the collector's object storage; live clusters are proxied."
        ),
    )
    add_storage_arguments(parser)
    add_arguments(parser, ss.SETTINGS)
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
    try:
        chosen = ss.CACHE_DIR.read(args, env)
    except SettingError as exc:
        parser.error(str(exc))
    if chosen:
        path = chosen.expanduser()
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
    try:
        extra = ss.ALLOWED_HOSTS.read(args, env) or ()
    except SettingError as exc:
        parser.error(str(exc))
    defaults = default_allowed_hosts(cluster_domain, _pod_namespace(env))
    return tuple(dict.fromkeys((*defaults, *extra)))


def _auth(
    parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str]
) -> tuple[AuthConfig, OidcSettings | None, FrontDoorSettings | None]:
    """``--auth``/``--authz`` and the settings of the authenticators they name (exit 2 naming the flag)."""
    try:
        auth = parse_auth(
            ss.AUTH.read(args, env),
            ss.AUTHZ.read(args, env),
            args.authz_resource,
            args.authz_policy,
            username_prefix=ss.OIDC_USERNAME_PREFIX.read(args, env),
            groups_prefix=ss.OIDC_GROUPS_PREFIX.read(args, env),
        )
        oidc_flags = (ss.OIDC_ISSUER, ss.OIDC_CLIENT_ID, ss.OIDC_CLIENT_SECRET_FILE, ss.OIDC_REDIRECT_URL)
        oidc = None
        if "oidc" in auth.modes:
            oidc = parse_oidc(
                ss.OIDC_ISSUER.read(args, env),
                ss.OIDC_CLIENT_ID.read(args, env),
                ss.OIDC_CLIENT_SECRET_FILE.read(args, env),
                ss.OIDC_GROUPS_CLAIM.read(args, env) or "groups",
                ss.OIDC_REDIRECT_URL.read(args, env),
                cookie_key_file=ss.OIDC_COOKIE_KEY_FILE.read(args, env),
            )
        elif any(setting.read(args, env) for setting in oidc_flags):
            raise ValueError("--oidc-*: only used with --auth oidc")
        front_door = parse_front_door(
            ss.TRUSTED_HEADER.read(args, env),
            iap_audience=ss.IAP_AUDIENCE.read(args, env),
            alb_arn=ss.ALB_ARN.read(args, env),
            alb_region=ss.ALB_REGION.read(args, env),
            groups_claim=ss.TRUSTED_HEADER_GROUPS_CLAIM.read(args, env),
            iap_jwks_url=ss.IAP_JWKS_URL.read(args, env),
            alb_key_url=ss.ALB_KEY_URL.read(args, env),
        )
        if ("trusted-header" in auth.modes) != (front_door is not None):
            raise ValueError("--trusted-header: set it (iap or alb) exactly when --auth includes trusted-header")
    except (SettingError, ValueError) as exc:
        parser.error(str(exc))
    return auth, oidc, front_door


def _shared_index(
    parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str], backend: str
) -> tuple[str, str | None]:
    """``--shared-index`` and ``--shared-index-container`` (azureblob only)."""
    try:
        mode = ss.SHARED_INDEX.read(args, env)
        container = ss.SHARED_INDEX_CONTAINER.read(args, env)
    except SettingError as exc:
        parser.error(str(exc))
    if container and backend != "azureblob":
        parser.error(
            f"--shared-index-container={container}: only for --storage-backend=azureblob; on {backend} the "
            "shared indexes live under history-index/ in the same bucket"
        )
    return mode, container


def _metrics(parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str]) -> MetricsConfig:
    """``--prometheus-url``, ``--grafana-*`` (exit 2 naming the flag or variable)."""
    try:
        uids_text = ss.GRAFANA_DASHBOARD_UIDS.read(args, env)
        try:
            uids = ss.dashboard_uids(uids_text)
        except ValueError as exc:
            raise SettingError(f"--grafana-dashboard-uids={uids_text}: {exc}") from None
        token = ss.GRAFANA_TOKEN_FILE.read(args, env)
        basic = ss.GRAFANA_BASIC_AUTH_FILE.read(args, env)
        if token and basic:
            raise SettingError("--grafana-token-file and --grafana-basic-auth-file: set only one")
        if basic and ":" not in basic:
            raise SettingError("--grafana-basic-auth-file: the file must hold user:password")
        datasource = ss.PROMETHEUS_DATASOURCE.read(args, env).strip()  # blank reads as unset
        return MetricsConfig(
            prometheus_url=ss.PROMETHEUS_URL.read(args, env),
            grafana_url=ss.GRAFANA_URL.read(args, env),
            dashboard_uids=uids,
            datasource=datasource,
            grafana_org_id=str(ss.GRAFANA_ORG_ID.read(args, env)),
            grafana_token=token,
            grafana_basic_auth=basic,
        )
    except SettingError as exc:
        parser.error(str(exc))


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
    auth, oidc, front_door = _auth(parser, args, env)
    shared_index, shared_index_container = _shared_index(parser, args, env, storage.backend)
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
        build_wait=args.build_wait,
        max_builds=args.max_builds,
        index_ahead=not args.no_index_ahead,  # on by default; --index-ahead only says so
        index_ahead_workers=args.index_ahead_workers,
        index_ahead_max_age=args.index_ahead_max_age,
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
        auth=auth,
        oidc=oidc,
        front_door=front_door,
        shared_index=shared_index,
        shared_index_container=shared_index_container,
        metrics=_metrics(parser, args, env),
    )


def warn_if_open(config: ServerConfig) -> None:
    """``--auth none`` is for a server only this machine reaches: say so when it listens wider."""
    if config.auth.enabled or config.host in ("127.0.0.1", "::1", "localhost"):
        return
    logger.warning(
        "--auth none on %s: anyone who reaches port %d reads every namespace's history; "
        "use --auth kubernetes (and --authz) on a shared server, or --host 127.0.0.1",
        config.host,
        config.port,
    )


def load_config(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> ServerConfig:
    """Parse ``argv`` (flags as on the command line) into a checked configuration."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    config = config_from_args(parser, args, env)
    warn_if_open(config)
    try:
        # Built once here only to fail early on an unusable --kubernetes/--kubeconfig;
        # each worker builds its own.
        live_directory_from_config(config, env).close()
    except LiveDiscoveryError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return config


def config_from_env(env: Mapping[str, str] | None = None) -> ServerConfig:
    """The configuration the flags in ``HISTORYSERVER_ARGS`` (plus the usual
    environment variables) describe."""
    env = os.environ if env is None else env
    return load_config(shlex.split(env.get(ARGS_ENV, "")), env)

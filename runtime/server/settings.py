"""Every history-server setting (storage ones aside), declared once: flag,
environment variable where there is one, parser, default and meaning.
:mod:`runtime.server.options` builds the parser and the configuration from these;
:func:`table` is the README's table.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from runtime.common.quantities import parse_quantity
from runtime.common.settings import Setting, markdown_table
from runtime.common.validators import choice, duration, positive_int, tcp_port
from runtime.server.config import (
    DEFAULT_BUILD_WAIT,
    DEFAULT_DASHBOARD_UIDS,
    DEFAULT_DATASOURCE,
    DEFAULT_FRESHNESS_SECONDS,
    DEFAULT_INDEX_AHEAD_MAX_AGE,
    DEFAULT_PORT,
    DEFAULT_PROXY_TIMEOUT,
    DEFAULT_SHARED_INDEX,
    RAY_DASHBOARD_UIDS,
    LiveClusterURL,
)
from runtime.server.hosts import parse_allowed_hosts
from runtime.server.index.shared import MODES as SHARED_INDEX_MODES
from runtime.server.live.discovery import KUBERNETES_MODES
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_k8s_name, validate_namespace

CACHE_DIR_ENV = "HISTORYSERVER_CACHE_DIR"
ALLOWED_HOSTS_ENV = "HISTORYSERVER_ALLOWED_HOSTS"
#: In the image this directory exists and belongs to the server's user.
DEFAULT_CACHE_DIR = Path("/var/cache/historyserver")
DEFAULT_CACHE_MAX_SIZE = "20Gi"
UNBOUNDED = 2**63 - 1
SERVE = "serving"
CACHE = "session index cache"
LIVE = "live clusters"
LOGGING = "logging"
METRICS = "metrics of dead clusters"
ACCESS = "access control"
AUTH_ENV = "HISTORYSERVER_AUTH"
AUTHZ_ENV = "HISTORYSERVER_AUTHZ"
_AZURE_CONTAINER = re.compile(r"^(?=.{3,63}$)[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*$")


def size(text: str) -> int:
    """Bytes in a Kubernetes quantity; ``0`` disables the bound, as in KubeRay's Go history server."""
    value = parse_quantity(text)
    return UNBOUNDED if value == 0 else value


def live_cluster(text: str) -> LiveClusterURL:
    """``[namespace/]name=http(s)://host[:port][/prefix]``."""
    ident, sep, url = text.partition("=")
    if not sep or not ident or not url:
        raise ValueError("expected [namespace/]name=URL")
    namespace, _, name = ident.rpartition("/")
    namespace = namespace or "default"
    try:
        validate_namespace(namespace)
        validate_k8s_name(name)
    except InvalidKeyError as exc:
        raise ValueError(str(exc)) from None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError("the URL must be http(s)://host[:port][/path]")
    parts.port  # noqa: B018 - raises ValueError for a bad port
    return LiveClusterURL(namespace=namespace, name=name, url=url.rstrip("/"))


def service_url(text: str) -> str:
    """``http(s)://host[:port][/prefix]``, without a query, fragment or credentials."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected http(s)://host[:port][/path]")
    if parts.query or parts.fragment:
        raise ValueError("no query or fragment allowed")
    if parts.username or parts.password:
        raise ValueError("no credentials in the URL (use --grafana-token-file / --grafana-basic-auth-file)")
    parts.port  # noqa: B018 - raises ValueError for a bad port
    return text.strip().rstrip("/")


def dashboard_uids(text: str) -> dict[str, str]:
    """``uid,uid,...`` (Ray's uids, as the Pulumi program passes them) or ``key=uid``
    entries for dashboards provisioned under other uids; -> the UI's ``{key: uid}``."""
    found: dict[str, str] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        key, sep, uid = entry.partition("=")
        if not sep:
            uid = entry
            if uid not in RAY_DASHBOARD_UIDS:
                raise ValueError(f"{uid!r} is not one of Ray's dashboard uids; write KEY={uid} (e.g. default={uid})")
            key = RAY_DASHBOARD_UIDS[uid]
        if not key.strip() or not uid.strip() or not uid.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"bad entry {entry!r}: expected KEY=UID with a letters/digits/-/_ uid")
        found[key.strip()] = uid.strip()
    if "default" not in found:
        raise ValueError("the default dashboard (rayDefaultDashboard, or default=UID) must be listed")
    return found


def secret_file(path: str) -> str:
    """The first line of a file holding a secret (a mounted Secret); never the value itself."""
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"cannot read it: {exc.strerror}") from None
    if not value:
        raise ValueError("the file is empty")
    return value


def dashboard_dir(text: str) -> Path:
    path = Path(text).expanduser()
    if not (path / "index.html").is_file():
        raise ValueError("holds no index.html (the Ray Dashboard build directory)")
    return path


def azure_container(text: str) -> str:
    """An Azure Blob container name (3-63 lower-case letters, digits, single hyphens)."""
    if not _AZURE_CONTAINER.fullmatch(text):
        raise ValueError("not a container name: 3-63 lower-case letters, digits and single hyphens")
    return text


def _text(text: str) -> str:
    return text


def _same_hosts(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> bool:
    return set(a or ()) == set(b or ())  # the order of the names does not matter


HOST = Setting("--host", None, _text, "0.0.0.0", "where gunicorn listens", group=SERVE)  # noqa: S104
PORT = Setting("--port", None, tcp_port, DEFAULT_PORT, "listen port", group=SERVE)
WORKERS = Setting(
    "--workers", None, positive_int, 1, "gunicorn processes; all workers share one index cache", group=SERVE
)
THREADS = Setting("--threads", None, positive_int, 8, "threads per gunicorn process", group=SERVE)
DASHBOARD_DIR = Setting[Path | None](
    "--dashboard-dir", None, dashboard_dir, None, "the Ray Dashboard UI build served at `/`",
    "the `dashboard/client/build` of the installed `ray` package", group=SERVE,
)  # fmt: skip
CLUSTERS_LIMIT = Setting(
    "--clusters-limit", None, positive_int, 1000, "stored sessions listed by `/clusters`", group=SERVE
)
SECURE_COOKIES = Setting(
    "--secure-cookies", None, bool, False, "mark the selection cookies `Secure` (behind HTTPS)", "off",
    group=SERVE, switch=True,
)  # fmt: skip
ALLOWED_HOSTS = Setting[tuple[str, ...] | None](
    "--allowed-hosts", ALLOWED_HOSTS_ENV, parse_allowed_hosts, None,
    "more `Host` names to answer, comma-separated (`name`, `*.domain`, or `*`); any other gets 400 (DNS rebinding)",
    "loopback, IP addresses and the Service's names (`historyserver[.<namespace>[.svc]]`, `*.svc.<cluster domain>`)",
    group=SERVE, same=_same_hosts,
)  # fmt: skip

CACHE_DIR = Setting[Path | None](
    "--cache-dir", CACHE_DIR_ENV, Path, None, "the per-session SQLite indexes",
    f"`{DEFAULT_CACHE_DIR}`, else `~/.cache/historyserver`", group=CACHE,
)  # fmt: skip
CACHE_MAX_SIZE = Setting(
    "--cache-max-size", None, size, size(DEFAULT_CACHE_MAX_SIZE),
    "least recently used indexes are deleted beyond it, a Kubernetes quantity (`0` = unbounded)",
    f"`{DEFAULT_CACHE_MAX_SIZE}`", group=CACHE,
)  # fmt: skip
FRESHNESS = Setting(
    "--freshness-seconds", None, duration(allow_zero=True), DEFAULT_FRESHNESS_SECONDS,
    "how often a session's objects are re-listed to notice late uploads", f"`{DEFAULT_FRESHNESS_SECONDS:g}`",
    group=CACHE,
)  # fmt: skip
BUILD_TIMEOUT = Setting("--build-timeout", None, duration(), 900.0, "cap on one index build", "`15m`", group=CACHE)
BUILD_WAIT = Setting(
    "--build-wait", None, duration(allow_zero=True), DEFAULT_BUILD_WAIT,
    "how long a request waits for a session's index build; then 503 with `Retry-After` and the build's progress",
    f"`{DEFAULT_BUILD_WAIT:g}`", group=CACHE,
)  # fmt: skip
MAX_BUILDS = Setting(
    "--max-builds", None, positive_int, 2,
    "index builds that requests start at once on this cache directory, all gunicorn workers together; "
    "more wait their turn, answering 503 with the phase `queued` (builds ahead are bounded apart)", group=CACHE,
)  # fmt: skip
INDEX_AHEAD = Setting(
    "--index-ahead", None, bool, False,
    "index finished sessions in the background, newest first, before anyone asks (the default)", "on",
    group=CACHE, switch=True,
)  # fmt: skip
NO_INDEX_AHEAD = Setting(
    "--no-index-ahead", None, bool, False, "index a session only when a request needs it", "off",
    group=CACHE, switch=True,
)  # fmt: skip
INDEX_AHEAD_WORKERS = Setting(
    "--index-ahead-workers", None, positive_int, 1,
    "index builds run ahead at once on this cache directory, all gunicorn workers together", group=CACHE,
)  # fmt: skip
INDEX_AHEAD_MAX_AGE = Setting(
    "--index-ahead-max-age", None, duration(), DEFAULT_INDEX_AHEAD_MAX_AGE,
    "sessions created longer ago are indexed only when a request needs them", "`168h`", group=CACHE,
)  # fmt: skip
SHARED_INDEX = Setting(
    "--shared-index", "SHARED_INDEX", choice(*SHARED_INDEX_MODES), DEFAULT_SHARED_INDEX,
    "indexes shared through the bucket (`history-index/`): `read` downloads one instead of building; "
    "`write` also uploads after a build (needs write access to that prefix only); `off`",
    group=CACHE,
)  # fmt: skip
SHARED_INDEX_CONTAINER = Setting[str | None](
    "--shared-index-container", "SHARED_INDEX_CONTAINER", azure_container, None,
    "azureblob only: the container holding the shared indexes, so writing them needs no write access "
    "to the history container", "the history container", group=CACHE,
)  # fmt: skip

# Any: each flag parses to one LiveClusterURL, the setting is their list.
LIVE_CLUSTERS = Setting[Any](
    "--live-cluster", None, live_cluster, [], "a live cluster's dashboard, outside Kubernetes (repeatable)",
    group=LIVE, metavar="[NS/]NAME=URL", repeat=True,
)  # fmt: skip
KUBERNETES = Setting(
    "--kubernetes", None, choice(*KUBERNETES_MODES), "auto",
    "RayCluster discovery: `in-cluster`, `kubeconfig`, `off`; `auto` uses in-cluster config in a pod, else nothing",
    group=LIVE,
)  # fmt: skip
KUBECONFIG = Setting[str | None](
    "--kubeconfig", None, _text, None, "kubeconfig for `--kubernetes=kubeconfig`", "`~/.kube/config`", group=LIVE
)
KUBECONFIGS = Setting[str | None](
    "--kubeconfigs", None, _text, None, "KubeRay's Go history server's spelling", hidden=True
)
CLUSTER_DOMAIN = Setting(
    "--cluster-domain", None, _text, "cluster.local",
    "how live heads are reached (`{head-svc}.{ns}.svc.{domain}:{dashboard-port}`)", group=LIVE,
)  # fmt: skip
PROXY_TIMEOUT = Setting(
    "--proxy-timeout", None, duration(), DEFAULT_PROXY_TIMEOUT,
    "seconds to wait for a proxied answer's headers (504); an answer that is not a log stream ends within twice "
    "this (the connection cut mid-body); also bounds the wait for a log stream's first answer",
    f"`{DEFAULT_PROXY_TIMEOUT:g}`", group=LIVE,
)  # fmt: skip
MAX_LIVE_STREAMS = Setting[int | None](
    "--max-live-streams", None, positive_int, None,
    "live log streams open at once per worker; beyond it 503 with `Retry-After`", "half of `--threads`", group=LIVE,
)  # fmt: skip

AUTH = Setting(
    "--auth", AUTH_ENV, _text, "none",
    "who is calling, comma-separated: `kubernetes` (bearer tokens, TokenReview); `none` only for a local server",
    group=ACCESS,
)  # fmt: skip
AUTHZ = Setting(
    "--authz", AUTHZ_ENV, _text, "",
    "which namespaces they may read: `kubernetes` (SubjectAccessReview), `static` (`--authz-policy`); "
    "`none` only with `--auth none`", "`none` with `--auth none`, else required", group=ACCESS,
)  # fmt: skip
AUTHZ_RESOURCE = Setting[str | None](
    "--authz-resource", None, _text, None,
    "what `kubernetes` authorization asks: may the caller VERB RESOURCE.GROUP in the namespace",
    "`get:rayclusters.ray.io`", group=ACCESS,
)  # fmt: skip
AUTHZ_POLICY = Setting[str | None](
    "--authz-policy", None, _text, None,
    "YAML file: `namespaces: {NS or glob: {users: [...], groups: [...]}}`, re-read on change", group=ACCESS,
)  # fmt: skip


def _opt(flag: str, meaning: str, shown: str | None = None) -> Setting[str | None]:
    """An access-control text setting with its ``HISTORYSERVER_...`` environment variable."""
    env = "HISTORYSERVER_" + flag.lstrip("-").replace("-", "_").upper()
    return Setting[str | None](flag, env, _text, None, meaning, shown, group=ACCESS)


OIDC_ISSUER = _opt("--oidc-issuer", "`--auth oidc`: the identity provider's issuer URL (discovery document under it)")
OIDC_CLIENT_ID = _opt("--oidc-client-id", "`--auth oidc`: the client id registered with the provider")
OIDC_CLIENT_SECRET_FILE = _opt(
    "--oidc-client-secret-file", "`--auth oidc`: a file holding the client secret (mount a Secret; never a value)"
)
OIDC_GROUPS_CLAIM = _opt("--oidc-groups-claim", "`--auth oidc`: the ID-token claim listing groups", "`groups`")
OIDC_REDIRECT_URL = _opt(
    "--oidc-redirect-url", "`--auth oidc`: the external callback URL, e.g. `https://HOST/oauth2/callback`"
)
OIDC_COOKIE_KEY_FILE = _opt(
    "--oidc-cookie-key-file",
    "`--auth oidc`: secrets (one per line, newest first) sealing the login cookie; every replica needs the same",
    "derived from the client secret",
)
OIDC_USERNAME_PREFIX = _opt(
    "--oidc-username-prefix",
    "`oidc`, `trusted-header`: put before the identity provider's user name before it is authorized "
    "(as kube-apiserver's flag: e.g. `oidc:`; names starting `system:` are refused either way)",
    "none",
)
OIDC_GROUPS_PREFIX = _opt(
    "--oidc-groups-prefix", "`oidc`, `trusted-header`: put before each of the identity provider's groups", "none"
)
TRUSTED_HEADER = _opt("--trusted-header", "`--auth trusted-header`: the front door, `iap` (GKE) or `alb` (AWS)")
IAP_AUDIENCE = _opt("--iap-audience", "`iap`: the expected audience (`/projects/NUMBER/global/backendServices/ID`)")
IAP_JWKS_URL = _opt("--iap-jwks-url", "`iap`: where Google's signing keys are", "Google's")
ALB_ARN = _opt("--alb-arn", "`alb`: the load balancer's ARN (the token's `signer`); the id may be `*` (name pinned)")
ALB_REGION = _opt("--alb-region", "`alb`: its region", "from `--alb-arn`")
ALB_KEY_URL = _opt("--alb-key-url", "`alb`: the public-key URL template (`{region}`, `{kid}`)", "AWS's")
TRUSTED_HEADER_GROUPS_CLAIM = _opt("--trusted-header-groups-claim", "`alb`: the claim listing groups", "none")

PROMETHEUS_URL = Setting[str | None](
    "--prometheus-url", "PROMETHEUS_URL", service_url, None,
    "Prometheus as the server reaches it; `/api/prometheus_health` and `/prometheus/api/v1/query_range` use it",
    "none (charts hidden)", group=METRICS,
)  # fmt: skip
GRAFANA_URL = Setting[str | None](
    "--grafana-url", "GRAFANA_URL", service_url, None,
    "Grafana as the server reaches it (no path), proxied to browsers at `/grafana/`: Grafana serves from that "
    "sub-path (`root_url` ending `/grafana/`, `serve_from_sub_path`)",
    "none (charts hidden)", group=METRICS,
)  # fmt: skip
GRAFANA_DASHBOARD_UIDS = Setting(
    "--grafana-dashboard-uids", "GRAFANA_DASHBOARD_UIDS", _text, DEFAULT_DASHBOARD_UIDS,
    "the provisioned dashboards, comma-separated: Ray's uids, or `KEY=UID` (`default=...`, `data=...`)",
    "Ray 2.60's eight uids", group=METRICS,
)  # fmt: skip
PROMETHEUS_DATASOURCE = Setting(
    "--prometheus-datasource", "PROMETHEUS_DATASOURCE", _text, DEFAULT_DATASOURCE,
    "the Grafana datasource name the dashboards query (`var-datasource`)", group=METRICS,
)  # fmt: skip
GRAFANA_ORG_ID = Setting("--grafana-org-id", "GRAFANA_ORG_ID", positive_int, 1, "Grafana `orgId`", group=METRICS)
GRAFANA_TOKEN_FILE = Setting[str | None](
    "--grafana-token-file", "GRAFANA_TOKEN_FILE", secret_file, None,
    "a file holding a Grafana service-account token, sent server-side only (never to browsers)", group=METRICS,
)  # fmt: skip
GRAFANA_BASIC_AUTH_FILE = Setting[str | None](
    "--grafana-basic-auth-file", "GRAFANA_BASIC_AUTH_FILE", secret_file, None,
    "a file holding `user:password` for Grafana basic auth, sent server-side only", group=METRICS,
)  # fmt: skip

# The environment is read by configure_logging (logging starts before the rest); the flag wins.
LOG_LEVEL = Setting[str | None](
    "--log-level", "LOG_LEVEL", _text, None, "`DEBUG`, `INFO`, `WARNING`", "`INFO`", group=LOGGING,
    env_fallback_elsewhere=True,
)  # fmt: skip
LOG_FORMAT = Setting[str | None](
    "--log-format", "LOG_FORMAT", choice("text", "json"), None, "`json` for one JSON object per line", "`text`",
    group=LOGGING, env_fallback_elsewhere=True,
)  # fmt: skip

SETTINGS: tuple[Setting[Any], ...] = (
    HOST, PORT, WORKERS, THREADS, DASHBOARD_DIR, CLUSTERS_LIMIT, SECURE_COOKIES, ALLOWED_HOSTS,
    CACHE_DIR, CACHE_MAX_SIZE, FRESHNESS, BUILD_TIMEOUT, BUILD_WAIT, MAX_BUILDS,
    INDEX_AHEAD, NO_INDEX_AHEAD, INDEX_AHEAD_WORKERS, INDEX_AHEAD_MAX_AGE, SHARED_INDEX, SHARED_INDEX_CONTAINER,
    LIVE_CLUSTERS, KUBERNETES, KUBECONFIG, KUBECONFIGS, CLUSTER_DOMAIN, PROXY_TIMEOUT, MAX_LIVE_STREAMS,
    AUTH, AUTHZ, AUTHZ_RESOURCE, AUTHZ_POLICY,
    OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET_FILE, OIDC_GROUPS_CLAIM, OIDC_REDIRECT_URL, OIDC_COOKIE_KEY_FILE,
    OIDC_USERNAME_PREFIX, OIDC_GROUPS_PREFIX,
    TRUSTED_HEADER, IAP_AUDIENCE, IAP_JWKS_URL, ALB_ARN, ALB_REGION, ALB_KEY_URL, TRUSTED_HEADER_GROUPS_CLAIM,
    PROMETHEUS_URL, GRAFANA_URL, GRAFANA_DASHBOARD_UIDS, PROMETHEUS_DATASOURCE, GRAFANA_ORG_ID,
    GRAFANA_TOKEN_FILE, GRAFANA_BASIC_AUTH_FILE,
    LOG_LEVEL, LOG_FORMAT,
)  # fmt: skip


def table() -> str:
    """The server's settings (storage ones aside) as a Markdown table."""
    return markdown_table(SETTINGS, env_column=False)

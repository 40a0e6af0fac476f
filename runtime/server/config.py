"""Everything the history server is configured with, as one typed value.

Built by :mod:`runtime.server.options` from flags and environment, passed to
:func:`runtime.server.app.create_app`; nothing reads the environment later.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path

from runtime.server.auth.config import AuthConfig
from runtime.server.auth.front_door_settings import FrontDoorSettings
from runtime.server.auth.oidc_settings import OidcSettings
from runtime.server.hosts import default_allowed_hosts
from runtime.storage.config import StorageConfig

DEFAULT_PORT = 8080
DEFAULT_CACHE_MAX_BYTES = 20 * 1024**3
#: How long an indexed session is trusted before its object listing is compared
#: again (late log uploads, a collector that finished after the cluster died).
DEFAULT_FRESHNESS_SECONDS = 30.0
#: Live-cluster proxy timeout (KubeRay's Go history server's); log streams are exempt.
DEFAULT_PROXY_TIMEOUT = 30.0
#: Sessions whose event objects exceed this many bytes are indexed in a child
#: process, so the server's own RSS stays small after a big build.
DEFAULT_SUBPROCESS_BUILD_BYTES = 64 * 1024**2
#: How long a request waits for an index build before it is answered 503 with the
#: build's progress (the build goes on).
DEFAULT_BUILD_WAIT = 5.0
#: Download a shared index when there is one; never write (``--shared-index``).
DEFAULT_SHARED_INDEX = "read"
#: Sessions created longer ago than this are not indexed ahead (``--index-ahead-max-age``).
DEFAULT_INDEX_AHEAD_MAX_AGE = 7 * 24 * 3600.0


#: Ray 2.60's dashboard uids (``default_uid`` of each ``DashboardConfig`` in
#: ``ray/dashboard/modules/metrics/dashboards``) under the keys its UI reads
#: (``dashboardUids.default``, ``.data``, ...; camelCase as ``rest_response`` sends them).
RAY_DASHBOARD_UIDS: dict[str, str] = {
    "rayDefaultDashboard": "default",
    "rayServeDashboard": "serve",
    "rayServeDeploymentDashboard": "serveDeployment",
    "rayServeLlmDashboard": "serveLlm",
    "rayServeLlmSglangDashboard": "serveLlmSglang",
    "rayDataDashboard": "data",
    "rayDataLlmDashboard": "dataLlm",
    "rayTrainDashboard": "train",
}
DEFAULT_DASHBOARD_UIDS = ",".join(RAY_DASHBOARD_UIDS)
DEFAULT_DATASOURCE = "Prometheus"


@dataclass(frozen=True)
class MetricsConfig:
    """Where the Dashboard's charts come from. Both URLs unset: the health probes
    answer as Ray's dashboard does without them (charts hidden)."""

    prometheus_url: str | None = None
    grafana_url: str | None = None
    dashboard_uids: dict[str, str] = field(default_factory=lambda: {k: uid for uid, k in RAY_DASHBOARD_UIDS.items()})
    datasource: str = DEFAULT_DATASOURCE
    grafana_org_id: str = "1"
    #: Sent to Grafana as ``Authorization: Bearer`` (a service-account token).
    grafana_token: str | None = field(default=None, repr=False)
    #: ``user:password`` sent to Grafana as basic auth.
    grafana_basic_auth: str | None = field(default=None, repr=False)

    @property
    def grafana_authorization(self) -> str | None:
        """The ``Authorization`` value for Grafana, or None (anonymous access)."""
        if self.grafana_token:
            return f"Bearer {self.grafana_token}"
        if self.grafana_basic_auth:
            return "Basic " + base64.b64encode(self.grafana_basic_auth.encode()).decode("ascii")
        return None


@dataclass(frozen=True)
class LiveClusterURL:
    """A live cluster given on the command line (``--live-cluster ns/name=URL``)."""

    namespace: str
    name: str
    url: str


@dataclass(frozen=True)
class ServerConfig:
    """History-server settings.

    Attributes:
        storage: where the collector's objects are (``runtime.storage``).
        cache_dir: per-session SQLite indexes; survives restarts, shared by workers.
        cache_max_bytes: soft bound on the index directory; least recently used
            indexes are deleted beyond it (the one being built is never counted out;
            0 = unbounded).
        freshness_seconds: re-list a session's objects at most this often to notice
            late uploads (0 = on every request that opens the session).
        build_timeout: upper bound for one cold index build.
        build_wait: how long a request waits for a build before a 503 with its progress.
        max_builds: builds started by requests that run at once on the cache directory
            (all gunicorn workers together); more wait, reporting the phase ``queued``.
        index_ahead: index finished sessions in the background (off unless asked for
            here; the command line turns it on unless ``--no-index-ahead``).
        index_ahead_workers: builds run ahead at once on the cache directory.
        index_ahead_max_age: sessions created longer ago (seconds) are not indexed ahead.
        subprocess_build_bytes: event bytes above which a build runs in a child process.
        live_clusters: static live clusters (outside Kubernetes or in addition to it).
        kubernetes: ``auto`` (in-cluster config when available), ``in-cluster``,
            ``kubeconfig`` (``kubeconfig`` path or the default one) or ``off``.
        cluster_domain: DNS suffix for ``{service}.{namespace}.svc.{domain}``.
        dashboard_dir: the Ray Dashboard static build (``None`` = find it in the
            installed ``ray`` package; missing = UI routes answer 404 with a hint).
        clusters_limit: stored sessions listed by ``/clusters`` (newest first).
        proxy_timeout: seconds to wait for a proxied live answer's headers; one that is not a
            log stream ends within twice this.
        secure_cookies: add ``Secure`` to the selection cookies (behind HTTPS).
        allowed_hosts: Host names answered (``name``, ``*.domain``, ``*``); IP
            literals always are (:mod:`runtime.server.hosts`).
        max_live_streams: live log streams proxied at once per worker; more are
            answered 503 (each holds a thread for as long as it runs).
        auth: who may call and what they may read (``--auth``, ``--authz``).
        oidc / front_door: the settings of ``--auth oidc`` / ``--auth trusted-header``.
        shared_index: ``off``, ``read`` (download a shared index instead of building) or
            ``write`` (also upload after a build) (:mod:`runtime.server.index.shared`).
        shared_index_container: on azureblob, the container holding the shared
            indexes (None: the history container itself).
        metrics: Prometheus / Grafana for the Dashboard's charts (:mod:`runtime.server.grafana`);
            credentials are kept out of ``repr`` and never logged.
    """

    storage: StorageConfig
    cache_dir: Path
    host: str = "0.0.0.0"  # noqa: S104 - a server in a pod listens on all interfaces
    port: int = DEFAULT_PORT
    workers: int = 1
    threads: int = 8
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES
    freshness_seconds: float = DEFAULT_FRESHNESS_SECONDS
    build_timeout: float = 900.0
    build_wait: float = DEFAULT_BUILD_WAIT
    max_builds: int = 2
    index_ahead: bool = False
    index_ahead_workers: int = 1
    index_ahead_max_age: float = DEFAULT_INDEX_AHEAD_MAX_AGE
    subprocess_build_bytes: int = DEFAULT_SUBPROCESS_BUILD_BYTES
    live_clusters: tuple[LiveClusterURL, ...] = ()
    kubernetes: str = "auto"
    kubeconfig: str | None = None
    cluster_domain: str = "cluster.local"
    dashboard_dir: Path | None = None
    clusters_limit: int = 1000
    proxy_timeout: float = DEFAULT_PROXY_TIMEOUT
    secure_cookies: bool = False
    allowed_hosts: tuple[str, ...] = default_allowed_hosts()
    max_live_streams: int | None = None  # None: half the threads (see live_stream_limit)
    auth: AuthConfig = field(default_factory=AuthConfig)
    oidc: OidcSettings | None = None
    front_door: FrontDoorSettings | None = None
    shared_index: str = DEFAULT_SHARED_INDEX
    shared_index_container: str | None = None
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def live_stream_limit(self) -> int:
        """Streams never take every thread: probes and other requests keep some."""
        if self.max_live_streams is not None:
            return self.max_live_streams
        return max(1, self.threads // 2)

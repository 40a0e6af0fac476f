"""The :class:`LiveDirectory` a configuration asks for: static ``--live-cluster``
entries, the Kubernetes API, both, or none.

Kept apart from :mod:`runtime.server.live.discovery` (the interface) and
:mod:`runtime.server.live.k8s` (which implements it), so neither imports the other
back; the kubernetes client is imported only when Kubernetes discovery is on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from runtime.server.config import ServerConfig
from runtime.server.live.discovery import (
    KUBERNETES_MODES,
    CombinedLiveDirectory,
    LiveDirectory,
    LiveDiscoveryError,
    NoLiveDirectory,
    StaticLiveDirectory,
    UnavailableLiveDirectory,
)

# The name it logged under before it moved here, so log filters keep matching.
logger = logging.getLogger("runtime.server.live.discovery")


def live_directory_from_config(config: ServerConfig, env: Mapping[str, str] | None = None) -> LiveDirectory:
    """The directory ``config`` asks for.

    ``--kubernetes=auto`` uses the in-cluster service account when
    ``KUBERNETES_SERVICE_HOST`` is set (or ``--kubeconfig`` when given), else no
    Kubernetes. An explicit ``in-cluster``/``kubeconfig`` that cannot be configured
    raises LiveDiscoveryError (the CLI turns it into a start-up error); in ``auto``
    mode the failure is logged and listings report it. An API server that is merely
    unreachable is only noticed per request (listing ``available=False``).
    """
    env = os.environ if env is None else env
    parts: list[LiveDirectory] = []
    if config.live_clusters:
        parts.append(StaticLiveDirectory(config.live_clusters))
    kube = _kubernetes_directory(config, env)
    if kube is not None:
        parts.append(kube)
    directory: LiveDirectory
    if not parts:
        directory = NoLiveDirectory()
    elif len(parts) == 1:
        directory = parts[0]
    else:
        directory = CombinedLiveDirectory(parts)
    logger.info("live clusters: %s", directory.describe())
    return directory


def kubernetes_mode(config: ServerConfig, env: Mapping[str, str]) -> str | None:
    """``in-cluster`` or ``kubeconfig`` as ``--kubernetes`` resolves here, None for no Kubernetes API."""
    mode = (config.kubernetes or "auto").strip().lower()
    if mode == "auto":
        if config.kubeconfig:
            return "kubeconfig"
        return "in-cluster" if env.get("KUBERNETES_SERVICE_HOST") else None
    return None if mode == "off" else mode


def _kubernetes_directory(config: ServerConfig, env: Mapping[str, str]) -> LiveDirectory | None:
    mode = (config.kubernetes or "auto").strip().lower()
    if mode not in KUBERNETES_MODES:
        raise LiveDiscoveryError(f"--kubernetes={config.kubernetes!r}: choose one of {', '.join(KUBERNETES_MODES)}")
    if mode == "off":
        return None
    if mode == "auto":
        if config.kubeconfig:
            mode = "kubeconfig"
        elif env.get("KUBERNETES_SERVICE_HOST"):
            mode = "in-cluster"
        else:
            return None
        auto = True
    else:
        auto = False
    from runtime.server.live.k8s import KubernetesLiveDirectory, kubernetes_api_client

    try:
        api = kubernetes_api_client(mode, config.kubeconfig)
    except LiveDiscoveryError as exc:
        if not auto:
            raise
        logger.warning("live clusters through Kubernetes are unavailable: %s", exc)
        return UnavailableLiveDirectory(str(exc))
    return KubernetesLiveDirectory(api, cluster_domain=config.cluster_domain)

"""The live RayClusters, for ``ray-history gc --live-check kubernetes``.

The server's discovery (``runtime.server.live.k8s``) pulls Flask in through
``runtime.server``, so this lists ``rayclusters.ray.io`` with the ``kubernetes``
client directly. Only ``list`` is used: what the gc job's ClusterRole grants.
Any failure is an error, never an empty set: an empty set would mean "no cluster
is live" and end every stored session.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from runtime.cli.errors import CliError

logger = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
PAGE_SIZE = 500
#: (connect, read) seconds per API call: a dead API server must not hang the job.
REQUEST_TIMEOUT = (3.05, 30.0)
FLAG = "--live-check=kubernetes"


def list_live_clusters(
    kubeconfig: str | None = None, env: Mapping[str, str] | None = None
) -> frozenset[tuple[str, str]]:
    """``(namespace, name)`` of every RayCluster in the cluster.

    In a pod (``KUBERNETES_SERVICE_HOST`` set, no ``kubeconfig``) the service
    account's credentials; otherwise ``kubeconfig`` or the default kubeconfig.
    """
    import urllib3
    from kubernetes import client as kclient
    from kubernetes import config as kconfig
    from kubernetes.client.exceptions import ApiException

    env = os.environ if env is None else env
    configuration = kclient.Configuration()
    try:
        if kubeconfig is None and env.get("KUBERNETES_SERVICE_HOST"):
            kconfig.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            kconfig.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (kconfig.ConfigException, OSError, TypeError, ValueError) as exc:
        where = f"--kubeconfig={kubeconfig}" if kubeconfig else FLAG
        raise CliError(f"{where}: cannot configure the Kubernetes client: {exc}") from None
    configuration.retries = 1
    live: set[tuple[str, str]] = set()
    with kclient.ApiClient(configuration) as api_client:
        api = kclient.CustomObjectsApi(api_client)
        token: str | None = None
        while True:
            try:
                page = api.list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, limit=PAGE_SIZE, _continue=token, _request_timeout=REQUEST_TIMEOUT
                )
            except ApiException as exc:
                raise CliError(f"{FLAG}: listing {PLURAL}.{GROUP}: {_api_problem(exc)}") from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise CliError(f"{FLAG}: the Kubernetes API at {configuration.host} is unreachable: {exc}") from None
            body = _mapping(page)
            for item in body.get("items") or []:
                metadata = _mapping(_mapping(item).get("metadata"))
                namespace, name = metadata.get("namespace"), metadata.get("name")
                if isinstance(namespace, str) and isinstance(name, str) and namespace and name:
                    live.add((namespace, name))
            token = str(_mapping(body.get("metadata")).get("continue") or "") or None
            if token is None:
                break
    logger.info("%d live RayClusters at %s", len(live), configuration.host)
    return frozenset(live)


def _api_problem(exc: Any) -> str:
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return f"answered {status} {exc.reason}: the account needs list on {PLURAL}.{GROUP}, cluster-wide"
    if status == 404:
        return "not found: is KubeRay's RayCluster CRD (ray.io/v1) installed?"
    return f"answered {status} {exc.reason}"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}

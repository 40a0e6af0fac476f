"""Checks of an existing cluster that ``pulumi up`` makes before it changes anything there.

Server-side apply adopts an existing object of the same name, so a second stack on one
cluster would silently share the first one's ClusterRole, and destroying either stack would
delete it under the other. The history server's ClusterRole therefore carries its stack's
name (:data:`STACK_ANNOTATION`), and a role of that name owned by anything else stops the
program with the setting to change.
"""

from __future__ import annotations

import logging
from typing import Any

import yaml

LOG = logging.getLogger(__name__)

#: On the ClusterRole: ``organization/project/stack`` of the stack that owns it.
STACK_ANNOTATION = "ray-history.io/stack"


class ClusterRoleTakenError(RuntimeError):
    """A ClusterRole of the configured name exists and belongs to another stack (or to no stack)."""


def cluster_role_owner(kubeconfig: str, context: str | None, name: str, *, timeout: float = 20.0) -> str | None:
    """The stack annotation of the ClusterRole ``name``: None when there is no such role,
    ``""`` when it exists without the annotation (made by hand or by another tool).

    Raises:
        Exception: whatever the Kubernetes client raises when the cluster cannot be asked.
    """
    from kubernetes import client
    from kubernetes import config as kube_config
    from kubernetes.client.exceptions import ApiException

    api = kube_config.new_client_from_config_dict(  # type: ignore[no-untyped-call]
        yaml.safe_load(kubeconfig), context=context or None
    )
    try:
        role: Any = client.RbacAuthorizationV1Api(api).read_cluster_role(name, _request_timeout=timeout)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    finally:
        api.close()
    annotations = role.metadata.annotations or {}
    return str(annotations.get(STACK_ANNOTATION, ""))


def check_cluster_role_free(kubeconfig: str, context: str | None, name: str, stack: str, setting: str) -> None:
    """Fail when ``name`` is another stack's ClusterRole; warn (and go on) when the cluster cannot be asked.

    Raises:
        ClusterRoleTakenError: naming the owner and ``setting``, the key that picks another name.
    """
    try:
        owner = cluster_role_owner(kubeconfig, context, name)
    except Exception as error:  # advisory: the Kubernetes provider itself reports an unreachable cluster
        LOG.warning("could not check whether ClusterRole %s already exists: %s", name, type(error).__name__)
        return
    if owner is None or owner == stack:
        return
    who = f"stack {owner}" if owner else "no ray-history stack (it has no ray-history.io/stack annotation)"
    raise ClusterRoleTakenError(
        f"ClusterRole {name} already exists in the cluster and belongs to {who}: two stacks sharing it would "
        f"delete it under each other; set {setting} to another name (e.g. {name}-{stack.rsplit('/', 1)[-1]})"
    )

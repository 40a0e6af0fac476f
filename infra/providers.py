"""Explicit providers built from stack configuration (Pulumi.yaml disables the defaults).

One provider per package: the cloud's (``gcp``, ``aws``, ``azure-native``), the
``kubernetes`` one for the target cluster, and ``docker-build`` when images are built.
Nothing falls back to ambient settings such as ``~/.kube/config``'s current context.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pulumi
import pulumi_kubernetes as k8s

from infra.config import ConfigError, StackConfig


def cloud_provider(config: StackConfig) -> pulumi.ProviderResource | None:
    """The explicit provider of the stack's cloud (None on kind)."""
    if config.gcp is not None:
        import pulumi_gcp as gcp

        return cast(pulumi.ProviderResource, gcp.Provider("gcp", project=config.gcp.project, region=config.gcp.region))
    if config.aws is not None:
        import pulumi_aws as aws

        return cast(pulumi.ProviderResource, aws.Provider("aws", region=config.aws.region))
    if config.azure is not None:
        import pulumi_azure_native as azure_native

        provider = azure_native.Provider(
            "azure-native", location=config.azure.location, subscription_id=config.azure.subscription_id or None
        )
        return cast(pulumi.ProviderResource, provider)
    return None


def read_kubeconfig(value: str) -> str:
    """The kubeconfig content: ``value`` itself, or the file it names (``~`` expanded).

    Content is recognised by its YAML/JSON shape (several lines, or ``apiVersion``);
    anything else must be a readable file.
    """
    text = value.strip()
    if "\n" in text or text.startswith(("apiVersion", "{")):
        return value
    path = Path(text).expanduser()
    try:
        return path.read_text()
    except OSError as error:
        raise ConfigError(
            f"ray-history-server:kubeconfig: cannot read {str(path)!r} ({error.strerror}); "
            "set a readable path or the kubeconfig content"
        ) from None


def existing_cluster_kubeconfig(config: StackConfig) -> pulumi.Output[str]:
    """The kubeconfig of an existing cluster: from config, or from another stack's output."""
    if config.cluster_stack is not None:
        logical_name = f"cluster-{config.cluster_stack.name.replace('/', '-')}"
        reference = pulumi.StackReference(logical_name, config.cluster_stack.name)
        output = reference.require_output(config.cluster_stack.kubeconfig_output)
        return pulumi.Output.secret(output.apply(str))
    if not config.kubeconfig:
        raise ConfigError("ray-history-server:kubeconfig or ray-history-server:clusterStack is required")
    return pulumi.Output.secret(read_kubeconfig(config.kubeconfig))


def cluster_identity(config: StackConfig) -> str:
    """A stable name for the target cluster.

    Given to the Kubernetes provider as ``cluster_identifier``: only a change of this
    value replaces the provider (and so every object in the cluster); a rotated token or
    a kubeconfig read from another path is an in-place update.
    """
    if config.cluster_stack is not None:
        return f"stack:{config.cluster_stack.name}"
    if config.create_cluster:
        return f"{config.cloud}:{config.cluster.name}"
    return f"{config.cloud}:{config.kube_context or 'current-context'}"


def kubernetes_provider(config: StackConfig, kubeconfig: pulumi.Input[str]) -> k8s.Provider:
    """The one Kubernetes provider every Kubernetes resource of the stack uses."""
    return k8s.Provider(
        "kubernetes",
        kubeconfig=kubeconfig,
        context=config.kube_context or None,
        cluster_identifier=cluster_identity(config),
    )

"""Stack outputs built from component outputs (the ready ``historyServerOptions`` block)."""

from __future__ import annotations

from typing import Any

import pulumi

from infra.sidecar import CollectorSettings, history_server_options
from ray_history_pulumi.contracts import ServiceAccountRef, StorageWiring


def collector_options_output(
    wiring: StorageWiring, collector_image: pulumi.Input[str], pull_policy: str, writer: ServiceAccountRef
) -> pulumi.Output[dict[str, Any]]:
    """``spec.historyServerOptions`` for RayClusters / RayJobs / RayServices on KubeRay >= 1.7.

    Built by :func:`infra.sidecar.history_server_options` from the storage env, the
    collector image and the writer identity's env (the same for every writer account:
    one role / identity per stack), once those are known.
    """
    identity = wiring.writers.get(f"{writer.namespace}/{writer.name}")
    identity_env: pulumi.Input[dict[str, str]] = identity.env if identity is not None else {}

    def build(parts: list[Any]) -> dict[str, Any]:
        storage_env, image, extra_env = parts
        settings = CollectorSettings(
            image=image,
            storage_env=dict(storage_env),
            secret_env=dict(wiring.secret_env),
            identity_env=dict(extra_env or {}),
            image_pull_policy=pull_policy,
        )
        block: dict[str, Any] = history_server_options(settings)
        return block

    return pulumi.Output.all(
        pulumi.Output.from_input(wiring.env), pulumi.Output.from_input(collector_image), identity_env
    ).apply(build)

"""What a Ray 2.60 node needs in its environment to export events to a collector
(the ``RAY_enable_ray_event`` family, as KubeRay sets it): one source for the
quickstart, the Pulumi sidecar helper and the test harness."""

from __future__ import annotations

#: The types KubeRay's operator exposes, plus the profile events and worker deaths
#: (the GCS fails the tasks of a dead worker without a task event:
#: runtime.server.replay.task_failures).
EXPOSED_EVENT_TYPES = ",".join(
    [
        "TASK_DEFINITION_EVENT",
        "TASK_LIFECYCLE_EVENT",
        "ACTOR_TASK_DEFINITION_EVENT",
        "TASK_PROFILE_EVENT",
        "DRIVER_JOB_DEFINITION_EVENT",
        "DRIVER_JOB_LIFECYCLE_EVENT",
        "ACTOR_DEFINITION_EVENT",
        "ACTOR_LIFECYCLE_EVENT",
        "NODE_DEFINITION_EVENT",
        "NODE_LIFECYCLE_EVENT",
        "WORKER_LIFECYCLE_EVENT",
    ]
)


#: Ray 2.60 reads the first name; older Ray releases and the GKE guide use the second.
EVENT_TYPES_VARS = (
    "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES",
    "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES",
)


def event_export_env(export_url: str) -> dict[str, str]:
    """What KubeRay puts in the Ray container. Ray 2.60 reads only the first name
    of the type filter; KubeRay sets both, so we do too."""
    return {
        "RAY_enable_ray_event": "true",
        "RAY_enable_core_worker_ray_event_to_aggregator": "true",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": export_url,
        **dict.fromkeys(EVENT_TYPES_VARS, EXPOSED_EVENT_TYPES),
    }

"""What a Ray 2.60 head needs in its environment to export events to a collector.

The single source of truth for the exposed event types: the test harness
(``tests/integration/ray_harness.py``) keeps its own copy today and could import
this one.
"""

from __future__ import annotations

#: The types KubeRay's operator exposes, plus the profile events.
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
    ]
)


def event_export_env(export_url: str) -> dict[str, str]:
    """What KubeRay puts in the Ray container. Ray 2.60 reads only the first name
    of the type filter; KubeRay sets both, so we do too."""
    return {
        "RAY_enable_ray_event": "true",
        "RAY_enable_core_worker_ray_event_to_aggregator": "true",
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": export_url,
        "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES": EXPOSED_EVENT_TYPES,
        "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES": EXPOSED_EVENT_TYPES,
    }

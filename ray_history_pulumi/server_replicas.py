"""More than one history server pod: spread over nodes and zones, and a PodDisruptionBudget.

Split from :mod:`ray_history_pulumi.history_server` (the workload). Each pod keeps its own
index cache (an ``emptyDir`` or a generic ephemeral volume, both made per pod), so a
replica answers a session's first request by building its index (or has built it ahead)
until indexes are shared through the bucket.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

#: Node and zone labels set by every managed Kubernetes (well-known labels).
SPREAD_TOPOLOGY_KEYS = ("kubernetes.io/hostname", "topology.kubernetes.io/zone")


def pod_spreading(replicas: int, labels: dict[str, str]) -> dict[str, Any]:
    """The pod spec's ``topologySpreadConstraints``: preferred (``ScheduleAnyway``) spreading
    of the server's pods over nodes, then zones.

    Preferred, not required: a one-node cluster (kind) or a cluster at its node limit still
    schedules every replica. ``pod-template-hash`` in ``matchLabelKeys`` counts only the pods
    of the same ReplicaSet, so a rolling update's old pods do not skew the new ones.
    One pod has nothing to spread: no field then.
    """
    if replicas < 2:
        return {}
    constraints = [
        {
            "max_skew": 1,
            "topology_key": key,
            "when_unsatisfiable": "ScheduleAnyway",
            "label_selector": {"match_labels": labels},
            "match_label_keys": ["pod-template-hash"],
        }
        for key in SPREAD_TOPOLOGY_KEYS
    ]
    return {"topology_spread_constraints": constraints}


def disruption_budget(
    name: str, replicas: int, *, namespace: str, labels: dict[str, str], opts: pulumi.ResourceOptions
) -> k8s.policy.v1.PodDisruptionBudget | None:
    """With two replicas or more, a PodDisruptionBudget letting voluntary disruptions (node
    drains, cluster upgrades) evict one server pod at a time, so the others keep answering.

    None for one replica: ``maxUnavailable: 1`` would allow evicting the only pod anyway,
    and ``minAvailable: 1`` would block every node drain.
    """
    if replicas < 2:
        return None
    return k8s.policy.v1.PodDisruptionBudget(
        f"{name}-pdb",
        metadata={"name": "historyserver", "namespace": namespace, "labels": labels},
        spec={"max_unavailable": 1, "selector": {"match_labels": labels}},
        opts=opts,
    )

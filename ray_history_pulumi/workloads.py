"""Service accounts Ray pods run as, so their collector sidecars can write history.

One account per namespace a platform team lists; each carries the cloud identity
the storage component bound for ``namespace/name`` (``StorageWiring.writers``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from ray_history_pulumi.contracts import IdentityWiring, StorageWiring

DEFAULT_WRITER_ACCOUNT = "ray-history-collector"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass
class RayWorkloadAccountsArgs:
    """Arguments of :class:`RayWorkloadAccounts`.

    Attributes:
        namespaces: where Ray clusters run (each gets the account).
        wiring: the storage component's wiring (``writers`` keyed ``namespace/name``).
        account_name: the ServiceAccount name Ray pod templates must use.
        create_namespaces: create the namespaces (False: they exist).
    """

    namespaces: list[str]
    wiring: StorageWiring
    account_name: str = DEFAULT_WRITER_ACCOUNT
    create_namespaces: bool = False
    labels: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if not self.namespaces:
            raise ValueError("namespaces: list at least one namespace Ray clusters run in")
        for ns in self.namespaces:
            if not isinstance(ns, str) or not _DNS_LABEL.fullmatch(ns):
                raise ValueError(f"namespaces: {ns!r} is not a valid namespace name (DNS-1123 label)")
        duplicates = sorted({ns for ns in self.namespaces if self.namespaces.count(ns) > 1})
        if duplicates:
            raise ValueError(f"namespaces: {duplicates} listed twice")
        if not _DNS_SUBDOMAIN.fullmatch(self.account_name):
            raise ValueError(f"account_name: {self.account_name!r} is not a valid ServiceAccount name")
        if not self.wiring.secret_env:  # workload identity: every account needs its binding
            missing = [key for key in self.keys() if key not in self.wiring.writers]
            if missing:
                raise ValueError(
                    f"wiring.writers: no identity for {missing}; give the storage component the same "
                    "namespaces and account name"
                )

    def keys(self) -> list[str]:
        return [f"{ns}/{self.account_name}" for ns in self.namespaces]

    def identity(self, namespace: str) -> IdentityWiring:
        return self.wiring.writers.get(f"{namespace}/{self.account_name}", IdentityWiring())


class RayWorkloadAccounts(pulumi.ComponentResource):
    """The writer ServiceAccount (default ``ray-history-collector``) in each listed
    namespace, annotated with its cloud identity. Ray pod templates use it through
    :func:`infra.sidecar.add_collector_sidecar` (``service_account_name=`` and
    ``pod_labels=`` from :attr:`pod_labels`).

    Example::

        accounts = RayWorkloadAccounts(
            "ray-writers",
            RayWorkloadAccountsArgs(namespaces=["team-a", "team-b"], wiring=storage.wiring,
                                    create_namespaces=True),
            opts=pulumi.ResourceOptions(provider=k8s_provider),
        )
        pulumi.export("rayServiceAccount", accounts.account_name)
    """

    account_name: str
    pod_labels: dict[str, dict[str, str]]
    accounts: dict[str, k8s.core.v1.ServiceAccount]

    def __init__(self, name: str, args: RayWorkloadAccountsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:k8s:RayWorkloadAccounts", name, None, opts)
        args.validate()
        labels = {"app.kubernetes.io/part-of": "ray-history", "app.kubernetes.io/component": "collector", **args.labels}
        self.account_name = args.account_name
        self.pod_labels = {}
        self.accounts = {}
        for ns in args.namespaces:
            identity = args.identity(ns)
            depends: list[pulumi.Resource] = []
            if args.create_namespaces:
                depends.append(
                    k8s.core.v1.Namespace(
                        f"{name}-{ns}-ns",
                        metadata={"name": ns, "labels": labels},
                        opts=pulumi.ResourceOptions(parent=self),
                    )
                )
            self.accounts[ns] = k8s.core.v1.ServiceAccount(
                f"{name}-{ns}-sa",
                metadata={
                    "name": args.account_name,
                    "namespace": ns,
                    # Older Azure webhooks read the label on the account, newer ones on the pod.
                    "labels": {**labels, **identity.pod_labels},
                    "annotations": identity.service_account_annotations,
                },
                # Ray pods using the account are admitted only after its credentials work.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends, *identity.ready]),
            )
            self.pod_labels[ns] = dict(identity.pod_labels)
        self.register_outputs({"accountName": self.account_name, "namespaces": list(self.accounts)})

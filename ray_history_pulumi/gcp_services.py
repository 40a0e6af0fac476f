"""The Google Cloud APIs a stack needs, enabled on the project before anything uses them.

A fresh project has none of them on: the first bucket, repository or cluster would fail
with ``SERVICE_DISABLED``. They stay enabled on ``pulumi destroy``
(``disable_on_destroy=False``): other workloads of the project may use them too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi

#: What the stack calls: GKE, Artifact Registry, Cloud Storage, IAM (grants, node service
#: account), IAM Credentials (Workload Identity token exchange) and Cloud Resource Manager:
#: ``getProject`` (the project number of ``principal://`` members) and project-level IAM
#: grants are its methods (https://cloud.google.com/iam/docs/write-policy-client-libraries),
#: and a new project does not have it on
#: (https://cloud.google.com/service-usage/docs/enabled-service#default).
REQUIRED_SERVICES = (
    "container.googleapis.com",
    "artifactregistry.googleapis.com",
    "storage.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "cloudresourcemanager.googleapis.com",
)


def lookup_options(
    parent: pulumi.Resource | None,
    opts: pulumi.ResourceOptions | None = None,
    *,
    provider: pulumi.ProviderResource | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
) -> pulumi.InvokeOutputOptions:
    """Options of a Google Cloud lookup (``get_project_output``) made by a component: it waits for
    everything ``opts`` (the component's own options) and ``depends_on`` wait for.

    A resource inside a component waits for the component's ``depends_on`` (it needs the
    parent's URN, registered only after them); an invoke does not, so without this a lookup
    reaches Cloud Resource Manager while the stack is still enabling it on a new project.
    """
    given = pulumi.InvokeOutputOptions(depends_on=opts.depends_on if opts is not None else None)
    # merge() concatenates the two depends_on (a list, one resource or an Output of them).
    return pulumi.InvokeOutputOptions.merge(
        given, pulumi.InvokeOutputOptions(parent=parent, provider=provider, depends_on=list(depends_on))
    )


@dataclass
class GcpProjectServicesArgs:
    """Settings of :class:`GcpProjectServices`.

    Attributes:
        project: the project id.
        services: API names to enable.
    """

    project: str
    services: Sequence[str] = field(default_factory=lambda: REQUIRED_SERVICES)

    def __post_init__(self) -> None:
        if not self.project:
            raise ValueError("GcpProjectServicesArgs.project: a Google Cloud project id is required")
        bad = [name for name in self.services if not name.endswith(".googleapis.com")]
        if bad:
            raise ValueError(f"GcpProjectServicesArgs.services: {bad} are not API names like storage.googleapis.com")


class GcpProjectServices(pulumi.ComponentResource):
    """One ``gcp.projects.Service`` per API. Pass the component to ``depends_on`` of every
    Google Cloud component of the stack.

    Example::

        apis = GcpProjectServices("apis", GcpProjectServicesArgs(project="my-proj"),
                                  opts=pulumi.ResourceOptions(providers=[gcp_provider]))
        GcsHistoryStorage("history", ..., opts=pulumi.ResourceOptions(depends_on=[apis]))
    """

    def __init__(self, name: str, args: GcpProjectServicesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        import pulumi_gcp as gcp

        super().__init__("rayhistory:gcp:ProjectServices", name, None, opts)
        self.services = [
            gcp.projects.Service(
                f"{name}-{service.split('.', 1)[0]}",
                project=args.project,
                service=service,
                disable_on_destroy=False,
                disable_dependent_services=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for service in args.services
        ]
        self.register_outputs({"services": [s.service for s in self.services]})

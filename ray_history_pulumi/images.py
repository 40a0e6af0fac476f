"""Collector and history-server images: built with BuildKit and pushed to a registry the program
creates (Artifact Registry, ECR or ACR), pushed to an existing registry, or taken prebuilt.

Build context is the repository root; Dockerfiles are ``images/<name>/Dockerfile``. Outputs are
digest-pinned references (``registry/repo/collector:tag@sha256:...``) so a rebuild rolls pods.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pulumi
import pulumi_docker_build as docker_build

from ray_history_pulumi import acr_token

#: The checkout this package sits in (``ray_history_pulumi/`` is at its root). Installed from
#: the wheel there is no checkout: pass ``context`` (the directory holding ``images/``).
REPOSITORY_ROOT = str(Path(__file__).resolve().parents[1])
IMAGE_NAMES = ("collector", "server")
ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"  # built-in AcrPull role
ACR_PUSH = "8311e382-0749-4cb8-b61a-304f252e45ec"  # built-in AcrPush role
RegistryKind = Literal["gcp", "aws", "azure", "none"]
#: Artifact Registry repository ids: lower-case letters, digits and hyphens, a letter first, a
#: letter or digit last, at most 63 characters
#: (https://cloud.google.com/artifact-registry/docs/repositories/create-repos).
ARTIFACT_REGISTRY_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass
class HistoryImagesArgs:
    """Settings of :class:`HistoryImages`.

    Attributes:
        registry: where built images go: ``gcp`` (Artifact Registry), ``aws`` (ECR), ``azure``
            (ACR), ``none`` (``existing_registry`` or prebuilt references only).
        collector_image / server_image: prebuilt references; giving both skips the build.
        tag: tag of built images.
        repository_name: Artifact Registry repository id (:data:`ARTIFACT_REGISTRY_ID`: no '/',
            '.' or '_') / ECR repository prefix / ACR repository path. None =
            ``ray-history-<stack>`` (Artifact Registry, one per project) or ``ray-history/<stack>``
            (ECR, one per account and region), so two stacks never share, and one
            ``pulumi destroy`` never deletes, the other's repository.
        gcp_project / gcp_location: Artifact Registry project and region (``registry="gcp"``).
        gcp_reader_members: IAM members allowed to pull (e.g. the GKE node service account).
        azure_resource_group_name / azure_registry_name / azure_location: the ACR (``registry="azure"``).
        azure_pull_principal_id: principal that gets AcrPull (``AksCluster.kubelet_object_id``);
            required with ``registry="azure"``: without it no node can pull the images.
        existing_registry: registry host/path to push to when ``registry="none"`` (e.g. ``localhost:5001``).
        context / platforms / build_on_preview: build settings.
    """

    registry: RegistryKind = "none"
    collector_image: str | None = None
    server_image: str | None = None
    tag: str = "latest"
    repository_name: str | None = None
    gcp_project: str | None = None
    gcp_location: str | None = None
    gcp_reader_members: Sequence[pulumi.Input[str]] = ()
    azure_resource_group_name: pulumi.Input[str] | None = None
    azure_registry_name: str | None = None
    azure_location: pulumi.Input[str] | None = None
    azure_pull_principal_id: pulumi.Input[str] | None = None
    existing_registry: str | None = None
    context: str = REPOSITORY_ROOT
    platforms: Sequence[str] = ("linux/amd64",)
    build_on_preview: bool = False

    def __post_init__(self) -> None:
        if self.registry not in ("gcp", "aws", "azure", "none"):
            raise ValueError(f"HistoryImagesArgs.registry={self.registry!r}: must be gcp, aws, azure or none")
        if (self.collector_image is None) != (self.server_image is None):
            raise ValueError("HistoryImagesArgs.collector_image and .server_image must be given together (or neither)")
        if self.prebuilt:
            return
        if self.registry == "gcp" and not (self.gcp_project and self.gcp_location):
            raise ValueError("HistoryImagesArgs.gcp_project and .gcp_location are required for registry='gcp'")
        # The id is checked here: Artifact Registry would only reject it during `pulumi up`.
        if self.registry == "gcp" and self.repository_name and not ARTIFACT_REGISTRY_ID.match(self.repository_name):
            raise ValueError(
                f"HistoryImagesArgs.repository_name={self.repository_name!r}: an Artifact Registry repository id is "
                "lower-case letters, digits and '-', starting with a letter, ending with a letter or digit, at most "
                "63 characters"
            )
        if self.registry == "azure" and not (self.azure_resource_group_name and self.azure_registry_name):
            raise ValueError(
                "HistoryImagesArgs.azure_resource_group_name and .azure_registry_name are required for registry='azure'"
            )
        if self.registry == "azure" and self.azure_pull_principal_id is None:
            raise ValueError(
                "HistoryImagesArgs.azure_pull_principal_id is required for registry='azure': the AKS kubelet "
                "identity must get AcrPull, or every pod pulling these images ends in ImagePullBackOff"
            )
        if self.registry == "none" and not self.existing_registry:
            raise ValueError(
                "HistoryImagesArgs.existing_registry is required to build with registry='none' "
                "(or give collector_image and server_image)"
            )
        for name in IMAGE_NAMES:
            if not (Path(self.context) / "images" / name / "Dockerfile").is_file():
                pulumi.log.warn(f"HistoryImagesArgs.context: images/{name}/Dockerfile not found under {self.context}")

    @property
    def prebuilt(self) -> bool:
        """True when both references are given: nothing is built."""
        return self.collector_image is not None and self.server_image is not None

    def repository(self, stack: str) -> str:
        """The repository id / prefix: the configured one or a stack-scoped default."""
        if self.repository_name:
            return self.repository_name
        scoped = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-") or "default"
        return f"ray-history/{scoped}" if self.registry == "aws" else f"ray-history-{scoped}"[:63].rstrip("-")


class HistoryImages(pulumi.ComponentResource):
    """The collector and server images, built and pushed, or prebuilt references passed through.

    Example::

        images = HistoryImages(
            "images",
            HistoryImagesArgs(registry="gcp", gcp_project="my-proj", gcp_location="us-central1", tag="0.1.0"),
            opts=pulumi.ResourceOptions(providers=[gcp_provider]),
        )
        prebuilt = HistoryImages(
            "images", HistoryImagesArgs(collector_image="ghcr.io/me/collector:1", server_image="ghcr.io/me/server:1")
        )
        images.collector_image, images.server_image  # Output[str], digest-pinned when built

    Attributes:
        collector_image / server_image: references to deploy.
        registry_address: host (and path) images are pushed to ("" for prebuilt).
        images: the ``docker_build.Image`` resources by name (empty for prebuilt).
    """

    def __init__(self, name: str, args: HistoryImagesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:images:HistoryImages", name, None, opts)
        self.images: dict[str, docker_build.Image] = {}
        #: The AcrPull grant of the kubelet identity (``registry="azure"``): pods wait for it.
        self.pull_access: pulumi.Resource | None = None
        if args.prebuilt:
            self.collector_image: pulumi.Output[str] = pulumi.Output.from_input(str(args.collector_image))
            self.server_image: pulumi.Output[str] = pulumi.Output.from_input(str(args.server_image))
            self.registry_address: pulumi.Output[str] = pulumi.Output.from_input("")
        else:
            repos, auth = self._registry(name, args)
            for image in IMAGE_NAMES:
                tag = pulumi.Output.concat(repos[image], ":", args.tag)
                self.images[image] = docker_build.Image(
                    f"{name}-{image}",
                    tags=[tag],
                    context=docker_build.BuildContextArgs(location=args.context),
                    dockerfile=docker_build.DockerfileArgs(location=f"{args.context}/images/{image}/Dockerfile"),
                    platforms=[docker_build.Platform(p) for p in args.platforms],
                    push=True,
                    registries=auth,
                    build_on_preview=args.build_on_preview,
                    opts=pulumi.ResourceOptions(parent=self),
                )
            self.collector_image = self.images["collector"].ref
            self.server_image = self.images["server"].ref
        self.register_outputs({"collector_image": self.collector_image, "server_image": self.server_image})

    def _registry(
        self, name: str, args: HistoryImagesArgs
    ) -> tuple[dict[str, pulumi.Output[str]], list[docker_build.RegistryArgs]]:
        """Create the registry; return the repository path per image and push credentials."""
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOutputOptions(parent=self)
        repository = args.repository(pulumi.get_stack())
        if args.registry == "gcp":
            import pulumi_gcp as gcp

            repo = gcp.artifactregistry.Repository(
                f"{name}-repository",
                repository_id=repository,
                project=args.gcp_project,
                location=args.gcp_location,
                format="DOCKER",
                opts=child,
            )
            for i, member in enumerate(args.gcp_reader_members):
                gcp.artifactregistry.RepositoryIamMember(
                    f"{name}-reader-{i}",
                    project=args.gcp_project,
                    location=args.gcp_location,
                    repository=repo.repository_id,
                    role="roles/artifactregistry.reader",
                    member=member,
                    opts=child,
                )
            self.registry_address = repo.registry_uri
            token = pulumi.Output.secret(gcp.organizations.get_client_config_output(opts=invoke).access_token)
            auth = docker_build.RegistryArgs(
                address=f"{args.gcp_location}-docker.pkg.dev", username="oauth2accesstoken", password=token
            )
            return {i: pulumi.Output.concat(repo.registry_uri, "/", i) for i in IMAGE_NAMES}, [auth]
        if args.registry == "aws":
            import pulumi_aws as aws

            ecr = {
                i: aws.ecr.Repository(
                    f"{name}-{i}-repository",
                    name=f"{repository}/{i}",
                    image_scanning_configuration={"scan_on_push": True},
                    force_delete=True,
                    opts=child,
                )
                for i in IMAGE_NAMES
            }
            token = aws.ecr.get_authorization_token_output(registry_id=ecr["collector"].registry_id, opts=invoke)
            self.registry_address = token.proxy_endpoint.apply(lambda e: e.removeprefix("https://"))
            auth = docker_build.RegistryArgs(
                address=self.registry_address, username=token.user_name, password=pulumi.Output.secret(token.password)
            )
            return {i: r.repository_url for i, r in ecr.items()}, [auth]
        if args.registry == "azure":
            import pulumi_azure_native as azure

            acr = azure.containerregistry.Registry(
                f"{name}-registry",
                registry_name=args.azure_registry_name,
                resource_group_name=args.azure_resource_group_name,
                location=args.azure_location,
                sku=azure.containerregistry.SkuArgs(name=azure.containerregistry.SkuName.BASIC),
                # No shared password: nodes pull with their kubelet identity, pushes use Entra tokens.
                admin_user_enabled=False,
                opts=child,
            )
            client = azure.authorization.get_client_config_output(opts=invoke)
            role_id = client.subscription_id.apply
            self.pull_access = azure.authorization.RoleAssignment(
                f"{name}-acr-pull",
                principal_id=args.azure_pull_principal_id,
                principal_type=azure.authorization.PrincipalType.SERVICE_PRINCIPAL,
                role_definition_id=role_id(lambda sub: _role_definition(sub, ACR_PULL)),
                scope=acr.id,
                opts=child,
            )
            # The identity running `pulumi up` pushes with its own Entra token: it needs AcrPush.
            push_access = azure.authorization.RoleAssignment(
                f"{name}-acr-push",
                principal_id=client.object_id,
                role_definition_id=role_id(lambda sub: _role_definition(sub, ACR_PUSH)),
                scope=acr.id,
                opts=child,
            )
            arm_token = pulumi.Output.secret(azure.authorization.get_client_token_output(opts=invoke).token)
            exchanged: pulumi.Output[str] = pulumi.Output.all(
                acr.login_server, client.tenant_id, arm_token, push_access.id
            ).apply(lambda a: acr_token.exchange_acr_refresh_token(a[0], a[1], a[2]))
            password: pulumi.Output[str] = pulumi.Output.secret(exchanged)
            self.registry_address = acr.login_server
            auth = docker_build.RegistryArgs(
                address=acr.login_server, username=acr_token.ACR_TOKEN_USER, password=password
            )
            return {i: pulumi.Output.concat(acr.login_server, "/", repository, "/", i) for i in IMAGE_NAMES}, [auth]
        registry = str(args.existing_registry).rstrip("/")
        self.registry_address = pulumi.Output.from_input(registry)
        path = args.repository_name or "ray-history"  # a registry of the user's: the path they know
        return {i: pulumi.Output.from_input(f"{registry}/{path}/{i}") for i in IMAGE_NAMES}, []


def _role_definition(subscription_id: str, role_guid: str) -> str:
    return f"/subscriptions/{subscription_id}/providers/Microsoft.Authorization/roleDefinitions/{role_guid}"

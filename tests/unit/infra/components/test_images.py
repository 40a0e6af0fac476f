"""HistoryImages under Pulumi mocks: registries per cloud, fully qualified tags, push auth, prebuilt refs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_azure_native as azure
import pulumi_gcp as gcp
import pytest

from ray_history_pulumi.images import REPOSITORY_ROOT, HistoryImages, HistoryImagesArgs
from tests.unit.infra.conftest import EXCHANGES, MOCK_ACR_REFRESH_TOKEN
from tests.unit.infra.mocks import (
    AWS_ACCOUNT,
    AWS_REGION,
    AZURE_SUBSCRIPTION,
    AZURE_TENANT,
    RecordingMocks,
    _default_calls,
    is_secret,
    settled,
)


@pytest.fixture
def mocks() -> RecordingMocks:
    return RecordingMocks.install()


def _refs(images: HistoryImages) -> pulumi.Output[list[str]]:
    return pulumi.Output.all(images.collector_image, images.server_image)


def _builds(mocks: RecordingMocks) -> dict[str, dict[str, Any]]:
    return {r.name.rsplit("-", 1)[1]: r.inputs for r in mocks.of_type("docker-build:index:Image")}


def test_the_default_build_context_is_this_checkout() -> None:
    """The components moved once (infra/components -> ray_history_pulumi) and the root silently
    became the checkout's parent: the context must hold the Dockerfiles the build names."""
    checkout = Path(__file__).resolve().parents[4]
    assert Path(REPOSITORY_ROOT) == checkout
    for image in ("collector", "server"):
        assert (Path(REPOSITORY_ROOT) / "images" / image / "Dockerfile").is_file()


def _assert_build_inputs(build: dict[str, Any], image: str) -> None:
    assert build["context"] == {"location": REPOSITORY_ROOT}
    assert build["dockerfile"] == {"location": f"{REPOSITORY_ROOT}/images/{image}/Dockerfile"}
    assert build["push"] is True
    assert build["platforms"] == ["linux/amd64"]


@settled
def test_gcp_artifact_registry(mocks: RecordingMocks) -> pulumi.Output[None]:
    provider = gcp.Provider("gcp-explicit", project="demo-proj")
    images = HistoryImages(
        "img",
        HistoryImagesArgs(
            registry="gcp",
            gcp_project="demo-proj",
            gcp_location="europe-west1",
            tag="0.1.0",
            gcp_reader_members=["serviceAccount:nodes@demo-proj.iam.gserviceaccount.com"],
        ),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )

    def check(refs: list[str]) -> None:
        repo = mocks.one("gcp:artifactregistry/repository:Repository").inputs
        # Stack-scoped (the mocks' stack is "test"): two stacks in one project never share it.
        assert (repo["format"], repo["location"], repo["repositoryId"]) == (
            "DOCKER",
            "europe-west1",
            "ray-history-test",
        )
        builds = _builds(mocks)
        for image, ref in zip(("collector", "server"), refs, strict=True):
            _assert_build_inputs(builds[image], image)
            assert builds[image]["tags"] == [f"europe-west1-docker.pkg.dev/demo-proj/ray-history-test/{image}:0.1.0"]
            assert builds[image]["registries"] == [
                {
                    "address": "europe-west1-docker.pkg.dev",
                    "username": "oauth2accesstoken",
                    "password": "ya29.mock-token",
                }
            ]
            assert re.fullmatch(
                rf"europe-west1-docker\.pkg\.dev/demo-proj/ray-history-test/{image}:0\.1\.0@sha256:[0-9a-f]{{64}}", ref
            )
        reader = mocks.one("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember").inputs
        assert reader["role"] == "roles/artifactregistry.reader"
        mocks.assert_all_use_provider("gcp", "gcp-explicit")

    return _refs(images).apply(check)


@settled
def test_aws_ecr(mocks: RecordingMocks) -> pulumi.Output[None]:
    provider = aws.Provider("aws-explicit", region=AWS_REGION)
    images = HistoryImages("img", HistoryImagesArgs(registry="aws"), opts=pulumi.ResourceOptions(providers=[provider]))
    host = f"{AWS_ACCOUNT}.dkr.ecr.{AWS_REGION}.amazonaws.com"

    def check(refs: list[str]) -> None:
        names = sorted(r.inputs["name"] for r in mocks.of_type("aws:ecr/repository:Repository"))
        assert names == ["ray-history/test/collector", "ray-history/test/server"]
        builds = _builds(mocks)
        for image, ref in zip(("collector", "server"), refs, strict=True):
            _assert_build_inputs(builds[image], image)
            assert builds[image]["tags"] == [f"{host}/ray-history/test/{image}:latest"]
            assert builds[image]["registries"] == [
                {"address": host, "username": "AWS", "password": "ecr-mock-password"}
            ]
            assert ref.startswith(f"{host}/ray-history/test/{image}:latest@sha256:")
        mocks.assert_all_use_provider("aws", "aws-explicit")

    return _refs(images).apply(check)


@settled
def test_azure_acr_with_pull_grant(mocks: RecordingMocks) -> pulumi.Output[None]:
    provider = azure.Provider("azure-explicit", location="westeurope")
    images = HistoryImages(
        "img",
        HistoryImagesArgs(
            registry="azure",
            azure_resource_group_name="rg",
            azure_registry_name="rayhistoryacr",
            azure_pull_principal_id="kubelet-object-id",
        ),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )

    def check(refs: list[str]) -> None:
        registry = mocks.one("azure-native:containerregistry:Registry").inputs
        assert registry["adminUserEnabled"] is False
        assert registry["sku"] == {"name": "Basic"}
        builds = _builds(mocks)
        for image in ("collector", "server"):
            _assert_build_inputs(builds[image], image)
            assert builds[image]["tags"] == [f"rayhistoryacr.azurecr.io/ray-history-test/{image}:latest"]
            assert builds[image]["registries"] == [
                {
                    "address": "rayhistoryacr.azurecr.io",
                    "username": "00000000-0000-0000-0000-000000000000",
                    "password": MOCK_ACR_REFRESH_TOKEN,
                }
            ]
        assignments = {r.name: r for r in mocks.of_type("azure-native:authorization:RoleAssignment")}
        role_path = f"/subscriptions/{AZURE_SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/"
        pull = assignments["img-acr-pull"]
        assert pull.inputs["principalId"] == "kubelet-object-id"
        assert pull.inputs["roleDefinitionId"] == role_path + "7f951dda-4ed3-4680-a7ca-43fe172d538d"
        assert pull.inputs["scope"] == mocks.one("azure-native:containerregistry:Registry").resource_id
        assert all(ref.startswith("rayhistoryacr.azurecr.io/ray-history-test/") for ref in refs)
        mocks.assert_all_use_provider("azure-native", "azure-explicit")

    return _refs(images).apply(check)


@settled
def test_azure_acr_pushes_with_the_deployers_entra_token_not_an_admin_password(
    mocks: RecordingMocks,
) -> pulumi.Output[None]:
    """ACR's admin user stays off; ``pulumi up`` pushes with its own Entra token exchanged for an
    ACR refresh token, kept secret, and the deployer gets AcrPush on the registry.

    Azure: "the admin account is designed for a single user ... we recommend disabling it";
    individual Entra identities log in with a token exchanged at ``/oauth2/exchange``, user
    ``00000000-0000-0000-0000-000000000000`` (https://learn.microsoft.com/azure/container-registry/
    container-registry-authentication#admin-account, https://github.com/Azure/acr/blob/main/docs/AAD-OAuth.md).
    """
    EXCHANGES.clear()
    images = HistoryImages(
        "img",
        HistoryImagesArgs(
            registry="azure",
            azure_resource_group_name="rg",
            azure_registry_name="rayhistoryacr",
            azure_pull_principal_id="kubelet-object-id",
        ),
    )

    def check(_: list[str]) -> None:
        assert not [token for token, _, _ in mocks.calls if token.endswith("listRegistryCredentials")]
        assert EXCHANGES == [("rayhistoryacr.azurecr.io", AZURE_TENANT, "arm-mock-token")]
        push = {r.name: r for r in mocks.of_type("azure-native:authorization:RoleAssignment")}["img-acr-push"]
        assert push.inputs["principalId"] == _deployer_object_id()
        assert push.inputs["roleDefinitionId"].endswith("/8311e382-0749-4cb8-b61a-304f252e45ec")
        for build in mocks.of_type("docker-build:index:Image"):
            assert build.raw_inputs is not None
            registries = build.raw_inputs["registries"]
            assert is_secret(registries) or is_secret(registries[0]["password"])
            assert build.depends_on("img-acr-push"), build.dependency_names()

    return _refs(images).apply(check)


@settled
def test_gcp_push_token_is_a_secret(mocks: RecordingMocks) -> pulumi.Output[None]:
    """The Google access token handed to BuildKit is a Pulumi secret, never plain state."""
    images = HistoryImages(
        "img", HistoryImagesArgs(registry="gcp", gcp_project="demo-proj", gcp_location="europe-west1")
    )

    def check(_: list[str]) -> None:
        for build in mocks.of_type("docker-build:index:Image"):
            assert build.raw_inputs is not None
            registries = build.raw_inputs["registries"]
            assert is_secret(registries) or is_secret(registries[0]["password"])

    return _refs(images).apply(check)


def _deployer_object_id() -> str:
    return str(_default_calls()["azure-native:authorization:getClientConfig"]({})["objectId"])


@settled
def test_existing_registry_without_auth(mocks: RecordingMocks) -> pulumi.Output[None]:
    images = HistoryImages("img", HistoryImagesArgs(existing_registry="localhost:5001/", tag="dev"))

    def check(_: list[str]) -> None:
        builds = _builds(mocks)
        assert builds["collector"]["tags"] == ["localhost:5001/ray-history/collector:dev"]
        assert not builds["collector"].get("registries")

    return _refs(images).apply(check)


@settled
def test_prebuilt_references_skip_the_build(mocks: RecordingMocks) -> pulumi.Output[None]:
    images = HistoryImages(
        "img",
        HistoryImagesArgs(
            registry="gcp", collector_image="ghcr.io/acme/collector:1.2", server_image="ghcr.io/acme/server:1.2"
        ),
    )

    def check(refs: list[str]) -> None:
        assert refs == ["ghcr.io/acme/collector:1.2", "ghcr.io/acme/server:1.2"]
        assert not mocks.of_type("docker-build:index:Image")
        assert not mocks.of_type("gcp:artifactregistry/repository:Repository")

    return _refs(images).apply(check)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"registry": "quay"}, "HistoryImagesArgs.registry='quay'"),
        ({"collector_image": "x:1"}, "HistoryImagesArgs.collector_image and .server_image"),
        ({"registry": "gcp"}, "HistoryImagesArgs.gcp_project and .gcp_location"),
        ({"registry": "azure"}, "HistoryImagesArgs.azure_resource_group_name"),
        (
            {"registry": "azure", "azure_resource_group_name": "rg", "azure_registry_name": "acr1"},
            "HistoryImagesArgs.azure_pull_principal_id is required",
        ),
        ({"registry": "none"}, "HistoryImagesArgs.existing_registry"),
    ],
)
def test_bad_args_name_the_field(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        HistoryImagesArgs(**settings)


@pytest.mark.parametrize("repository", ["team-a/ray-history", "ray_history", "ray.history", "Ray", "ray-", "r" * 64])
def test_gcp_repository_name_must_be_an_artifact_registry_id(repository: str) -> None:
    """Artifact Registry repository ids are lower-case letters, digits and hyphens, a letter first,
    a letter or digit last, at most 63 characters
    (https://cloud.google.com/artifact-registry/docs/repositories/create-repos): the component
    refuses another ``repository_name`` for ``registry="gcp"`` instead of Artifact Registry at ``pulumi up``."""
    gcp = {"registry": "gcp", "gcp_project": "p", "gcp_location": "us-central1"}
    with pytest.raises(ValueError, match=re.escape(f"HistoryImagesArgs.repository_name={repository!r}")):
        HistoryImagesArgs(**gcp, repository_name=repository)  # type: ignore[arg-type]
    HistoryImagesArgs(**gcp, repository_name="ray-history-team-b")  # type: ignore[arg-type]
    # ECR takes paths: the rule is Artifact Registry's only.
    assert (
        HistoryImagesArgs(registry="aws", repository_name="team-a/ray-history").repository("s") == "team-a/ray-history"
    )

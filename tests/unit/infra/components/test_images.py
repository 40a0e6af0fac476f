"""HistoryImages under Pulumi mocks: registries per cloud, fully qualified tags, push auth, prebuilt refs."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_azure_native as azure
import pulumi_gcp as gcp
import pytest

from infra.components.images import REPOSITORY_ROOT, HistoryImages, HistoryImagesArgs
from tests.unit.infra.mocks import AWS_ACCOUNT, AWS_REGION, AZURE_SUBSCRIPTION, RecordingMocks, settled


@pytest.fixture
def mocks() -> RecordingMocks:
    return RecordingMocks.install()


def _refs(images: HistoryImages) -> pulumi.Output[list[str]]:
    return pulumi.Output.all(images.collector_image, images.server_image)


def _builds(mocks: RecordingMocks) -> dict[str, dict[str, Any]]:
    return {r.name.rsplit("-", 1)[1]: r.inputs for r in mocks.of_type("docker-build:index:Image")}


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
        assert (repo["format"], repo["location"], repo["repositoryId"]) == ("DOCKER", "europe-west1", "ray-history")
        builds = _builds(mocks)
        for image, ref in zip(("collector", "server"), refs, strict=True):
            _assert_build_inputs(builds[image], image)
            assert builds[image]["tags"] == [f"europe-west1-docker.pkg.dev/demo-proj/ray-history/{image}:0.1.0"]
            assert builds[image]["registries"] == [
                {
                    "address": "europe-west1-docker.pkg.dev",
                    "username": "oauth2accesstoken",
                    "password": "ya29.mock-token",
                }
            ]
            assert re.fullmatch(
                rf"europe-west1-docker\.pkg\.dev/demo-proj/ray-history/{image}:0\.1\.0@sha256:[0-9a-f]{{64}}", ref
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
        assert names == ["ray-history/collector", "ray-history/server"]
        builds = _builds(mocks)
        for image, ref in zip(("collector", "server"), refs, strict=True):
            _assert_build_inputs(builds[image], image)
            assert builds[image]["tags"] == [f"{host}/ray-history/{image}:latest"]
            assert builds[image]["registries"] == [
                {"address": host, "username": "AWS", "password": "ecr-mock-password"}
            ]
            assert ref.startswith(f"{host}/ray-history/{image}:latest@sha256:")
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
        assert registry["adminUserEnabled"] is True
        assert registry["sku"] == {"name": "Basic"}
        builds = _builds(mocks)
        for image in ("collector", "server"):
            _assert_build_inputs(builds[image], image)
            assert builds[image]["tags"] == [f"rayhistoryacr.azurecr.io/ray-history/{image}:latest"]
            assert builds[image]["registries"] == [
                {"address": "rayhistoryacr.azurecr.io", "username": "rayhistoryacr", "password": "acr-mock-password"}
            ]
        pull = mocks.one("azure-native:authorization:RoleAssignment")
        assert pull.inputs["principalId"] == "kubelet-object-id"
        assert pull.inputs["roleDefinitionId"] == (
            f"/subscriptions/{AZURE_SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/"
            "7f951dda-4ed3-4680-a7ca-43fe172d538d"
        )
        assert pull.inputs["scope"] == mocks.one("azure-native:containerregistry:Registry").resource_id
        assert all(ref.startswith("rayhistoryacr.azurecr.io/ray-history/") for ref in refs)
        mocks.assert_all_use_provider("azure-native", "azure-explicit")

    return _refs(images).apply(check)


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
        ({"registry": "none"}, "HistoryImagesArgs.existing_registry"),
    ],
)
def test_bad_args_name_the_field(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        HistoryImagesArgs(**settings)

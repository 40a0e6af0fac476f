"""MinioHistoryStorage under Pulumi mocks: Deployment/Service/Secret/Job, credential copies, S3 wiring."""

from __future__ import annotations

import base64
import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from ray_history_pulumi.contracts import ServiceAccountRef
from ray_history_pulumi.minio import MinioHistoryStorage, MinioHistoryStorageArgs, bucket_job_script
from tests.unit.infra.mocks import RecordingMocks, settled

WRITERS = [ServiceAccountRef("ray", "ray-collector"), ServiceAccountRef("team-a", "ray-worker")]
SERVER = ServiceAccountRef("ray-system", "ray-history-server")


@pytest.fixture
def mocks() -> RecordingMocks:
    return RecordingMocks.install()


def _storage(**overrides: Any) -> MinioHistoryStorage:
    provider = k8s.Provider("kind-explicit", kubeconfig="apiVersion: v1\nkind: Config\n")
    settings: dict[str, Any] = {
        "namespace": "ray-system",
        "create_namespace": True,
        "writers": WRITERS,
        "server": SERVER,
    }
    settings.update(overrides)
    return MinioHistoryStorage(
        "history", MinioHistoryStorageArgs(**settings), opts=pulumi.ResourceOptions(providers=[provider])
    )


def _secrets(mocks: RecordingMocks) -> dict[str, dict[str, Any]]:
    return {
        r.inputs["metadata"]["namespace"]: r.inputs
        for r in mocks.of_type("kubernetes:core/v1:Secret")
        if not r.name.endswith("-live")
    }


def test_bucket_job_script_waits_then_creates_idempotently() -> None:
    script = bucket_job_script("http://m.ns.svc.cluster.local:9000", "ray-historyserver")
    assert 'until mc alias set history http://m.ns.svc.cluster.local:9000 "$MINIO_ROOT_USER"' in script
    assert "mc mb --ignore-existing history/ray-historyserver" in script


@settled
def test_deployment_service_and_bucket_job(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(storage_size="5Gi")

    def check(_: object) -> None:
        assert mocks.one("kubernetes:core/v1:Namespace").inputs["metadata"]["name"] == "ray-system"
        deployment = mocks.one("kubernetes:apps/v1:Deployment").inputs
        assert deployment["metadata"] == {
            "name": "ray-history-minio",
            "namespace": "ray-system",
            "labels": {"app.kubernetes.io/name": "minio", "app.kubernetes.io/instance": "ray-history-minio"},
        }
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"].startswith("quay.io/minio/minio:RELEASE.")
        assert container["args"][:2] == ["server", "/data"]
        env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
        assert env == {
            "MINIO_ROOT_USER": {"name": "ray-history-minio", "key": "accessKey"},
            "MINIO_ROOT_PASSWORD": {"name": "ray-history-minio", "key": "secretKey"},
        }
        assert container["readinessProbe"]["httpGet"] == {"path": "/minio/health/ready", "port": 9000}
        [volume] = deployment["spec"]["template"]["spec"]["volumes"]
        assert volume["persistentVolumeClaim"] == {"claimName": "ray-history-minio-data"}
        claim = mocks.one("kubernetes:core/v1:PersistentVolumeClaim").inputs
        assert claim["spec"]["resources"]["requests"] == {"storage": "5Gi"}
        service = mocks.one("kubernetes:core/v1:Service").inputs
        assert service["metadata"]["name"] == "ray-history-minio"
        assert service["spec"]["ports"] == [{"name": "s3", "port": 9000, "targetPort": 9000}]
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        job = mocks.one("kubernetes:batch/v1:Job").inputs
        [mc] = job["spec"]["template"]["spec"]["containers"]
        assert mc["command"][-1] == bucket_job_script(storage.endpoint, "ray-historyserver")

    return storage.bucket_name.apply(check)


@settled
def test_generated_credentials_are_copied_to_consumer_namespaces(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()

    def check(_: object) -> None:
        secrets = _secrets(mocks)
        assert set(secrets) == {"ray-system", "ray", "team-a"}
        source = secrets["ray-system"]["stringData"]
        assert re.fullmatch(r"history-[0-9a-f]{8}", source["accessKey"])
        assert len(source["secretKey"]) >= 40
        for namespace in ("ray", "team-a"):
            copied = {k: base64.b64decode(v).decode() for k, v in secrets[namespace]["data"].items()}
            assert copied == source, namespace
        assert not mocks.of_type("kubernetes:core/v1:PersistentVolumeClaim")  # emptyDir by default

    return storage.bucket_name.apply(check)


@settled
def test_given_credentials_are_used_verbatim(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(root_user="admin", root_password="s3cr3t-password", create_namespace=False)

    def check(_: object) -> None:
        secrets = _secrets(mocks)
        for namespace in ("ray-system", "ray", "team-a"):
            assert secrets[namespace]["stringData"] == {"accessKey": "admin", "secretKey": "s3cr3t-password"}
        assert not mocks.of_type("kubernetes:core/v1:Namespace")

    return storage.bucket_name.apply(check)


@settled
def test_wiring_is_s3_with_endpoint_path_style_and_secret_keys(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(bucket_name="history", root_dir="kind")

    def check(env: dict[str, str]) -> None:
        assert env == {
            "STORAGE_BACKEND": "s3",
            "S3_BUCKET": "history",
            "S3_REGION": "us-east-1",
            "S3_ENDPOINT": "http://ray-history-minio.ray-system.svc.cluster.local:9000",
            "S3FORCE_PATH_STYLE": "true",
            "STORAGE_ROOT_DIR": "kind",
        }
        assert storage.wiring.secret_env == {
            "AWS_ACCESS_KEY_ID": ("ray-history-minio", "accessKey"),
            "AWS_SECRET_ACCESS_KEY": ("ray-history-minio", "secretKey"),
        }
        assert set(storage.wiring.writers) == {"ray/ray-collector", "team-a/ray-worker"}

    return pulumi.Output.from_input(storage.wiring.env).apply(check)


@settled
def test_every_resource_uses_the_explicit_provider(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(storage_size="1Gi")
    return storage.bucket_name.apply(lambda _: mocks.assert_all_use_provider("kubernetes", "kind-explicit"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"bucket_name": "No_Such"}, "MinioHistoryStorageArgs.bucket_name"),
        ({"root_user": "admin"}, "MinioHistoryStorageArgs.root_user and .root_password"),
        ({"storage_size": "lots"}, "MinioHistoryStorageArgs.storage_size"),
        ({"namespace": "Bad_NS"}, "MinioHistoryStorageArgs.writers[0].namespace"),
    ],
)
def test_bad_args_name_the_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        MinioHistoryStorageArgs(**{"namespace": "ray-system", **overrides})

"""In-cluster MinIO as the S3 store for Ray history on kind (or any cluster without cloud storage).

One Deployment + Service running the official MinIO server, credentials in a Secret, and a
Job that creates the bucket with ``mc mb --ignore-existing`` (the official image ships ``mc``;
``MINIO_DEFAULT_BUCKETS`` is a Bitnami-image feature the official image ignores). Writers and
the server reach it through ``S3_ENDPOINT`` + ``S3FORCE_PATH_STYLE`` with keys from a copy of
the Secret in their own namespace (``secretKeyRef`` cannot cross namespaces).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ray_history_pulumi.contracts import (
    SERVER_SERVICE_ACCOUNT,
    IdentityWiring,
    ServiceAccountRef,
    StorageWiring,
)
from ray_history_pulumi.storage_common import storage_env, validate_common, writer_key

#: Official MinIO server image (last community release published as an image; it includes ``mc``).
DEFAULT_MINIO_IMAGE = "quay.io/minio/minio:RELEASE.2025-09-07T16-13-09Z"
ACCESS_KEY = "accessKey"
SECRET_KEY = "secretKey"  # noqa: S105 - the key's name inside the Secret, not a secret
S3_PORT = 9000
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass
class MinioHistoryStorageArgs:
    """Settings of :class:`MinioHistoryStorage`.

    Attributes:
        namespace: namespace MinIO runs in.
        writers: service accounts of Ray pods whose collector sidecar writes history.
        server: the history server's service account.
        create_namespace: create ``namespace`` (False when something else owns it).
        bucket_name: bucket created at start (``S3_BUCKET``).
        name: name of the Deployment, Service and credentials Secret.
        image: MinIO server image (also runs the bucket Job: it contains ``mc``).
        storage_size: PersistentVolumeClaim size (``10Gi``); None keeps data in an emptyDir (lost on restart).
        storage_class: StorageClass of the claim; None = the cluster default.
        root_user / root_password: fixed credentials (e.g. ``config.require_secret``); None generates
            them once (kept on later updates).
        root_dir: key prefix inside the bucket (``STORAGE_ROOT_DIR``); "" = bucket root.
        cluster_domain: the cluster's DNS domain, for the endpoint URL.
        consumer_dependencies: resources (e.g. Namespaces) the credential copies in the writers'
            and server's namespaces must wait for.
    """

    namespace: str
    writers: Sequence[ServiceAccountRef] = ()
    server: ServiceAccountRef = field(default_factory=lambda: ServiceAccountRef("ray-system", SERVER_SERVICE_ACCOUNT))
    create_namespace: bool = False
    bucket_name: str = "ray-historyserver"
    name: str = "ray-history-minio"
    image: str = DEFAULT_MINIO_IMAGE
    storage_size: str | None = None
    storage_class: str | None = None
    root_user: pulumi.Input[str] | None = None
    root_password: pulumi.Input[str] | None = None
    root_dir: str = ""
    cluster_domain: str = "cluster.local"
    consumer_dependencies: Sequence[pulumi.Resource] = ()

    def __post_init__(self) -> None:
        if not _BUCKET_NAME.match(self.bucket_name):
            raise ValueError(
                f"MinioHistoryStorageArgs.bucket_name={self.bucket_name!r}: 3-63 lowercase letters, digits, '-', '.'"
            )
        if (self.root_user is None) != (self.root_password is None):
            raise ValueError("MinioHistoryStorageArgs.root_user and .root_password must be given together (or neither)")
        if self.storage_size is not None and not re.fullmatch(r"\d+(Ki|Mi|Gi|Ti)", self.storage_size):
            raise ValueError(f"MinioHistoryStorageArgs.storage_size={self.storage_size!r}: a quantity like 10Gi")
        validate_common(
            "MinioHistoryStorageArgs",
            [*self.writers, ServiceAccountRef(self.namespace, self.name)],
            self.server,
            None,
        )


def bucket_job_script(service_url: str, bucket: str) -> str:
    """Shell run by the bucket Job: wait for MinIO, then create the bucket if missing."""
    return (
        "set -eu\n"
        f'until mc alias set history {service_url} "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null; '
        "do sleep 2; done\n"
        f"mc mb --ignore-existing history/{bucket}\n"
    )


class MinioHistoryStorage(pulumi.ComponentResource):
    """MinIO in the cluster as the history store (kind), wired like S3.

    Example::

        k8s_provider = k8s.Provider("kind", kubeconfig=kubeconfig, context="kind-ray")
        storage = MinioHistoryStorage(
            "history",
            MinioHistoryStorageArgs(
                namespace="ray-system",
                create_namespace=True,
                writers=[ServiceAccountRef("ray", "ray-collector")],
                consumer_dependencies=[ray_namespace],
            ),
            opts=pulumi.ResourceOptions(providers=[k8s_provider]),
        )
        storage.wiring.secret_env  # {"AWS_ACCESS_KEY_ID": ("ray-history-minio", "accessKey"), ...}

    Attributes:
        endpoint: in-cluster URL of the S3 API.
        bucket_name: the bucket.
        credentials: the Secret in MinIO's namespace; ``credential_copies`` per other namespace.
        bucket_job: the Job that creates the bucket.
        wiring: what the Kubernetes components need (:class:`StorageWiring`).
    """

    def __init__(self, name: str, args: MinioHistoryStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:kind:MinioHistoryStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.endpoint = f"http://{args.name}.{args.namespace}.svc.{args.cluster_domain}:{S3_PORT}"
        labels = {"app.kubernetes.io/name": "minio", "app.kubernetes.io/instance": args.name}

        namespace = (
            k8s.core.v1.Namespace(f"{name}-namespace", metadata={"name": args.namespace}, opts=child)
            if args.create_namespace
            else None
        )
        in_namespace = pulumi.ResourceOptions(parent=self, depends_on=[namespace] if namespace else [])
        self.credentials, copy_data = self._credentials(name, args, in_namespace)
        volume = self._data_volume(name, args, labels, in_namespace)

        from_secret = [
            {"name": "MINIO_ROOT_USER", "value_from": {"secret_key_ref": {"name": args.name, "key": ACCESS_KEY}}},
            {"name": "MINIO_ROOT_PASSWORD", "value_from": {"secret_key_ref": {"name": args.name, "key": SECRET_KEY}}},
        ]
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": args.name, "namespace": args.namespace, "labels": labels},
            spec={
                "replicas": 1,
                "strategy": {"type": "Recreate"},  # one pod owns the volume
                "selector": {"match_labels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "minio",
                                "image": args.image,
                                "args": ["server", "/data", "--console-address", ":9001"],
                                "env": from_secret,
                                "ports": [{"name": "s3", "container_port": S3_PORT}],
                                "readiness_probe": {
                                    "http_get": {"path": "/minio/health/ready", "port": S3_PORT},
                                    "period_seconds": 5,
                                },
                                "liveness_probe": {
                                    "http_get": {"path": "/minio/health/live", "port": S3_PORT},
                                    "period_seconds": 20,
                                },
                                "volume_mounts": [{"name": "data", "mount_path": "/data"}],
                            }
                        ],
                        "volumes": [volume],
                    },
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.credentials]),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={"name": args.name, "namespace": args.namespace, "labels": labels},
            spec={"selector": labels, "ports": [{"name": "s3", "port": S3_PORT, "target_port": S3_PORT}]},
            opts=in_namespace,
        )
        self.bucket_job = k8s.batch.v1.Job(
            f"{name}-bucket",
            metadata={"name": f"{args.name}-make-bucket", "namespace": args.namespace, "labels": labels},
            spec={
                "backoff_limit": 6,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restart_policy": "OnFailure",
                        "containers": [
                            {
                                "name": "mc",
                                "image": args.image,
                                "command": ["/bin/sh", "-c", bucket_job_script(self.endpoint, args.bucket_name)],
                                # mc keeps its alias file here; the image's HOME may not be writable.
                                "env": [*from_secret, {"name": "MC_CONFIG_DIR", "value": "/tmp/.mc"}],  # noqa: S108
                            }
                        ],
                    },
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.deployment, self.service]),
        )

        self.credential_copies = self._copies(name, args, copy_data)
        # Ready means: the bucket exists and every consumer namespace has the keys.
        ready = pulumi.Output.all(self.bucket_job.id, *[c.id for c in self.credential_copies])
        self.bucket_name: pulumi.Output[str] = ready.apply(lambda _: args.bucket_name)
        env = storage_env(
            {
                "STORAGE_BACKEND": "s3",
                "S3_BUCKET": self.bucket_name,
                "S3_REGION": "us-east-1",  # MinIO's default region; signatures need one
                "S3_ENDPOINT": self.endpoint,
                "S3FORCE_PATH_STYLE": "true",
            },
            args.root_dir,
        )
        secret_env = {"AWS_ACCESS_KEY_ID": (args.name, ACCESS_KEY), "AWS_SECRET_ACCESS_KEY": (args.name, SECRET_KEY)}
        self.wiring = StorageWiring(
            backend="s3",
            bucket=self.bucket_name,
            env=env,
            server=IdentityWiring(),
            writers={writer_key(sa): IdentityWiring() for sa in args.writers},
            secret_env=secret_env,
        )
        self.register_outputs({"endpoint": self.endpoint, "bucket_name": self.bucket_name, "env": env})

    def _credentials(
        self, name: str, args: MinioHistoryStorageArgs, opts: pulumi.ResourceOptions
    ) -> tuple[k8s.core.v1.Secret, pulumi.Output[Any]]:
        """The source Secret, and the ``data`` its copies should carry."""
        metadata = {"name": args.name, "namespace": args.namespace}
        if args.root_user is not None and args.root_password is not None:
            string_data = pulumi.Output.secret({ACCESS_KEY: args.root_user, SECRET_KEY: args.root_password})
            secret = k8s.core.v1.Secret(f"{name}-credentials", metadata=metadata, string_data=string_data, opts=opts)
            return secret, string_data
        # Generated once: later runs generate new values but ignore_changes keeps the first
        # ones, and the copies read them back from the cluster.
        generated = {ACCESS_KEY: f"history-{secrets.token_hex(4)}", SECRET_KEY: secrets.token_urlsafe(30)}
        secret = k8s.core.v1.Secret(
            f"{name}-credentials",
            metadata=metadata,
            string_data=pulumi.Output.secret(generated),
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=["stringData"])),
        )
        live = k8s.core.v1.Secret.get(
            f"{name}-credentials-live",
            secret.metadata.apply(lambda m: f"{m.namespace}/{m.name}"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[secret]),
        )
        return secret, pulumi.Output.secret(live.data)

    def _copies(
        self, name: str, args: MinioHistoryStorageArgs, copy_data: pulumi.Output[Any]
    ) -> list[k8s.core.v1.Secret]:
        namespaces = sorted({sa.namespace for sa in [*args.writers, args.server]} - {args.namespace})
        opts = pulumi.ResourceOptions(parent=self, depends_on=list(args.consumer_dependencies))
        copies = []
        for namespace in namespaces:
            metadata = {"name": args.name, "namespace": namespace}
            if args.root_user is not None:
                copies.append(
                    k8s.core.v1.Secret(
                        f"{name}-credentials-{namespace}", metadata=metadata, string_data=copy_data, opts=opts
                    )
                )
            else:
                copies.append(
                    k8s.core.v1.Secret(f"{name}-credentials-{namespace}", metadata=metadata, data=copy_data, opts=opts)
                )
        return copies

    def _data_volume(
        self, name: str, args: MinioHistoryStorageArgs, labels: dict[str, str], opts: pulumi.ResourceOptions
    ) -> dict[str, Any]:
        if args.storage_size is None:
            return {"name": "data", "empty_dir": {}}
        claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-data",
            metadata={
                "name": f"{args.name}-data",
                "namespace": args.namespace,
                "labels": labels,
                # kind's default class binds on first consumer: do not wait for Bound before the Deployment.
                "annotations": {"pulumi.com/skipAwait": "true"},
            },
            spec={
                "access_modes": ["ReadWriteOnce"],
                "storage_class_name": args.storage_class,
                "resources": {"requests": {"storage": args.storage_size}},
            },
            opts=opts,
        )
        return {"name": "data", "persistent_volume_claim": {"claim_name": claim.metadata.name}}

"""What the cloud-side components hand the Kubernetes-side ones.

A storage + identity component (``GcsHistoryStorage``, ``S3HistoryStorage``,
``AzureBlobHistoryStorage``, or in-cluster MinIO for kind) produces one
:class:`StorageWiring`. The Kubernetes components (history server Deployment,
workload service accounts, the collector sidecar helper, the KubeRay
``collectorOptions`` block) consume it without knowing which cloud it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

#: The history server's Kubernetes service account (fixed by the GKE guide).
SERVER_SERVICE_ACCOUNT = "ray-history-server"


@dataclass(frozen=True)
class ServiceAccountRef:
    """A Kubernetes service account a storage identity is bound to."""

    namespace: str
    name: str

    @property
    def subject(self) -> str:
        """The OIDC subject Kubernetes puts in the account's projected token."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"


@dataclass
class IdentityWiring:
    """How pods running as one service account get cloud credentials.

    Attributes:
        service_account_annotations: on the ServiceAccount (IRSA role ARN, Azure client id).
        pod_labels: on the pod template (``azure.workload.identity/use: "true"``).
        env: extra container environment (e.g. ``AZURE_CLIENT_ID``) if the SDK needs it.
        ready: the cloud resources that make the credentials work (bucket grant, EKS Pod
            Identity association, federated credential, role assignment). A pod running as
            the account must be created after them: EKS and Azure inject credentials only
            at pod admission, and a pod started before its grant gets 403s until restarted.
            Consumers pass these to ``depends_on``.
    """

    service_account_annotations: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    pod_labels: dict[str, str] = field(default_factory=dict)
    env: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    ready: list[pulumi.Resource] = field(default_factory=list)


@dataclass
class StorageWiring:
    """Everything a collector or the history server needs to reach the bucket.

    Attributes:
        backend: ``gcs``, ``s3`` or ``azureblob`` (``STORAGE_BACKEND``).
        bucket: bucket / container name.
        env: storage environment shared by collector and server (``STORAGE_BACKEND``,
            ``STORAGE_ROOT_DIR``, ``GCS_BUCKET`` / ``S3_BUCKET`` + ``S3_REGION`` [+
            ``S3_ENDPOINT``] / ``AZURE_STORAGE_ACCOUNT_URL`` + ``AZURE_STORAGE_CONTAINER``
            + ``AZURE_STORAGE_AUTH_MODE``); names as in README "Storage configuration".
        server: identity wiring for ``ray-history-server`` (read-only access).
        writers: identity wiring per writer service account (read/write access),
            keyed by ``namespace/name``.
        secret_env: env values that must come from a Secret (MinIO keys on kind),
            name -> (secret name, key); empty on the clouds (workload identity).
        shared_index: what the server's grants allow on the shared indexes (``off``,
            ``read``, ``write``, see ``--shared-index``); the server may run with this
            mode or a lesser one.
        index_container: Azure: the container holding the shared indexes (None elsewhere,
            where they live in the bucket under ``ROOT/history-index/``, or with ``off``).
        index_maintainers: writers (``namespace/name``) that may delete shared indexes
            (the retention job deletes a session's together with it).
    """

    backend: str
    bucket: pulumi.Input[str]
    env: pulumi.Input[dict[str, str]]
    server: IdentityWiring
    writers: dict[str, IdentityWiring] = field(default_factory=dict)
    secret_env: dict[str, tuple[str, str]] = field(default_factory=dict)
    shared_index: str = "read"
    index_container: pulumi.Input[str] | None = None
    index_maintainers: list[str] = field(default_factory=list)

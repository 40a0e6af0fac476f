"""The ``azureblob`` backend: Azure Blob Storage (and Azurite) via azure-storage-blob 12.

Settings follow KubeRay's Go history server (``AZURE_STORAGE_*`` env vars / ``azure*`` JSON keys).
SDK retries are switched off: the RetryPolicy in ``base`` is the only retry loop.
Keys are blob names used verbatim (the SDK percent-encodes ``?``, ``&``, ``=``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, BinaryIO

import requests
from azure.core.credentials import TokenCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    IncompleteReadError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.paging import ItemPaged
from azure.core.pipeline.transport import RequestsTransport
from urllib3.util.retry import Retry

from runtime.storage.base import ErrorKind, Listing, ObjectInfo, ObjectStore
from runtime.storage.errors import StorageConfigError
from runtime.storage.lean_imports import without_modules
from runtime.storage.requests_adapter import AbortOnCloseAdapter
from runtime.storage.retry import RetryPolicy
from runtime.storage.settings import SettingSource

# We use RequestsTransport; the SDK's aiohttp probe would only cost memory.
with without_modules("azure.core.pipeline.transport._aiohttp"):
    from azure.storage.blob import BlobPrefix, BlobProperties, ContainerClient

logger = logging.getLogger(__name__)

# The SDK logs every request and response at INFO; that would drown our logs.
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)

AUTH_MODES = ("connection_string", "workload_identity", "default")
DEFAULT_CONTAINER = "ray-historyserver"
# Blocks of 1 MiB, one in flight per upload: the collector runs several uploads
# at once inside 80 MiB (4 MiB blocks, two in flight, measured +30 MiB under
# load). 50,000 blocks still allow 48 GiB per object; Ray rotates its logs at 512 MiB.
_BLOCK_SIZE = 1024 * 1024
_PAGE_SIZE = 1000
# urllib3 keeps 10 connections per host by default; collector threads times
# max_concurrency exceed that and churn connections (with a warning each).
_POOL_SIZE = 32
_CONNECT_TIMEOUT = 5.0
_READ_TIMEOUT = 60.0  # per socket read, not per request: big uploads are fine
# 3-63 chars of lower-case letters, digits and single hyphens, no edge hyphens.
_CONTAINER_RE = re.compile(r"^(?=.{3,63}$)[a-z0-9]+(?:-[a-z0-9]+)*$")
# Error codes that mean "try again" whatever the status code says.
_TRANSIENT_CODES = {"ContainerBeingDeleted", "ConditionNotMet", "ServerBusy", "OperationTimedOut"}
_PERMANENT_CODES = {"AuthorizationFailure", "AuthenticationFailed", "InvalidAuthenticationInfo"}


@dataclass(frozen=True)
class AzureBlobSettings:
    """Where and how to reach the container."""

    container: str = DEFAULT_CONTAINER
    """Container name (``AZURE_STORAGE_CONTAINER`` / ``azureContainer``)."""
    connection_string: str | None = None
    """Full connection string, e.g. for Azurite (``AZURE_STORAGE_CONNECTION_STRING``)."""
    account_url: str | None = None
    """``https://<account>.blob.core.windows.net`` for token auth (``AZURE_STORAGE_ACCOUNT_URL``)."""
    auth_mode: str = "connection_string"
    """Resolved mode: ``connection_string``, ``workload_identity`` or ``default``."""
    client_id: str | None = None
    """Client id of a user-assigned / workload identity (``AZURE_CLIENT_ID``)."""
    tenant_id: str | None = None
    """Tenant of the workload identity (``AZURE_TENANT_ID``, injected by AKS)."""
    federated_token_file: str | None = None
    """Projected service-account token (``AZURE_FEDERATED_TOKEN_FILE``, injected by AKS)."""

    @classmethod
    def from_source(cls, source: SettingSource) -> AzureBlobSettings:
        """Read KubeRay's Go history server's env vars / JSON keys; JSON wins per key."""
        container = source.get("AZURE_STORAGE_CONTAINER", "azureContainer", DEFAULT_CONTAINER) or DEFAULT_CONTAINER
        if not _CONTAINER_RE.match(container):
            raise StorageConfigError(
                f"AZURE_STORAGE_CONTAINER={container!r} is not a valid container name: use 3-63 lower-case "
                "letters, digits and single hyphens, starting and ending with a letter or digit"
            )
        conn = source.get("AZURE_STORAGE_CONNECTION_STRING", "azureConnectionString")
        url = source.get("AZURE_STORAGE_ACCOUNT_URL", "azureAccountURL")
        mode = (source.get("AZURE_STORAGE_AUTH_MODE", "azureAuthMode") or "auto").lower()
        if mode == "auto":
            if conn:
                mode = "connection_string"
            elif url:
                mode = "default"
            else:
                raise StorageConfigError(
                    "azureblob needs credentials: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_URL "
                    "(with a workload/managed identity)"
                )
        elif mode not in AUTH_MODES:
            raise StorageConfigError(
                f"AZURE_STORAGE_AUTH_MODE={mode!r} is unknown; use one of {', '.join(AUTH_MODES)} (or leave it empty)"
            )
        if mode == "connection_string" and not conn:
            raise StorageConfigError("AZURE_STORAGE_AUTH_MODE=connection_string needs AZURE_STORAGE_CONNECTION_STRING")
        if mode != "connection_string":
            if not url:
                raise StorageConfigError(f"AZURE_STORAGE_AUTH_MODE={mode} needs AZURE_STORAGE_ACCOUNT_URL")
            if not url.startswith("https://"):  # the SDK sends tokens over HTTPS only
                raise StorageConfigError(f"AZURE_STORAGE_ACCOUNT_URL={url!r} must start with https://")
        settings = cls(
            container=container,
            connection_string=conn if mode == "connection_string" else None,
            account_url=url,
            auth_mode=mode,
            client_id=source.get("AZURE_CLIENT_ID", "azureClientID"),
            tenant_id=source.get("AZURE_TENANT_ID", "azureTenantID"),
            federated_token_file=source.get("AZURE_FEDERATED_TOKEN_FILE", "azureFederatedTokenFile"),
        )
        if mode == "workload_identity":
            missing = [
                name
                for name, value in (
                    ("AZURE_CLIENT_ID", settings.client_id),
                    ("AZURE_TENANT_ID", settings.tenant_id),
                    ("AZURE_FEDERATED_TOKEN_FILE", settings.federated_token_file),
                )
                if not value
            ]
            if missing:
                raise StorageConfigError(
                    f"AZURE_STORAGE_AUTH_MODE=workload_identity needs {', '.join(missing)} "
                    "(AKS injects them when the pod has label azure.workload.identity/use=true)"
                )
        return settings


class AzureBlobStore(ObjectStore):
    """Block blobs in one container."""

    backend = "azureblob"

    def __init__(self, settings: AzureBlobSettings, retry: RetryPolicy | None = None) -> None:
        super().__init__(settings.container, retry)
        self.settings = settings
        self._credential: Any = None
        session = requests.Session()
        # total=False: no urllib3 retries, and the original socket error, not "Max retries exceeded".
        # Connections reset on close, so an upload given up on is never delivered late (sockets.py).
        adapter = AbortOnCloseAdapter(
            pool_maxsize=_POOL_SIZE, max_retries=Retry(total=False, redirect=False, raise_on_status=False)
        )
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        client_options: dict[str, Any] = {
            # A given transport ignores the client's timeout options: set them here.
            "transport": RequestsTransport(
                session=session, session_owner=True, connection_timeout=_CONNECT_TIMEOUT, read_timeout=_READ_TIMEOUT
            ),
            "retry_total": 0,  # base.RetryPolicy retries; the SDK must not multiply it
            "max_block_size": _BLOCK_SIZE,
            "max_single_put_size": _BLOCK_SIZE,
            # Read the stream sequentially from its current position: the SDK's
            # default "substream" path seeks to absolute offsets from 0.
            "use_byte_buffer": True,
        }
        if settings.auth_mode == "connection_string":
            try:
                self._client = ContainerClient.from_connection_string(
                    settings.connection_string or "", settings.container, **client_options
                )
            except ValueError as exc:  # message never echoes the secret
                raise StorageConfigError(f"AZURE_STORAGE_CONNECTION_STRING is malformed: {exc}") from exc
        else:
            self._credential = self._make_credential(settings)
            try:
                self._client = ContainerClient(
                    settings.account_url or "", settings.container, credential=self._credential, **client_options
                )
            except ValueError as exc:
                raise StorageConfigError(f"AZURE_STORAGE_ACCOUNT_URL is unusable: {exc}") from exc

    @staticmethod
    def _make_credential(settings: AzureBlobSettings) -> TokenCredential:
        # Imported here: azure-identity (msal, cryptography) costs ~20 MiB of RSS,
        # and a connection-string setup never needs it.
        from azure.identity import DefaultAzureCredential, WorkloadIdentityCredential

        if settings.auth_mode == "workload_identity":
            return WorkloadIdentityCredential(
                tenant_id=settings.tenant_id or "",
                client_id=settings.client_id or "",
                token_file_path=settings.federated_token_file or "",
            )
        if settings.client_id:  # may come from the JSON file, which the SDK does not read
            return DefaultAzureCredential(
                managed_identity_client_id=settings.client_id, workload_identity_client_id=settings.client_id
            )
        return DefaultAzureCredential()

    def describe(self) -> str:
        return f"azureblob://{self._client.account_name}/{self.bucket}"

    def close(self) -> None:
        self._client.close()
        if self._credential is not None:
            self._credential.close()

    # ------------------------------------------------------------ primitives
    def _put_stream(self, key: str, stream: BinaryIO, size: int | None) -> None:
        if size is None:
            size = _remaining(stream)  # the SDK's own guess ignores the stream position
        self._client.get_blob_client(key).upload_blob(
            stream, length=size, overwrite=True, max_concurrency=1, blob_type="BlockBlob"
        )

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        blob = self._client.get_blob_client(key)
        if start == 0 and length is None:
            # No offset: the SDK then retries a 0-byte blob's 416 as a plain GET.
            return blob.download_blob(max_concurrency=1).readall()
        return blob.download_blob(offset=start, length=length, max_concurrency=1).readall()

    def _stat(self, key: str) -> ObjectInfo:
        return _info(self._client.get_blob_client(key).get_blob_properties())

    def _list_page(self, prefix: str, delimiter: str | None, token: str | None) -> tuple[Listing, str | None]:
        # Metadata lets us drop the folder placeholders of hierarchical-namespace accounts.
        start = prefix or None
        paged: ItemPaged[Any]
        if delimiter:
            paged = self._client.walk_blobs(
                name_starts_with=start, include=["metadata"], delimiter=delimiter, results_per_page=_PAGE_SIZE
            )
        else:
            paged = self._client.list_blobs(name_starts_with=start, include=["metadata"], results_per_page=_PAGE_SIZE)
        pages: Any = paged.by_page(continuation_token=token)  # a PageIterator: has .continuation_token
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        for item in next(pages, []):
            if isinstance(item, BlobPrefix):
                prefixes.append(item.name)
            elif isinstance(item, BlobProperties) and (item.metadata or {}).get("hdi_isfolder") != "true":
                objects.append(_info(item))
        return Listing(objects=objects, prefixes=prefixes), pages.continuation_token or None

    def _delete(self, key: str) -> None:
        self._client.delete_blob(key)

    def _bucket_exists(self) -> bool:
        # A one-blob listing under the probe prefix, not Get Container Properties: a
        # collector's role assignment lists only under prefixes of its own (an ABAC
        # condition on the request's prefix), and this is one of them.
        paged = self._client.list_blobs(name_starts_with=self.probe_prefix or None, results_per_page=1)
        try:
            next(paged.by_page(), None)
        except ResourceNotFoundError:
            return False
        return True

    def _create_bucket(self) -> None:
        try:
            self._client.create_container()
        except ResourceExistsError as exc:
            if _code(exc) == "ContainerBeingDeleted":  # also a ResourceExistsError; retried
                raise
            logger.info("container %s already exists", self.bucket)

    def _classify(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, ClientAuthenticationError):  # incl. azure-identity's CredentialUnavailableError
            return ErrorKind.PERMANENT
        transient = (ServiceRequestError, ServiceResponseError, IncompleteReadError, ConnectionError, TimeoutError)
        if isinstance(exc, transient):  # connection refused/reset, timeouts, bodies cut short
            return ErrorKind.TRANSIENT
        if isinstance(exc, ResourceNotFoundError):
            return ErrorKind.NO_BUCKET if _code(exc) == "ContainerNotFound" else ErrorKind.NOT_FOUND
        if isinstance(exc, HttpResponseError):
            return _http_kind(exc)
        return ErrorKind.PERMANENT


def _http_kind(exc: HttpResponseError) -> ErrorKind:
    status, code = exc.status_code, _code(exc)
    kind = ErrorKind.PERMANENT
    if status == 416 or code == "InvalidRange":
        kind = ErrorKind.RANGE_NOT_SATISFIABLE
    elif isinstance(exc, ClientAuthenticationError) or status in (401, 403) or code in _PERMANENT_CODES:
        kind = ErrorKind.PERMANENT
    elif code in _TRANSIENT_CODES or status in (408, 429) or (status is not None and status >= 500):
        kind = ErrorKind.TRANSIENT
    elif status is None and isinstance(exc.inner_exception, (ServiceResponseError, ConnectionError)):
        # The downloader wraps a broken body read in a status-less HttpResponseError.
        kind = ErrorKind.TRANSIENT
    return kind


def _code(exc: BaseException) -> str:
    """The storage error code (``BlobNotFound``, ...) the SDK attaches, or ''."""
    return str(getattr(exc, "error_code", None) or "")


def _info(props: BlobProperties) -> ObjectInfo:
    etag = props.etag.strip('"') if props.etag else None
    return ObjectInfo(key=props.name, size=int(props.size or 0), updated=props.last_modified, version=etag)


def _remaining(stream: BinaryIO) -> int | None:
    """Bytes left from the current position, or None when the stream cannot seek."""
    try:
        if not stream.seekable():
            return None
        here = stream.tell()
        end = stream.seek(0, 2)
        stream.seek(here)
        return end - here
    except (OSError, ValueError):
        return None

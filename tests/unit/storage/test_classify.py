"""Each backend sorts its SDK's real exception types the same way: missing key,
missing bucket, permanent (no retry) or transient (retry)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from botocore import exceptions as bce
from google.api_core import exceptions as gexc
from google.auth import exceptions as gauth

from runtime.storage.azureblob import AzureBlobSettings, AzureBlobStore
from runtime.storage.base import ErrorKind, ObjectStore
from runtime.storage.gcs import GCSSettings, GCSStore
from runtime.storage.s3 import S3Settings, S3Store

AZURITE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;"
    "BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;"
)


@pytest.fixture
def s3() -> Iterator[ObjectStore]:
    store = S3Store(
        S3Settings(bucket="bucket", endpoint_url="http://127.0.0.1:9", access_key_id="a", secret_access_key="b")
    )
    yield store
    store.close()


@pytest.fixture
def gcs() -> Iterator[ObjectStore]:
    store = GCSStore(GCSSettings(bucket="bucket", project="p", emulator_host="http://127.0.0.1:9"))
    yield store
    store.close()


@pytest.fixture
def azure() -> Iterator[ObjectStore]:
    store = AzureBlobStore(AzureBlobSettings(container="bucket", connection_string=AZURITE))
    yield store
    store.close()


def client_error(code: str, status: int) -> bce.ClientError:
    return bce.ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (client_error("NoSuchKey", 404), ErrorKind.NOT_FOUND),
        (client_error("404", 404), ErrorKind.NOT_FOUND),
        (client_error("NoSuchBucket", 404), ErrorKind.NO_BUCKET),
        (client_error("InvalidRange", 416), ErrorKind.RANGE_NOT_SATISFIABLE),
        (client_error("AccessDenied", 403), ErrorKind.PERMANENT),
        (client_error("InvalidAccessKeyId", 403), ErrorKind.PERMANENT),
        (client_error("ExpiredToken", 400), ErrorKind.PERMANENT),
        (client_error("SlowDown", 503), ErrorKind.TRANSIENT),
        (client_error("InternalError", 500), ErrorKind.TRANSIENT),
        (client_error("Whatever", 502), ErrorKind.TRANSIENT),
        (bce.EndpointConnectionError(endpoint_url="http://x"), ErrorKind.TRANSIENT),
        (bce.ReadTimeoutError(endpoint_url="http://x"), ErrorKind.TRANSIENT),
        (bce.NoCredentialsError(), ErrorKind.PERMANENT),
        (bce.CredentialRetrievalError(provider="irsa", error_msg="agent not ready"), ErrorKind.TRANSIENT),
    ],
)
def test_s3(s3: ObjectStore, exc: BaseException, kind: ErrorKind) -> None:
    assert s3._classify(exc) is kind


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (gexc.NotFound("No such object: bucket/key"), ErrorKind.NOT_FOUND),
        (gexc.Forbidden("denied"), ErrorKind.PERMANENT),
        (gexc.Unauthorized("who are you"), ErrorKind.PERMANENT),
        (gexc.TooManyRequests("slow down"), ErrorKind.TRANSIENT),
        (gexc.ServiceUnavailable("later"), ErrorKind.TRANSIENT),
        (gexc.InternalServerError("oops"), ErrorKind.TRANSIENT),
        (requests.ConnectionError("refused"), ErrorKind.TRANSIENT),
        (requests.Timeout("slow"), ErrorKind.TRANSIENT),
        (gauth.DefaultCredentialsError("no ADC"), ErrorKind.PERMANENT),
        (gexc.BadRequest("bad"), ErrorKind.PERMANENT),
    ],
)
def test_gcs(gcs: ObjectStore, exc: BaseException, kind: ErrorKind) -> None:
    assert gcs._classify(exc) is kind


def azure_error(cls: type[HttpResponseError], code: str, status: int) -> HttpResponseError:
    err = cls(message=code)
    err.error_code = code
    err.status_code = status
    return err


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (azure_error(ResourceNotFoundError, "BlobNotFound", 404), ErrorKind.NOT_FOUND),
        (azure_error(ResourceNotFoundError, "ContainerNotFound", 404), ErrorKind.NO_BUCKET),
        (azure_error(HttpResponseError, "InvalidRange", 416), ErrorKind.RANGE_NOT_SATISFIABLE),
        (azure_error(HttpResponseError, "AuthorizationFailure", 403), ErrorKind.PERMANENT),
        (ClientAuthenticationError(message="bad key"), ErrorKind.PERMANENT),
        (azure_error(HttpResponseError, "ServerBusy", 503), ErrorKind.TRANSIENT),
        (azure_error(HttpResponseError, "InternalError", 500), ErrorKind.TRANSIENT),
        (ServiceRequestError("connection refused"), ErrorKind.TRANSIENT),
    ],
)
def test_azure(azure: ObjectStore, exc: BaseException, kind: ErrorKind) -> None:
    assert azure._classify(exc) is kind

"""The history server over HTTP (``--server``, env ``RAY_HISTORY_SERVER``).

Every request carries the caller's bearer token when there is one
(:mod:`runtime.cli.credentials`, resolved once, at the first request); a 401 or 403
becomes a message naming ``--token`` or the namespace, not a traceback."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterator
from urllib.parse import unquote, urlsplit

import requests

from runtime.cli.api import MAX_ERROR_BYTES, ApiResponse, HistoryApi, Params, error_message
from runtime.cli.credentials import TOKEN_ENV, TOKEN_FLAG, Credentials
from runtime.cli.errors import CliError, UsageError

logger = logging.getLogger(__name__)

DEFAULT_SERVER = "http://localhost:8080"
SERVER_ENV = "RAY_HISTORY_SERVER"
#: Entering a session may build its index first (minutes for a big session).
READ_TIMEOUT = 900.0
CONNECT_TIMEOUT = 10.0
STREAM_CHUNK = 64 * 1024
#: JSON first: a server with browser login (OIDC) redirects clients that prefer HTML.
ACCEPT = "application/json, text/plain;q=0.9, */*;q=0.5"


def no_credentials() -> Credentials:
    return Credentials(None, "no token")


def normalise_server_url(url: str) -> str:
    """``host:8080`` -> ``http://host:8080``; UsageError naming ``--server`` otherwise."""
    text = url.strip().rstrip("/")
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--server={url!r} is not an http(s) URL like http://localhost:8080")
    return text


class HttpHistoryApi(HistoryApi):
    """A ``requests`` session keeping the five selection cookies between calls."""

    def __init__(self, base_url: str, credentials: Callable[[], Credentials] = no_credentials) -> None:
        self.base_url = normalise_server_url(base_url)
        self.where = self.base_url
        self._session = requests.Session()
        self._session.headers["Accept"] = ACCEPT
        self._resolve_credentials = credentials
        self._credentials: Credentials | None = None
        #: the namespace last entered, for a 403's message
        self._namespace: str | None = None

    @property
    def credentials(self) -> Credentials:
        """Resolved at the first request (a kubeconfig exec plugin may take a moment)."""
        if self._credentials is None:
            self._credentials = self._resolve_credentials()
            if self._credentials.token:
                self._session.headers.update(self._credentials.headers())
                _note_plain_http(self.base_url, self._credentials.source)
        return self._credentials

    def get(self, path: str, params: Params = (), *, stream: bool = False) -> ApiResponse:
        url = f"{self.base_url}{path}"
        # A followed log stream may be quiet for a long time: no read timeout there.
        timeout = (CONNECT_TIMEOUT, None if stream else READ_TIMEOUT)
        credentials = self.credentials
        namespace = _namespace_of(path, params)
        if namespace and path.startswith("/enter_cluster/"):
            self._namespace = namespace
        try:
            # Always streamed: requests would otherwise read the whole body, however long,
            # before get_json could bound it (api.MAX_ANSWER_BYTES).
            response = self._session.get(url, params=list(params), stream=True, timeout=timeout)
        except requests.ConnectionError as exc:
            raise CliError(
                f"cannot reach the history server at {self.base_url} ({_reason(exc)}); "
                f"pass --server URL (or set {SERVER_ENV}), or read storage directly with --storage-backend"
            ) from None
        except requests.Timeout:
            raise CliError(f"the history server at {self.base_url} did not answer {path} in time") from None
        except requests.RequestException as exc:
            raise CliError(f"request to {url} failed: {exc}") from None

        if response.status_code in (401, 403):
            try:
                head = next(response.iter_content(chunk_size=MAX_ERROR_BYTES), b"")
            except requests.RequestException:
                head = b""
            finally:
                response.close()
            message = error_message(head[:MAX_ERROR_BYTES]) or f"HTTP {response.status_code}"
            raise CliError(self._refusal(response.status_code, message, credentials, namespace or self._namespace))

        def chunks() -> Iterator[bytes]:
            try:
                yield from response.iter_content(chunk_size=STREAM_CHUNK if stream else 1024 * 1024)
            except requests.RequestException as exc:
                raise CliError(f"the connection to {self.base_url} broke while reading {path}: {exc}") from None

        return ApiResponse(
            status=response.status_code,
            content_type=response.headers.get("Content-Type", ""),
            chunks=chunks(),
            close=response.close,
        )

    def close(self) -> None:
        self._session.close()

    def _refusal(self, status: int, message: str, credentials: Credentials, namespace: str | None) -> str:
        server = f"the history server at {self.base_url}"
        if status == 401 and credentials.token is None:
            return (
                f"{server} requires authentication (HTTP 401: {message}); {credentials.source} was sent. "
                f'Pass {TOKEN_FLAG} TOKEN (or set {TOKEN_ENV}), e.g. {TOKEN_FLAG} "$(kubectl create token NAME)", '
                "or switch to a kubeconfig context whose user has a token"
            )
        if status == 401:
            return (
                f"{server} did not accept the token from {credentials.source} (HTTP 401: {message}); "
                f"pass a valid one with {TOKEN_FLAG} TOKEN (or {TOKEN_ENV}), e.g. from `kubectl create token NAME`"
            )
        target = f"namespace {namespace!r}" if namespace else "what was asked for"
        return (
            f"{server} refused access to {target} (HTTP 403: {message}); the identity of the token from "
            f"{credentials.source} may not read that namespace. Ask for read access there "
            f"(e.g. get on rayclusters.ray.io), or pass another {TOKEN_FLAG} TOKEN"
        )


def _namespace_of(path: str, params: Params) -> str | None:
    """The namespace a request names: ``/enter_cluster/{namespace}/...`` or ``?namespace=``."""
    if path.startswith("/enter_cluster/"):
        parts = path.split("/")
        return unquote(parts[2]) if len(parts) > 2 and parts[2] else None
    return next((value for key, value in params if key == "namespace" and value), None)


def _note_plain_http(base_url: str, source: str) -> None:
    parts = urlsplit(base_url)
    if parts.scheme != "http":
        return
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        logger.info(
            "sending the token from %s to %s over plain HTTP (https, or kubectl port-forward, is safer)", source, host
        )


def _reason(exc: requests.ConnectionError) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "No route to host", "timed out"):
        if marker in text:
            return marker.lower()
    return "connection failed"

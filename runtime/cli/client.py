"""The history server over HTTP (``--server``, env ``RAY_HISTORY_SERVER``)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import requests

from runtime.cli.api import ApiResponse, HistoryApi, Params
from runtime.cli.errors import CliError, UsageError

DEFAULT_SERVER = "http://localhost:8080"
SERVER_ENV = "RAY_HISTORY_SERVER"
#: Entering a session may build its index first (minutes for a big session).
READ_TIMEOUT = 900.0
CONNECT_TIMEOUT = 10.0
STREAM_CHUNK = 64 * 1024


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

    def __init__(self, base_url: str) -> None:
        self.base_url = normalise_server_url(base_url)
        self.where = self.base_url
        self._session = requests.Session()

    def get(self, path: str, params: Params = (), *, stream: bool = False) -> ApiResponse:
        url = f"{self.base_url}{path}"
        # A followed log stream may be quiet for a long time: no read timeout there.
        timeout = (CONNECT_TIMEOUT, None if stream else READ_TIMEOUT)
        try:
            response = self._session.get(url, params=list(params), stream=stream, timeout=timeout)
        except requests.ConnectionError as exc:
            raise CliError(
                f"cannot reach the history server at {self.base_url} ({_reason(exc)}); "
                f"pass --server URL (or set {SERVER_ENV}), or read storage directly with --storage-backend"
            ) from None
        except requests.Timeout:
            raise CliError(f"the history server at {self.base_url} did not answer {path} in time") from None
        except requests.RequestException as exc:
            raise CliError(f"request to {url} failed: {exc}") from None

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


def _reason(exc: requests.ConnectionError) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "No route to host", "timed out"):
        if marker in text:
            return marker.lower()
    return "connection failed"

"""One way to ask the history server's HTTP API, wherever it runs.

``ray-history`` answers every query command through the same routes the Ray
Dashboard uses: either over HTTP from a running history server
(:mod:`runtime.cli.client`) or in-process from storage
(:mod:`runtime.cli.storage_source`), so both modes give the same answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from runtime.cli.errors import CliError, UsageError

Params = Sequence[tuple[str, str]]


@dataclass
class ApiResponse:
    """A status, headers and a body that may still be streaming."""

    status: int
    content_type: str
    chunks: Iterator[bytes]
    close: Callable[[], None] = field(default=lambda: None)

    def read(self) -> bytes:
        try:
            return b"".join(self.chunks)
        finally:
            self.close()


class HistoryApi(ABC):
    """A cookie-keeping client of the history server's routes."""

    #: where the answers come from, for messages (a URL or ``s3://bucket``)
    where: str = ""

    @abstractmethod
    def get(self, path: str, params: Params = (), *, stream: bool = False) -> ApiResponse:
        """GET ``path``; with ``stream`` the body is read lazily (log follow)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and the in-process app."""

    def __enter__(self) -> HistoryApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- helpers
    def get_json(self, path: str, params: Params = ()) -> Any:
        """The decoded JSON answer; CliError/UsageError naming the server's message."""
        response = self.get(path, params)
        body = response.read()
        check_status(response.status, body, self.where, path)
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise CliError(f"{self.where}{path}: the answer is not JSON (is this a Ray history server?)") from None


def error_message(body: bytes) -> str:
    """The ``msg`` of the server's ``{"result": false, "msg": ...}`` errors, else the text."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:500]
    if isinstance(decoded, dict) and decoded.get("msg"):
        return str(decoded["msg"])
    return body.decode("utf-8", "replace").strip()[:500]


def check_status(status: int, body: bytes, where: str, path: str) -> None:
    """400 is the caller's mistake (exit 2); anything else non-2xx is a failure (exit 1)."""
    if 200 <= status < 300:
        return
    message = error_message(body) or f"HTTP {status}"
    if status == 400:
        raise UsageError(message)
    if status == 404:
        raise CliError(message)
    raise CliError(f"{where}{path} answered HTTP {status}: {message}")

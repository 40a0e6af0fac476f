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
from runtime.cli.terminal import printable

Params = Sequence[tuple[str, str]]
#: The most of one JSON answer the CLI holds (the body, then its decoding). The biggest
#: legitimate answers (``/clusters`` of 100,000 sessions, 10,000 detailed tasks) are tens
#: of MiB; past this a broken or hostile server could make the CLI buffer without end.
MAX_ANSWER_BYTES = 128 * 1024 * 1024
#: An error answer is only ever shown (its first 500 characters): no need to read more.
MAX_ERROR_BYTES = 64 * 1024


class AnswerTooLargeError(CliError):
    """A body longer than the caller's limit (the connection is closed, not drained)."""


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

    def read_at_most(self, limit: int) -> bytearray:
        """The whole body; AnswerTooLargeError past ``limit`` bytes (read no further)."""
        try:
            # One growing buffer, not a list joined at the end: about ``limit`` bytes at most.
            body = bytearray()
            for chunk in self.chunks:
                body += chunk
                if len(body) > limit:
                    raise AnswerTooLargeError(f"the answer is larger than {limit // (1024 * 1024)} MiB")
            return body
        finally:
            self.close()

    def head(self, limit: int) -> bytes:
        """At most the first ``limit`` bytes of the body (an error message, to show)."""
        try:
            body = bytearray()
            for chunk in self.chunks:
                body += chunk[: limit - len(body)]
                if len(body) >= limit:
                    break
            return bytes(body)
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
        if not 200 <= response.status < 300:
            check_status(response.status, response.head(MAX_ERROR_BYTES), self.where, path)
        try:
            body = response.read_at_most(MAX_ANSWER_BYTES)
        except AnswerTooLargeError as exc:
            raise CliError(f"{self.where}{path}: {exc} (is this a Ray history server?)") from None
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise CliError(f"{self.where}{path}: the answer is not JSON (is this a Ray history server?)") from None


def error_message(body: bytes) -> str:
    """The ``msg`` of the server's ``{"result": false, "msg": ...}`` errors, else the text;
    at most 500 characters, control characters shown as escapes (it is printed)."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        decoded = None
    is_error = isinstance(decoded, dict) and decoded.get("msg")
    text = str(decoded["msg"]) if is_error else body.decode("utf-8", "replace")
    return printable(text.strip()[:500])


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

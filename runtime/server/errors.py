"""One error vocabulary for every route: an :class:`ApiError` becomes
``{"result": false, "msg": "..."}`` with its HTTP status, so a client always gets
JSON naming what was wrong."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from runtime.server.load_errors import SessionLoadError
from runtime.storage.errors import InvalidKeyError, StorageError, StorageUnavailableError

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answer: ``status`` and a message for the client."""

    def __init__(
        self, status: int, msg: str, *, headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(msg)
        self.status = status
        self.msg = msg
        self.headers = headers or {}
        self.extra = extra or {}  # more fields of the JSON body


class IndexBuildingError(ApiError):
    """The session's index is being built: 503 with the build's progress
    (``phase``, ``done``, ``total``) and when to ask again."""

    def __init__(self, msg: str, progress: dict[str, Any], retry_after: int, session: str = "") -> None:
        headers = {"Retry-After": str(retry_after), "Cache-Control": "no-store"}
        super().__init__(503, msg, headers=headers, extra=progress)
        self.progress = progress
        self.session = session


def json_response(body: bytes, status: int = 200) -> Response:
    """A JSON answer of the history server's own (never a proxied one)."""
    return Response(body, status=status, mimetype="application/json")


def json_error(
    status: int, msg: str, headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None
) -> Response:
    response = json_response(orjson.dumps({"result": False, "msg": msg, **(extra or {})}), status)
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError) -> Response:
        return json_error(exc.status, exc.msg, exc.headers, exc.extra)

    @app.errorhandler(InvalidKeyError)
    def _invalid_key(exc: InvalidKeyError) -> Response:
        return json_error(400, str(exc))

    @app.errorhandler(StorageUnavailableError)
    def _storage_down(exc: StorageUnavailableError) -> Response:
        logger.warning("storage unavailable: %s", exc)
        return json_error(503, f"object storage is unavailable, retry shortly: {exc}", {"Retry-After": "5"})

    @app.errorhandler(SessionLoadError)
    def _load_failed(exc: SessionLoadError) -> Response:
        logger.warning("session load failed: %s", exc)
        return json_error(503, str(exc), {"Retry-After": "5"})

    @app.errorhandler(StorageError)
    def _storage_error(exc: StorageError) -> Response:
        logger.error("storage error: %s", exc)
        return json_error(502, f"object storage error: {exc}")

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        return json_error(status, exc.description or exc.name)

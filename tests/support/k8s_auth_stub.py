"""A stand-in for the Kubernetes API's TokenReview and SubjectAccessReview endpoints.

No kube-apiserver can run here, so the real ``kubernetes`` client is pointed at this
loopback server through a kubeconfig. It speaks the real shapes of
``authentication.k8s.io/v1`` and ``authorization.k8s.io/v1``: every request body is
checked against the client's own models (unknown fields fail the request with 400, as a
strict API server would), and answers are deserialized by the client into its models, so a
shape mismatch on either side breaks the tests.

Tokens map to users; access is a set of ``(user or group, namespace)`` pairs. ``down``
makes every call fail like an unreachable API server (connection closed).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes import client as kclient

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def _json_fields(model: type) -> set[str]:
    return set(getattr(model, "attribute_map", {}).values())


def _check_shape(body: dict[str, Any], kind: str, spec_model: type, nested: dict[str, type]) -> None:
    """Raise ValueError when ``body`` is not a ``kind`` the client's models describe."""
    if body.get("kind") != kind or not str(body.get("apiVersion", "")).endswith("/v1"):
        raise ValueError(f"expected kind {kind}, got {body.get('kind')!r} {body.get('apiVersion')!r}")
    spec = body.get("spec") or {}
    unknown = set(spec) - _json_fields(spec_model)
    if unknown:
        raise ValueError(f"unknown spec fields {sorted(unknown)}")
    for key, model in nested.items():
        if isinstance(spec.get(key), dict):
            extra = set(spec[key]) - _json_fields(model)
            if extra:
                raise ValueError(f"unknown {key} fields {sorted(extra)}")


@dataclass
class AuthApiStub:
    """Scripted identities and access rules; records every review it answered."""

    tokens: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    access: set[tuple[str, str]] = field(default_factory=set)
    down: bool = False
    token_reviews: list[dict[str, Any]] = field(default_factory=list)
    access_reviews: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, token: str = "server-sa-token") -> dict[str, Any]:  # noqa: S107 - a test value
        """A kubeconfig for the stub (the server's own credentials: any token works)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stub", "cluster": {"server": self.url}}],
            "users": [{"name": "stub", "user": {"token": token}}],
            "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
            "current-context": "stub",
        }

    def api_client(self) -> kclient.ApiClient:
        from kubernetes import config as kconfig

        return kconfig.new_client_from_config_dict(self.kubeconfig())  # type: ignore[no-untyped-call]

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path == TOKEN_REVIEWS:
            _check_shape(body, "TokenReview", kclient.V1TokenReviewSpec, {})
            self.token_reviews.append(body)
            found = self.tokens.get(body["spec"].get("token", ""))
            status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
            if found is not None:
                user, groups = found
                status = {
                    "authenticated": True,
                    "user": {"username": user, "uid": f"uid-{user}", "groups": list(groups)},
                }
            return {**body, "status": status}
        if path == ACCESS_REVIEWS:
            _check_shape(
                body,
                "SubjectAccessReview",
                kclient.V1SubjectAccessReviewSpec,
                {"resourceAttributes": kclient.V1ResourceAttributes},
            )
            self.access_reviews.append(body)
            spec = body["spec"]
            namespace = (spec.get("resourceAttributes") or {}).get("namespace", "")
            subjects = [spec.get("user", ""), *(spec.get("groups") or [])]
            allowed = any((subject, namespace) in self.access for subject in subjects)
            reason = "RBAC: allowed by stub" if allowed else ""
            return {**body, "status": {"allowed": allowed, "reason": reason}}
        raise KeyError(path)


def _handler(stub: AuthApiStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            if stub.down:
                self.close_connection = True
                self.connection.close()
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                answer = stub.answer(self.path.split("?", 1)[0], json.loads(self.rfile.read(length)))
                code = 201
            except KeyError:
                code, answer = 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
            except ValueError as error:
                code = 400
                answer = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": str(error), "code": 400}
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def auth_api_stub() -> Iterator[AuthApiStub]:
    stub = AuthApiStub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    stub.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()

"""A real OpenID Connect provider on loopback (npm ``oauth2-mock-server``), and a Flask app
with the real access-control gate served over real HTTP, for the OIDC login tests.

:class:`MockOidcProvider` starts ``tests/support/oidc_mock_provider.mjs`` (a free
127.0.0.1 port); :meth:`MockOidcProvider.set_claims` scripts the next ID tokens (see the
script for the directives). :func:`serve_gated_app` serves a minimal app -- ``/`` (the
UI's ``ui.index``), ``/ns/<namespace>`` (an HTML page) and ``/data/<namespace>`` (JSON),
both authorized per namespace -- behind ``install(...)`` with ``--auth oidc`` and a
static policy, on its own free port; the redirect URL points back at it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Blueprint, Flask, Response, g, jsonify
from werkzeug.serving import BaseWSGIServer, make_server

from runtime.server.auth import authorize, build_access_control, install, parse_auth, parse_oidc
from runtime.server.auth.model import Identity

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("oidc_mock_provider.mjs")
PACKAGE = REPO_ROOT / "node_modules" / "oauth2-mock-server"
CLIENT_ID = "ray-history"
CLIENT_SECRET = "a-client-secret-of-enough-length"
POLICY = "namespaces:\n  team-a:\n    users: [alice@example.com]\n  team-b:\n    groups: [team-b-devs]\n"


class MockOidcProvider:
    """The provider process; ``url`` is its issuer."""

    def __init__(self, workdir: Path) -> None:
        self.claims_file = workdir / "claims.json"
        self.claims_file.write_text("{}")
        self.url = ""
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> MockOidcProvider:
        node = shutil.which("node")
        if node is None or not PACKAGE.exists():
            pytest.skip("node and node_modules/oauth2-mock-server are needed (make test runs `npm ci`)")
        env = {**os.environ, "OIDC_MOCK_CLAIMS_FILE": str(self.claims_file)}
        self._process = subprocess.Popen([node, str(SCRIPT)], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(self._process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout=20)
        if not ready or not ready[0].strip():
            self.stop()
            raise RuntimeError("the mock OIDC provider did not start within 20 s")
        self.url = json.loads(ready[0])["url"]
        return self

    def set_claims(self, claims: dict[str, Any]) -> None:
        """Merged into every following ID token (``None`` deletes a claim; ``__*`` directives)."""
        self.claims_file.write_text(json.dumps(claims))

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


@contextmanager
def mock_oidc_provider(workdir: Path) -> Iterator[MockOidcProvider]:
    provider = MockOidcProvider(workdir)
    try:
        yield provider.start()
    finally:
        provider.stop()


def gated_app(
    issuer: str, app_url: str, workdir: Path, groups_claim: str = "groups", cookie_key_file: str | None = None
) -> Flask:
    """The minimal app behind the real gate, ``--auth oidc --authz static``."""
    secret = workdir / "client-secret"
    secret.write_text(CLIENT_SECRET + "\n")
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY)
    settings = parse_oidc(
        issuer, CLIENT_ID, str(secret), groups_claim, f"{app_url}/oauth2/callback", cookie_key_file=cookie_key_file
    )
    control = build_access_control(parse_auth("oidc", "static", policy_file=str(policy)), oidc=settings)
    app = Flask(__name__)
    ui = Blueprint("ui", __name__)
    data = Blueprint("data", __name__)

    def who() -> Identity:
        found: Identity = g.identity
        return found

    @ui.get("/")
    def index() -> str:
        return f"<h1>home</h1><p id='user'>{who().user}</p><a href='/logout'>log out</a>"

    @data.get("/ns/<namespace>")
    def page(namespace: str) -> str:
        authorize(namespace)
        return f"<h1>namespace {namespace}</h1><p id='user'>{who().user}</p>"

    @data.get("/data/<namespace>")
    def read(namespace: str) -> Response:
        authorize(namespace)
        return jsonify({"namespace": namespace, "user": who().user, "groups": list(who().groups), "via": who().via})

    app.register_blueprint(ui)
    app.register_blueprint(data)
    install(app, control)
    return app


@dataclass
class ServedApp:
    url: str
    server: BaseWSGIServer


@contextmanager
def serve_gated_app(
    issuer: str, workdir: Path, groups_claim: str = "groups", cookie_key_file: str | None = None
) -> Iterator[ServedApp]:
    """``gated_app`` over real HTTP on a free 127.0.0.1 port (threaded)."""
    server = make_server("127.0.0.1", 0, Flask(__name__), threaded=True)
    url = f"http://127.0.0.1:{server.server_port}"
    server.app = gated_app(issuer, url, workdir, groups_claim, cookie_key_file)  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ServedApp(url=url, server=server)
    finally:
        server.shutdown()
        thread.join(timeout=10)

"""After an OIDC login the browser returns to the page it asked for, also under a
shareable ``/sessions/...`` URL: there the session scope moved the session part of the
path into ``SCRIPT_NAME`` (runtime/server/session_scope.py), and ``next`` must keep it."""

from __future__ import annotations

from flask import Flask

from runtime.server.auth.oidc import login_redirect

SCOPE = "/sessions/default/raycluster-demo/session_2026-11-22_01-45-25_333080_9264"


def test_next_keeps_the_session_part_of_the_path() -> None:
    app = Flask(__name__)
    with app.test_request_context("/", environ_overrides={"SCRIPT_NAME": SCOPE, "PATH_INFO": "/"}):
        assert login_redirect("/login").headers["Location"] == f"/login?next={SCOPE}/"
    with app.test_request_context(
        "/api/jobs/", query_string="limit=5", environ_overrides={"SCRIPT_NAME": SCOPE, "PATH_INFO": "/api/jobs/"}
    ):
        assert login_redirect("/login").headers["Location"] == f"/login?next={SCOPE}/api/jobs/%3Flimit%3D5"


def test_outside_a_session_scope_next_is_the_path() -> None:
    app = Flask(__name__)
    with app.test_request_context("/clusters"):
        assert login_redirect("/login").headers["Location"] == "/login?next=/clusters"

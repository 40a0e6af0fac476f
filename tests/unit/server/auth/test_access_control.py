"""runtime/server/auth with the real ``kubernetes`` client against the TokenReview / SubjectAccessReview stand-in.

A minimal Flask app carries the hooks, so each behaviour is checked over real HTTP
requests: 401 without or with bad credentials, 403 on another namespace, 503 (never an
allow) when the API server is down, caching by token hash, and the fail-closed net for a
route that forgets to decide.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Blueprint, Flask, jsonify

from runtime.server.auth import (
    AccessControl,
    AuthUnavailableError,
    build_access_control,
    install,
    no_data_response,
    parse_auth,
    readable_namespaces,
)
from runtime.server.auth import authorize as authorize_namespace
from runtime.server.auth.kubernetes import (
    KubernetesReviews,
    ResourceCheck,
    subject_digest,
    token_fingerprint,
    token_lifetime,
)
from runtime.server.auth.model import Identity
from tests.support.k8s_auth_stub import AuthApiStub, auth_api_stub

ALICE = "alice-token"
BOB = "bob-token"


@pytest.fixture
def stub() -> Iterator[AuthApiStub]:
    with auth_api_stub() as api:
        api.tokens = {ALICE: ("alice@example.com", ("team-a",)), BOB: ("bob@example.com", ("team-b",))}
        api.access = {("team-a", "team-a"), ("bob@example.com", "team-b")}
        yield api


def _app(control: AccessControl) -> Flask:
    app = Flask(__name__)
    health = Blueprint("health", __name__)
    data = Blueprint("data", __name__)

    @health.get("/livez")
    def livez() -> str:
        return "ok"

    @data.get("/data/<namespace>")  # the gate authorizes <namespace> before the view runs
    @data.get("/data/<namespace>/<name>/<session>")
    def read(namespace: str, name: str = "", session: str = "") -> object:
        return jsonify({"namespace": namespace, "secret": f"logs of {namespace}"})

    @data.get("/by-cookie")
    def by_cookie() -> object:
        from flask import request

        return jsonify({"secret": f"logs of {request.cookies.get('cluster_namespace')}"})

    @data.get("/explicit/<ns>")
    def explicit(ns: str) -> object:
        authorize_namespace(ns, "c", "s")
        return jsonify({"namespace": ns})

    @data.get("/list")
    def listing() -> object:
        return jsonify(sorted(readable_namespaces(["team-a", "team-b", "team-c"])))

    @data.get("/forgot")
    def forgot() -> object:
        return jsonify({"leak": "data of some namespace"})

    @data.get("/marks-another-answer")
    def marks_another_answer() -> object:
        no_data_response(jsonify({}))  # marking one answer exempts that answer only
        return jsonify({"leak": "data of some namespace"})

    app.register_blueprint(health)
    app.register_blueprint(data)
    install(app, control)
    return app


def _kube_app(stub: AuthApiStub) -> Flask:
    config = parse_auth("kubernetes", "kubernetes")
    return _app(build_access_control(config, stub.api_client))


def _get(
    app: Flask, path: str, token: str | None = None
) -> tuple[int, dict[str, object] | list[object], dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = app.test_client().get(path, headers=headers)
    return response.status_code, response.get_json(silent=True), dict(response.headers)


def test_allowed_user_reads_its_namespace_and_only_it(stub: AuthApiStub) -> None:
    app = _kube_app(stub)
    status, body, _ = _get(app, "/data/team-a", ALICE)
    assert (status, body) == (200, {"namespace": "team-a", "secret": "logs of team-a"})
    status, body, _ = _get(app, "/data/team-b", ALICE)
    assert status == 403
    assert isinstance(body, dict) and "alice@example.com may not read namespace team-b" in str(body["msg"])
    assert "logs of" not in json.dumps(body)


def test_selection_cookies_are_authorized_on_every_request(stub: AuthApiStub) -> None:
    """Cookies select a session; they are never a capability: a forged cookie for another namespace is 403."""
    client = _kube_app(stub).test_client()
    client.set_cookie("cluster_namespace", "team-b")
    client.set_cookie("cluster_name", "c")
    client.set_cookie("session_name", "s")
    answer = client.get("/by-cookie", headers={"Authorization": f"Bearer {ALICE}"})
    assert answer.status_code == 403 and "logs of" not in answer.get_data(as_text=True)
    client.set_cookie("cluster_namespace", "team-a")
    answer = client.get("/by-cookie", headers={"Authorization": f"Bearer {ALICE}"})
    assert answer.get_json() == {"secret": "logs of team-a"}


def test_views_may_decide_explicitly(stub: AuthApiStub) -> None:
    app = _kube_app(stub)
    assert _get(app, "/explicit/team-a", ALICE)[0] == 200
    assert _get(app, "/explicit/team-b", ALICE)[0] == 403


def test_listing_is_filtered_per_caller(stub: AuthApiStub) -> None:
    app = _kube_app(stub)
    assert _get(app, "/list", ALICE)[1] == ["team-a"]
    assert _get(app, "/list", BOB)[1] == ["team-b"]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "authentication required"),
        ({"Authorization": "Bearer not-a-known-token"}, "not accepted"),
        ({"Authorization": "Basic YWxpY2U6cHc="}, "must be 'Bearer <token>'"),
        ({"Authorization": "Bearer "}, "must be 'Bearer <token>'"),
    ],
)
def test_missing_or_bad_credentials_are_401(stub: AuthApiStub, headers: dict[str, str], message: str) -> None:
    response = _kube_app(stub).test_client().get("/data/team-a", headers=headers)
    assert response.status_code == 401
    assert message in response.get_json()["msg"]
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_api_server_down_is_503_never_an_allow(stub: AuthApiStub) -> None:
    app = _kube_app(stub)
    stub.down = True
    status, body, headers = _get(app, "/data/team-a", ALICE)
    assert status == 503 and headers["Retry-After"] == "5"
    assert "Kubernetes API did not answer" in str(body)
    # Authenticated earlier (cached), but the access decision cannot be made: still 503.
    stub.down = False
    assert _get(app, "/data/team-a", ALICE)[0] == 200
    stub.down = True
    assert _get(app, "/data/team-b", ALICE)[0] == 503


def test_probes_stay_open_without_credentials(stub: AuthApiStub) -> None:
    stub.down = True
    response = _kube_app(stub).test_client().get("/livez")
    assert (response.status_code, response.data) == (200, b"ok")


def test_a_route_without_a_decision_fails_closed(stub: AuthApiStub, caplog: pytest.LogCaptureFixture) -> None:
    status, body, _ = _get(_kube_app(stub), "/forgot", ALICE)
    assert status == 503
    assert "made no access decision" in str(body) and "data of some namespace" not in str(body)
    assert "answered without an access decision" in caplog.text


def test_marking_one_answer_as_data_free_does_not_exempt_another(stub: AuthApiStub) -> None:
    status, body, _ = _get(_kube_app(stub), "/marks-another-answer", ALICE)
    assert status == 503 and "data of some namespace" not in str(body)


def test_reviews_are_cached_by_token_hash_and_decision(stub: AuthApiStub) -> None:
    app = _kube_app(stub)
    for _ in range(3):
        assert _get(app, "/data/team-a", ALICE)[0] == 200
    assert len(stub.token_reviews) == 1
    assert len(stub.access_reviews) == 1
    reviews = app.extensions["historyserver.auth"].authenticators[0].reviews
    assert ALICE not in repr(reviews._tokens._entries)  # keyed by hash only
    assert token_fingerprint(ALICE) in reviews._tokens._entries


def test_review_request_shapes(stub: AuthApiStub) -> None:
    _get(_kube_app(stub), "/data/team-a", ALICE)
    token_review = stub.token_reviews[0]
    assert (token_review["apiVersion"], token_review["kind"]) == ("authentication.k8s.io/v1", "TokenReview")
    assert token_review["spec"] == {"token": ALICE}
    spec = stub.access_reviews[0]["spec"]
    assert spec == {
        "user": "alice@example.com",
        "groups": ["team-a"],
        "uid": "uid-alice@example.com",
        "resourceAttributes": {"namespace": "team-a", "verb": "get", "group": "ray.io", "resource": "rayclusters"},
    }


SCOPES = "scopes.authorization.openshift.io"


def _with_extra(stub: AuthApiStub, extra_per_token: dict[str, dict[str, list[str]]]) -> None:
    """TokenReviews of these tokens also return ``user.extra`` (e.g. OpenShift token scopes)."""
    original = stub.answer

    def answer(path: str, body: dict[str, Any]) -> dict[str, Any]:
        result = original(path, body)
        token = body.get("spec", {}).get("token", "")
        if path.endswith("/tokenreviews") and token in extra_per_token and result["status"].get("authenticated"):
            result["status"]["user"]["extra"] = extra_per_token[token]
        return result

    stub.answer = answer  # type: ignore[method-assign]


def test_subject_access_review_carries_uid_and_extra_of_the_token_review(stub: AuthApiStub) -> None:
    """A scoped token is authorized with its scopes, never as its unscoped user."""
    _with_extra(stub, {"scoped-token": {SCOPES: ["user:info"]}})
    stub.tokens["scoped-token"] = ("alice", ("team-a-devs",))
    stub.access.add(("alice", "team-a"))
    _get(_kube_app(stub), "/data/team-a", "scoped-token")
    spec = stub.access_reviews[-1]["spec"]
    assert spec.get("uid") == "uid-alice", spec
    assert spec.get("extra") == {SCOPES: ["user:info"]}, spec


def test_decisions_are_cached_per_uid_and_extra(stub: AuthApiStub) -> None:
    """Two tokens of one user with different scopes are decided apart; the key holds a hash, not the scopes."""
    _with_extra(stub, {"full": {}, "scoped": {SCOPES: ["user:info"]}})
    stub.tokens.update({"full": ("carol", ()), "scoped": ("carol", ())})
    stub.access.add(("carol", "team-a"))
    app = _kube_app(stub)
    for token in ("full", "scoped", "full", "scoped"):
        assert _get(app, "/data/team-a", token)[0] == 200
    assert [review["spec"].get("extra") for review in stub.access_reviews] == [None, {SCOPES: ["user:info"]}]
    decisions = repr(app.extensions["historyserver.auth"].authorizer._decisions._entries)
    assert "user:info" not in decisions
    scoped = Identity(user="carol", via="kubernetes", uid="uid-carol", extra=((SCOPES, ("user:info",)),))
    assert subject_digest(scoped) in decisions


def test_kubernetes_identities_keep_their_system_names(stub: AuthApiStub) -> None:
    """A TokenReview's names are Kubernetes' own: a service account is reviewed as itself, unprefixed."""
    account = "system:serviceaccount:team-a:runner"
    stub.tokens["sa-token"] = (account, ("system:serviceaccounts", "system:authenticated"))
    stub.access.add((account, "team-a"))
    config = parse_auth("kubernetes", "kubernetes")
    assert _get(_app(build_access_control(config, stub.api_client)), "/data/team-a", "sa-token")[0] == 200
    spec = stub.access_reviews[-1]["spec"]
    assert (spec["user"], spec["groups"]) == (account, ["system:serviceaccounts", "system:authenticated"])


def test_authz_resource_is_configurable(stub: AuthApiStub) -> None:
    config = parse_auth("kubernetes", "kubernetes", resource="list:pods")
    app = _app(build_access_control(config, stub.api_client))
    _get(app, "/data/team-a", ALICE)
    attributes = stub.access_reviews[0]["spec"]["resourceAttributes"]
    assert (attributes["verb"], attributes["group"], attributes["resource"]) == ("list", "", "pods")


def _jwt(exp: float) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part({'exp': exp, 'sub': 'x'})}.signature"


def test_token_cache_lifetime_is_bounded_by_expiry_and_five_minutes() -> None:
    now = time.time()
    assert token_lifetime(_jwt(now + 60), now) == pytest.approx(60)
    assert token_lifetime(_jwt(now + 3600), now) == 300
    assert token_lifetime(_jwt(now - 5), now) <= 0  # expired: never cached
    assert token_lifetime("opaque-token", now) == 300


def test_an_expired_token_is_asked_again(stub: AuthApiStub) -> None:
    expired = _jwt(time.time() - 1)
    stub.tokens[expired] = ("carol@example.com", ("team-a",))
    app = _kube_app(stub)
    assert _get(app, "/data/team-a", expired)[0] == 200
    del stub.tokens[expired]  # the API server now rejects it
    assert _get(app, "/data/team-a", expired)[0] == 401


def test_audit_line_per_decision(stub: AuthApiStub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runtime.server.audit")
    app = _kube_app(stub)
    _get(app, "/data/team-a/c/s", ALICE)
    _get(app, "/data/team-b/c/s", ALICE)
    audits = [r.audit for r in caplog.records if hasattr(r, "audit")]  # type: ignore[attr-defined]
    assert audits == [
        {
            "identity": "alice@example.com",
            "via": "kubernetes",
            "namespace": "team-a",
            "cluster": "c",
            "session": "s",
            "route": "/data/team-a/c/s",
            "decision": "allow",
        },
        {
            "identity": "alice@example.com",
            "via": "kubernetes",
            "namespace": "team-b",
            "cluster": "c",
            "session": "s",
            "route": "/data/team-b/c/s",
            "decision": "deny",
        },
    ]
    assert ALICE not in caplog.text


def test_static_policy_with_globs_and_reload(stub: AuthApiStub, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("namespaces:\n  team-*:\n    groups: [team-a]\n  team-b:\n    users: ['bob@*']\n")
    app = _app(build_access_control(parse_auth("kubernetes", "static", policy_file=str(policy)), stub.api_client))
    assert _get(app, "/list", ALICE)[1] == ["team-a", "team-b", "team-c"]
    assert _get(app, "/list", BOB)[1] == ["team-b"]
    policy.write_text("namespaces:\n  team-c:\n    groups: [team-a]\n")
    future = time.time() + 5
    import os

    os.utime(policy, (future, future))
    assert _get(app, "/list", ALICE)[1] == ["team-c"]
    policy.write_text("namespaces: [broken")  # a broken file keeps the last good policy
    os.utime(policy, (future + 5, future + 5))
    assert _get(app, "/list", ALICE)[1] == ["team-c"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("none,kubernetes", ""), "--auth: none cannot be combined"),
        (("kubernetes", "none"), "--authz none is only allowed with --auth none"),
        (("kubernetes", ""), "--authz: '' is not one of"),
        (("none", "kubernetes"), "--authz kubernetes needs --auth"),
        (("ldap", ""), "--auth: 'ldap' is not one of"),
        (("kubernetes", "static"), "--authz-policy: a policy file is required"),
    ],
)
def test_bad_combinations_name_the_flag(args: tuple[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_auth(*args)


@pytest.mark.parametrize(
    ("auth", "prefixes", "message"),
    [
        ("kubernetes", {"username_prefix": "oidc:"}, "--oidc-username-prefix: only used with --auth oidc or"),
        ("kubernetes", {"groups_prefix": "oidc:"}, "--oidc-groups-prefix: only used with --auth oidc or"),
        ("oidc", {"username_prefix": "system:oidc:"}, "--oidc-username-prefix: 'system:oidc:' starts with 'system:'"),
        ("trusted-header", {"groups_prefix": "system:"}, "--oidc-groups-prefix: 'system:' starts with 'system:'"),
        ("oidc", {"groups_prefix": "a b"}, "--oidc-groups-prefix: 'a b' may not contain whitespace"),
    ],
)
def test_bad_identity_provider_prefixes_name_the_flag(auth: str, prefixes: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_auth(auth, "kubernetes", **prefixes)


def test_identity_provider_prefixes_default_to_none() -> None:
    names = parse_auth("oidc,kubernetes", "kubernetes").provider_names
    assert (names.username_prefix, names.groups_prefix) == ("", "")
    names = parse_auth("trusted-header", "kubernetes", username_prefix="oidc:", groups_prefix="idp:").provider_names
    assert (names.username_prefix, names.groups_prefix) == ("oidc:", "idp:")


def test_bad_resource_names_the_flag() -> None:
    with pytest.raises(ValueError, match="--authz-resource"):
        parse_auth("kubernetes", "kubernetes", resource="get:")
    assert ResourceCheck.parse("get:rayclusters.ray.io") == ResourceCheck()


def test_reviews_without_the_servers_rbac_say_what_is_missing(stub: AuthApiStub) -> None:
    class Refusing:
        def create_token_review(self, *_: object, **__: object) -> object:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=403, reason="ForbiddenError")

    reviews = KubernetesReviews(stub.api_client())
    reviews._authn = Refusing()  # type: ignore[assignment]
    with pytest.raises(AuthUnavailableError, match="needs create on tokenreviews"):
        reviews.identity(ALICE)
    assert reviews.may_read(Identity("alice@example.com", ("team-a",)), "team-a") is True


def test_audit_fields_are_json_keys_with_log_format_json() -> None:
    from runtime.common.process import JsonFormatter

    record = logging.LogRecord("runtime.server.audit", logging.INFO, __file__, 1, "access allow", (), None)
    record.audit = {"identity": "alice@example.com", "namespace": "team-a", "decision": "allow"}
    line = json.loads(JsonFormatter().format(record))
    assert (line["identity"], line["namespace"], line["decision"]) == ("alice@example.com", "team-a", "allow")

"""``--auth trusted-header``: IAP and ALB assertions signed with local P-256 keys.

The keys are served by a real HTTP server on loopback (a JWKS for IAP, one PEM per key id
for ALB, as the real endpoints do); a minimal Flask app with the real gate is served on
loopback too, and every case is a real HTTP request: valid assertions establish the
identity, every forgery is a 401, unreachable keys are a 503.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from flask import Blueprint, Flask, Response, g, jsonify
from werkzeug.serving import make_server

from runtime.server.auth import AccessControl, ProviderNames, build_access_control, install, parse_auth
from runtime.server.auth.front_door import (
    ALB_KEY_URL,
    IAP_ISSUER,
    FrontDoorSettings,
    front_door_authenticator,
    parse_front_door,
)
from runtime.server.auth.model import Identity

AUDIENCE = "/projects/123456789/global/backendServices/987654321"
ARN = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/app/history/50dc6c495c0c9188"
OTHER_ARN = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/app/other/60dc6c495c0c9188"
ALB_KID = "4e7d0ab1-6c2a-4f43-9a51-3b1c2f7e9d10"


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _jwk(key: ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    return found | {"kid": kid, "alg": "ES256", "use": "sig"}


@dataclass
class KeyServer:
    """Google's JWKS at /jwks, ALB's PEMs at /alb/<region>/<kid>; counts every fetch."""

    jwks: list[dict[str, Any]] = field(default_factory=list)
    pems: dict[str, bytes] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def jwks_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks"

    @property
    def alb_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alb/{{region}}/{{kid}}"

    def count(self, prefix: str) -> int:
        return sum(1 for path in self.hits if path.startswith(prefix))


@contextmanager
def key_server() -> Iterator[tuple[KeyServer, ThreadingHTTPServer]]:
    state = KeyServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits.append(self.path)
            if self.path == "/jwks":
                body, kind = json.dumps({"keys": state.jwks}).encode(), "application/json"
            elif self.path.startswith("/alb/eu-west-1/") and self.path.rsplit("/", 1)[1] in state.pems:
                body, kind = state.pems[self.path.rsplit("/", 1)[1]], "text/plain"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield state, server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def keys() -> Iterator[tuple[KeyServer, ThreadingHTTPServer]]:
    with key_server() as served:
        yield served


class AllowTeamA:
    def may_read(self, who: Identity, namespace: str) -> bool:
        return namespace == "team-a"


@contextmanager
def serving(control: AccessControl) -> Iterator[str]:
    """A minimal app with the real gate on loopback; /data/<namespace> echoes the identity."""
    app = Flask(__name__)
    data = Blueprint("data", __name__)

    @data.get("/data/<namespace>")
    def read(namespace: str) -> Response:
        who: Identity = g.identity
        return jsonify({"user": who.user, "groups": list(who.groups), "via": who.via, "namespace": namespace})

    app.register_blueprint(data)
    install(app, control)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _iap_settings(state: KeyServer, **changes: Any) -> FrontDoorSettings:
    settings = parse_front_door("iap", iap_audience=AUDIENCE, iap_jwks_url=state.jwks_url)
    assert settings is not None
    return FrontDoorSettings(**(settings.__dict__ | changes))


def _alb_settings(state: KeyServer, groups_claim: str = "groups") -> FrontDoorSettings:
    settings = parse_front_door("alb", alb_arn=ARN, alb_key_url=state.alb_url, groups_claim=groups_claim)
    assert settings is not None
    return settings


@contextmanager
def app_for(settings: FrontDoorSettings, names: ProviderNames | None = None) -> Iterator[str]:
    control = AccessControl(
        authenticators=(front_door_authenticator(settings),),
        authorizer=AllowTeamA(),
        provider_names=names or ProviderNames(),
    )
    with serving(control) as url:
        yield url


def _call(url: str, headers: dict[str, str], namespace: str = "team-a") -> requests.Response:
    return requests.get(f"{url}/data/{namespace}", headers=headers, timeout=10)


def iap_token(key: ec.EllipticCurvePrivateKey, kid: str = "iap-1", **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": IAP_ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, "email": "alice@example.com"}
    body |= {"sub": "accounts.google.com:1234"} | claims
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm="ES256", headers={"kid": kid})


def _b64(data: bytes, padded: bool = True) -> str:
    text = base64.urlsafe_b64encode(data).decode()
    return text if padded else text.rstrip("=")


def alb_token(
    key: ec.EllipticCurvePrivateKey,
    signer: str = ARN,
    kid: str = ALB_KID,
    padded: bool = True,
    alg: str = "ES256",
    **claims: Any,
) -> str:
    """As ALB emits it: ``signer``/``kid``/``exp`` in the header, base64url *with* padding, the padded text signed."""
    exp = int(time.time()) + 120
    header = {"alg": alg, "kid": kid, "signer": signer, "iss": "https://idp.example.com", "client": "abc", "exp": exp}
    payload = {"sub": "1234", "email": "bob@example.com", "groups": ["team-a"], "exp": exp, "iss": "x"} | claims
    signing_input = f"{_b64(json.dumps(header).encode(), padded)}.{_b64(json.dumps(payload).encode(), padded)}"
    der = key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'), padded)}"


def _resign_hs256(token: str, secret: bytes) -> str:
    head, body, _ = token.split(".")
    header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))) | {"alg": "HS256"}
    signing_input = f"{_b64(json.dumps(header).encode(), False)}.{body}"
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac, False)}"


def _alg_none(token: str) -> str:
    head, body, _ = token.split(".")
    header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))) | {"alg": "none"}
    return f"{_b64(json.dumps(header).encode(), False)}.{body}."


def _tamper(token: str, **claims: Any) -> str:
    head, body, signature = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))) | claims
    return f"{head}.{_b64(json.dumps(payload).encode(), '=' in body)}.{signature}"


# --- IAP -------------------------------------------------------------------------------


def test_iap_assertion_establishes_the_email(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, _ = keys
    key = _new_key()
    state.jwks = [_jwk(key, "iap-1")]
    with app_for(_iap_settings(state)) as url:
        answer = _call(url, {"x-goog-iap-jwt-assertion": iap_token(key)})
        assert answer.status_code == 200
        assert answer.json() == {"user": "alice@example.com", "groups": [], "via": "iap", "namespace": "team-a"}
        prefixed = iap_token(key, email="accounts.google.com:carol@example.com")
        assert _call(url, {"x-goog-iap-jwt-assertion": prefixed}).json()["user"] == "carol@example.com"
        assert _call(url, {"x-goog-iap-jwt-assertion": iap_token(key)}, "team-b").status_code == 403
    assert state.count("/jwks") == 1  # cached


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("forge", "reason"),
    [
        (lambda key, other: iap_token(key, aud="/projects/1/global/backendServices/2"), "wrong audience"),
        (lambda key, other: iap_token(key, iss="https://evil.example.com"), "wrong issuer"),
        (lambda key, other: iap_token(key, exp=int(time.time()) - 120, iat=int(time.time()) - 700), "expired"),
        (lambda key, other: iap_token(key, iat=int(time.time()) + 600, exp=int(time.time()) + 900), "in the future"),
        (lambda key, other: iap_token(key, exp=int(time.time()) + 86400), "lifetime"),
        (lambda key, other: iap_token(key, email=None), "no email"),
        (lambda key, other: _tamper(iap_token(key), email="admin@example.com"), "bad signature"),
        (lambda key, other: iap_token(other), "bad signature"),  # an attacker's key under the real kid
        (lambda key, other: iap_token(key, kid="iap-unknown"), "unknown signing key"),
        (lambda key, other: _alg_none(iap_token(key)), "only ES256"),
        (lambda key, other: _resign_hs256(iap_token(key), _pem(key)), "only ES256"),
        (lambda key, other: "not.a.jwt", "malformed"),
        (lambda key, other: jwt.encode({"email": "x"}, other, algorithm="ES384", headers={"kid": "iap-1"}), "ES256"),
    ],
)
def test_iap_forgeries_are_401(keys: tuple[KeyServer, ThreadingHTTPServer], forge: Any, reason: str) -> None:
    state, _ = keys
    key = _new_key()
    state.jwks = [_jwk(key, "iap-1")]
    other = ec.generate_private_key(ec.SECP384R1()) if reason == "ES256" else _new_key()
    with app_for(_iap_settings(state)) as url:
        answer = _call(url, {"x-goog-iap-jwt-assertion": forge(key, other)})
    assert answer.status_code == 401
    assert reason in answer.json()["msg"]
    assert "alice" not in answer.text and "admin" not in answer.text


@pytest.mark.hostile
def test_unsigned_identity_headers_are_never_trusted(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, _ = keys
    forged = {
        "x-goog-authenticated-user-email": "accounts.google.com:admin@example.com",
        "x-goog-authenticated-user-id": "accounts.google.com:1",
        "x-amzn-oidc-identity": "admin",
        "x-forwarded-user": "admin",
    }
    for settings in (_iap_settings(state), _alb_settings(state)):
        with app_for(settings) as url:
            answer = _call(url, forged)
            assert answer.status_code == 401 and "admin" not in answer.text
            assert _call(url, {"x-goog-iap-jwt-assertion": "", "x-amzn-oidc-data": ""}).status_code == 401
    assert state.hits == []


def test_iap_keys_unreachable_is_503(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, server = keys
    key = _new_key()
    state.jwks = [_jwk(key, "iap-1")]
    settings = _iap_settings(state)
    server.shutdown()
    server.server_close()
    with app_for(settings) as url:
        answer = _call(url, {"x-goog-iap-jwt-assertion": iap_token(key)})
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
    assert "signing keys are unavailable" in answer.json()["msg"]


def test_iap_key_rotation_refetches_once_per_interval(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, _ = keys
    old, new, unknown = _new_key(), _new_key(), _new_key()
    state.jwks = [_jwk(old, "iap-1")]
    with app_for(_iap_settings(state, refresh_seconds=60.0)) as url:
        assert _call(url, {"x-goog-iap-jwt-assertion": iap_token(old)}).status_code == 200
        state.jwks = [_jwk(old, "iap-1"), _jwk(new, "iap-2")]  # Google publishes a new key
        assert _call(url, {"x-goog-iap-jwt-assertion": iap_token(new, kid="iap-2")}).status_code == 200
        assert state.count("/jwks") == 2  # the unknown kid triggered exactly one refetch
        for _ in range(5):  # a flood of made-up kids costs no further fetch within the interval
            answer = _call(url, {"x-goog-iap-jwt-assertion": iap_token(unknown, kid="iap-3")})
            assert answer.status_code == 401
        assert state.count("/jwks") == 2
        assert _call(url, {"x-goog-iap-jwt-assertion": iap_token(new, kid="iap-2")}).status_code == 200


# --- ALB -------------------------------------------------------------------------------


def test_alb_token_with_padding_establishes_email_and_groups(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, _ = keys
    key = _new_key()
    state.pems = {ALB_KID: _pem(key)}
    token = alb_token(key)
    assert "=" in token  # ALB pads its segments and signs the padded text
    with app_for(_alb_settings(state)) as url:
        answer = _call(url, {"x-amzn-oidc-data": token})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"user": "bob@example.com", "groups": ["team-a"], "via": "alb", "namespace": "team-a"}
        unpadded = alb_token(key, padded=False, email=None, groups="solo")
        assert _call(url, {"x-amzn-oidc-data": unpadded}).json() | {"namespace": ""} == {
            "user": "1234",
            "groups": ["solo"],
            "via": "alb",
            "namespace": "",
        }
    assert state.count("/alb/") == 1  # the PEM is cached per kid


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("claims", "named"),
    [
        ({"groups": ["team-a", "system:masters"]}, "group 'system:masters'"),
        ({"email": None, "sub": "system:serviceaccount:kube-system:default"}, "user 'system:serviceaccount:"),
    ],
)
def test_alb_identity_naming_a_kubernetes_system_subject_is_403(
    keys: tuple[KeyServer, ThreadingHTTPServer], caplog: pytest.LogCaptureFixture, claims: dict[str, Any], named: str
) -> None:
    """The IdP behind the ALB cannot name system:masters or a service account (even with prefixes)."""
    state, _ = keys
    key = _new_key()
    state.pems = {ALB_KID: _pem(key)}
    token = alb_token(key, **claims)
    for names in (ProviderNames(), ProviderNames("idp:", "idp:")):
        with app_for(_alb_settings(state), names) as url:
            answer = _call(url, {"x-amzn-oidc-data": token})
            assert answer.status_code == 403, answer.text
            assert named in answer.json()["msg"] and "reserved by Kubernetes" in answer.json()["msg"]
    assert "reserved by Kubernetes" in caplog.text and token not in caplog.text


def test_alb_names_get_the_identity_provider_prefixes(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, _ = keys
    key = _new_key()
    state.pems = {ALB_KID: _pem(key)}
    with app_for(_alb_settings(state), ProviderNames("oidc:", "oidc-group:")) as url:
        answer = _call(url, {"x-amzn-oidc-data": alb_token(key)})
        assert answer.json() | {"namespace": ""} == {
            "user": "oidc:bob@example.com",
            "groups": ["oidc-group:team-a"],
            "via": "alb",
            "namespace": "",
        }


def test_alb_without_groups_claim_has_no_groups(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, _ = keys
    key = _new_key()
    state.pems = {ALB_KID: _pem(key)}
    with app_for(_alb_settings(state, groups_claim="")) as url:
        assert _call(url, {"x-amzn-oidc-data": alb_token(key)}).json()["groups"] == []


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("forge", "reason", "fetches"),
    [
        (lambda key, other: alb_token(key, signer=OTHER_ARN), "another load balancer", 0),
        (lambda key, other: alb_token(key, exp=int(time.time()) - 120), "expired", 1),
        (lambda key, other: _tamper(alb_token(key), email="admin@example.com"), "bad signature", 1),
        (lambda key, other: alb_token(other), "bad signature", 1),
        (lambda key, other: _alg_none(alb_token(key)), "malformed", 0),  # no signature segment at all
        (lambda key, other: _resign_hs256(alb_token(key), _pem(key)), "only ES256", 0),
        (lambda key, other: alb_token(key, kid="../../jwks"), "no usable key id", 0),
        (lambda key, other: alb_token(key, kid="00000000-0000-0000-0000-000000000000"), "unknown signing key", 1),
        (lambda key, other: alb_token(key, email=None, sub=None), "no email or sub", 1),
        (lambda key, other: alb_token(key) + "!!!!", "malformed", 0),
        (lambda key, other: alb_token(key).replace("=", "===", 1), "malformed", 0),
        (lambda key, other: "a.b", "malformed", 0),
    ],
)
def test_alb_forgeries_are_401(
    keys: tuple[KeyServer, ThreadingHTTPServer], forge: Any, reason: str, fetches: int
) -> None:
    state, _ = keys
    key, other = _new_key(), _new_key()
    state.pems = {ALB_KID: _pem(key)}
    with app_for(_alb_settings(state)) as url:
        answer = _call(url, {"x-amzn-oidc-data": forge(key, other)})
    assert answer.status_code == 401
    assert reason in answer.json()["msg"]
    assert "admin" not in answer.text
    assert state.count("/alb/") == fetches  # a wrong signer or key id never reaches the key server


def test_alb_key_server_down_is_503(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, server = keys
    key = _new_key()
    state.pems = {ALB_KID: _pem(key)}
    settings = _alb_settings(state)
    server.shutdown()
    server.server_close()
    with app_for(settings) as url:
        answer = _call(url, {"x-amzn-oidc-data": alb_token(key)})
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"


def test_alb_key_server_serving_garbage_is_503(keys: tuple[KeyServer, ThreadingHTTPServer]) -> None:
    state, _ = keys
    key = _new_key()
    state.pems = {ALB_KID: b"<html>maintenance</html>"}
    with app_for(_alb_settings(state)) as url:
        assert _call(url, {"x-amzn-oidc-data": alb_token(key)}).status_code == 503


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("signer", "status"),
    [
        (ARN, 200),  # the load balancer named "history", whatever id AWS gave it
        (ARN.replace("50dc6c495c0c9188", "0123456789abcdef"), 200),  # recreated: a new id, same name
        (OTHER_ARN, 401),  # another name
        (ARN.replace("app/history/", "app/history-evil/"), 401),  # a name that starts with ours
        (ARN.replace(":123456789012:", ":210987654321:"), 401),  # the same name in another account
        (ARN.replace("eu-west-1", "eu-west-2"), 401),  # or region
        (ARN + "/x", 401),
        (ARN.rpartition("/")[0] + "/", 401),  # no id at all
    ],
)
def test_alb_arn_with_any_id_pins_the_name(
    keys: tuple[KeyServer, ThreadingHTTPServer], signer: str, status: int
) -> None:
    """``--alb-arn .../app/NAME/*``: the id exists only after the controller made the ALB (the deploy
    that configures the server comes first); a name is unique per account and region, so the
    name, account, region and partition are still pinned."""
    state, _ = keys
    key = _new_key()
    state.pems = {ALB_KID: _pem(key)}
    pinned = ARN.rpartition("/")[0] + "/*"
    settings = parse_front_door("alb", alb_arn=pinned, alb_key_url=state.alb_url)
    assert settings is not None and settings.alb_region == "eu-west-1"
    with app_for(settings) as url:
        answer = _call(url, {"x-amzn-oidc-data": alb_token(key, signer=signer)})
    assert answer.status_code == status, answer.text


# --- wiring and flags ------------------------------------------------------------------


def test_alb_region_comes_from_the_arn() -> None:
    settings = parse_front_door("alb", alb_arn=ARN)
    assert settings is not None
    assert (settings.alb_region, settings.alb_key_url) == ("eu-west-1", ALB_KEY_URL)
    assert parse_front_door(None) is None


@pytest.mark.parametrize(
    ("kind", "flags", "message"),
    [
        ("cloudflare", {}, "--trusted-header: 'cloudflare' is not one of iap, alb"),
        ("iap", {}, "--iap-audience"),
        ("iap", {"iap_audience": "my-backend"}, "--iap-audience"),
        ("iap", {"iap_audience": AUDIENCE, "alb_arn": ARN}, "--alb-arn: only used with --trusted-header alb"),
        ("iap", {"iap_audience": AUDIENCE, "groups_claim": "groups"}, "--trusted-header-groups-claim"),
        ("iap", {"iap_audience": AUDIENCE, "iap_jwks_url": "http://keys.example.com/jwks"}, "--iap-jwks-url"),
        ("alb", {}, "--alb-arn"),
        ("alb", {"alb_arn": "arn:aws:s3:::bucket"}, "--alb-arn"),
        ("alb", {"alb_arn": ARN.rpartition("/")[0] + "/5*"}, "--alb-arn"),  # * stands for the whole id only
        ("alb", {"alb_arn": ARN.replace("app/history/", "app/*/")}, "--alb-arn"),
        ("alb", {"alb_arn": ARN, "alb_region": "us-east-1"}, "--alb-region"),
        ("alb", {"alb_arn": ARN, "alb_key_url": "https://keys.example.com/"}, "--alb-key-url"),
        ("alb", {"alb_arn": ARN.replace("arn:aws:", "arn:aws-us-gov:")}, "--alb-key-url: required"),
        ("alb", {"alb_arn": ARN, "iap_audience": AUDIENCE}, "--iap-audience: only used"),
        ("", {"alb_arn": ARN}, "--alb-arn: only used with --trusted-header"),
    ],
)
def test_bad_flags_name_the_flag(kind: str, flags: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_front_door(kind, **flags)


# --- wiring ----------------------------------------------------------------------------


def test_build_access_control_wires_trusted_header(keys: tuple[KeyServer, ThreadingHTTPServer], tmp_path: Path) -> None:
    state, _ = keys
    key = _new_key()
    state.jwks = [_jwk(key, "iap-1")]
    policy = tmp_path / "policy.yaml"
    policy.write_text("namespaces:\n  team-a:\n    users: ['alice@example.com']\n")
    config = parse_auth("trusted-header", "static", policy_file=str(policy))
    with serving(build_access_control(config, front_door=_iap_settings(state))) as url:
        assert _call(url, {"x-goog-iap-jwt-assertion": iap_token(key)}).status_code == 200
        assert _call(url, {"x-goog-iap-jwt-assertion": iap_token(key)}, "team-b").status_code == 403
        assert _call(url, {}).status_code == 401


def test_auth_trusted_header_needs_its_settings_and_only_it_takes_them(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("namespaces: {}\n")
    with pytest.raises(ValueError, match="--trusted-header: iap or alb is required"):
        build_access_control(parse_auth("trusted-header", "static", policy_file=str(policy)))
    settings = FrontDoorSettings(kind="iap", iap_audience=AUDIENCE)
    for auth, authz in (("none", ""), ("kubernetes", "static")):
        config = parse_auth(auth, authz, policy_file=str(policy) if authz else None)
        with pytest.raises(ValueError, match="--trusted-header: only used with --auth trusted-header"):
            build_access_control(config, front_door=settings)

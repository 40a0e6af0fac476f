"""``--oidc-*`` flag validation, the sealed login cookies, and the claims -> identity rules."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from runtime.server.auth import ProviderNames, build_access_control, parse_auth, parse_oidc
from runtime.server.auth.config import AUTH_MODES
from runtime.server.auth.login_cookie import CookieTooLargeError, LoginState, SealedCookies
from runtime.server.auth.model import Identity
from runtime.server.auth.oidc import identity_from_claims, safe_next

SECRET = "s3cret-value-that-is-long-enough"
ISSUER = "https://idp.example.com/realms/platform"
REDIRECT = "https://ray-history.example.com/oauth2/callback"


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    return str(path)


def test_valid_flags_give_settings_without_showing_the_secret(secret_file: str) -> None:
    settings = parse_oidc(ISSUER, "ray-history", secret_file, "groups", REDIRECT)
    assert settings.client_secret == SECRET
    assert settings.discovery_url == f"{ISSUER}/.well-known/openid-configuration"
    assert settings.callback_path == "/oauth2/callback"
    assert settings.public_origin == "https://ray-history.example.com"
    assert settings.secure_cookies
    assert SECRET not in repr(settings) and "cookie_keys" not in repr(settings)
    assert "oidc" in AUTH_MODES


@pytest.mark.parametrize(
    ("redirect", "secure"),
    [
        ("http://127.0.0.1:8080/oauth2/callback", False),
        ("http://localhost:8080/cb", False),
        ("http://[::1]:8080/cb", False),
        ("https://localhost:8443/cb", True),
    ],
)
def test_secure_cookies_except_plain_http_loopback(secret_file: str, redirect: str, secure: bool) -> None:
    assert parse_oidc(ISSUER, "c", secret_file, "groups", redirect).secure_cookies is secure


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((None, "c", "SECRET", "groups", REDIRECT), "--oidc-issuer: required"),
        (("idp.example.com", "c", "SECRET", "groups", REDIRECT), "--oidc-issuer: 'idp.example.com' is not an absolute"),
        (("http://idp.example.com", "c", "SECRET", "groups", REDIRECT), "--oidc-issuer: .* must use https"),
        ((ISSUER, "", "SECRET", "groups", REDIRECT), "--oidc-client-id: required"),
        ((ISSUER, "c", None, "groups", REDIRECT), "--oidc-client-secret-file: required"),
        ((ISSUER, "c", "/nonexistent/secret", "groups", REDIRECT), "--oidc-client-secret-file: cannot read"),
        ((ISSUER, "c", "SECRET", "", REDIRECT), "--oidc-groups-claim: must name a claim"),
        ((ISSUER, "c", "SECRET", "groups", None), "--oidc-redirect-url: required"),
        ((ISSUER, "c", "SECRET", "groups", "https://h.example.com"), "--oidc-redirect-url: .* needs the callback path"),
        ((ISSUER, "c", "SECRET", "groups", "http://h.example.com/cb"), "--oidc-redirect-url: .* must use https"),
        ((ISSUER, "c", "SECRET", "groups", REDIRECT + "?x=1"), "--oidc-redirect-url: .* may not have a query"),
    ],
)
def test_bad_flags_are_named(secret_file: str, args: tuple[str | None, ...], message: str) -> None:
    real = tuple(secret_file if value == "SECRET" else value for value in args)
    with pytest.raises(ValueError, match=message) as failure:
        parse_oidc(*real)
    assert SECRET not in str(failure.value)


def test_secret_file_problems(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=r"--oidc-client-secret-file: .* is empty"):
        parse_oidc(ISSUER, "c", str(empty), "groups", REDIRECT)
    short = tmp_path / "short"
    short.write_text("tiny")
    with pytest.raises(ValueError, match="--oidc-cookie-key-file: the client secret is too short"):
        parse_oidc(ISSUER, "c", str(short), "groups", REDIRECT)
    keys = tmp_path / "keys"
    keys.write_text("x" * 40 + "\n")
    assert parse_oidc(ISSUER, "c", str(short), "groups", REDIRECT, cookie_key_file=str(keys)).cookie_keys


def test_cookie_key_file_rotates_keys(secret_file: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("old-" + "o" * 40 + "\n")
    old = parse_oidc(ISSUER, "c", secret_file, "groups", REDIRECT, cookie_key_file=str(keys))
    sealed = SealedCookies(old.cookie_keys, True).seal_session(Identity("alice", ("a",)), time.time() + 60)
    keys.write_text("new-" + "n" * 40 + "\n" + "old-" + "o" * 40 + "\n")
    rotated = SealedCookies(
        parse_oidc(ISSUER, "c", secret_file, "groups", REDIRECT, cookie_key_file=str(keys)).cookie_keys, True
    )
    assert rotated.open_session(sealed) == Identity("alice", ("a",), via="oidc")
    keys.write_text("new-" + "n" * 40 + "\n")
    retired = SealedCookies(
        parse_oidc(ISSUER, "c", secret_file, "groups", REDIRECT, cookie_key_file=str(keys)).cookie_keys, True
    )
    assert retired.open_session(sealed) is None
    keys.write_text("too-short\n")
    with pytest.raises(ValueError, match=r"--oidc-cookie-key-file: .* at least 32"):
        parse_oidc(ISSUER, "c", secret_file, "groups", REDIRECT, cookie_key_file=str(keys))


def test_derived_key_depends_on_the_client_secret(secret_file: str, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.write_text("another-secret-of-enough-length")
    first = parse_oidc(ISSUER, "c", secret_file, "groups", REDIRECT).cookie_keys
    assert first == parse_oidc(ISSUER, "c", secret_file, "groups", REDIRECT).cookie_keys  # replicas agree
    assert first != parse_oidc(ISSUER, "c", str(other), "groups", REDIRECT).cookie_keys


def test_auth_oidc_without_settings_names_the_flags() -> None:
    with pytest.raises(ValueError, match="--auth oidc: needs --oidc-issuer"):
        build_access_control(parse_auth("oidc", "static", policy_file=__file__))


def test_sealed_cookies() -> None:
    cookies = SealedCookies((Fernet.generate_key(),), secure=True)
    assert (cookies.session_name, cookies.state_name) == ("__Host-ray_history_login", "__Host-ray_history_oidc_login")
    now = time.time()
    who = Identity("alice@example.com", ("team-a",), via="oidc")
    sealed = cookies.seal_session(who, now + 60)
    assert cookies.open_session(sealed, now) == who
    assert cookies.open_session(sealed, now + 61) is None  # expired
    assert cookies.open_session(sealed[:-2] + "AA", now) is None  # tampered
    assert cookies.open_session("not-a-token", now) is None
    assert cookies.open_session(None, now) is None
    assert SealedCookies((Fernet.generate_key(),), True).open_session(sealed, now) is None  # another key
    login = LoginState("st", "no", "verifier", "/x")
    state = cookies.seal_state(login, now)
    assert cookies.open_state(state, now) == login
    assert cookies.open_state(state, now + 601) is None
    assert cookies.open_session(state, now) is None and cookies.open_state(sealed, now) is None  # purposes differ
    with pytest.raises(CookieTooLargeError):
        cookies.seal_session(Identity("u", tuple(f"group-{i}" for i in range(500))), now + 60)
    assert not SealedCookies((Fernet.generate_key(),), secure=False).session_name.startswith("__Host-")


@pytest.mark.parametrize(
    ("claims", "claim", "expected"),
    [
        ({"sub": "s1", "email": "a@x.com", "groups": ["g1", "g2"]}, "groups", ("a@x.com", ("g1", "g2"))),
        ({"sub": "s1", "email": "a@x.com", "email_verified": False}, "groups", ("s1", ())),
        ({"sub": "s1", "email": "a@x.com", "email_verified": "False"}, "groups", ("s1", ())),
        ({"sub": "s1", "email": "a@x.com", "email_verified": 0}, "groups", ("s1", ())),
        ({"sub": "s1", "email": "a@x.com", "email_verified": None}, "groups", ("s1", ())),
        ({"sub": "s1", "email": "a@x.com", "email_verified": "TRUE"}, "groups", ("a@x.com", ())),
        ({"sub": "s1", "email": "a@x.com", "email_verified": True}, "groups", ("a@x.com", ())),
        ({"sub": "s1"}, "groups", ("s1", ())),
        ({"sub": "s1", "groups": "solo"}, "groups", ("s1", ("solo",))),
        ({"sub": "s1", "cognito:groups": ["c"]}, "cognito:groups", ("s1", ("c",))),
        ({"sub": "s1", "realm_access": {"roles": ["r"]}}, "realm_access.roles", ("s1", ("r",))),
        ({"sub": "s1", "https://x.example/groups": ["n"]}, "https://x.example/groups", ("s1", ("n",))),
        ({"sub": "s1", "groups": ["ok", 3, None, ""]}, "groups", ("s1", ("ok",))),
    ],
)
def test_identity_from_claims(claims: dict[str, object], claim: str, expected: tuple[str, tuple[str, ...]]) -> None:
    who = identity_from_claims(claims, claim)
    assert (who.user, who.groups, who.via) == (*expected, "oidc")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/ns/team-a?tab=logs", "/ns/team-a?tab=logs"),
        ("/", "/"),
        (None, "/"),
        ("", "/"),
        ("//evil.example.com", "/"),
        ("/\\evil.example.com", "/"),
        ("https://evil.example.com/", "/"),
        ("javascript:alert(1)", "/"),
        ("/a\r\nSet-Cookie: x=y", "/"),
        ("/x\n", "/"),  # `$` would match before this newline: fullmatch does not
        ("/data/team-a\n", "/"),
        ("/" + "a" * 3000, "/"),
    ],
)
def test_safe_next(value: str | None, expected: str) -> None:
    assert safe_next(value) == expected


def test_prefix_flags_and_environment_reach_the_configuration(
    secret_file: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.server.options import load_config

    store = tmp_path / "store"
    store.mkdir()
    base = ["--storage-backend=local", f"--local-storage-dir={store}", f"--cache-dir={tmp_path / 'cache'}"]
    oidc = [f"--oidc-issuer={ISSUER}", "--oidc-client-id=c", f"--oidc-client-secret-file={secret_file}"]
    oidc.append(f"--oidc-redirect-url={REDIRECT}")
    config = load_config(
        [*base, "--auth=oidc", "--authz=kubernetes", *oidc, "--oidc-username-prefix=oidc:"],
        env={"HISTORYSERVER_OIDC_GROUPS_PREFIX": "oidc-group:"},
    )
    names = config.auth.provider_names
    assert (names.username_prefix, names.groups_prefix) == ("oidc:", "oidc-group:")
    default = load_config([*base, "--auth=oidc", "--authz=kubernetes", *oidc], env={}).auth.provider_names
    assert default == ProviderNames()  # no prefix: existing RBAC bindings keep working
    with pytest.raises(SystemExit) as exited:
        load_config([*base, "--auth=kubernetes", "--authz=kubernetes", "--oidc-groups-prefix=oidc:"], env={})
    assert exited.value.code == 2
    assert "--oidc-groups-prefix: only used with --auth oidc or trusted-header" in capsys.readouterr().err

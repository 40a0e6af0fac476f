"""Live clusters with Ray token auth (KubeRay ``authOptions.mode: token``, #16):
discovery records where the token lives, the Secret reader (official client
against the stub API server), and the proxy against a recording upstream --
the cluster's token is injected as ``x-ray-authorization``, the client's
credentials never pass, an unreadable Secret is a 503 and no request at all."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
import yaml

from runtime.server.config import LiveClusterURL
from runtime.server.live.discovery import LiveAuthError, LiveCluster, StaticLiveDirectory, TokenAuth
from runtime.server.live.k8s import cluster_from_object
from runtime.server.live.tokens import SecretTokenSource, kuberay_secret_name, token_auth_from_spec
from tests.integration.emulators.base import free_port
from tests.unit.server.live.k8s_stub import (
    ApiStub,
    LoopbackDirectory,
    api_stub,
    kubernetes_directory,
    raycluster,
    secret,
)
from tests.unit.server.live.servers import Upstream, live_cookies, make_app, serve, server_config, upstream_server

CRD = Path(__file__).resolve().parents[3] / "fixtures" / "kuberay" / "crds" / "ray.io_rayclusters.yaml"

TOKEN = "q3J1cnlfZ2VuZXJhdGVkX3Rva2VuX2Zvcl90ZXN0cw=="
OTHER_TOKEN = "user-provided-token-0123456789"
CLIENT_TOKEN = "history-server-login-token"
CREATED = datetime(2026, 11, 22, tzinfo=UTC)

SECURE = raycluster("secure", "team-a", auth={"mode": "token"})
BYO = raycluster("byo", "team-b", auth={"mode": "token", "secretName": "ray-token"})
LOCKED = raycluster("locked", "team-c", auth={"mode": "token"})
NO_SECRET = raycluster("no-secret", "team-a", auth={"mode": "token"})
WRONG_KEY = raycluster("wrong-key", "team-a", auth={"mode": "token"})
DELEGATED = raycluster("delegated", "team-a", auth={"mode": "token", "enableK8sTokenAuth": True})
PLAIN = raycluster("plain", "team-a", auth={"mode": "disabled"})
JOB = raycluster("job-raycluster-x2k9", "team-a", auth={"mode": "token"}, owner=("RayJob", "job"))
CLUSTERS = (SECURE, BYO, LOCKED, NO_SECRET, WRONG_KEY, DELEGATED, PLAIN, JOB)
SECRETS = (
    secret("secure", "team-a", {"auth_token": TOKEN}, owner="secure"),
    secret("ray-token", "team-b", {"auth_token": OTHER_TOKEN + "\n"}),  # `kubectl create secret --from-file` keeps it
    secret("wrong-key", "team-a", {"token": TOKEN}, owner="wrong-key"),
    secret("job-raycluster-x2k9", "team-a", {"auth_token": TOKEN}, owner="job-raycluster-x2k9"),
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stub() -> Iterator[ApiStub]:
    with api_stub(*CLUSTERS) as running:
        running.secrets.extend(SECRETS)
        running.secrets_forbidden_in.add("team-c")
        yield running


def secret_reads(stub: ApiStub) -> list[str]:
    return [path for path in stub.paths() if "/secrets/" in path]


# ------------------------------------------------------------ discovery
def test_stub_objects_match_the_kuberay_crd() -> None:
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loader
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft7Validator(schema)
    for obj in CLUSTERS:
        validator.validate(obj)
    auth_schema = schema["properties"]["spec"]["properties"]["authOptions"]
    assert set(auth_schema["properties"]) == {"enableK8sTokenAuth", "mode", "secretName"}
    assert auth_schema["properties"]["mode"]["enum"] == ["disabled", "token"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (None, None),
        ({}, None),  # no mode: KubeRay's IsAuthEnabled is false, no pod gets RAY_AUTH_MODE
        ({"mode": "disabled"}, None),
        ({"mode": "token"}, TokenAuth("ns", "my-cluster")),
        ({"mode": "token", "secretName": ""}, TokenAuth("ns", "my-cluster")),
        ({"mode": "token", "secretName": "shared-token"}, TokenAuth("ns", "shared-token")),
        ({"mode": "token", "enableK8sTokenAuth": True}, TokenAuth("ns", "", kubernetes_delegated=True)),
        ({"mode": "token", "enableK8sTokenAuth": False}, TokenAuth("ns", "my-cluster")),
    ],
)
def test_token_auth_from_spec(options: dict[str, Any] | None, expected: TokenAuth | None) -> None:
    spec = {} if options is None else {"authOptions": options}
    assert token_auth_from_spec("ns", "my-cluster", spec) == expected


def test_generated_secret_name_follows_kuberay_checkname() -> None:
    assert kuberay_secret_name("raycluster-demo") == "raycluster-demo"
    assert kuberay_secret_name("a" * 10 + "b" * 50) == "b" * 50  # 60 characters: the last 50 are kept
    assert kuberay_secret_name("x" * 9 + "-" + "c" * 50) == "c" * 50
    assert kuberay_secret_name("x" * 10 + "-" + "c" * 49) == "r" + "c" * 49  # would start with '-'
    assert kuberay_secret_name("9lives") == "rlives"


def test_discovery_records_where_the_token_lives(stub: ApiStub) -> None:
    live = kubernetes_directory(stub.url)
    by_name = {c.name: c for c in live.list_clusters().clusters}
    assert by_name["secure"].token_auth == TokenAuth("team-a", "secure")
    assert by_name["byo"].token_auth == TokenAuth("team-b", "ray-token")
    assert by_name["plain"].token_auth is None
    assert by_name["delegated"].token_auth == TokenAuth("team-a", "", kubernetes_delegated=True)
    # An owned cluster keeps it when re-labelled with its owner.
    found = live.find_for_owner("team-a", "rayjob", "job")
    assert found is not None and found.token_auth == TokenAuth("team-a", "job-raycluster-x2k9")
    assert cluster_from_object(raycluster("x", "y"), "cluster.local").token_auth is None  # type: ignore[union-attr]
    assert secret_reads(stub) == []  # discovery alone never reads a Secret


# ------------------------------------------------------------ the Secret reader
def test_reads_and_caches_the_token(stub: ApiStub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    live = kubernetes_directory(stub.url, clock=clock)
    source = live.token_source
    assert isinstance(source, SecretTokenSource)
    secure = live.get("team-a", "secure")
    assert secure is not None
    assert live.auth_token(secure) == TOKEN
    assert live.auth_token(secure) == TOKEN
    assert secret_reads(stub) == ["/api/v1/namespaces/team-a/secrets/secure"]
    clock.now += 61  # a minute later the Secret is read again (rotation)
    assert live.auth_token(secure) == TOKEN
    assert len(secret_reads(stub)) == 2
    source.forget(TokenAuth("team-a", "secure"))
    assert live.auth_token(secure) == TOKEN
    assert len(secret_reads(stub)) == 3
    # A user-provided Secret's trailing newline is not part of the token.
    byo = live.get("team-b", "byo")
    assert byo is not None and live.auth_token(byo) == OTHER_TOKEN
    plain = live.get("team-a", "plain")
    assert plain is not None and live.auth_token(plain) is None
    assert TOKEN not in repr(source) and TOKEN not in repr(source._cache)
    assert TOKEN not in caplog.text and OTHER_TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        (("team-c", "locked"), "the history server may not read Secret team-c/locked (Kubernetes API answered 403"),
        (("team-c", "locked"), "grant get on secrets in namespace team-c"),
        (("team-a", "no-secret"), "Secret team-a/no-secret not found"),
        (("team-a", "wrong-key"), "Secret team-a/wrong-key has no data key 'auth_token'"),
        (("team-a", "delegated"), "Kubernetes-delegated token auth (authOptions.enableK8sTokenAuth)"),
    ],
)
def test_unreadable_tokens_fail_closed(stub: ApiStub, cluster: tuple[str, str], message: str) -> None:
    live = kubernetes_directory(stub.url)
    found = live.get(*cluster)
    assert found is not None
    with pytest.raises(LiveAuthError) as caught:
        live.auth_token(found)
    assert message in str(caught.value)


def test_failures_are_cached_briefly(stub: ApiStub) -> None:
    clock = Clock()
    live = kubernetes_directory(stub.url, clock=clock)
    locked = live.get("team-c", "locked")
    assert locked is not None
    for _ in range(3):
        with pytest.raises(LiveAuthError):
            live.auth_token(locked)
    assert len(secret_reads(stub)) == 1
    stub.secrets_forbidden_in.clear()  # the Role was granted
    stub.secrets.append(secret("locked", "team-c", {"auth_token": TOKEN}))
    clock.now += 6
    assert live.auth_token(locked) == TOKEN


def test_api_server_down_fails_closed() -> None:
    live = kubernetes_directory(f"http://127.0.0.1:{free_port()}")
    cluster = LiveCluster("team-a", "secure", "raycluster", "", CREATED, "http://x", TokenAuth("team-a", "secure"))
    with pytest.raises(LiveAuthError, match="cannot read Secret team-a/secure: Kubernetes API unreachable"):
        live.auth_token(cluster)


def test_a_directory_without_kubernetes_cannot_supply_a_token() -> None:
    cluster = LiveCluster("team-a", "secure", "raycluster", "", CREATED, "http://x", TokenAuth("team-a", "secure"))
    with pytest.raises(LiveAuthError, match="no Kubernetes API can read Secret team-a/secure"):
        StaticLiveDirectory([]).auth_token(cluster)


# ------------------------------------------------------------ the proxy
@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with upstream_server() as up:
        yield up


@pytest.fixture
def proxy(tmp_path: Path, stub: ApiStub, upstream: Upstream) -> Iterator[str]:
    directory = LoopbackDirectory(kubernetes_directory(stub.url), upstream.url)
    with serve(make_app(server_config(tmp_path, proxy_timeout=5.0), directory)) as url:
        yield url


def _client(namespace: str, name: str) -> requests.Session:
    client = requests.Session()
    for key, value in live_cookies(namespace, name).items():
        client.cookies.set(key, value)
    client.cookies.set("ray-authentication-token", "forged")
    client.cookies.set("user_cookie", "keep-me")
    return client


FORGED = {"Authorization": f"Bearer {CLIENT_TOKEN}", "X-Ray-Authorization": "Bearer forged"}


def test_token_is_injected_and_client_credentials_are_not_forwarded(proxy: str, upstream: Upstream) -> None:
    answer = _client("team-a", "secure").get(f"{proxy}/api/jobs/", headers=FORGED, timeout=10)
    assert answer.status_code == 200
    seen = upstream.last()
    assert seen.header("x-ray-authorization") == f"Bearer {TOKEN}"
    assert [v for k, v in seen.headers if k.lower() == "x-ray-authorization"] == [f"Bearer {TOKEN}"]
    assert seen.header("Authorization") is None
    assert seen.header("Cookie") is None  # no cookie at all: Ray's forged one, nor the user's
    assert TOKEN not in answer.text and TOKEN not in str(answer.headers)


def test_user_provided_secret(proxy: str, upstream: Upstream) -> None:
    assert _client("team-b", "byo").get(f"{proxy}/api/version", timeout=10).status_code == 200
    assert upstream.last().header("x-ray-authorization") == f"Bearer {OTHER_TOKEN}"


def test_clusters_without_token_auth_get_no_credentials(proxy: str, upstream: Upstream) -> None:
    answer = _client("team-a", "plain").get(f"{proxy}/api/jobs/", headers=FORGED, timeout=10)
    assert answer.status_code == 200
    seen = upstream.last()
    assert seen.header("Authorization") is None and seen.header("x-ray-authorization") is None
    assert seen.header("Cookie") is None


def test_static_clusters_get_no_credentials(tmp_path: Path, upstream: Upstream) -> None:
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
    with serve(make_app(server_config(tmp_path), directory)) as url:
        assert _client("default", "live-demo").get(f"{url}/api/jobs/", headers=FORGED, timeout=10).status_code == 200
    seen = upstream.last()
    assert seen.header("Authorization") is None and seen.header("x-ray-authorization") is None


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        (("team-c", "locked"), "grant get on secrets in namespace team-c"),
        (("team-a", "no-secret"), "Secret team-a/no-secret not found"),
        (("team-a", "delegated"), "enableK8sTokenAuth"),
    ],
)
def test_unreadable_secret_is_503_and_nothing_is_sent(
    proxy: str, upstream: Upstream, cluster: tuple[str, str], message: str
) -> None:
    answer = _client(*cluster).get(f"{proxy}/api/jobs/", headers=FORGED, timeout=10)
    assert answer.status_code == 503
    assert answer.headers["Content-Type"].startswith("application/json")
    assert answer.headers["Retry-After"] == "5"
    body = answer.json()
    assert f"live cluster {cluster[0]}/{cluster[1]} uses Ray token auth" in str(body)
    assert message in str(body)
    assert upstream.seen == []


class _OneCluster(StaticLiveDirectory):
    """One token-auth cluster on ``url`` whose Secret is read from ``api_url``."""

    def __init__(self, url: str, api_url: str) -> None:
        super().__init__([LiveClusterURL("team-a", "secure", url)])
        cluster = self._clusters["team-a", "secure"]
        self._clusters["team-a", "secure"] = dataclasses.replace(cluster, token_auth=TokenAuth("team-a", "secure"))
        self.token_source = kubernetes_directory(api_url).token_source


def test_api_server_down_is_503(tmp_path: Path, upstream: Upstream) -> None:
    directory = _OneCluster(upstream.url, f"http://127.0.0.1:{free_port()}")
    with serve(make_app(server_config(tmp_path), directory)) as url:
        answer = _client("team-a", "secure").get(f"{url}/api/jobs/", timeout=15)
    assert answer.status_code == 503
    assert "cannot read Secret team-a/secure: Kubernetes API unreachable" in answer.json()["msg"]
    assert upstream.seen == []


def test_a_refused_token_is_read_again(proxy: str, stub: ApiStub, upstream: Upstream) -> None:
    client = _client("team-a", "secure")
    assert client.get(f"{proxy}/api/version", timeout=10).status_code == 200
    assert client.get(f"{proxy}/api/version", timeout=10).status_code == 200
    assert len(secret_reads(stub)) == 1  # cached
    assert client.get(f"{proxy}/status/401", timeout=10).status_code == 401  # the operator rotated it?
    assert client.get(f"{proxy}/api/version", timeout=10).status_code == 200
    assert len(secret_reads(stub)) == 2


def test_rays_token_cookie_is_never_set_downstream(proxy: str) -> None:
    answer = _client("team-a", "secure").get(f"{proxy}/ray-login", timeout=10)
    cookies = answer.raw.headers.getlist("Set-Cookie")
    assert not [c for c in cookies if c.startswith("ray-authentication-token")]
    assert not [c for c in cookies if c.startswith("other=")]  # no cookie of the head's at all


def test_kubernetes_delegated_clusters_get_the_callers_own_kubernetes_token(
    tmp_path: Path, stub: ApiStub, upstream: Upstream
) -> None:
    """``authOptions.enableK8sTokenAuth``: Ray 2.60 checks the bearer token itself (TokenReview,
    then a SubjectAccessReview on the RayCluster), so the proxy forwards the token the caller
    was authenticated with here, and only that: a caller who logged in otherwise (or with no
    Kubernetes token) gets a 503 saying what to send, and the server never lends its own."""
    from runtime.server.auth import build_access_control, install, parse_auth
    from tests.support.k8s_auth_stub import auth_api_stub

    alice = "alice-kubernetes-token"
    directory = LoopbackDirectory(kubernetes_directory(stub.url), upstream.url)
    with auth_api_stub() as reviews:
        reviews.tokens = {alice: ("alice@example.com", ("team-a-devs",))}
        reviews.access = {("team-a-devs", "team-a")}
        app = make_app(server_config(tmp_path, proxy_timeout=5.0), directory)
        install(app, build_access_control(parse_auth("kubernetes", "kubernetes"), reviews.api_client))
        with serve(app) as url:
            client = _client("team-a", "delegated")
            answer = client.get(f"{url}/api/jobs/", headers={"Authorization": f"Bearer {alice}"}, timeout=10)
            assert answer.status_code == 200, answer.text
            seen = upstream.last()
            assert [v for k, v in seen.headers if k.lower() == "x-ray-authorization"] == [f"Bearer {alice}"]
            assert seen.header("Authorization") is None
            # A Secret-token cluster still gets its own token, never the caller's.
            assert client.get(f"{url}/api/jobs/", headers={"Authorization": f"Bearer {alice}"}, timeout=10)
            assert (
                _client("team-a", "secure")
                .get(f"{url}/api/jobs/", headers={"Authorization": f"Bearer {alice}"}, timeout=10)
                .status_code
                == 200
            )
            assert upstream.last().header("x-ray-authorization") == f"Bearer {TOKEN}"
            # Not authenticated by TokenReview: refused here, nothing sent upstream.
            before = len(upstream.seen)
            assert _client("team-a", "delegated").get(f"{url}/api/jobs/", timeout=10).status_code == 401
            assert len(upstream.seen) == before


def test_a_caller_without_a_kubernetes_token_is_told_what_to_send() -> None:
    cluster = LiveCluster(
        "team-a", "d", "raycluster", "", CREATED, "http://x", TokenAuth("team-a", "", kubernetes_delegated=True)
    )
    with pytest.raises(LiveAuthError, match="Authorization: Bearer <Kubernetes token>"):
        StaticLiveDirectory([]).auth_token(cluster)
    assert StaticLiveDirectory([]).auth_token(cluster, "caller-token") == "caller-token"

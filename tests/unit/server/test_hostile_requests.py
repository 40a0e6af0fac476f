"""Hostile request heads (issue #14, items 9 and 10): foreign Host headers (DNS
rebinding), client-sent forwarding headers through the live proxy, and paths with
leading double slashes. The real app; the proxy against a real upstream socket."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import requests
from flask import Flask
from werkzeug.test import EnvironBuilder, run_wsgi_app

from runtime.server.app import create_app
from runtime.server.config import LiveClusterURL, ServerConfig
from runtime.server.hosts import default_allowed_hosts, host_name
from runtime.server.live.discovery import StaticLiveDirectory
from runtime.server.options import ALLOWED_HOSTS_ENV, load_config
from runtime.storage.config import StorageConfig
from tests.unit.server.live.servers import live_cookies, serve, upstream_server

pytestmark = pytest.mark.hostile


def _app(tmp_path: Path, **overrides: object) -> Flask:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    config = ServerConfig(storage=storage, cache_dir=tmp_path / "cache", kubernetes="off", **overrides)  # type: ignore[arg-type]
    return create_app(config, live=StaticLiveDirectory([]))


def _get(app: Flask, path: str, host: str | None = None, query: str = "") -> tuple[int, dict[str, str], bytes]:
    """One request with exactly this PATH_INFO and Host (the test client would parse
    "//x" as a network location, a WSGI server does not)."""
    environ = EnvironBuilder(path="/").get_environ()
    environ.update(PATH_INFO=path, RAW_URI=path, QUERY_STRING=query)
    if host is None:
        environ.pop("HTTP_HOST", None)
    else:
        environ["HTTP_HOST"] = host
    body, status, headers = run_wsgi_app(app, environ)
    data = b"".join(body)
    return int(status.split()[0]), dict(headers), data


# ------------------------------------------------------------------ Host
@pytest.mark.parametrize(
    "host",
    ["attacker.example", "attacker.example:8080", "historyserver.com", "historyserver.evil.example:80", "a b", "x:y"],
)
def test_a_foreign_host_is_refused_naming_it(tmp_path: Path, host: str) -> None:
    status, headers, body = _get(_app(tmp_path), "/clusters", host)
    assert status == 400 and headers["Content-Type"] == "application/json"
    assert repr(host) in orjson.loads(body)["msg"] and "--allowed-hosts" in orjson.loads(body)["msg"]


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8080",
        "127.0.0.1:8080",
        "[::1]:8080",
        "historyserver:8080",
        "historyserver.ray-history.svc.cluster.local:8080",
        "10.244.1.17:8080",  # what a kubelet probe or a scrape sends: the pod IP
        "[fd00::17]:8080",
        None,  # HTTP/1.0 without Host: no browser sent it
    ],
)
def test_default_hosts_and_ip_literals_are_served(tmp_path: Path, host: str | None) -> None:
    status, _, body = _get(_app(tmp_path), "/clusters", host)
    assert status == 200, body


def test_probes_answer_whatever_the_host(tmp_path: Path) -> None:
    for path in ("/livez", "/readz"):
        assert _get(_app(tmp_path), path, "attacker.example")[0] == 200


def test_configured_names_wildcards_and_star(tmp_path: Path) -> None:
    extra = (*default_allowed_hosts(), "history.example.com", "*.corp.example")
    app = _app(tmp_path, allowed_hosts=extra)
    assert _get(app, "/clusters", "history.example.com:443")[0] == 200
    assert _get(app, "/clusters", "a.b.corp.example")[0] == 200
    assert _get(app, "/clusters", "corp.example")[0] == 400  # *.domain means names under it
    assert _get(app, "/clusters", "example.com")[0] == 400
    assert _get(_app(tmp_path, allowed_hosts=("*",)), "/clusters", "anything.example")[0] == 200


def test_host_name_parsing() -> None:
    assert host_name("HistoryServer.NS.svc.cluster.local.:8080") == "historyserver.ns.svc.cluster.local"
    assert host_name("[::1]:80") == "::1" and host_name("::1") == "::1"
    for bad in ("[::1", "[zz]:80", "host:", "host:port", "user@host", "ho/st", ""):
        assert host_name(bad) is None, bad


@pytest.fixture
def store_args(tmp_path: Path) -> list[str]:
    (tmp_path / "store").mkdir()
    return [
        "--storage-backend=local",
        f"--local-storage-dir={tmp_path / 'store'}",
        f"--cache-dir={tmp_path / 'cache'}",
        "--kubernetes=off",
    ]


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_allowed_hosts_flag_and_env(store_args: list[str]) -> None:
    defaults = load_config(store_args, env={"POD_NAMESPACE": "ray-history"}).allowed_hosts
    assert {"localhost", "historyserver", "historyserver.ray-history.svc", "*.svc.cluster.local"} <= set(defaults)
    flagged = load_config([*store_args, "--allowed-hosts=History.example.com, *.corp.example"], env={})
    assert {"history.example.com", "*.corp.example", "localhost"} <= set(flagged.allowed_hosts)
    from_env = load_config(store_args, env={ALLOWED_HOSTS_ENV: "history.example.com"})
    assert "history.example.com" in from_env.allowed_hosts
    domain = load_config([*store_args, "--cluster-domain=k8s.internal"], env={}).allowed_hosts
    assert "*.svc.k8s.internal" in domain


def test_max_live_streams_flag(store_args: list[str]) -> None:
    assert load_config(store_args, env={}).live_stream_limit == 4  # half of the 8 threads
    assert load_config([*store_args, "--threads=1"], env={}).live_stream_limit == 1
    assert load_config([*store_args, "--max-live-streams=3"], env={}).live_stream_limit == 3


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--allowed-hosts=a.example:443"], {}, "no ports"),
        (["--allowed-hosts=a.example"], {ALLOWED_HOSTS_ENV: "b.example"}, "contradicts"),
    ],
)
def test_allowed_hosts_errors_exit_2(
    store_args: list[str], args: list[str], env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_config([*store_args, *args], env=env)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


# --------------------------------------------------- forwarding headers
def test_the_proxy_never_forwards_client_forwarding_headers(tmp_path: Path) -> None:
    with upstream_server() as upstream:
        directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
        storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
        config = ServerConfig(storage=storage, cache_dir=tmp_path / "cache", kubernetes="off")
        app = create_app(config, live=directory)
        with serve(app) as url:
            forged = {
                "X-Forwarded-For": "6.6.6.6",
                "X-Forwarded-Host": "attacker.example",
                "X-Forwarded-Proto": "https",
                "X-Forwarded-Port": "443",
                "Forwarded": "for=6.6.6.6;host=attacker.example;proto=https",
                "X-Real-IP": "6.6.6.6",
            }
            answer = requests.get(f"{url}/api/version", headers=forged, cookies=live_cookies(), timeout=10)
        assert answer.status_code == 200, answer.text
        seen = upstream.last()
        host = url.removeprefix("http://")
        assert seen.header("X-Forwarded-For") == "127.0.0.1"
        assert seen.header("X-Forwarded-Host") == host
        assert seen.header("X-Forwarded-Proto") == "http"
        for name in ("X-Forwarded-Port", "Forwarded", "X-Real-IP"):
            assert seen.header(name) is None, name


# ------------------------------------------------------- leading slashes
@pytest.mark.parametrize(
    ("path", "query", "location"),
    [
        ("//select_cluster", "", "/select_cluster"),
        ("///select_cluster", "x=1", "/select_cluster?x=1"),
        ("//clusters", "", "/clusters"),
        ("//", "", "/"),
        ("//\\evil.example/x", "", "/evil.example/x"),  # never "/\\evil..." (a browser's "//evil...")
        ("//a b", "", "/a%20b"),
    ],
)
def test_leading_slashes_redirect_to_the_single_slash_path(
    tmp_path: Path, path: str, query: str, location: str
) -> None:
    status, headers, body = _get(_app(tmp_path), path, "localhost", query)
    assert (status, headers["Location"]) == (308, location)
    assert b"<html" not in body.lower()  # the picker is never served under a "//" base


# ------------------------------------------------------------- nosniff
@pytest.mark.parametrize(
    ("path", "host", "status"),
    [
        ("/livez", None, 200),
        ("/metrics", "localhost", 200),
        ("/clusters", "localhost", 200),
        ("/clusters", "attacker.example", 400),  # refused before any view
        ("//clusters", "localhost", 308),
        ("/api/jobs/", "localhost", 400),  # no selection cookie
        ("/no/such/route", "localhost", 404),
    ],
)
def test_every_answer_is_nosniff(tmp_path: Path, path: str, host: str | None, status: int) -> None:
    answer_status, headers, _ = _get(_app(tmp_path), path, host)
    assert answer_status == status
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_proxied_answers_are_nosniff_too(tmp_path: Path) -> None:
    """The head dashboard stand-in sends no X-Content-Type-Options: the server adds it."""
    with upstream_server() as upstream:
        directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
        storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
        app = create_app(ServerConfig(storage=storage, cache_dir=tmp_path / "cache", kubernetes="off"), live=directory)
        with serve(app) as url:
            answer = requests.get(f"{url}/api/version", cookies=live_cookies(), timeout=10)
        assert answer.status_code == 200 and upstream.last().path == "/api/version"
        assert answer.headers["X-Content-Type-Options"] == "nosniff"

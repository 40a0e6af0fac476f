"""``historyserver`` flags -> ServerConfig, the gunicorn settings, the WSGI entry."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.common.quantities import parse_quantity
from runtime.server import options
from runtime.server.config import LiveClusterURL
from runtime.server.gunicorn_conf import GunicornLogger, bind_address, redact_url, settings
from runtime.server.options import build_parser, load_config
from runtime.storage.config import StorageConfig


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """load_config() reconfigures the root logger; give the next test its own back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


def base(store_dir: Path, tmp_path: Path) -> list[str]:
    return ["--storage-backend=local", f"--local-storage-dir={store_dir}", f"--cache-dir={tmp_path / 'cache'}"]


def test_gke_guide_command_parses() -> None:
    args = build_parser().parse_args(["--runtime-class-name=gcs", "--ray-root-dir=log"])
    storage = StorageConfig.from_args(args, env={})
    assert (storage.backend, storage.root_dir) == ("gcs", "log")


def test_defaults(store_dir: Path, tmp_path: Path) -> None:
    config = load_config(base(store_dir, tmp_path), env={})
    assert (config.host, config.port, config.workers, config.threads) == ("0.0.0.0", 8080, 1, 8)  # noqa: S104
    assert config.cache_dir == tmp_path / "cache" and config.cache_dir.is_dir()
    assert config.cache_max_bytes == 20 * 1024**3
    assert config.kubernetes == "auto" and config.live_clusters == ()
    assert config.proxy_timeout == 30.0 and config.freshness_seconds == 30.0
    assert config.storage.backend == "local"


def test_every_flag(store_dir: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "index.html").write_text("<html>")
    config = load_config(
        [
            *base(store_dir, tmp_path),
            "--storage-root-dir=hist",
            "--host=127.0.0.1",
            "--port=9090",
            "--workers=2",
            "--threads=4",
            "--cache-max-size=1.5Gi",
            "--freshness-seconds=0",
            "--build-timeout=5m",
            "--live-cluster=demo=http://127.0.0.1:8265/",
            "--live-cluster=team-a/other=https://dash.example.com/prefix",
            "--kubernetes=off",
            "--cluster-domain=corp.example.",
            f"--dashboard-dir={build}",
            "--clusters-limit=50",
            "--proxy-timeout=45s",
            "--secure-cookies",
            "--log-level=debug",
            "--log-format=json",
        ],
        env={},
    )
    assert config.storage.root_dir == "hist"
    assert (config.host, config.port, config.workers, config.threads) == ("127.0.0.1", 9090, 2, 4)
    assert config.cache_max_bytes == int(1.5 * 1024**3)
    assert config.freshness_seconds == 0 and config.build_timeout == 300
    assert config.live_clusters == (
        LiveClusterURL("default", "demo", "http://127.0.0.1:8265"),
        LiveClusterURL("team-a", "other", "https://dash.example.com/prefix"),
    )
    assert config.kubernetes == "off" and config.cluster_domain == "corp.example"
    assert config.dashboard_dir == build and config.clusters_limit == 50
    assert config.proxy_timeout == 45 and config.secure_cookies


@pytest.mark.parametrize(
    ("text", "expected"),
    [("20Gi", 20 * 2**30), ("8G", 8 * 10**9), ("8589934592", 2**33), ("2e9", 2 * 10**9), ("8.5Gi", int(8.5 * 2**30)),
     ("500Mi", 500 * 2**20), ("100k", 100_000), ("0", 0)],
)  # fmt: skip
def test_quantities(text: str, expected: int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["8GiB", "lots", "", "-1Gi", "1.2.3", "Gi"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("--cache-max-size=8GiB", "--cache-max-size"),
        ("--port=70000", "--port"),
        ("--workers=0", "--workers"),
        ("--freshness-seconds=soon", "--freshness-seconds"),
        ("--proxy-timeout=0", "--proxy-timeout"),
        ("--live-cluster=demo", "--live-cluster"),
        ("--live-cluster=Bad_Name=http://x:1", "--live-cluster"),
        ("--live-cluster=demo=ftp://x", "--live-cluster"),
        ("--live-cluster=demo=http://x:1/?a=b", "--live-cluster"),
        ("--live-cluster=demo=http://x:99999", "--live-cluster"),
        ("--kubernetes=maybe", "--kubernetes"),
        ("--dashboard-dir=/nonexistent", "--dashboard-dir"),
        ("--kubeconfigs=a,b", "--kubeconfigs"),
        ("--log-format=xml", "--log-format"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, named: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        load_config([*base(store_dir, tmp_path), flag], env={})
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_duplicate_live_cluster(store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        load_config([*base(store_dir, tmp_path), "--live-cluster=a=http://x", "--live-cluster=default/a=http://y"], {})
    assert exited.value.code == 2 and "twice" in capsys.readouterr().err


def test_storage_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        load_config(["--storage-backend=local", f"--local-storage-dir={tmp_path / 'missing'}"], env={})
    assert exited.value.code == 1
    assert "missing" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        load_config([], env={})
    assert exited.value.code == 2
    assert "--storage-backend" in capsys.readouterr().err


def test_explicit_in_cluster_outside_kubernetes(
    store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        load_config([*base(store_dir, tmp_path), "--kubernetes=in-cluster"], env={})
    assert exited.value.code == 2
    assert "--kubernetes=in-cluster" in capsys.readouterr().err


def test_reference_flags_are_accepted_and_ignored(
    store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--session-cache-size=100", "--session-cache-max-memory=8Gi", "--session-process-timeout=2m",
             "--use-kubernetes-proxy", "--use-auth-token-mode=false", "--kube-api-qps=50"]  # fmt: skip
    load_config([*base(store_dir, tmp_path), *extra, "--kubeconfigs="], env={})
    text = capsys.readouterr().err  # configure_logging replaces the root handlers: read stderr
    for flag in ("--session-cache-size", "--session-cache-max-memory", "--session-process-timeout",
                 "--use-kubernetes-proxy", "--use-auth-token-mode", "--kube-api-qps"):  # fmt: skip
        assert f"{flag}=" in text and "ignored" in text


def test_cache_dir_from_env_and_contradiction(
    store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--storage-backend=local", f"--local-storage-dir={store_dir}"]
    config = load_config(args, env={"HISTORYSERVER_CACHE_DIR": str(tmp_path / "from-env")})
    assert config.cache_dir == tmp_path / "from-env"
    with pytest.raises(SystemExit) as exited:
        load_config([*args, f"--cache-dir={tmp_path / 'a'}"], env={"HISTORYSERVER_CACHE_DIR": str(tmp_path / "b")})
    assert exited.value.code == 2 and "HISTORYSERVER_CACHE_DIR" in capsys.readouterr().err


def test_cache_dir_default_falls_back_to_the_user_cache(
    store_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(options, "DEFAULT_CACHE_DIR", blocker / "historyserver")  # cannot be created
    args = ["--storage-backend=local", f"--local-storage-dir={store_dir}"]
    config = load_config(args, env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert config.cache_dir == tmp_path / "xdg" / "historyserver"


def test_unwritable_cache_dir(store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = ["--storage-backend=local", f"--local-storage-dir={store_dir}", f"--cache-dir={blocker / 'x'}"]
    with pytest.raises(SystemExit) as exited:
        load_config(args, env={})
    assert exited.value.code == 2 and "--cache-dir" in capsys.readouterr().err


def test_gunicorn_settings(store_dir: Path, tmp_path: Path) -> None:
    config = load_config([*base(store_dir, tmp_path), "--threads=16", "--workers=3", "--port=8081"], env={})
    options = settings(config)
    assert options["worker_class"] == "runtime.server.gunicorn_conf.ThreadWorker"
    assert (options["workers"], options["threads"]) == (3, 16)
    assert options["bind"] == ["0.0.0.0:8081"]
    assert options["timeout"] >= config.build_timeout  # a cold load must never get its worker killed
    assert options["control_socket_disable"] is True
    assert bind_address("::", 8080) == "[::]:8080"


def test_embedded_application_takes_the_settings(store_dir: Path, tmp_path: Path) -> None:
    from runtime.server.wsgi import HistoryServerApplication

    config = load_config([*base(store_dir, tmp_path), "--threads=5", "--port=8089"], env={})
    application = HistoryServerApplication(config)
    from gunicorn.workers.gthread import ThreadWorker as GThreadWorker

    assert issubclass(application.cfg.worker_class, GThreadWorker)
    assert application.cfg.threads == 5
    assert application.cfg.bind == ["0.0.0.0:8089"]
    assert application.cfg.control_socket_disable is True


def test_wsgi_config_from_env(store_dir: Path, tmp_path: Path) -> None:
    from runtime.server.wsgi import config_from_env

    args = " ".join(base(store_dir, tmp_path)) + " --live-cluster 'demo=http://127.0.0.1:1'"
    config = config_from_env({"HISTORYSERVER_ARGS": args})
    assert config.live_clusters == (LiveClusterURL("default", "demo", "http://127.0.0.1:1"),)


def test_master_does_not_import_prometheus_client() -> None:
    """Multi-worker metrics need PROMETHEUS_MULTIPROC_DIR set before prometheus_client
    is first imported, which happens in the workers (after fork), never in the master."""
    code = (
        "import sys\n"
        "import runtime.server.main, runtime.server.wsgi, runtime.server.gunicorn_conf, runtime.server.live.k8s\n"
        "assert 'prometheus_client' not in sys.modules, 'imported too early'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_module_entry_point_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "runtime.server.main", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert "--live-cluster" in out.stdout and "--cache-max-size" in out.stdout


def test_the_access_log_never_holds_the_login_code_or_state(caplog: pytest.CaptureFixture[str]) -> None:
    """The OIDC callback's URL carries the authorization code and state: gunicorn's access
    log wrote them as they came (request line, and the referer of the next request)."""
    import datetime
    import types

    from gunicorn.config import Config  # type: ignore[import-untyped]

    assert redact_url("GET /oauth2/callback?state=s3cr3t&code=abc.def HTTP/1.1") == (
        "GET /oauth2/callback?state=REDACTED&code=REDACTED HTTP/1.1"
    )
    assert redact_url("/api/v0/tasks?limit=10&filter_keys=state") == "/api/v0/tasks?limit=10&filter_keys=state"
    log = GunicornLogger(Config())
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": "/oauth2/callback?code=SECRETCODE&state=SECRETSTATE",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "PATH_INFO": "/oauth2/callback",
        "QUERY_STRING": "code=SECRETCODE&state=SECRETSTATE",
        "HTTP_REFERER": "https://h/oauth2/callback?code=SECRETCODE",
    }
    resp = types.SimpleNamespace(status="302 Found", sent=0, headers=[])
    atoms = log.atoms(resp, types.SimpleNamespace(headers=[("Referer", environ["HTTP_REFERER"])]), environ,
                      datetime.timedelta(seconds=0))  # fmt: skip
    text = " ".join(str(value) for value in atoms.values())
    assert "SECRETCODE" not in text and "SECRETSTATE" not in text, text
    assert atoms["r"] == "GET /oauth2/callback?code=REDACTED&state=REDACTED HTTP/1.1"

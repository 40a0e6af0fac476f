"""The metrics flags: values, environment variables, and errors naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.server.options import build_parser, config_from_args

BASE = ["--storage-backend", "local"]


def _config(tmp_path: Path, flags: list[str], env: dict[str, str] | None = None) -> object:
    parser = build_parser()
    args = parser.parse_args([*BASE, "--local-storage-dir", str(tmp_path / "s"), "--create-bucket",
                              "--cache-dir", str(tmp_path / "c"), *flags])  # fmt: skip
    return config_from_args(parser, args, env or {})


def test_flags_and_the_environment_the_pulumi_program_sets(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cr3t\n")
    env = {
        "PROMETHEUS_URL": "http://prometheus.metrics.svc:9090/",
        "GRAFANA_URL": "http://grafana.metrics.svc:80",
        "GRAFANA_DASHBOARD_UIDS": "rayDefaultDashboard,rayDataDashboard",
        "PROMETHEUS_DATASOURCE": "Mimir",
    }
    config = _config(tmp_path, ["--grafana-token-file", str(token)], env)
    metrics = config.metrics  # type: ignore[attr-defined]
    assert metrics.prometheus_url == "http://prometheus.metrics.svc:9090"
    assert metrics.grafana_url == "http://grafana.metrics.svc:80"
    assert metrics.dashboard_uids == {"default": "rayDefaultDashboard", "data": "rayDataDashboard"}
    assert metrics.datasource == "Mimir"
    assert metrics.grafana_authorization == "Bearer s3cr3t"
    assert "s3cr3t" not in repr(config)


def test_defaults_are_rays_dashboards_and_no_services(tmp_path: Path) -> None:
    metrics = _config(tmp_path, []).metrics  # type: ignore[attr-defined]
    assert metrics.prometheus_url is None and metrics.grafana_url is None
    assert metrics.dashboard_uids["default"] == "rayDefaultDashboard" and len(metrics.dashboard_uids) == 8
    assert metrics.grafana_authorization is None


def test_basic_auth_file(tmp_path: Path) -> None:
    secret = tmp_path / "basic"
    secret.write_text("admin:pw")
    metrics = _config(tmp_path, ["--grafana-basic-auth-file", str(secret)]).metrics  # type: ignore[attr-defined]
    assert metrics.grafana_authorization == "Basic YWRtaW46cHc="


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--prometheus-url", "prometheus:9090"], {}, "--prometheus-url=prometheus:9090: expected http(s)://"),
        (["--grafana-url", "http://u:p@grafana"], {}, "--grafana-url=http://u:p@grafana: no credentials"),
        (["--grafana-url", "http://grafana?x=1"], {}, "no query"),
        ([], {"GRAFANA_URL": "ftp://grafana"}, "GRAFANA_URL=ftp://grafana"),
        (["--grafana-dashboard-uids", "mine"], {}, "--grafana-dashboard-uids=mine: 'mine' is not one of Ray's"),
        (["--grafana-dashboard-uids", "data=rayDataDashboard"], {}, "the default dashboard"),
        (["--grafana-token-file", "/nonexistent/token"], {}, "--grafana-token-file=/nonexistent/token: cannot read"),
        (["--grafana-org-id", "0"], {}, "--grafana-org-id=0"),
    ],
)
def test_bad_values_name_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        _config(tmp_path, flags, env)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err

"""The three ways to configure the collector, and clear errors naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.collector.config import CollectorConfigError, build_parser, load_config
from runtime.common.durations import parse_duration

KUBERAY_ENV = {
    # exactly what KubeRay >= 1.7 injects into its collector sidecar, plus storage
    "POD_IP": "10.244.0.12",
    "RAY_CLUSTER_NAME": "rayjob-historyserver-x7k2p",
    "RAY_CLUSTER_NAMESPACE": "default",
    "RAY_ROLE": "head",
    "EVENTS_PORT": "8084",
    "FQ_RAY_IP": "rayjob-historyserver-x7k2p-head-svc.default.svc.cluster.local",
    "OWNER_KIND": "RayJob",
    "OWNER_NAME": "rayjob-historyserver",
    "RAY_DASHBOARD_ADDRESS": "http://localhost:8265",
    "STORAGE_BACKEND": "gcs",
    "GCS_BUCKET": "ray-history",
}


def load(argv: list[str], env: dict[str, str]):  # type: ignore[no-untyped-def]
    return load_config(build_parser().parse_args(argv), env)


def test_gke_guide_flags() -> None:
    config = load(
        [
            "--role=Head",
            "--runtime-class-name=gcs",
            "--ray-cluster-name=raycluster-historyserver",
            "--ray-root-dir=log",
            "--events-port=8084",
        ],
        {"GCS_BUCKET": "b"},
    )
    assert config.is_head and config.events_port == 8084
    assert (config.storage.backend, config.storage.root_dir) == ("gcs", "log")
    assert config.cluster.name == "raycluster-historyserver" and config.cluster.namespace == "default"
    assert config.cluster.owner_kind == "raycluster"


def test_current_kuberay_flags() -> None:
    config = load(
        [
            "--role=worker",
            "--storage-backend=s3",
            "--storage-root-dir=hist",
            "--ray-cluster-name=c",
            "--ray-cluster-namespace=team-a",
            "--owner-kind=RayService",
            "--owner-name=svc",
            "--event-rotation-interval=1m30s",
            "--event-max-disk-mb=500",
        ],
        {},
    )
    assert config.role == "Worker"
    cluster = config.cluster
    assert (cluster.owner_kind, cluster.owner_name, cluster.namespace) == ("rayservice", "svc", "team-a")
    assert config.event_rotation_interval == 90.0 and config.event_max_disk == 500 << 20


def test_environment_only_as_kuberay_injects_it() -> None:
    config = load([], KUBERAY_ENV)
    assert config.is_head
    assert (config.cluster.owner_kind, config.cluster.owner_name) == ("rayjob", "rayjob-historyserver")
    assert config.pod_ip == "10.244.0.12" and config.fq_ray_ip is not None
    assert config.storage.backend == "gcs"
    assert config.event_data_dir == Path("/tmp/ray/event-data")


def test_spool_follows_ray_tmp_root() -> None:
    config = load([], {**KUBERAY_ENV, "RAY_TMP_ROOT": "/data/ray"})
    assert config.event_data_dir == Path("/data/ray/event-data")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"STORAGE_BACKEND": "gcs"}, "--ray-cluster-name or set RAY_CLUSTER_NAME"),
        (["--role=boss"], {**KUBERAY_ENV, "RAY_ROLE": ""}, "--role=boss: must be Head or Worker"),
        (["--role=Worker"], KUBERAY_ENV, "--role=Worker contradicts RAY_ROLE=head"),
        ([], {**KUBERAY_ENV, "OWNER_NAME": ""}, "must be set together"),
        ([], {**KUBERAY_ENV, "EVENTS_PORT": "eighty"}, "EVENTS_PORT=eighty"),
        ([], {**KUBERAY_ENV, "EVENTS_PORT": "70000"}, "TCP port"),
        ([], {**KUBERAY_ENV, "RAY_COLLECTOR_POLL_INTERVAL": "-5s"}, "RAY_COLLECTOR_POLL_INTERVAL"),
        ([], {**KUBERAY_ENV, "RAY_COLLECTOR_EVENT_MAX_DISK_MB": "0"}, "positive"),
        ([], {**KUBERAY_ENV, "ENABLE_LOG_COLLECTOR": "maybe"}, "ENABLE_LOG_COLLECTOR"),
        ([], {**KUBERAY_ENV, "ENABLE_LOG_COLLECTOR": "false", "ENABLE_EVENT_COLLECTOR": "0"}, "nothing to collect"),
        ([], {**KUBERAY_ENV, "RAY_CLUSTER_NAME": "Bad_Name"}, "cluster identity"),
        ([], {**KUBERAY_ENV, "STORAGE_BACKEND": "ftp"}, "--storage-backend"),
        (["--storage-backend=s3"], KUBERAY_ENV, "contradicts STORAGE_BACKEND=gcs"),
        ([], {**KUBERAY_ENV, "RAY_COLLECTOR_ADDITIONAL_ENDPOINTS": "api/x"}, "must start with '/'"),
    ],
)
def test_bad_settings_fail_naming_the_setting(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises((CollectorConfigError, ValueError), match=message):
        load(argv, env)


def test_unknown_flags_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--no-such-flag=1"])
    assert exit_info.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


def test_flag_and_env_agreeing_after_normalising_is_fine() -> None:
    assert load(["--role=Head", "--events-port=8084"], KUBERAY_ENV).is_head


def test_raycluster_owner_kind_means_no_owner() -> None:
    config = load([], {**KUBERAY_ENV, "OWNER_KIND": "RayCluster", "OWNER_NAME": "c"})
    assert config.cluster.owner_kind == "raycluster" and config.cluster.owner_name == ""


def test_additional_endpoints() -> None:
    config = load([], {**KUBERAY_ENV, "RAY_COLLECTOR_ADDITIONAL_ENDPOINTS": " /api/train/v2/runs/v1, ,/x?y=1"})
    assert config.additional_endpoints == ("/api/train/v2/runs/v1", "/x?y=1")


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("12", 12)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 m", "m5", "5x", "1h-3m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_limits_against_hostile_clients() -> None:
    """docs/security-model.md: each limit has a flag and an environment variable."""
    default = load([], KUBERAY_ENV)
    assert (default.max_targets_per_batch, default.max_open_spool_files, default.max_connections) == (1000, 256, 32)
    assert (default.request_header_timeout, default.request_body_timeout) == (10.0, 60.0)
    config = load(
        ["--max-targets-per-batch=50", "--max-open-spool-files=16", "--request-header-timeout=2s"],
        {**KUBERAY_ENV, "RAY_COLLECTOR_MAX_CONNECTIONS": "8", "RAY_COLLECTOR_REQUEST_BODY_TIMEOUT": "1m"},
    )
    assert (config.max_targets_per_batch, config.max_open_spool_files, config.max_connections) == (50, 16, 8)
    assert (config.request_header_timeout, config.request_body_timeout) == (2.0, 60.0)
    with pytest.raises(CollectorConfigError, match="RAY_COLLECTOR_MAX_OPEN_SPOOL_FILES"):
        load([], {**KUBERAY_ENV, "RAY_COLLECTOR_MAX_OPEN_SPOOL_FILES": "0"})

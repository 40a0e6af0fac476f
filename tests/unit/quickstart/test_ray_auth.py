"""The demo's Ray token: generated per run, in a 0600 file, handed to Ray and the
collector as a path, never as the value (no Ray needed)."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest

from runtime.quickstart import add_arguments, services
from runtime.quickstart.options import options_from_args
from runtime.quickstart.ray_auth import TOKEN_FILE, RayToken


def test_a_new_token_per_run_readable_by_its_owner_only(tmp_path: Path) -> None:
    first = RayToken.create(tmp_path)
    assert first.path == tmp_path / TOKEN_FILE
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    value = first.value()
    assert len(value) >= 40  # token_urlsafe(32): 256 bits
    assert first.headers() == {"Authorization": f"Bearer {value}"}
    assert value not in repr(first)
    second = RayToken.create(tmp_path)  # the next run replaces it
    assert second.value() != value
    second.remove()
    assert not second.path.exists()
    second.remove()  # twice is fine


def test_ray_and_the_collector_get_the_path_not_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The caller's own Ray auth settings must not decide the demo's.
    monkeypatch.setenv("RAY_AUTH_TOKEN", "callers-token")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_ENABLE_K8S_TOKEN_AUTH", "true")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_from_args(parser.parse_args([f"--storage-dir={tmp_path / 'store'}"]))
    layout = services.RayLayout(tmp_path / "ray", options.gcs_port, options.dashboard_port)
    token = RayToken.create(tmp_path)
    ray = services.ray_head(options, layout, tmp_path / "ray.log", token)
    collector = services.collector(options, layout, tmp_path / "collector.log", token)
    server = services.history_server(options, tmp_path / "server.log")
    for process in (ray, collector):
        assert process.env["RAY_AUTH_MODE"] == "token"
        assert process.env["RAY_AUTH_TOKEN_PATH"] == str(token.path)
        assert "RAY_AUTH_TOKEN" not in process.env
        assert "RAY_ENABLE_K8S_TOKEN_AUTH" not in process.env
        assert token.value() not in " ".join([*process.cmd, *process.env.values()])
    assert not any(name.startswith("RAY_AUTH_") for name in server.env)

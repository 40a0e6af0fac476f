"""``ray-history open`` against a real history server (werkzeug, a local store with session A,
an older session of the same cluster and a RayJob's session): the printed URL answers
without cookies, ``latest``/``live``/owner forms, errors naming the argument, and the
browser (Python's ``webbrowser`` honouring ``BROWSER``, run in a subprocess)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runtime.cli import main as cli_main
from runtime.cli.open import wants_browser
from runtime.server.app import create_app
from runtime.storage.layout import KeyLayout
from tests.support.app_world import (
    DEMO,
    JOB_CLUSTER,
    JOB_SESSION,
    OLDER,
    FakeLive,
    live_cluster,
    server_config,
    stored_session_a,
)
from tests.support.sample_session import REPO_ROOT, SESSION_A
from tests.unit.server.live.servers import serve


@pytest.fixture
def live() -> FakeLive:
    return FakeLive()


@pytest.fixture
def server(tmp_path: Path, live: FakeLive) -> Iterator[str]:
    config = server_config(tmp_path, sessions_ttl_seconds="0")
    store, sample = stored_session_a(config)
    layout = KeyLayout("")
    store.put_bytes(layout.marker_key(DEMO, OLDER), b"")
    store.put_bytes(layout.marker_key(JOB_CLUSTER, JOB_SESSION), b"")
    store.put_bytes(layout.log_key(JOB_CLUSTER, JOB_SESSION, sample.node_id, "raylet.out"), b"job line\n")
    with serve(create_app(config, store=store, live=live)) as url:
        yield url


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli_main.main(argv)
    except SystemExit as exited:
        code = exited.code if isinstance(exited.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _open(server: str, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = _run(["open", *args, "--server", server, "--no-browser"], capsys)
    assert code == 0, err
    assert out.count("\n") == 1  # the URL alone, for scripts
    return out.strip()


def test_the_printed_url_opens_the_session_without_cookies(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = _open(server, capsys, DEMO.name)
    assert url == f"{server}/sessions/default/{DEMO.name}/{SESSION_A}/"  # latest, resolved
    answer = requests.get(url + "api/jobs/", timeout=30)
    assert answer.status_code == 200 and isinstance(answer.json(), list)
    assert "Set-Cookie" not in answer.headers


def test_session_names_and_owner_forms(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _open(server, capsys, DEMO.name, OLDER) == f"{server}/sessions/default/{DEMO.name}/{OLDER}/"
    assert _open(server, capsys, OLDER) == f"{server}/sessions/default/{DEMO.name}/{OLDER}/"  # the session alone
    job = f"{server}/sessions/team-a/rayjob/rayjob-nightly/{JOB_SESSION}/"
    assert _open(server, capsys, JOB_SESSION) == job  # found in every namespace, owner form
    assert _open(server, capsys, "rayjob-nightly", "--kind", "rayjob", "-n", "team-a") == job
    assert _open(server, capsys, JOB_CLUSTER.name, "-n", "team-a") == job  # by the RayCluster's own name
    log = requests.get(job + "api/v0/logs", timeout=30)
    assert log.status_code == 200


def test_a_running_cluster(server: str, live: FakeLive, capsys: pytest.CaptureFixture[str]) -> None:
    live.clusters = [live_cluster()]
    # latest stays latest: the live cluster now, its stored session once it is gone.
    assert _open(server, capsys, DEMO.name) == f"{server}/sessions/default/{DEMO.name}/latest/"
    assert _open(server, capsys, DEMO.name, "live") == f"{server}/sessions/default/{DEMO.name}/live/"
    assert _open(server, capsys, DEMO.name, SESSION_A) == f"{server}/sessions/default/{DEMO.name}/{SESSION_A}/"
    live.clusters = []
    code, _, err = _run(["open", DEMO.name, "live", "--server", server, "--no-browser"], capsys)
    assert code == 1 and "is not running" in err


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["nosuch"], 1, "no cluster default/nosuch"),
        (["raycluster-demo", "session_2026-01-01_00-00-00_000000_1"], 1, "with session session_2026-01-01"),
        (["session_2026-01-01_00-00-00_000000_1"], 1, "no stored session session_2026-01-01"),
        (["session_2026-01-01_00-00-00_000000_1", "-n", "team-a"], 1, "in namespace team-a"),
        (["Bad_Name"], 2, "CLUSTER: invalid cluster name"),
        (["session_x"], 2, "SESSION: 'session_x' is not a session name"),
        ([SESSION_A, OLDER], 2, "is a session name: give CLUSTER SESSION"),
        (["raycluster-demo", "yesterday"], 2, "is not a session name"),
        (["raycluster-demo", "--kind", "rayjob"], 1, "no cluster default/rayjob/raycluster-demo"),
    ],
)
def test_errors_name_what_was_wrong(
    server: str, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    got, out, err = _run(["open", *args, "--server", server, "--no-browser"], capsys)
    assert (got, out) == (code, "")
    assert message in err


def test_an_unreachable_server_is_an_error_not_a_url(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["open", "x", "--server", "http://127.0.0.1:9", "--no-browser"], capsys)
    assert code == 1 and out == ""
    assert "127.0.0.1:9" in err


@pytest.mark.parametrize(
    ("flag", "tty", "env", "platform", "expected"),
    [
        (True, False, {}, "linux", True),
        (False, True, {"DISPLAY": ":0"}, "linux", False),
        (None, True, {"DISPLAY": ":0"}, "linux", True),
        (None, True, {"WAYLAND_DISPLAY": "wayland-0"}, "linux", True),
        (None, True, {}, "linux", False),  # ssh session, container
        (None, False, {"DISPLAY": ":0"}, "linux", False),  # URL=$(ray-history open ...)
        (None, True, {}, "darwin", True),
        (None, True, {}, "win32", True),
    ],
)
def test_when_a_browser_is_opened(
    flag: bool | None, tty: bool, env: dict[str, str], platform: str, expected: bool
) -> None:
    assert wants_browser(flag, tty, env, platform) is expected


def _cli(server: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli.main", "open", DEMO.name, "--server", server, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )


def test_the_browser_gets_the_url_and_none_is_not_an_error(server: str, tmp_path: Path) -> None:
    seen = tmp_path / "seen.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {seen}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    asked = _cli(server, {"BROWSER": str(browser)}, "--browser")
    assert asked.returncode == 0, asked.stderr
    assert seen.read_text().split() == [asked.stdout.strip()]
    # Default: stdout is a pipe here, so no browser even with a display.
    quiet = _cli(server, {"BROWSER": str(browser), "DISPLAY": ":0"})
    assert quiet.returncode == 0 and seen.read_text().split() == [asked.stdout.strip()]
    # A browser that fails: the URL is printed, a warning, exit 0.
    failing = _cli(server, {"BROWSER": "false"}, "--browser")
    assert failing.returncode == 0
    assert failing.stdout.strip() == asked.stdout.strip()
    assert "no browser could be opened" in failing.stderr

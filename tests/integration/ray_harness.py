"""Real Ray 2.60 for integration tests: a head node on loopback, started with the
event-export variables, plus the processes around it (collector, recording proxy).

The head runs as ``ray start --head --block`` in its own process group, so
stopping it stops that cluster only (``ray stop`` would stop every Ray on the
machine, including another test's).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from runtime.common.ray_export import event_export_env
from runtime.storage.layout import ClusterRef, is_event_file_name
from tests.integration.emulators.base import REPO_ROOT, free_port, wait_for_port

#: The sample job (tests/fixtures/ray-workloads/SOURCE.md says where it came from).
SAMPLES = REPO_ROOT / "tests" / "fixtures" / "ray-workloads"
RAY_BIN = Path(sys.executable).with_name("ray")
#: Ray's token-auth variables: set by ``RayHead(auth_token=...)`` or ``extra_env``, never inherited.
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_K8S_TOKEN_AUTH")


def ray_available() -> bool:
    return RAY_BIN.exists()


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# ----------------------------------------------------------------- Ray head
class RayHead:
    """``ray start --head --block`` on loopback with free ports and its own temp dir."""

    def __init__(
        self,
        export_url: str,
        extra_env: dict[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        *,
        auth_token: str | None = None,
    ) -> None:
        """``auth_token``: start Ray with token auth (``RAY_AUTH_MODE=token``) and this token;
        the harness's own requests and ``ray job submit`` then send it."""
        self.extra_args = extra_args
        self.auth_token = auth_token
        # Unix socket paths are limited to ~107 bytes: keep the temp root short.
        self.tmp_root = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))
        self.gcs_port = free_port()
        self.dashboard_port = free_port()
        # Job entrypoints run "python ...": it must be this environment's, with Ray.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        # The caller's shell decides nothing about this head's auth (extra_env may).
        inherited = {name: value for name, value in os.environ.items() if name not in AUTH_ENV}
        self.env = {
            **inherited,
            **event_export_env(export_url),
            "PATH": path,
            "RAY_USAGE_STATS_ENABLED": "0",
            **(extra_env or {}),
        }
        if auth_token is not None:
            self.env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": auth_token})
        self.log_path = self.tmp_root.with_suffix(".ray-start.log")
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def auth_headers(self) -> dict[str, str]:
        """What a client of this head's dashboard must send (nothing without token auth)."""
        return {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token is not None else {}

    def _open(self, path: str, timeout: float) -> Any:
        request = urllib.request.Request(f"{self.dashboard_url}{path}", headers=self.auth_headers())  # noqa: S310
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310

    def start(self, timeout: float = 120.0) -> None:
        cmd = [
            str(RAY_BIN), "start", "--head", "--block",
            f"--port={self.gcs_port}",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            "--include-dashboard=true",
            "--num-cpus=2",
            f"--temp-dir={self.tmp_root}",
            "--disable-usage-stats",
            *self.extra_args,
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        wait_until(self._dashboard_up, timeout, f"Ray dashboard on {self.dashboard_url} (see {self.log_path})")

    def _dashboard_up(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {self._proc.returncode}; see {self.log_path}")
        try:
            with self._open("/api/version", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def session_dir(self) -> Path:
        return (self.tmp_root / "session_latest").resolve()

    def node_id(self) -> str:
        for entry in self.session_dir().iterdir():
            if entry.name.startswith("gcs_server_port_"):
                return entry.name.rsplit("_", 1)[1]
        raise RuntimeError("no node id in the session directory")

    def gcs_address(self) -> str:
        """``node_ip:port`` of the GCS as Ray wrote it to ``{tmp_root}/ray_current_cluster``
        (independent of any code under test)."""
        return (self.tmp_root / "ray_current_cluster").read_text().strip()

    def node_ip(self) -> str:
        """The node IP Ray reports for the head, as in :meth:`gcs_address`."""
        return self.gcs_address().rsplit(":", 1)[0]

    def submit(self, entrypoint: str, working_dir: Path, submission_id: str, timeout: float = 300.0) -> str:
        """``ray job submit`` and wait for a terminal status; returns it."""
        subprocess.run(
            [str(RAY_BIN), "job", "submit", "--address", self.dashboard_url, "--submission-id", submission_id,
             "--working-dir", str(working_dir), "--no-wait", "--", *entrypoint.split()],
            env=self.env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        status = ""

        def finished() -> bool:
            nonlocal status
            with self._open(f"/api/jobs/{submission_id}", timeout=10) as resp:
                status = json.loads(resp.read())["status"]
            return status in ("SUCCEEDED", "FAILED", "STOPPED")

        wait_until(finished, timeout, f"job {submission_id} to finish", interval=1.0)
        return status

    def stop(self) -> None:
        """Ctrl-C, as in a terminal: ``ray start --block`` stops its node within ~2 s
        on SIGINT, while on SIGTERM it waited ~30 s (measured here) before exiting."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=30)
        # Whatever --block did not reap (raylet, workers, dashboard) goes too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp_root, ignore_errors=True)


# ------------------------------------------------------------- collector
def collector_env(bucket: Path, ray: RayHead, cluster: ClusterRef, **extra: str) -> dict[str, str]:
    """A head collector writing to a local bucket, with short intervals for tests."""
    return {
        "STORAGE_BACKEND": "local",
        "LOCAL_STORAGE_DIR": str(bucket),
        "STORAGE_CREATE_BUCKET": "true",
        "STORAGE_ROOT_DIR": "hist",
        "RAY_CLUSTER_NAME": cluster.name,
        "RAY_CLUSTER_NAMESPACE": cluster.namespace,
        "RAY_ROLE": "head",
        "RAY_TMP_ROOT": str(ray.tmp_root),
        "RAY_DASHBOARD_ADDRESS": ray.dashboard_url,
        "RAY_COLLECTOR_EVENT_DATA_DIR": str(bucket.parent / "spool"),
        "RAY_COLLECTOR_POLL_INTERVAL": "2s",
        "RAY_COLLECTOR_LOG_UPLOAD_INTERVAL": "2s",
        "RAY_COLLECTOR_EVENT_ROTATION_INTERVAL": "3s",
        "LOG_LEVEL": "INFO",
        **extra,
    }


class CollectorProcess:
    """``python -m runtime.collector.main`` configured by environment only."""

    def __init__(self, env: dict[str, str], port: int, log_path: Path) -> None:
        self.env = {**os.environ, **env, "EVENTS_PORT": str(port), "EVENTS_HOST": "127.0.0.1"}
        self.port = port
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "runtime.collector.main"], env=self.env, cwd=REPO_ROOT,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        wait_for_port(self.port, timeout=30, proc=self._proc)

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def terminate(self, timeout: float = 60.0) -> int:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGTERM)
        code = self._proc.wait(timeout=timeout)
        self._proc = None
        return code

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


# ----------------------------------------------------------- recording proxy
@dataclass
class RecordedBatch:
    body: bytes
    status: int


@dataclass
class RecordingProxy:
    """Sits between Ray and the collector: forwards every POST and records the
    batch and the collector's answer, so a test knows exactly what Ray sent and
    what the collector acknowledged."""

    upstream_port: int
    port: int = field(default_factory=free_port)
    batches: list[RecordedBatch] = field(default_factory=list)

    def __post_init__(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, reply = proxy.forward(body)
                proxy.batches.append(RecordedBatch(body, status))
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/events"

    def forward(self, body: bytes) -> tuple[int, bytes]:
        conn = HTTPConnection("127.0.0.1", self.upstream_port, timeout=10)
        try:
            conn.request("POST", "/v1/events", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        except OSError:
            return 502, b'{"error": "collector unreachable"}'  # Ray retries, like connection refused
        finally:
            conn.close()

    def acknowledged_events(self) -> dict[str, dict[str, object]]:
        """eventId -> event for every event in a batch the collector answered 200."""
        events: dict[str, dict[str, object]] = {}
        for batch in list(self.batches):
            if batch.status == 200:
                for event in json.loads(batch.body):
                    events[str(event["eventId"])] = event
        return events

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def stored_events(root: Path) -> Iterator[dict[str, object]]:
    """Every event line in a local-storage tree (gz or plain)."""
    import gzip

    for path in sorted(root.rglob("*")):
        in_event_dir = "node_events" in path.parts or "job_events" in path.parts
        if not in_event_dir or "logs" in path.parts or not is_event_file_name(path.name):
            continue
        data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        for line in data.splitlines():
            if line.strip():
                yield json.loads(line)


def unique_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class HeadWithCollector:
    ray: RayHead
    collector: CollectorProcess
    proxy: RecordingProxy
    bucket: Path


@contextlib.contextmanager
def head_with_collector(tmp: Path, cluster: ClusterRef, **env: str) -> Iterator[HeadWithCollector]:
    """A real Ray head whose events reach a head collector (``collector_env`` plus ``env``)
    through a :class:`RecordingProxy`, writing to ``tmp/bucket``; all stopped on exit."""
    bucket = tmp / "bucket"
    port = free_port()
    proxy = RecordingProxy(upstream_port=port)
    ray = RayHead(proxy.url)
    collector = CollectorProcess({}, port, tmp / "collector.log")
    try:
        ray.start()
        collector.env.update(collector_env(bucket, ray, cluster, **env))
        collector.start()
        yield HeadWithCollector(ray, collector, proxy, bucket)
    finally:
        collector.kill()
        ray.cleanup()
        proxy.close()

"""A two-node Ray 2.60 cluster in network namespaces, each node with its collector.

Per node, as in a KubeRay pod: ``ray start`` (head or worker) with its own temp
root, the collector configured only by the environment KubeRay >= 1.7 injects into
the sidecar (``POD_IP``, ``FQ_RAY_IP``, ``RAY_ROLE``, ...), and between them the
test's recorder (``recorder.py``), which notes every batch the collector answered.
Both collectors write to one local storage directory (or to the storage the test
gives, e.g. ``storage_host.py``); the history server reads it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from runtime.common.ray_export import event_export_env
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.multinode.netns import HEAD_IP, WORKER_IP, NsProcess, Topology, Tunnel, port_open
from tests.integration.multinode.recorder import acknowledged
from tests.integration.ray_harness import AUTH_ENV, RAY_BIN, wait_until

GCS_PORT = 6379
DASHBOARD_PORT = 8265
EVENTS_PORT = 8084  # the collector's, as KubeRay injects it
RECORDER_PORT = 18084  # Ray exports here; the recorder forwards to EVENTS_PORT
AGENT_PORT = 52365  # Ray's dashboard agent HTTP port (its default)
ROOT_DIR = "hist"
WORKLOADS = Path(__file__).with_name("workloads")
#: Submission ids of the harness's own path-check jobs (scenarios leave them out of job lists).
PATH_CHECK = "pathcheck-"
#: (the live /api/v0/tasks rows, {(task id, "out"|"err"): the live log text})
LiveView = tuple[list[dict[str, Any]], dict[tuple[str, str], str]]
CLUSTER = ClusterRef(namespace="default", name="raycluster-two-nodes")


def _base_env() -> dict[str, str]:
    # Job entrypoints run "python ...": it must be this environment's, with Ray.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    inherited = {name: value for name, value in os.environ.items() if name not in AUTH_ENV}
    return {**inherited, "PATH": path, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}


@dataclass
class Node:
    """One "pod": a namespace, its Ray node, its collector and the recorder between them."""

    role: str  # "head" or "worker"
    ns: str
    ip: str
    workdir: Path
    cluster: ClusterRef
    bucket: Path
    resources: dict[str, float]
    storage_env: dict[str, str] | None = None  # None: the local directory ``bucket``
    tmp_root: Path = field(init=False)
    ray: NsProcess | None = None
    collector: NsProcess | None = None
    recorder: NsProcess | None = None

    def __post_init__(self) -> None:
        # Unix socket paths are limited to ~107 bytes: keep the temp root short.
        self.tmp_root = Path(tempfile.mkdtemp(prefix=f"rmn{self.role[0]}", dir="/tmp"))
        self.records = self.workdir / f"{self.role}-batches.jsonl"

    # ------------------------------------------------------------ collector
    def collector_env(self) -> dict[str, str]:
        """What KubeRay >= 1.7 puts in the collector sidecar, plus short test intervals."""
        return {
            **_base_env(),
            "POD_IP": self.ip,
            "FQ_RAY_IP": HEAD_IP,  # the head service's name; here its address (no DNS inside)
            "RAY_DASHBOARD_PORT": str(DASHBOARD_PORT),
            "RAY_ROLE": self.role,
            "RAY_CLUSTER_NAME": self.cluster.name,
            "RAY_CLUSTER_NAMESPACE": self.cluster.namespace,
            "EVENTS_PORT": str(EVENTS_PORT),
            "RAY_DASHBOARD_ADDRESS": f"http://{'localhost' if self.role == 'head' else HEAD_IP}:{DASHBOARD_PORT}",
            "RAY_TMP_ROOT": str(self.tmp_root),
            **(self.storage_env or {"STORAGE_BACKEND": "local", "LOCAL_STORAGE_DIR": str(self.bucket)}),
            "STORAGE_CREATE_BUCKET": "true",
            "STORAGE_ROOT_DIR": ROOT_DIR,
            "RAY_COLLECTOR_POLL_INTERVAL": "2s",
            "RAY_COLLECTOR_LOG_UPLOAD_INTERVAL": "2s",
            "RAY_COLLECTOR_EVENT_ROTATION_INTERVAL": "3s",
            "LOG_LEVEL": "INFO",
        }

    def start_collector(self, *, recorder: bool = True) -> None:
        """The collector and (unless it still runs, ``recorder=False``) the recorder in front of it."""
        self.collector = NsProcess(
            self.ns, [sys.executable, "-m", "runtime.collector.main"], self.collector_env(),
            self.workdir / f"{self.role}-collector.log",
        ).start()  # fmt: skip
        if not recorder:
            wait_until(
                partial(_listening, self.ns, EVENTS_PORT, self.collector), 60, f"port {EVENTS_PORT} in {self.ns}"
            )
            return
        self.recorder = NsProcess(
            self.ns,
            [sys.executable, "-m", "tests.integration.multinode.recorder", str(RECORDER_PORT), str(EVENTS_PORT),
             str(self.records)],
            _base_env(), self.workdir / f"{self.role}-recorder.log",
        ).start()  # fmt: skip
        for port, proc in ((EVENTS_PORT, self.collector), (RECORDER_PORT, self.recorder)):
            wait_until(partial(_listening, self.ns, port, proc), 60, f"port {port} in {self.ns}")

    # ------------------------------------------------------------------ ray
    def ray_env(self) -> dict[str, str]:
        return {
            **_base_env(),
            **event_export_env(f"http://127.0.0.1:{RECORDER_PORT}/v1/events"),
            # A lost node is declared dead in ~3 s instead of ~15 s.
            "RAY_health_check_period_ms": "1000",
            "RAY_health_check_timeout_ms": "1000",
            "RAY_health_check_failure_threshold": "3",
        }

    def start_ray(self) -> None:
        common = [
            f"--node-ip-address={self.ip}", "--num-cpus=2", f"--resources={json.dumps(self.resources)}",
            f"--temp-dir={self.tmp_root}", "--object-store-memory=150000000", "--disable-usage-stats", "--block",
        ]  # fmt: skip
        if self.role == "head":
            args = [
                "start", "--head", f"--port={GCS_PORT}", "--dashboard-host=0.0.0.0",
                f"--dashboard-port={DASHBOARD_PORT}", "--include-dashboard=true", *common,
            ]  # fmt: skip
        else:
            args = ["start", f"--address={HEAD_IP}:{GCS_PORT}", *common]
        self.ray = NsProcess(
            self.ns, [str(RAY_BIN), *args], self.ray_env(), self.workdir / f"{self.role}-ray-start.log"
        ).start()  # fmt: skip

    def stop_ray(self) -> None:
        """``ray start --block`` stops its node on SIGTERM; whatever is left of the group goes too."""
        if self.ray is not None:
            self.ray.stop(signal.SIGTERM, timeout=30, group=True)

    # ------------------------------------------------------------- evidence
    def session_dir(self) -> Path:
        return (self.tmp_root / "session_latest").resolve()

    def acknowledged(self) -> dict[str, dict[str, object]]:
        return acknowledged(self.records)

    def shutdown_collector(self) -> int | None:
        assert self.collector is not None
        return self.collector.stop(signal.SIGTERM, timeout=60)

    def cleanup(self) -> None:
        for proc in (self.ray, self.collector, self.recorder):
            if proc is not None:
                proc.stop(signal.SIGKILL, timeout=10, group=True)


def _listening(ns: str, port: int, proc: NsProcess) -> bool:
    if not proc.running():
        raise RuntimeError(f"{proc.cmd} in {ns} exited: {proc.log()[-3000:]}")
    return port_open(ns, "127.0.0.1", port)


class TwoNodeCluster:
    """Head and worker "pods" on the topology's bridge; the dashboard reachable from the
    test process through a tunnel."""

    def __init__(
        self, topology: Topology, workdir: Path, bucket: Path, cluster: ClusterRef,
        storage_env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.topology = topology
        self.workdir = workdir
        self.bucket = bucket
        self.cluster = cluster
        self.layout = KeyLayout(ROOT_DIR)
        self.head = Node("head", topology.head, HEAD_IP, workdir, cluster, bucket, {"head_node": 100}, storage_env)
        self.worker = Node(
            "worker", topology.worker, WORKER_IP, workdir, cluster, bucket, {"worker_node": 100}, storage_env
        )
        self.dashboard: Tunnel | None = None

    @property
    def dashboard_url(self) -> str:
        assert self.dashboard is not None
        return self.dashboard.url

    def start(self) -> None:
        self.head.start_collector()
        self.worker.start_collector()
        self.start_ray()

    def start_ray(self) -> None:
        """Ray on both nodes (again, after a restart: a new session in the same temp roots)."""
        self.head.start_ray()
        if self.dashboard is None:  # one per cluster: it connects afresh for every request
            self.dashboard = Tunnel(self.topology.head, HEAD_IP, DASHBOARD_PORT, self.workdir).start()
        wait_until(self._dashboard_up, 180, f"the head's dashboard (see {self.workdir}/head-ray-start.log)")
        self.worker.start_ray()
        wait_until(lambda: self.alive_nodes() == 2, 180, "two ALIVE nodes in /api/v0/nodes")
        for node in (self.head, self.worker):
            # Ray's dashboard agent (its event aggregator) starts after the raylet; a task run
            # before it listens can lose its events. KubeRay's readiness probe waits on it too.
            agent_up = partial(port_open, node.ns, node.ip, AGENT_PORT)
            wait_until(agent_up, 180, f"the {node.role}'s dashboard agent (:{AGENT_PORT})")
        self.check_worker_path()

    def check_worker_path(self, timeout: float = 180) -> None:
        """A task on the worker, then wait until its events reached both the head (the live
        state API resolves its log) and the worker's collector. On a loaded machine the
        worker's first tasks were seen to lose their events (an agent listening is not yet
        an aggregator exporting); a scenario starts only once that path demonstrably works."""
        session = self.worker.session_dir().name
        submission = f"{PATH_CHECK}{time.monotonic_ns()}"
        self.submit("path_check.py", submission)
        status = self.wait_job(submission)
        if status != "SUCCEEDED":
            raise RuntimeError(f"the path-check job ended {status}: {self.get(f'/api/jobs/{submission}')}")

        def through() -> bool:
            tasks = [t for t in self.live_tasks() if t["name"] == "path_check"]
            mine = [t for t in tasks if t["node_id"]]
            if not mine:
                return False
            try:
                log = self.get_text(f"/api/v0/logs/file?task_id={mine[-1]['task_id']}&suffix=out", patience=0)
            except urllib.error.HTTPError as error:
                if error.code < 500:
                    raise
                return False
            acked = self.worker.acknowledged().values()
            return "says hello" in log and any(e.get("sessionName") == session for e in acked)

        wait_until(through, timeout, "the worker's task events to reach the head and the worker's collector")

    def _dashboard_up(self) -> bool:
        assert self.head.ray is not None
        if not self.head.ray.running():
            raise RuntimeError(f"ray start on the head exited: {self.head.ray.log()[-3000:]}")
        try:
            return self.get("/api/version") is not None
        except OSError:
            return False

    def get(self, path: str, timeout: float = 30) -> Any:
        return json.loads(self._read(path, timeout))

    def get_text(self, path: str, timeout: float = 30, patience: float = 30.0) -> str:
        return self._read(path, timeout, patience).decode("utf-8", "replace")

    def _read(self, path: str, timeout: float, patience: float = 30.0) -> bytes:
        """The live dashboard's answer. It is the reference these tests compare with, not
        the product under test: a 5xx while Ray catches up (a task's log info not yet in
        the GCS right after it finished) is retried for ``patience`` seconds."""
        deadline = time.monotonic() + patience
        while True:
            try:
                with urllib.request.urlopen(f"{self.dashboard_url}{path}", timeout=timeout) as resp:  # noqa: S310
                    return bytes(resp.read())
            except urllib.error.HTTPError as error:
                if error.code < 500 or time.monotonic() > deadline:
                    raise
            time.sleep(1.0)

    def alive_nodes(self) -> int:
        nodes = self.get("/api/v0/nodes?limit=100")["data"]["result"]["result"]
        return sum(1 for n in nodes if n["state"] == "ALIVE")

    def stop_ray(self) -> None:
        """Ray stops on both nodes, the worker first (a graceful stop); collectors and
        recorders keep running. Returns once no Ray process is left in either namespace."""
        for node in (self.worker, self.head):
            node.stop_ray()
        for node in (self.worker, self.head):
            keep = {p.pid for p in (node.collector, node.recorder) if p is not None}
            if node is self.head and self.dashboard is not None:
                keep.add(self.dashboard.inner.pid)
            wait_until(partial(self._only, node.ns, keep), 60, f"Ray gone from {node.ns}")

    def _only(self, ns: str, keep: set[int]) -> bool:
        return set(self.topology.pids(ns)) <= keep

    def live_tasks(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v0/tasks?detail=1&limit=10000")["data"]["result"]["result"])

    def caught_up_view(self, worker_id: str, timeout: float = 120) -> LiveView:
        """The live dashboard's tasks and the logs of the worker's tasks, once it has
        caught up with the job: each ``on_worker`` task on the worker with its line in
        its log. Under load the worker's events and log lines reach the head seconds
        after the job ends, and until a task's worker is known Ray answers its log
        with a 500: "not yet", polled again."""
        latest: list[LiveView] = []

        def caught_up() -> bool:
            tasks = self.live_tasks()
            logs: dict[tuple[str, str], str] = {}
            for task in tasks:
                if task["name"] not in ("on_worker", "fails_on_worker"):
                    continue
                for suffix in ("out", "err"):
                    path = f"/api/v0/logs/file?task_id={task['task_id']}&suffix={suffix}"
                    try:
                        logs[(task["task_id"], suffix)] = self.get_text(path, patience=0)
                    except urllib.error.HTTPError as error:
                        if error.code < 500:
                            raise
                        return False
            latest[:] = [(tasks, logs)]
            on_worker = [t for t in tasks if t["name"] == "on_worker"]
            return {t["node_id"] for t in on_worker} == {worker_id} and all(
                "says hello" in logs[(t["task_id"], "out")] for t in on_worker
            )

        wait_until(caught_up, timeout, "the live dashboard to list each on_worker task on the worker, with its log")
        return latest[0]

    def node_ids(self) -> dict[str, str]:
        """IP -> node ID of every node the head's dashboard lists (Ray's own view, not the collector's)."""
        nodes = self.get("/api/v0/nodes?limit=100")["data"]["result"]["result"]
        return {str(n["node_ip"]): str(n["node_id"]) for n in nodes}

    def submit(self, script: str, submission_id: str) -> None:
        """``ray job submit --no-wait`` of ``workloads/{script}`` from the root namespace, through the tunnel."""
        subprocess.run(
            [str(RAY_BIN), "job", "submit", "--address", self.dashboard_url, "--submission-id", submission_id,
             "--working-dir", str(WORKLOADS), "--no-wait", "--", "python", script],
            env=_base_env(), check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def job_status(self, submission_id: str) -> str:
        return str(self.get(f"/api/jobs/{submission_id}")["status"])

    def wait_job(self, submission_id: str, timeout: float = 300) -> str:
        wait_until(
            lambda: self.job_status(submission_id) in ("SUCCEEDED", "FAILED", "STOPPED"), timeout,
            f"job {submission_id}", interval=1.0,
        )  # fmt: skip
        return self.job_status(submission_id)

    def cluster_prefix(self) -> Path:
        return self.bucket / self.layout.cluster_prefix(self.cluster)

    def cleanup(self) -> None:
        if self.dashboard is not None:
            self.dashboard.close()
        for node in (self.worker, self.head):
            node.cleanup()
        for node in (self.worker, self.head):
            self.topology.kill_all(node.ns)  # anything Ray left behind in the "pod"
            shutil.rmtree(node.tmp_root, ignore_errors=True)


def compare_logs(local: Path, stored: Path, before: float) -> tuple[int, int, int]:
    """Every file under ``local`` last written before ``before`` is stored with the same
    bytes; returns (files, bytes on disk, bytes in storage)."""
    files = on_disk = in_storage = 0
    for path in sorted(local.rglob("*")):
        if not path.is_file() or path.stat().st_mtime >= before:
            continue  # written after the collector was told to stop
        remote = stored / path.relative_to(local)
        assert remote.is_file(), f"log {path} not shipped"
        data = path.read_bytes()
        assert remote.read_bytes() == data, f"log {path} stored with {remote.stat().st_size} of {len(data)} bytes"
        files += 1
        on_disk += len(data)
        in_storage += remote.stat().st_size
    return files, on_disk, in_storage

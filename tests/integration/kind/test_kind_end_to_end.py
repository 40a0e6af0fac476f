"""End to end on kind: `pulumi up` the kind stack, run a RayJob, read it back after its cluster is gone.

Needs ``kind``, ``docker``, ``kubectl`` and the ``pulumi`` CLI (skipped, naming what is
missing, otherwise). What it does:

1. starts a ``registry:2`` container on localhost:5001 and a kind cluster whose nodes
   pull ``localhost:5001/...`` from it (kind's local-registry guide);
2. ``pulumi up`` of the ``kind`` stack through the Automation API (work_dir = the
   repository, file backend in a temporary directory): the program builds the
   collector and server images and pushes them to that registry, installs MinIO,
   KubeRay 1.7 with the ``RayClusterHistoryServer`` gate, kube-prometheus-stack, the
   history server and the workload service account;
3. applies a RayJob carrying the stack's ``historyServerOptions`` output (KubeRay
   injects the collector), with ``shutdownAfterJobFinishes`` and
   ``ttlSecondsAfterFinished``, waits for it to succeed and for its RayCluster to be
   deleted;
4. port-forwards the history server Service and reads the job, its tasks and a
   task's log from storage;
5. with the stack's ``metrics.mode: kube-prometheus-stack``: the server reports Prometheus
   healthy, and Prometheus answers a range query for the dead session's ``ray_node_mem_used``;
6. destroys the stack, deletes the cluster (and the registry if it started it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from infra.examples.generate import base_rayjob
from tests.integration.kind.kind_cluster import (
    KindCluster,
    create_cluster,
    delete_cluster,
    run,
    start_registry,
    wait_for,
)

# Cluster creation, image builds, KubeRay, a Ray image pull and the job: far beyond the
# suite's default 600 s per test.
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.kind, pytest.mark.timeout(3000)]
logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
STACK = "kind"
STACK_FILE = REPO / "infra" / "stacks" / f"Pulumi.{STACK}.yaml"
TASK_MARKER = "history-e2e-square"
# Ten tasks that print a marker, so tasks and their logs can be found in the history.
ENTRYPOINT = (
    'python -c "import ray; ray.init(); '
    "f = ray.remote(lambda i: print('" + TASK_MARKER + "', i) or i * i); "
    'print(sum(ray.get([f.remote(i) for i in range(10)])))"'
)


def _missing_tools() -> list[str]:
    return [tool for tool in ("kind", "docker", "kubectl", "pulumi") if shutil.which(tool) is None]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    missing = _missing_tools()
    if missing:
        pytest.skip(
            f"the kind end-to-end test needs kind, docker, kubectl and pulumi on PATH; missing: {', '.join(missing)}"
        )
    workdir = tmp_path_factory.mktemp("kind")
    started_registry = start_registry()
    name = f"rhs-{uuid.uuid4().hex[:6]}"
    try:
        yield create_cluster(name, workdir)
    finally:
        delete_cluster(name)
        if started_registry:
            run("docker", "rm", "-f", "kind-registry", check=False)


@pytest.fixture(scope="module")
def stack_outputs(cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from pulumi import automation as auto

    workdir = tmp_path_factory.mktemp("pulumi")
    (workdir / "state").mkdir()
    env = {
        "PULUMI_BACKEND_URL": f"file://{workdir / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": os.environ.get("PULUMI_CONFIG_PASSPHRASE", "kind-e2e"),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
    }
    # The committed stack file plus this cluster's kubeconfig, passed as --config-file so
    # the example file keeps its values; `stack init` still writes an encryption salt to
    # it, so its bytes are restored afterwards.
    original = STACK_FILE.read_bytes()
    settings = yaml.safe_load(original)
    settings["config"]["ray-history-server:kubeconfig"] = str(cluster.kubeconfig)
    settings["config"]["ray-history-server:kubeContext"] = cluster.context
    config_file = workdir / f"Pulumi.{STACK}.yaml"
    stack = auto.create_or_select_stack(
        STACK, work_dir=str(REPO), opts=auto.LocalWorkspaceOptions(env_vars=env, secrets_provider="passphrase")
    )
    try:
        salt = yaml.safe_load(STACK_FILE.read_text()).get("encryptionsalt")
        if salt:
            settings["encryptionsalt"] = salt
        config_file.write_text(yaml.safe_dump(settings))
        result = stack.up(on_output=logger.info, config_file=str(config_file), color="never")
        logger.info("pulumi up: %s", result.summary.resource_changes)
        yield {key: value.value for key, value in stack.outputs().items()}
    finally:
        try:
            stack.destroy(on_output=logger.info, config_file=str(config_file), color="never")
            stack.workspace.remove_stack(STACK)
        finally:
            STACK_FILE.write_bytes(original)


def _rayjob(name: str, namespace: str, service_account: str, options: dict[str, Any]) -> dict[str, Any]:
    job = base_rayjob()
    job["metadata"] = {"name": name, "namespace": namespace}
    spec = job["spec"]
    spec["entrypoint"] = ENTRYPOINT
    spec["ttlSecondsAfterFinished"] = 5
    cluster_spec = spec["rayClusterSpec"]
    cluster_spec["historyServerOptions"] = options
    small = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
    for group in [cluster_spec["headGroupSpec"], *cluster_spec["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        pod["serviceAccountName"] = service_account
        pod["containers"][0]["resources"] = small
    return job


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def _port_forward(
    cluster: KindCluster, namespace: str, service: str, port: int, probe: str = "/clusters"
) -> Iterator[str]:
    local = _free_port()
    args = ["kubectl", "--kubeconfig", str(cluster.kubeconfig), "--context", cluster.context]
    process = subprocess.Popen(
        [*args, "-n", namespace, "port-forward", f"svc/{service}", f"{local}:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{local}"
    try:
        wait_for("the port-forward", lambda: True if _reachable(base, probe) else None, timeout=60, interval=1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=10)


def _reachable(base: str, probe: str) -> bool:
    try:
        return requests.get(f"{base}{probe}", timeout=5).status_code == 200
    except requests.RequestException:
        return False


class _Client:
    """HTTP with the history server's selection cookies (a session keeps them)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.session = requests.Session()

    def get(self, path: str) -> Any:
        response = self.session.get(f"{self.base}{path}", timeout=120)
        assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text[:500]}"
        is_json = response.headers.get("Content-Type", "").startswith("application/json")
        return response.json() if is_json else response.text


@pytest.fixture(scope="module")
def finished_job(cluster: KindCluster, stack_outputs: dict[str, Any]) -> dict[str, str]:
    """A RayJob run to success whose RayCluster is gone: its namespace, name and cluster name."""
    account = stack_outputs["workloadServiceAccounts"][0]
    job_name = f"e2e-{uuid.uuid4().hex[:6]}"
    job = _rayjob(job_name, account["namespace"], account["name"], stack_outputs["historyServerOptions"])
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(job))

    def job_finished() -> dict[str, Any] | None:
        status: dict[str, Any] = cluster.kubectl_json("-n", account["namespace"], "get", "rayjob", job_name).get(
            "status", {}
        )  # type: ignore[assignment]
        if status.get("jobStatus") == "FAILED" or status.get("jobDeploymentStatus") == "Failed":
            pytest.fail(f"RayJob {job_name} failed: {status}")
        return status if status.get("jobStatus") == "SUCCEEDED" else None

    status = wait_for(f"RayJob {job_name} to succeed", job_finished, timeout=1200)
    ray_cluster = status["rayClusterName"]
    wait_for(
        f"RayCluster {ray_cluster} to be deleted (ttlSecondsAfterFinished)",
        lambda: (
            None
            if cluster.kubectl(
                "-n", account["namespace"], "get", "raycluster", ray_cluster, "--ignore-not-found"
            ).strip()
            else True
        ),
        timeout=300,
    )
    return {"namespace": account["namespace"], "job": job_name, "cluster": ray_cluster}


def _stored_session(client: _Client, finished_job: dict[str, str]) -> dict[str, Any]:
    def stored_session() -> dict[str, Any] | None:
        entries = client.get(f"/clusters?namespace={finished_job['namespace']}&name={finished_job['job']}")
        stored = [e for e in entries if e["sessionName"] != "live"]
        return stored[0] if stored else None

    entry: dict[str, Any] = wait_for("the stored session in /clusters", stored_session, timeout=180)
    return entry


def test_rayjob_history_survives_its_cluster(
    cluster: KindCluster, stack_outputs: dict[str, Any], finished_job: dict[str, str]
) -> None:
    server = stack_outputs["historyServer"]
    assert server["port"] == 30080
    job_name, ray_cluster = finished_job["job"], finished_job["cluster"]
    account = {"namespace": finished_job["namespace"]}

    with _port_forward(cluster, server["namespace"], server["name"], server["port"]) as base:
        client = _Client(base)
        entry = _stored_session(client, finished_job)
        assert entry["name"] == ray_cluster
        assert entry.get("ownerKind") == "rayjob" and entry.get("ownerName") == job_name
        entered = client.get(f"/enter_cluster/{account['namespace']}/rayjob/{job_name}/{entry['sessionName']}")
        assert entered["result"] == "success"

        jobs = client.get("/api/jobs/")
        assert [j["status"] for j in jobs if j.get("type") == "SUBMISSION"] == ["SUCCEEDED"], jobs

        tasks = client.get("/api/v0/tasks?limit=100&detail=1")["data"]["result"]["result"]
        squares = [t for t in tasks if "lambda" in t["func_or_class_name"] and t["state"] == "FINISHED"]
        assert len(squares) == 10, [(t["func_or_class_name"], t["state"]) for t in tasks]

        log = client.get(f"/api/v0/logs/file?task_id={squares[0]['task_id']}&suffix=out&lines=100")
        assert TASK_MARKER in log


def _query_range(prometheus: str, query: str, start: float, end: float) -> list[dict[str, Any]]:
    params: dict[str, str | float] = {"query": query, "start": start, "end": end, "step": "5s"}
    response = requests.get(f"{prometheus}/api/v1/query_range", params=params, timeout=30)
    assert response.status_code == 200, f"query_range {query}: {response.status_code} {response.text[:500]}"
    body = response.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_metrics_survive_their_cluster(
    cluster: KindCluster, stack_outputs: dict[str, Any], finished_job: dict[str, str]
) -> None:
    """metrics.mode kube-prometheus-stack: after the RayCluster is deleted, the history server
    reports Prometheus healthy for the session, and Prometheus still answers a range query for
    the session's node memory (scraped by the stack's ServiceMonitor/PodMonitor while it ran)."""
    metrics = stack_outputs["metrics"]
    assert metrics["mode"] == "kube-prometheus-stack"
    prometheus_url = urllib.parse.urlsplit(metrics["PROMETHEUS_URL"])
    service, namespace = str(prometheus_url.hostname).split(".")[:2]
    server = stack_outputs["historyServer"]
    with _port_forward(cluster, server["namespace"], server["name"], server["port"]) as base:
        client = _Client(base)
        entry = _stored_session(client, finished_job)
        session = entry["sessionName"]
        entered = client.get(f"/enter_cluster/{finished_job['namespace']}/rayjob/{finished_job['job']}/{session}")
        assert entered["result"] == "success"
        health = client.get("/api/prometheus_health")
        assert health["result"] is True, health

    with _port_forward(cluster, namespace, service, int(prometheus_url.port or 80), probe="/-/ready") as prometheus:
        now = time.time()
        query = f'ray_node_mem_used{{SessionName="{session}"}}'

        def samples() -> list[dict[str, Any]] | None:
            series = _query_range(prometheus, query, now - 3 * 3600, time.time())
            return series if any(s["values"] for s in series) else None

        series = wait_for(f"samples of {query}", samples, timeout=120, interval=5)
        assert {s["metric"].get("ray_io_cluster") for s in series} == {finished_job["cluster"]}

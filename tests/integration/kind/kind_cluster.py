"""A kind cluster wired to a local image registry, as kind's local-registry guide sets it up.

The kind stack builds the images with ``pulumi up`` and pushes them to
``localhost:5001``; the nodes' containerd resolves ``localhost:5001`` to the registry
container on the ``kind`` Docker network, so the same reference works on both sides.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")

REGISTRY_NAME = "kind-registry"
REGISTRY_PORT = 5001
REGISTRY_HOST = f"localhost:{REGISTRY_PORT}"

# containerd reads per-registry hosts.toml files from this directory.
KIND_CONFIG = """\
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
containerdConfigPatches:
  - |-
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
"""


def run(*args: str, stdin: str | None = None, timeout: float = 600, check: bool = True) -> str:
    """Run a command, log it, return stdout; a failure shows the command's stderr."""
    logger.info("$ %s", " ".join(args))
    done = subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


@dataclass
class KindCluster:
    name: str
    kubeconfig: Path

    @property
    def context(self) -> str:
        return f"kind-{self.name}"

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120, check: bool = True) -> str:
        return run(
            "kubectl", "--kubeconfig", str(self.kubeconfig), "--context", self.context, *args,
            stdin=stdin, timeout=timeout, check=check,
        )  # fmt: skip

    def kubectl_json(self, *args: str) -> dict[str, object]:
        result: dict[str, object] = json.loads(self.kubectl(*args, "-o", "json"))
        return result


def start_registry() -> bool:
    """Start the registry container unless it runs; True when this call started it."""
    running = run("docker", "inspect", "-f", "{{.State.Running}}", REGISTRY_NAME, check=False).strip()
    if running == "true":
        return False
    run("docker", "rm", "-f", REGISTRY_NAME, check=False)
    run(
        "docker", "run", "-d", "--restart=always", "--name", REGISTRY_NAME,
        "-p", f"127.0.0.1:{REGISTRY_PORT}:5000", "registry:2",
    )  # fmt: skip
    return True


def create_cluster(name: str, workdir: Path) -> KindCluster:
    config = workdir / "kind-config.yaml"
    config.write_text(KIND_CONFIG)
    kubeconfig = workdir / "kubeconfig"
    run("kind", "create", "cluster", "--name", name, "--config", str(config), "--kubeconfig", str(kubeconfig),
        "--wait", "180s", timeout=900)  # fmt: skip
    cluster = KindCluster(name, kubeconfig)
    # Point every node's containerd at the registry container for localhost:5001.
    hosts_toml = f'[host."http://{REGISTRY_NAME}:5000"]\n'
    for node in run("kind", "get", "nodes", "--name", name).split():
        directory = f"/etc/containerd/certs.d/{REGISTRY_HOST}"
        run("docker", "exec", node, "mkdir", "-p", directory)
        run("docker", "exec", "-i", node, "cp", "/dev/stdin", f"{directory}/hosts.toml", stdin=hosts_toml)
    run("docker", "network", "connect", "kind", REGISTRY_NAME, check=False)  # already connected is fine
    # Documents the registry for tools that look for it (KEP-1755).
    cluster.kubectl(
        "apply", "-f", "-",
        stdin=json.dumps({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "local-registry-hosting", "namespace": "kube-public"},
            "data": {"localRegistryHosting.v1": f'host: "{REGISTRY_HOST}"\n'},
        }),
    )  # fmt: skip
    return cluster


def delete_cluster(name: str) -> None:
    run("kind", "delete", "cluster", "--name", name, timeout=300, check=False)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 5) -> T:
    """Poll ``probe`` until it returns something other than None."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)

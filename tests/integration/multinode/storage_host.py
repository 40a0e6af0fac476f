"""Object storage as a host on the cluster's network: fake-gcs-server in its own
namespace (``rhmn-<run>-sto``, 198.51.100.3) plugged into the topology's bridge.

The collectors reach it as a pod reaches GCS: over the network, through the GCS
client (``STORAGE_EMULATOR_HOST``). :meth:`StorageHost.cut` takes the bridge port
down while the server keeps running with its data: packets to it are dropped, so
connections time out as in a real outage instead of being refused at once. The
test process reaches the server through a :class:`Tunnel` (with its own
``STORAGE_EMULATOR_HOST``) to read the bucket and to run the history server on it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from tests.integration.emulators.gcs import PROJECT, fake_gcs_server_binary
from tests.integration.multinode.netns import SUBNET_BITS, NsProcess, Topology, Tunnel, port_open, privileged
from tests.integration.ray_harness import wait_until

STORAGE_IP = "198.51.100.3"
STORAGE_PORT = 4443
#: Every storage host's MAC, locally administered and spelling its IP: a new host must
#: not be a new MAC to nodes whose ARP caches still hold the last one (those sent to it
#: for up to ~50 s, dropped: test_storage_host).
STORAGE_MAC = "02:00:c6:33:64:03"
BRIDGE_PORT = "p-sto"  # its veth end on the bridge, in the switch namespace


class StorageHost:
    """The storage namespace, its fake-gcs-server (filesystem backend) and a tunnel to it."""

    def __init__(self, topology: Topology, workdir: Path, bucket: str) -> None:
        self.topology = topology
        self.ns = f"rhmn-{topology.run}-sto"
        self.workdir = workdir
        self.bucket = bucket
        self.data_dir = workdir / "gcs-data"
        self.server: NsProcess | None = None
        self.tunnel: Tunnel | None = None

    @property
    def url(self) -> str:
        """As the collectors inside the namespaces reach it."""
        return f"http://{STORAGE_IP}:{STORAGE_PORT}"

    def env(self, emulator_host: str | None = None) -> dict[str, str]:
        return {
            "STORAGE_BACKEND": "gcs",
            "GCS_BUCKET": self.bucket,
            "STORAGE_EMULATOR_HOST": emulator_host or self.url,
            "GOOGLE_CLOUD_PROJECT": PROJECT,
        }

    def start(self) -> None:
        privileged(["ip", "netns", "add", self.ns])
        sw = self.topology.switch
        privileged(["ip", "link", "add", "eth0", "address", STORAGE_MAC, "netns", self.ns, "type", "veth", "peer",
                    "name", BRIDGE_PORT, "netns", sw])  # fmt: skip
        privileged(["ip", "-n", sw, "link", "set", BRIDGE_PORT, "master", "br0"])
        privileged(["ip", "-n", sw, "link", "set", BRIDGE_PORT, "up"])
        privileged(["ip", "-n", self.ns, "addr", "add", f"{STORAGE_IP}/{SUBNET_BITS}", "dev", "eth0"])
        privileged(["ip", "-n", self.ns, "link", "set", "eth0", "up"])
        privileged(["ip", "-n", self.ns, "link", "set", "lo", "up"])
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.server = NsProcess(
            self.ns,
            [str(fake_gcs_server_binary()), "-scheme", "http", "-host", STORAGE_IP, "-port", str(STORAGE_PORT),
             "-backend", "filesystem", "-filesystem-root", str(self.data_dir), "-external-url", self.url,
             "-log-level", "error"],
            dict(os.environ), self.workdir / "fake-gcs-server.log",
        ).start()  # fmt: skip
        wait_until(lambda: port_open(self.ns, STORAGE_IP, STORAGE_PORT), 60, "fake-gcs-server in its namespace")
        self.tunnel = Tunnel(self.ns, STORAGE_IP, STORAGE_PORT, self.workdir).start()

    def cut(self) -> None:
        """Storage unreachable: the bridge drops everything to and from it."""
        privileged(["ip", "-n", self.topology.switch, "link", "set", BRIDGE_PORT, "down"])

    def restore(self) -> None:
        privileged(["ip", "-n", self.topology.switch, "link", "set", BRIDGE_PORT, "up"])

    def reachable_from(self, ns: str) -> bool:
        return port_open(ns, STORAGE_IP, STORAGE_PORT)

    def test_env(self) -> dict[str, str]:
        """For processes of the test's own namespace (through the tunnel)."""
        assert self.tunnel is not None
        return self.env(self.tunnel.url)

    def open_store(self) -> ObjectStore:
        return open_store(StorageConfig.from_env(self.test_env()), check=False)

    def download(self, prefix: str, dest: Path) -> int:
        """Every object under ``prefix`` to ``dest`` (its key as the relative path); the count."""
        count = 0
        with self.open_store() as store:
            for info in store.walk(prefix):
                target = dest / info.key
                target.parent.mkdir(parents=True, exist_ok=True)
                store.download_file(info.key, target)
                count += 1
        return count

    def destroy(self) -> None:
        if self.tunnel is not None:
            self.tunnel.close()
        if self.server is not None:
            self.server.stop(signal.SIGTERM, timeout=10)
        self.topology.kill_all(self.ns)
        # The bridge port goes explicitly, and the storage end with it: `ip netns del`
        # only unmounts the name, and the namespace (with its veth pair) lives on while
        # anything references it, e.g. fake-gcs-server's orphaned TCP sockets still
        # retransmitting to a cut peer. The next host's `link add ... p-sto` would then
        # fail with "File exists".
        privileged(["ip", "-n", self.topology.switch, "link", "del", BRIDGE_PORT], check=False)
        privileged(["ip", "netns", "del", self.ns], check=False)


@contextlib.contextmanager
def running_storage(topology: Topology, workdir: Path, bucket: str) -> Iterator[StorageHost]:
    """A started :class:`StorageHost`, destroyed on the way out."""
    host = StorageHost(topology, workdir, bucket)
    try:
        host.start()
        yield host
    finally:
        host.destroy()

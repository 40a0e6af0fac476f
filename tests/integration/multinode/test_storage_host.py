"""The storage host tears down cleanly even when its namespace outlives ``ip netns del``.

``ip netns del`` only unmounts the namespace's name; the kernel keeps the namespace,
and the veth pair whose storage end lives in it, while anything still references it.
After an outage test that is fake-gcs-server's orphaned TCP sockets, retransmitting to
a peer that was cut (observed in CI: the next test's ``ip link add ... peer name p-sto``
failed with "RTNETLINK answers: File exists"). Here a process holding the namespace
open by file descriptor stands in for those sockets, deterministically.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.multinode.netns import Topology, _privilege_prefix, privileged
from tests.integration.multinode.storage_host import BRIDGE_PORT, running_storage

pytestmark = [pytest.mark.integration, pytest.mark.multinode]


def test_a_second_storage_host_starts_while_the_first_namespace_lingers(topology: Topology, tmp_path: Path) -> None:
    holder: subprocess.Popen[str] | None = None
    try:
        with running_storage(topology, tmp_path / "first", "first-bucket") as first:
            # Not a process *inside* the namespace (destroy kills those): one holding it
            # open until its stdin closes (so it ends under sudo too, where a kill would
            # reach only sudo).
            holder = subprocess.Popen(
                [*_privilege_prefix(), "sh", "-c", f"exec 3</run/netns/{first.ns} && echo held && read -r _"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout is not None
            assert holder.stdout.readline() == "held\n", "could not hold the storage namespace open"
        assert privileged(["ip", "-n", topology.switch, "link", "show", BRIDGE_PORT], check=False).returncode != 0, (
            "the bridge port outlived its storage host"
        )
        with running_storage(topology, tmp_path / "second", "second-bucket") as second, second.open_store() as store:
            store.check(create=True)
            store.put_bytes("probe", b"reachable")
            assert store.get_bytes("probe") == b"reachable"
    finally:
        if holder is not None:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(timeout=10)

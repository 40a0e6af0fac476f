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


def test_a_new_storage_host_is_reachable_at_once_from_a_node_that_reached_the_last(
    topology: Topology, tmp_path: Path
) -> None:
    """A node that reached the previous storage host keeps that host's MAC in its ARP
    cache (REACHABLE for 15-45 s, then ~8 s of probes to it). A new host at the same IP
    with a new MAC was unreachable from that node meanwhile (observed in CI: the next
    test's collector gave up after 25 s of connect timeouts). A host's MAC now follows
    from its IP, as a real host keeps its own."""
    with running_storage(topology, tmp_path / "first", "first-bucket") as first:
        assert first.reachable_from(topology.head)
    with running_storage(topology, tmp_path / "second", "second-bucket") as second:
        assert second.reachable_from(topology.head), "the head still sends to the last storage host's MAC"

"""An upload given up on during a storage partition is never stored late.

The failure this guards against (runtime/storage/sockets.py): an upload sent on a
keep-alive connection while storage is cut sits unacknowledged in the socket's send
queue. The collector gives up (timeout) and exits; a graceful close leaves the socket
orphaned in the kernel, which retransmits the queued request for up to ~100 s. Once
storage is back it receives the whole stale request and stores it over the newer
content a restarted collector has uploaded meanwhile. With SO_LINGER (on, 0 s) the
close resets the connection and drops the queue.

The scenario, in namespaces (the head namespace is the collector's pod, the storage
namespace runs fake-gcs-server, the bridge port between them is cut): an "old"
process uploads v1, then v2 while storage is cut, gives up after its 3 s read timeout
and exits; storage comes back; a "new" process uploads v3; the object must still be
v3 after long enough for the orphan's next retransmissions. About 25 s.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.emulators.base import REPO_ROOT
from tests.integration.multinode.netns import NsProcess, Topology, run_in
from tests.integration.multinode.storage_host import STORAGE_IP, StorageHost, running_storage
from tests.integration.ray_harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.multinode, pytest.mark.slow]

KEY = "logs/runtime_env_agent.log"
V1, V2, V3 = b"v1 " * 1000, b"v2-short " * 400, b"v3-FULL " * 1000
#: After storage is back: longer than the orphan's next retransmission (the RTO has
#: doubled to a few seconds by then; without the fix it lands within ~6 s).
WATCH_SECONDS = 15.0

CLIENT = """
import sys, time
from pathlib import Path

import runtime.storage.gcs as gcs
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.retry import RetryPolicy

gcs.TIMEOUT = (2.0, 3.0)  # give up sooner than production's (5, 60)
mode, workdir = sys.argv[1], Path(sys.argv[2])
store = open_store(StorageConfig.from_env(), retry=RetryPolicy(attempts=1, deadline=0), check=False)
if mode == "old":
    store.put_bytes(KEY, V1)
    (workdir / "ready").touch()
    while not (workdir / "go").exists():  # storage is cut meanwhile
        time.sleep(0.05)
    try:
        store.put_bytes(KEY, V2)
        print("v2 stored?!", flush=True)
    except Exception as exc:
        print("v2 given up:", type(exc).__name__, flush=True)
    # exits with its keep-alive connection (and the v2 request in its send queue) open
else:
    store.put_bytes(KEY, V3)
    print("v3 stored", flush=True)
"""


@pytest.fixture
def storage(topology: Topology, tmp_path: Path) -> Iterator[StorageHost]:
    with running_storage(topology, tmp_path, "orphan-bucket") as host:
        yield host


def run_client(host: StorageHost, ns: str, mode: str, workdir: Path) -> NsProcess:
    script = workdir / "client.py"
    script.write_text(f"KEY = {KEY!r}\nV1, V2, V3 = {V1!r}, {V2!r}, {V3!r}\n{CLIENT}")
    env = {**host.env(), "PYTHONPATH": str(REPO_ROOT), "PYTHONWARNINGS": "ignore"}
    return NsProcess(ns, [sys.executable, str(script), mode, str(workdir)], env, workdir / f"{mode}.log").start()


def orphans(ns: str) -> list[str]:
    """Sockets in ``ns`` to storage still holding unsent or unacknowledged bytes."""
    done = run_in(ns, ["ss", "-tnH", "state", "all", "dst", STORAGE_IP])
    assert done.returncode == 0, f"ss (iproute2) failed: {done.stderr}"
    return [line for line in done.stdout.splitlines() if (fields := line.split()) and re.fullmatch(r"\d+", fields[2])
            and int(fields[2]) > 0]  # fmt: skip


def test_upload_given_up_on_is_not_stored_after_the_outage(
    topology: Topology, storage: StorageHost, tmp_path: Path
) -> None:
    with storage.open_store() as check:
        check.check(create=True)

    old = run_client(storage, topology.head, "old", tmp_path)
    wait_until(lambda: (tmp_path / "ready").exists() or not old.running(), 30, "the old client's v1 upload")
    assert old.running(), old.log()
    storage.cut()
    try:
        (tmp_path / "go").touch()
        assert old.wait(30) == 0, old.log()
        assert "v2 given up" in old.log(), old.log()
        time.sleep(0.5)
        left = orphans(topology.head)
    finally:
        storage.restore()
    wait_until(lambda: storage.reachable_from(topology.head), 30, "storage reachable again")

    new = run_client(storage, topology.head, "new", tmp_path)
    assert new.wait(30) == 0, new.log()
    with storage.open_store() as check:
        assert check.get_bytes(KEY) == V3
        deadline = time.monotonic() + WATCH_SECONDS
        while time.monotonic() < deadline:
            stored = check.get_bytes(KEY)
            assert stored == V3, f"the given-up v2 upload landed after v3 ({len(stored)} bytes); orphans: {left}"
            time.sleep(1.0)
    assert not left, f"the old client's closed connection lingered with queued bytes: {left}"

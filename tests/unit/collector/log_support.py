"""Helpers of the LogShipper tests: a Ray temp root laid out like Ray's, a real local
store that can refuse, slow down or hold uploads, and condition waits."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from runtime.collector.logs import LogShipper
from runtime.collector.metrics import CollectorMetrics
from runtime.storage.errors import ObjectNotFoundError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore
from runtime.storage.retry import RetryPolicy

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "ray-samples" / "session-logs-sample.tar.gz"
SESSION_A = "session_2026-11-22_01-45-25_333080_9264"
SESSION_B = "session_2026-11-22_01-58-29_266863_14332"
SESSION_OLD = "session_2026-11-21_10-00-00_000001_42"
NODE_A = "a" * 56
NODE_B = "b" * 56
NODE_C = "c" * 56
CLUSTER = ClusterRef(namespace="default", name="demo")
LAYOUT = KeyLayout("")
INTERVAL = 0.5
FAST_RETRY = RetryPolicy(attempts=1, deadline=0)


# ------------------------------------------------------------------ helpers
# Waits end as soon as the condition holds; the long timeout only bounds a failure
# (this suite runs on loaded 2-core machines).
def wait_for(predicate: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def key(session: str, node: str, rel: str) -> str:
    return LAYOUT.log_key(CLUSTER, session, node, rel)


def stored(store: LocalStore, k: str) -> bytes | None:
    try:
        return store.get_bytes(k)
    except ObjectNotFoundError:
        return None


def holds(store: LocalStore, k: str, data: bytes) -> Callable[[], bool]:
    return lambda: stored(store, k) == data


def metric(metrics: CollectorMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(f"ray_history_collector_{name}", labels)
    return value or 0.0


def make_session(root: Path, name: str, node: str | None, *, port_file: bool = True) -> Path:
    session = root / name
    (session / "logs" / "events").mkdir(parents=True)
    if node and port_file:
        (session / f"gcs_server_port_{node}").write_text("6379")
    return session


def point_latest(root: Path, name: str) -> None:
    tmp = root / "session_latest.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(name)  # relative, as Ray makes it
    os.replace(tmp, root / "session_latest")


class NodeBox:
    """The node-id callable: what discovery currently knows."""

    def __init__(self, node: str | None) -> None:
        self.node = node

    def __call__(self) -> str | None:
        return self.node


class FlakyStore(LocalStore):
    """A real local store that refuses keys containing any string in ``deny``
    (PermissionError -> PermanentStorageError), optionally slowly, or holding every
    upload until ``gate`` is set."""

    def __init__(self, root: Path, *, delay: float = 0.0, gate: threading.Event | None = None) -> None:
        super().__init__(root, retry=FAST_RETRY)
        self.deny: set[str] = set()
        self.transient = False
        self.delay = delay
        self.gate = gate

    def _put_stream(self, key: str, stream: BinaryIO, size: int | None) -> None:
        if self.gate is not None:
            self.gate.wait(120)  # bounded: a test that never opens it still ends
        if self.delay:
            time.sleep(self.delay)
        if any(d in key for d in self.deny):
            if self.transient:
                raise OSError(errno.EAGAIN, "try again")
            raise PermissionError(errno.EACCES, "denied")
        super()._put_stream(key, stream, size)


class Env:
    """A Ray temp root with one running session, a bucket, and shipper factory."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "ray"
        self.root.mkdir()
        (tmp_path / "bucket").mkdir()
        self.store = FlakyStore(tmp_path / "bucket")
        self.session = make_session(self.root, SESSION_A, NODE_A)
        point_latest(self.root, SESSION_A)
        self.logs = self.session / "logs"
        self.node = NodeBox(NODE_A)
        self.sessions: list[str] = []
        self.metrics = CollectorMetrics()
        self.shippers: list[LogShipper] = []

    def shipper(
        self,
        store: LocalStore | None = None,
        node_for_session: Callable[[str], str | None] | None = None,
        **kw: float,
    ) -> LogShipper:
        shipper = LogShipper(
            store=store or self.store,
            layout=LAYOUT,
            cluster=CLUSTER,
            tmp_root=self.root,
            node_id=self.node,
            upload_interval=kw.pop("upload_interval", INTERVAL),
            metrics=self.metrics,
            on_session=self.sessions.append,
            node_for_session=node_for_session,
            rescan_interval=kw.pop("rescan_interval", 300.0),
            session_check_interval=kw.pop("session_check_interval", 0.1),
        )
        self.shippers.append(shipper)
        return shipper

    def shipped_files(self) -> float:
        return metric(self.metrics, "log_files_shipped_total")

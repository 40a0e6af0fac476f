"""A Ray job planting links in its logs (#14 item 1): the real LogShipper on a temp
Ray root and the real local backend must never ship, nor delete, anything
outside the logs directory, also when a checked file is swapped before it is
opened."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import BinaryIO, cast

import pytest

from runtime.collector import logs_state
from runtime.collector.log_files import UnsafePathError, iter_log_files, open_log_file
from runtime.collector.logs import LogShipper
from runtime.collector.logs_prev import UploadJob
from runtime.collector.metrics import CollectorMetrics
from runtime.collector.session_files import node_id_from_session_dir, resolve_session_latest
from runtime.storage.local import LocalStore
from tests.unit.collector.log_support import (
    NODE_A,
    NODE_B,
    SESSION_A,
    SESSION_OLD,
    Env,
    FlakyStore,
    holds,
    key,
    wait_for,
)

pytestmark = pytest.mark.hostile

SECRET = b"service-account-key: do not ship\n"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    environment = Env(tmp_path)
    yield environment
    for shipper in environment.shippers:
        shipper.stop(time.monotonic() + 5)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory of the collector's own, outside Ray's logs."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.log").write_bytes(SECRET)
    return directory


def stored_keys(env: Env) -> list[str]:
    return sorted(o.key for o in env.store.walk(""))


def stored_values(env: Env) -> list[bytes]:
    return [env.store.get_bytes(k) for k in stored_keys(env)]


def test_a_linked_directory_in_logs_is_neither_watched_nor_shipped(env: Env, outside: Path) -> None:
    """``ln -s /some/dir logs/linkdir``: the recursive watcher used to follow it and
    ship every file changing there as ``logs/linkdir/...``."""
    (env.logs / "linkdir").symlink_to(outside, target_is_directory=True)
    (env.logs / "events" / "deeper").symlink_to(outside, target_is_directory=True)
    shipper = env.shipper()
    shipper.start()
    time.sleep(1.0)  # the watcher is up
    (outside / "secret.log").write_bytes(SECRET + b"rotated\n")  # a change there
    (outside / "new-secret.log").write_bytes(SECRET)
    (env.logs / "raylet.out").write_bytes(b"r\n")
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "raylet.out"), b"r\n"))
    time.sleep(2 * 0.5)  # two upload intervals: a followed change would be shipped by now
    assert shipper.stop(time.monotonic() + 5) is True
    assert stored_keys(env) == [key(SESSION_A, NODE_A, "raylet.out")]


def test_a_new_real_directory_is_still_watched(env: Env) -> None:
    """Watching each real directory on its own still catches a directory Ray
    creates later, without waiting for the 5-minute rescan."""
    shipper = env.shipper()
    shipper.start()
    time.sleep(1.0)
    (env.logs / "serve").mkdir()
    time.sleep(0.5)
    (env.logs / "serve" / "controller.log").write_bytes(b"c\n")
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "serve/controller.log"), b"c\n"), timeout=6)


def swap_after_check(monkeypatch: pytest.MonkeyPatch, swap: Callable[[Path], None]) -> list[Path]:
    """Wrap the shipper's check of a live file: once it approved the file, ``swap``
    replaces it before the upload opens it (the race an attacker would win)."""
    original = LogShipper._live_job
    swapped: list[Path] = []

    def checked_then_swapped(self: LogShipper, path: Path, *args: str) -> UploadJob | None:
        job = original(self, path, *args)
        if job is not None and path.name == "victim.log" and not swapped:
            swap(path)
            swapped.append(path)
        return job

    monkeypatch.setattr(LogShipper, "_live_job", checked_then_swapped)
    return swapped


def _to_link(secret: Path) -> Callable[[Path], None]:
    def swap(path: Path) -> None:
        path.unlink()
        path.symlink_to(secret)

    return swap


def _parent_to_link(secret_dir: Path) -> Callable[[Path], None]:
    def swap(path: Path) -> None:
        parent = path.parent
        parent.rename(parent.with_name(parent.name + ".old"))
        parent.symlink_to(secret_dir, target_is_directory=True)

    return swap


@pytest.mark.parametrize("how", ["file->symlink", "parent dir->symlink"])
def test_a_file_swapped_between_check_and_open_is_not_shipped(
    env: Env, outside: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    (outside / "victim.log").write_bytes(SECRET)  # what the parent swap points at
    swap = {
        "file->symlink": _to_link(outside / "secret.log"),
        "parent dir->symlink": _parent_to_link(outside),
    }[how]
    (env.logs / "events" / "victim.log").write_bytes(b"an honest log line\n")
    swapped = swap_after_check(monkeypatch, swap)
    (env.logs / "raylet.out").write_bytes(b"r\n")
    shipper = env.shipper()
    shipper.start()
    wait_for(lambda: swapped, what="the swap")
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "raylet.out"), b"r\n"))
    shipper.stop(time.monotonic() + 5)
    assert SECRET not in b"".join(stored_values(env))
    assert key(SESSION_A, NODE_A, "events/victim.log") not in stored_keys(env)


def test_a_regular_file_swapped_in_is_not_the_file_that_was_listed(env: Env, outside: Path) -> None:
    """The identity check: a *regular* file renamed over the listed one (here a hard
    link, so O_NOFOLLOW has nothing to refuse) fails on device and inode."""
    (env.logs / "victim.log").write_bytes(b"an honest log line\n")
    (listed,) = [f for f in iter_log_files(env.logs, env.root) if f.relpath == "victim.log"]
    tmp = env.logs / ".swap"
    os.link(outside / "secret.log", tmp)
    os.replace(tmp, env.logs / "victim.log")
    with pytest.raises(UnsafePathError, match="not the file that was listed"):
        open_log_file(listed)
    with open_log_file(next(f for f in iter_log_files(env.logs, env.root) if f.relpath == "victim.log")) as fh:
        assert fh.read() == SECRET  # listed afresh, it is simply a regular file of the logs dir


class SwappingStore(FlakyStore):
    """Swaps a prev-logs directory for a link right after uploading from it, so
    the delete that follows a successful upload would go through the link."""

    def __init__(self, root: Path, swap: Callable[[], None]) -> None:
        super().__init__(root)
        self.swap: Callable[[], None] | None = swap

    def _put_stream(self, key: str, stream: BinaryIO, size: int | None) -> None:
        super()._put_stream(key, stream, size)
        if self.swap is not None and key.endswith("sub/victim.log"):
            self.swap()
            self.swap = None


def test_a_prev_logs_delete_never_goes_through_a_swapped_link(env: Env, outside: Path, tmp_path: Path) -> None:
    """After a prev-logs file is stored it is deleted; if its directory became a
    link meanwhile (to a file with the same size and mtime), nothing outside may
    be deleted."""
    sub = env.root / "prev-logs" / SESSION_OLD / NODE_B / "logs" / "sub"
    sub.mkdir(parents=True)
    victim = sub / "victim.log"
    victim.write_bytes(SECRET)
    twin = outside / "victim.log"
    twin.write_bytes(SECRET)
    stamp = victim.stat().st_mtime_ns
    os.utime(twin, ns=(stamp, stamp))  # the attacker matches size and mtime

    def swap() -> None:
        sub.rename(sub.with_name("sub.old"))
        sub.symlink_to(outside, target_is_directory=True)

    store = SwappingStore(tmp_path / "bucket", swap)
    shipper = env.shipper(store)
    shipper.start()
    wait_for(holds(store, key(SESSION_OLD, NODE_B, "sub/victim.log"), SECRET))
    shipper.stop(time.monotonic() + 5)
    assert twin.read_bytes() == SECRET


def test_the_node_id_is_never_read_through_a_link_nor_blocks_on_a_fifo(tmp_path: Path) -> None:
    """``node_id_from_session_dir`` reads the head of ``logs/raylet.out``: a link
    there must not be followed, and a FIFO must not hang the shipper's loop."""
    planted = tmp_path / "elsewhere.out"
    planted.write_bytes(f"Setting node ID node_id={'e' * 56}\n".encode())
    linked = tmp_path / "linked_session"
    (linked / "logs").mkdir(parents=True)
    (linked / "logs" / "raylet.out").symlink_to(planted)
    assert node_id_from_session_dir(linked) is None
    dir_linked = tmp_path / "dir_linked_session"
    dir_linked.mkdir()
    (dir_linked / "logs").symlink_to(planted.parent, target_is_directory=True)
    planted.rename(planted.with_name("raylet.out"))
    assert node_id_from_session_dir(dir_linked) is None
    fifo = tmp_path / "fifo_session"
    (fifo / "logs").mkdir(parents=True)
    os.mkfifo(fifo / "logs" / "raylet.out")
    started = time.monotonic()
    assert node_id_from_session_dir(fifo) is None
    assert time.monotonic() - started < 1.0
    real = tmp_path / "real_session"
    (real / "logs").mkdir(parents=True)
    (real / "logs" / "raylet.out").write_bytes(f"Setting node ID node_id={'a' * 56}\n".encode())
    assert node_id_from_session_dir(real) == "a" * 56


def test_uploads_of_tens_of_thousands_of_files_are_submitted_a_bounded_number_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node with 80,000 log files (worker churn, or a job making empty files) used to
    get one future per file at once: ~1 KiB each, past the sidecar's 256 MiB limit, and
    the OOM-killed collector met the same files again after its restart."""
    monkeypatch.setattr(logs_state, "IN_FLIGHT", 8, raising=False)
    state = logs_state.UploadState(
        store=LocalStore(tmp_path), metrics=CollectorMetrics(), upload_interval=1.0,
        stopping=threading.Event(), workers=2,
    )  # fmt: skip
    lock = threading.Lock()
    running = peak = 0

    others_done = threading.Event()
    finished = 0

    def execute(job: UploadJob, _deadline: float | None) -> logs_state.Outcome:
        nonlocal finished
        if job is jobs[0]:  # one slow upload must not hold the window's other slots
            assert others_done.wait(10), "the other uploads waited for the slow one"
        else:
            time.sleep(0.002)
            with lock:
                finished += 1
                if finished == len(jobs) - 1:
                    others_done.set()
        return logs_state.Outcome(job, "skipped")

    real_submit = state._pool.submit

    def submit(fn: Callable[..., logs_state.Outcome], *args: object) -> Future[logs_state.Outcome]:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        future = real_submit(fn, *args)

        def finished(_: object) -> None:
            nonlocal running
            with lock:
                running -= 1

        future.add_done_callback(finished)
        return future

    monkeypatch.setattr(state, "_execute", execute)
    monkeypatch.setattr(state._pool, "submit", submit)
    jobs = [
        cast(UploadJob, SimpleNamespace(file=SimpleNamespace(path=Path(f"/logs/w-{n}.out"), size=0), live=False))
        for n in range(200)
    ]
    try:
        outcomes, left = state.run(jobs, None)
    finally:
        state.shutdown()
    assert len(outcomes) == 200 and left == 200  # all ran (as "skipped" here)
    assert peak <= 8


def test_session_latest_pointing_outside_rays_temp_root_is_no_session(tmp_path: Path) -> None:
    """The job re-points ``session_latest`` at a directory of its choosing outside the
    temp root: that directory used to become the session, and the anchor of its own
    checks, and its ``logs/`` were shipped as the node's."""
    root = tmp_path / "ray"
    outside = tmp_path / "elsewhere" / "session_2026-11-22_01-45-25_333080_9264"
    (outside / "logs").mkdir(parents=True)
    (outside / "logs" / "private.txt").write_text("not Ray's")
    root.mkdir()
    (root / "session_latest").symlink_to(outside)
    assert resolve_session_latest(root) is None
    # The same name inside the temp root (another mount of the same emptyDir) is used.
    (root / outside.name).mkdir()
    assert resolve_session_latest(root) == root / outside.name

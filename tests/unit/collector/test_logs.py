"""LogShipper against the real ``local`` backend and a temp root laid out like Ray's:
live shipping, debounce, session switches, prev-logs with delete-after-upload,
failures and restarts, key validation, shutdown."""

from __future__ import annotations

import errno
import os
import socket
import stat
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.collector.log_support import (
    INTERVAL,
    NODE_A,
    NODE_B,
    NODE_C,
    SAMPLES,
    SESSION_A,
    SESSION_B,
    SESSION_OLD,
    Env,
    FlakyStore,
    holds,
    key,
    make_session,
    metric,
    point_latest,
    stored,
    wait_for,
)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    for shipper in e.shippers:
        shipper.stop(time.monotonic() + 2)


# -------------------------------------------------------------------- tests
def test_new_file_is_shipped_promptly(env: Env) -> None:
    (env.logs / "raylet.out").write_bytes(b"raylet started\n")
    shipper = env.shipper(upload_interval=600)  # promptness must not depend on the interval
    shipper.start()
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "raylet.out")) == b"raylet started\n", what="initial")

    started = time.monotonic()
    (env.logs / "worker-01-ffffffff-1.out").write_bytes(b"hello from a worker\n")
    (env.logs / "events" / "event_JOBS.log").write_bytes(b'{"event": 1}\n')
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "worker-01-ffffffff-1.out")) == b"hello from a worker\n")
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "events/event_JOBS.log")) == b'{"event": 1}\n')
    assert time.monotonic() - started < 60, "new files must not wait for the upload interval (600 s)"
    assert env.sessions == [SESSION_A]


def test_growing_file_reuploaded_with_new_content_at_most_every_interval(env: Env) -> None:
    path = env.logs / "worker-busy.out"
    path.write_bytes(b"line 0\n")
    shipper = env.shipper()
    shipper.start()
    k = key(SESSION_A, NODE_A, "worker-busy.out")
    wait_for(lambda: env.shipped_files() == 1, what="first upload counted")
    before = env.shipped_files()

    # Keep the file growing until it was re-uploaded three times (however slowly the
    # machine runs), then check those uploads were spaced by the interval.
    started = time.monotonic()
    lines = 1
    with path.open("ab") as fh:
        while env.shipped_files() - before < 3:
            assert time.monotonic() - started < 60, "a growing file is not re-uploaded while it grows"
            fh.write(f"line {lines}\n".encode())
            fh.flush()
            lines += 1
            time.sleep(0.02)
    window = time.monotonic() - started
    uploads_while_busy = env.shipped_files() - before
    # One per interval at most (+1 for an upload due right at the window's start).
    assert uploads_while_busy <= window / INTERVAL + 1, (uploads_while_busy, window)
    expected = b"".join(f"line {i}\n".encode() for i in range(lines))
    wait_for(lambda: stored(env.store, k) == expected, what="final content")


def test_unchanged_files_are_never_reuploaded(env: Env) -> None:
    for name in ("raylet.out", "gcs_server.out", "dashboard.log"):
        (env.logs / name).write_bytes(name.encode() * 100)
    shipper = env.shipper(rescan_interval=0.2)  # rescans keep finding the same files
    shipper.start()
    wait_for(lambda: env.shipped_files() == 3)
    versions = {n: env.store.stat(key(SESSION_A, NODE_A, n)).version for n in ("raylet.out", "dashboard.log")}
    time.sleep(INTERVAL * 4)  # several intervals and rescans with nothing changing
    assert env.shipped_files() == 3
    assert {n: env.store.stat(key(SESSION_A, NODE_A, n)).version for n in versions} == versions


def test_stop_ships_the_last_bytes(env: Env) -> None:
    path = env.logs / "raylet.out"
    path.write_bytes(b"first\n")
    shipper = env.shipper(upload_interval=60)  # no live re-upload during the test
    shipper.start()
    k = key(SESSION_A, NODE_A, "raylet.out")
    wait_for(lambda: stored(env.store, k) == b"first\n")
    with path.open("ab") as fh:
        fh.write(b"last words\n")
    assert shipper.stop(time.monotonic() + 5) is True
    assert stored(env.store, k) == b"first\nlast words\n"


def test_session_switch_moves_old_session_to_prev_logs_under_its_own_node(env: Env) -> None:
    old_file = env.logs / "raylet.out"
    old_file.write_bytes(b"old session\n")
    (env.logs / "events" / "event_GCS.log").write_bytes(b"{}\n")
    shipper = env.shipper(upload_interval=60)
    shipper.start()
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "raylet.out")) == b"old session\n")
    with old_file.open("ab") as fh:
        fh.write(b"written just before the restart\n")

    # The Ray container restarts: a new session, and the raylet has a new node id.
    new_session = make_session(env.root, SESSION_B, NODE_B)
    (new_session / "logs" / "raylet.out").write_bytes(b"new session\n")
    env.node.node = NODE_B
    point_latest(env.root, SESSION_B)

    wait_for(lambda: stored(env.store, key(SESSION_B, NODE_B, "raylet.out")) == b"new session\n", what="new")
    wait_for(
        lambda: (
            stored(env.store, key(SESSION_A, NODE_A, "raylet.out")) == b"old session\nwritten just before the restart\n"
        ),
        what="old session's last bytes, under the old node id",
    )
    assert stored(env.store, key(SESSION_A, NODE_A, "events/event_GCS.log")) == b"{}\n"
    assert stored(env.store, key(SESSION_A, NODE_B, "raylet.out")) is None
    # Moved out of the session dir, shipped, deleted, emptied dirs pruned.
    assert not env.logs.exists()
    prev = env.root / "prev-logs"
    wait_for(lambda: not (prev / SESSION_A).exists(), what="prev-logs pruned")
    assert stat.S_IMODE(prev.stat().st_mode) == 0o777
    assert env.sessions == [SESSION_A, SESSION_B]
    assert shipper.stop(time.monotonic() + 5) is True


def test_new_session_waits_for_its_own_node_id_when_discovery_lags(env: Env) -> None:
    """Found by the two-node head-restart scenario: the shipper saw the new session a
    moment before discovery did and filed its first logs under the previous node."""
    known = {"session": SESSION_A, "node": NODE_A}  # what discovery knows, both at once

    def node_for_session(session: str) -> str | None:
        return known["node"] if session == known["session"] else None

    (env.logs / "raylet.out").write_bytes(b"old session\n")
    shipper = env.shipper(node_for_session=node_for_session, upload_interval=60)
    shipper.start()
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "raylet.out")) == b"old session\n")

    new_session = make_session(env.root, SESSION_B, NODE_B)
    (new_session / "logs" / "raylet.out").write_bytes(b"new session\n")
    point_latest(env.root, SESSION_B)  # discovery has not noticed yet
    wait_for(lambda: SESSION_B in env.sessions, what="the shipper to see the new session")
    time.sleep(0.5)  # several shipper passes
    assert stored(env.store, key(SESSION_B, NODE_A, "raylet.out")) is None

    known.update(session=SESSION_B, node=NODE_B)
    wait_for(lambda: stored(env.store, key(SESSION_B, NODE_B, "raylet.out")) == b"new session\n", what="new node")
    assert shipper.stop(time.monotonic() + 5) is True
    assert stored(env.store, key(SESSION_B, NODE_A, "raylet.out")) is None


def test_leftover_session_at_start_filed_under_node_from_raylet_out(env: Env) -> None:
    old = make_session(env.root, SESSION_OLD, None)
    (old / "logs" / "raylet.out").write_bytes(f"[state] Setting node ID node_id={NODE_C}\n".encode())
    (old / "logs" / "worker-x-01000000-7.err").write_bytes(b"Traceback\n")
    shipper = env.shipper()
    shipper.start()
    wait_for(lambda: stored(env.store, key(SESSION_OLD, NODE_C, "worker-x-01000000-7.err")) == b"Traceback\n")
    wait_for(lambda: not (env.root / "prev-logs" / SESSION_OLD).exists(), what="prev-logs emptied")
    assert not (old / "logs").exists()
    assert old.is_dir()  # only logs/ moves; the rest of the session dir stays
    assert SESSION_OLD in env.sessions and SESSION_A in env.sessions


def test_prev_logs_failure_keeps_local_file_and_retries(env: Env) -> None:
    node_dir = env.root / "prev-logs" / SESSION_OLD / NODE_C / "logs"
    node_dir.mkdir(parents=True)
    (node_dir / "raylet.out").write_bytes(b"precious\n")
    (node_dir / "gcs_server.out").write_bytes(b"fine\n")
    env.store.deny = {f"{SESSION_OLD}/{NODE_C}/logs/raylet.out"}
    shipper = env.shipper()
    shipper.start()
    wait_for(lambda: stored(env.store, key(SESSION_OLD, NODE_C, "gcs_server.out")) == b"fine\n")
    wait_for(lambda: not (node_dir / "gcs_server.out").exists(), what="shipped file deleted")
    wait_for(
        lambda: metric(env.metrics, "upload_failures_total", what="log", kind="PermanentStorageError") >= 1,
        what="failure counted",
    )
    assert (node_dir / "raylet.out").read_bytes() == b"precious\n"  # kept: not shipped yet

    env.store.deny.clear()
    wait_for(lambda: stored(env.store, key(SESSION_OLD, NODE_C, "raylet.out")) == b"precious\n", what="retry")
    wait_for(lambda: not (env.root / "prev-logs" / SESSION_OLD).exists(), what="pruned after success")
    assert shipper.stop(time.monotonic() + 5) is True


def test_restart_resumes_prev_logs(env: Env, tmp_path: Path) -> None:
    node_dir = env.root / "prev-logs" / SESSION_OLD / NODE_C / "logs"
    (node_dir / "events").mkdir(parents=True)
    (node_dir / "raylet.out").write_bytes(b"r\n")
    (node_dir / "events" / "event_RAYLET.log").write_bytes(b"e\n")
    # First collector: its bucket directory is gone, every upload fails.
    gone = FlakyStore(tmp_path / "no-such-bucket")
    first = env.shipper(store=gone)
    first.start()
    wait_for(lambda: metric(env.metrics, "upload_failures_total", what="log", kind="PermanentStorageError") >= 2)
    assert first.stop(time.monotonic() + 2) is False
    assert (node_dir / "raylet.out").exists() and (node_dir / "events" / "event_RAYLET.log").exists()

    second = env.shipper()
    second.start()
    wait_for(lambda: stored(env.store, key(SESSION_OLD, NODE_C, "events/event_RAYLET.log")) == b"e\n")
    wait_for(lambda: stored(env.store, key(SESSION_OLD, NODE_C, "raylet.out")) == b"r\n")
    wait_for(lambda: not (env.root / "prev-logs" / SESSION_OLD).exists())
    assert second.stop(time.monotonic() + 5) is True


def test_live_upload_failure_backs_off_and_recovers(env: Env) -> None:
    (env.logs / "raylet.out").write_bytes(b"x\n")
    env.store.deny = {"raylet.out"}
    env.store.transient = True  # storage "down": StorageUnavailableError after the retry budget
    shipper = env.shipper()
    shipper.start()
    wait_for(lambda: metric(env.metrics, "upload_failures_total", what="log", kind="StorageUnavailableError") >= 1)
    env.store.deny.clear()
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "raylet.out")) == b"x\n", what="recovery")


def test_names_the_layout_rejects_are_skipped(env: Env) -> None:
    (env.logs / "good.log").write_bytes(b"ok\n")
    (env.logs / "bad name.log").write_bytes(b"space\n")
    (env.logs / "bad#hash.out").write_bytes(b"hash\n")
    shipper = env.shipper()
    shipper.start()
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "good.log")) == b"ok\n")
    wait_for(lambda: shipper.skipped_invalid == 2)
    assert shipper.stop(time.monotonic() + 5) is True
    stored_keys = [o.key for o in env.store.walk("")]
    assert stored_keys == [key(SESSION_A, NODE_A, "good.log")]


def test_symlinks_sockets_and_directories_are_skipped(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"not a log\n")
    (env.logs / "link.log").symlink_to(outside)
    (env.logs / "empty_dir").mkdir()
    os.mkfifo(env.logs / "pipe.log")  # opening it for upload would block forever
    monkeypatch.chdir(env.logs)  # AF_UNIX paths are limited to ~108 bytes
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind("s.sock")
        (env.logs / "raylet.out").write_bytes(b"r\n")
        shipper = env.shipper()
        shipper.start()
        wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "raylet.out")) == b"r\n")
        assert shipper.stop(time.monotonic() + 5) is True
    assert [o.key for o in env.store.walk("")] == [key(SESSION_A, NODE_A, "raylet.out")]


def test_nothing_uploaded_until_node_id_is_known(env: Env) -> None:
    (env.logs / "raylet.out").write_bytes(b"early\n")
    env.node.node = None
    shipper = env.shipper()
    shipper.start()
    wait_for(lambda: env.sessions == [SESSION_A], what="marker callback without a node id")
    (env.logs / "worker-1.out").write_bytes(b"w\n")
    time.sleep(INTERVAL * 2)  # a negative check needs some time to pass
    assert list(env.store.walk("")) == []
    env.node.node = NODE_A
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "raylet.out")) == b"early\n")
    wait_for(lambda: stored(env.store, key(SESSION_A, NODE_A, "worker-1.out")) == b"w\n")


def test_stop_respects_the_deadline(env: Env, tmp_path: Path) -> None:
    for i in range(40):
        (env.logs / f"worker-{i}.out").write_bytes(b"x")
    (tmp_path / "stuck").mkdir()
    uploads_may_finish = threading.Event()
    stuck = FlakyStore(tmp_path / "stuck", gate=uploads_may_finish)  # every upload hangs until the gate opens
    shipper = env.shipper(store=stuck)  # never started: stop() alone does the final upload
    # A safety valve far past the deadline: stop() must return before it opens (no timing margin).
    valve = threading.Timer(60.0, uploads_may_finish.set)
    valve.start()
    try:
        assert shipper.stop(time.monotonic() + 1.0) is False
        assert not uploads_may_finish.is_set(), "stop() waited for the uploads, not for its deadline"
    finally:
        valve.cancel()
        uploads_may_finish.set()


def test_sample_session_logs_are_shipped_whole(env: Env) -> None:
    with tarfile.open(SAMPLES) as tar:
        tar.extractall(env.root / "sample", filter="data")
    sample_logs = env.root / "sample" / SESSION_A / "logs"
    os.rmdir(env.logs / "events")
    os.rmdir(env.logs)
    os.rename(sample_logs, env.logs)
    files = {p.relative_to(env.logs).as_posix(): p for p in env.logs.rglob("*") if p.is_file()}
    assert len(files) > 50
    shipper = env.shipper()
    shipper.start()
    wait_for(lambda: env.shipped_files() == len(files), what="every sample file")
    for rel in ("raylet.out", "jobs/supervisor-wl-job2-fails.log", "gcs_server.err"):
        assert stored(env.store, key(SESSION_A, NODE_A, rel)) == files[rel].read_bytes()
    total = sum(p.stat().st_size for p in files.values())
    wait_for(lambda: metric(env.metrics, "log_bytes_shipped_total") == total, what="byte count")
    assert shipper.stop(time.monotonic() + 5) is True


def test_prev_logs_from_old_kuberay_prefix_and_odd_dirs(env: Env) -> None:
    # `mv $RAY_TMP_ROOT/session_latest/logs $RAY_TMP_ROOT/prev-logs/<session>/<node>/logs`
    moved = env.root / "prev-logs" / SESSION_OLD / NODE_C.upper() / "logs"
    moved.mkdir(parents=True)
    (moved / "raylet.out").write_bytes(b"prefix\n")
    # No node id (the postStart hook failed): the name is not hex and is left alone.
    odd = env.root / "prev-logs" / SESSION_OLD / "unknown" / "logs"
    odd.mkdir(parents=True)
    (odd / "raylet.out").write_bytes(b"odd\n")
    shipper = env.shipper()
    shipper.start()
    wait_for(lambda: stored(env.store, key(SESSION_OLD, NODE_C, "raylet.out")) == b"prefix\n")
    wait_for(lambda: not moved.exists())
    assert (odd / "raylet.out").exists()


def test_concurrent_writer_during_switch_loses_nothing(env: Env) -> None:
    """Many files written right up to the switch all arrive, every byte."""
    stop = threading.Event()
    written: dict[str, bytes] = {}

    def writer() -> None:
        i = 0
        while not stop.is_set():
            name = f"worker-{i % 5}.out"
            line = f"{i}\n".encode()
            with (env.logs / name).open("ab") as fh:
                fh.write(line)
            written[name] = written.get(name, b"") + line
            i += 1
            time.sleep(0.005)

    shipper = env.shipper()
    shipper.start()
    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(1.0)
    stop.set()
    thread.join()
    make_session(env.root, SESSION_B, NODE_A)
    point_latest(env.root, SESSION_B)
    for name, data in written.items():
        wait_for(holds(env.store, key(SESSION_A, NODE_A, name), data), what=name)
    assert shipper.stop(time.monotonic() + 5) is True


def test_slow_upload_widens_the_gap_for_that_file(env: Env, tmp_path: Path) -> None:
    """A file whose upload takes long is re-uploaded less often (it goes up whole)."""
    (tmp_path / "slow").mkdir()
    slow = FlakyStore(tmp_path / "slow", delay=0.3)
    path = env.logs / "huge.out"
    path.write_bytes(b"0\n")
    shipper = env.shipper(store=slow, upload_interval=0.1)
    shipper.start()
    wait_for(lambda: env.shipped_files() == 1)
    end = time.monotonic() + 2.5
    with path.open("ab") as fh:
        while time.monotonic() < end:
            fh.write(b"more\n")
            fh.flush()
            time.sleep(0.02)
    # interval 0.1 s would allow ~20 uploads; a 0.3 s upload spaces them >= 0.6 s apart.
    assert env.shipped_files() - 1 <= 4


def test_leftover_session_merges_into_an_existing_prev_logs_dir(env: Env) -> None:
    old = make_session(env.root, SESSION_OLD, NODE_C)
    (old / "logs" / "b.log").write_bytes(b"from the session dir\n")
    already = env.root / "prev-logs" / SESSION_OLD / NODE_C / "logs"
    already.mkdir(parents=True)
    (already / "a.log").write_bytes(b"moved earlier\n")
    shipper = env.shipper()
    shipper.start()
    wait_for(holds(env.store, key(SESSION_OLD, NODE_C, "a.log"), b"moved earlier\n"))
    wait_for(holds(env.store, key(SESSION_OLD, NODE_C, "b.log"), b"from the session dir\n"))
    wait_for(lambda: not (env.root / "prev-logs" / SESSION_OLD).exists())
    assert not (old / "logs").exists()


def test_without_a_watcher_rescans_take_over(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """inotify exhausted (KubeRay's Go collector dies here): files still ship, by rescans."""

    def no_inotify(*_args: object, **_kwargs: object) -> Iterator[set[tuple[int, str]]]:
        raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr("runtime.collector.log_watch.watchfiles.watch", no_inotify)
    shipper = env.shipper()
    shipper.start()
    time.sleep(0.3)
    (env.logs / "worker-late.out").write_bytes(b"late\n")
    # Within the upload interval (0.5 s), long before the safety-net rescan (300 s).
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "worker-late.out"), b"late\n"), timeout=30)


def test_a_watcher_dying_late_still_hands_over_to_rescans(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher fails after the loop checked it was alive: rescans still take
    over within the upload interval, not after the 5-minute safety-net rescan."""

    def dies_soon(*_args: object, **_kwargs: object) -> Iterator[set[tuple[int, str]]]:
        time.sleep(0.3)
        raise OSError(errno.ENOSPC, "inotify watch limit reached")
        yield set()  # a generator, like watchfiles.watch

    monkeypatch.setattr("runtime.collector.log_watch.watchfiles.watch", dies_soon)
    shipper = env.shipper()
    shipper.start()
    time.sleep(0.6)  # the watcher has died by now
    (env.logs / "worker-later.out").write_bytes(b"later\n")
    wait_for(holds(env.store, key(SESSION_A, NODE_A, "worker-later.out"), b"later\n"), timeout=30)
    shipper.stop(time.monotonic() + 5)

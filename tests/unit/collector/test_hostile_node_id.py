"""A Ray job planting ``{tmp_root}/raylet_node_id`` (the GKE guide's postStart hook
writes it into the emptyDir the job can write too): a FIFO there must neither keep
the collector from listening nor from noticing SIGTERM, a link must not be followed
(nor its target logged), and the read is bounded."""

from __future__ import annotations

import logging
import os
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.collector import session_files
from runtime.collector.app import Collector
from runtime.storage.local import LocalStore
from tests.unit.collector.log_support import NODE_A, NODE_B, make_session
from tests.unit.collector.test_shutdown import worker_config

pytestmark = pytest.mark.hostile

SECRET = "ya29.SECRET-ACCESS-TOKEN-of-the-collector"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The module says each complaint once: every test starts from none said."""
    monkeypatch.setattr(session_files, "_last_warning", [], raising=False)


@pytest.fixture
def ray_root(tmp_path: Path) -> Path:
    root = tmp_path / "ray"
    root.mkdir()
    return root


def _unblock(fifo: Path) -> None:
    """Open and close the FIFO's writing end, so a reader stuck opening it gets EOF
    (ENXIO means no reader waits: nothing to unblock)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    os.close(fd)


def _run_briefly(fn: Callable[[], object], fifo: Path, timeout: float = 3.0) -> tuple[bool, object]:
    """``fn()`` in a thread: (whether it returned within ``timeout``, its result).
    A reader stuck on ``fifo`` is released afterwards so the test run goes on."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    finished = not thread.is_alive()
    _unblock(fifo)
    thread.join(5)
    return finished, result[0] if result else None


def test_a_fifo_as_raylet_node_id_does_not_stop_the_collector(tmp_path: Path, ray_root: Path) -> None:
    """Collector.run() reads the file on the main thread before it listens: a plain
    open() of a FIFO waited forever for a writer, so the events port never opened
    and SIGTERM was never noticed."""
    (tmp_path / "bucket").mkdir()
    fifo = ray_root / "raylet_node_id"
    os.mkfifo(fifo)
    cfg = worker_config(tmp_path, ray_root, deadline=2.0)
    collector = Collector(cfg, LocalStore(tmp_path / "bucket"))
    stop = threading.Event()
    runner = threading.Thread(target=collector.run, args=(stop,), daemon=True)
    runner.start()
    try:
        started = collector.started.wait(5)
        stop.set()  # SIGTERM
        runner.join(5)
        stuck = runner.is_alive()
    finally:
        _unblock(fifo)
        runner.join(5)
    assert started, "the collector never listened: blocked opening the FIFO raylet_node_id"
    assert not stuck, "the collector did not shut down on SIGTERM"


def test_a_fifo_is_not_waited_on_and_its_kind_is_logged(ray_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    fifo = ray_root / "raylet_node_id"
    os.mkfifo(fifo)
    with caplog.at_level(logging.WARNING):
        finished, found = _run_briefly(lambda: session_files.node_id_from_file(ray_root), fifo)
    assert finished, "node_id_from_file blocked on a FIFO"
    assert found is None
    assert "FIFO" in caplog.text


def test_a_linked_raylet_node_id_is_not_followed_nor_its_target_logged(
    tmp_path: Path, ray_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "collector-only" / "token"  # the collector's own credentials, say
    secret.parent.mkdir()
    secret.write_text(SECRET)
    (ray_root / "raylet_node_id").symlink_to(secret)
    with caplog.at_level(logging.WARNING):
        assert session_files.node_id_from_file(ray_root) is None
    assert "SECRET" not in caplog.text, f"the link was followed and its target logged: {caplog.text!r}"
    assert "symbolic link" in caplog.text


def test_a_link_to_a_valid_node_id_is_not_followed_either(tmp_path: Path, ray_root: Path) -> None:
    """The link's target decides nothing, even when it holds a well-formed node id."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(NODE_A + "\n")
    (ray_root / "raylet_node_id").symlink_to(elsewhere)
    assert session_files.node_id_from_file(ray_root) is None


def test_a_directory_as_raylet_node_id_is_named_by_its_kind(ray_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    (ray_root / "raylet_node_id").mkdir()
    with caplog.at_level(logging.WARNING):
        assert session_files.node_id_from_file(ray_root) is None
        assert session_files.node_id_from_file(ray_root) is None  # re-read: said once
    assert caplog.text.count("a directory") == 1


def test_a_huge_raylet_node_id_is_read_only_as_far_as_a_node_id_goes(
    ray_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 64 MB (sparse) file: the whole of it used to be read and decoded."""
    with (ray_root / "raylet_node_id").open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)
    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING):
            assert session_files.node_id_from_file(ray_root) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024, f"read {peak} bytes of a file that can only hold a node id"
    assert len(caplog.records) == 1


def test_a_regular_raylet_node_id_is_still_read(tmp_path: Path, ray_root: Path) -> None:
    (ray_root / "raylet_node_id").write_text(NODE_A.upper() + "\n")
    assert session_files.node_id_from_file(ray_root) == NODE_A
    # Ray's temp root itself is the operator's choice and may be a link.
    linked_root = tmp_path / "linked-ray"
    linked_root.symlink_to(ray_root, target_is_directory=True)
    assert session_files.node_id_from_file(linked_root) == NODE_A


def test_bad_contents_are_logged_once_each_and_bounded(ray_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    node_file = ray_root / "raylet_node_id"
    with caplog.at_level(logging.WARNING):
        node_file.write_text("not-a-node-id")
        session_files.node_id_from_file(ray_root)
        session_files.node_id_from_file(ray_root)
        node_file.write_text("y" * 500)
        session_files.node_id_from_file(ray_root)
    assert caplog.text.count("not-a-node-id") == 1
    assert "y" * 81 not in caplog.text  # at most 80 characters of the content
    assert len(session_files._last_warning) <= 1  # what the job writes cannot grow memory


def test_port_files_that_are_dangling_or_looping_links_do_not_abort_the_scan(ray_root: Path) -> None:
    """The port files' names tell the node; their times are the links' own, so a
    dangling or looping link planted beside them is neither followed nor fatal."""
    session = make_session(ray_root, "session_2026-11-22_01-45-25_333080_9264", NODE_A)
    (session / f"dashboard_agent_port_{NODE_B}").symlink_to(ray_root / "missing")
    loop = session / f"runtime_env_agent_port_{NODE_B}"
    loop.symlink_to(loop.name)
    os.utime(session / f"gcs_server_port_{NODE_A}", ns=(time.time_ns() + 10**10,) * 2)
    assert session_files.node_id_from_session_dir(session) == NODE_A


def test_raylet_out_is_not_read_through_a_linked_session_directory(tmp_path: Path, ray_root: Path) -> None:
    """``session_*`` itself lies in the emptyDir: a link there (to a directory of the
    collector's own) is not followed to read ``logs/raylet.out``."""
    outside = tmp_path / "outside"
    (outside / "logs").mkdir(parents=True)
    (outside / "logs" / "raylet.out").write_bytes(f"Setting node ID node_id={NODE_B}\n".encode())
    linked = ray_root / "session_2026-11-22_01-45-25_333080_9264"
    linked.symlink_to(outside, target_is_directory=True)
    assert session_files.node_id_from_session_dir(linked) is None

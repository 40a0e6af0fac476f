"""``flock`` slots bounding builds across threads and processes (``--max-builds``)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from runtime.server.index.locks import queued_slot, slot

DEADLINE = 30.0


def test_slots_are_taken_until_none_is_free(tmp_path: Path) -> None:
    with slot(tmp_path, "s-", 2) as first, slot(tmp_path, "s-", 2) as second, slot(tmp_path, "s-", 2) as third:
        assert (first, second, third) == (True, True, False)
    with slot(tmp_path, "s-", 2) as again:
        assert again, "released on the way out"


def test_a_queued_slot_waits_for_one_to_free_up(tmp_path: Path) -> None:
    events: list[str] = []
    waiting: list[int] = []
    granted = threading.Event()

    def build() -> None:
        with queued_slot(tmp_path, "s-", 1, lambda: events.append("queued"), waiting.append, poll=0.01):
            events.append("building")
            granted.set()

    with slot(tmp_path, "s-", 1) as held:
        assert held
        thread = threading.Thread(target=build)
        thread.start()
        deadline = time.monotonic() + DEADLINE
        while waiting != [1] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert events == ["queued"] and waiting == [1]
        assert not granted.wait(0.1), "no slot while the only one is held"
    assert granted.wait(DEADLINE)
    thread.join(DEADLINE)
    assert events == ["queued", "building"] and waiting == [1, -1]


def test_a_free_slot_is_taken_without_queueing(tmp_path: Path) -> None:
    calls: list[object] = []
    with queued_slot(tmp_path, "s-", 1, lambda: calls.append("queued"), calls.append):
        pass
    assert calls == []


def test_slots_are_shared_with_other_processes(tmp_path: Path) -> None:
    """Gunicorn workers are processes: a slot another process holds is not free here,
    and a process that dies (even killed) frees its slot."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
            str(tmp_path / "s-0.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with slot(tmp_path, "s-", 1) as free:
            assert not free
    finally:
        holder.kill()
        holder.wait()
    with slot(tmp_path, "s-", 1) as free:
        assert free

"""The log watcher's start and stop run on different threads (the shipper's loop, the shutdown)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runtime.collector.log_watch import LogWatcher


def test_stop_while_a_watcher_starts_never_joins_an_unstarted_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM can arrive just as the shipper's loop starts a watcher (a new session's logs
    appeared). stop() then found the watcher's thread made but not started, and
    ``Thread.join`` raised "cannot join thread before it is started": the collector's
    shutdown ended in a traceback without its report (a CI run of test_shutdown.py showed
    it). Here the shutdown's stop() is made to run exactly in that window."""
    logs = tmp_path / "session_x" / "logs"
    logs.mkdir(parents=True)
    watcher = LogWatcher(on_changes=lambda _paths: False, wake=threading.Event(), upload_interval=1.0, retry_after=1.0)
    errors: list[BaseException] = []

    def shutdown_stops() -> None:
        try:
            watcher.stop()
        except BaseException as exc:
            errors.append(exc)

    real_start = threading.Thread.start

    def start_after_a_stop(thread: threading.Thread) -> None:
        if thread.name == "log-watch":
            racer = threading.Thread(target=shutdown_stops, name="shutdown-racer")
            real_start(racer)
            racer.join(0.5)  # with the fix it waits for this start; before, it failed here
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_after_a_stop)
    assert watcher.ensure(logs, tmp_path)
    monkeypatch.undo()
    for thread in threading.enumerate():
        if thread.name == "shutdown-racer":
            thread.join(5)
    assert errors == []
    assert not watcher.alive
    watcher.stop()

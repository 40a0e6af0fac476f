"""The session's end as the index build finds it (issue #19 item 3): the latest time
any stored event records, task events included, whether the task shards are replayed
in-process or by worker processes."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtime.server.index.build import build_index
from runtime.server.index.reader import SessionIndex
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.support.dead_session import CLUSTER, HEAD_HEX, KEEPER_HEX, SESSION, at, events, ms
from tests.support.sample_session import write_events

LAST_TASK = 50  # seconds: after every other event of the session (END is 45)


def task_events() -> list[dict[str, Any]]:
    task = base64.b64encode(bytes(range(200, 224))).decode()
    head = events()[0]["nodeId"]
    lifecycle = {
        "taskId": task,
        "taskAttempt": 0,
        "jobId": "AgAAAA==",
        "nodeId": head,
        "stateTransitions": [
            {"state": "PENDING_NODE_ASSIGNMENT", "timestamp": at(40)},
            {"state": "RUNNING", "timestamp": at(41)},
            {"state": "FINISHED", "timestamp": at(LAST_TASK)},
        ],
    }
    return [
        {
            "eventId": base64.b64encode(b"task-event".ljust(28, b"-")).decode(),
            "sourceType": "CORE_WORKER",
            "eventType": "TASK_LIFECYCLE_EVENT",
            "timestamp": at(41),  # the envelope is older than the last transition it carries
            "severity": "INFO",
            "sessionName": SESSION,
            "taskLifecycleEvent": lifecycle,
            "nodeId": head,
            "message": "",
        }
    ]


@pytest.mark.parametrize("processes", [0, 2])
def test_the_end_includes_task_transitions(tmp_path: Path, processes: int) -> None:
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True))
    write_events(store, KeyLayout(""), CLUSTER, events() + task_events())
    out = tmp_path / "index.sqlite"
    stats = build_index(store, KeyLayout(""), CLUSTER, SESSION, out, processes=processes)
    assert stats.processes == processes and stats.tasks == 1
    with SessionIndex(out) as index:
        head = orjson.loads(index.scalar("SELECT ended_json FROM nodes WHERE node_id = ?", (HEAD_HEX,)))
        keeper = orjson.loads(index.scalar("SELECT ended_json FROM actors WHERE actor_id = ?", (KEEPER_HEX,)))
        plain = orjson.loads(index.scalar("SELECT node_json FROM nodes WHERE node_id = ?", (HEAD_HEX,)))
    assert head["raylet"]["endTimeMs"] == str(ms(LAST_TASK)) and keeper["endTime"] == ms(LAST_TASK)
    assert plain["raylet"]["state"] == "ALIVE"

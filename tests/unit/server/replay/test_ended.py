"""The end-state rules of a stored session (issue #19 item 3): what was alive when the
cluster went away is DEAD at the session's end; what died on its own keeps its death;
the plain form (served while the session may be running) is untouched."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from runtime.server.queries.ended import session_ended
from runtime.server.replay.render_tasks import TaskRenderer
from runtime.server.replay.session import SessionReplay
from runtime.server.replay.shard import TaskShard
from tests.support.dead_session import (
    END,
    GONE_HEX,
    HEAD_HEX,
    KEEPER_HEX,
    SESSION,
    WORKER_DEATH,
    WORKER_HEX,
    at,
    events,
    ms,
)
from tests.unit.server.replay.events import owner


def replayed() -> SessionReplay:
    replay = SessionReplay()
    replay.feed(events())
    return replay


def loaded(raw: bytes | None) -> Any:
    assert raw is not None, "no ended form"
    return orjson.loads(raw)


def nodes(end_ms: int | None) -> dict[str, Any]:
    return {row.node_id: row for row in replayed().nodes.rows(SESSION, end_ms)}


def test_the_session_end_is_its_latest_event_of_any_type() -> None:
    # The latest event is a WORKER_LIFECYCLE_EVENT, a type no table keeps: still timed.
    assert replayed().last.ms == ms(END)


def test_alive_at_end_node_becomes_dead_at_the_session_end() -> None:
    head = nodes(ms(END))[HEAD_HEX]
    plain = orjson.loads(head.node_json)["raylet"]
    assert (head.state, plain["state"], plain["endTimeMs"]) == ("ALIVE", "ALIVE", "0")
    ended = loaded(head.ended_json)
    raylet = ended["raylet"]
    assert raylet["state"] == "DEAD" and raylet["endTimeMs"] == str(ms(END))
    assert "cluster ended" in raylet["stateMessage"]
    assert ended["now"] == ms(END) / 1000
    # Everything else is the plain element: same node, same last known totals.
    assert {k: v for k, v in ended.items() if k not in ("now", "t", "raylet")} == {
        k: v for k, v in orjson.loads(head.node_json).items() if k not in ("now", "t", "raylet")
    }


def test_node_with_its_own_death_event_keeps_it() -> None:
    worker = nodes(ms(END))[WORKER_HEX]
    raylet = orjson.loads(worker.node_json)["raylet"]
    assert worker.ended_json is None  # served as the events say, ended or not
    assert raylet["state"] == "DEAD" and raylet["endTimeMs"] == str(ms(WORKER_DEATH))
    assert raylet["stateMessage"] == "Unexpected termination: health check failed"


def test_unknown_session_end_gives_no_ended_form() -> None:
    assert all(row.ended_json is None for row in nodes(None).values())
    assert all(row.ended_json is None for row in replayed().actors.rows({}, None))


def test_the_end_is_never_before_the_nodes_own_last_transition() -> None:
    head = nodes(ms(0))[HEAD_HEX]  # a session end earlier than the node's ALIVE (at 01:46:01)
    assert loaded(head.ended_json)["raylet"]["endTimeMs"] == str(ms(1))


def test_resource_columns_show_the_last_known_totals() -> None:
    """What the Cluster page draws: mem = [total, available, percent, used] and the
    object store's used/available; never NaN (missing fields) or 0B/0B."""
    for end in (None, ms(END)):
        for row in nodes(end).values():
            for raw in (row.node_json, row.ended_json or row.node_json):
                node = orjson.loads(raw)
                total = 8 * 1024**3 if row.node_id == HEAD_HEX else 4 * 1024**3
                store = 2 * 1024**3 if row.node_id == HEAD_HEX else 1024**3
                assert node["mem"] == [total, total, 0.0, 0]
                assert node["raylet"]["objectStoreUsedMemory"] == 0
                assert node["raylet"]["objectStoreAvailableMemory"] == store
                assert node["disk"] == {}  # unknown: no bar rather than 0B/0B


def test_alive_actor_becomes_dead_and_a_dead_one_keeps_its_cause() -> None:
    rows = {row.actor_id: row for row in replayed().actors.rows({}, ms(END))}
    keeper, gone = rows[KEEPER_HEX], rows[GONE_HEX]
    assert keeper.state == "ALIVE" and orjson.loads(keeper.actor_json)["state"] == "ALIVE"
    ended = loaded(keeper.ended_json)
    assert ended["state"] == "DEAD" and ended["endTime"] == ms(END) and ended["timestamp"] == float(ms(END))
    assert ended["startTime"] == ms(6) and ended["pid"] == 4242
    assert ended["exitDetail"].startswith("The cluster ended while this actor was ALIVE")
    assert gone.ended_json is None
    died = orjson.loads(gone.actor_json)
    assert died["state"] == "DEAD" and died["endTime"] == ms(WORKER_DEATH)
    assert died["exitDetail"] == "the actor's node died"


def test_pending_actor_at_end_says_so() -> None:
    pending = [e for e in events() if e["eventType"] != "ACTOR_LIFECYCLE_EVENT"]
    pending.append(
        {
            **events()[0],
            "eventId": "cGVuZGluZw==",
            "eventType": "ACTOR_LIFECYCLE_EVENT",
            "actorLifecycleEvent": {
                "actorId": KEEPER_HEX,  # ids arrive as hex too
                "stateTransitions": [{"timestamp": at(7), "state": "PENDING_CREATION"}],
            },
        }
    )
    replay = SessionReplay()
    replay.feed(pending)
    (row,) = [r for r in replay.actors.rows({}, ms(END)) if r.actor_id == KEEPER_HEX]
    ended = loaded(row.ended_json)
    assert ended["state"] == "DEAD" and "was PENDING_CREATION" in ended["exitDetail"]
    assert "startTime" not in ended and ended["endTime"] == ms(END)


def test_task_shards_report_their_latest_transition() -> None:
    shard = TaskShard()
    shard.replay.feed([owner()])  # transitions up to ts(9) = 01:45:09
    renderer: TaskRenderer = shard.renderer()
    list(renderer.rows())
    want = int(datetime(2026, 11, 22, 1, 45, 9, tzinfo=UTC).timestamp() * 1000)
    assert shard.result(renderer).last_ms == want


CLUSTER = ("default", "gone-cluster")
CREATED = datetime(2026, 11, 22, 1, 45, 25, tzinfo=UTC)
NEWER = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def test_a_newer_session_of_the_same_cluster_ends_it() -> None:
    stored = [(CLUSTER, NEWER), (CLUSTER, CREATED)]
    assert session_ended(CLUSTER, CREATED, stored, live=None)
    assert session_ended(CLUSTER, CREATED, stored, live={CLUSTER})  # the live cluster runs the newer one


def test_a_cluster_gone_from_live_discovery_has_ended() -> None:
    assert session_ended(CLUSTER, CREATED, [(CLUSTER, CREATED)], live=set())


def test_a_session_that_may_be_running_is_untouched() -> None:
    # Newest first, as stored sessions are listed: newer ones of other clusters, an older one of this.
    older = datetime(2026, 11, 21, tzinfo=UTC)
    only = [(("default", "other"), NEWER), (("team", "gone-cluster"), NEWER), (CLUSTER, CREATED), (CLUSTER, older)]
    assert not session_ended(CLUSTER, CREATED, only, live={CLUSTER})  # live: running
    assert not session_ended(CLUSTER, CREATED, only, live=None)  # liveness unknown: may be running
    assert not session_ended(CLUSTER, None, only, live=None)


def test_the_collectors_end_marker_ends_it() -> None:
    """Display and indexing only: gc (runtime.storage.retention) never deletes on it."""
    only = [(CLUSTER, CREATED)]
    assert session_ended(CLUSTER, CREATED, only, live=None, marked=True)
    assert session_ended(CLUSTER, None, only, live=None, marked=True)


def test_a_stale_end_marker_does_not_end_a_session_discovery_sees_running() -> None:
    """A collector container restarted while Ray ran: its predecessor marked the session
    ended at SIGTERM; until the new one deletes the marker, discovery's word wins."""
    assert not session_ended(CLUSTER, CREATED, [(CLUSTER, CREATED)], live={CLUSTER}, marked=True)

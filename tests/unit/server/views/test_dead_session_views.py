"""Issue #19 item 3 over HTTP: a stored session whose cluster is gone shows its nodes
and actors DEAD at the session's end; one that may still be running shows them as
the events left them. The app is the real one over a local bucket; liveness comes
from real live directories (none, a static listing, an unavailable Kubernetes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.config import LiveClusterURL, ServerConfig
from runtime.server.live.discovery import LiveDirectory, StaticLiveDirectory, UnavailableLiveDirectory
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.support.dead_session import (
    CLUSTER,
    END,
    GONE_HEX,
    HEAD_HEX,
    KEEPER_HEX,
    SESSION,
    WORKER_DEATH,
    WORKER_HEX,
    ms,
    write_dead_session,
)

NEWER = "session_2026-11-23_09-00-00_000000_1"


def client_for(tmp_path: Path, live: LiveDirectory | None, *, newer: bool = False) -> FlaskClient:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "bucket"), create_bucket=True)
    store = open_store(storage)
    write_dead_session(store, KeyLayout(""))
    if newer:  # the cluster's head restarted: a newer session is stored (its marker is enough)
        store.put_bytes(KeyLayout("").marker_key(CLUSTER, NEWER), b"")
    app = create_app(ServerConfig(storage=storage, cache_dir=tmp_path / "cache", kubernetes="off"), live=live)
    client = app.test_client()
    for name, value in {
        "cluster_name": CLUSTER.name,
        "cluster_namespace": CLUSTER.namespace,
        "session_name": SESSION,
        "owner_kind": "",
        "owner_name": "",
    }.items():
        client.set_cookie(name, value)
    return client


def get(client: FlaskClient, url: str) -> Any:
    response = client.get(url)
    assert response.status_code == 200, (url, response.data[:300])
    return orjson.loads(response.data)


def states(client: FlaskClient) -> dict[str, tuple[str, str]]:
    summary = get(client, "/nodes?view=summary")["data"]["summary"]
    found = {n["raylet"]["nodeId"]: (n["raylet"]["state"], n["raylet"]["endTimeMs"]) for n in summary}
    actors = get(client, "/logical/actors")["data"]["actors"]
    found.update({a: (o["state"], str(o.get("endTime", ""))) for a, o in actors.items()})
    return found


RUNNING_CLUSTER = StaticLiveDirectory([LiveClusterURL(CLUSTER.namespace, CLUSTER.name, "http://127.0.0.1:9")])


def test_gone_cluster_shows_dead_at_the_session_end(tmp_path: Path) -> None:
    client = client_for(tmp_path, None)  # no live discovery configured: nothing runs
    assert states(client) == {
        HEAD_HEX: ("DEAD", str(ms(END))),
        WORKER_HEX: ("DEAD", str(ms(WORKER_DEATH))),  # its own death event wins
        KEEPER_HEX: ("DEAD", str(ms(END))),
        GONE_HEX: ("DEAD", str(ms(WORKER_DEATH))),
    }
    summary = get(client, "/nodes?view=summary")["data"]["summary"]
    head = next(n for n in summary if n["raylet"]["nodeId"] == HEAD_HEX)
    assert "cluster ended" in head["raylet"]["stateMessage"]
    assert head["mem"][0] == head["mem"][1] == 8 * 1024**3
    assert head["raylet"]["objectStoreAvailableMemory"] == 2 * 1024**3
    assert head["raylet"]["objectStoreUsedMemory"] == 0
    # The node page and one actor's page agree with the lists.
    detail = get(client, f"/nodes/{HEAD_HEX}")["data"]["detail"]
    assert detail["raylet"]["state"] == "DEAD" and detail["actors"][KEEPER_HEX]["state"] == "DEAD"
    keeper = get(client, f"/logical/actors/{KEEPER_HEX}")["data"]["detail"]
    assert keeper["state"] == "DEAD" and keeper["exitDetail"].startswith("The cluster ended while")
    assert get(client, f"/logical/actors?ids={KEEPER_HEX}")["data"]["actors"][KEEPER_HEX] == keeper


def test_newer_session_of_a_live_cluster_ends_this_one(tmp_path: Path) -> None:
    client = client_for(tmp_path, RUNNING_CLUSTER, newer=True)
    assert states(client)[HEAD_HEX] == ("DEAD", str(ms(END)))


@pytest.mark.parametrize(
    "live",
    [RUNNING_CLUSTER, UnavailableLiveDirectory("no service-account token")],
    ids=["cluster-running", "liveness-unknown"],
)
def test_session_that_may_be_running_is_untouched(tmp_path: Path, live: LiveDirectory) -> None:
    assert states(client_for(tmp_path, live)) == {
        HEAD_HEX: ("ALIVE", "0"),
        WORKER_HEX: ("DEAD", str(ms(WORKER_DEATH))),
        KEEPER_HEX: ("ALIVE", ""),
        GONE_HEX: ("DEAD", str(ms(WORKER_DEATH))),
    }


def test_the_collectors_end_marker_ends_a_session_of_unknown_liveness(tmp_path: Path) -> None:
    """No Kubernetes API answers (e.g. no RBAC to list RayClusters): the head collector's
    ``session_ended.json`` (written last at its shutdown) is what tells the session is over."""
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "bucket"), create_bucket=True)
    open_store(storage).put_bytes(KeyLayout("").session_ended_key(CLUSTER, SESSION), b'{"endedAt": "x"}')
    client = client_for(tmp_path, UnavailableLiveDirectory("no service-account token"))
    assert states(client)[HEAD_HEX] == ("DEAD", str(ms(END)))
    assert states(client)[KEEPER_HEX] == ("DEAD", str(ms(END)))

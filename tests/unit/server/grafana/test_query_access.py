"""What the Grafana / Prometheus proxy lets through, with access control on: every panel
query is checked whatever its ``hide`` flag and only the checked form is forwarded, and
a session the caller may not read is answered as if it did not exist (its namespace is
never named), including a session name that two namespaces share.

Bob may read namespace ``default`` (session A) only; ``JOB_SESSION`` is in ``team-a``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.app_world import JOB_SESSION
from tests.support.recording_http import recording_server
from tests.support.sample_session import SESSION_A
from tests.unit.server.grafana.test_proxy import PAGE, World, _world

DS_QUERY = "/grafana/api/ds/query"
LOOKUP = "/grafana/api/datasources/uid/prom/resources/api/v1/labels"
UNKNOWN = "session_2020-01-01_00-00-00_000000_1"
PROM = {"type": "prometheus", "uid": "prom"}
PINNED = f'sum(ray_node_mem_used{{SessionName="{SESSION_A}"}}) by (instance)'


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[World]:
    with recording_server() as upstream:
        yield from _world(tmp_path, upstream, guarded=True)


def _body(*queries: dict[str, Any], **extra: Any) -> bytes:
    return orjson.dumps({"queries": list(queries), "from": "1", "to": "2", **extra})


def _query(ref: str, expr: str, **extra: Any) -> dict[str, Any]:
    return {"refId": ref, "expr": expr, "datasource": PROM, **extra}


def _forwarded(world: World) -> list[bytes]:
    return [r.body for r in world.upstream.requests if r.path == DS_QUERY]


def _refused(answer: Any, status: int) -> str:
    assert answer.status_code == status, (answer.status_code, answer.get_data(as_text=True)[:300])
    body = orjson.loads(answer.get_data())
    assert body["result"] is False
    return str(body["msg"])


# ------------------------------------------------------------ hidden / unchecked queries
@pytest.mark.parametrize("select", [None, SESSION_A])
def test_hidden_queries_are_checked_like_any_other(guarded: World, select: str | None) -> None:
    bob = guarded.client(select=select, token="bob-token")
    mixed = _body(_query("A", PINNED), _query("B", "ray_node_mem_used", hide=True))
    msg = _refused(bob.post(DS_QUERY, data=mixed, content_type="application/json"), 403)
    assert "B" in msg and "has no SessionName" in msg
    # Every query hidden: still checked, whether or not a selection cookie was authorized first.
    hidden = _body(_query("A", "ray_node_mem_used", hide=True))
    assert "has no SessionName" in _refused(bob.post(DS_QUERY, data=hidden, content_type="application/json"), 403)
    other = _body(_query("A", f'up{{SessionName="{JOB_SESSION}"}}', hide=True))
    _refused(bob.post(DS_QUERY, data=other, content_type="application/json"), 404)
    empty = _body()
    assert "no queries" in _refused(bob.post(DS_QUERY, data=empty, content_type="application/json"), 400)
    assert not _forwarded(guarded)
    # A hidden pinned query of a readable session is forwarded, hidden as it was.
    ok = _body(_query("A", PINNED), _query("B", f'up{{SessionName="{SESSION_A}"}}', hide=True))
    assert bob.post(DS_QUERY, data=ok, content_type="application/json").status_code == 200
    assert [q.get("hide") for q in orjson.loads(_forwarded(guarded)[0])["queries"]] == [None, True]


EXPRESSION = {"refId": "C", "datasource": {"type": "__expr__", "uid": "__expr__"}, "type": "math", "expression": "$A"}


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        (EXPRESSION, "server-side expression"),
        ({"refId": "C", "datasource": "__expr__", "type": "math", "expression": "$A"}, "server-side expression"),
        (
            {"refId": "C", "datasource": {"type": "__expr__", "uid": "-100"}, "expression": "$A"},
            "server-side expression",
        ),
        (
            {"refId": "C", "datasource": {"type": "prometheus", "uid": "__expr__"}, "expr": PINNED},
            "server-side expression",
        ),
        (
            {"refId": "C", "datasource": {"type": "datasource", "uid": "grafana"}, "queryType": "randomWalk"},
            "prometheus",
        ),
        ({"refId": "C", "datasource": {"type": "prometheus", "uid": "grafana"}, "expr": PINNED}, "built-in"),
        ({"refId": "C", "datasource": {"type": "loki", "uid": "logs"}, "expr": PINNED}, "prometheus"),
        ({"refId": "C", "datasource": {"uid": "prom"}, "expr": PINNED}, "prometheus"),
        ({"refId": "C", "datasourceId": 1, "expr": PINNED}, "datasource"),
        ({"refId": "C", "datasource": PROM, "rawSql": "select 1"}, "no PromQL expr"),
        ({"refId": "C", "datasource": PROM, "expr": ["x"]}, "no PromQL expr"),
        ("not an object", "not an object"),
    ],
)
def test_queries_the_check_cannot_read_are_refused(guarded: World, query: Any, reason: str) -> None:
    bob = guarded.client(select=SESSION_A, token="bob-token")
    body = _body(_query("A", PINNED, hide=True), query)
    msg = _refused(bob.post(DS_QUERY, data=body, content_type="application/json"), 403)
    assert reason in msg, msg
    assert not _forwarded(guarded)


def test_the_forwarded_body_is_rebuilt_from_the_checked_queries(guarded: World) -> None:
    bob = guarded.client(select=None, token="bob-token")
    # A duplicate key: the checked "expr" is the one forwarded, whatever parser Grafana uses.
    raw = (
        b'{"queries":[{"refId":"A","datasource":{"type":"prometheus","uid":"prom"},'
        b'"expr":"ray_node_mem_used","expr":' + orjson.dumps(PINNED) + b","
        b'"datasourceId":7,"rawSql":"select 1","adhocFilters":[{"key":"a","value":"b"}],'
        b'"intervalMs":15000,"maxDataPoints":100,"legendFormat":"{{instance}}","range":true}],'
        b'"from":"1","to":"2","debug":true,"extra":{"x":1}}'
    )
    answer = bob.post(DS_QUERY, data=raw, content_type="application/json")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    (sent,) = _forwarded(guarded)
    assert b'ray_node_mem_used"' not in sent and b"select 1" not in sent
    assert orjson.loads(sent) == {
        "queries": [
            {
                "refId": "A",
                "datasource": PROM,
                "expr": PINNED,
                "intervalMs": 15000,
                "maxDataPoints": 100,
                "legendFormat": "{{instance}}",
                "range": True,
            }
        ],
        "from": "1",
        "to": "2",
    }


# ------------------------------------------------------------ no session oracle
def test_an_unreadable_session_is_answered_as_an_absent_one(guarded: World, caplog: pytest.LogCaptureFixture) -> None:
    bob = guarded.client(select=None, token="bob-token")

    def answers(name: str) -> list[tuple[int, str]]:
        return [
            (a.status_code, a.get_data(as_text=True).replace(name, "<name>"))
            for a in (
                bob.get("/prometheus/api/v1/query", query_string={"query": f'up{{SessionName="{name}"}}'}),
                bob.get(f"{PAGE}?var-SessionName={name}&from=now-1h&to=now"),
                bob.post(
                    DS_QUERY, data=_body(_query("A", f'up{{SessionName="{name}"}}')), content_type="application/json"
                ),
                bob.get(LOOKUP, headers={"Referer": f"http://localhost{PAGE}?var-SessionName={name}"}),
            )
        ]

    with caplog.at_level(logging.INFO, logger="runtime.server.audit"):
        unreadable = answers(JOB_SESSION)
    absent = answers(UNKNOWN)
    assert unreadable == absent
    assert all(status == 404 and "team-a" not in text for status, text in unreadable), unreadable
    denied = [r for r in caplog.records if getattr(r, "audit", {}).get("decision") == "deny"]
    assert denied and all(r.audit["namespace"] == "team-a" for r in denied)  # type: ignore[attr-defined]
    assert not [r for r in guarded.upstream.requests if r.path != "/grafana/api/health"]


def test_a_session_name_shared_by_two_namespaces_needs_both(guarded: World) -> None:
    store = guarded.app.extensions["historyserver"].store
    store.put_bytes(KeyLayout("").marker_key(ClusterRef("team-a", "copy-of-demo"), SESSION_A), b"")
    query = {"query": f'ray_node_mem_used{{SessionName="{SESSION_A}"}}'}
    bob = guarded.client(select=None, token="bob-token")  # reads "default" only
    answer = bob.get("/prometheus/api/v1/query", query_string=query)
    assert answer.status_code == 404 and "team-a" not in answer.get_data(as_text=True)
    assert bob.get(f"{PAGE}?var-SessionName={SESSION_A}&from=now-1h&to=now").status_code == 404
    assert not [r for r in guarded.upstream.requests if r.path != "/grafana/api/health"]
    assert guarded.stub is not None
    guarded.stub.tokens["dana-token"] = ("dana@example.com", ("default-devs", "team-a-devs"))
    guarded.stub.access.add(("team-a-devs", "team-a"))
    dana = guarded.client(select=None, token="dana-token")  # reads both
    assert dana.get("/prometheus/api/v1/query", query_string=query).status_code == 200

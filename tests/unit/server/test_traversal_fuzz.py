"""Path traversal fuzzing of every query parameter, path parameter and cookie of the
log, endpoint and cluster routes (and the cookies of the other data routes).

Two properties, for any input: the answer is never a 5xx, and every storage key the
server touches lies inside the session the (validated) cookies name, or, for the
cluster routes, under the markers and the stored sessions they list. The store is
wrapped so that every primitive read (stat, ranged GET, listing) is recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from flask import Flask
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime.server.app import create_app
from runtime.server.selection import Selection
from runtime.storage.base import Listing, ObjectInfo
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore
from tests.support.app_world import FakeLive, live_cluster, server_config
from tests.support.sample_session import StoredSample, write_sample_session

LAYOUT = KeyLayout("")
NEIGHBOUR = ClusterRef("default", "raycluster-demo-2")  # a second cluster whose data must never leak

EVIL = [
    "..",
    "../",
    "../..",
    "../../etc/passwd",
    "/etc/passwd",
    "%2e%2e",
    "%2e%2e%2f",
    "..%2f",
    "..%5c",
    "a/../b",
    "..\\..\\x",
    "\x00",
    "a\x00b",
    "%00",
    "....//",
    "./",
    ".",
    "",
    "~",
    "*",
    "**",
    "**/..",
    "*/../*",
    "[",
    "?",
    "events/../../x",
    "../fetched_endpoints/restful__timezone",
    "../../cluster-metadata",
    "/",
    "//",
    "a//b",
    "raycluster-demo-2",
    "session_2026-11-22_01-45-25_333080_9264/..",
    "\u202e",
    "é",
    "🙂",
    "a" * 300,
    "98f883cfe30ce800c7aac63e75e2794d48efac54650dde6e279e2c78/../x",
    "restful__api__v0__cluster_metadata",
    "worker-*",
    "-1",
    "0",
    "999999999999999999999",
    "true",
    "live",
    "latest",
    "RayJob",
    "raycluster",
]
PARAMS = [
    "node_id",
    "node_ip",
    "glob",
    "filename",
    "task_id",
    "actor_id",
    "pid",
    "suffix",
    "lines",
    "attempt_number",
    "download_filename",
    "filter_ansi_code",
    "submission_id",
    "timeout",
    "media_type",
    "namespace",
    "name",
]
DATA_ROUTES = [
    "/api/v0/logs",
    "/api/v0/logs/file",
    "/api/v0/logs/stream",
    "/api/v0/cluster_metadata",
    "/timezone",
    "/api/v0/placement_groups",
    "/nodes",
    "/api/v0/tasks",
    "/logical/actors",
    "/events",
    "/api/jobs/",
]


def fuzz_text() -> st.SearchStrategy[str]:
    """Traversal tokens, their concatenations, and arbitrary text."""
    evil = st.sampled_from(EVIL)
    return st.one_of(
        evil,
        st.builds(lambda a, b: f"{a}/{b}", evil, evil),
        st.builds(lambda a, b, c: a + b + c, evil, st.sampled_from(["/", "\\", "%2f", ""]), evil),
        st.text(max_size=40),
    )


def header_safe(value: str) -> str:
    """Cookies travel in a header: latin-1, no separators or line breaks."""
    return "".join(ch for ch in value if 0x20 <= ord(ch) < 0x7F and ch not in ';,"\\')


class RecordingStore(LocalStore):
    """Records every key (or listing prefix) a backend primitive is asked for."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.touched: list[str] = []

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        self.touched.append(key)
        return super()._get_range(key, start, length)

    def _stat(self, key: str) -> ObjectInfo:
        self.touched.append(key)
        return super()._stat(key)

    def _list_page(self, prefix: str, delimiter: str | None, token: str | None) -> tuple[Listing, str | None]:
        self.touched.append(prefix)
        return super()._list_page(prefix, delimiter, token)


@dataclass
class World:
    app: Flask
    store: RecordingStore
    sample: StoredSample

    def stored_prefixes(self) -> list[str]:
        neighbour = LAYOUT.session_prefix(NEIGHBOUR, self.sample.session)
        return [LAYOUT.markers_prefix(), self.sample.session_prefix, neighbour]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("fuzz")
    config = server_config(root)
    store = RecordingStore(root / "store")
    store.check(create=True)
    sample = write_sample_session(store, LAYOUT)
    write_sample_session(store, LAYOUT, NEIGHBOUR, endpoints=False)
    app = create_app(config, store=store, live=FakeLive([live_cluster("default", "live-one")]))
    client = app.test_client()
    for cluster in (sample.cluster, NEIGHBOUR):  # build both indexes up front
        answer = client.get(f"/enter_cluster/default/raycluster/{cluster.name}/{sample.session}")
        assert answer.status_code == 200
    yield World(app, store, sample)


def _cookie_header(values: dict[str, str]) -> str:
    return "; ".join(f"{k}={v}" for k, v in values.items())


def _session_cookies(sample: StoredSample) -> dict[str, str]:
    return {"cluster_name": sample.cluster.name, "cluster_namespace": "default", "session_name": sample.session}


def _request(world: World, path: str, cookies: dict[str, str]) -> tuple[int, list[str]]:
    world.store.touched.clear()
    client = world.app.test_client(use_cookies=False)  # else the client drops our Cookie header
    answer = client.get(path, headers={"Cookie": _cookie_header(cookies)} if cookies else {})
    answer.get_data()  # drain streamed bodies: their reads count too
    status = answer.status_code
    answer.close()
    return status, list(world.store.touched)


def _assert_inside(touched: list[str], prefixes: list[str], context: str) -> None:
    for key in touched:
        assert any(key.startswith(p) for p in prefixes), f"{context}: read {key!r} outside {prefixes}"


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(
    route=st.sampled_from(["/api/v0/logs", "/api/v0/logs/file", "/api/v0/logs/stream"]),
    params=st.dictionaries(st.sampled_from(PARAMS), fuzz_text(), max_size=5),
    real_node=st.booleans(),
)
def test_log_query_parameters(world: World, route: str, params: dict[str, str], real_node: bool) -> None:
    if real_node:
        params.setdefault("node_id", world.sample.node_id)  # get past node resolution to the key building
    path = f"{route}?{urlencode(params)}"
    status, touched = _request(world, path, _session_cookies(world.sample))
    assert status < 500, path
    _assert_inside(touched, [world.sample.session_prefix], path)


@FUZZ
@given(segments=st.lists(fuzz_text(), min_size=1, max_size=4), raw=st.booleans(), query=fuzz_text())
def test_endpoint_and_log_path_parameters(world: World, segments: list[str], raw: bool, query: str) -> None:
    safe = "/." if raw else ""
    rest = "/".join(quote(s, safe=safe) for s in segments)
    for path in (f"/api/{rest}?{quote(query, safe='=&')}", f"/api/v0/logs/{rest}", f"/api/v0/logs/{rest}?glob=*"):
        status, touched = _request(world, path, _session_cookies(world.sample))
        assert status < 500, path
        _assert_inside(touched, [world.sample.session_prefix], path)


@FUZZ
@given(
    parts=st.tuples(fuzz_text(), fuzz_text(), fuzz_text(), fuzz_text()),
    use_real=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    with_session=st.booleans(),
    raw=st.booleans(),
)
# Found by this test: a path that normalises out of /enter_cluster into the UI's
# catch-all with a file name too long for the file system.
@example(parts=("..", "a" * 300, "x", "/etc/passwd"), use_real=(False,) * 3, with_session=True, raw=True)
def test_cluster_routes(
    world: World, parts: tuple[str, str, str, str], use_real: tuple[bool, bool, bool], with_session: bool, raw: bool
) -> None:
    namespace, kind, name, session = parts
    namespace = "default" if use_real[0] else namespace
    kind = "raycluster" if use_real[1] else kind
    name = world.sample.cluster.name if use_real[2] else name
    safe = "." if raw else ""
    segments = [namespace, kind, name] + ([session] if with_session else [])
    path = "/enter_cluster/" + "/".join(quote(s, safe=safe) or "x" for s in segments)
    status, touched = _request(world, path, {})
    assert status < 500, path
    _assert_inside(touched, world.stored_prefixes(), path)
    listing = f"/clusters?{urlencode({'namespace': namespace, 'name': name})}"
    status, touched = _request(world, listing, {})
    assert status == 200
    _assert_inside(touched, [LAYOUT.markers_prefix()], listing)


@FUZZ
@given(
    route=st.sampled_from(DATA_ROUTES),
    cookies=st.fixed_dictionaries(
        {},
        optional={
            name: st.one_of(fuzz_text(), st.sampled_from(good)).map(header_safe)
            for name, good in {
                "cluster_name": ["raycluster-demo", "raycluster-demo-2", "live-one"],
                "cluster_namespace": ["default"],
                "session_name": ["session_2026-11-22_01-45-25_333080_9264", "live"],
                "owner_kind": ["raycluster", "rayjob", "RayService"],
                "owner_name": ["raycluster-demo", "x"],
            }.items()
        },
    ),
)
def test_cookies_of_every_data_route(world: World, route: str, cookies: dict[str, str]) -> None:
    path = f"{route}?node_id={world.sample.node_id}&filename=raylet.out"
    status, touched = _request(world, path, cookies)
    # A live selection is proxied; the fake live cluster's upstream refuses connections (502).
    assert status < 500 or (status in (502, 503) and cookies.get("session_name") == "live"), (path, cookies)
    try:
        selection = Selection(
            namespace=cookies.get("cluster_namespace", ""),
            name=cookies.get("cluster_name", ""),
            session=cookies.get("session_name", ""),
            owner_kind=cookies.get("owner_kind") or "raycluster",
            owner_name=cookies.get("owner_name", ""),
        )
    except InvalidKeyError:
        assert touched == [], (path, cookies)  # rejected before any I/O
        return
    if selection.is_live:
        assert touched == []
        return
    _assert_inside(touched, [LAYOUT.session_prefix(selection.cluster, selection.session)], f"{path} {cookies}")

"""Where the server used to parse keys its own way, it now follows the layout's rule.

Each test pins an edge case on which two of the old parsers disagreed."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.server.index import schema
from runtime.server.index.cache import _is_build_input
from runtime.server.index.reader import SessionIndex
from runtime.server.index.sources import classify
from runtime.server.logs.catalog import NODES_WITH_LOGS_PARAMS, NODES_WITH_LOGS_SQL, IndexCatalog
from runtime.server.queries.cluster_status import debug_state_nodes
from runtime.storage.base import ObjectInfo
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.session_keys import LogFile, is_node_dir, parse_session_key

NODE = "a1b2"
EVENT = f"{NODE}-2026-11-22-01-1795311940.jsonl"
CLUSTER = ClusterRef("ns", "c")


def _index(tmp_path: Path, rel_keys: list[str]) -> SessionIndex:
    path = tmp_path / "i.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(schema.DDL)
    conn.executemany("INSERT INTO objects (rel_key, size, version) VALUES (?, 1, '')", [(k,) for k in rel_keys])
    conn.commit()
    conn.close()
    return SessionIndex(path)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[SessionIndex]:
    rel_keys = [
        f"{NODE}/logs/debug_state.txt",
        "c3/logs/debug-state.txt",  # LIKE's '_' matched any character
        "d4/LOGS/DEBUG_STATE.TXT",  # LIKE is case-insensitive
        "e5/logs/sub/debug_state.txt",
    ]
    with _index(tmp_path, rel_keys) as opened:
        yield opened


def test_debug_state_nodes_are_those_with_the_exact_log_key(index: SessionIndex) -> None:
    assert debug_state_nodes(index) == [NODE]


def test_build_size_counts_only_the_objects_the_build_reads() -> None:
    prefix = KeyLayout("").session_prefix(CLUSTER, "s")
    # The old rule ("/node_events/" anywhere in the key) counted these too.
    assert not _is_build_input(f"{prefix}{NODE}/logs/node_events/{EVENT}", prefix)
    assert not _is_build_input(f"{prefix}{NODE}/node_events/notes.txt", prefix)
    assert not _is_build_input(f"{prefix}{NODE}/job_events/01000000/sub/{EVENT}", prefix)
    assert not _is_build_input(f"{prefix}{NODE}/logs/raylet.out", prefix)
    assert _is_build_input(f"{prefix}{NODE}/node_events/{EVENT}", prefix)
    assert _is_build_input(f"{prefix}{NODE}/job_events/01000000/{EVENT}", prefix)
    assert _is_build_input(f"{prefix}{NODE}/logs/events/event_GCS.log", prefix)  # log events: replayed too


@pytest.mark.parametrize(("root", "session"), [("", "job_events"), ("data/job_events", "s")])
def test_job_events_are_replayed_first_whatever_the_root_or_session_is_called(root: str, session: str) -> None:
    # With "/job_events/" searched in the whole key, a root or session of that name
    # made every object look like a job-event object: node events came first.
    prefix = KeyLayout(root).session_prefix(CLUSTER, session)
    node_key, job_key = f"{prefix}{NODE}/node_events/{EVENT}", f"{prefix}{NODE}/job_events/01000000/{EVENT}"
    sources = classify([ObjectInfo(node_key, 1), ObjectInfo(job_key, 1)], prefix)
    assert [info.key for info in sources.events] == [job_key, node_key]


_segment = st.sampled_from(["logs", "node_events", "fetched_endpoints", "ab12", "AB", "x", "", "events", "l"])


@given(st.lists(st.lists(_segment, min_size=1, max_size=4).map("/".join), max_size=12, unique=True))
def test_sql_log_nodes_agree_with_the_parser(rel_keys: list[str]) -> None:
    rel_keys = [k for k in rel_keys if not k.endswith("/")]  # object keys never end in '/'
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE objects (rel_key TEXT PRIMARY KEY, size INTEGER, version TEXT)")
    conn.executemany("INSERT INTO objects VALUES (?, 1, '')", [(k,) for k in rel_keys])
    by_sql = {str(r[0]) for r in conn.execute(NODES_WITH_LOGS_SQL, NODES_WITH_LOGS_PARAMS) if r[0]}
    by_sql = {node for node in by_sql if is_node_dir(node)}
    parsed = [parse_session_key(k) for k in rel_keys]
    assert by_sql == {item.node for item in parsed if isinstance(item, LogFile) and item.on_node_dir}


def test_catalog_lists_hex_log_nodes(tmp_path: Path) -> None:
    rel_keys = [f"{NODE}/logs/raylet.out", "_unknown/logs/x", f"{NODE}/node_events/{EVENT}", "ff/logs/a/b.txt"]
    with _index(tmp_path, rel_keys) as opened:
        catalog = IndexCatalog(opened)
        assert catalog.nodes_with_logs() == [NODE, "ff"]
        assert catalog.log_files("ff") == ["a/b.txt"] and catalog.has_log(NODE, "raylet.out")

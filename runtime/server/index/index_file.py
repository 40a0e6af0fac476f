"""The index file's own records, outside the replay: its ``objects`` table and its ``meta``
(with the build's statistics).

Split from :mod:`runtime.server.index.build`: a refresh rewrites only these when logs
changed but events did not.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from runtime.server.index import schema
from runtime.server.index.fingerprint import fingerprints
from runtime.server.index.reader import UNTRUSTED_SCHEMA
from runtime.storage.base import ObjectInfo
from runtime.storage.layout import ClusterRef
from runtime.storage.session_keys import relative_key

INSERT_OBJECT = "INSERT OR REPLACE INTO objects (rel_key, size, version) VALUES (?, ?, ?)"


@dataclass
class BuildStats:
    files: int = 0  # event objects listed
    unreadable_files: int = 0
    event_bytes: int = 0  # bytes of the event objects read (as stored)
    events: int = 0  # unique events (duplicates excluded)
    duplicate_events: int = 0
    bad_lines: int = 0
    bad_events: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    tasks: int = 0
    actors: int = 0
    jobs: int = 0
    nodes: int = 0
    log_events: int = 0
    seconds: float = 0.0
    log_files: int = 0
    log_bad_lines: int = 0
    profile_events: int = 0
    gzip_errors: int = 0
    processes: int = 0  # task-shard worker processes (0: in-process)


def object_rows(listing: Sequence[ObjectInfo], prefix: str) -> Iterator[tuple[str, int, str]]:
    for info in listing:
        yield relative_key(info.key, prefix), info.size, info.version or ""


def refresh_objects(path: Path, listing: Sequence[ObjectInfo], session_prefix: str) -> None:
    """Replace only the ``objects`` table and the objects fingerprint (logs changed)."""
    _, objects_fp = fingerprints(listing, session_prefix)
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    try:
        conn.execute(UNTRUSTED_SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM objects")
        conn.executemany(INSERT_OBJECT, object_rows(listing, session_prefix))
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (schema.META_OBJECTS_FINGERPRINT, objects_fp)
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def write_meta(path: Path, cluster: ClusterRef, session: str, prints: tuple[str, str], stats: BuildStats) -> None:
    """Meta last, then WAL: a file with meta is a complete index."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(UNTRUSTED_SCHEMA)
        # No fsync of the freshly written file: the caller renames it into place and a
        # damaged index is rebuilt from storage, which stays the source of truth.
        conn.execute("PRAGMA synchronous = OFF")
        cluster_json = {
            "namespace": cluster.namespace,
            "name": cluster.name,
            "owner_kind": cluster.owner_kind,
            "owner_name": cluster.owner_name,
        }
        meta = {
            schema.META_SCHEMA_VERSION: str(schema.SCHEMA_VERSION),
            schema.META_EVENTS_FINGERPRINT: prints[0],
            schema.META_OBJECTS_FINGERPRINT: prints[1],
            schema.META_BUILT_AT: str(int(time.time())),
            schema.META_BUILD_SECONDS: str(stats.seconds),
            schema.META_SESSION: session,
            schema.META_CLUSTER: orjson.dumps(cluster_json).decode(),
            schema.META_STATS: orjson.dumps(asdict(stats)).decode(),
        }
        conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(meta.items()))
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()

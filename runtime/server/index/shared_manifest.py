"""The shared index's manifest and the checks a reader makes before serving a download
(no I/O but reading a local file's schema and ``meta``): split from :mod:`.shared`,
which moves the bytes.

The data object is the SQLite index compressed with zstd (one frame, with its content
checksum); the manifest, written after it, says what the stored object must hash to
and what it must decompress to.

Anyone who may write under ``history-index/`` may have planted both, so neither the
manifest's sizes nor the file's SQL are trusted: the size an object may decompress to
is bounded by the session's own inputs (:func:`index_size_bound`), and a downloaded
file is opened read-only, with ``trusted_schema`` off, ``cell_size_check`` on and a
deadline, and accepted only when its ``sqlite_master`` is exactly what this server's
schema creates (:func:`schema_problem`: no view, trigger or anything else of the
writer's choosing ever runs in the server).
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from runtime.server.index.fingerprint import is_build_input
from runtime.server.index.reader import UNTRUSTED_SCHEMA
from runtime.server.index.schema import META_EVENTS_FINGERPRINT, META_SCHEMA_VERSION, SCHEMA_VERSION
from runtime.storage.base import ObjectInfo
from runtime.storage.session_keys import parse_session_key, relative_key

#: The layout of the shared objects themselves (manifest fields, zstd data); bumped
#: when they change, independently of the index schema.
SHARE_FORMAT = 1
COMPRESSION = "zstd"
#: A manifest is a few hundred bytes; anything much larger is not ours.
MAX_MANIFEST_BYTES = 64 * 1024
_HEX = frozenset("0123456789abcdef")
#: What a shared index may decompress to, at most: this much, plus
#: :data:`INDEX_BYTES_PER_INPUT_BYTE` per stored byte of the session's build inputs and
#: :data:`INDEX_BYTES_PER_OBJECT` per object of its listing (the ``objects`` table).
#: An index is 24-40 % of its (uncompressed) event bytes (docs/performance.md), a few
#: times the stored bytes of gzipped ones: 32 leaves ample room, and an index beyond
#: the bound only means a local build. The base covers an empty index's pages.
INDEX_BASE_BYTES = 16 * 1024 * 1024
INDEX_BYTES_PER_INPUT_BYTE = 32
INDEX_BYTES_PER_OBJECT = 4096
#: zstd never grows data by more than this (ZSTD_compressBound: 1/256 plus a few
#: hundred bytes): a bigger object is not a compressed index of ``index_size``.
_ZSTD_SLACK_BYTES = 64 * 1024
#: How long the checks of a downloaded file may run SQLite (a progress handler stops it).
VERIFY_SECONDS = 10.0


def index_version() -> str:
    """The version component of the keys: share format and index schema."""
    return f"v{SHARE_FORMAT}-s{SCHEMA_VERSION}"


class ManifestError(ValueError):
    """A manifest that is not one this server wrote (or can use)."""


@dataclass(frozen=True)
class Manifest:
    """What a reader checks before it serves a downloaded index.

    ``sha256`` and ``size`` describe the stored (compressed) object, checked while it
    streams in; ``index_size`` is the SQLite file it decompresses to.
    """

    share_format: int
    schema_version: int
    events_fingerprint: str
    compression: str
    sha256: str
    size: int
    index_size: int
    builder: str

    def to_bytes(self) -> bytes:
        return orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS)

    @classmethod
    def parse(cls, data: bytes) -> Manifest:
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"manifest is {len(data)} bytes, more than {MAX_MANIFEST_BYTES}")
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ManifestError(f"manifest is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ManifestError("manifest is not a JSON object")
        types: dict[str, type] = {"share_format": int, "schema_version": int, "events_fingerprint": str}
        types |= {"compression": str, "sha256": str, "size": int, "index_size": int, "builder": str}
        for name, kind in types.items():
            value = raw.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ManifestError(f"manifest field {name!r} is missing or not {kind.__name__}")
        return cls(**{name: raw[name] for name in types})


def index_size_bound(listing: Sequence[ObjectInfo], session_prefix: str, cache_max_bytes: int = 0) -> int:
    """The most a shared index of the session listed as ``listing`` may decompress to:
    set by its stored inputs (never by the manifest, whose writer may be hostile) and
    by ``--cache-max-size`` (``cache_max_bytes``; 0: unbounded)."""
    input_bytes = sum(
        info.size for info in listing if is_build_input(parse_session_key(relative_key(info.key, session_prefix)))
    )
    bound = INDEX_BASE_BYTES + INDEX_BYTES_PER_INPUT_BYTE * input_bytes + INDEX_BYTES_PER_OBJECT * len(listing)
    return min(bound, cache_max_bytes) if cache_max_bytes > 0 else bound


def manifest_problem(manifest: Manifest, events_fingerprint: str, max_index_size: int) -> str | None:
    """Why ``manifest`` does not describe an index this server may use for a session
    whose build inputs have ``events_fingerprint`` and whose index may take at most
    ``max_index_size`` bytes (:func:`index_size_bound`) (None: it does)."""
    if manifest.share_format != SHARE_FORMAT:
        return f"share format {manifest.share_format}, this server reads {SHARE_FORMAT}"
    if manifest.schema_version != SCHEMA_VERSION:
        return f"index schema {manifest.schema_version}, this server reads {SCHEMA_VERSION}"
    if manifest.events_fingerprint != events_fingerprint:
        return "built from other event objects (fingerprint differs)"
    if manifest.compression != COMPRESSION:
        return f"compression {manifest.compression!r}, this server reads {COMPRESSION!r}"
    if len(manifest.sha256) != 64 or not set(manifest.sha256) <= _HEX:
        return "sha256 is not 64 lower-case hex digits"
    if manifest.size <= 0 or manifest.index_size <= 0:
        return f"sizes {manifest.size} / {manifest.index_size}"
    if manifest.index_size > max_index_size:
        return f"index_size {manifest.index_size} is more than this session's index may take ({max_index_size} bytes)"
    if manifest.size > manifest.index_size + manifest.index_size // 128 + _ZSTD_SLACK_BYTES:
        return f"a {manifest.size}-byte object cannot be a zstd index of {manifest.index_size} bytes"
    return None


def download_problem(manifest: Manifest, sha256: str, size: int, index_size: int) -> str | None:
    """Why the downloaded bytes are not the ones the manifest describes (None: they are)."""
    if size != manifest.size:
        return f"{size} bytes downloaded, the manifest says {manifest.size}"
    if sha256 != manifest.sha256:
        return f"sha256 {sha256} differs from the manifest's {manifest.sha256}"
    if index_size != manifest.index_size:
        return f"decompressed to {index_size} bytes, the manifest says {manifest.index_size}"
    return None


def index_file_problem(path: Path, events_fingerprint: str) -> str | None:
    """Why the SQLite file at ``path`` is not an index of this schema built from these
    inputs: its schema must be exactly this server's (:func:`schema_problem`), then
    the manifest's word is checked against the file's own ``meta``."""
    try:
        with _verifying(path) as conn:
            problem = schema_problem(conn)
            if problem is not None:
                return problem
            meta = _meta(conn)
    except _DeadlineError:
        return f"not verified within {VERIFY_SECONDS:g} s"
    except sqlite3.Error as exc:
        return f"not a readable index: {exc}"
    if meta.get(META_SCHEMA_VERSION) != str(SCHEMA_VERSION):
        return f"its meta says schema {meta.get(META_SCHEMA_VERSION)!r}"
    if meta.get(META_EVENTS_FINGERPRINT) != events_fingerprint:
        return "its meta names other event objects"
    return None


def schema_problem(conn: sqlite3.Connection) -> str | None:
    """Why the schema of the database open as ``conn`` is not exactly the one this
    server creates (None: it is). Reads ``sqlite_master`` only: nothing it names runs."""
    found = frozenset(conn.execute("SELECT type, name, tbl_name, sql FROM main.sqlite_master"))
    expected = expected_schema()
    if found == expected:
        return None
    extra = sorted(f"{kind} {name!r}" for kind, name, _, _ in found - expected)
    missing = sorted(f"{kind} {name!r}" for kind, name, _, _ in expected - found)
    parts = [
        f"{what}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}"
        for what, names in (("not ours", extra), ("missing or altered", missing))
        if names
    ]
    return f"its schema is not this server's ({'; '.join(parts)})"


@functools.cache
def expected_schema() -> frozenset[tuple[str, str, str, str | None]]:
    """``sqlite_master`` of an index this server builds: the schema's tables and indexes
    and what ANALYZE adds, created in an empty in-memory database exactly as a build
    creates them (:mod:`.build`), so it cannot drift from the schema."""
    from runtime.server.index.shard_db import split_ddl

    conn = sqlite3.connect(":memory:")
    try:
        tables, indexes = split_ddl()
        for statement in (*tables, *indexes):
            conn.execute(statement)
        conn.execute("ANALYZE")
        return frozenset(conn.execute("SELECT type, name, tbl_name, sql FROM main.sqlite_master"))
    finally:
        conn.close()


def read_meta(path: Path) -> dict[str, str]:
    """The index's ``meta`` table; sqlite3.Error when it is no index. Read like a
    download is verified (no trusted schema, a deadline): used on files just downloaded."""
    try:
        with _verifying(path) as conn:
            return _meta(conn)
    except _DeadlineError:
        raise sqlite3.OperationalError(f"meta not read within {VERIFY_SECONDS:g} s") from None


def _meta(conn: sqlite3.Connection) -> dict[str, str]:
    return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}


class _DeadlineError(Exception):
    """SQLite ran past :data:`VERIFY_SECONDS` on a file being verified."""


@contextlib.contextmanager
def _verifying(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to an untrusted file: ``trusted_schema`` off,
    ``cell_size_check`` on, and SQLite interrupted once :data:`VERIFY_SECONDS` have
    passed (then :class:`_DeadlineError` leaves the ``with``)."""
    deadline = time.monotonic() + VERIFY_SECONDS

    def expired() -> bool:
        return time.monotonic() > deadline

    # immutable: the file is this process's own (no locks, no -wal/-shm left beside it).
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        conn.set_progress_handler(lambda: int(expired()), 1000)
        conn.execute(UNTRUSTED_SCHEMA)
        conn.execute("PRAGMA cell_size_check = ON")
        yield conn
    except sqlite3.OperationalError as exc:
        if expired():
            raise _DeadlineError from exc
        raise
    finally:
        conn.close()

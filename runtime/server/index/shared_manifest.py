"""The shared index's manifest and the checks a reader makes before serving a download
(no I/O but reading a local file's ``meta``): split from :mod:`.shared`, which moves
the bytes.

The data object is the SQLite index compressed with zstd (one frame, with its content
checksum); the manifest, written after it, says what the stored object must hash to
and what it must decompress to.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from runtime.server.index.schema import META_EVENTS_FINGERPRINT, META_SCHEMA_VERSION, SCHEMA_VERSION

#: The layout of the shared objects themselves (manifest fields, zstd data); bumped
#: when they change, independently of the index schema.
SHARE_FORMAT = 1
COMPRESSION = "zstd"
#: A manifest is a few hundred bytes; anything much larger is not ours.
MAX_MANIFEST_BYTES = 64 * 1024
_HEX = frozenset("0123456789abcdef")


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


def manifest_problem(manifest: Manifest, events_fingerprint: str) -> str | None:
    """Why ``manifest`` does not describe an index this server may use for a session
    whose build inputs have ``events_fingerprint`` (None: it does)."""
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
    inputs (the manifest's word is checked against the file's own ``meta``)."""
    try:
        meta = read_meta(path)
    except sqlite3.Error as exc:
        return f"not a readable index: {exc}"
    if meta.get(META_SCHEMA_VERSION) != str(SCHEMA_VERSION):
        return f"its meta says schema {meta.get(META_SCHEMA_VERSION)!r}"
    if meta.get(META_EVENTS_FINGERPRINT) != events_fingerprint:
        return "its meta names other event objects"
    return None


def read_meta(path: Path) -> dict[str, str]:
    """The index's ``meta`` table; sqlite3.Error when it is no index."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    finally:
        conn.close()

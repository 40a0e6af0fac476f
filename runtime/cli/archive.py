"""The export archive: a tar (optionally gzip) of one session plus a manifest.

Layout::

    objects/{key relative to the storage root}   every object of the session, byte for byte
    manifest.json                                 written last (its sha256s are computed while streaming)

Keys are stored relative to ``--storage-root-dir`` so an archive can be imported
under another root. The manifest names the cluster and session, and lists every
object's key, size and sha256; an importer accepts only keys under that session's
prefix or its marker, so an archive cannot write anywhere else in a bucket.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from runtime.cli.errors import CliError
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError
from runtime.storage.keys import validate_key
from runtime.storage.layout import ClusterRef, KeyLayout

FORMAT = "ray-history-session-export"
VERSION = 1
MANIFEST_NAME = "manifest.json"
OBJECTS_DIR = "objects/"
_SHA256_HEX = frozenset("0123456789abcdef")


class ArchiveError(CliError):
    """An archive that is not ours, is damaged or does not match its manifest."""


@dataclass(frozen=True)
class ManifestEntry:
    key: str  # relative to the storage root
    size: int
    sha256: str


@dataclass
class Manifest:
    cluster: ClusterRef
    session: str
    source: str = ""
    created_at: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    objects: list[ManifestEntry] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.objects)

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "version": VERSION,
            "created_at": self.created_at,
            "source": self.source,
            "cluster": {
                "namespace": self.cluster.namespace,
                "name": self.cluster.name,
                "owner_kind": self.cluster.owner_kind,
                "owner_name": self.cluster.owner_name,
            },
            "session": self.session,
            "object_count": len(self.objects),
            "total_bytes": self.total_bytes,
            "objects": [{"key": e.key, "size": e.size, "sha256": e.sha256} for e in self.objects],
        }
        return orjson.dumps(body, option=orjson.OPT_INDENT_2)


def relative_key(layout: KeyLayout, key: str) -> str:
    """A stored key without the storage root."""
    if not layout.root:
        return key
    prefix = layout.root + "/"
    if not key.startswith(prefix):
        raise ValueError(f"{key!r} is not under the storage root {layout.root!r}")
    return key[len(prefix) :]


def absolute_key(layout: KeyLayout, relative: str) -> str:
    return f"{layout.root}/{relative}" if layout.root else relative


def member_name(relative: str) -> str:
    return OBJECTS_DIR + relative


def allowed_keys(cluster: ClusterRef, session: str) -> tuple[str, str]:
    """The (root-relative) session prefix and marker key an archive of this session may hold."""
    bare = KeyLayout("")
    return bare.session_prefix(cluster, session), bare.marker_key(cluster, session)


def stored_marker_keys(store: ObjectStore, layout: KeyLayout, cluster: ClusterRef, session: str) -> list[str]:
    """The session's markers as the target stores them, the layout's own spelling first.

    A marker's kind segment may be capitalised (``cluster-metadata/RayCluster/...``): the
    server lowercases it when listing and gc deletes the keys as listed, so a marker key
    is looked up, never only rebuilt. One delimited listing (the few kind folders), then
    one existence check per spelling of this session's kind.
    """
    canonical = layout.marker_key(cluster, session)
    markers = layout.markers_prefix()
    rest = canonical[len(markers) + len(cluster.owner_kind) :]  # "/{namespace}_[{owner}_]{cluster}/{session}"
    keys = []
    for prefix in store.list(markers).prefixes:  # "{root}/cluster-metadata/{kind}/"
        kind = prefix[len(markers) : -1]
        if kind.lower() == cluster.owner_kind and store.exists(key := f"{markers}{kind}{rest}"):
            keys.append(key)
    return sorted(keys, key=lambda key: key != canonical)


def parse_manifest(data: bytes) -> Manifest:
    """Decode and check a manifest; ArchiveError naming the offending field."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ArchiveError(f"{MANIFEST_NAME} is not valid JSON: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ArchiveError(f"{MANIFEST_NAME}: not a ray-history export (format must be {FORMAT!r})")
    if body.get("version") != VERSION:
        raise ArchiveError(f"{MANIFEST_NAME}: version {body.get('version')!r} is not supported (expected {VERSION})")
    cluster_body = body.get("cluster")
    if not isinstance(cluster_body, dict):
        raise ArchiveError(f"{MANIFEST_NAME}: 'cluster' must be an object")
    try:
        cluster = ClusterRef(
            namespace=_str(cluster_body, "namespace"),
            name=_str(cluster_body, "name"),
            owner_kind=_str(cluster_body, "owner_kind"),
            owner_name=str(cluster_body.get("owner_name") or ""),
        )
        session = _str(body, "session")
        prefix, marker = allowed_keys(cluster, session)
    except InvalidKeyError as exc:
        raise ArchiveError(f"{MANIFEST_NAME}: {exc}") from None
    raw_objects = body.get("objects")
    if not isinstance(raw_objects, list):
        raise ArchiveError(f"{MANIFEST_NAME}: 'objects' must be a list")
    entries: list[ManifestEntry] = []
    seen: set[str] = set()
    for n, raw in enumerate(raw_objects):
        entries.append(_entry(raw, n, prefix, marker, seen))
    return Manifest(
        cluster=cluster,
        session=session,
        source=str(body.get("source") or ""),
        created_at=str(body.get("created_at") or ""),
        objects=entries,
    )


def _str(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise ArchiveError(f"{MANIFEST_NAME}: {name!r} must be a non-empty string")
    return value


def _entry(raw: Any, n: int, prefix: str, marker: str, seen: set[str]) -> ManifestEntry:
    where = f"{MANIFEST_NAME}: objects[{n}]"
    if not isinstance(raw, dict):
        raise ArchiveError(f"{where} must be an object")
    key, size, digest = raw.get("key"), raw.get("size"), raw.get("sha256")
    if not isinstance(key, str):
        raise ArchiveError(f"{where}.key must be a string")
    try:
        validate_key(key)
    except InvalidKeyError as exc:
        raise ArchiveError(f"{where}.key: {exc}") from None
    if key != marker and not key.startswith(prefix):
        raise ArchiveError(f"{where}.key {key!r} is outside the session ({prefix}...) and is not its marker")
    if key in seen:
        raise ArchiveError(f"{where}.key {key!r} is listed twice")
    seen.add(key)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ArchiveError(f"{where}.size must be a non-negative integer")
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _SHA256_HEX:
        raise ArchiveError(f"{where}.sha256 must be 64 lower-case hex digits")
    return ManifestEntry(key=key, size=size, sha256=digest)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

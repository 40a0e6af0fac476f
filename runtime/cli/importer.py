"""``ray-history import``: an export archive into a (possibly different) storage backend.

Three passes, so nothing is written unless everything checks out:

1. **verify** - read the whole archive once, hashing every member, and compare it
   with the manifest (every object present, no stray member, sizes and sha256s);
2. **compare** - list what the target already holds for the session: identical
   objects are skipped (an import is idempotent), different ones are conflicts
   that stop the import unless ``--overwrite``;
3. **upload** - stream the remaining members, the session marker last, so a
   half-imported session is never listed by a history server.
"""

from __future__ import annotations

import contextlib
import hashlib
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from runtime.cli.archive import (
    MANIFEST_NAME,
    OBJECTS_DIR,
    ArchiveError,
    Manifest,
    ManifestEntry,
    absolute_key,
    allowed_keys,
    parse_manifest,
)
from runtime.cli.errors import CliError
from runtime.cli.progress import byte_progress
from runtime.storage.base import ObjectStore
from runtime.storage.errors import ObjectNotFoundError
from runtime.storage.layout import KeyLayout

HASH_CHUNK = 1024 * 1024
#: Conflicts named in the error message (the rest are counted).
SHOWN_CONFLICTS = 10


@dataclass
class ImportResult:
    manifest: Manifest
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    overwritten: list[str] = field(default_factory=list)


def open_archive(path: Path) -> tarfile.TarFile:
    if not path.is_file():
        raise CliError(f"archive {path} does not exist (or is not a file)")
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise ArchiveError(f"{path} is not a tar or tar.gz archive: {exc}") from None


def _chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(HASH_CHUNK):
        yield chunk


def verify_archive(tar: tarfile.TarFile, path: Path, *, quiet: bool) -> tuple[Manifest, dict[str, tarfile.TarInfo]]:
    """Pass 1: the manifest and its members, every byte hashed; ArchiveError on any mismatch."""
    manifest_data: bytes | None = None
    found: dict[str, tuple[tarfile.TarInfo, int, str]] = {}
    size = path.stat().st_size
    try:
        with byte_progress(f"verify {path.name}", size, quiet=quiet) as advance:
            for member in tar:
                if member.name == MANIFEST_NAME and member.isfile():
                    manifest_data = _read_member(tar, member)
                elif member.name.startswith(OBJECTS_DIR) and member.isfile():
                    digest, length = hashlib.sha256(), 0
                    for chunk in _chunks(_member_stream(tar, member)):
                        digest.update(chunk)
                        length += len(chunk)
                        advance(len(chunk))
                    found[member.name[len(OBJECTS_DIR) :]] = (member, length, digest.hexdigest())
                else:
                    raise ArchiveError(f"{path}: unexpected member {member.name!r} (not an export of ray-history)")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{path} is damaged or truncated: {exc}") from None
    if manifest_data is None:
        raise ArchiveError(f"{path} has no {MANIFEST_NAME}: not a complete ray-history export")
    manifest = parse_manifest(manifest_data)
    check_members(manifest, {key: (length, digest) for key, (_m, length, digest) in found.items()}, path)
    return manifest, {key: member for key, (member, _l, _d) in found.items()}


def check_members(manifest: Manifest, found: dict[str, tuple[int, str]], path: Path) -> None:
    """Every manifest entry present with its size and sha256, nothing else."""
    listed = {entry.key: entry for entry in manifest.objects}
    missing = sorted(set(listed) - set(found))
    if missing:
        raise ArchiveError(f"{path}: {len(missing)} object(s) of the manifest are missing, e.g. {missing[0]}")
    stray = sorted(set(found) - set(listed))
    if stray:
        raise ArchiveError(f"{path}: {len(stray)} object(s) are not in the manifest, e.g. {stray[0]}")
    for key, (length, digest) in sorted(found.items()):
        entry = listed[key]
        if length != entry.size:
            raise ArchiveError(f"{path}: {key} has {length} bytes, the manifest says {entry.size}")
        if digest != entry.sha256:
            raise ArchiveError(f"{path}: {key} does not match its sha256 in the manifest (damaged archive)")


def _member_stream(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    stream = tar.extractfile(member)
    if stream is None:  # only regular files are read, and those always have one
        raise ArchiveError(f"{member.name} is not a regular file")
    return stream


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    return _member_stream(tar, member).read()


def stored_sha256(store: ObjectStore, key: str) -> str:
    digest = hashlib.sha256()
    for chunk in store.iter_chunks(key):
        digest.update(chunk)
    return digest.hexdigest()


def plan_import(
    store: ObjectStore, layout: KeyLayout, manifest: Manifest, *, quiet: bool
) -> tuple[list[ManifestEntry], list[ManifestEntry], list[ManifestEntry]]:
    """Pass 2: (new, identical, different) entries compared with what the target holds."""
    prefix, marker = allowed_keys(manifest.cluster, manifest.session)
    existing = {info.key: info.size for info in store.walk(absolute_key(layout, prefix))}
    with contextlib.suppress(ObjectNotFoundError):
        existing[absolute_key(layout, marker)] = store.stat(absolute_key(layout, marker)).size
    new: list[ManifestEntry] = []
    same: list[ManifestEntry] = []
    different: list[ManifestEntry] = []
    to_hash = [e for e in manifest.objects if existing.get(absolute_key(layout, e.key)) == e.size]
    with byte_progress("compare with target", sum(e.size for e in to_hash), quiet=quiet or not to_hash) as advance:
        for entry in manifest.objects:
            key = absolute_key(layout, entry.key)
            if key not in existing:
                new.append(entry)
            elif existing[key] != entry.size:
                different.append(entry)
            else:
                (same if stored_sha256(store, key) == entry.sha256 else different).append(entry)
                advance(entry.size)
    return new, same, different


def import_archive(path: Path, store: ObjectStore, layout: KeyLayout, *, overwrite: bool, quiet: bool) -> ImportResult:
    with open_archive(path) as tar:
        manifest, members = verify_archive(tar, path, quiet=quiet)
        new, same, different = plan_import(store, layout, manifest, quiet=quiet)
        if different and not overwrite:
            shown = ", ".join(absolute_key(layout, e.key) for e in different[:SHOWN_CONFLICTS])
            more = f" and {len(different) - SHOWN_CONFLICTS} more" if len(different) > SHOWN_CONFLICTS else ""
            raise CliError(
                f"{len(different)} object(s) already exist in {store.describe()} with different content: "
                f"{shown}{more}; nothing was written (pass --overwrite to replace them)"
            )
        result = ImportResult(manifest=manifest, unchanged=[absolute_key(layout, e.key) for e in same])
        _, marker = allowed_keys(manifest.cluster, manifest.session)
        # The marker lists the session: write it only after everything else is stored.
        todo = sorted(new + different, key=lambda e: (e.key == marker, e.key))
        replaced = {e.key for e in different}
        with byte_progress(f"import into {store.describe()}", sum(e.size for e in todo), quiet=quiet) as advance:
            for entry in todo:
                key = absolute_key(layout, entry.key)
                stream = _member_stream(tar, members[entry.key])
                store.put_stream(key, stream, size=entry.size)  # type: ignore[arg-type]
                advance(entry.size)
                (result.overwritten if entry.key in replaced else result.written).append(key)
    return result

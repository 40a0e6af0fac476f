"""``ray-history import``: an export archive into a (possibly different) storage backend.

Three passes, so nothing is written unless everything checks out:

1. **verify** - read the whole archive once, hashing every member, and compare it
   with the manifest (every object present, no stray member, sizes and sha256s);
2. **compare** - list what the target already holds for the session and check every
   key as the target will (the storage layer's rules with ``--storage-root-dir``
   prepended; no key lying under another object). Identical objects are skipped (an
   import is idempotent); different ones are conflicts that stop the import unless
   ``--overwrite``, and so are new ones when the target already stores (lists) the
   session: an archive never changes a listed session without ``--overwrite``;
3. **upload** - stream the remaining members, the session marker last, so a
   half-imported session is never listed by a history server. Replacing a listed
   session (``--overwrite``) removes its marker first, so a failed run leaves it
   unlisted rather than half replaced; the error says so (run it again).
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterable, Iterator
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
    stored_marker_keys,
)
from runtime.cli.errors import CliError
from runtime.cli.progress import byte_progress
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError
from runtime.storage.keys import validate_key
from runtime.storage.layout import KeyLayout

HASH_CHUNK = 1024 * 1024
#: The largest manifest.json read (it is read whole, then decoded). An entry takes ~350
#: bytes (key, size, sha256, indented), so this holds ~190,000 objects, far beyond a real
#: session; a 1 MB .tar.gz can inflate a manifest to gigabytes, refused before reading.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
#: Keys shown in full in messages up to this length (a key can be 1 KiB); longer ones
#: keep their start and their end (the file name).
SHOWN_KEY_CHARS = 400
#: Conflicts named in the error message (the rest are counted).
SHOWN_CONFLICTS = 10


@dataclass
class ImportResult:
    manifest: Manifest
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    overwritten: list[str] = field(default_factory=list)


@dataclass
class ImportPlan:
    """What the target holds, compared with the archive (pass 2)."""

    new: list[ManifestEntry]
    same: list[ManifestEntry]
    different: list[ManifestEntry]
    #: the session's markers in the target (stored and listed when not empty)
    markers: list[str]


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


def _shown(key: str) -> str:
    if len(key) <= SHOWN_KEY_CHARS:
        return key
    half = (SHOWN_KEY_CHARS - 3) // 2
    return key[:half] + "..." + key[-half:]


def verify_archive(tar: tarfile.TarFile, path: Path, *, quiet: bool) -> tuple[Manifest, dict[str, tarfile.TarInfo]]:
    """Pass 1: the manifest and its members, every byte hashed; ArchiveError on any mismatch."""
    manifest_data: bytes | None = None
    found: dict[str, tuple[tarfile.TarInfo, int, str]] = {}
    size = path.stat().st_size
    try:
        with byte_progress(f"verify {path.name}", size, quiet=quiet) as advance:
            for member in tar:
                if member.name == MANIFEST_NAME and member.isfile():
                    manifest_data = _read_manifest(tar, member, path)
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


def _read_manifest(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> bytes:
    """The manifest, refused unread past MAX_MANIFEST_BYTES (the member header's size is
    what tarfile will hand out; the read is bounded too)."""
    if member.size > MAX_MANIFEST_BYTES:
        raise ArchiveError(
            f"{path}: {MANIFEST_NAME} is {member.size} bytes, more than the {MAX_MANIFEST_BYTES // 2**20} MiB "
            "a ray-history export's manifest can be (not an export, or a decompression bomb)"
        )
    data = _member_stream(tar, member).read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ArchiveError(f"{path}: {MANIFEST_NAME} is larger than {MAX_MANIFEST_BYTES // 2**20} MiB")
    return data


def stored_sha256(store: ObjectStore, key: str) -> str:
    digest = hashlib.sha256()
    for chunk in store.iter_chunks(key):
        digest.update(chunk)
    return digest.hexdigest()


def check_target_keys(layout: KeyLayout, manifest: Manifest, stored: Iterable[str], where: str) -> None:
    """Every key as the target will write it, before anything is written: the storage
    layer's own rules (``--storage-root-dir`` prepended may make a key too long), and no
    key lying under another (``P/a`` and ``P/a/b``: legal in a flat bucket, impossible in a
    directory, so refused everywhere and an archive imports the same into any backend)."""
    root = f" under --storage-root-dir={layout.root}" if layout.root else ""
    archive_keys: set[str] = set()
    for entry in manifest.objects:
        key = absolute_key(layout, entry.key)
        try:
            validate_key(key)
        except InvalidKeyError as exc:
            raise ArchiveError(f"{MANIFEST_NAME}: key {_shown(entry.key)!r}{root} is refused: {exc}") from None
        archive_keys.add(key)
    stored_keys = set(stored)
    for key in sorted(archive_keys):
        parts = key.split("/")
        for depth in range(1, len(parts)):
            above = "/".join(parts[:depth])
            if above in archive_keys:
                raise ArchiveError(
                    f"{MANIFEST_NAME}: key {_shown(key)!r} lies under {_shown(above)!r}, also an object of the archive "
                    "(a key cannot be both an object and a folder); nothing was written"
                )
            if above in stored_keys:
                raise CliError(
                    f"key {_shown(key)!r} of the archive lies under {_shown(above)!r}, an object {where} already "
                    "holds (a key cannot be both an object and a folder); nothing was written"
                )
        below = key + "/"
        clash = next((k for k in stored_keys if k.startswith(below)), None)
        if clash is not None:
            raise CliError(
                f"key {_shown(key)!r} of the archive is a folder in {where}, which holds {_shown(clash)!r} "
                "(a key cannot be both an object and a folder); nothing was written"
            )


def plan_import(store: ObjectStore, layout: KeyLayout, manifest: Manifest, *, quiet: bool) -> ImportPlan:
    """Pass 2: (new, identical, different) entries compared with what the target holds,
    every key checked before anything is written."""
    prefix, marker = allowed_keys(manifest.cluster, manifest.session)
    existing = {info.key: info.size for info in store.walk(absolute_key(layout, prefix))}
    markers = stored_marker_keys(store, layout, manifest.cluster, manifest.session)
    check_target_keys(layout, manifest, [*existing, *markers], store.describe())
    if markers:
        # The marker compared is the one stored, whatever the case of its kind segment.
        existing[absolute_key(layout, marker)] = store.stat(markers[0]).size
    stored_key = {absolute_key(layout, marker): markers[0]} if markers else {}
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
                (same if stored_sha256(store, stored_key.get(key, key)) == entry.sha256 else different).append(entry)
                advance(entry.size)
    return ImportPlan(new, same, different, markers)


def _listing(keys: list[str]) -> str:
    shown = ", ".join(_shown(key) for key in keys[:SHOWN_CONFLICTS])
    return shown + (f" and {len(keys) - SHOWN_CONFLICTS} more" if len(keys) > SHOWN_CONFLICTS else "")


def _refuse_conflicts(store: ObjectStore, layout: KeyLayout, manifest: Manifest, plan: ImportPlan) -> None:
    """Without --overwrite: nothing stored may change, and a listed session may not grow."""
    different = [absolute_key(layout, e.key) for e in plan.different]
    added = [absolute_key(layout, e.key) for e in plan.new] if plan.markers else []
    if not different and not added:
        return
    reasons = []
    if different:
        reasons.append(
            f"{len(different)} object(s) already exist in {store.describe()} with different content: "
            f"{_listing(different)}"
        )
    if added:
        session = f"{manifest.cluster.namespace}/{manifest.cluster.name} {manifest.session}"
        reasons.append(
            f"{session} is already stored (and listed) in {store.describe()}, and the archive would add "
            f"{len(added)} object(s) to it: {_listing(added)}"
        )
    raise CliError("; ".join(reasons) + "; nothing was written (pass --overwrite to replace and add them)")


def import_archive(path: Path, store: ObjectStore, layout: KeyLayout, *, overwrite: bool, quiet: bool) -> ImportResult:
    with open_archive(path) as tar:
        manifest, members = verify_archive(tar, path, quiet=quiet)
        plan = plan_import(store, layout, manifest, quiet=quiet)
        if not overwrite:
            _refuse_conflicts(store, layout, manifest, plan)
        result = ImportResult(manifest=manifest, unchanged=[absolute_key(layout, e.key) for e in plan.same])
        _, marker = allowed_keys(manifest.cluster, manifest.session)
        changes = plan.new + plan.different  # the marker among them when it is new or differs
        todo = sorted((e for e in changes if e.key != marker), key=lambda e: e.key)
        archived_marker = next((e for e in manifest.objects if e.key == marker), None)
        replaced = {e.key for e in plan.different}
        # The marker lists the session: it is written only after everything else. A listed
        # session being changed (--overwrite) is unlisted first, so a failure midway never
        # leaves it listed and half replaced; its marker is written back at the end (the
        # archive's, else the ones removed).
        unlisted = bool(plan.markers and changes)
        restore: dict[str, bytes] = {}
        if unlisted and archived_marker is None:
            restore = {key: store.get_bytes(key) for key in plan.markers}
        if archived_marker is not None and (unlisted or archived_marker.key not in {e.key for e in plan.same}):
            todo.append(archived_marker)
        done = 0
        try:
            if unlisted:
                for key in plan.markers:
                    store.delete(key)
            with byte_progress(f"import into {store.describe()}", sum(e.size for e in todo), quiet=quiet) as advance:
                for entry in todo:
                    key = absolute_key(layout, entry.key)
                    stream = _member_stream(tar, members[entry.key])
                    store.put_stream(key, stream, size=entry.size)  # type: ignore[arg-type]
                    advance(entry.size)
                    done += 1
                    if entry.key == marker and marker not in replaced and plan.markers:
                        continue  # the marker, removed and written back unchanged
                    (result.overwritten if entry.key in replaced else result.written).append(key)
            for key, data in restore.items():
                store.put_bytes(key, data)
        except BaseException as exc:
            exc.add_note(_partial_state(manifest, store, done, len(todo), unlisted=unlisted, replaced=bool(replaced)))
            raise
    return result


def _partial_state(
    manifest: Manifest, store: ObjectStore, done: int, total: int, *, unlisted: bool, replaced: bool
) -> str:
    """What a failed upload left behind, and how to finish it."""
    session = f"{manifest.cluster.namespace}/{manifest.cluster.name} {manifest.session}"
    wrote = f"the import stopped after writing {done} of {total} object(s) into {store.describe()}"
    if unlisted:
        return (
            f"{wrote}; {session} is no longer listed (its marker was removed before its objects were replaced, "
            "so it is never shown half replaced): run the same import again with --overwrite to complete it"
        )
    again = "the same import again with --overwrite" if replaced else "the same import again"
    return (
        f"{wrote}; {session} is not listed (its marker is written last): run {again} to complete it "
        "(identical objects are skipped)"
    )

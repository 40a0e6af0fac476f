"""``ray-history export``: one session from storage into a tar(.gz) with a manifest.

Objects are streamed in ranged chunks straight into the archive (memory stays
flat whatever a log's size) and hashed on the way; the manifest goes last. The
archive is written to a new temporary file beside it (``tempfile.mkstemp``: readable by its owner only) and
renamed when complete, so a failed export never leaves a plausible-looking archive
behind.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.cli.archive import (
    MANIFEST_NAME,
    Manifest,
    ManifestEntry,
    member_name,
    relative_key,
    stored_marker_keys,
)
from runtime.cli.errors import CliError
from runtime.cli.progress import Advance, byte_progress
from runtime.server.sessions import StoredSessions
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.errors import ObjectNotFoundError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.streams import DEFAULT_CHUNK_SIZE


@dataclass(frozen=True)
class SessionObjects:
    cluster: ClusterRef
    session: str
    objects: list[ObjectInfo]  # session objects, then the marker last
    #: the marker as stored (its kind segment may be capitalised), archived under the
    #: layout's own spelling
    marker_key: str = ""


def find_session_objects(
    store: ObjectStore, layout: KeyLayout, *, namespace: str, kind: str, name: str, session: str
) -> SessionObjects:
    """Every object of one stored session (as the server finds it: by its marker)."""
    stored = StoredSessions(store, layout).find(namespace, kind, name, session)
    if stored is None:
        raise CliError(
            f"no stored session {session!r} of {kind} {namespace}/{name} in {store.describe()}"
            + (f" (root {layout.root!r})" if layout.root else "")
            + "; list them with: ray-history clusters --storage-backend ..."
        )
    objects = list(store.walk(layout.session_prefix(stored.cluster, stored.session)))
    # The marker as stored (its kind segment may be capitalised), not as rebuilt.
    markers = stored_marker_keys(store, layout, stored.cluster, stored.session)
    if not markers:
        raise CliError(f"the marker of {session!r} of {kind} {namespace}/{name} was deleted while it was exported")
    objects.append(store.stat(markers[0]))
    return SessionObjects(stored.cluster, stored.session, objects, markers[0])


class _StoreReader(io.RawIOBase):
    """Exactly ``size`` bytes of one object, fetched in ranged chunks and hashed."""

    def __init__(self, store: ObjectStore, key: str, size: int, advance: Advance) -> None:
        super().__init__()
        self._store, self._key, self._size, self._advance = store, key, size, advance
        self._offset = 0  # next byte of the object to fetch
        self._buffer = b""
        self._position = 0  # next byte of the buffer to hand out
        self.sha256 = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        wanted = self._size if size is None or size < 0 else size
        parts: list[bytes] = []
        while wanted > 0 and (part := self._next(wanted)):
            parts.append(part)
            wanted -= len(part)
        out = b"".join(parts)
        self.sha256.update(out)
        self._advance(len(out))
        return out

    def _next(self, limit: int) -> bytes:
        """Up to ``limit`` bytes from the buffer, refilled by one 8 MiB ranged read
        (tarfile asks for 16 KiB at a time)."""
        if self._position >= len(self._buffer):
            if self._offset >= self._size:
                return b""
            length = min(DEFAULT_CHUNK_SIZE, self._size - self._offset)
            chunk = self._store.get_range(self._key, self._offset, length)
            if len(chunk) != length:
                raise CliError(f"{self._key} changed while it was exported (expected {self._size} bytes); retry")
            self._offset += length
            self._buffer, self._position = chunk, 0
        out = self._buffer[self._position : self._position + limit]
        self._position += len(out)
        return out


def write_archive(
    store: ObjectStore, layout: KeyLayout, found: SessionObjects, output: Path, *, quiet: bool
) -> Manifest:
    """Stream ``found`` into ``output`` (``.tar.gz``/``.tgz`` compressed, else plain tar)."""
    compressed = output.name.endswith((".gz", ".tgz"))
    manifest = Manifest(cluster=found.cluster, session=found.session, source=_describe(store, layout))
    total = sum(info.size for info in found.objects)
    # Archived under the layout's spelling, which every importer accepts.
    marker = relative_key(layout, layout.marker_key(found.cluster, found.session))
    partial: Path | None = None
    try:
        # A new file of its own (O_EXCL, never through a planted symlink, mode 0600: job
        # logs carry credentials) in the output's directory, renamed into place when complete.
        fd, name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".part", dir=output.parent)
        partial = Path(name)
        with (
            os.fdopen(fd, "wb") as file,
            byte_progress(f"export {found.session}", total, quiet=quiet) as advance,
            tarfile.open(fileobj=file, mode="w:gz" if compressed else "w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for info in found.objects:
                relative = relative_key(layout, info.key)
                if info.key == found.marker_key:
                    relative = marker
                member = tarfile.TarInfo(member_name(relative))
                member.size = info.size
                member.mtime = int(info.updated.timestamp()) if info.updated else int(time.time())
                member.mode = 0o644
                reader = _StoreReader(store, info.key, info.size, advance)
                try:
                    tar.addfile(member, reader)
                except ObjectNotFoundError:
                    raise CliError(f"{info.key} was deleted while it was exported; retry") from None
                manifest.objects.append(ManifestEntry(relative, info.size, reader.sha256.hexdigest()))
            body = manifest.to_json()
            entry = tarfile.TarInfo(MANIFEST_NAME)
            entry.size, entry.mtime, entry.mode = len(body), int(time.time()), 0o644
            tar.addfile(entry, io.BytesIO(body))
        os.replace(partial, output)
        partial = None
    except OSError as exc:
        raise CliError(f"-o {output}: cannot write the archive: {exc.strerror or exc}") from None
    finally:
        if partial is not None:
            partial.unlink(missing_ok=True)
    return manifest


def _describe(store: ObjectStore, layout: KeyLayout) -> str:
    return store.describe() + (f"/{layout.root}" if layout.root else "")

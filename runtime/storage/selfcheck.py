"""A storage round trip that proves a configuration works: the bucket exists, this
identity can write, read (whole, range, tail), list and delete, and how many
stored sessions the history already holds.

Run it in a pod to answer "can this service account use the bucket?" before
anything else runs: ``python -m runtime.storage check``.
"""

from __future__ import annotations

import io
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError, ObjectNotFoundError, PermanentStorageError, StorageError
from runtime.storage.layout import KeyLayout

logger = logging.getLogger(__name__)

_STREAM_BYTES = 3 * 1024 * 1024 + 17  # crosses chunk boundaries of every backend


@dataclass(frozen=True)
class CheckStep:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass(frozen=True)
class CheckReport:
    location: str
    steps: list[CheckStep]
    sessions: int

    @property
    def ok(self) -> bool:
        return all(step.ok for step in self.steps)


def run_selfcheck(store: ObjectStore, layout: KeyLayout, namespace: str | None = None) -> CheckReport:
    """Write, read, list and delete probe objects under ``{root}/_selfcheck/``, then count
    the stored sessions: every namespace's, or only ``namespace``'s (all that a collector's
    identity may list)."""
    return _SelfCheck(store, layout, namespace).run()


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


class _SelfCheck:
    def __init__(self, store: ObjectStore, layout: KeyLayout, namespace: str | None = None) -> None:
        self.store = store
        self.layout = layout
        self.namespace = namespace
        self.key = f"{layout.probe_prefix()}{uuid.uuid4().hex}/probe?kind=bytes&n=1"
        self.stream_key = self.key.replace("bytes", "stream")
        self.payload = b"ray-history self-check\n"
        self.big = os.urandom(_STREAM_BYTES)
        self.steps: list[CheckStep] = []
        self.sessions = 0

    def run(self) -> CheckReport:
        if self._step("bucket reachable", self._reachable):
            wrote = self._step("write", self._write)
            if wrote:
                self._step("read", self._read)
            self._step("streamed write", self._stream)
            if wrote:
                self._step("list", self._list)
                self._step("delete", self._delete)
            self._step("history", self._count_sessions)
        return CheckReport(location=self.store.describe(), steps=self.steps, sessions=self.sessions)

    def _step(self, name: str, action: Callable[[], str]) -> bool:
        start = time.perf_counter()
        try:
            detail, ok = action(), True
        except (StorageError, InvalidKeyError, AssertionError) as exc:
            detail, ok = str(exc), False
        self.steps.append(CheckStep(name, ok, time.perf_counter() - start, detail))
        return ok

    def _reachable(self) -> str:
        self.store.check()
        return "ok"

    def _write(self) -> str:
        self.store.put_bytes(self.key, self.payload)
        return f"{len(self.payload)} bytes"

    def _read(self) -> str:
        _expect(self.store.get_bytes(self.key) == self.payload, "read back different bytes")
        _expect(self.store.get_range(self.key, 4, 7) == self.payload[4:11], "range read differs")
        _expect(self.store.get_tail(self.key, 6) == self.payload[-6:], "tail read differs")
        return "whole, range, tail"

    def _stream(self) -> str:
        self.store.put_stream(self.stream_key, io.BytesIO(self.big), size=len(self.big))
        _expect(self.store.stat(self.stream_key).size == len(self.big), "streamed size differs")
        _expect(self.store.get_tail(self.stream_key, 1000) == self.big[-1000:], "streamed tail differs")
        return f"{len(self.big)} bytes in chunks"

    def _list(self) -> str:
        names = [o.key for o in self.store.list(self.key.rsplit("/", 1)[0] + "/").objects]
        _expect(sorted(names) == sorted([self.key, self.stream_key]), f"listing shows {names}")
        return f"{len(names)} objects"

    def _delete(self) -> str:
        self.store.delete(self.key)
        self.store.delete(self.stream_key)
        _expect(not self.store.exists(self.key), "object still exists after delete")
        try:
            self.store.get_bytes(self.key)
        except ObjectNotFoundError:
            return "gone"
        raise AssertionError("deleted object is still readable")

    def _count_sessions(self) -> str:
        markers = self.layout.markers_prefix()
        if self.namespace is None:
            prefixes = [markers]
        else:
            prefixes = [p for p in self.layout.namespace_prefixes(self.namespace) if p.startswith(markers)]
        try:
            for prefix in prefixes:
                for info in self.store.walk(prefix):
                    try:
                        self.layout.parse_marker_key(info.key)
                        self.sessions += 1
                    except InvalidKeyError:
                        logger.debug("ignoring non-marker key %s", info.key)
        except PermanentStorageError as exc:
            if self.namespace is None:
                hint = "if access was denied: a collector's identity lists only its own namespace, use --namespace NS"
                raise PermanentStorageError(
                    f"{exc.reason}; {hint}", backend=exc.backend, bucket=exc.bucket, key=exc.key
                ) from exc
            raise
        whose = "" if self.namespace is None else f" of namespace {self.namespace}"
        return f"{self.sessions} stored sessions{whose}"

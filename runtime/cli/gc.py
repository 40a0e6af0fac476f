"""``ray-history gc``: delete whole sessions that ended before a cutoff.

Which sessions have ended is decided by :mod:`runtime.storage.retention` from one
listing of the bucket (and, with ``--live-check kubernetes``, the live RayClusters);
this module lists, deletes and reports. A session's marker goes first (the history
server lists sessions by marker, so it never lists a half-deleted one), then its
objects, then its shared indexes (``history-index/``, or ``--shared-index-container``
on Azure). A run that stops midway leaves objects that the next run still finds by
their ``cluster-history`` keys (or, for indexes, as an orphan index), still ended and
still old, and finishes.

No ``rich`` here (nor in what ``main`` imports for it): the CronJob runs this with
the history server's image, which installs the ``[server]`` extra only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from runtime.cli.errors import CliError, UsageError
from runtime.common.durations import parse_duration
from runtime.common.settings import Checked
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.errors import InvalidKeyError, PermanentStorageError, StorageConfigError, StorageError
from runtime.storage.index_store import open_index_store
from runtime.storage.keys import validate_key
from runtime.storage.layout import KeyLayout
from runtime.storage.retention import Decision, SessionRecord, select, summarise

logger = logging.getLogger(__name__)

LIVE_CHECKS = ("none", "kubernetes")
#: Deletes in flight per session: object stores delete one key per request.
DELETE_WORKERS = 8
_DAYS = re.compile(r"(\d+(?:\.\d+)?)d")
#: The longest --older-than: a century. Longer ones overflow the cutoff's datetime.
MAX_AGE_DAYS = 36500


def parse_age(text: str) -> float:
    """Seconds in ``30d``, ``1d12h``, ``36h``, ``90m``: a Go duration with an optional
    leading day count. A number without a unit is refused however it is spelt
    (``30``, ``30.``, ``3e1``, ``inf``): ``30`` could mean days or seconds."""
    value = text.strip()
    days = _DAYS.match(value)
    rest = value[days.end() :] if days else value
    if _is_number(rest):
        raise ValueError("give a unit, e.g. 30d, 12h or 90m")
    seconds = (float(days.group(1)) * 86400 if days else 0.0) + (parse_duration(rest) if rest or not days else 0.0)
    if seconds <= 0:
        raise ValueError("must be longer than zero")
    if not seconds <= MAX_AGE_DAYS * 86400:  # also inf, from a day count of 400 digits
        raise ValueError(f"must be at most {MAX_AGE_DAYS}d (100 years)")
    return seconds


def _is_number(text: str) -> bool:
    """Whether float() reads ``text``: parse_duration would take it as seconds."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``gc`` besides -v and the storage flags."""
    parser.add_argument(
        "--older-than",
        action=Checked,
        parse=parse_age,
        required=True,
        metavar="AGE",
        help="delete sessions that ended and were last written longer ago than this (30d, 1d12h, 36h, 90m)",
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would be deleted and why; delete nothing")
    parser.add_argument(
        "--live-check",
        choices=LIVE_CHECKS,
        default="none",
        help="kubernetes: a cluster whose RayCluster is gone has ended all its sessions (needs list on "
        "rayclusters.ray.io); none: only a newer session of the same cluster ends one",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="with --live-check kubernetes outside a pod: this kubeconfig (default $KUBECONFIG or ~/.kube/config)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per session on stdout, each as soon as its session is done, instead of a table",
    )
    parser.add_argument(
        "--shared-index-container",
        metavar="NAME",
        help="azureblob: the container holding the history server's shared indexes, deleted with their "
        "sessions (env SHARED_INDEX_CONTAINER; default the history container)",
    )


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    action: str  # deleted | would delete | kept | failed
    reason: str


def run(args: argparse.Namespace) -> int:
    if args.kubeconfig and args.live_check != "kubernetes":
        raise UsageError(f"--kubeconfig={args.kubeconfig} is for --live-check kubernetes")
    try:
        # Not runtime.cli.storage_source: that one loads the history server's app (Flask).
        config = StorageConfig.from_args(args)
    except StorageConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.dry_run:
        config = dataclasses.replace(config, create_bucket=False)  # a mistyped bucket is an error, not made
    cutoff = datetime.now(UTC) - timedelta(seconds=args.older_than)
    try:
        store = open_store(config)
    except StorageConfigError as exc:  # e.g. a backend's settings missing from the environment
        raise UsageError(str(exc)) from None
    except PermanentStorageError as exc:
        raise CliError(f"storage is not usable: {exc}") from None
    index_store = _index_store(args, config, store)
    with store, index_store if index_store is not store else contextlib.nullcontext():
        layout = config.layout
        records = scan(store, layout, index_store)
        # Listed after the bucket: a cluster deleted in between counts as live (kept),
        # never the other way round.
        live = None
        if args.live_check == "kubernetes":
            from runtime.cli.live_clusters import list_live_clusters

            live = list_live_clusters(args.kubeconfig)
        decisions = select(records, cutoff=cutoff, live=live)
        outcomes: list[Outcome] = []
        for decision in decisions:
            outcome = _apply(store, layout, decision, cutoff, dry_run=args.dry_run, index_store=index_store)
            outcomes.append(outcome)
            if args.json:
                # Each line as soon as its session is done: a run killed midway (the
                # CronJob's activeDeadlineSeconds) has still logged what it deleted.
                sys.stdout.write(json.dumps(outcome_json(outcome, cutoff)) + "\n")
                sys.stdout.flush()
    if not args.json:
        _table(outcomes)
    _summary(outcomes, cutoff)
    failed = [o for o in outcomes if o.action == "failed"]
    if failed:
        raise CliError(f"{len(failed)} session(s) not deleted, see above; the next run retries them")
    return 0


def _index_store(args: argparse.Namespace, config: StorageConfig, store: ObjectStore) -> ObjectStore:
    """Where the shared indexes are (the history store unless a container is named)."""
    container = (args.shared_index_container or os.environ.get("SHARED_INDEX_CONTAINER", "")).strip() or None
    try:
        return open_index_store(config, container, store)
    except StorageConfigError as exc:
        raise UsageError(str(exc)) from None


def scan(store: ObjectStore, layout: KeyLayout, index_store: ObjectStore | None = None) -> list[SessionRecord]:
    """One record per stored session: its objects under ``cluster-history``, its marker
    and its shared indexes (in ``index_store``, default ``store``)."""

    def listing() -> Any:
        yield from store.walk(layout.history_prefix())
        yield from store.walk(layout.markers_prefix())
        yield from (index_store or store).walk(layout.index_root_prefix())

    records = summarise(layout, listing())
    logger.info("%d stored sessions in %s", len(records), store.describe())
    return records


def _apply(
    store: ObjectStore,
    layout: KeyLayout,
    decision: Decision,
    cutoff: datetime,
    *,
    dry_run: bool,
    index_store: ObjectStore | None = None,
) -> Outcome:
    if not decision.delete:
        return Outcome(decision, "kept", decision.reason)
    if dry_run:
        return Outcome(decision, "would delete", decision.reason)
    record = decision.record
    try:
        deleted = delete_session(store, layout, record, cutoff, index_store=index_store)
    except _WrittenSinceScanError as exc:
        return Outcome(decision, "kept", str(exc))
    except InvalidKeyError as exc:  # before any delete: the session stays whole and listed
        logger.warning("not deleting %s %s: %s", _cluster_name(record), record.session, exc)
        why = f"{decision.reason}; not deleted, it holds a key this tool cannot delete: {exc}"
        return Outcome(decision, "failed", why)
    except StorageError as exc:
        logger.warning("deleting %s %s failed: %s", _cluster_name(record), record.session, exc)
        return Outcome(decision, "failed", f"{decision.reason}; deleting failed: {exc}")
    logger.info("deleted %s %s: %d objects", _cluster_name(record), record.session, deleted)
    return Outcome(decision, "deleted", decision.reason)


class _WrittenSinceScanError(Exception):
    """A session's object is newer than the cutoff: it was written after the scan."""


def delete_session(
    store: ObjectStore,
    layout: KeyLayout,
    record: SessionRecord,
    cutoff: datetime,
    *,
    index_store: ObjectStore | None = None,
) -> int:
    """Delete the session's markers, then every object of it, then its shared
    indexes; the number deleted.

    The session is listed again first; if anything in it was written since the
    scan (or has no time), nothing is deleted. Index objects are listed again too
    (a server may have uploaded one since the scan) and do not count as writes.
    """
    objects: list[ObjectInfo] = list(store.walk(layout.session_prefix(record.cluster, record.session)))
    fresh = next((o for o in objects if o.updated is None or o.updated >= cutoff), None)
    if fresh is not None:
        raise _WrittenSinceScanError(f"kept: {fresh.key} was written after the cutoff (since the scan)")
    indexes = index_store or store
    index_keys = [info.key for info in indexes.walk(layout.index_session_prefix(record.cluster, record.session))]
    # Every key checked before the first delete: one the storage layer refuses (a
    # backslash in a log's name, written by another tool) would otherwise stop the
    # run halfway through this session, and every later run at the same place.
    for key in (*(info.key for info in objects), *index_keys):
        validate_key(key)
    # First: without its marker the server no longer lists the session, so a run that
    # fails midway never leaves a listed session with objects missing. The keys as
    # listed, not as rebuilt: a marker's kind segment may be capitalised.
    for key in record.marker_keys:
        store.delete(key)
    with ThreadPoolExecutor(DELETE_WORKERS, thread_name_prefix="gc-delete") as pool:
        for _ in pool.map(lambda info: store.delete(info.key), objects):
            pass
        for _ in pool.map(indexes.delete, index_keys):
            pass
    return len(record.marker_keys) + len(objects) + len(index_keys)


# ------------------------------------------------------------------ output
def _cluster_name(record: SessionRecord) -> str:
    cluster = record.cluster
    owner = f" ({cluster.owner_kind} {cluster.owner_name})" if cluster.has_owner else ""
    return f"{cluster.namespace}/{cluster.name}{owner}"


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else "-"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def outcome_json(outcome: Outcome, cutoff: datetime) -> dict[str, Any]:
    record = outcome.decision.record
    return {
        "action": outcome.action,
        "namespace": record.cluster.namespace,
        "cluster": record.cluster.name,
        "owner_kind": record.cluster.owner_kind,
        "owner_name": record.cluster.owner_name,
        "session": record.session,
        "last_written": _when(record.newest),
        "objects": record.objects,
        "bytes": record.bytes,
        "index_objects": sorted(record.index_keys),
        "reason": outcome.reason,
        "cutoff": _when(cutoff),
    }


def _table(outcomes: list[Outcome]) -> None:
    """The outcomes as a table (its widths need every row: printed at the end)."""
    out = sys.stdout
    header = ("ACTION", "CLUSTER", "SESSION", "LAST WRITTEN", "OBJECTS", "SIZE", "REASON")
    rows = [header] + [
        (
            o.action,
            _cluster_name(o.decision.record),
            o.decision.record.session,
            _when(o.decision.record.newest),
            str(o.decision.record.objects),
            _size(o.decision.record.bytes),
            o.reason,
        )
        for o in outcomes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row, shown in zip(rows, [None, *outcomes], strict=True):
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + f"  {row[-1]}\n")
        for key in sorted(shown.decision.record.index_keys) if shown and shown.action != "kept" else ():
            out.write(f"    shared index: {key}\n")
    out.flush()


def _summary(outcomes: list[Outcome], cutoff: datetime) -> None:
    counts = {action: sum(1 for o in outcomes if o.action == action) for action in {o.action for o in outcomes}}
    summary = ", ".join(f"{n} {action}" for action, n in sorted(counts.items())) or "no stored sessions"
    sys.stderr.write(f"ray-history gc: {summary} (cutoff {_when(cutoff)})\n")

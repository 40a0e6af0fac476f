"""``export`` and ``import`` command bodies: storage flags -> store -> archive."""

from __future__ import annotations

import argparse

from runtime.cli import render
from runtime.cli.errors import CliError, UsageError
from runtime.cli.progress import human_bytes, note
from runtime.cli.storage_source import storage_config
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.errors import PermanentStorageError, StorageConfigError


def _open(args: argparse.Namespace) -> tuple[StorageConfig, ObjectStore]:
    config = storage_config(args)
    try:
        return config, open_store(config)
    except StorageConfigError as exc:  # e.g. a backend's settings missing from the environment
        raise UsageError(str(exc)) from None
    except PermanentStorageError as exc:
        raise CliError(f"storage is not usable: {exc}") from None


def _location(store: ObjectStore, config: StorageConfig) -> str:
    return store.describe() + (f"/{config.layout.root}" if config.layout.root else "")


def run_export(args: argparse.Namespace) -> int:
    from runtime.cli.export import find_session_objects, write_archive

    config, store = _open(args)
    with store:
        found = find_session_objects(
            store, config.layout, namespace=args.namespace, kind=args.kind, name=args.cluster, session=args.session
        )
        manifest = write_archive(store, config.layout, found, args.output, quiet=args.quiet)
    summary = {
        "archive": str(args.output),
        "source": _location(store, config),
        "cluster": f"{found.cluster.namespace}/{found.cluster.name}",
        "session": found.session,
        "objects": len(manifest.objects),
        "bytes": manifest.total_bytes,
    }
    if args.json:
        render.print_json(summary)
    note(
        f"exported {len(manifest.objects)} objects ({human_bytes(manifest.total_bytes)}) of "
        f"{summary['cluster']} {found.session} to {args.output}",
        quiet=args.quiet,
    )
    return 0


def run_import(args: argparse.Namespace) -> int:
    from runtime.cli.importer import import_archive

    config, store = _open(args)
    with store:
        result = import_archive(args.archive, store, config.layout, overwrite=args.overwrite, quiet=args.quiet)
    manifest = result.manifest
    summary = {
        "archive": str(args.archive),
        "target": _location(store, config),
        "cluster": f"{manifest.cluster.namespace}/{manifest.cluster.name}",
        "session": manifest.session,
        "written": len(result.written),
        "overwritten": len(result.overwritten),
        "unchanged": len(result.unchanged),
    }
    if args.json:
        render.print_json(summary)
    note(
        f"imported {summary['cluster']} {manifest.session} into {summary['target']}: "
        f"{summary['written']} written, {summary['overwritten']} overwritten, {summary['unchanged']} unchanged",
        quiet=args.quiet,
    )
    return 0

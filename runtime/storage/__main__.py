"""``python -m runtime.storage check [storage flags]``: verify a storage configuration."""

from __future__ import annotations

import argparse
import logging
import sys

from runtime.storage.config import StorageConfig, add_storage_arguments, open_store
from runtime.storage.errors import InvalidKeyError, StorageConfigError, StorageError
from runtime.storage.layout import validate_namespace
from runtime.storage.selfcheck import run_selfcheck


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.storage",
        description="Storage tools for the Ray History Server.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="write, read, list and delete probe objects; count stored sessions")
    add_storage_arguments(check)
    check.add_argument(
        "--namespace",
        metavar="NAMESPACE",
        help="count only this namespace's stored sessions (a collector's identity may list no other's)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if args.namespace is not None:
        try:
            validate_namespace(args.namespace)
        except InvalidKeyError as exc:
            parser.exit(2, f"error: --namespace: {exc}\n")
    try:
        config = StorageConfig.from_args(args)
        store = open_store(config, check=False)
    except StorageConfigError as exc:
        parser.exit(2, f"error: {exc}\n")
    except StorageError as exc:
        parser.exit(1, f"error: {exc}\n")
    if config.create_bucket:
        try:
            store.check(create=True)
        except StorageError as exc:
            parser.exit(1, f"error: {exc}\n")

    with store:
        report = run_selfcheck(store, config.layout, args.namespace)
    out = sys.stdout
    out.write(f"Storage self-check of {report.location} (root {config.root_dir or '<bucket root>'!r})\n")
    for step in report.steps:
        mark = "ok  " if step.ok else "FAIL"
        out.write(f"  {mark} {step.name:<17} {step.seconds * 1000:8.1f} ms  {step.detail}\n")
    out.write("All checks passed.\n" if report.ok else "Some checks failed.\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Start-up plumbing shared by the ``collector`` and ``historyserver`` commands."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping

from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.errors import StorageConfigError, StorageError

logger = logging.getLogger(__name__)


def configure_logging(level: str | None = None) -> None:
    """One format for every process; level from ``--log-level`` or ``LOG_LEVEL``."""
    chosen = (level or os.environ.get("LOG_LEVEL") or "INFO").upper()
    logging.basicConfig(level=chosen, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def open_configured_store(
    parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> tuple[StorageConfig, ObjectStore]:
    """Build and verify the storage from flags + env, or exit with a message that
    names the flag (exit 2) or the storage problem (exit 1)."""
    try:
        config = StorageConfig.from_args(args, env)
        store = open_store(config)
    except StorageConfigError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except StorageError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    return config, store


NOT_READY_EXIT = 3


def validate_storage_only(parser: argparse.ArgumentParser, argv: list[str] | None, missing: str) -> int:
    """Entry-point body for a component whose main job has not landed yet: check the
    storage configuration and the bucket for real, then say what is missing."""
    args, _unknown = parser.parse_known_args(argv)
    configure_logging(getattr(args, "log_level", None))
    _config, store = open_configured_store(parser, args)
    store.close()
    logger.error("%s: storage %s is reachable, but %s", parser.prog, store.describe(), missing)
    return NOT_READY_EXIT

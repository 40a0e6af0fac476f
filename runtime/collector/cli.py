"""``collector`` entry point.

Until the collector lands (issue #3) this validates the storage configuration
(flags as in the GKE guide or current KubeRay, or environment only) and the
bucket, then exits with status 3.
"""

from __future__ import annotations

import argparse
import sys

from runtime.cli_common import validate_storage_only
from runtime.storage.config import add_storage_arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="collector",
        description="Ray History Server collector sidecar (event receiver, log shipper, snapshots).",
    )
    add_storage_arguments(parser)
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING (env LOG_LEVEL)")
    return parser


def main(argv: list[str] | None = None) -> int:
    return validate_storage_only(build_parser(), argv, "event collection and log shipping arrive with issue #3")


if __name__ == "__main__":
    sys.exit(main())

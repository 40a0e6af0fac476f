"""``historyserver`` entry point.

Until the history server lands (issue #4) this validates the storage
configuration (``--runtime-class-name=gcs --ray-root-dir=log`` as in the GKE
guide, or ``--storage-backend`` / ``--storage-root-dir``) and the bucket, then
exits with status 3.
"""

from __future__ import annotations

import argparse
import sys

from runtime.cli_common import validate_storage_only
from runtime.storage.config import add_storage_arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="historyserver",
        description="Ray History Server: the Ray Dashboard for clusters that no longer exist.",
    )
    add_storage_arguments(parser)
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING (env LOG_LEVEL)")
    return parser


def main(argv: list[str] | None = None) -> int:
    return validate_storage_only(build_parser(), argv, "the dashboard API arrives with issue #4")


if __name__ == "__main__":
    sys.exit(main())

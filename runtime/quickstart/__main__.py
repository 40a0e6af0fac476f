"""``python -m runtime.quickstart``: the quickstart without the ``ray-history`` CLI."""

from __future__ import annotations

import argparse
import sys

from runtime.common.process import configure_logging
from runtime.quickstart import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.quickstart",
        description="Run Ray with the collector, a sample job, stop the cluster, and serve its Dashboard from storage.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

"""Run moto's S3 server with buckets that exist before it accepts a connection.

moto keeps state in memory, so a restarted server comes back empty. Creating the
buckets inside the server process before it listens means a client retrying
through an outage never sees a window where the bucket is missing (which our
stores rightly treat as a permanent error).

    python -m tests.integration.emulators.moto_launcher --port N [--bucket B ...]
"""

from __future__ import annotations

import argparse

from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
from moto.server import main as moto_main


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", action="append", default=[])
    args = parser.parse_args()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for bucket in args.bucket:
        backend.create_bucket(bucket, "us-east-1")
    moto_main(["-H", "127.0.0.1", "-p", str(args.port)])


if __name__ == "__main__":
    main()

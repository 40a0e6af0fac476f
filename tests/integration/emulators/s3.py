"""moto's S3 server as an S3 emulator.

moto keeps everything in memory, so a killed or stopped server comes back empty.
A restart brings back the buckets made through ``create_bucket`` (objects are
lost): ``moto_launcher`` creates them in the server process before it listens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import boto3
from botocore.config import Config

from tests.integration.emulators.base import ProcessEmulator

_CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class MotoS3Emulator(ProcessEmulator):
    """moto's server on 127.0.0.1 and a free port, kept across restarts."""

    backend = "s3"
    keeps_data_across_restart = False  # moto holds everything in memory

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.buckets: list[str] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        # This interpreter (never a moto_server from PATH, which may belong to
        # another environment), with the buckets the last process had.
        cmd = [sys.executable, "-m", "tests.integration.emulators.moto_launcher", "--port", str(self.port)]
        for bucket in self.buckets:
            cmd += ["--bucket", bucket]
        return cmd

    def create_bucket(self, bucket: str) -> None:
        client = boto3.session.Session(
            aws_access_key_id=_CREDS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=_CREDS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        ).client("s3", endpoint_url=self.endpoint, config=Config(s3={"addressing_style": "path"}))
        try:
            client.create_bucket(Bucket=bucket)  # moto answers 200 for a bucket it already has
        finally:
            client.close()
        if bucket not in self.buckets:
            self.buckets.append(bucket)

    def env(self, bucket: str) -> dict[str, str]:
        return {
            "STORAGE_BACKEND": "s3",
            "S3_BUCKET": bucket,
            "S3_ENDPOINT": self.endpoint,
            "S3_REGION": "us-east-1",
            "S3FORCE_PATH_STYLE": "true",
            **_CREDS,
        }

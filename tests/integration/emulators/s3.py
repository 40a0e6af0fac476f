"""moto's standalone server as an S3 emulator.

moto keeps everything in memory, so a killed or stopped server comes back empty.
A restart brings back the buckets made through ``create_bucket`` (objects are
lost): ``moto_launcher`` creates them in the server process before it listens.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import IO

import boto3
from botocore.config import Config

from tests.integration.emulators.base import Emulator, free_port, wait_for_port

logger = logging.getLogger(__name__)

_CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


REPO = Path(__file__).resolve().parents[3]


class MotoS3Emulator(Emulator):
    """``moto_server`` on 127.0.0.1 and a free port, kept across restarts."""

    backend = "s3"
    keeps_data_across_restart = False  # moto holds everything in memory

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        super().__init__(workdir)
        self.port = port or free_port()
        self.buckets: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._close_log()
        self._log = open(self.workdir / "moto_server.log", "ab")  # noqa: SIM115 - kept open while running
        # This interpreter (never a moto_server from PATH, which may belong to
        # another environment), with the buckets the last process had.
        cmd = [sys.executable, "-m", "tests.integration.emulators.moto_launcher", "--port", str(self.port)]
        for bucket in self.buckets:
            cmd += ["--bucket", bucket]
        logger.info("starting %s", " ".join(cmd))
        self._proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO
        )
        try:
            wait_for_port(self.port, timeout=30.0, proc=self._proc)
        except Exception:
            self.kill()
            raise

    def stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None
        self._close_log()

    def kill(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._proc = None
        self._close_log()

    def create_bucket(self, bucket: str) -> None:
        self._create(bucket)
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

    def _create(self, bucket: str) -> None:
        client = boto3.session.Session(
            aws_access_key_id=_CREDS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=_CREDS["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        ).client("s3", endpoint_url=self.endpoint, config=Config(s3={"addressing_style": "path"}))
        try:
            client.create_bucket(Bucket=bucket)  # moto answers 200 for a bucket it already has
        finally:
            client.close()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

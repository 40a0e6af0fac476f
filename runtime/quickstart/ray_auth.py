"""The demo's Ray runs with token authentication.

Ray 2.60 started with ``--node-ip-address=127.0.0.1`` still listens on every interface
(GCS, raylet, dashboard agent, client server): without a token, anyone on the laptop's
network could run code on it while the demo runs. So each run generates a token
(``secrets.token_urlsafe``), keeps it only in the demo's own log directory (mode 0600),
hands Ray, its job drivers and the collector the file's path (``RAY_AUTH_TOKEN_PATH``,
not the token: nothing in ``ps`` or in an environment dump), and sends it itself as
``Authorization: Bearer`` to the dashboard. The file is removed when Ray stops.
The token is never printed or logged.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

TOKEN_FILE = "ray-auth-token"  # noqa: S105 - a file name
#: Ray's token-auth variables; the caller's values must not reach the demo's processes.
RAY_AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_K8S_TOKEN_AUTH")


@dataclass(frozen=True, repr=False)
class RayToken:
    """This run's Ray token, in a file only its owner may read."""

    path: Path

    @classmethod
    def create(cls, directory: Path) -> RayToken:
        """A new token in ``directory`` (replacing one a previous run left)."""
        path = directory / TOKEN_FILE
        path.unlink(missing_ok=True)
        # O_EXCL + 0600 from the start: never readable by others, not even for a moment.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(secrets.token_urlsafe(32))
        return cls(path)

    def value(self) -> str:
        return self.path.read_text(encoding="utf-8").strip()

    def headers(self) -> dict[str, str]:
        """What a request to the demo's Ray dashboard sends."""
        return {"Authorization": f"Bearer {self.value()}"}

    def env(self) -> dict[str, str]:
        """For ``ray start`` (and so every Ray process and job driver) and the collector."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.path)}

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:  # the path only, never the token
        return f"RayToken({str(self.path)!r})"

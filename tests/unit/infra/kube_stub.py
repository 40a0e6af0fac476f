"""A local stand-in for a Kubernetes API server and a kubeconfig pointing at it, for the
stack's advisory checks that ask a real cluster (infra/cluster_checks.py, infra/platform.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonApiHandler(BaseHTTPRequestHandler):
    """A stand-in API server's handler: JSON answers, no request log."""

    def send_json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@contextmanager
def stub_kubeconfig(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields a kubeconfig (JSON) for it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "stub", "user": {"token": "stub-token"}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
        "current-context": "stub",
    }
    try:
        yield json.dumps(config)
    finally:
        server.shutdown()
        server.server_close()

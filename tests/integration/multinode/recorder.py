"""Inside a node's namespace, between Ray's event exporter and the collector: forwards
every POST and appends the batch with the collector's answer to a JSONL file, so the
test knows exactly which events the collector acknowledged (200) on that node.

``python -m tests.integration.multinode.recorder LISTEN_PORT COLLECTOR_PORT OUT.jsonl``
"""

from __future__ import annotations

import json
import sys
import threading
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    listen, upstream, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    lock = threading.Lock()

    def forward(body: bytes) -> tuple[int, bytes]:
        conn = HTTPConnection("127.0.0.1", upstream, timeout=10)
        try:
            conn.request("POST", "/v1/events", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        except OSError:
            return 502, b'{"error": "collector unreachable"}'  # Ray retries, as on connection refused
        finally:
            conn.close()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status, reply = forward(body)
            # Recorded before Ray hears the answer: an acknowledged batch is never missing here.
            with lock, out.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps({"status": status, "body": body.decode("utf-8", "replace")}) + "\n")
            self.send_response(status)
            self.send_header("Content-Length", str(len(reply)))
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", listen), Handler)
    server.daemon_threads = True
    server.serve_forever()


def acknowledged(path: Path) -> dict[str, dict[str, object]]:
    """eventId -> event for every event of a batch the collector answered 200."""
    events: dict[str, dict[str, object]] = {}
    if not path.exists():
        return events
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by SIGKILL was never answered
        if record["status"] == 200:
            for event in json.loads(record["body"]):
                events[str(event["eventId"])] = event
    return events


if __name__ == "__main__":
    main()

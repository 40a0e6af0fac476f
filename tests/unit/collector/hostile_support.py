"""Shared by the hostile-input tests of the events port (#14): a real receiver on a
loopback port, raw-socket requests, and descriptor counting."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from runtime.collector.events.http_server import BoundedHTTPServer, ServerLimits
from runtime.collector.events.quarantine import Quarantine
from runtime.collector.events.receiver import EventReceiver
from runtime.collector.events.spool import Spool
from runtime.collector.events.spool_files import ReadyFile
from runtime.collector.metrics import CollectorMetrics

NODE = "a" * 56
SESSION = "session_2026-11-22_01-58-29_266863_14332"


def event(session: str = SESSION, job: str | None = None) -> dict[str, object]:
    """A minimal event the parser files (by session, node and job)."""
    item: dict[str, object] = {
        "eventId": "x",
        "eventType": "NODE_DEFINITION_EVENT",
        "timestamp": "2026-11-22T01:58:33.322125862Z",
        "sessionName": session,
    }
    if job is not None:
        item["eventType"] = "DRIVER_JOB_DEFINITION_EVENT"
        item["driverJobDefinitionEvent"] = {"jobId": job}
    return item


def open_fds() -> int:
    """Descriptors this process holds now."""
    return len(os.listdir("/proc/self/fd"))


@dataclass
class Served:
    """A receiver and its spool, served on a free loopback port."""

    receiver: EventReceiver
    server: BoundedHTTPServer
    ready: list[ReadyFile] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


@contextmanager
def served(
    tmp: Path,
    *,
    limits: ServerLimits | None = None,
    max_request_size: int = 1 << 20,
    fsync: bool = True,
    body_budget: int | None = None,
    **spool_options: int,
) -> Iterator[Served]:
    ready: list[ReadyFile] = []
    spool = Spool(
        tmp / "spool", "c_ns", max_file_size=1 << 20, rotation_interval=300.0, fsync=fsync, on_ready=ready.append,
        **spool_options,
    )  # fmt: skip
    receiver = EventReceiver(
        spool=spool, quarantine=Quarantine(tmp / "spool" / "quarantine.jsonl"), metrics=CollectorMetrics(),
        max_disk=1 << 34, max_request_size=max_request_size, fallback_node=lambda: NODE, limits=limits,
        **({} if body_budget is None else {"body_budget": body_budget}),
    )  # fmt: skip
    server = receiver.make_server("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(receiver, server, ready)
    finally:
        server.shutdown()
        server.server_close()
        spool.close()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        data: dict[str, object] = json.loads(self.body)
        return data


def read_answer(sock: socket.socket) -> Answer | None:
    """One HTTP response from ``sock``; None when the server closed without one."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Answer(status, headers, rest[:length])


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def request(port: int, raw: bytes, timeout: float = 10.0) -> Answer | None:
    """Send ``raw`` as is and read the answer."""
    with connect(port, timeout) as sock:
        sock.sendall(raw)
        return read_answer(sock)


def post_head(length: str | None, *, extra: str = "") -> bytes:
    """Request line and headers of a POST /v1/events, ``length`` sent verbatim."""
    lines = ["POST /v1/events HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def post(port: int, body: bytes, timeout: float = 60.0) -> Answer | None:
    return request(port, post_head(str(len(body))) + body, timeout)


def get(port: int, path: str, timeout: float = 10.0) -> Answer | None:
    return request(port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(), timeout)

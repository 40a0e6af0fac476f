"""A Helm repository served on loopback, with real chart archives: what the release-time
chart checks (infra/kuberay_chart_check.py, infra/metrics_chart_check.py) read."""

from __future__ import annotations

import io
import tarfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml


def chart_archive(chart: str, version: str, values_yaml: str) -> bytes:
    """A chart ``.tgz`` holding ``Chart.yaml`` and the given ``values.yaml`` text."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in (
            ("Chart.yaml", f"apiVersion: v2\nname: {chart}\nversion: {version}\n"),
            ("values.yaml", values_yaml),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"{chart}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@contextmanager
def serve_directory(root: Path, path: str) -> Iterator[str]:
    """Serve ``root`` over HTTP on loopback; yields the URL of ``root/path/``."""
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *_: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{path}/"
    finally:
        server.shutdown()
        server.server_close()


def publish(directory: Path, chart: str, values_by_version: Mapping[str, str]) -> None:
    """Write each version's archive and an ``index.yaml`` listing them into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    for version, values_yaml in values_by_version.items():
        name = f"{chart}-{version}.tgz"
        (directory / name).write_bytes(chart_archive(chart, version, values_yaml))
        entries.append({"name": chart, "version": version, "urls": [name]})
    (directory / "index.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "entries": {chart: entries}}))

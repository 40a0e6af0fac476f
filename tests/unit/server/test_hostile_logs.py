"""Hostile log content (issue #14, item 6): ``filter_ansi_code=true`` on a log a job
wrote to hurt the server. The real app over a local bucket, timed against the
same read unfiltered; normal logs keep exactly today's output."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient

from runtime.server.app import create_app
from runtime.server.logs.tail import MAX_PENDING_SGR, AnsiFilter, filter_ansi, filtered
from runtime.storage.layout import KeyLayout
from tests.support.app_world import FakeLive, enter, server_config, stored_session_a

pytestmark = pytest.mark.hostile

BOMB_MIB = 32


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> FlaskClient:
    root = tmp_path_factory.mktemp("ansi-bomb")
    config = server_config(root)
    store, sample = stored_session_a(config)
    log_key = KeyLayout("").log_key
    # What any job can print: an escape sequence that never ends.
    bomb = b"\x1b[" + b"7" * (BOMB_MIB * 1024 * 1024)
    store.put_bytes(log_key(sample.cluster, sample.session, sample.node_id, "bomb.log"), bomb)
    client = create_app(config, store=store, live=FakeLive()).test_client()
    enter(client, sample)
    client.node_id = sample.node_id  # type: ignore[attr-defined]
    return client


def _timed_read(client: FlaskClient, query: str) -> tuple[float, int]:
    started = time.perf_counter()
    answer = client.get(f"/api/v0/logs/file?{query}")
    size = len(answer.get_data())  # the body is streamed: reading it is the work
    assert answer.status_code == 200
    return time.perf_counter() - started, size


def test_escape_bomb_costs_about_as_much_as_the_unfiltered_read(client: FlaskClient) -> None:
    query = f"node_id={client.node_id}&filename=bomb.log&lines=-1"  # type: ignore[attr-defined]
    _timed_read(client, query)  # warm the index and the page cache
    plain = min(_timed_read(client, query)[0] for _ in range(2))
    seconds, size = min(_timed_read(client, f"{query}&filter_ansi_code=true") for _ in range(2))
    # Not a colour code: passed through as Ray's dashboard does, not swallowed.
    assert size == BOMB_MIB * 1024 * 1024 + 2
    # Before the fix: ~30x for this size (1 MiB chunks, the pending part re-scanned each time);
    # after: ~1.5x.
    assert seconds < 5 * plain + 0.2, f"filtered {seconds:.2f} s vs unfiltered {plain:.2f} s"


def _old_feed(pending: bytes, chunk: bytes) -> tuple[bytes, bytes]:
    """The filter as it was before the fix (unbounded pending state), for comparison."""
    data = pending + chunk
    partial = re.search(rb"\x1b(\[[0-9;]*)?\Z", data)
    if partial is not None:
        return filter_ansi(data[: partial.start()]), data[partial.start() :]
    return filter_ansi(data), b""


def _old_filtered(chunks: list[bytes]) -> bytes:
    out, pending = [], b""
    for chunk in chunks:
        done, pending = _old_feed(pending, chunk)
        out.append(done)
    return b"".join(out) + pending


def _normal_log(rng: random.Random) -> bytes:
    """Lines like Ray's loggers write: colours, resets, bold, 256-colour codes."""
    codes = [b"\x1b[0m", b"\x1b[m", b"\x1b[32m", b"\x1b[1;31m", b"\x1b[38;5;208m", b"\x1b[2K"]
    lines = []
    for n in range(400):
        parts = [rng.choice(codes) if rng.random() < 0.4 else b"" for _ in range(3)]
        lines.append(b"%s(pid=%d) %sline %d \xe2\x9c\x93%s\n" % (parts[0], n, parts[1], n, parts[2]))
    return b"".join(lines)


def _split(data: bytes, rng: random.Random) -> Iterator[bytes]:
    pos = 0
    while pos < len(data):
        step = rng.choice((1, 2, 3, 7, 64, 1000))
        yield data[pos : pos + step]
        pos += step


@pytest.mark.parametrize("seed", range(5))
def test_normal_logs_filter_exactly_as_before(seed: int) -> None:
    rng = random.Random(seed)
    data = _normal_log(rng)
    chunks = list(_split(data, rng))
    expected = _old_filtered(chunks)
    assert b"".join(filtered(iter(chunks), True)) == expected
    assert expected == filter_ansi(data)  # and chunking never changes the answer


def test_pending_state_is_bounded() -> None:
    ansi = AnsiFilter()
    emitted = ansi.feed(b"ok \x1b[")
    assert emitted == b"ok "  # a short unfinished sequence waits for its end
    assert ansi.feed(b"32mgreen") == b"green"
    out = [ansi.feed(b"\x1b["), *(ansi.feed(b"1" * 100) for _ in range(10))]
    assert len(ansi.flush()) <= MAX_PENDING_SGR
    assert b"".join(out).startswith(b"\x1b[1")  # too long to be a colour: passed through

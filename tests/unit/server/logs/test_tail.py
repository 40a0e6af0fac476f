"""Last-N-lines from ranged reads, windowed streaming, ANSI filtering."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.server.logs.tail import AnsiFilter, filter_ansi, filtered, iter_window, tail_window


class Ranged:
    """A byte string read through ``read(offset, length)``, recording each call."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []

    def __call__(self, offset: int, length: int) -> bytes:
        self.calls.append((offset, length))
        return self.data[offset : offset + length]

    @property
    def bytes_read(self) -> int:
        return sum(length for _, length in self.calls)


def expected_tail(data: bytes, lines: int) -> bytes:
    """The reference semantics: split on \\n, a final \\n ends the last line."""
    if not data:
        return b""
    body = data[:-1] if data.endswith(b"\n") else data
    parts = body.split(b"\n")
    kept = b"\n".join(parts[-lines:])
    return kept + (b"\n" if data.endswith(b"\n") else b"")


@pytest.mark.parametrize(
    ("data", "lines", "want"),
    [
        (b"", 5, b""),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"\n\n\n", 2, b"\n\n"),
        (b"only one line", 1, b"only one line"),
        (b"x\r\ny\r\n", 1, b"y\r\n"),
    ],
)
def test_tail_table(data: bytes, lines: int, want: bytes) -> None:
    assert tail_window(Ranged(data), 0, len(data), lines, first_chunk=2) == want


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\r", b"\x1b[31m", b"long" * 10]), max_size=60).map(b"".join),
    lines=st.integers(1, 20),
    first_chunk=st.integers(1, 16),
)
def test_tail_matches_the_simple_definition(data: bytes, lines: int, first_chunk: int) -> None:
    assert tail_window(Ranged(data), 0, len(data), lines, first_chunk=first_chunk, max_chunk=64) == expected_tail(
        data, lines
    )


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=200),
    window=st.tuples(st.integers(0, 200), st.integers(0, 200)),
    lines=st.integers(1, 9),
)
def test_tail_of_a_byte_window(data: bytes, window: tuple[int, int], lines: int) -> None:
    start, end = sorted(min(w, len(data)) for w in window)
    got = tail_window(Ranged(data), start, end, lines, first_chunk=3)
    assert got == expected_tail(data[start:end], lines)


def test_tail_reads_from_the_end_only() -> None:
    data = b"".join(b"line %06d\n" % i for i in range(200_000))  # 2.4 MB
    reader = Ranged(data)
    got = tail_window(reader, 0, len(data), 50)
    assert got == b"".join(b"line %06d\n" % i for i in range(199_950, 200_000))
    assert reader.bytes_read == 64 * 1024  # one ranged read of the last 64 KiB
    assert reader.calls[0] == (len(data) - 64 * 1024, 64 * 1024)


def test_lines_longer_than_64_kib() -> None:
    long_line = b"x" * (300 * 1024)
    data = b"first\n" + long_line + b"\n" + long_line + b"y\n"
    reader = Ranged(data)
    assert tail_window(reader, 0, len(data), 1) == long_line + b"y\n"
    assert tail_window(reader, 0, len(data), 2) == long_line + b"\n" + long_line + b"y\n"
    assert tail_window(reader, 0, len(data), 3) == data


def test_tail_is_capped_at_max_bytes_on_a_line_boundary() -> None:
    data = b"".join(b"%05d\n" % i for i in range(1000))  # 6 bytes per line
    got = tail_window(Ranged(data), 0, len(data), 900, first_chunk=8, max_bytes=60)
    assert got == b"".join(b"%05d\n" % i for i in range(990, 1000))


def test_short_read_is_an_error() -> None:
    with pytest.raises(OSError, match="short read"):
        tail_window(lambda offset, length: b"", 0, 10, 1)


def test_iter_window_streams_in_chunks() -> None:
    data = bytes(range(256)) * 10
    reader = Ranged(data)
    chunks = list(iter_window(reader, 100, 2000, chunk_size=300))
    assert b"".join(chunks) == data[100:2000]
    assert max(len(c) for c in chunks) == 300


def test_iter_window_stops_at_a_shorter_object() -> None:
    assert b"".join(iter_window(Ranged(b"abc"), 0, 10, chunk_size=2)) == b"abc"


def test_filter_ansi_removes_colour_codes_only() -> None:
    text = b"\x1b[36mray::task()\x1b[39m (pid=1) \x1b[1;31mERR\x1b[0m \x1b[2J plain"
    assert filter_ansi(text) == b"ray::task() (pid=1) ERR \x1b[2J plain"


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from([b"a", b"\x1b", b"[", b"3", b";", b"m", b"\n", b"\x1b[31m", b"\x1b[0m"]), max_size=40
    ),
    cuts=st.lists(st.integers(0, 80), max_size=6),
)
def test_incremental_filter_equals_whole_filter(parts: list[bytes], cuts: list[int]) -> None:
    data = b"".join(parts)
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    assert b"".join(filtered(iter(chunks), True)) == filter_ansi(data)
    assert b"".join(filtered(iter(chunks), False)) == data


def test_ansi_filter_holds_back_a_split_sequence() -> None:
    ansi = AnsiFilter()
    assert ansi.feed(b"red \x1b[3") == b"red "
    assert ansi.feed(b"1mtext") == b"text"
    assert ansi.flush() == b""


def test_capped_tail_drops_a_partial_first_line() -> None:
    data = b"".join(b"%05d\n" % i for i in range(1000))
    got = tail_window(Ranged(data), 0, len(data), 900, first_chunk=8, max_bytes=63)
    assert got == b"".join(b"%05d\n" % i for i in range(990, 1000))


def test_a_tail_of_one_endless_line_reads_at_most_sixteen_mib() -> None:
    """The job picks its lines' length: a 1 GiB line made each tail request hold the
    64 MiB cap about three times over."""
    size = 64 * 1024 * 1024
    asked: list[int] = []

    def read(offset: int, length: int) -> bytes:
        asked.append(length)
        return b"x" * length if offset + length < size else b"x" * (length - 1) + b"\n"

    got = tail_window(read, 0, size, 1000)
    assert sum(asked) <= 16 * 1024 * 1024 + 1
    assert len(got) <= 16 * 1024 * 1024

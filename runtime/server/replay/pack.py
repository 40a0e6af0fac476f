"""Packing the stored task JSON (``tasks.extra_json``) with zstd.

A task's detail-only JSON is ~1.4 KB, nearly all of it keys and values its neighbours
repeat (runtime env, log paths, ids of one job or node). Compressed one by one with
a raw-content dictionary made of the first rows of its id range, a row shrinks
~10x for ~2 us, and reads back in ~1.5 us (10,000 rows: ~15 ms), so list answers
stay row reads without a decode of the JSON.

Stored form: plain JSON (first byte ``{``) or one byte, the dictionary's number in
``task_dicts``, then a magicless zstd frame. A value that would not shrink stays
plain, so readers accept both forms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import zstandard

#: A dictionary of at most this many leading rows (their extra_json) of an id range.
DICT_ROWS = 32
DICT_MAX_BYTES = 64 * 1024
_LEVEL = 3  # as fast as level 1 on values this small (~2.5 us each), their bytes 6 % fewer
_PLAIN = ord("{")


def make_dict(samples: Iterable[bytes]) -> bytes:
    """A raw-content dictionary from sample values (deterministic: no training)."""
    out = bytearray()
    for sample in samples:
        if len(out) + len(sample) > DICT_MAX_BYTES:
            break
        out += sample
    return bytes(out)


def _dict(data: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(data, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def packer(dict_no: int, dict_data: bytes) -> Callable[[bytes], bytes]:
    """``pack(json_bytes) -> stored bytes`` with dictionary ``dict_no``."""
    if not 0 <= dict_no < _PLAIN:
        raise ValueError(f"dictionary number {dict_no} out of range")
    params = zstandard.ZstdCompressionParameters.from_level(
        _LEVEL, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_checksum=0, write_content_size=1, write_dict_id=0
    )
    compress = zstandard.ZstdCompressor(dict_data=_dict(dict_data), compression_params=params).compress
    marker = bytes((dict_no,))

    def pack(data: bytes) -> bytes:
        packed = marker + compress(data)
        return packed if len(packed) < len(data) else data

    return pack


class Unpacker:
    """Reads stored values back; ``load(dict_no)`` fetches a dictionary the first
    time a value needs it (a page of rows of one id range needs one)."""

    def __init__(self, load: Callable[[int], bytes | None]) -> None:
        self._load = load
        self._decompress: dict[int, Callable[[bytes], bytes]] = {}

    def __call__(self, value: bytes) -> bytes:
        if not value or value[0] == _PLAIN:
            return value
        decompress = self._decompress.get(value[0])
        if decompress is None:
            data = self._load(value[0])
            if data is None:
                raise ValueError(f"stored task JSON names dictionary {value[0]}, which the index does not hold")
            magicless = zstandard.FORMAT_ZSTD1_MAGICLESS
            decompressor = zstandard.ZstdDecompressor(dict_data=_dict(data), format=magicless)
            decompress = self._decompress[value[0]] = decompressor.decompress
        return decompress(value[1:])

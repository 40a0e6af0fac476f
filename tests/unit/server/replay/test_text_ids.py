"""Text ids are the first 63 bits of the text's 8-byte BLAKE2b, in every build."""

from __future__ import annotations

import hashlib
import random

from runtime.server.replay.task_detail import text_id


def test_text_ids_are_the_texts_blake2b() -> None:
    """The shards of one build share texts by id (INSERT OR IGNORE): every worker process
    must derive the same id from the same bytes, which a per-process hash would not."""
    rng = random.Random(7)
    texts = [b"", b"{}", *(rng.randbytes(rng.randrange(1, 400)) for _ in range(300))]
    for data in texts:
        assert text_id(data) == int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") >> 1
    assert text_id(b"{}") == text_id(b"{}") and 0 <= text_id(b"x") < 2**63

"""Id normalisation for replay: :func:`runtime.common.ids.to_hex_id` semantics, memoised.

A session repeats the same few job, node, worker and parent ids millions of times;
converting each occurrence would cost more than the rest of the replay. Unlike the
storage helper, an undecodable id is kept as given (KubeRay's Go history server does the same).
"""

from __future__ import annotations

import binascii
import logging
import re

from runtime.common.ids import InvalidIdError, to_hex_id

logger = logging.getLogger(__name__)

_HEX = re.compile(r"[0-9a-fA-F]+")


def hex_id(raw: object) -> str:
    """Lower-case hex for a Ray id (hex or base64), ``""`` for none, else the text."""
    if raw is None or raw == "":
        return ""
    if type(raw) is str:
        if _HEX.fullmatch(raw):
            return raw.lower()
        try:
            # Ray's own encoding (standard, padded); decodes exactly like to_hex_id would.
            return binascii.a2b_base64(raw, strict_mode=True).hex()
        except (binascii.Error, ValueError):
            pass
    if not isinstance(raw, (str, int)):
        return ""
    try:
        return to_hex_id(raw)
    except InvalidIdError:
        logger.debug("keeping undecodable id %r", raw)
        return str(raw)


def is_nil(hex_value: str) -> bool:
    """Ray's "nil" ids are all 0xff bytes."""
    return bool(hex_value) and hex_value.strip("f") == ""


class IdCache:
    """Memoised :func:`hex_id`, bounded by starting over when full (ids that repeat,
    such as job and parent ids, are re-learnt at once)."""

    __slots__ = ("_limit", "known")

    def __init__(self, limit: int = 1 << 18) -> None:
        #: raw -> hex; hot loops may read it directly (``known.get(raw) or cache(raw)``)
        self.known: dict[object, str] = {}
        self._limit = limit

    def __call__(self, raw: object) -> str:
        found = self.known.get(raw) if type(raw) is str else None
        if found is not None:
            return found
        value = hex_id(raw)
        if type(raw) is str and value:
            if len(self.known) >= self._limit:
                self.known.clear()
            self.known[raw] = value
        return value

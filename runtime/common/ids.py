"""Ray ID normalisation, byte-compatible with KubeRay's Go history server
("the reference", its ``ConvertBase64ToHex``).

Ray events carry IDs as base64 (protobuf ``bytes`` through ``MessageToJson``); the
storage layout and the dashboard use lower-case hex. Order matters and follows the
reference: hex passes through, then URL-safe unpadded base64, then standard padded.
"""

from __future__ import annotations

import base64
import binascii
import re

_HEX = re.compile(r"^[0-9a-fA-F]+$")
_URLSAFE_RAW = re.compile(r"^[A-Za-z0-9_-]+$")
_STD_PADDED = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


class InvalidIdError(ValueError):
    """An ID that is neither hex nor base64."""


def to_hex_id(value: str | int) -> str:
    """Normalise a Ray ID to lower-case hex.

    ``"AQAAAA=="`` -> ``"01000000"``; ``"ABCDEF"`` -> ``"abcdef"``; numbers are
    stringified first (``7`` -> ``"7"``). Raises InvalidIdError otherwise.
    """
    text = str(value).strip()
    if not text:
        raise InvalidIdError("empty ID")
    if _HEX.fullmatch(text):
        return text.lower()
    if _URLSAFE_RAW.fullmatch(text) and len(text) % 4 != 1:
        try:
            return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True).hex()
        except (binascii.Error, ValueError):
            pass
    if _STD_PADDED.fullmatch(text) and len(text) % 4 == 0:
        try:
            return base64.b64decode(text, validate=True).hex()
        except (binascii.Error, ValueError):
            pass
    raise InvalidIdError(f"ID {text!r} is neither hex nor base64")


def to_hex_id_or_none(value: object) -> str | None:
    """Like :func:`to_hex_id` but answers None for missing or undecodable values."""
    if value is None or value == "":
        return None
    if not isinstance(value, (str, int)):
        return None
    try:
        return to_hex_id(value)
    except InvalidIdError:
        return None


def hex_to_base64(hex_id: str) -> str:
    """Hex ID back to the standard padded base64 Ray events use."""
    try:
        raw = bytes.fromhex(hex_id)
    except ValueError as exc:
        raise InvalidIdError(f"ID {hex_id!r} is not hex") from exc
    return base64.b64encode(raw).decode("ascii")

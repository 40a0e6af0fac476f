"""Generic object-key rules, enforced by every backend before any I/O.

Keys are used verbatim (``?``, ``&``, ``=`` are ordinary characters), but a key
must be a clean relative POSIX path, so the same key means the same object on the
local backend as on a cloud bucket and nothing can climb out of a directory.
"""

from __future__ import annotations

import re

from runtime.storage.errors import InvalidKeyError

MAX_KEY_BYTES = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_segments(text: str, what: str) -> None:
    if text.startswith("/"):
        raise InvalidKeyError(f"{what} {text!r} must be relative (no leading '/')")
    if "\\" in text:
        raise InvalidKeyError(f"{what} {text!r} must use '/' as separator, not '\\'")
    if _CONTROL.search(text):
        raise InvalidKeyError(f"{what} {text!r} contains control characters")
    if len(text.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidKeyError(f"{what} is longer than {MAX_KEY_BYTES} bytes")
    parts = text.split("/")
    if text.endswith("/"):
        parts = parts[:-1]
    for part in parts:
        if part == "":
            raise InvalidKeyError(f"{what} {text!r} contains an empty path segment ('//')")
        if part in (".", ".."):
            raise InvalidKeyError(f"{what} {text!r} contains a '{part}' segment")


def validate_key(key: str) -> str:
    """Return ``key`` if it names an object: a non-empty relative path without
    empty, ``.`` or ``..`` segments and without a trailing ``/``."""
    if not isinstance(key, str) or not key:
        raise InvalidKeyError("object key must be a non-empty string")
    if key.endswith("/"):
        raise InvalidKeyError(f"object key {key!r} must not end with '/'")
    _check_segments(key, "object key")
    return key


def validate_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is usable for listing: empty, or a key-like string
    that may end with ``/`` or in the middle of a name."""
    if not isinstance(prefix, str):
        raise InvalidKeyError("prefix must be a string")
    if prefix:
        _check_segments(prefix, "prefix")
    return prefix

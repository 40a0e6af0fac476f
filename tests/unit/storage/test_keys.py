"""Generic key rules applied by every backend before any I/O."""

from __future__ import annotations

import pytest

from runtime.storage.errors import InvalidKeyError
from runtime.storage.keys import validate_key, validate_prefix


@pytest.mark.parametrize(
    "key",
    ["a", "a/b/c", "x/restful__api__v0__placement_groups?detail=1&limit=10000", "a/.hidden", "a/b c", "ü/ñ"],
)
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize(
    "key", ["", "/a", "a/", "a//b", "a/../b", "..", ".", "a/./b", "a\\b", "a\x00b", "a\nb", "x" * 1025]
)
def test_invalid_keys(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_key(key)


@pytest.mark.parametrize("prefix", ["", "a/", "a/b", "a/se"])
def test_valid_prefixes(prefix: str) -> None:
    assert validate_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["/a", "a//", "../", "a/../"])
def test_invalid_prefixes(prefix: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_prefix(prefix)

"""ID normalisation follows the ConvertBase64ToHex order of KubeRay's Go history server
("the reference")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.common.ids import InvalidIdError, hex_to_base64, to_hex_id, to_hex_id_or_none


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("AQAAAA==", "01000000"),
        ("AgAAAA==", "02000000"),
        ("ABCDEF0123", "abcdef0123"),
        (7, "7"),
        ("AQAAAA", "01000000"),  # URL-safe unpadded
        ("-_-_", "fbffbf"),  # URL-safe alphabet
        ("+/+/", "fbffbf"),  # standard alphabet
    ],
)
def test_to_hex_id(value: str | int, expected: str) -> None:
    assert to_hex_id(value) == expected


@pytest.mark.parametrize("value", ["AQAAAA_==", "", "not base64!", "ab=c", "Z"])
def test_undecodable_ids_raise(value: str) -> None:
    with pytest.raises(InvalidIdError):
        to_hex_id(value)
    assert to_hex_id_or_none(value) is None


def test_none_and_odd_types() -> None:
    assert to_hex_id_or_none(None) is None
    assert to_hex_id_or_none({"a": 1}) is None


@given(st.binary(min_size=1, max_size=40))
def test_base64_round_trip(raw: bytes) -> None:
    # Hex is tried first (as in the reference), so a base64 text made only of hex
    # digits reads as hex; every other one decodes back to the raw bytes.
    assert to_hex_id(hex_to_base64(raw.hex())) in {raw.hex(), hex_to_base64(raw.hex()).lower()}

"""Content-Disposition values: one safe file name, ASCII plus RFC 5987 UTF-8."""

from __future__ import annotations

import pytest

from runtime.server.logs.disposition import content_disposition, safe_filename


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("raylet.out", "raylet.out"),
        ("../../etc/passwd", "passwd"),
        ('a"b;c.txt', "a_b_c.txt"),
        ("dir\\file.log", "file.log"),
        ("..", "file.txt"),
        ("", "file.txt"),
        ("line\r\nbreak", "line__break"),
    ],
)
def test_safe_filename(name: str, want: str) -> None:
    assert safe_filename(name) == want


def test_attachment_and_inline() -> None:
    assert content_disposition("x.log", attachment=True) == 'attachment; filename="x.log"'
    assert content_disposition("raylet.out", attachment=False) == 'inline; filename="raylet.out"'


def test_non_ascii_name_gets_an_encoded_variant() -> None:
    header = content_disposition("журнал.txt", attachment=True)
    assert header.startswith("attachment; filename=\"______.txt\"; filename*=UTF-8''")
    assert "%D0%B6" in header

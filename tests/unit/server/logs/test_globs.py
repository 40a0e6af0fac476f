"""``glob=`` validation, base-dir split and matching (pathlib semantics, base kept)."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.server.logs.globs import LogGlob, match_names, parse_glob
from runtime.storage.errors import InvalidKeyError

FILES = [
    "raylet.out",
    "raylet.err",
    "worker-abc-01000000-11.out",
    "python-core-worker-abc_11.log",
    "events/event_GCS.log",
    "events/event_RAYLET.log",
    "jobs/supervisor-x.log",
    "old/deep/worker-old-1.out",
    ".hidden",
]


@pytest.mark.parametrize(
    ("pattern", "base", "segments"),
    [
        (None, "", ("*",)),
        ("", "", ("*",)),
        ("*worker*", "", ("*worker*",)),
        ("raylet.out", "", ("raylet.out",)),
        ("events/*", "events", ("*",)),
        ("events/event_GCS.log", "events", ("event_GCS.log",)),
        ("old/deep/*.out", "old/deep", ("*.out",)),
        ("old/*/w*", "old", ("*", "w*")),
        ("**/*.log", "", ("**", "*.log")),
        ("events/", "", ("events",)),
    ],
)
def test_parse_splits_at_the_last_literal_directory(pattern: str | None, base: str, segments: tuple[str, ...]) -> None:
    assert parse_glob(pattern) == LogGlob(base, segments)


@pytest.mark.parametrize(
    "pattern",
    [
        "/etc/passwd",
        "../x",
        "..",
        "a/../b",
        "./a",
        "a//b",
        "a\\b",
        "a\x00b",
        "*" * 600,
        "/".join(["**"] * 6),
        "ev ts/*",
    ],
)
def test_parse_rejects_traversal_and_junk(pattern: str) -> None:
    with pytest.raises(InvalidKeyError):
        parse_glob(pattern)


@pytest.mark.parametrize(
    ("pattern", "want"),
    [
        (
            "*",
            [
                ".hidden",
                "events/",
                "jobs/",
                "old/",
                "python-core-worker-abc_11.log",
                "raylet.err",
                "raylet.out",
                "worker-abc-01000000-11.out",
            ],
        ),
        ("*worker*", ["python-core-worker-abc_11.log", "worker-abc-01000000-11.out"]),
        ("raylet.*", ["raylet.err", "raylet.out"]),
        ("events/*", ["events/event_GCS.log", "events/event_RAYLET.log"]),  # base kept: openable names
        ("events/event_GCS.log", ["events/event_GCS.log"]),
        ("**/*.out", ["old/deep/worker-old-1.out", "raylet.out", "worker-abc-01000000-11.out"]),
        ("old/**", ["old/deep/", "old/deep/worker-old-1.out"]),
        ("old/*", ["old/deep/"]),
        ("*/*.log", ["events/event_GCS.log", "events/event_RAYLET.log", "jobs/supervisor-x.log"]),
        ("nothing*", []),
        ("[rw]*.out", ["raylet.out", "worker-abc-01000000-11.out"]),
    ],
)
def test_match(pattern: str, want: list[str]) -> None:
    assert match_names(FILES, parse_glob(pattern)) == want


def _materialise(root: pathlib.Path, files: list[str]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")


@pytest.mark.parametrize(
    "pattern", ["*", "*worker*", "events/*", "*/*.log", "old/*", "raylet.out", "**/*.out", "*.out"]
)
def test_same_names_as_pathlib_glob_on_a_real_directory(tmp_path: pathlib.Path, pattern: str) -> None:
    """What the live dashboard does (``Path(logs).glob(glob)``), for the patterns whose
    meaning did not change across Python versions."""
    _materialise(tmp_path, FILES)
    live = sorted(str(p.relative_to(tmp_path)) + ("/" if p.is_dir() else "") for p in tmp_path.glob(pattern))
    assert match_names(FILES, parse_glob(pattern)) == live


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab*?/.[]", max_size=12))
def test_matching_never_crashes_and_never_leaves_the_base(pattern: str) -> None:
    try:
        glob = parse_glob(pattern)
    except InvalidKeyError:
        return
    for name in match_names(FILES, glob):
        assert not name.startswith("/") and ".." not in name.split("/")
        assert name.startswith(f"{glob.base}/" if glob.base else "")

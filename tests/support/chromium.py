"""Headless Debian Chromium driven by Playwright, for the browser tests against a real server."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: The flags a sandboxed root container needs, and no calls to Google's services.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def chromium_page(artifacts: Path, timeout_ms: int, viewport: dict[str, int] | None = None) -> Iterator[Any]:
    """A fresh page (skips the test when Chromium is missing); ``artifacts`` is created for screenshots."""
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (make test installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    artifacts.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=viewport) if viewport else browser.new_context()
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        try:
            yield page
        finally:
            browser.close()

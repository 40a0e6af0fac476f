"""Registers the ``kind`` marker until pyproject.toml lists it (pytest runs with --strict-markers)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kind: needs kind, docker and the pulumi CLI; deploys the kind stack end to end")

"""Pulumi entry point (``main: infra/`` in Pulumi.yaml): deploys the stack's configuration.

Pulumi runs this file with ``infra/`` itself as the program directory, so the
repository root is not importable by default. It is put on ``sys.path`` here, once,
so every module imports as ``infra.…`` exactly as under pytest (which runs from the
root); modules never rely on ``infra/`` being on the path.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from infra.program import deploy  # noqa: E402 - needs the path above

deploy()

"""Child processes that a test stops with SIGINT, as Ctrl-C would.

A shell without job control (``make test &``, ``nohup``, CI runners) starts its
background commands with SIGINT *ignored*; every descendant inherits that, and
Python then installs no KeyboardInterrupt handler: the test's Ctrl-C would never
arrive. Such children get the default disposition back, as in a terminal.
"""

from __future__ import annotations

import sys

# Restores SIGINT's default, then becomes the real command (same pid). A launcher
# instead of ``preexec_fn``, which is unsafe while the test process runs threads.
_LAUNCHER = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"


def with_default_sigint(cmd: list[str]) -> list[str]:
    """``cmd`` run with the default SIGINT disposition, whatever the test process inherited."""
    return [sys.executable, "-c", _LAUNCHER, *cmd]

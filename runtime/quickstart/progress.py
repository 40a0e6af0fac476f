"""One line per step on the terminal, with how long the step took."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class StepOutcome:
    """What a step reports at its end (``detail``), filled in by the step's body."""

    def __init__(self) -> None:
        self.detail = ""


class Progress:
    def __init__(self, out: TextIO, total_steps: int) -> None:
        self.out = out
        self.total_steps = total_steps
        self.done = 0
        self.started = time.monotonic()

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    @contextmanager
    def step(self, title: str) -> Iterator[StepOutcome]:
        """``[3/9] title ... done in 4.2 s (detail)``; on an exception ``failed after ...``."""
        self.done += 1
        width = len(str(self.total_steps))
        print(f"[{self.done:>{width}}/{self.total_steps}] {title} ...", end="", file=self.out, flush=True)
        outcome = StepOutcome()
        began = time.monotonic()
        try:
            yield outcome
        except BaseException:
            print(f" failed after {time.monotonic() - began:.1f} s", file=self.out, flush=True)
            raise
        detail = f" ({outcome.detail})" if outcome.detail else ""
        print(f" done in {time.monotonic() - began:.1f} s{detail}", file=self.out, flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

"""The quickstart's sample job: a small pipeline a person would want to debug.

Named tasks load and clean batches of readings, an actor keeps running totals,
and one validation task fails with a traceback, which fails the job. Every part
prints to stdout and stderr, so the Dashboard's log views have something to show.
Run by the quickstart as ``python -m runtime.quickstart.sample_job`` through the
Ray Jobs API.
"""

# ruff: noqa: T201 - a Ray job whose output is part of the demo
from __future__ import annotations

import sys
from typing import Any

import ray

BATCHES = 4
BAD_BATCH = 2
#: The text the quickstart's test looks for in the Dashboard.
FAILURE_MESSAGE = "reading -7.5 in batch 2 is negative"


@ray.remote(num_cpus=0.25)
def load_batch(batch: int) -> list[float]:
    readings = [float(batch * 10 + i) for i in range(5)]
    if batch == BAD_BATCH:
        readings[3] = -7.5  # the corrupt reading the job will trip over
    print(f"load_batch: batch {batch} has {len(readings)} readings")
    return readings


@ray.remote(num_cpus=0.25)
def clean_batch(batch: int, readings: list[float]) -> list[float]:
    print(f"clean_batch: rounding batch {batch}")
    print(f"clean_batch: batch {batch} is not validated yet", file=sys.stderr)
    return [round(value, 1) for value in readings]


@ray.remote(num_cpus=0.25, max_retries=0)
def validate_batch(batch: int, readings: list[float]) -> int:
    print(f"validate_batch: checking {len(readings)} readings of batch {batch}")
    for value in readings:
        if value < 0:
            raise ValueError(f"reading {value} in batch {batch} is negative")
    return len(readings)


@ray.remote(num_cpus=0.25)
class RunningTotals:
    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        print("RunningTotals: started")

    def add(self, readings: list[float]) -> float:
        self.count += len(readings)
        self.total += sum(readings)
        print(f"RunningTotals: {self.count} readings so far")
        return self.total

    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


def main() -> None:
    ray.init()
    print(f"sample job: processing {BATCHES} batches")
    print("sample job: this job fails on purpose in validate_batch", file=sys.stderr)
    totals: Any = RunningTotals.options(name="running-totals").remote()  # type: ignore[attr-defined]
    validated = []
    for batch in range(BATCHES):
        loaded = load_batch.options(name=f"load-batch-{batch}").remote(batch)
        cleaned = clean_batch.options(name=f"clean-batch-{batch}").remote(batch, loaded)
        ray.get(totals.add.remote(cleaned))
        validated.append(validate_batch.options(name=f"validate-batch-{batch}").remote(batch, cleaned))
    print(f"sample job: mean reading {ray.get(totals.mean.remote()):.2f}")
    # Raises the validation task's ValueError (with its remote traceback): the job fails.
    print(f"sample job: {sum(ray.get(validated))} readings validated")


if __name__ == "__main__":
    main()

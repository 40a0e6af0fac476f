"""A job that makes thousands of events quickly: waves of tiny named tasks, one
that fails, and prints to stdout and stderr. Used by the collector fault tests."""

import sys
import time

import ray


@ray.remote(num_cpus=0.1)
def tiny(i: int) -> int:
    if i % 500 == 0:
        print(f"[stdout] tiny {i}", flush=True)
    return i


@ray.remote(num_cpus=0.1, max_retries=0)
def fails() -> None:
    raise ValueError("intentional failure in the fault-test workload")


def main() -> None:
    ray.init()
    waves = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    for wave in range(waves):
        total = sum(ray.get([tiny.options(name=f"tiny-{wave}").remote(i) for i in range(400)]))
        print(f"[stdout] wave {wave} total {total}", flush=True)
        print(f"[stderr] wave {wave} done", file=sys.stderr, flush=True)
        time.sleep(1.0)
    try:
        ray.get(fails.remote())
    except ray.exceptions.RayTaskError:
        print("[stdout] the failing task failed as expected", flush=True)


if __name__ == "__main__":
    main()

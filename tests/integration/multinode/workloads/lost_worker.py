"""Scenario 2's job: work on the worker, then a task and an actor still there when the
worker "pod" is killed. The driver (on the head) outlives it and reports the failure."""

import time

import ray

ray.init()


@ray.remote(num_cpus=1, resources={"worker_node": 1})
def warm_up(i: int) -> int:
    print(f"warm_up({i}) done on the worker")
    return i


@ray.remote(num_cpus=1, resources={"worker_node": 1}, max_retries=0)
def outlives_its_node() -> None:
    print("outlives_its_node started", flush=True)
    time.sleep(600)


@ray.remote(num_cpus=0, resources={"worker_node": 1}, max_restarts=0)
class Keeper:
    def ping(self) -> str:
        print("Keeper ping", flush=True)
        return "pong"


assert sorted(ray.get([warm_up.remote(i) for i in range(3)])) == [0, 1, 2]
keeper = Keeper.remote()  # type: ignore[attr-defined]  # ray.remote makes it an actor class
assert ray.get(keeper.ping.remote()) == "pong"
try:
    ray.get(outlives_its_node.remote())
    raise SystemExit("outlives_its_node returned although its node was killed")
except ray.exceptions.RayError as exc:
    print(f"outlives_its_node failed with its node: {type(exc).__name__}")

# Ray force-exits a job's workers as soon as its driver exits; their task events are
# flushed every 1 s, so a driver leaving at once loses the last ones (seen: a worker that
# ran its task and was killed before reporting it). Real jobs live longer; this one waits.
time.sleep(3)

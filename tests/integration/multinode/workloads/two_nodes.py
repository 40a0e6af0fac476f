"""Scenario 1's job: tasks pinned to each node by custom resources, a failing task on
the worker, an actor on the worker. Prints what ran where (read back by the test)."""

import time

import ray

ray.init()


@ray.remote(num_cpus=1, resources={"head_node": 1})
def on_head(i: int) -> str:
    print(f"on_head({i}) says hello")
    return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=1, resources={"worker_node": 1})
def on_worker(i: int) -> str:
    print(f"on_worker({i}) says hello")
    return ray.get_runtime_context().get_node_id()


@ray.remote(num_cpus=1, resources={"worker_node": 1}, max_retries=0)
def fails_on_worker() -> None:
    raise ValueError("multinode: this task fails on the worker")


@ray.remote(num_cpus=0, resources={"worker_node": 1})
class Tally:
    def __init__(self) -> None:
        self.total = 0

    def add(self, n: int) -> str:
        self.total += n
        print(f"Tally.add({n}) -> {self.total}")
        return ray.get_runtime_context().get_node_id()


head_nodes = set(ray.get([on_head.remote(i) for i in range(3)]))
worker_nodes = set(ray.get([on_worker.remote(i) for i in range(3)]))
try:
    ray.get(fails_on_worker.remote())
    raise SystemExit("fails_on_worker did not fail")
except ray.exceptions.RayTaskError as exc:
    print(f"fails_on_worker failed as planned: {type(exc).__name__}")
tally = Tally.remote()  # type: ignore[attr-defined]  # ray.remote makes it an actor class
actor_nodes = set(ray.get([tally.add.remote(n) for n in (1, 2, 3)]))
print("placement:", sorted(head_nodes), sorted(worker_nodes), sorted(actor_nodes))
assert len(head_nodes) == 1 and len(worker_nodes) == 1 and head_nodes != worker_nodes, (head_nodes, worker_nodes)
assert actor_nodes == worker_nodes

# Ray force-exits a job's workers as soon as its driver exits; their task events are
# flushed every 1 s, so a driver leaving at once loses the last ones (seen: a worker that
# ran its task and was killed before reporting it). Real jobs live longer; this one waits.
time.sleep(3)

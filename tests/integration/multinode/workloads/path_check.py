"""Run by the harness before each scenario: one task on the worker, so the test knows the
worker's event path (core worker -> its aggregator -> the GCS and its collector) works."""

import time

import ray

ray.init()


@ray.remote(num_cpus=1, resources={"worker_node": 1})
def path_check() -> str:
    print("path_check says hello")
    return ray.get_runtime_context().get_node_id()


print("path_check ran on", ray.get(path_check.remote()))

# Ray force-exits a job's workers as soon as its driver exits; their task events are
# flushed every 1 s, so a driver leaving at once loses the last ones (seen: a worker that
# ran its task and was killed before reporting it). Real jobs live longer; this one waits.
time.sleep(3)

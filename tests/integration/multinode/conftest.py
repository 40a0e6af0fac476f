"""The namespaces every multinode scenario shares (one set per test session, unique
names) and a fresh two-node cluster per test, removed again even when a test fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.multinode.cluster import CLUSTER, TwoNodeCluster
from tests.integration.multinode.netns import Topology, new_topology, unavailable_reason
from tests.integration.ray_harness import ray_available


@pytest.fixture(scope="session")
def topology() -> Iterator[Topology]:
    if not ray_available():
        pytest.fail("ray 2.60 is not installed in this environment")  # the dev venv always has it
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    topo = new_topology()
    try:
        topo.create()
        yield topo
    finally:
        topo.destroy()


@pytest.fixture
def cluster(topology: Topology, tmp_path: Path) -> Iterator[TwoNodeCluster]:
    built = TwoNodeCluster(topology, tmp_path, tmp_path / "bucket", CLUSTER)
    try:
        built.start()
        yield built
    finally:
        built.cleanup()

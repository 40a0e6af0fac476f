"""A job's final status is stored seconds after it ends, not at the next periodic poll.

KubeRay may delete a RayJob's cluster right after the job ends
(``shutdownAfterJobFinishes``, ``ttlSecondsAfterFinished: 0``), and a job's final
status exists only in Ray's ``/api/jobs/``. Here the collector's periodic poll is set
to 10 minutes: only the poll that the head's aggregator's ``DRIVER_JOB_LIFECYCLE_EVENT``
(FINISHED) triggers can store the SUCCEEDED status within the test's 30 s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.ray_harness import HeadWithCollector, head_with_collector, ray_available, unique_id, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
    pytest.mark.timeout(300),
]

CLUSTER = ClusterRef(namespace="default", name="raycluster-job-end")


@pytest.fixture
def head(tmp_path: Path) -> Iterator[HeadWithCollector]:
    with head_with_collector(tmp_path, CLUSTER, RAY_COLLECTOR_POLL_INTERVAL="600s") as running:
        yield running


def _stored_status(bucket: Path, session: str, submission: str) -> str | None:
    key = KeyLayout("hist").endpoint_key(CLUSTER, session, "/api/jobs/")
    try:
        jobs = json.loads((bucket / key).read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    return next((str(j["status"]) for j in jobs if j.get("submission_id") == submission), None)


def test_the_final_status_is_stored_seconds_after_the_job_ends(head: HeadWithCollector, tmp_path: Path) -> None:
    ray, collector, bucket = head.ray, head.collector, head.bucket
    session = ray.session_dir().name
    workdir = tmp_path / "job"
    workdir.mkdir()
    (workdir / "short.py").write_text("import ray\nray.init()\nprint(ray.get(ray.remote(lambda: 42).remote()))\n")
    submission = unique_id("end")
    assert ray.submit("python short.py", workdir, submission) == "SUCCEEDED"

    wait_until(
        lambda: _stored_status(bucket, session, submission) == "SUCCEEDED",
        30,
        "the stored /api/jobs/ snapshot to show the job SUCCEEDED",
    )
    assert "snapshot cycle failed" not in collector.log()

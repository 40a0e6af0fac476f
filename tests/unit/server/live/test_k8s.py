"""KubernetesLiveDirectory with the official client against a stub API server
(see k8s_stub: no real API server can run here, so this tests at the HTTP
protocol level -- paths, selectors, pagination, Status errors -- what the
ClusterRole raycluster-reader allows)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes import client as kclient

from runtime.server.live.directory import live_directory_from_config
from runtime.server.live.discovery import LiveDiscoveryError, UnavailableLiveDirectory
from runtime.server.live.k8s import KubernetesLiveDirectory, cluster_from_object, parse_k8s_time
from tests.integration.emulators.base import free_port
from tests.unit.server.live.k8s_stub import ApiStub, api_stub, raycluster
from tests.unit.server.live.servers import server_config

CRD = Path(__file__).resolve().parents[3] / "fixtures" / "kuberay" / "crds" / "ray.io_rayclusters.yaml"

DEMO = raycluster("raycluster-demo")
CUSTOM_PORT = raycluster("custom", "team-a", dashboard_port=9265)
PENDING = raycluster("pending", "team-a", head_ready=False)
JOB = raycluster("rayjob-sample-raycluster-x2k9", "jobs", owner=("RayJob", "rayjob-sample"))
SVC_OLD = raycluster("svc-raycluster-aaaa", "serve", owner=("RayService", "svc"), created="2026-11-20T00:00:00Z")
SVC_NEW = raycluster("svc-raycluster-bbbb", "serve", owner=("RayService", "svc"), created="2026-11-22T00:00:00Z")
SAME_NAME_JOB = raycluster("svc-job-cluster", "serve", owner=("RayJob", "svc"))
ALL = (DEMO, CUSTOM_PORT, PENDING, JOB, SVC_OLD, SVC_NEW, SAME_NAME_JOB)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stub() -> Iterator[ApiStub]:
    with api_stub(*ALL) as running:
        yield running


def directory(stub_url: str, **kwargs: Any) -> KubernetesLiveDirectory:
    configuration = kclient.Configuration(host=stub_url)
    configuration.retries = 0
    return KubernetesLiveDirectory(kclient.ApiClient(configuration), **kwargs)


def test_stub_objects_match_the_kuberay_crd() -> None:
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loader
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft7Validator(schema)  # jsonschema.validate would re-check the 17k-line schema per call
    for obj in ALL:
        validator.validate(obj)


def test_list_all_namespaces(stub: ApiStub) -> None:
    listing = directory(stub.url).list_clusters()
    assert listing.available and listing.error is None
    by_name = {c.name: c for c in listing.clusters}
    assert set(by_name) == {obj["metadata"]["name"] for obj in ALL}
    demo = by_name["raycluster-demo"]
    assert demo.base_url == "http://raycluster-demo-head-svc.default.svc.cluster.local:8265"
    assert (demo.owner_kind, demo.owner_name) == ("raycluster", "")
    assert demo.created_at == datetime(2026, 11, 22, 1, 45, 20, tzinfo=UTC)
    assert by_name["custom"].base_url.endswith(".team-a.svc.cluster.local:9265")
    assert by_name["pending"].base_url == "" and not by_name["pending"].ready
    job = by_name["rayjob-sample-raycluster-x2k9"]
    assert (job.owner_kind, job.owner_name) == ("rayjob", "rayjob-sample")
    assert stub.paths() == ["/apis/ray.io/v1/rayclusters"]


def test_list_follows_continue_tokens(stub: ApiStub) -> None:
    listing = directory(stub.url, page_size=2).list_clusters()
    assert len(listing.clusters) == len(ALL)
    assert len(stub.requests) == 4
    assert [q.get("continue", [""])[0] for _, q, _ in stub.requests] == ["", "2", "4", "6"]


def test_get_found_and_not_found(stub: ApiStub) -> None:
    live = directory(stub.url, cluster_domain="corp.example")
    found = live.get("team-a", "custom")
    assert found is not None and found.base_url == "http://custom-head-svc.team-a.svc.corp.example:9265"
    assert live.get("default", "gone") is None
    assert stub.paths()[-1] == "/apis/ray.io/v1/namespaces/default/rayclusters/gone"


def test_lookups_are_cached_briefly(stub: ApiStub) -> None:
    clock = Clock()
    live = directory(stub.url, cache_ttl=5.0, clock=clock)
    assert live.get("default", "raycluster-demo") is not None
    assert live.get("default", "gone") is None
    assert live.get("default", "raycluster-demo") is not None
    assert live.get("default", "gone") is None
    assert len(stub.requests) == 2
    clock.now += 6
    live.get("default", "raycluster-demo")
    assert len(stub.requests) == 3
    # A listing also answers later gets.
    live.list_clusters()
    live.get("team-a", "custom")
    assert len(stub.requests) == 4


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        ("RayJob", "rayjob-sample", "rayjob-sample-raycluster-x2k9"),
        ("rayservice", "svc", "svc-raycluster-aaaa"),  # the older, serving cluster of an upgrade
        ("rayjob", "svc", "svc-job-cluster"),  # same name, other kind: the CRD label tells them apart
        ("raycluster", "raycluster-demo", "raycluster-demo"),
        ("rayjob", "nothing", None),
    ],
)
def test_find_for_owner(stub: ApiStub, kind: str, name: str, expected: str | None) -> None:
    namespace = {"rayjob-sample": "jobs", "svc": "serve", "raycluster-demo": "default"}.get(name, "jobs")
    found = directory(stub.url).find_for_owner(namespace, kind, name)
    assert (found.name if found else None) == expected
    if found is not None and kind.lower() != "raycluster":
        assert (found.owner_kind, found.owner_name) == (kind.lower(), name)
        path, query, _ = stub.requests[-1]
        assert path == f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters"
        crd = {"rayjob": "RayJob", "rayservice": "RayService"}[kind.lower()]
        assert query["labelSelector"] == [f"ray.io/originated-from-cr-name={name},ray.io/originated-from-crd={crd}"]


def test_find_for_owner_prefers_a_ready_head() -> None:
    pending_old = raycluster("svc-raycluster-old", "serve", owner=("RayService", "svc"),
                             created="2026-11-01T00:00:00Z", head_ready=False)  # fmt: skip
    with api_stub(pending_old, SVC_NEW) as stub:
        found = directory(stub.url).find_for_owner("serve", "rayservice", "svc")
    assert found is not None and found.name == "svc-raycluster-bbbb"


def test_labelled_cluster_without_controller_gets_the_requested_owner() -> None:
    orphan = raycluster("orphan", "jobs", owner=("RayJob", "job-x"))
    del orphan["metadata"]["ownerReferences"]
    with api_stub(orphan) as stub:
        found = directory(stub.url).find_for_owner("jobs", "rayjob", "job-x")
    assert found is not None and (found.owner_kind, found.owner_name) == ("rayjob", "job-x")


def test_unknown_kind_is_value_error(stub: ApiStub) -> None:
    with pytest.raises(ValueError, match="unsupported resource kind"):
        directory(stub.url).find_for_owner("default", "deployment", "x")


def test_forbidden_names_the_cluster_role(stub: ApiStub) -> None:
    stub.fail_status = 403
    live = directory(stub.url)
    listing = live.list_clusters()
    assert not listing.available and "raycluster-reader" in (listing.error or "")
    with pytest.raises(LiveDiscoveryError, match="raycluster-reader"):
        live.get("default", "raycluster-demo")


def test_server_error_raises_and_is_not_cached(stub: ApiStub) -> None:
    live = directory(stub.url)
    stub.fail_status = 500
    with pytest.raises(LiveDiscoveryError, match="500"):
        live.get("default", "raycluster-demo")
    with pytest.raises(LiveDiscoveryError):
        live.find_for_owner("jobs", "rayjob", "rayjob-sample")
    stub.fail_status = None
    assert live.get("default", "raycluster-demo") is not None


def test_unreachable_api_server() -> None:
    live = directory(f"http://127.0.0.1:{free_port()}", request_timeout=(0.5, 0.5))
    listing = live.list_clusters()
    assert listing.available is False and "unreachable" in (listing.error or "")
    assert listing.clusters == []
    with pytest.raises(LiveDiscoveryError, match="unreachable"):
        live.get("default", "raycluster-demo")


def test_malformed_objects_are_skipped() -> None:
    bad_name = raycluster("Not_Valid")
    evil_service = raycluster("evil")
    evil_service["status"]["head"]["serviceName"] = "attacker.example.com/x?"
    assert cluster_from_object(bad_name, "cluster.local") is None
    evil = cluster_from_object(evil_service, "cluster.local")
    assert evil is not None and evil.base_url == ""  # never a URL built from an unchecked host


def test_parse_k8s_time() -> None:
    assert parse_k8s_time("2026-04-22T10:00:00Z") == datetime(2026, 4, 22, 10, tzinfo=UTC)
    assert parse_k8s_time(None) == datetime.fromtimestamp(0, UTC)


def test_kubeconfig_mode_uses_its_server_and_token(stub: ApiStub, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": stub.url}}],
                "users": [{"name": "reader", "user": {"token": "secret-token"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "stub", "user": "reader"}}],
                "current-context": "ctx",
            }
        )
    )
    config = server_config(tmp_path, kubernetes="auto", kubeconfig=str(kubeconfig))
    live = live_directory_from_config(config, env={})
    assert isinstance(live, KubernetesLiveDirectory)
    assert live.get("default", "raycluster-demo") is not None
    headers = {k.lower(): v for k, v in stub.requests[-1][2].items()}
    assert headers["authorization"] == "Bearer secret-token"
    live.close()


def test_in_cluster_mode_without_service_account(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    # auto: stored sessions must keep working; the listing says why there are no live ones.
    auto = live_directory_from_config(server_config(tmp_path, kubernetes="auto"), env=env)
    assert isinstance(auto, UnavailableLiveDirectory)
    listing = auto.list_clusters()
    assert listing.available is False and listing.error
    assert auto.get("default", "x") is None
    # explicit: a start-up error.
    with pytest.raises(LiveDiscoveryError, match="--kubernetes=in-cluster"):
        live_directory_from_config(server_config(tmp_path, kubernetes="in-cluster"), env=env)

"""A protocol-level stand-in for the Kubernetes API server's RayCluster endpoints
(and ``GET`` of core/v1 Secrets, for clusters with Ray token auth).

No API server can run here (no kind, no etcd), so the official ``kubernetes``
client is pointed at this stub instead: the same HTTP paths, query parameters
(``labelSelector``, ``limit``, ``continue``), list envelopes and ``Status``
errors as the real API server, serving RayCluster objects shaped as KubeRay
writes them (checked against the CRD in ``tests/fixtures/kuberay/crds``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from kubernetes import client as kclient

from runtime.server.live.discovery import LiveCluster, LiveDirectory, LiveListing
from runtime.server.live.k8s import KubernetesLiveDirectory

PREFIX = "/apis/ray.io/v1"
CORE_PREFIX = "/api/v1"


def raycluster(
    name: str,
    namespace: str = "default",
    *,
    created: str = "2026-11-22T01:45:20Z",
    dashboard_port: int | None = None,
    head_ready: bool = True,
    owner: tuple[str, str] | None = None,
    auth: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A RayCluster as ``kubectl get raycluster -o json`` shows it (KubeRay 1.x);
    ``auth`` is its ``spec.authOptions`` (e.g. ``{"mode": "token"}``)."""
    ports: list[dict[str, Any]] = [
        {"containerPort": 6379, "name": "gcs-server", "protocol": "TCP"},
        {"containerPort": dashboard_port or 8265, "name": "dashboard", "protocol": "TCP"},
        {"containerPort": 10001, "name": "client", "protocol": "TCP"},
    ]
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "resourceVersion": "4242",
        "generation": 1,
        "creationTimestamp": created,
        "labels": {"app.kubernetes.io/name": "kuberay"},
    }
    if owner is not None:
        kind, owner_name = owner
        metadata["labels"].update({"ray.io/originated-from-cr-name": owner_name, "ray.io/originated-from-crd": kind})
        metadata["ownerReferences"] = [
            {
                "apiVersion": "ray.io/v1",
                "kind": kind,
                "name": owner_name,
                "uid": f"uid-{owner_name}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    status: dict[str, Any] = {
        "state": "ready" if head_ready else "",
        "desiredWorkerReplicas": 1,
        "availableWorkerReplicas": 1 if head_ready else 0,
        "observedGeneration": 1,
    }
    if head_ready:
        status["head"] = {
            "podIP": "10.8.0.12",
            "podName": f"{name}-head-x7k2p",
            "serviceIP": "10.12.3.4",
            "serviceName": f"{name}-head-svc",
        }
        status["endpoints"] = {"client": "10001", "dashboard": str(dashboard_port or 8265), "gcs-server": "6379"}
    spec: dict[str, Any] = {
        "rayVersion": "2.60.0",
        "headGroupSpec": {
            "rayStartParams": {"dashboard-host": "0.0.0.0"},  # noqa: S104 - KubeRay's sample
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "ray-head",
                            "image": "rayproject/ray:2.60.0",
                            "ports": ports,
                            "resources": {"limits": {"cpu": "1", "memory": "2G"}},
                        },
                        {"name": "collector", "image": "historyserver-collector:dev"},
                    ]
                }
            },
        },
        "workerGroupSpecs": [
            {
                "groupName": "workers",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 2,
                "rayStartParams": {},
                "template": {"spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.60.0"}]}},
            }
        ],
    }
    if auth is not None:
        spec["authOptions"] = auth
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata, "spec": spec, "status": status}


def secret(name: str, namespace: str, data: dict[str, str], *, owner: str | None = None) -> dict[str, Any]:
    """A Secret as the API server returns it (``data`` values base64-encoded); with
    ``owner``, labelled and owned like the one KubeRay generates per RayCluster."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-secret-{namespace}-{name}",
        "resourceVersion": "4243",
        "creationTimestamp": "2026-11-22T01:45:21Z",
    }
    if owner is not None:
        metadata["labels"] = {"ray.io/cluster": owner}
        metadata["ownerReferences"] = [
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": owner, "uid": f"uid-{namespace}-{owner}",
             "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque", "data": encoded}


@dataclass
class ApiStub:
    server: ThreadingHTTPServer
    clusters: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)
    fail_status: int | None = None
    secrets: list[dict[str, Any]] = field(default_factory=list)
    #: Namespaces whose Secrets the caller may not read (no Role there): 403.
    secrets_forbidden_in: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.requests]


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}  # fmt: skip


def _matches(obj: dict[str, Any], selector: str) -> bool:
    labels = obj["metadata"].get("labels", {})
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _handler(stub: ApiStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            stub.requests.append((parts.path, query, dict(self.headers.items())))
            if stub.fail_status == 403:
                message = 'rayclusters.ray.io is forbidden: User "system:serviceaccount:default:historyserver"'
                return self._send(403, _status(403, "Forbidden", message))
            if stub.fail_status:
                return self._send(stub.fail_status, _status(stub.fail_status, "InternalError", "etcdserver: timeout"))
            if parts.path.startswith(CORE_PREFIX + "/"):
                return self._secret([unquote(s) for s in parts.path.removeprefix(CORE_PREFIX).strip("/").split("/")])
            segments = [unquote(s) for s in parts.path.removeprefix(PREFIX).strip("/").split("/")]
            if segments == ["rayclusters"]:
                return self._list(None, query)
            if len(segments) == 3 and segments[0] == "namespaces" and segments[2] == "rayclusters":
                return self._list(segments[1], query)
            if len(segments) == 4 and segments[0] == "namespaces" and segments[2] == "rayclusters":
                for obj in stub.clusters:
                    if (obj["metadata"]["namespace"], obj["metadata"]["name"]) == (segments[1], segments[3]):
                        return self._send(200, obj)
                return self._send(404, _status(404, "NotFound", f'rayclusters.ray.io "{segments[3]}" not found'))
            return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))

        def _secret(self, segments: list[str]) -> None:
            if len(segments) != 4 or segments[0] != "namespaces" or segments[2] != "secrets":
                return self._send(404, _status(404, "NotFound", "the server could not find the requested resource"))
            namespace, name = segments[1], segments[3]
            if namespace in stub.secrets_forbidden_in:
                message = (
                    f'secrets "{name}" is forbidden: User "system:serviceaccount:ray-history:historyserver" '
                    f'cannot get resource "secrets" in API group "" in the namespace "{namespace}"'
                )
                return self._send(403, _status(403, "Forbidden", message))
            for obj in stub.secrets:
                if (obj["metadata"]["namespace"], obj["metadata"]["name"]) == (namespace, name):
                    return self._send(200, obj)
            return self._send(404, _status(404, "NotFound", f'secrets "{name}" not found'))

        def _list(self, namespace: str | None, query: dict[str, list[str]]) -> None:
            selector = query.get("labelSelector", [""])[0]
            items = [
                obj
                for obj in stub.clusters
                if (namespace is None or obj["metadata"]["namespace"] == namespace) and _matches(obj, selector)
            ]
            start = int(query.get("continue", ["0"])[0])
            limit = int(query.get("limit", ["0"])[0]) or len(items)
            page = items[start : start + limit]
            more = start + limit < len(items)
            self._send(
                200,
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayClusterList",
                    "metadata": {"resourceVersion": "4242", **({"continue": str(start + limit)} if more else {})},
                    "items": page,
                },
            )

    return Handler


@contextmanager
def api_stub(*clusters: dict[str, Any]) -> Iterator[ApiStub]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    stub = ApiStub(server, list(clusters))
    server.RequestHandlerClass = _handler(stub)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="k8s-api", daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()


class LoopbackDirectory(LiveDirectory):
    """A :class:`KubernetesLiveDirectory` on the stub whose ready heads answer on
    ``url``: the head services the stub's RayClusters name cannot resolve here.
    Everything else (token auth from the spec, the Secret reader) is the real one."""

    def __init__(self, inner: KubernetesLiveDirectory, url: str) -> None:
        self.inner, self.url = inner, url.rstrip("/")
        self.token_source = inner.token_source

    def _here(self, found: LiveCluster | None) -> LiveCluster | None:
        return dataclasses.replace(found, base_url=self.url) if found is not None and found.ready else found

    def list_clusters(self) -> LiveListing:
        listing = self.inner.list_clusters()
        return dataclasses.replace(listing, clusters=[c for c in map(self._here, listing.clusters) if c])

    def get(self, namespace: str, name: str) -> LiveCluster | None:
        return self._here(self.inner.get(namespace, name))

    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        return self._here(self.inner.find_for_owner(namespace, kind, name))


def kubernetes_directory(stub_url: str, **kwargs: Any) -> KubernetesLiveDirectory:
    """The real directory with the official client pointed at the stub."""
    configuration = kclient.Configuration(host=stub_url)
    configuration.retries = 0
    return KubernetesLiveDirectory(kclient.ApiClient(configuration), **kwargs)

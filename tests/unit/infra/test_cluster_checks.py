"""infra/cluster_checks.py with the real ``kubernetes`` client against a loopback stand-in of the RBAC API.

No API server runs here; the stand-in answers the one call the check makes
(``GET /apis/rbac.authorization.k8s.io/v1/clusterroles/NAME``) the way the API server does:
the object, or a 404 ``Status``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from infra.cluster_checks import STACK_ANNOTATION, ClusterRoleTakenError, check_cluster_role_free, cluster_role_owner
from tests.unit.infra.kube_stub import JsonApiHandler, stub_kubeconfig
from tests.unit.infra.test_config import stack_values
from tests.unit.infra.test_program import deploy_with

PREFIX = "/apis/rbac.authorization.k8s.io/v1/clusterroles/"
SETTING = "ray-history-server:historyServer.clusterRoleName"


class _RbacApi(JsonApiHandler):
    roles: ClassVar[dict[str, dict[str, Any]]] = {}
    seen: ClassVar[list[tuple[str, str]]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's dispatch name
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        name = self.path.removeprefix(PREFIX).split("?", 1)[0]
        if self.path.startswith(PREFIX) and name in self.roles:
            self._send(200, self.roles[name])
        else:
            message = f'clusterroles.rbac.authorization.k8s.io "{name}" not found'
            self._send(
                404,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                    "message": message,
                },
            )

    def _send(self, code: int, body: dict[str, Any]) -> None:
        self.send_json(code, body)


def _role(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "uid": "u-1", "resourceVersion": "1"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": metadata, "rules": []}


@pytest.fixture
def kubeconfig() -> Iterator[str]:
    _RbacApi.roles, _RbacApi.seen = {}, []
    with stub_kubeconfig(_RbacApi) as config:
        yield config


def test_owner_of_a_missing_own_and_foreign_role(kubeconfig: str) -> None:
    _RbacApi.roles = {
        "ours": _role("ours", {STACK_ANNOTATION: "org/ray-history-server/prod"}),
        "by-hand": _role("by-hand"),
    }
    assert cluster_role_owner(kubeconfig, None, "absent") is None
    assert cluster_role_owner(kubeconfig, "stub", "ours") == "org/ray-history-server/prod"
    assert cluster_role_owner(kubeconfig, None, "by-hand") == ""
    assert _RbacApi.seen[0] == (f"{PREFIX}absent", "Bearer stub-token")


def test_a_role_of_another_stack_stops_the_program_naming_the_setting(kubeconfig: str) -> None:
    _RbacApi.roles = {"raycluster-reader": _role("raycluster-reader", {STACK_ANNOTATION: "org/p/team-a"})}
    with pytest.raises(ClusterRoleTakenError) as error:
        check_cluster_role_free(kubeconfig, None, "raycluster-reader", "org/p/team-b", SETTING)
    assert "belongs to stack org/p/team-a" in str(error.value)
    assert SETTING in str(error.value) and "raycluster-reader-team-b" in str(error.value)


def test_a_role_made_by_hand_is_not_adopted(kubeconfig: str) -> None:
    _RbacApi.roles = {"raycluster-reader": _role("raycluster-reader")}
    with pytest.raises(ClusterRoleTakenError, match="no ray-history stack"):
        check_cluster_role_free(kubeconfig, None, "raycluster-reader", "org/p/s", SETTING)


def test_own_or_absent_role_passes(kubeconfig: str) -> None:
    _RbacApi.roles = {"raycluster-reader": _role("raycluster-reader", {STACK_ANNOTATION: "org/p/s"})}
    check_cluster_role_free(kubeconfig, None, "raycluster-reader", "org/p/s", SETTING)
    check_cluster_role_free(kubeconfig, None, "other-name", "org/p/s", SETTING)


def test_an_unreachable_cluster_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = json.dumps(
        {
            "apiVersion": "v1",
            "clusters": [{"name": "x", "cluster": {"server": "http://127.0.0.1:9"}}],
            "users": [{"name": "x", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
            "current-context": "x",
        }
    )
    check_cluster_role_free(unreachable, None, "raycluster-reader", "org/p/s", SETTING)
    assert "could not check whether ClusterRole raycluster-reader already exists" in caplog.text


def test_the_program_refuses_another_stacks_cluster_role(kubeconfig: str) -> None:
    """``pulumi up`` on an existing cluster stops before adopting another stack's ClusterRole.

    pulumi-kubernetes: with server-side apply (the default since v4) creating an object that
    already exists updates it instead of failing ("upsert"), so without this check two stacks
    would share one ClusterRole (https://www.pulumi.com/registry/packages/kubernetes/how-to-guides/managing-resources-with-server-side-apply/).
    """
    _RbacApi.roles = {"raycluster-reader": _role("raycluster-reader", {STACK_ANNOTATION: "org/p/team-a"})}
    values = stack_values("gke")
    values["kubeconfig"] = kubeconfig
    values.pop("kubeContext")
    with pytest.raises(Exception, match="ClusterRole raycluster-reader already exists"):
        deploy_with(values)
    values["historyServer"] = {"clusterRoleName": "raycluster-reader-team-b"}
    mocks, _ = deploy_with(values)
    role = mocks.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole").inputs
    assert role["metadata"]["annotations"] == {STACK_ANNOTATION: "organization/ray-history-server/test"}

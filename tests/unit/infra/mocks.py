"""A reusable ``pulumi.runtime.set_mocks`` double for the infra unit tests.

:class:`RecordingMocks` records every resource the program registers (type token, logical
name, inputs, provider reference) and every invoke, answers the invokes our components
use with fixed, realistic values, and fills in the outputs a real provider would compute
(ARNs, resource ids, endpoints) so code that reads them keeps working under test.

Usage::

    @pytest.fixture
    def mocks() -> RecordingMocks:
        return RecordingMocks.install()

    @settled  # not pulumi.runtime.test: the check runs only once every resource has registered
    def test_something(mocks: RecordingMocks) -> pulumi.Output[None]:
        comp = SomeComponent("x", ...)
        return comp.bucket_name.apply(lambda _: check(mocks.one("gcp:storage/bucket:Bucket").inputs))
"""

from __future__ import annotations

import base64
import functools
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.proto import resource_pb2

AWS_ACCOUNT = "123456789012"
AWS_REGION = "us-east-1"
GCP_PROJECT_NUMBER = "987654321098"
AZURE_SUBSCRIPTION = "00000000-1111-2222-3333-444444444444"
AZURE_TENANT = "99999999-8888-7777-6666-555555555555"
EKS_ISSUER = "https://oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"
AKS_ISSUER = "https://eastus.oic.prod-aks.azure.com/99999999-8888-7777-6666-555555555555/abcd/"
FAKE_KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n"

State = dict[str, Any]


@dataclass
class RecordedResource:
    """One registered resource as the engine saw it (inputs use camelCase engine names, secrets unwrapped)."""

    typ: str
    name: str
    inputs: State
    provider: str
    custom: bool
    state: State
    resource_id: str
    #: URNs the engine was told this resource depends on: ``depends_on`` (components
    #: expanded to their children) plus every resource an input Output came from.
    dependencies: frozenset[str] = frozenset()
    #: The inputs as sent, secrets still in their envelopes (see :func:`is_secret`).
    raw_inputs: State | None = None
    urn: str = ""
    #: URN of the parent component ("" for the stack).
    parent: str = ""

    def depends_on(self, name: str) -> bool:
        """True when one of :attr:`dependencies` is the resource with this logical name."""
        return any(urn.rsplit("::", 1)[-1] == name for urn in self.dependencies)

    def dependency_names(self) -> set[str]:
        """Logical names of every resource this one depends on."""
        return {urn.rsplit("::", 1)[-1] for urn in self.dependencies}

    @property
    def provider_name(self) -> str:
        """Logical name of the provider in the reference ``urn::id`` ("" when none)."""
        urn = self.provider.split("::id", 1)[0] if self.provider else ""
        parts = urn.split("::")
        return parts[3] if len(parts) > 3 else ""


_SECRET_SIG = "4dabf18193072939515e22adb298388d"  # the engine's "special value" marker key


def unwrap_secrets(value: Any) -> Any:
    """Replace the engine's secret envelopes (``{SIG: ..., "value": v}``) with their values."""
    if isinstance(value, dict):
        if _SECRET_SIG in value and "value" in value:
            return unwrap_secrets(value["value"])
        return {k: unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(v) for v in value]
    return value


def is_secret(value: Any) -> bool:
    """True when ``value`` (from :attr:`RecordedResource.raw_inputs`) is the engine's secret envelope."""
    return isinstance(value, dict) and _SECRET_SIG in value and "value" in value


def _fake_uuid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)))


def _aws_state(typ: str, name: str, inputs: State) -> State:
    if typ == "aws:s3/bucket:Bucket":
        bucket = inputs.get("bucket") or f"{inputs.get('bucketPrefix', '')}{name}-mock"
        return {"bucket": bucket, "arn": f"arn:aws:s3:::{bucket}", "region": inputs.get("region", AWS_REGION)}
    if typ == "aws:iam/role:Role":
        return {"arn": f"arn:aws:iam::{AWS_ACCOUNT}:role/{inputs.get('name', name)}"}
    if typ == "aws:iam/openIdConnectProvider:OpenIdConnectProvider":
        host = str(inputs.get("url", "")).removeprefix("https://")
        return {"arn": f"arn:aws:iam::{AWS_ACCOUNT}:oidc-provider/{host}"}
    if typ == "aws:ecr/repository:Repository":
        repo = inputs.get("name", name)
        return {"repositoryUrl": f"{AWS_ACCOUNT}.dkr.ecr.{AWS_REGION}.amazonaws.com/{repo}", "registryId": AWS_ACCOUNT}
    if typ == "aws:eks/cluster:Cluster":
        return {
            "endpoint": f"https://{name}.gr7.{AWS_REGION}.eks.amazonaws.com",
            "certificateAuthority": {"data": base64.b64encode(b"eks-ca").decode()},
            "identities": [{"oidcs": [{"issuer": EKS_ISSUER}]}],
        }
    if typ == "aws:amp/scraper:Scraper":
        # The scraper's service-linked role (AMP-collector-how-to), with its path.
        return {
            "arn": f"arn:aws:aps:{AWS_REGION}:{AWS_ACCOUNT}:scraper/s-{name}",
            "roleArn": f"arn:aws:iam::{AWS_ACCOUNT}:role/aws-service-role/scraper.aps.amazonaws.com/"
            f"AWSServiceRoleForAmazonPrometheusScraper_{name}",
        }
    return {"arn": f"arn:aws:mock:{AWS_REGION}:{AWS_ACCOUNT}:{name}"}


def _gcp_state(typ: str, name: str, inputs: State) -> State:
    if typ == "gcp:storage/bucket:Bucket":
        return {"url": f"gs://{inputs.get('name', name)}"}
    if typ == "gcp:artifactregistry/repository:Repository":
        return {
            "registryUri": f"{inputs['location']}-docker.pkg.dev/{inputs.get('project', 'mock-project')}/"
            f"{inputs['repositoryId']}"
        }
    if typ == "gcp:serviceaccount/account:Account":
        email = f"{inputs['accountId']}@{inputs.get('project', 'mock-project')}.iam.gserviceaccount.com"
        return {"email": email, "member": f"serviceAccount:{email}"}
    if typ == "gcp:container/cluster:Cluster":
        return {
            "endpoint": "34.1.2.3",
            "masterAuth": {"clusterCaCertificate": base64.b64encode(b"gke-ca").decode()},
        }
    return {}


#: Input carrying the Azure resource's real name, per type (the ``name`` output echoes it).
_AZURE_NAME_INPUTS = {
    "azure-native:storage:StorageAccount": "accountName",
    "azure-native:storage:BlobContainer": "containerName",
    "azure-native:containerregistry:Registry": "registryName",
    "azure-native:resources:ResourceGroup": "resourceGroupName",
    "azure-native:managedidentity:UserAssignedIdentity": "resourceName",
    "azure-native:containerservice:ManagedCluster": "resourceName",
}


def _azure_state(typ: str, name: str, inputs: State) -> State:
    name_input = _AZURE_NAME_INPUTS.get(typ)
    if name_input and inputs.get(name_input):
        return {"name": inputs[name_input], **_azure_computed(typ, name, inputs)}
    return _azure_computed(typ, name, inputs)


def _azure_computed(typ: str, name: str, inputs: State) -> State:
    if typ == "azure-native:storage:StorageAccount":
        return {"primaryEndpoints": {"blob": f"https://{inputs.get('accountName', name)}.blob.core.windows.net/"}}
    if typ == "azure-native:managedidentity:UserAssignedIdentity":
        return {
            "clientId": _fake_uuid("client", name),
            "principalId": _fake_uuid("principal", name),
            "tenantId": AZURE_TENANT,
        }
    if typ == "azure-native:containerservice:ManagedCluster":
        return {
            "oidcIssuerProfile": {"enabled": True, "issuerURL": AKS_ISSUER},
            "identityProfile": {"kubeletidentity": {"objectId": _fake_uuid("kubelet", name)}},
        }
    if typ == "azure-native:containerregistry:Registry":
        return {"loginServer": f"{inputs.get('registryName', name)}.azurecr.io"}
    return {}


def _docker_build_state(typ: str, name: str, inputs: State) -> State:
    digest = "sha256:" + uuid.uuid5(uuid.NAMESPACE_URL, name).hex * 2
    tags = inputs.get("tags") or [name]
    return {"digest": digest, "ref": f"{tags[0]}@{digest}"}


def _kubernetes_state(typ: str, name: str, inputs: State) -> State:
    if typ == "kubernetes:core/v1:Secret" and isinstance(inputs.get("stringData"), dict):
        # The API server stores stringData base64-encoded under data.
        encoded = {k: base64.b64encode(str(v).encode()).decode() for k, v in inputs["stringData"].items()}
        return {"data": {**inputs.get("data", {}), **encoded}}
    return {}


_STATE_BY_PACKAGE: dict[str, Callable[[str, str, State], State]] = {
    "kubernetes": _kubernetes_state,
    "aws": _aws_state,
    "gcp": _gcp_state,
    "azure-native": _azure_state,
    "docker-build": _docker_build_state,
}


def _default_calls() -> dict[str, Callable[[State], State]]:
    kubeconfig_b64 = base64.b64encode(FAKE_KUBECONFIG.encode()).decode()
    return {
        "gcp:organizations/getProject:getProject": lambda a: {
            "number": GCP_PROJECT_NUMBER,
            "projectId": a.get("projectId", "mock-project"),
        },
        "gcp:organizations/getClientConfig:getClientConfig": lambda a: {
            "accessToken": "ya29.mock-token",
            "project": "mock-project",
        },
        "aws:index/getCallerIdentity:getCallerIdentity": lambda a: {
            "accountId": AWS_ACCOUNT,
            "arn": f"arn:aws:iam::{AWS_ACCOUNT}:user/mock",
            "userId": "MOCK",
        },
        "aws:eks/getCluster:getCluster": lambda a: {
            "name": a.get("name", "ray"),
            "arn": f"arn:aws:eks:{AWS_REGION}:{AWS_ACCOUNT}:cluster/{a.get('name', 'ray')}",
            "vpcConfig": {
                "subnetIds": ["subnet-a", "subnet-b"],
                "clusterSecurityGroupId": "sg-cluster",
                "vpcId": "vpc-mock",
            },
            "accessConfigs": [{"authenticationMode": "API_AND_CONFIG_MAP"}],
        },
        "aws:ec2/getVpc:getVpc": lambda a: {
            "id": a.get("id", "vpc-mock"),
            "cidrBlock": "10.0.0.0/16",
            "cidrBlockAssociations": [
                {"associationId": "vpc-cidr-assoc-1", "cidrBlock": "10.0.0.0/16", "state": "associated"},
                {"associationId": "vpc-cidr-assoc-2", "cidrBlock": "100.64.0.0/16", "state": "associated"},
            ],
        },
        "aws:index/getRegion:getRegion": lambda a: {"name": AWS_REGION, "region": AWS_REGION},
        "aws:index/getPartition:getPartition": lambda a: {"partition": "aws", "dnsSuffix": "amazonaws.com"},
        "aws:ecr/getAuthorizationToken:getAuthorizationToken": lambda a: {
            "userName": "AWS",
            "password": "ecr-mock-password",
            "proxyEndpoint": f"https://{AWS_ACCOUNT}.dkr.ecr.{AWS_REGION}.amazonaws.com",
            "authorizationToken": "bW9jaw==",
        },
        "azure-native:authorization:getClientConfig": lambda a: {
            "subscriptionId": AZURE_SUBSCRIPTION,
            "tenantId": AZURE_TENANT,
            "clientId": _fake_uuid("deployer-client"),
            "objectId": _fake_uuid("deployer-object"),
        },
        "azure-native:authorization:getClientToken": lambda a: {"token": "arm-mock-token"},
        "azure-native:containerregistry:listRegistryCredentials": lambda a: {
            "username": a.get("registryName", "acr"),
            "passwords": [{"name": "password", "value": "acr-mock-password"}],
        },
        "azure-native:containerservice:listManagedClusterUserCredentials": lambda a: {
            "kubeconfigs": [{"name": "clusterUser", "value": kubeconfig_b64}],
        },
    }


@dataclass
class RecordedInvoke:
    """One invoke as the engine saw it."""

    token: str
    args: State
    provider: str
    #: URNs the invoke waited for (its ``depends_on``, components expanded to their children).
    dependencies: frozenset[str] = frozenset()

    def depends_on(self, name: str) -> bool:
        """True when one of :attr:`dependencies` is the resource with this logical name."""
        return any(urn.rsplit("::", 1)[-1] == name for urn in self.dependencies)

    def dependency_names(self) -> set[str]:
        """Logical names of every resource this invoke waited for."""
        return {urn.rsplit("::", 1)[-1] for urn in self.dependencies}


class _DependencyMonitor(MockMonitor):
    """The SDK's mock monitor, handing each request's dependency URNs to :class:`RecordingMocks`.

    ``MockResourceArgs`` carries no dependencies, but ordering is what several cloud
    defects are about (a grant before its identity pool exists, a pod before its
    credentials, a lookup before its API is enabled), so the tests must be able to see it.
    """

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.recording = mocks

    def GetDeploymentInfo(self, request: Any) -> Any:  # noqa: N802 - the gRPC method name
        # Announcing invoke dependencies makes the SDK put an invoke's depends_on on the
        # request. It still waits for them itself before sending it, as with the base monitor.
        info = super().GetDeploymentInfo(request)
        info.supportedFeatures.append(resource_pb2.RESOURCE_MONITOR_FEATURE_INVOKE_DEPENDS_ON)
        return info

    def Invoke(self, request: Any) -> Any:  # noqa: N802 - the gRPC method name
        self.recording._pending.invoke_dependencies = frozenset(request.dependsOn)
        try:
            return super().Invoke(request)
        finally:
            self.recording._pending.invoke_dependencies = frozenset()

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - the gRPC method name
        # Registrations run on several executor threads at once; each calls new_resource on its own.
        self.recording._pending.dependencies = frozenset(request.dependencies)
        self.recording._pending.urn = self.make_urn(request.parent, request.type, request.name)
        self.recording._pending.parent = request.parent
        try:
            return super().RegisterResource(request)
        finally:
            self.recording._pending.dependencies = frozenset()
            self.recording._pending.urn = self.recording._pending.parent = ""


def _provider_urn(reference: str) -> str:
    """The URN of a provider reference ``URN::ID`` ("" for none)."""
    return reference.rsplit("::", 1)[0] if reference else ""


class RecordingMocks(pulumi.runtime.Mocks):
    """Records resources and invokes; answers the invokes the infra components use.

    Unknown invoke tokens raise, so a component calling something new fails loudly
    instead of silently receiving an empty result. Reads (``Resource.get``) return the
    state of the resource registered earlier under the same id.
    """

    def __init__(self, extra_calls: dict[str, Callable[[State], State]] | None = None) -> None:
        self.resources: list[RecordedResource] = []
        self.calls: list[tuple[str, State, str]] = []
        #: The same invokes with what each waited for.
        self.invokes: list[RecordedInvoke] = []
        self._calls = {**_default_calls(), **(extra_calls or {})}
        self._pending = threading.local()

    @classmethod
    def install(
        cls, extra_calls: dict[str, Callable[[State], State]] | None = None, *, preview: bool = False
    ) -> RecordingMocks:
        """Create the mocks and make them the engine for the following resources."""
        mocks = cls(extra_calls)
        pulumi.runtime.set_mocks(
            mocks, project="ray-history-server", stack="test", preview=preview, monitor=_DependencyMonitor(mocks)
        )
        return mocks

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, State]:
        if args.resource_id:  # Resource.get(...): answer with what was created under that id
            for earlier in self.resources:
                if earlier.resource_id == args.resource_id:
                    return args.resource_id, dict(earlier.state)
        package = args.typ.split(":", 1)[0]
        inputs: State = unwrap_secrets(dict(args.inputs))
        state: State = dict(args.inputs)
        state.setdefault("name", args.name)
        computed = _STATE_BY_PACKAGE.get(package, lambda *_: {})(args.typ, args.name, inputs)
        for key, value in computed.items():
            if key not in state or key == "name":  # a provider-computed name replaces the logical one
                state[key] = value
            elif isinstance(state[key], dict) and isinstance(value, dict):
                state[key] = {**value, **state[key]}  # inputs win; computed sub-fields are added
        if package == "azure-native":
            resource_id = f"/subscriptions/{AZURE_SUBSCRIPTION}/resourceGroups/mock-rg/providers/{args.typ}/{args.name}"
        elif package == "kubernetes" and isinstance(inputs.get("metadata"), dict):
            meta = inputs["metadata"]
            resource_id = f"{meta.get('namespace', 'default')}/{meta.get('name', args.name)}"
        else:
            resource_id = args.resource_id or f"{args.name}_id"
        state.setdefault("id", resource_id)
        self.resources.append(
            RecordedResource(
                typ=args.typ,
                name=args.name,
                inputs=inputs,
                provider=args.provider or "",
                custom=bool(args.custom),
                state=state,
                resource_id=resource_id,
                dependencies=getattr(self._pending, "dependencies", frozenset()),
                raw_inputs=dict(args.inputs),
                urn=getattr(self._pending, "urn", ""),
                parent=getattr(self._pending, "parent", ""),
            )
        )
        return resource_id, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> State:
        self.calls.append((args.token, dict(args.args), args.provider or ""))
        waited = getattr(self._pending, "invoke_dependencies", frozenset())
        self.invokes.append(RecordedInvoke(args.token, dict(args.args), args.provider or "", waited))
        answer = self._calls.get(args.token)
        if answer is None:
            raise NotImplementedError(f"RecordingMocks has no answer for invoke {args.token!r}")
        return answer(dict(args.args))

    # --- queries used by the tests -------------------------------------------------

    def of_type(self, typ: str) -> list[RecordedResource]:
        """Every recorded resource with this type token, in registration order."""
        return [r for r in self.resources if r.typ == typ]

    def waits_for(self, waiting: RecordedResource | RecordedInvoke, name: str) -> bool:
        """True when ``waiting`` is made only after the resource named ``name`` exists, directly or
        through a chain of dependencies, parents (a child registers after its parent, which
        registers after the parent's ``depends_on``) and providers (a resource registers after
        its provider, which registers after the inputs it came from)."""
        by_urn = {r.urn: r for r in self.resources if r.urn}
        seen: set[str] = set()
        todo = list(waiting.dependencies)
        if isinstance(waiting, RecordedResource):
            todo += [waiting.parent, _provider_urn(waiting.provider)]
        while todo:
            urn = todo.pop()
            if not urn or urn in seen:
                continue
            seen.add(urn)
            if urn.rsplit("::", 1)[-1] == name:
                return True
            found = by_urn.get(urn)
            if found is not None:
                todo += [*found.dependencies, found.parent, _provider_urn(found.provider)]
        return False

    def invokes_of(self, token: str) -> list[RecordedInvoke]:
        """Every recorded invoke of this function token, in call order."""
        return [i for i in self.invokes if i.token == token]

    def one(self, typ: str) -> RecordedResource:
        """The single resource of this type (fails if there are none or several)."""
        found = self.of_type(typ)
        assert len(found) == 1, f"expected one {typ}, found {[r.name for r in found]}"
        return found[0]

    def named(self, name: str) -> RecordedResource:
        """The resource with this logical name."""
        found = [r for r in self.resources if r.name == name]
        assert len(found) == 1, f"expected one resource named {name!r}, found {len(found)}"
        return found[0]

    def cloud_resources(self, package: str) -> list[RecordedResource]:
        """Custom resources of one package (``gcp``, ``aws``, ...), provider objects excluded."""
        return [r for r in self.resources if r.custom and r.typ.startswith(f"{package}:")]

    def assert_all_use_provider(self, package: str, provider_name: str) -> None:
        """Every resource and invoke of ``package`` went through the named explicit provider."""
        resources = self.cloud_resources(package)
        assert resources, f"no {package} resources were registered"
        wrong = [(r.typ, r.name, r.provider_name) for r in resources if r.provider_name != provider_name]
        assert not wrong, f"{package} resources not using provider {provider_name!r}: {wrong}"
        calls = [(tok, prov) for tok, _, prov in self.calls if tok.startswith(f"{package}:")]
        bad_calls = [tok for tok, prov in calls if f"::{provider_name}::" not in prov]
        assert not bad_calls, f"{package} invokes not using provider {provider_name!r}: {bad_calls}"


def settled(test: Callable[..., Any]) -> Callable[..., None]:
    """``pulumi.runtime.test`` for tests written as ``return done.apply(check)``, with
    ``check`` run only after every resource registration has finished.

    Resources whose inputs wait on other outputs (a policy on a role's ARN, a role
    assignment on an identity's principal id) register after ``done`` resolves, so a
    check inside the apply can race them. Here the test body runs under the real
    decorator (which waits for all registrations), the apply that produced the
    returned output is recorded instead of trusted (the engine still resolves it, so its
    callback is switched off there), and the callback is called last,
    once every resource the test created has its URN (the mocks engine may otherwise
    stop before registrations still waiting on inputs have run).
    """

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        original_apply = pulumi.Output.apply
        produced: dict[int, tuple[pulumi.Output[Any], pulumi.Output[Any], Callable[[Any], Any], list[bool]]] = {}
        resolved: list[Any] = []
        deferred: list[Callable[[Any], Any]] = []

        def recording_apply(self: pulumi.Output[Any], func: Callable[[Any], Any], *more: Any) -> pulumi.Output[Any]:
            postponed = [False]  # set once the body returns this apply: the engine must not run it early

            def guarded(value: Any) -> Any:
                return None if postponed[0] else func(value)

            result = original_apply(self, guarded, *more)
            produced[id(result)] = (result, self, func, postponed)  # result kept: its id stays its own
            return result

        created: list[pulumi.Resource] = []
        original_init = pulumi.Resource.__init__

        def recording_init(self: pulumi.Resource, *init_args: Any, **init_kwargs: Any) -> None:
            original_init(self, *init_args, **init_kwargs)
            created.append(self)

        @pulumi.runtime.test  # type: ignore[untyped-decorator]
        def program() -> Any:
            pulumi.Output.apply = recording_apply  # type: ignore[method-assign]
            pulumi.Resource.__init__ = recording_init  # type: ignore[method-assign]
            try:
                returned = test(*args, **kwargs)
            finally:
                pulumi.Output.apply = original_apply  # type: ignore[method-assign]
                pulumi.Resource.__init__ = original_init  # type: ignore[method-assign]
            registered = pulumi.Output.all(*[r.urn for r in created])
            entry = produced.get(id(returned))
            if entry is None or entry[0] is not returned:
                return pulumi.Output.all(returned, registered)
            _result, source, check, postponed = entry
            postponed[0] = True
            deferred.append(check)
            return pulumi.Output.all(source, registered).apply(lambda values: resolved.append(values[0]))

        program()
        for check in deferred:
            check(resolved[0])

    return wrapper

"""ray_history_pulumi/aws_names.py: AWS names within the services' length limits.

The limits (not taken from the module under test):

* IAM role names: at most 64 characters, inline policy names at most 128
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html).
* EKS managed node group names: at most 63 (pulumi_aws.eks.NodeGroup's ``node_group_name``).

and what each kind of name becomes: with neither ``name`` nor ``namePrefix`` Pulumi's auto-name
(logical name, ``-``, 7 random characters; pulumi-aws refuses an IAM role's longer than 64),
with ``namePrefix`` the prefix and the AWS provider's 26-character unique suffix.
"""

from __future__ import annotations

import pytest

from ray_history_pulumi.aws_names import name_args, shortened
from tests.unit.infra.mocks import RecordingMocks

#: type token -> (name input, prefix input, most characters AWS takes).
AWS_NAME_LIMITS = {
    "aws:iam/role:Role": ("name", "namePrefix", 64),
    "aws:iam/rolePolicy:RolePolicy": ("name", "namePrefix", 128),
    "aws:eks/nodeGroup:NodeGroup": ("nodeGroupName", "nodeGroupNamePrefix", 63),
}
AUTONAME_SUFFIX = 1 + 7  # "-" and 7 random characters
PREFIX_SUFFIX = 26


def physical_length(typ: str, logical: str, inputs: dict[str, object]) -> int:
    """The length of the name AWS gets for a resource of type ``typ`` with these inputs."""
    name_key, prefix_key, _ = AWS_NAME_LIMITS[typ]
    if inputs.get(name_key):
        return len(str(inputs[name_key]))
    if inputs.get(prefix_key):
        return len(str(inputs[prefix_key])) + PREFIX_SUFFIX
    return len(logical) + AUTONAME_SUFFIX


def names_over_limit(mocks: RecordingMocks) -> list[tuple[str, str, int]]:
    """(type, logical name, length) of each recorded AWS resource whose name would be too long."""
    return [
        (r.typ, r.name, length)
        for r in mocks.resources
        if r.typ in AWS_NAME_LIMITS and (length := physical_length(r.typ, r.name, r.inputs)) > AWS_NAME_LIMITS[r.typ][2]
    ]


def iam_naming(mocks: RecordingMocks) -> tuple[int, set[tuple[str, bool]]]:
    """How many IAM roles and inline policies were recorded, and for each kind whether
    it was given a ``namePrefix`` (a role's limit is 64, an inline policy's 128)."""
    iam = mocks.of_type("aws:iam/role:Role") + mocks.of_type("aws:iam/rolePolicy:RolePolicy")
    return len(iam), {(r.typ.rsplit(":", 1)[1], bool(r.inputs.get("namePrefix"))) for r in iam}


def test_a_name_that_fits_keeps_the_auto_name() -> None:
    """No inputs at all: a resource deployed before sees no change (and is not replaced)."""
    assert name_args("ray-history-cluster-role", 64) == {}
    assert name_args("r" * 43 + "-cluster-role", 64) == {}  # 56 + 8 = 64: still fits


@pytest.mark.parametrize("length", [44, 63, 100, 300])
def test_a_long_name_gets_a_prefix_that_fits_with_the_unique_suffix(length: int) -> None:
    logical = "r" * length + "-cluster-role"
    args = name_args(logical, 64, keep="-cluster-role")
    prefix = args["name_prefix"]
    assert len(prefix) + PREFIX_SUFFIX == 64
    assert prefix.startswith("rrr") and prefix.endswith("-cluster-role-")
    # Deterministic: a re-deploy passes the same input, so nothing is replaced.
    assert name_args(logical, 64, keep="-cluster-role") == args


def test_shortened_names_differ_where_the_cut_off_part_differs() -> None:
    a, b = "x" * 60 + "-a-cluster-role", "x" * 60 + "-b-cluster-role"
    assert shortened(a, 37, keep="-cluster-role") != shortened(b, 37, keep="-cluster-role")
    assert len(shortened(a, 37, keep="-cluster-role")) == 37
    assert shortened("short", 37) == "short"


def test_other_prefix_arguments_and_bad_calls() -> None:
    args = name_args("n" * 63 + "-nodes", 63, keep="-nodes", prefix_arg="node_group_name_prefix")
    assert set(args) == {"node_group_name_prefix"}
    assert len(args["node_group_name_prefix"]) + PREFIX_SUFFIX == 63
    with pytest.raises(ValueError, match="is not the end of"):
        shortened("a" * 80, 30, keep="-role")
    with pytest.raises(ValueError, match="leave no room"):
        shortened("a" * 80 + "-a-very-long-suffix", 20, keep="-a-very-long-suffix")

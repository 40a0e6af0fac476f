"""Names for auto-named AWS resources whose service caps the name's length.

A resource given no ``name`` gets Pulumi's auto-name: its logical name, ``-`` and 7 random
characters. pulumi-aws refuses one longer than the service allows for an IAM role
(``name '...' plus 7 random chars is longer than maximum length 64``) and passes on others
(an EKS node group's, up to 255) for AWS to reject. Logical names here embed names a user
chooses (``cluster.name``: up to 63 characters), so the auto-name does not always fit.

:func:`name_args` keeps the auto-name wherever it fits: those resources get exactly the
inputs they always had, so a stack deployed before keeps them and nothing is replaced. Only a
logical name too long for it gets a ``name_prefix`` instead (a deployment that could not have
succeeded before): the logical name cut short, with a hash of the whole one (stable from one
deploy to the next, different for different logical names), to which the AWS provider
appends a 26-character unique suffix. Like the auto-name, the result is unique per creation,
so two stacks in one account never collide on an account-wide IAM name and a replacement
can create the new resource before deleting the old one.
"""

from __future__ import annotations

import hashlib

#: Pulumi's auto-name: the logical name, "-" and this many random characters.
AUTONAME_RANDOM_CHARS = 7
#: The AWS provider's name_prefix: the prefix and a unique suffix of this many characters
#: (terraform-plugin-sdk ``id.UniqueIDSuffixLength``; the provider's role-name prefix limit is
#: ``roleNameMaxLen - id.UniqueIDSuffixLength`` = 38).
UNIQUE_SUFFIX_CHARS = 26
#: Hex digits of the logical name's SHA-256 in a shortened prefix.
HASH_CHARS = 8

#: IAM role names: at most 64 characters; inline (role) policy names: at most 128
#: (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html).
IAM_ROLE_NAME_MAX = 64
IAM_POLICY_NAME_MAX = 128
#: EKS managed node group names: at most 63 characters (pulumi_aws.eks.NodeGroup's
#: ``node_group_name``: "The node group name can't be longer than 63 characters").
EKS_NODE_GROUP_NAME_MAX = 63


def autoname_fits(logical: str, limit: int) -> bool:
    """Whether Pulumi's auto-name for ``logical`` has at most ``limit`` characters."""
    return len(logical) + 1 + AUTONAME_RANDOM_CHARS <= limit


def shortened(name: str, limit: int, *, keep: str = "") -> str:
    """``name`` if it has at most ``limit`` characters; else its start, ``-``, :data:`HASH_CHARS`
    hex digits of its SHA-256 and ``keep`` (a tail of ``name`` left readable), ``limit`` long."""
    if len(name) <= limit:
        return name
    if not name.endswith(keep):
        raise ValueError(f"shortened: {keep!r} is not the end of {name!r}")
    tail = f"-{hashlib.sha256(name.encode()).hexdigest()[:HASH_CHARS]}{keep}"
    if limit <= len(tail):
        raise ValueError(f"shortened: {limit} characters leave no room for the start of {name!r}")
    head = name[: len(name) - len(keep)][: limit - len(tail)].rstrip("-_")
    return (head or name[0]) + tail


def name_args(logical: str, limit: int, *, keep: str = "", prefix_arg: str = "name_prefix") -> dict[str, str]:
    """Keyword arguments naming an AWS resource whose logical name is ``logical``.

    Nothing (Pulumi's auto-name) when that fits in ``limit``; else ``{prefix_arg: prefix}``,
    the prefix :func:`shortened` so that the provider's unique suffix still fits.
    """
    if autoname_fits(logical, limit):
        return {}
    return {prefix_arg: shortened(logical, limit - UNIQUE_SUFFIX_CHARS - 1, keep=keep) + "-"}

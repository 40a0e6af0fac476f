"""The Azure ABAC condition of a collector namespace's identity, evaluated as Azure evaluates it.

The evaluator below implements the part of the condition grammar the component emits, as
Microsoft documents it (https://learn.microsoft.com/azure/role-based-access-control/conditions-format):
``!``, ``NOT``, ``AND``, ``OR`` and parentheses (mixing ``AND`` and ``OR`` at one level needs
parentheses), ``ActionMatches{'ACTION'}``, ``SubOperationMatches{'SUBOPERATION'}``, and the
case-sensitive ``StringEquals`` / ``StringStartsWith`` on the blob path and container name
resource attributes and the list request's blob prefix
(https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes: the path and
the prefix hold no container name and no leading ``/``; a listing, the ``Blob.List``
suboperation of ``blobs/read``, has no blob path). A role assignment with a condition grants
an action only where the condition is true.
"""

from __future__ import annotations

import fnmatch
import re

import pytest

from ray_history_pulumi.azure_conditions import (
    BLOB_PATH,
    CONTAINER_NAME,
    LIST_PREFIX,
    WRITE_DATA_ACTIONS,
    namespace_condition,
)
from tests.unit.infra.collector_keys import collector_keys, index_keys

_BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
#: Storage Blob Data Contributor's DataActions, as listed in
#: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage#storage-blob-data-contributor
CONTRIBUTOR_DATA_ACTIONS = {
    f"{_BLOBS}/delete",
    f"{_BLOBS}/read",
    f"{_BLOBS}/write",
    f"{_BLOBS}/move/action",
    f"{_BLOBS}/add/action",
}
READ = f"{_BLOBS}/read"
CONTAINER = "ray-historyserver"
LIST = "Blob.List"
_TOKEN = re.compile(
    r"\s*(?:(?P<paren>[()!])|(?P<not>NOT)\b|(?P<bool>AND|OR)\b|ActionMatches\{'(?P<action>[^']*)'\}"
    r"|SubOperationMatches\{'(?P<sub>[^']*)'\}"
    r"|(?P<attr>@(?:Resource|Request)\[[^\]]+\])|(?P<op>String[A-Za-z]+)\b|'(?P<value>[^']*)')"
)
_ATTRIBUTES = {BLOB_PATH: "path", CONTAINER_NAME: "container", LIST_PREFIX: "prefix"}


def _tokens(expression: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(expression.rstrip()):
        match = _TOKEN.match(expression, pos)
        assert match, f"unparsed condition text at {pos}: {expression[pos : pos + 40]!r}"
        kind = next(k for k, v in match.groupdict().items() if v is not None)
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


def condition_allows(
    expression: str, action: str, container: str, path: str | None, *, listing: str | None = None
) -> bool:
    """Whether a role assignment with this condition lets ``action`` through on ``container/path``,
    or, with ``listing`` (a prefix), a listing of ``container`` naming that prefix (``blobs/read``,
    suboperation ``Blob.List``: no blob path)."""
    request = {"path": path, "container": container, "prefix": listing}
    suboperation = LIST if listing is not None else None
    tokens = _tokens(expression)

    def expr(i: int) -> tuple[bool, int]:
        value, i = term(i)
        joiner = None
        while i < len(tokens) and tokens[i][0] == "bool":
            assert joiner in (None, tokens[i][1]), "AND and OR mixed without parentheses"
            joiner = tokens[i][1]
            right, i = term(i + 1)
            value = (value and right) if joiner == "AND" else (value or right)
        return value, i

    def term(i: int) -> tuple[bool, int]:
        kind, text = tokens[i]
        if (kind, text) in (("paren", "!"), ("not", "NOT")):
            value, i = term(i + 1)
            return not value, i
        if (kind, text) == ("paren", "("):
            value, i = expr(i + 1)
            assert tokens[i] == ("paren", ")"), tokens[i:]
            return value, i + 1
        if kind == "action":
            return fnmatch.fnmatchcase(action, text), i + 1
        if kind == "sub":
            return suboperation == text, i + 1
        assert kind == "attr" and tokens[i + 1][0] == "op" and tokens[i + 2][0] == "value", tokens[i : i + 3]
        actual, operator, wanted = request[_ATTRIBUTES[text]], tokens[i + 1][1], tokens[i + 2][1]
        if actual is None:  # not an attribute of this request (a listing has no blob path)
            return False, i + 3
        if operator == "StringEquals":
            return actual == wanted, i + 3
        assert operator == "StringStartsWith", operator
        return actual.startswith(wanted), i + 3

    value, end = expr(0)
    assert end == len(tokens), tokens[end:]
    return value


def test_the_condition_targets_every_data_action_of_the_role() -> None:
    """Storage Blob Data Contributor's DataActions are blobs delete, read, write, move/action and
    add/action (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage#storage-blob-data-contributor);
    the condition names every one of them, so no read or write path escapes it (write and
    add/action both write blobs and need identical conditions, a rename could move a blob past a
    path condition: https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-security),
    and ``read`` both with and without its ``Blob.List`` suboperation."""
    condition = namespace_condition("", "team-a", CONTAINER)
    targeted = {token for kind, token in _tokens(condition) if kind == "action"}
    assert targeted == CONTRIBUTOR_DATA_ACTIONS == {*WRITE_DATA_ACTIONS, READ}
    assert {token for kind, token in _tokens(condition) if kind == "sub"} == {LIST}


@pytest.mark.parametrize("root_dir", ["", "prod/ray"])
@pytest.mark.parametrize("action", [*WRITE_DATA_ACTIONS, READ])
def test_a_namespace_reads_and_writes_only_its_own_keys(root_dir: str, action: str) -> None:
    """team-a's condition lets every data action (reading a blob too) through on team-a's
    session objects, log objects and metadata markers, and on none of team-b's, nor of "team"
    (a prefix of "team-a") or "team-a-x" (which starts with it), so no team's credential reads,
    overwrites or deletes another's history. Blob path values carry no container name and no leading ``/``
    (https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes#blob-path);
    ``StringStartsWith`` matches the start of the value
    (https://learn.microsoft.com/azure/role-based-access-control/conditions-format)."""
    conditions = {ns: namespace_condition(root_dir, ns, CONTAINER) for ns in ("team-a", "team-b", "team")}
    own = collector_keys(root_dir, "team-a")
    for what, key in own.items():
        assert condition_allows(conditions["team-a"], action, CONTAINER, key), (what, key)
        assert not condition_allows(conditions["team-b"], action, CONTAINER, key), (what, key)
        assert not condition_allows(conditions["team"], action, CONTAINER, key), (what, key)
    for other in ("team-b", "team", "team-a-x"):
        for what, key in collector_keys(root_dir, other).items():
            assert not condition_allows(conditions["team-a"], action, CONTAINER, key), (other, what, key)
    # ``python -m runtime.storage check`` probes with the collector's credential.
    probe = f"{root_dir}/_selfcheck/probe" if root_dir else "_selfcheck/probe"
    assert condition_allows(conditions["team-a"], action, CONTAINER, probe)


@pytest.mark.parametrize("root_dir", ["", "prod/ray"])
def test_shared_indexes_and_other_containers_stay_out_of_reach(root_dir: str) -> None:
    """No collector writes ``ROOT/history-index/`` (its own sessions' indexes included), nor its
    own keys in another container of the account (the container name attribute:
    https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-examples#example-write-blobs-in-named-containers-with-a-path),
    which matters with ``role_scope="account"``."""
    condition = namespace_condition(root_dir, "team-a", CONTAINER)
    for action in [*WRITE_DATA_ACTIONS, READ]:
        for key in index_keys(root_dir, "team-a").values():
            assert not condition_allows(condition, action, CONTAINER, key), key
            assert not condition_allows(condition, action, "ray-history-index", key), key
        assert not condition_allows(condition, action, "ray-history-index", collector_keys(root_dir, "team-a")["log"])


@pytest.mark.parametrize("root_dir", ["", "prod/ray"])
def test_a_namespace_lists_only_under_its_own_prefixes(root_dir: str) -> None:
    """A listing (``blobs/read``, suboperation ``Blob.List``) carries no blob path, only the
    request's blob prefix (https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes#list-blobs),
    and Microsoft's "Read or list blobs in named containers with a path" example conditions it
    on that prefix (https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-examples):
    team-a lists its own sessions, markers and the probes (as the bucket check at start does)
    and nothing wider: not the container's root, not ``cluster-history/``, not team-b's."""
    condition = namespace_condition(root_dir, "team-a", CONTAINER)
    base = f"{root_dir}/" if root_dir else ""
    own = collector_keys(root_dir, "team-a")
    for prefix in [own["log"].rsplit("/", 1)[0] + "/", own["marker"], f"{base}_selfcheck/", f"{base}_selfcheck/x/"]:
        assert condition_allows(condition, READ, CONTAINER, None, listing=prefix), prefix
        assert not condition_allows(condition, READ, "ray-history-index", None, listing=prefix), prefix
    wide = ["", base, f"{base}cluster-history/", f"{base}cluster-history/raycluster/", f"{base}cluster-metadata/"]
    other = collector_keys(root_dir, "team-b")
    for prefix in [*wide, other["log"].rsplit("/", 1)[0] + "/", other["marker"], f"{base}history-index/"]:
        assert not condition_allows(condition, READ, CONTAINER, None, listing=prefix), prefix
    # Reading a blob is not a listing: a blob path under a listable prefix is checked as a path.
    assert condition_allows(condition, READ, CONTAINER, own["log"])
    assert not condition_allows(condition, READ, CONTAINER, other["log"])


def test_values_that_would_need_quoting_are_refused() -> None:
    """Values are single-quoted literals in the grammar
    (https://learn.microsoft.com/azure/role-based-access-control/conditions-format): a quote in
    the root dir or the container name would end one early, so it is refused rather than emitted
    (a root dir by the key layout, which allows no quote in any key)."""
    with pytest.raises(ValueError, match="invalid storage root dir"):
        namespace_condition("it's", "team-a", CONTAINER)
    with pytest.raises(ValueError, match="condition value"):
        namespace_condition("", "team-a", "it's")

"""Query-option parsing for the task routes (KubeRay's Go history server's, with Ray's stricter keys)."""

from __future__ import annotations

import pytest
from werkzeug.datastructures import MultiDict

from runtime.server.queries.options import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    InvalidQueryError,
    TaskQuery,
    parse_task_query,
)


def parse(*pairs: tuple[str, str], summary: bool = False) -> TaskQuery:
    return parse_task_query(MultiDict(list(pairs)), summary=summary)


def filters(*triples: tuple[str, str, str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, pred, value in triples:
        out += [("filter_keys", key), ("filter_predicates", pred), ("filter_values", value)]
    return out


def test_defaults() -> None:
    query = parse()
    assert query == TaskQuery(limit=DEFAULT_LIMIT, detail=False, exclude_driver=True, filters=())
    assert query.summary_by == "func_name"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("-1", "invalid limit: cannot be negative"),
        ("abc", "invalid limit: 'abc' is not an integer"),
        ("1.5", "is not an integer"),
        (str(MAX_LIMIT + 1), "limit cannot be greater than 10000, please use a lower limit"),
    ],
)
def test_bad_limit_is_400(raw: str, message: str) -> None:
    with pytest.raises(InvalidQueryError) as err:
        parse(("limit", raw))
    assert err.value.status == 400
    assert message in err.value.msg


def test_limit_bounds() -> None:
    assert parse(("limit", "0")).limit == 0
    assert parse(("limit", str(MAX_LIMIT))).limit == MAX_LIMIT


def test_summary_forces_limit_after_validation() -> None:
    assert parse(("limit", "5"), summary=True).limit == MAX_LIMIT
    with pytest.raises(InvalidQueryError):
        parse(("limit", "20000"), summary=True)


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True"])
def test_true_spellings(value: str) -> None:
    assert parse(("detail", value)).detail is True


@pytest.mark.parametrize("value", ["0", "f", "F", "FALSE", "false", "False"])
def test_false_spellings(value: str) -> None:
    assert parse(("exclude_driver", value)).exclude_driver is False


@pytest.mark.parametrize("name", ["detail", "exclude_driver"])
def test_invalid_booleans(name: str) -> None:
    with pytest.raises(InvalidQueryError, match=name):
        parse((name, "yes"))


def test_timeout_validated() -> None:
    assert parse(("timeout", "30")).limit == DEFAULT_LIMIT
    with pytest.raises(InvalidQueryError, match="timeout"):
        parse(("timeout", "-3"))
    with pytest.raises(InvalidQueryError, match="timeout"):
        parse(("timeout", "soon"))


def test_filter_lengths_must_match() -> None:
    with pytest.raises(InvalidQueryError, match="must have the same length"):
        parse(("filter_keys", "job_id"))
    with pytest.raises(InvalidQueryError, match="must have the same length"):
        parse(("filter_keys", "job_id"), ("filter_predicates", "="))


def test_unknown_filter_key_is_named() -> None:
    with pytest.raises(InvalidQueryError) as err:
        parse(*filters(("colour", "=", "red")))
    assert "'colour'" in err.value.msg
    assert "job_id" in err.value.msg  # lists what is supported


def test_unsupported_predicate() -> None:
    with pytest.raises(InvalidQueryError, match="predicate"):
        parse(*filters(("job_id", ">", "1")))


def test_values_are_normalised() -> None:
    query = parse(
        *filters(
            ("job_id", "=", "0200000A"),
            ("task_id", "!=", "AgAAAA=="),  # base64 -> hex
            ("state", "=", "finished"),
            ("task_type", "=", "actor_task"),
            ("task_name", "=", "Mixed-Case"),
            ("attempt_number", "=", "1"),
        )
    )
    got = [(f.column.name, f.predicate, f.value) for f in query.filters]
    assert got == [
        ("job_id", "=", "0200000a"),
        ("task_id", "!=", "02000000"),
        ("state", "=", "FINISHED"),
        ("type", "=", "ACTOR_TASK"),
        ("name", "=", "Mixed-Case"),  # matched case-insensitively later, via task_counts
        ("attempt", "=", 1),
    ]


def test_int_filter_rejects_text() -> None:
    with pytest.raises(InvalidQueryError, match="attempt"):
        parse(*filters(("attempt_number", "=", "first")))


def test_aliases_share_columns() -> None:
    a = parse(*filters(("type", "=", "NORMAL_TASK"), ("name", "=", "x"), ("func_or_class_name", "=", "f")))
    b = parse(*filters(("task_type", "=", "NORMAL_TASK"), ("task_name", "=", "x"), ("func_name", "=", "f")))
    assert a.filters == b.filters


def test_cache_key_is_canonical() -> None:
    a = parse(*filters(("job_id", "=", "02000000"), ("state", "=", "FAILED")))
    b = parse(*filters(("state", "=", "failed"), ("job_id", "=", "02000000")), ("limit", "7"), ("detail", "1"))
    assert a.cache_key() == b.cache_key()
    c = parse(*filters(("job_id", "=", "02000000")), ("exclude_driver", "false"))
    assert c.cache_key() != parse(*filters(("job_id", "=", "02000000"))).cache_key()


def test_summary_by() -> None:
    assert parse(("summary_by", "lineage")).summary_by == "lineage"
    assert parse(("summary_by", "task_name")).summary_by == "func_name"
    assert parse(("summary_by", "whatever")).summary_by == "func_name"

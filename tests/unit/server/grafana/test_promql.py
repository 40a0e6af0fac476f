"""Which PromQL passes: every selector pinned to exactly one session, or refused."""

from __future__ import annotations

import pytest

from runtime.server.grafana.promql import MAX_QUERY_CHARS, QueryRefused, pin_selector, sessions_of

S = "session_2026-11-25_21-02-01_123456_1234"


@pytest.mark.parametrize(
    ("query", "sessions"),
    [
        (f'ray_node_mem_used{{SessionName="{S}"}}', {S}),
        # Ray's dashboards after Grafana interpolated $SessionName (and escaped its regex characters).
        (f'sum(ray_node_mem_used{{instance=~".*",SessionName=~"{S}"}}) by (instance)', {S}),
        (f'sum(ray_node_mem_used{{SessionName=~"{S.replace("-", chr(92) + "-")}"}})', {S}),
        (f'sum by (State) (rate(ray_tasks{{SessionName="{S}", State!="FINISHED"}}[5m:30s])) offset 1m', {S}),
        ('a{SessionName="x"} / on(instance) group_left(node) b{SessionName="y"}', {"x", "y"}),
        ('label_replace(x{SessionName="a"}, "dst", "$1", "src", "(.*)")', {"a"}),
        ('{__name__="ray_node_mem_used", SessionName="a"} * 2 > bool 1e3', {"a"}),
        ('histogram_quantile(0.99, sum(rate(x_bucket{SessionName="a"}[1m])) by (le))', {"a"}),
    ],
)
def test_pinned_queries_pass(query: str, sessions: set[str]) -> None:
    assert sessions_of(query) == sessions


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("ray_node_mem_used", "has no SessionName"),
        ('ray_node_mem_used{instance="a"}', "exactly one SessionName"),
        ('up{SessionName=~".*"}', "exactly one SessionName"),
        ('up{SessionName=~"a|b"}', "exactly one SessionName"),
        # \d is a digit class to Prometheus: unescaped it would pin "..._dddd", a name this
        # caller may read, while the series of another session ("..._1234") match.
        (f'up{{SessionName=~"{S[:-4]}\\\\d\\\\d\\\\d\\\\d"}}', "exactly one SessionName"),
        ('up{SessionName=~"session\\\\w"}', "exactly one SessionName"),
        ('up{SessionName!="a"}', "exactly one SessionName"),
        ('up{SessionName="a", SessionName="b"}', "exactly one SessionName"),
        ('{__name__=~".+"}', "exactly one SessionName"),
        ('a{SessionName="x"} or b', "has no SessionName"),
        ("vector(1)", "selects no series"),
        ('count(up{SessionName="a"}', "unbalanced"),
        ('up{SessionName="a"', "unbalanced"),
        ("up{SessionName=a}", "label matcher"),
        ("up # comment", "cannot read"),
    ],
)
def test_anything_else_is_refused(query: str, why: str) -> None:
    with pytest.raises(QueryRefused, match=why):
        sessions_of(query)


def test_a_huge_query_is_refused_before_tokenizing() -> None:
    with pytest.raises(QueryRefused, match="longer than"):
        sessions_of('x{SessionName="a"} + ' * (MAX_QUERY_CHARS // 10))


@pytest.mark.parametrize(
    ("selector", "pinned"),
    [
        # The Cluster and SessionName variables of Ray's default dashboard.
        ("ray_node_network_receive_speed{}", 'ray_node_network_receive_speed{SessionName="s_1"}'),
        ("ray_node_network_receive_speed", 'ray_node_network_receive_speed{SessionName="s_1"}'),
        (
            'ray_node_network_receive_speed{SessionName=~".+", instance=~"a|b"}',
            'ray_node_network_receive_speed{instance=~"a|b",SessionName="s_1"}',
        ),
        ('{"weird.name", x="a\\"b"}', '{__name__="weird.name",x="a\\"b",SessionName="s_1"}'),
    ],
)
def test_a_lookups_selector_is_pinned_to_the_session(selector: str, pinned: str) -> None:
    assert pin_selector(selector, "s_1") == pinned
    assert sessions_of(pinned) == {"s_1"}


@pytest.mark.parametrize("selector", ["a{x='1'} or b", "sum(a)", "{}", "a{x=~'1'}[5m]"])
def test_only_one_selector_can_be_pinned(selector: str) -> None:
    with pytest.raises(QueryRefused):
        pin_selector(selector, "s_1")

"""Grafana's from/to rewritten into a dead session's window: relative values, missing
values, absolute values outside the session, and what is kept."""

from __future__ import annotations

from urllib.parse import parse_qsl

from runtime.server.grafana.window import PAD_MS, Window, rewrite_query, session_name_of

WINDOW = Window.padded(1_700_000_000_000, 1_700_000_600_000)  # a ten-minute session
START, END = WINDOW.start_ms, WINDOW.end_ms


def params(query: str | None) -> list[tuple[str, str]]:
    assert query is not None
    return parse_qsl(query, keep_blank_values=True)


def test_padding_is_one_scrape_interval_either_side() -> None:
    assert (START, END) == (1_700_000_000_000 - PAD_MS, 1_700_000_600_000 + PAD_MS)
    assert Window.padded(5_000_000, 4_000_000) == Window(4_000_000 - PAD_MS, 5_000_000 + PAD_MS)


def test_the_dashboards_relative_range_becomes_the_session_and_the_rest_is_kept_in_order() -> None:
    query = (
        "orgId=1&theme=dark&panelId=24&var-datasource=Prometheus&refresh&timezone=UTC&from=now-1h&to=now"
        "&var-SessionName=session_x"
    )
    assert params(rewrite_query(query, WINDOW)) == [
        ("orgId", "1"),
        ("theme", "dark"),
        ("panelId", "24"),
        ("var-datasource", "Prometheus"),
        ("timezone", "UTC"),
        ("from", str(START)),
        ("to", str(END)),
        ("var-SessionName", "session_x"),
    ]


def test_the_metrics_tab_query_with_refresh_and_kiosk() -> None:
    query = "orgId=1&theme=light&kiosk=1&refresh=5s&from=now-5m&to=now&var-SessionName=s&var-datasource=Prometheus"
    got = dict(params(rewrite_query(query, WINDOW)))
    assert got == {
        "orgId": "1",
        "theme": "light",
        "kiosk": "1",
        "from": str(START),
        "to": str(END),
        "var-SessionName": "s",
        "var-datasource": "Prometheus",
    }


def test_a_range_longer_than_the_session_never_reaches_outside_it() -> None:
    got = dict(params(rewrite_query("from=now-7d&to=now", WINDOW)))
    assert (int(got["from"]), int(got["to"])) == (START, END)


def test_absolute_values_are_clamped_into_the_window() -> None:
    inside = START + 60_000
    got = dict(params(rewrite_query(f"from={inside}&to={END + 10**9}", WINDOW)))
    assert (int(got["from"]), int(got["to"])) == (inside, END)


def test_an_absolute_range_already_inside_is_left_alone() -> None:
    assert rewrite_query(f"from={START + 1}&to={END - 1}&var-SessionName=s", WINDOW) is None


def test_a_range_entirely_outside_collapses_to_the_whole_session() -> None:
    got = dict(params(rewrite_query(f"from={END + 5}&to={END + 10}", WINDOW)))
    assert (int(got["from"]), int(got["to"])) == (START, END)


def test_missing_from_and_to_are_added() -> None:
    got = dict(params(rewrite_query("orgId=1&var-SessionName=s", WINDOW)))
    assert (got["from"], got["to"]) == (str(START), str(END))


def test_dates_and_repeated_values() -> None:
    got = params(rewrite_query("from=2020-01-01&from=now&to=now-1m", WINDOW))
    assert got == [("from", str(START)), ("to", str(END))]


def test_session_name_of() -> None:
    assert session_name_of("a=1&var-SessionName=session_2026&var-SessionName=other") == "session_2026"
    assert session_name_of("a=1") is None

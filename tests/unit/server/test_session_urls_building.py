"""A session URL opened while its index is built: a browser gets the progress page (which
reloads the same URL), the Dashboard's calls the 503 JSON; then the page and calls answer.
The build is held on its last event object (the index-building tests' gated store)."""

from __future__ import annotations

from runtime.server.session_urls import session_path
from tests.unit.server.test_index_building import DEADLINE, TASKS, World, _until, world

__all__ = ["world"]  # the fixture, imported


def test_the_page_shows_the_build_then_the_dashboard(world: World) -> None:
    client = world.app().test_client()
    url = session_path(world.sample.cluster, world.sample.session)
    navigate = {"Sec-Fetch-Mode": "navigate", "Accept": "text/html"}
    page = client.get(url, headers=navigate)
    assert page.status_code == 503
    assert page.mimetype == "text/html"
    assert f"Indexing {world.sample.session}" in page.get_data(as_text=True)
    assert 'http-equiv="refresh"' in page.get_data(as_text=True)  # reloads this same URL
    assert not page.headers.getlist("Set-Cookie")
    assert world.gate.reached.wait(DEADLINE)
    call = client.get(url + TASKS.lstrip("/"))
    assert call.status_code == 503 and call.mimetype == "application/json"
    assert "being indexed" in call.get_json()["msg"]
    world.gate.release.set()
    ready = _until(lambda: client.get(url, headers=navigate), lambda a: a.status_code != 503)
    assert ready.status_code == 200 and ready.mimetype == "text/html"
    tasks = client.get(url + TASKS.lstrip("/"))
    assert tasks.status_code == 200 and tasks.get_json()["data"]["result"]["total"] > 0

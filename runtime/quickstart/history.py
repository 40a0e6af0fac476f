"""Talking to the history server the quickstart started: readiness, entering the
stored session (which builds its index) and finding the failed task in it."""

from __future__ import annotations

import time
from typing import Any

import requests

from runtime.quickstart.errors import QuickstartError
from runtime.quickstart.processes import ManagedProcess
from runtime.server.session_urls import session_path
from runtime.storage.layout import ClusterRef


class HistoryError(QuickstartError):
    """The history server did not start or did not answer as expected."""


def wait_until_ready(url: str, server: ManagedProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = server.exit_code()
        if code is not None:
            raise HistoryError(f"the history server exited with {code}:\n{server.log_tail()}")
        try:
            if requests.get(f"{url}/readz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise HistoryError(f"the history server did not answer {url}/readz within {timeout:.0f} s:\n{server.log_tail()}")


def enter_path(namespace: str, cluster: str, session: str) -> str:
    return f"/enter_cluster/{namespace}/raycluster/{cluster}/{session}"


def session_url_path(namespace: str, cluster: str, session: str) -> str:
    """The session's shareable Dashboard path (no cookies needed; deep links work)."""
    return session_path(ClusterRef(namespace, cluster), session)


def enter_session(url: str, namespace: str, cluster: str, session: str) -> requests.Session:
    """A client holding the selection cookies; the server indexes the session now."""
    client = requests.Session()
    answer = client.get(url + enter_path(namespace, cluster, session), timeout=600)
    if answer.status_code != 200:
        raise HistoryError(f"entering {namespace}/{cluster}/{session} failed: HTTP {answer.status_code} {answer.text}")
    return client


def failed_tasks(client: requests.Session, url: str) -> list[dict[str, Any]]:
    params = {"detail": "1", "filter_keys": "state", "filter_predicates": "=", "filter_values": "FAILED"}
    answer = client.get(f"{url}/api/v0/tasks", params=params, timeout=60)
    if answer.status_code != 200:
        raise HistoryError(f"listing failed tasks failed: HTTP {answer.status_code} {answer.text[:500]}")
    result: list[dict[str, Any]] = answer.json()["data"]["result"]["result"]
    return result


def stored_session_names(url: str, namespace: str, cluster: str) -> list[str]:
    answer = requests.get(f"{url}/clusters", params={"namespace": namespace, "name": cluster}, timeout=60)
    if answer.status_code != 200:
        raise HistoryError(f"/clusters answered HTTP {answer.status_code}: {answer.text[:500]}")
    return [c["sessionName"] for c in answer.json() if c["name"] == cluster and c["sessionName"] != "live"]

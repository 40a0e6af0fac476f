"""What ``ray-history`` sends a history server as ``Authorization: Bearer <token>``.

First found: ``--token``, then ``RAY_HISTORY_TOKEN`` (the flag wins, as ``--server``
wins over ``RAY_HISTORY_SERVER``), then the credentials of the current kubeconfig
context as kubectl would use them, through the kubernetes client's own loader
(``KUBECONFIG`` or ``~/.kube/config``: a ``token`` or ``tokenFile``, an ``exec`` plugin,
an ``auth-provider``). A context that authenticates with a client certificate (or a
user name and password) has no bearer token: nothing is sent then.

Tokens are never logged, and never quoted in an error message.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runtime.cli.errors import UsageError

logger = logging.getLogger(__name__)

TOKEN_ENV = "RAY_HISTORY_TOKEN"  # noqa: S105 - the variable's name
TOKEN_FLAG = "--token"  # noqa: S105 - the flag's name
DEFAULT_KUBECONFIG = "~/.kube/config"
#: Visible ASCII only: anything else would break (or be quoted in) the HTTP header.
_TOKEN_CHARS = re.compile(r"^[\x21-\x7e]+$")
_BEARER = re.compile(r"^bearer\s+", re.IGNORECASE)


@dataclass(frozen=True, repr=False)
class Credentials:
    """A bearer token and where it came from, or why there is none.

    Attributes:
        token: the bearer token (None: send no ``Authorization`` header).
        source: where it came from, for messages (``--token``, ``RAY_HISTORY_TOKEN``,
            ``kubeconfig context NAME``); or why none was found.
    """

    token: str | None
    source: str

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def __repr__(self) -> str:  # never the token
        return f"Credentials(token={'<set>' if self.token else None}, source={self.source!r})"


def resolve(flag_token: str | None, env: Mapping[str, str]) -> Credentials:
    """``--token`` > ``RAY_HISTORY_TOKEN`` > the current kubeconfig context."""
    env_token = env.get(TOKEN_ENV, "").strip()
    if flag_token is not None:
        if env_token and env_token != flag_token.strip():
            logger.debug("%s is given: %s is not used", TOKEN_FLAG, TOKEN_ENV)
        return Credentials(checked(flag_token, TOKEN_FLAG), TOKEN_FLAG)
    if env_token:
        return Credentials(checked(env_token, TOKEN_ENV), TOKEN_ENV)
    return from_kubeconfig(env)


def checked(token: str, source: str) -> str:
    """The token without surrounding white space; UsageError (not quoting it) if unusable."""
    value = _BEARER.sub("", token.strip(), count=1)  # "Bearer abc" pasted whole is fine
    if not value:
        raise UsageError(f"{source} is empty: pass a token, e.g. from `kubectl create token SERVICE_ACCOUNT`")
    if not _TOKEN_CHARS.match(value):
        raise UsageError(f"the token from {source} contains spaces, control or non-ASCII characters")
    return value


def from_kubeconfig(env: Mapping[str, str]) -> Credentials:
    """The bearer token of the current kubeconfig context, as the kubernetes client loads
    it (exec plugins run, token files read); none when there is no such token."""
    try:
        from kubernetes.client import Configuration
        from kubernetes.config import load_kube_config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        logger.debug("no kubeconfig credentials: the kubernetes client is not installed")
        return Credentials(None, "no token (the kubernetes client is not installed to read kubeconfig)")
    paths = env.get("KUBECONFIG", "").strip() or DEFAULT_KUBECONFIG
    configuration = Configuration()
    try:
        # persist_config=False: never write the user's kubeconfig back (refreshed tokens).
        load_kube_config(config_file=paths, client_configuration=configuration, persist_config=False)  # type: ignore[no-untyped-call]
        context = _current_context(paths)
        value = configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        # Not fatal: a server started with --auth none needs nothing.
        logger.debug("no kubeconfig credentials from %s: %s", paths, _reason(exc))
        return Credentials(None, f"no token (kubeconfig {paths}: {_reason(exc)})")
    return _bearer_of(value, context, configuration)


def _bearer_of(value: str | None, context: str, configuration: Any) -> Credentials:
    where = f"kubeconfig context {context}"
    if value and _BEARER.match(value):
        token = _BEARER.sub("", value.strip(), count=1)
        if token and _TOKEN_CHARS.match(token):
            logger.debug("sending the bearer token of %s", where)
            return Credentials(token, where)
        logger.debug("the token of %s is not usable in a header: none sent", where)
        return Credentials(None, f"no token (the token of {where} is not usable)")
    if value:
        # username/password: the history server takes bearer tokens only.
        logger.debug("%s authenticates with a user name and password, not a bearer token: none sent", where)
        return Credentials(None, f"no token ({where} uses a user name and password)")
    if getattr(configuration, "cert_file", None):
        logger.debug("%s authenticates with a client certificate, which carries no bearer token: none sent", where)
        return Credentials(None, f"no token ({where} uses a client certificate)")
    logger.debug("%s has no credentials: no token sent", where)
    return Credentials(None, f"no token ({where} has none)")


def _current_context(paths: str) -> str:
    from kubernetes.config import list_kube_config_contexts

    _contexts, current = list_kube_config_contexts(config_file=paths)  # type: ignore[no-untyped-call]
    return str((current or {}).get("name") or "?")


def _reason(exc: Exception) -> str:
    """A one-line reason; never a token (the loader's messages name fields, not values)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]

"""Which PromQL a caller may send through the server: every vector selector must be
pinned to one session with ``SessionName="<name>"`` (or ``=~`` with a value that is
a plain session name, which Prometheus anchors, so it matches exactly that name),
and every such name must be one the caller may read. A selector without it, a
regular expression, or anything that does not tokenize is refused: the check fails
closed rather than trusting a query it does not understand.

This is a tokenizer, not a full parser: it finds vector selectors (a metric name
not followed by ``(``, or a bare ``{...}``) and skips label lists of ``by``,
``without``, ``on``, ``ignoring``, ``group_left`` / ``group_right``, range and
subquery brackets, strings and numbers.
"""

from __future__ import annotations

import re

SESSION_LABEL = "SessionName"
_SESSION_VALUE = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
#: A backslash before a letter or digit: a class or an anchor in RE2 (``\d``, ``\w``, ``\A``),
#: never what Grafana's escaping of a variable produces (it escapes punctuation only).
_CLASS_ESCAPE = re.compile(r"\\[A-Za-z0-9]")
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<number>(?:0x[0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(?:[a-zA-Z][a-zA-Z0-9]*)*)
    | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:.]*)
    | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^=<>,(){}\[\]@:])
    )""",
    re.VERBOSE,
)
#: Followed by a parenthesised list of label names, not selectors.
_LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_KEYWORDS = frozenset({"bool", "offset", "and", "or", "unless", "atan2", "inf", "nan", "start", "end"})
MAX_QUERY_CHARS = 20_000


class QueryRefused(ValueError):  # noqa: N818 - reads as what happened to the query
    """The query is not pinned to readable sessions; the message says why."""


def _tokens(query: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(query):
        if query[pos:].strip() == "":
            break
        found = _TOKEN.match(query, pos)
        if found is None or found.end() == pos:
            raise QueryRefused(f"cannot read the query at character {pos}: {query[pos : pos + 20]!r}")
        kind = found.lastgroup or ""
        out.append((kind, found.group(kind)))
        pos = found.end()
    return out


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", r"\1", body) if text[0] != "`" else body


def _session_value(op: str, value: str) -> str | None:
    """The session a matcher pins, or None when it does not pin exactly one."""
    if op == "=" and _SESSION_VALUE.match(value):
        return value
    if op == "=~":
        if _CLASS_ESCAPE.search(value):
            return None  # \d, \w, \pL ...: a class to Prometheus, not the letter left once unescaped
        plain = re.sub(r"\\(.)", r"\1", value)  # Grafana escapes regex characters in variables
        if _SESSION_VALUE.match(plain):
            return plain
    return None


def _matchers(tokens: list[tuple[str, str]], start: int) -> tuple[list[tuple[str, str, str]], int]:
    """The ``name op "value"`` triples of the ``{...}`` opening at ``start``; the index after it."""
    found: list[tuple[str, str, str]] = []
    i = start + 1
    while i < len(tokens) and tokens[i][1] != "}":
        kind, text = tokens[i]
        if kind == "op" and text == ",":
            i += 1
            continue
        if kind == "string" and (i + 1 >= len(tokens) or tokens[i + 1][0] != "op" or tokens[i + 1][1] == ","):
            found.append(("__name__", "=", _unquote(text)))  # {"metric.name"}
            i += 1
            continue
        if i + 2 >= len(tokens) or kind not in ("ident", "string") or tokens[i + 2][0] != "string":
            raise QueryRefused("cannot read a label matcher")
        name = _unquote(text) if kind == "string" else text
        found.append((name, tokens[i + 1][1], _unquote(tokens[i + 2][1])))
        i += 3
    if i >= len(tokens):
        raise QueryRefused("unbalanced braces")
    return found, i + 1


def _skip_group(tokens: list[tuple[str, str]], start: int, open_: str, close: str) -> int:
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i][0] == "op" and tokens[i][1] == open_:
            depth += 1
        elif tokens[i][0] == "op" and tokens[i][1] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    raise QueryRefused(f"unbalanced {open_}{close}")


def _check_balanced(tokens: list[tuple[str, str]]) -> None:
    depth = 0
    for kind, text in tokens:
        if kind == "op" and text in ("(", ")"):
            depth += 1 if text == "(" else -1
            if depth < 0:
                break
    if depth != 0:
        raise QueryRefused("unbalanced ()")


def sessions_of(query: str) -> set[str]:
    """The sessions ``query``'s selectors are pinned to; :class:`QueryRefused` when any
    selector is not pinned to exactly one session, or the query cannot be read."""
    if len(query) > MAX_QUERY_CHARS:
        raise QueryRefused(f"the query is longer than {MAX_QUERY_CHARS} characters")
    tokens = _tokens(query)
    _check_balanced(tokens)
    sessions: set[str] = set()
    selectors = 0
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "op" and text == "[":
            i = _skip_group(tokens, i, "[", "]")
            continue
        if kind == "ident" and text.lower() in _LABEL_LIST_KEYWORDS and nxt == "(":
            i = _skip_group(tokens, i + 1, "(", ")")
            continue
        if kind == "ident" and text.lower() in _KEYWORDS:
            i += 1
            continue
        if kind == "ident" and (nxt == "(" or nxt.lower() in ("by", "without")):  # a function or aggregation
            i += 1
            continue
        if kind == "ident" or (kind == "op" and text == "{"):
            if kind == "ident" and nxt != "{":
                raise QueryRefused(f"selector {text} has no {SESSION_LABEL} matcher")
            brace = i + 1 if kind == "ident" else i
            matchers, i = _matchers(tokens, brace)
            pinned = {_session_value(op, value) for name, op, value in matchers if name == SESSION_LABEL}
            pinned.discard(None)
            if len(pinned) != 1:
                label = text if kind == "ident" else "{...}"
                raise QueryRefused(f'selector {label} must carry exactly one {SESSION_LABEL}="<session>" matcher')
            sessions.update(p for p in pinned if p is not None)
            selectors += 1
            continue
        i += 1
    if selectors == 0:
        raise QueryRefused(f'the query selects no series; pin it with {SESSION_LABEL}="<session>"')
    return sessions


def pin_selector(selector: str, session: str) -> str:
    """A single series selector (``metric{...}`` or ``{...}``, as label-value lookups send
    in ``match[]``) rewritten to select only ``session``: any ``SessionName`` matcher it
    had is replaced. :class:`QueryRefused` for anything but one selector."""
    if not _SESSION_VALUE.match(session):
        raise QueryRefused(f"not a session name: {session!r}")
    tokens = _tokens(selector)
    name = ""
    start = 0
    if tokens and tokens[0][0] == "ident":
        name, start = tokens[0][1], 1
    if start >= len(tokens):
        matchers: list[tuple[str, str, str]] = []
    elif tokens[start][1] == "{":
        matchers, end = _matchers(tokens, start)
        if end != len(tokens):
            raise QueryRefused("a label lookup's match[] must be one series selector")
    else:
        raise QueryRefused("a label lookup's match[] must be one series selector")
    if not name and not matchers:
        raise QueryRefused("an empty match[]")
    kept = [(n, op, v) for n, op, v in matchers if n != SESSION_LABEL]
    kept.append((SESSION_LABEL, "=", session))
    if any(op not in ("=", "!=", "=~", "!~") for _, op, _ in kept):
        raise QueryRefused("a label matcher with an unknown operator")
    body = ",".join(f"{_label(n)}{op}{_quote(v)}" for n, op, v in kept)
    return f"{name}{{{body}}}"


def _label(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else _quote(name)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

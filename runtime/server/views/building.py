"""The page a browser entering a session sees while its index is built.

Server-rendered, no script and no external asset: it shows the build's phase and
progress and reloads itself (``<meta http-equiv="refresh">``) every
``Retry-After`` seconds; the reload is the same ``/enter_cluster`` navigation, so
once the index is ready it redirects into the Dashboard.
"""

from __future__ import annotations

from html import escape

from flask import Response

from runtime.server.errors import IndexBuildingError

PAGE_HEADERS = {
    "X-Frame-Options": "DENY",
    # Nothing to load: no script, no style sheet, no image.
    "Content-Security-Policy": "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{refresh}">
<title>Indexing {session}</title>
</head>
<body>
<h1>Indexing {session}</h1>
<p>The History Server is reading this session's events once; the Dashboard opens when it is done.</p>
<p><progress{value}>{percent}</progress> <span id="phase">{phase}</span></p>
<p>This page reloads every {refresh} s.</p>
</body>
</html>
"""


def building_page(exc: IndexBuildingError) -> Response:
    """503 with ``Retry-After``: a page showing ``exc``'s progress that reloads itself."""
    progress, session = exc.progress, exc.session
    phase, done, total = str(progress.get("phase", "")), progress.get("done"), progress.get("total")
    refresh = exc.headers.get("Retry-After", "2")
    value, percent, shown = "", "", phase
    if isinstance(done, int) and isinstance(total, int) and total > 0:
        value = f' value="{done}" max="{total}"'  # without them <progress> shows an indeterminate bar
        percent = f"{min(100, done * 100 // total)} %"
        shown = f"{phase}: {percent} ({done:,} of {total:,})"
    elif isinstance(done, int):
        shown = f"{phase}: {done:,}"
    body = _PAGE.format(
        refresh=escape(refresh), session=escape(session), value=value, percent=percent, phase=escape(shown)
    )
    response = Response(body, status=503, content_type="text/html; charset=utf-8")
    response.headers.update(PAGE_HEADERS)
    response.headers["Retry-After"] = refresh
    return response

"""Who may talk to the viewer.

Every request must name an allowed host in its ``Host`` header (Starlette's TrustedHostMiddleware): a page on
another site that rebinds its own DNS name to 127.0.0.1 (DNS rebinding) sends its own name as the Host, so it
can neither read the profile nor write. Allowed: the loopback names, what ``-b`` names, and for a wildcard bind
(``0.0.0.0``, ``::``) this machine's host names and addresses, plus any ``--allow-host``.

A request that changes state (only ``POST /api/aggregate`` and ``POST /api/databases`` today) must also come
from the viewer's own pages: its ``Origin`` (or, when a browser sends none, its ``Referer``) must be this
server's origin, and its body must be JSON (``Content-Type: application/json``), which a cross-site form or a
"simple" cross-origin fetch cannot send without a CORS preflight that this server never grants.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_BINDS = ("0.0.0.0", "::", "[::]", "")
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def machine_names() -> set[str]:
    """This machine's host names and the addresses they resolve to (what a LAN browser may type)."""
    names = {socket.gethostname(), socket.getfqdn()}
    out = set(names)
    for name in names:
        try:
            out |= {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    try:  # the address of the interface a default route would use (connect on UDP sends nothing)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            out.add(s.getsockname()[0])
    except OSError:
        pass
    return {_bracket(n.lower()) for n in out if n}


def allowed_hosts(bind: str = "127.0.0.1", extra: Iterable[str] = ()) -> list[str]:
    """The Host allow-list for a server bound to ``bind``."""
    hosts = {*LOOPBACK, *(_bracket(h.strip().lower()) for h in extra if h.strip())}
    if bind in WILDCARD_BINDS:
        hosts |= machine_names()
    else:
        hosts.add(_bracket(bind.lower()))
    return sorted(hosts)


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


class SameOriginWrites:
    """ASGI middleware: a state-changing request must come from this server's own pages and carry JSON."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        problem = write_problem(headers, scope.get("scheme", "http"))
        if problem is not None:
            status, message = problem
            await JSONResponse({"error": message, "parameter": None, "hint": None}, status)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def write_problem(headers: Headers, scheme: str = "http") -> tuple[int, str] | None:
    """(status, message) when a state-changing request may not proceed, else None."""
    own = f"{scheme}://{headers.get('host', '')}".lower()
    origin = headers.get("origin")
    if origin is not None:
        if origin == "null" or _origin_of(origin) != own:
            return 403, f"cross-origin request refused (Origin {origin!r} is not {own})"
    else:
        referer = headers.get("referer")
        if referer is None or _origin_of(referer) != own:
            return 403, "request refused: it must come from the viewer's own page (no Origin or Referer of this server)"
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        return 415, f"the body must be JSON (Content-Type: application/json, not {media or 'none'!r})"
    return None

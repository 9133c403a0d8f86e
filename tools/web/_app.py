"""The inspector's ASGI app: routing, the JSON API, templates and the guards.

Theory of operation
-------------------
Every page is a row of `ROUTES`: a path pattern, the `Inspector` method that
returns its data and the template that renders it. ``/PATH`` renders the page,
``/api/PATH`` returns the same data as JSON (``/api/`` is the index). Paths are
matched on the raw, still percent-encoded path, one segment at a time, so a
session id may hold any character (``/`` and ``%`` included): links encode each
segment with `session_href`, and the router decodes each segment on its own.

Event content is hostile: tool outputs hold HTML, scripts and terminal escapes.
So:

* templates autoescape everything, and every string they print first has its
  control, C1 and bidi characters shown as escapes (`visible`);
* no value from the log ever becomes a URL scheme or an attribute other than a
  percent-encoded path segment or a ``data-`` value read as text by the script;
* every response carries a Content-Security-Policy that allows scripts, styles
  and images only from the package's own static files (no inline script, no
  inline style, no eval), ``nosniff``, no referrer, no framing;
* the script builds live rows with ``textContent`` only.

The app is read-only: it answers GET and HEAD and refuses every other method
(405) before routing, and it opens the log read-only. Bound to loopback, it
accepts only loopback ``Host`` headers (a page of another site cannot reach it
through DNS rebinding). Bound to any other address it needs a token: given once
as ``?token=`` (then kept in a same-site, HTTP-only cookie and removed from the
address) or as ``Authorization: Bearer``; a request without it gets 401.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

import anyio.to_thread
import turnlog
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..terminal import visible
from ._inspector import BadRequestError, Inspector, NotFoundError, session_href

__all__ = ["CSP", "ROUTES", "create_app"]

#: The Content-Security-Policy of every response.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
_COOKIE = "turnlog_token"
_STATIC_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}
#: Seconds one wait of the live timeline lasts before the stream sends a keep-alive.
FOLLOW_WAIT = 1.0

S, N = "session", "number"  # the placeholders of a route pattern


class _Route:
    __slots__ = ("api_only", "method", "pattern", "template")

    def __init__(
        self, pattern: tuple[str, ...], method: str, template: str = "", *, api_only: bool = False
    ) -> None:
        self.pattern, self.method, self.template = pattern, method, template
        self.api_only = api_only


#: Pages and API endpoints: the path pattern (``S`` a session id, ``N`` a number),
#: the `Inspector` method and the template (none: JSON only).
ROUTES = (
    _Route((), "sessions", "index.html"),
    _Route(("sessions",), "sessions", "index.html"),
    _Route(("sessions", S), "timeline", "timeline.html"),
    _Route(("sessions", S, "events", N), "event", "event.html"),
    _Route(("sessions", S, "requests", N), "receipt", "receipt.html"),
    _Route(("sessions", S, "requests", N, "replay"), "replay", api_only=True),
    _Route(("sessions", S, "requests", N, "body"), "body", api_only=True),
    _Route(("sessions", S, "diff", N, N), "diff", "diff.html"),
    _Route(("sessions", S, "summaries"), "summaries", "summaries.html"),
    _Route(("sessions", S, "memories"), "memories", "memories.html"),
)


def _match(segments: list[str]) -> tuple[_Route, list[str]] | None:
    for route in ROUTES:
        if len(route.pattern) != len(segments):
            continue
        args = []
        for want, got in zip(route.pattern, segments, strict=True):
            if want in (S, N):
                args.append(got)
            elif want != got:
                break
        else:
            return route, args
    return None


def _int(value: str, name: str) -> int:
    if not re.fullmatch(r"-?[0-9]{1,18}", value):
        raise BadRequestError(f"{name} must be an integer, found {value!r}")
    return int(value)


def _show(value: object) -> object:
    """Jinja's finalize: strings have their control characters shown as escapes."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


def _query(base: str, **params: object) -> str:
    """``base`` with the non-empty ``params`` as its query string."""
    kept = {k: v for k, v in params.items() if v not in (None, "", [])}
    return base + ("?" + urlencode(kept, doseq=True) if kept else "")


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("turnlog.tools.web", "templates"),
        autoescape=True,
        finalize=_show,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["query"] = _query
    env.globals["href"] = session_href
    env.filters["num"] = lambda n: f"{n:,}" if isinstance(n, int) else n
    return env


def _static_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("turnlog.tools.web") / "static"
    files = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _STATIC_TYPES:
            files[entry.name] = (entry.read_bytes(), _STATIC_TYPES[suffix])
    return files


def _is_loopback_name(name: str) -> bool:
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


class _Guard:
    """Refuses writes, foreign hosts and requests without the token; adds the security
    headers to every response."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool) -> None:
        self.app, self.token, self.loopback = app, token, loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        response = self._refusal(scope)
        if response is not None:
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> Response | None:
        if scope["method"] not in ("GET", "HEAD"):
            return PlainTextResponse(
                "405 the inspector is read-only: GET and HEAD only\n",
                status_code=405,
                headers={"allow": "GET, HEAD"},
            )
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if self.loopback:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not _is_loopback_name(name.lower()):
                return PlainTextResponse(
                    "421 this inspector answers on a loopback address only\n", status_code=421
                )
        if self.token is None:
            return None
        given = ""
        auth = headers.get("authorization", "")
        if auth.startswith("Bearer "):
            given = auth[7:]
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if (
            not given
            and "token" in query
            and hmac.compare_digest(query["token"].encode(), self.token.encode())
        ):
            rest = {k: v for k, v in query.items() if k != "token"}
            target = scope.get("raw_path", b"").decode("latin-1") or "/"
            response = RedirectResponse(_query(target, **rest), status_code=303)
            response.set_cookie(_COOKIE, self.token, httponly=True, samesite="strict")
            return response
        if not given:
            for part in headers.get("cookie", "").split(";"):
                name, _, value = part.strip().partition("=")
                if name == _COOKIE:
                    given = value
        if given and hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        return PlainTextResponse(
            "401 this inspector needs its token: open the address "
            "`turnlog serve` printed (with ?token=...)\n",
            status_code=401,
        )


class _App:
    """Routes a request to its `Inspector` method; renders HTML or JSON."""

    def __init__(self, inspector: Inspector) -> None:
        self.inspector = inspector
        self.env = _environment()
        self.static = _static_files()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        response = await self._respond(request)
        await response(scope, receive, send)

    async def _respond(self, request: Request) -> Response:
        raw = request.scope.get("raw_path") or request.scope["path"].encode()
        path = raw.decode("latin-1").split("?", 1)[0]
        try:
            segments = [unquote(s, errors="strict") for s in path.strip("/").split("/") if s]
        except UnicodeDecodeError:
            return PlainTextResponse("400 the path is not percent-encoded UTF-8\n", status_code=400)
        if segments[:1] == ["static"] and len(segments) == 2:
            found = self.static.get(segments[1])
            if found is None:
                return PlainTextResponse("404 no such file\n", status_code=404)
            return Response(found[0], media_type=found[1])
        if segments == ["favicon.ico"]:
            return Response(status_code=204)
        api = segments[:1] == ["api"]
        if api:
            segments = segments[1:]
        matched = _match(segments)
        if matched is None or (matched[0].api_only and not api):
            if (
                api
                and segments[-1:] == ["follow"]
                and len(segments) == 3
                and segments[0] == "sessions"
            ):
                return await self._follow(request, segments[1])
            return self._error(api, 404, "no such page; the pages are listed at /", request)
        route, args = matched
        try:
            data = await anyio.to_thread.run_sync(self._call, route, args, request)
        except NotFoundError as exc:
            return self._error(api, 404, str(exc), request)
        except BadRequestError as exc:
            return self._error(api, 400, str(exc), request)
        except turnlog.KernelError as exc:
            return self._error(api, 500, f"{type(exc).__name__}: {exc}", request)
        if api:
            return JSONResponse(data)
        return HTMLResponse(self._render(route.template, data, request))

    def _call(self, route: _Route, args: list[str], request: Request) -> dict[str, Any]:
        params = request.query_params
        ins = self.inspector
        if route.method == "sessions":
            return ins.sessions(prefix=params.get("q", ""), after=params.get("after", ""))
        session = args[0]
        numbers = [_int(a, "seq") for a in args[1:]]
        if route.method == "timeline":
            start = params.get("from")
            return ins.timeline(
                session,
                start=None if not start else _int(start, "from"),
                limit=_int(params.get("limit", "200"), "limit"),
                kinds=params.getlist("kind"),
            )
        if route.method == "event":
            return ins.event(session, numbers[0])
        if route.method == "receipt":
            return ins.receipt(
                session,
                numbers[0],
                decision=params.get("decision", ""),
                kind=params.get("kind", ""),
                page=_int(params.get("page", "0"), "page"),
            )
        if route.method == "body":
            return ins.body(session, numbers[0])
        if route.method == "replay":
            return ins.replay(session, numbers[0])
        if route.method == "diff":
            return ins.diff(session, numbers[0], numbers[1])
        if route.method == "summaries":
            return ins.summaries(session)
        if route.method == "memories":
            return ins.memories(
                session, query=params.get("q", ""), k=_int(params.get("k", "10"), "k")
            )
        raise AssertionError(route.method)

    def _render(self, template: str, data: dict[str, Any], request: Request) -> str:
        api = "/api" + (request.scope.get("raw_path") or b"").decode("latin-1")
        return self.env.get_template(template).render(
            data=data, api=api, path=request.url.path, params=dict(request.query_params)
        )

    def _error(self, api: bool, status: int, message: str, request: Request) -> Response:
        if api:
            return JSONResponse({"error": message, "status": status}, status_code=status)
        return HTMLResponse(
            self._render("error.html", {"status": status, "message": message}, request),
            status_code=status,
        )

    async def _follow(self, request: Request, session: str) -> Response:
        """Server-sent events: each event appended to ``session`` after ``?after=``."""
        try:
            after = _int(request.query_params.get("after", "-1"), "after")
            last_id = request.headers.get("last-event-id")
            if last_id:
                after = max(after, _int(last_id, "Last-Event-ID"))
            if after < -1:
                raise BadRequestError(f"after must be >= -1, found {after}")
            kinds = request.query_params.getlist("kind")
            await anyio.to_thread.run_sync(
                functools.partial(self.inspector.timeline, session, limit=1, kinds=kinds)
            )
            await anyio.to_thread.run_sync(
                functools.partial(
                    self.inspector.follow, session, after, wait=0, kinds=kinds, limit=1
                )
            )
        except NotFoundError as exc:
            return JSONResponse({"error": str(exc), "status": 404}, status_code=404)
        except BadRequestError as exc:
            return JSONResponse({"error": str(exc), "status": 400}, status_code=400)

        async def stream() -> AsyncIterator[str]:
            nonlocal after
            yield "retry: 1000\n\n"
            while True:  # until the client goes: the response then cancels this
                events, last = await anyio.to_thread.run_sync(
                    functools.partial(
                        self.inspector.follow, session, after, wait=FOLLOW_WAIT, kinds=kinds
                    )
                )
                for row in events:
                    yield f"id: {row['seq']}\nevent: append\ndata: {json.dumps(row)}\n\n"
                if last != after and not events:
                    yield f"id: {last}\n: skipped\n\n"  # resume after events not shown
                after = last
                if not events:
                    yield ": waiting\n\n"
                await asyncio.sleep(0)

        return StreamingResponse(stream(), media_type="text/event-stream")


def create_app(
    log: turnlog.Log, *, token: str | None = None, loopback: bool = True
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The inspector's ASGI app over ``log`` (which it never appends to).

    Parameters:
        log: the log to show (open it read-only).
        token: required on every request when given (``?token=`` once, then a
            cookie, or ``Authorization: Bearer``).
        loopback: the server listens on a loopback address: only loopback
            ``Host`` headers are answered.
    """
    return _Guard(_App(Inspector(log)), token=token, loopback=loopback)

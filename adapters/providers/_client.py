"""The HTTP client for the three wire formats, on httpx (blocking and asyncio).

Theory of operation
-------------------
`send` posts a rendered request body (the exact bytes a request record
hashes) to a provider endpoint and parses the answer with ``responses``: a
JSON body or, when the server answers ``text/event-stream``, an SSE stream
read to its end. `asend` is the same call on asyncio. Both are thin shells
around one sans-I/O core, as in h11: `_request` says what to post (URL,
headers), `_reply` turns what came back (status, content type, body) into a
`Reply`, and `_failure` turns an httpx exception into turnlog's error. The
shells only move the bytes, with ``httpx.Client.stream`` or
``httpx.AsyncClient.stream``: the answer is read chunk by chunk as it
arrives, each read under the timeout, so a long stream that keeps sending
never times out and one that stalls does. `asend` does its I/O on the event
loop itself (no worker thread).

An HTTP error status is not an exception here: it comes back as a `Reply`
whose ``error`` is set, ready to append as ``ProviderErrorReceived``. Only
failures that produce no answer raise, each a `ProviderError` that carries
the event to append (``error``):

* `ProviderTimeoutError` (also a ``TimeoutError``): no connection, no answer,
  or a stalled answer within ``timeout`` (``error_type`` ``timeout``);
* `ProviderError` with ``error_type`` ``connection``: the server cannot be
  reached (refused, unknown host, not an http(s) URL), it closed the
  connection without answering, or the answer broke off part-way;
* ``turnlog.errors.DecodeError``: a 2xx answer that does not parse (a
  malformed JSON body or SSE stream, a stream that stops before its end).

There are no retries: a failure is returned to the caller (who records it,
`Session.record` takes the `ProviderError`) and the next request is the
caller's decision.

Connections: pass an ``httpx.Client`` (``httpx.AsyncClient`` to `asend`) as
``client`` to keep connections open between calls, as the official SDKs do
(a pool per client, HTTP/1.1 keep-alive); the client stays the caller's to
close. Without one, each call opens a client of its own and closes it.

Base URLs follow the official SDKs: an OpenAI base URL includes the version
(``https://api.openai.com/v1``), an Anthropic one does not
(``https://api.anthropic.com``); the provider's path is appended. Headers
(authentication, API version) come from the provider record.
"""

from __future__ import annotations

import functools
import os
import re
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager

import httpx
from turnlog import KernelError
from turnlog.errors import DecodeError, InvalidArgumentError
from turnlog.events import ProviderErrorReceived

from ._anthropic import ANTHROPIC_VERSION
from ._parse import parse_http
from ._registry import PROVIDERS, provider
from ._replies import Reply

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_BASE_URLS",
    "ProviderError",
    "ProviderTimeoutError",
    "asend",
    "endpoint",
    "send",
]

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP header name (RFC 9110)

#: The public endpoints, used when no base URL is given (each provider's ``base_url``).
DEFAULT_BASE_URLS: Mapping[str, str] = {name: p.base_url for name, p in PROVIDERS.items()}


class ProviderError(KernelError):
    """A provider call failed.

    Attributes:
        error: the failure as the event to append (status None when no HTTP
            answer came back).
    """

    def __init__(self, message: str, *, error: ProviderErrorReceived) -> None:
        super().__init__(message)
        self.error = error


class ProviderTimeoutError(ProviderError, TimeoutError):
    """The provider did not answer within the timeout."""


def endpoint(format: str, base_url: str | None = None) -> str:  # noqa: A002
    """The URL a ``format`` request is posted to.

    Raises:
        RenderError: unknown format.
    """
    return provider(format).endpoint(base_url)


def send(
    format: str,  # noqa: A002
    body: bytes,
    *,
    api_key: str,
    base_url: str | None = None,
    timeout: float = 120.0,
    headers: Mapping[str, str] | None = None,
    request_seq: int | None = None,
    client: httpx.Client | None = None,
) -> Reply:
    """POST a rendered request body and parse the answer.

    Parameters:
        format: ``openai-chat``, ``openai-responses`` or ``anthropic``.
        body: the request body (e.g. ``Recorded.rendered``).
        api_key: sent as ``Authorization: Bearer`` (OpenAI) or ``x-api-key`` (Anthropic).
        base_url: the API root (see the module docstring); the public one when None.
        timeout: seconds to connect, to send and for each read.
        headers: further headers.
        request_seq: the seq of the ``RequestIssued`` record (put into the events).
        client: an ``httpx.Client`` whose connections are reused (kept open, not
            closed here); a client of this call's own when None.

    Returns:
        The parsed `Reply`; for an HTTP error status its ``error`` is set.

    Raises:
        InvalidArgumentError: an API key or header HTTP cannot carry (not printable
            ASCII); nothing is sent.
        ProviderTimeoutError: no connection or no (further) answer within ``timeout``.
        ProviderError: the server cannot be reached or the answer broke off.
        DecodeError: a successful answer that does not parse.
    """
    url, all_headers = _request(format, api_key, base_url, headers)
    answer = _Answer()
    try:
        with (
            _sync_client(client) as http,
            http.stream(
                "POST", url, content=body, headers=all_headers, timeout=httpx.Timeout(timeout)
            ) as response,
        ):
            answer.start(response)
            for chunk in response.iter_bytes():
                answer.chunks.append(chunk)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return _failure(exc, format, url, timeout, request_seq, answer)
    return _reply(format, answer, request_seq)


async def asend(
    format: str,  # noqa: A002
    body: bytes,
    *,
    api_key: str,
    base_url: str | None = None,
    timeout: float = 120.0,
    headers: Mapping[str, str] | None = None,
    request_seq: int | None = None,
    client: httpx.AsyncClient | None = None,
) -> Reply:
    """`send` for asyncio: the same request, answer and errors, the I/O done on the
    event loop (``client``: an ``httpx.AsyncClient``)."""
    url, all_headers = _request(format, api_key, base_url, headers)
    answer = _Answer()
    try:
        async with (
            _async_client(client) as http,
            http.stream(
                "POST", url, content=body, headers=all_headers, timeout=httpx.Timeout(timeout)
            ) as response,
        ):
            answer.start(response)
            async for chunk in response.aiter_bytes():
                answer.chunks.append(chunk)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return _failure(exc, format, url, timeout, request_seq, answer)
    return _reply(format, answer, request_seq)


# -- the shells' connections -------------------------------------------------------------------
@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS settings of every client a call opens for itself, made once: httpx's
    defaults (certifi's roots, ``SSL_CERT_FILE``), which take tens of milliseconds to
    load, longer than a local request."""
    return httpx.create_ssl_context()


@contextmanager
def _sync_client(client: httpx.Client | None) -> Iterator[httpx.Client]:
    if client is not None:
        yield client
        return
    with httpx.Client(verify=_tls()) as own:
        yield own


@asynccontextmanager
async def _async_client(client: httpx.AsyncClient | None) -> AsyncIterator[httpx.AsyncClient]:
    if client is not None:
        yield client
        return
    async with httpx.AsyncClient(verify=_tls()) as own:
        yield own


# -- the sans-I/O core -------------------------------------------------------------------------
class _Answer:
    """What came back so far: the status line's status, the content type, the body read."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.content_type = ""
        self.chunks: list[bytes] = []

    def start(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.content_type = response.headers.get("content-type", "")

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.chunks)


def _request(
    format: str,  # noqa: A002
    api_key: str,
    base_url: str | None,
    headers: Mapping[str, str] | None,
) -> tuple[str, dict[str, str]]:
    """The URL and the headers of a ``format`` request."""
    spec = provider(format)
    for name, value in (("api_key", api_key), *(headers or {}).items()):
        _check_header(name, value)
    return spec.endpoint(base_url), {
        "content-type": "application/json",
        "accept": "application/json",
        **spec.headers(api_key),
        **(headers or {}),
    }


def _check_header(name: object, value: object) -> None:
    """A header (or the API key) HTTP can carry: printable ASCII. The value is never
    echoed (it may be a key); httpx's own error would print it."""
    if not isinstance(name, str) or not isinstance(value, str):
        raise InvalidArgumentError(
            f"header {name!r}: expected a str name and value, found "
            f"{type(name).__name__} and {type(value).__name__}"
        )
    if name != "api_key" and not _TOKEN.fullmatch(name):
        raise InvalidArgumentError(
            f"header {name!r}: a name an HTTP header cannot carry; expected letters, digits "
            "and !#$%&'*+-.^_`|~ only (no space or colon); nothing was sent"
        )
    bad = next((i for i, c in enumerate(value) if not (" " <= c <= "~" or c == "\t")), None)
    if bad is not None:
        where = "the api_key" if name == "api_key" else f"header {name!r}"
        raise InvalidArgumentError(
            f"{where}: its value holds a character an HTTP header cannot carry (code point "
            f"{ord(value[bad])} at position {bad}); expected printable ASCII. Check it for a "
            "stray newline or a pasted character; nothing was sent"
        )


def _reply(format: str, answer: _Answer, request_seq: int | None) -> Reply:  # noqa: A002
    """The `Reply` of a complete answer."""
    status = answer.status if answer.status is not None else 0
    stream = "text/event-stream" in answer.content_type.lower()
    return parse_http(
        format,
        status,
        b"".join(answer.chunks),
        stream=stream if status < 400 else False,
        request_seq=request_seq,
    )


def _failure(
    exc: Exception,
    format: str,  # noqa: A002
    url: str,
    timeout: float,
    request_seq: int | None,
    answer: _Answer,
) -> Reply:
    """What a failed exchange gives: the error status already received with whatever
    of its body arrived, else the error to raise."""
    if answer.status is not None and answer.status >= 400:
        return _reply(format, answer, request_seq)  # (as much of the error body as came)
    if isinstance(exc, httpx.DecodingError):
        raise DecodeError(
            f"{format} reply from {url}: the body cannot be decoded with its "
            f"content-encoding ({exc})"
        ) from exc
    if isinstance(exc, httpx.TimeoutException):
        if isinstance(exc, httpx.ConnectTimeout):
            what = f"could not connect to {url} within {timeout:g} s"
        elif isinstance(exc, httpx.PoolTimeout):
            what = (
                f"no free connection to {url} in the client's pool within {timeout:g} s "
                "(raise its limits, or close finished streams sooner)"
            )
        elif answer.status is not None:
            what = (
                f"the answer from {url} stalled: nothing more for {timeout:g} s after "
                f"{answer.size} bytes of the body"
            )
        else:
            what = f"no answer from {url} within {timeout:g} s"
        raise ProviderTimeoutError(
            what,
            error=ProviderErrorReceived(
                request_seq=request_seq, error_type="timeout", message=what
            ),
        ) from exc
    reason = _reason(exc)
    if answer.status is not None:
        what = (
            f"the answer from {url} broke off after {answer.size} bytes of the body "
            f"({reason}); nothing of it was parsed"
        )
    elif isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        what = f"cannot reach {url}: {reason} (expected an http:// or https:// base URL)"
    elif isinstance(exc, httpx.RemoteProtocolError):
        what = f"{url} closed the connection without answering ({reason})"
    else:
        what = f"cannot reach {url}: {reason}"
    raise ProviderError(
        what,
        error=ProviderErrorReceived(request_seq=request_seq, error_type="connection", message=what),
    ) from exc


def _reason(exc: BaseException) -> str:
    """What the system said, where the exception chain holds it: the asyncio backend
    says only "All connection attempts failed" above the ``ConnectionRefusedError``."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno:
            return f"[Errno {seen.errno}] {os.strerror(seen.errno)}"
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__

"""Parse provider replies (JSON bodies, SSE streams, HTTP answers) into turnlog events.

The rules every parser follows are in ``_replies``; each provider's parsers
are in its own module and reached through the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import msgspec
from turnlog import Log
from turnlog.errors import DecodeError, InvalidEventError
from turnlog.stores import MemoryStore

from ._registry import PROVIDERS
from ._replies import Reply, load_json, obj, parse_error, sse_events
from ._wire import Provider

__all__ = ["parse_http", "parse_response", "parse_stream"]

#: Checks a parsed message as `Log.append` would (one id per call, sizes), writing nothing.
_VALIDATOR = Log(MemoryStore())


def parse_response(
    format: str,  # noqa: A002
    body: bytes | str | Mapping[str, object],
    *,
    request_seq: int | None = None,
) -> Reply:
    """Parse a complete (non-streamed) JSON reply of ``format``.

    An error body (OpenAI ``{"error": ...}``, Anthropic ``{"type": "error", ...}``)
    gives a `Reply` whose ``error`` is set.

    Parameters:
        format: ``openai-chat``, ``openai-responses`` or ``anthropic``.
        body: the HTTP body (bytes or text) or the decoded JSON object.
        request_seq: the seq of the ``RequestIssued`` record this answers.

    Raises:
        DecodeError: the body is not JSON or not the provider's shape.
    """
    parser = _provider(format).parse
    return _guard(format, lambda: parser(obj(load_json(body), "$"), request_seq))


def parse_stream(
    format: str,  # noqa: A002
    stream: bytes | str | Iterable[bytes | str | Mapping[str, object]],
    *,
    request_seq: int | None = None,
) -> Reply:
    """Parse a streamed (``stream: true``) reply of ``format``.

    Parameters:
        stream: the raw SSE body, or an iterable of SSE lines/blocks (``"data: {...}"``,
            ``"event: x\\ndata: {...}"``) or of already decoded event objects.
        request_seq: the seq of the ``RequestIssued`` record this answers.

    Raises:
        DecodeError: not SSE, an event that is not JSON or not the provider's shape,
            or a stream that stops before its end.
    """
    parser = _provider(format).parse_stream
    return _guard(format, lambda: parser(sse_events(stream), request_seq))


def parse_http(
    format: str,  # noqa: A002
    status: int,
    body: bytes | str,
    *,
    stream: bool | None = None,
    request_seq: int | None = None,
) -> Reply:
    """Parse an HTTP answer: an error for status >= 400, else a JSON body or a stream.

    Parameters:
        stream: whether the body is SSE; None guesses from its first bytes.

    Raises:
        DecodeError: a successful answer that does not parse.
    """
    if status >= 400:
        return Reply(error=parse_error(status, body, request_seq=request_seq))
    if stream is None:
        head = body[:64].lstrip() if isinstance(body, bytes) else body[:64].lstrip().encode()
        stream = head.startswith((b"data:", b"event:", b":", b"id:", b"retry:"))
    if stream:
        return parse_stream(format, body, request_seq=request_seq)
    return parse_response(format, body, request_seq=request_seq)


def _guard(format: str, fn: Callable[[], Reply]) -> Reply:  # noqa: A002
    try:
        reply = fn()
    except DecodeError:
        raise
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        RecursionError,
        OverflowError,
        msgspec.MsgspecError,
    ) as exc:
        raise DecodeError(
            f"{format} reply: cannot be parsed ({type(exc).__name__}: {exc})"
        ) from exc
    return _validated(format, reply)


def _validated(format: str, reply: Reply) -> Reply:  # noqa: A002
    """Round-trip the events through their schema, so that what is returned can be appended."""
    try:
        checked = msgspec.msgpack.decode(msgspec.msgpack.encode(reply), type=Reply)
    except (msgspec.MsgspecError, UnicodeError, ValueError, TypeError) as exc:
        raise DecodeError(f"{format} reply: a field does not fit the event schema: {exc}") from exc
    if checked.message is not None:
        try:  # what the schema cannot say, as `Log.append` checks it (one id per call)
            _VALIDATOR.validate("reply", checked.message)
        except InvalidEventError as exc:
            raise DecodeError(f"{format} reply: {exc}") from exc
    return checked


def _provider(format: str) -> Provider:  # noqa: A002
    found = PROVIDERS.get(format) if isinstance(format, str) else None
    if found is None:
        raise DecodeError(f"unknown format {format!r}; expected one of {sorted(PROVIDERS)}")
    return found

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
    value = load_json(body)
    try:
        return _guard(format, lambda: parser(obj(value, "$"), request_seq))
    except DecodeError as exc:
        raise _other_api(format, [value], exc) from exc


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
    events = sse_events(stream)
    try:
        return _guard(format, lambda: parser(events, request_seq))
    except DecodeError as exc:
        raise _other_api(format, events, exc) from exc


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


def _chat(value: Mapping[str, object]) -> bool:
    return value.get("object") in ("chat.completion", "chat.completion.chunk") or (
        "choices" in value and "object" not in value
    )


def _responses(value: Mapping[str, object]) -> bool:
    kind = value.get("type")
    return value.get("object") == "response" or (
        isinstance(kind, str) and kind.startswith("response.")
    )


def _anthropic(value: Mapping[str, object]) -> bool:
    return value.get("type") in (
        "message",
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    )


#: What a reply of each format looks like (its first JSON object: a body, or a stream's
#: first event), to say which API a body that does not parse came from.
_LOOKS = {"openai-chat": _chat, "openai-responses": _responses, "anthropic": _anthropic}

#: How a message names each format's replies.
_NAMES = {
    "openai-chat": "an OpenAI Chat Completions reply (format 'openai-chat': "
    "object 'chat.completion', choices)",
    "openai-responses": "an OpenAI Responses reply (format 'openai-responses': "
    "object 'response', output)",
    "anthropic": "an Anthropic Messages reply (format 'anthropic': type 'message', content)",
}


def _other_api(format: str, values: list[object], error: DecodeError) -> DecodeError:  # noqa: A002
    """``error``, or, when the reply is one of another format, an error naming both."""
    first = next((v for v in values if isinstance(v, Mapping)), None)
    if first is None or _LOOKS.get(format, _chat)(first):
        return error
    other = next((name for name, looks in _LOOKS.items() if looks(first)), None)
    if other is None or other == format:
        return error
    return DecodeError(
        f"expected {_NAMES.get(format, format)}, found what looks like {_NAMES[other]}; "
        f"record it with the format of the API that answered (format={other!r}), or "
        f"check the base URL the request went to ({error})"
    )


def _provider(format: str) -> Provider:  # noqa: A002
    found = PROVIDERS.get(format) if isinstance(format, str) else None
    if found is None:
        raise DecodeError(f"unknown format {format!r}; expected one of {sorted(PROVIDERS)}")
    return found

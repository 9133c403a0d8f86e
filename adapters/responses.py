"""Parse provider replies (JSON bodies, SSE streams, errors) into turnlog events.

Theory of operation
-------------------
A reply becomes a `Reply`: the ``AssistantMessageAdded`` (text, reasoning and
tool-call parts in the order the provider gave them) and the
``ResponseReceived`` (usage, stop reason, model, response id), or a
``ProviderErrorReceived``. The orchestrator appends `Reply.bodies` in order.
Parsing is a pure function of the bytes: no clock, no randomness.

Usage is normalised so that ``input_tokens`` is the whole prompt on every
provider, cached parts included (OpenAI's ``prompt_tokens``/``input_tokens``
already are; Anthropic's ``input_tokens`` excludes the cache, so its
``cache_creation_input_tokens`` and ``cache_read_input_tokens`` are added):
the tokenizer calibration compares it with the locally counted prompt.
``cache_read_tokens``/``cache_write_tokens`` and ``reasoning_tokens`` are
reported as the provider gives them (OpenAI: ``cached_tokens`` and
``cache_write_tokens`` of the input/prompt token details; Anthropic:
``cache_read_input_tokens`` and ``cache_creation_input_tokens``).

Reasoning keeps what must go back verbatim in ``ReasoningPart.opaque``:

=====================  ===============================  ==================  ===================
source                 ``text``                         ``opaque``          ``provider`` (``id``)
=====================  ===============================  ==================  ===================
Anthropic thinking     the thinking text                the signature       ``anthropic``
Anthropic redacted     (empty)                          the ``data``        ``anthropic-redacted``
Responses reasoning    summary texts (else the content) encrypted_content   ``openai`` (``rs_...``)
Chat reasoning_content the text                         (empty)             ``openai-chat``
=====================  ===============================  ==================  ===================

Streams are given as the raw SSE text (bytes or str) or as an iterable of
lines or events; each element of an iterable is one SSE block (a bare
``data: {...}`` line is a whole event). A stream must reach its end
(``[DONE]`` or a ``finish_reason``; ``response.completed``; ``message_stop``)
or end in an error event, else it is malformed.

Errors: any HTTP status of 400 and above, an error body, or an error event in
a stream gives ``ProviderErrorReceived`` with ``overflow`` set by
`is_overflow`: the code ``context_length_exceeded``, HTTP 413 or the type or
code ``request_too_large``, Anthropic's ``invalid_request_error`` saying the
prompt is too long, or one of `OVERFLOW_PATTERNS` in the message (never for a
rate limit). Error bodies that are not JSON (a proxy's HTML page) are kept as
text. Anything else that does not have the provider's shape raises
`turnlog.DecodeError` and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec
from turnlog import (
    AssistantMessageAdded,
    Body,
    DecodeError,
    InvalidEventError,
    Log,
    MemoryStore,
    Part,
    ProviderErrorReceived,
    ReasoningPart,
    ResponseReceived,
    TextPart,
    ToolCall,
    Usage,
)

__all__ = [
    "OVERFLOW_CODES",
    "OVERFLOW_PATTERNS",
    "PARSE_FORMATS",
    "Reply",
    "is_overflow",
    "parse_error",
    "parse_http",
    "parse_response",
    "parse_stream",
]

#: Checks a parsed message as `Log.append` would (one id per call, sizes), writing nothing.
_VALIDATOR = Log(MemoryStore())

#: Formats this module parses (the same names as ``render.FORMATS``).
PARSE_FORMATS = ("openai-chat", "openai-responses", "anthropic")

#: Error codes and types that mean "the request is too large for the model".
OVERFLOW_CODES = frozenset({"context_length_exceeded", "request_too_large"})

#: Message fragments (lower case) that mean the same, across providers.
OVERFLOW_PATTERNS = (
    "maximum context length",
    "context_length_exceeded",
    "context window",
    "context limit",
    "reduce the length of the messages",
    "too many tokens",
    "token limit",
    "prompt is too long",
    "input is too long",
)

_RATE_LIMIT = frozenset({"rate_limit_error", "rate_limit_exceeded", "requests",
                         "tokens", "insufficient_quota"})
_MAX_NAME = 1024
_MAX_RAW_MESSAGE = 2000

_Json = dict[str, Any]
_JsonParser = Callable[[_Json, "int | None"], "Reply"]
_StreamParser = Callable[[list[object], "int | None"], "Reply"]


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed provider reply.

    Attributes:
        message: the assistant message (None when the reply had no content, or
            for an error).
        response: usage, stop reason, model and response id (None for an error).
        error: the provider's error (None on success).
    """

    message: AssistantMessageAdded | None = None
    response: ResponseReceived | None = None
    error: ProviderErrorReceived | None = None

    def bodies(self) -> tuple[Body, ...]:
        """The payloads to append, in order: the message then the response, or the error."""
        if self.error is not None:
            return (self.error,)
        out: list[Body] = []
        if self.message is not None:
            out.append(self.message)
        if self.response is not None:
            out.append(self.response)
        return tuple(out)


# -- public entry points ----------------------------------------------------------------------
def parse_response(format: str, body: bytes | str | Mapping[str, object], *,  # noqa: A002
                   request_seq: int | None = None) -> Reply:
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
    parser = _json_parser(format)
    return _guard(format, lambda: parser(_obj(_load(body), "$"), request_seq))


def parse_stream(format: str,  # noqa: A002
                 stream: bytes | str | Iterable[bytes | str | Mapping[str, object]], *,
                 request_seq: int | None = None) -> Reply:
    """Parse a streamed (``stream: true``) reply of ``format``.

    Parameters:
        stream: the raw SSE body, or an iterable of SSE lines/blocks (``"data: {...}"``,
            ``"event: x\\ndata: {...}"``) or of already decoded event objects.
        request_seq: the seq of the ``RequestIssued`` record this answers.

    Raises:
        DecodeError: not SSE, an event that is not JSON or not the provider's shape,
            or a stream that stops before its end.
    """
    parser = _stream_parser(format)
    return _guard(format, lambda: parser(_events(stream), request_seq))


def parse_error(status: int | None, body: bytes | str | Mapping[str, object] | None, *,
                request_seq: int | None = None) -> ProviderErrorReceived:
    """Turn an HTTP error (status and body) of any provider into ``ProviderErrorReceived``.

    Never raises for a malformed body: a body that is not a known error shape
    is kept as (clipped) text in ``message``.

    Parameters:
        status: the HTTP status (None for an error event inside a stream).
        body: the HTTP body, or the decoded JSON object.
    """
    if status is not None and (isinstance(status, bool) or not isinstance(status, int)
                               or not -(2**63) <= status < 2**63):
        status = None
    try:
        value: object = body if isinstance(body, Mapping) else _load(body or b"")
    except DecodeError:
        value = _raw_text(body)
    return _error_from(value, status, request_seq)


def parse_http(format: str, status: int, body: bytes | str, *,  # noqa: A002
               stream: bool | None = None, request_seq: int | None = None) -> Reply:
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


def is_overflow(*, status: int | None = None, error_type: str = "", code: str = "",
                message: str = "") -> bool:
    """Whether an error means the prompt is too large for the model (see the module
    docstring for the rules)."""
    kinds = {error_type.lower(), code.lower()}
    if status == 429 or kinds & _RATE_LIMIT:
        return False
    if kinds & OVERFLOW_CODES or status == 413:
        return True
    text = message.lower()
    return any(pattern in text for pattern in OVERFLOW_PATTERNS)


# -- decoding helpers ---------------------------------------------------------------------------
def _guard(format: str, fn: Callable[[], Reply]) -> Reply:  # noqa: A002
    try:
        reply = fn()
    except DecodeError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError,
            OverflowError, msgspec.MsgspecError) as exc:
        raise DecodeError(f"{format} reply: cannot be parsed ({type(exc).__name__}: "
                          f"{exc})") from exc
    return _validated(format, reply)


def _validated(format: str, reply: Reply) -> Reply:  # noqa: A002
    """Round-trip the events through their schema, so that what is returned can be appended."""
    try:
        checked = msgspec.msgpack.decode(msgspec.msgpack.encode(reply), type=Reply)
    except (msgspec.MsgspecError, UnicodeError, ValueError, TypeError) as exc:
        raise DecodeError(f"{format} reply: a field does not fit the event schema: "
                          f"{exc}") from exc
    if checked.message is not None:
        try:  # what the schema cannot say, as `Log.append` checks it (one id per call)
            _VALIDATOR.validate("reply", checked.message)
        except InvalidEventError as exc:
            raise DecodeError(f"{format} reply: {exc}") from exc
    return checked


def _load(data: bytes | str | Mapping[str, object]) -> object:
    if isinstance(data, Mapping):
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"the body is not UTF-8: {exc}") from exc
    if not isinstance(data, str):
        raise DecodeError(f"expected bytes, str or a JSON object, found {type(data).__name__}")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"the body is not JSON: {exc}; it starts {data[:80]!r}") from exc


def _raw_text(body: object) -> str:
    if isinstance(body, (bytes, bytearray, memoryview)):
        text = bytes(body).decode("utf-8", "replace")
    else:
        text = str(body) if body is not None else ""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text[:_MAX_RAW_MESSAGE]


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _obj(value: object, path: str) -> _Json:
    if not isinstance(value, Mapping):
        raise DecodeError(f"expected a JSON object at {path}, found {_type_name(value)}")
    return dict(value)


def _list(value: object, path: str) -> list[object]:
    if not isinstance(value, list):
        raise DecodeError(f"expected a JSON array at {path}, found {_type_name(value)}")
    return value


def _opt_obj(parent: _Json, key: str, path: str) -> _Json:
    value = parent.get(key)
    return {} if value is None else _obj(value, f"{path}.{key}")


def _opt_list(parent: _Json, key: str, path: str) -> list[object]:
    value = parent.get(key)
    return [] if value is None else _list(value, f"{path}.{key}")


def _str(parent: _Json, key: str, path: str, *, required: bool = False) -> str:
    value = parent.get(key)
    if value is None:
        if required:
            raise DecodeError(f"expected a string at {path}.{key}, found nothing")
        return ""
    if not isinstance(value, str):
        raise DecodeError(f"expected a string at {path}.{key}, found {_type_name(value)}")
    return value


def _count(parent: _Json, key: str, path: str) -> int:
    value = parent.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**62:
        raise DecodeError(f"expected a token count (int >= 0) at {path}.{key}, found {value!r}")
    return value


def _arguments(value: object, path: str) -> str:
    """Tool-call arguments as JSON text (some servers send an object instead of text)."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value or "{}"
    if isinstance(value, Mapping):
        return _json_text(value)
    raise DecodeError(f"expected JSON text at {path}, found {_type_name(value)}")


def _json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _message(parts: list[Part], model: str, response_id: str) -> AssistantMessageAdded | None:
    if not parts:
        return None
    return AssistantMessageAdded(parts=tuple(parts), model=model, response_id=response_id)


def _merge_text(parts: list[Part]) -> list[Part]:
    """Adjacent text parts joined (streams deliver text in pieces)."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, TextPart) and out and isinstance(out[-1], TextPart):
            out[-1] = TextPart(text=out[-1].text + part.text)
        else:
            out.append(part)
    return [p for p in out if not (isinstance(p, TextPart) and not p.text)]


# -- SSE ------------------------------------------------------------------------------------------
_DONE = object()


def _events(stream: bytes | str | Iterable[bytes | str | Mapping[str, object]]) -> list[object]:
    """The data of each SSE event, decoded: a JSON value, or `_DONE` for ``[DONE]``."""
    if isinstance(stream, (bytes, bytearray, memoryview)):
        try:
            stream = bytes(stream).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"the stream is not UTF-8: {exc}") from exc
    if isinstance(stream, str):
        text = stream.replace("\r\n", "\n").replace("\r", "\n")
        blocks: list[object] = list(text.split("\n\n"))
    else:
        if isinstance(stream, Mapping):
            raise DecodeError("expected a stream (SSE text or events), found one JSON object")
        try:
            blocks = list(stream)
        except TypeError as exc:
            raise DecodeError(f"expected SSE text or an iterable of events, found "
                              f"{_type_name(stream)}") from exc
    out: list[object] = []
    for n, block in enumerate(blocks):
        if isinstance(block, Mapping):
            out.append(dict(block))
            continue
        if isinstance(block, (bytes, bytearray, memoryview)):
            try:
                lines = bytes(block).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError(f"stream event {n} is not UTF-8: {exc}") from exc
        elif isinstance(block, str):
            lines = block
        else:
            raise DecodeError(f"stream event {n}: expected str or bytes, found "
                              f"{_type_name(block)}")
        data: list[str] = []
        for line in lines.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            if field == "data":
                data.append(value.removeprefix(" "))
            elif field not in ("event", "id", "retry"):
                raise DecodeError(f"stream event {n}: not an SSE line: {line[:80]!r}")
        if not data:
            continue
        payload = "\n".join(data)
        if payload.strip() == "[DONE]":
            out.append(_DONE)
            continue
        try:
            out.append(json.loads(payload))
        except (ValueError, RecursionError) as exc:
            raise DecodeError(f"stream event {n}: data is not JSON ({exc}): "
                              f"{payload[:80]!r}") from exc
    return out


# -- errors --------------------------------------------------------------------------------
def _clean(text: str) -> str:
    """``text`` with lone surrogates (which JSON escapes can carry) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _clip_name(value: object) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else _json_text(value)
    return _clean(text[:_MAX_NAME])


def _error_from(value: object, status: int | None, request_seq: int | None,
                ) -> ProviderErrorReceived:
    error_type = code = message = ""
    if isinstance(value, Mapping):
        inner = value.get("error")
        if isinstance(inner, Mapping):
            error_type = _clip_name(inner.get("type"))
            code = _clip_name(inner.get("code"))
            raw = inner.get("message")
            message = raw if isinstance(raw, str) else _clip_name(raw)
        elif isinstance(inner, str):
            message = inner
            error_type = _clip_name(value.get("type")) if value.get("type") != "error" else ""
        else:
            error_type = _clip_name(value.get("type"))
            code = _clip_name(value.get("code"))
            raw = value.get("message") or value.get("detail")
            message = raw if isinstance(raw, str) else _clip_name(raw)
        if error_type == "error":
            error_type = ""
    elif isinstance(value, str):
        message = value[:_MAX_RAW_MESSAGE]
    elif value is not None:
        message = _raw_text(_json_text(value))
    message = _clean(message)
    return ProviderErrorReceived(
        request_seq=request_seq, status=status, code=code, error_type=error_type,
        message=message,
        overflow=is_overflow(status=status, error_type=error_type, code=code, message=message))


def _is_error_body(root: _Json) -> bool:
    return root.get("type") == "error" or (root.get("error") not in (None, {}) and
                                           "choices" not in root and "output" not in root
                                           and "content" not in root)


# -- openai-chat ---------------------------------------------------------------------------
def _chat_usage(usage: _Json, path: str) -> Usage:
    prompt = _opt_obj(usage, "prompt_tokens_details", path)
    completion = _opt_obj(usage, "completion_tokens_details", path)
    cached = _count(prompt, "cached_tokens", f"{path}.prompt_tokens_details")
    if not cached:  # DeepSeek's name for the same number
        cached = _count(usage, "prompt_cache_hit_tokens", path)
    return Usage(input_tokens=_count(usage, "prompt_tokens", path),
                 output_tokens=_count(usage, "completion_tokens", path),
                 cache_read_tokens=cached,
                 cache_write_tokens=_count(prompt, "cache_write_tokens",
                                           f"{path}.prompt_tokens_details"),
                 reasoning_tokens=_count(completion, "reasoning_tokens",
                                         f"{path}.completion_tokens_details"))


def _chat_content(value: object, path: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    texts = []
    for i, item in enumerate(_list(value, path)):
        part = _obj(item, f"{path}[{i}]")
        texts.append(_str(part, "text", f"{path}[{i}]"))
    return "".join(texts)


def _parse_chat(root: _Json, request_seq: int | None) -> Reply:
    if _is_error_body(root):
        return Reply(error=_error_from(root, None, request_seq))
    response_id = _str(root, "id", "$")
    model = _str(root, "model", "$")
    choices = _list(root.get("choices"), "$.choices")
    if not choices:
        raise DecodeError("expected at least one choice at $.choices, found none")
    choice = _obj(choices[0], "$.choices[0]")
    message = _obj(choice.get("message"), "$.choices[0].message")
    path = "$.choices[0].message"
    parts: list[Part] = []
    reasoning = _str(message, "reasoning_content", path)
    if reasoning:
        parts.append(ReasoningPart(text=reasoning, provider="openai-chat"))
    text = _chat_content(message.get("content"), f"{path}.content")
    refusal = _str(message, "refusal", path)
    parts.append(TextPart(text=text or refusal))
    for i, raw in enumerate(_opt_list(message, "tool_calls", path)):
        where = f"{path}.tool_calls[{i}]"
        call = _obj(raw, where)
        function = _obj(call.get("function"), f"{where}.function")
        parts.append(ToolCall(id=_str(call, "id", where, required=True),
                              name=_str(function, "name", f"{where}.function", required=True),
                              arguments=_arguments(function.get("arguments"),
                                                   f"{where}.function.arguments")))
    usage = _chat_usage(_opt_obj(root, "usage", "$"), "$.usage")
    stop = _str(choice, "finish_reason", "$.choices[0]")
    return Reply(message=_message(_merge_text(parts), model, response_id),
                 response=ResponseReceived(request_seq=request_seq, usage=usage,
                                           stop_reason=stop, model=model,
                                           response_id=response_id))


class _ChatCall:
    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


def _parse_chat_stream(events: list[object], request_seq: int | None) -> Reply:
    response_id = model = stop = ""
    usage = Usage()
    reasoning: list[str] = []
    texts: list[str] = []
    calls: dict[int, _ChatCall] = {}
    done = False
    for n, event in enumerate(events):
        if event is _DONE:
            done = True
            break
        path = f"event[{n}]"
        chunk = _obj(event, path)
        if chunk.get("error") is not None:
            return Reply(error=_error_from(chunk, None, request_seq))
        response_id = response_id or _str(chunk, "id", path)
        model = model or _str(chunk, "model", path)
        if chunk.get("usage") is not None:
            usage = _chat_usage(_obj(chunk["usage"], f"{path}.usage"), f"{path}.usage")
        for i, raw in enumerate(_opt_list(chunk, "choices", path)):
            where = f"{path}.choices[{i}]"
            choice = _obj(raw, where)
            index = choice.get("index", 0)
            if index != 0:
                continue  # only the first choice becomes the message
            delta = _opt_obj(choice, "delta", where)
            reasoning.append(_str(delta, "reasoning_content", f"{where}.delta"))
            texts.append(_chat_content(delta.get("content"), f"{where}.delta.content"))
            texts.append(_str(delta, "refusal", f"{where}.delta"))
            for j, item in enumerate(_opt_list(delta, "tool_calls", f"{where}.delta")):
                at = f"{where}.delta.tool_calls[{j}]"
                piece = _obj(item, at)
                slot = piece.get("index", j)
                if isinstance(slot, bool) or not isinstance(slot, int):
                    raise DecodeError(f"expected an int at {at}.index, found {slot!r}")
                call = calls.setdefault(slot, _ChatCall())
                call.id = call.id or _str(piece, "id", at)
                function = _opt_obj(piece, "function", at)
                call.name = call.name or _str(function, "name", f"{at}.function")
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    call.arguments.append(arguments)
                elif arguments is not None:
                    call.arguments.append(_arguments(arguments, f"{at}.function.arguments"))
            finish = _str(choice, "finish_reason", where)
            stop = finish or stop
    if not done and not stop:
        raise DecodeError("the chat stream ended before a finish_reason or [DONE]")
    parts: list[Part] = []
    if "".join(reasoning):
        parts.append(ReasoningPart(text="".join(reasoning), provider="openai-chat"))
    parts.append(TextPart(text="".join(texts)))
    for slot in sorted(calls):
        call = calls[slot]
        if not call.id:
            if not response_id:
                raise DecodeError(f"tool call {slot} of the stream has no id")
            call.id = f"{response_id}_{slot}"
        if not call.name:
            raise DecodeError(f"tool call {slot} of the stream has no function name")
        parts.append(ToolCall(id=call.id, name=call.name,
                              arguments="".join(call.arguments) or "{}"))
    return Reply(message=_message(_merge_text(parts), model, response_id),
                 response=ResponseReceived(request_seq=request_seq, usage=usage,
                                           stop_reason=stop, model=model,
                                           response_id=response_id))


# -- openai-responses ----------------------------------------------------------------------
def _responses_usage(usage: _Json, path: str) -> Usage:
    details = _opt_obj(usage, "input_tokens_details", path)
    output = _opt_obj(usage, "output_tokens_details", path)
    return Usage(input_tokens=_count(usage, "input_tokens", path),
                 output_tokens=_count(usage, "output_tokens", path),
                 cache_read_tokens=_count(details, "cached_tokens",
                                          f"{path}.input_tokens_details"),
                 cache_write_tokens=_count(details, "cache_write_tokens",
                                           f"{path}.input_tokens_details"),
                 reasoning_tokens=_count(output, "reasoning_tokens",
                                         f"{path}.output_tokens_details"))


def _responses_item(item: _Json, path: str) -> list[Part]:
    kind = _str(item, "type", path)
    if kind == "message":
        texts = []
        for i, raw in enumerate(_opt_list(item, "content", path)):
            part = _obj(raw, f"{path}.content[{i}]")
            part_kind = _str(part, "type", f"{path}.content[{i}]")
            if part_kind == "output_text":
                texts.append(_str(part, "text", f"{path}.content[{i}]"))
            elif part_kind == "refusal":
                texts.append(_str(part, "refusal", f"{path}.content[{i}]"))
        return [TextPart(text="".join(texts))]
    if kind == "reasoning":
        summary = [_str(_obj(s, f"{path}.summary[{i}]"), "text", f"{path}.summary[{i}]")
                   for i, s in enumerate(_opt_list(item, "summary", path))]
        content = [_str(_obj(c, f"{path}.content[{i}]"), "text", f"{path}.content[{i}]")
                   for i, c in enumerate(_opt_list(item, "content", path))]
        text = "\n\n".join(t for t in summary if t) or "\n\n".join(t for t in content if t)
        return [ReasoningPart(text=text, opaque=_str(item, "encrypted_content", path),
                              provider="openai", id=_str(item, "id", path))]
    if kind == "function_call":
        return [ToolCall(id=_str(item, "call_id", path, required=True),
                         name=_str(item, "name", path, required=True),
                         arguments=_arguments(item.get("arguments"), f"{path}.arguments"))]
    return []  # built-in tool calls and future item kinds are not turnlog parts


def _responses_reply(root: _Json, request_seq: int | None, path: str,
                     items: list[object] | None = None) -> Reply:
    error = root.get("error")
    if error is not None or root.get("status") == "failed":
        return Reply(error=_error_from({"error": error or {"message": "response failed"}},
                                       None, request_seq))
    response_id = _str(root, "id", path)
    model = _str(root, "model", path)
    output = _opt_list(root, "output", path)
    if not output and items:
        output = items
    parts: list[Part] = []
    for i, raw in enumerate(output):
        parts.extend(_responses_item(_obj(raw, f"{path}.output[{i}]"), f"{path}.output[{i}]"))
    status = _str(root, "status", path)
    stop = status
    if status == "incomplete":
        details = _opt_obj(root, "incomplete_details", path)
        stop = _str(details, "reason", f"{path}.incomplete_details") or status
    usage = _responses_usage(_opt_obj(root, "usage", path), f"{path}.usage")
    return Reply(message=_message(_merge_text(parts), model, response_id),
                 response=ResponseReceived(request_seq=request_seq, usage=usage,
                                           stop_reason=stop, model=model,
                                           response_id=response_id))


def _parse_responses(root: _Json, request_seq: int | None) -> Reply:
    if _is_error_body(root):
        return Reply(error=_error_from(root, None, request_seq))
    if "output" not in root:
        raise DecodeError("expected a response object with $.output, found keys "
                          f"{sorted(root)[:8]}")
    return _responses_reply(root, request_seq, "$")


def _parse_responses_stream(events: list[object], request_seq: int | None) -> Reply:
    items: dict[int, object] = {}
    for n, event in enumerate(events):
        if event is _DONE:
            continue
        path = f"event[{n}]"
        data = _obj(event, path)
        kind = _str(data, "type", path)
        if kind == "error":
            return Reply(error=_error_from({"error": data}, None, request_seq))
        if kind == "response.output_item.done":
            index = data.get("output_index", len(items))
            if isinstance(index, bool) or not isinstance(index, int):
                raise DecodeError(f"expected an int at {path}.output_index, found {index!r}")
            items[index] = _obj(data.get("item"), f"{path}.item")
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = _obj(data.get("response"), f"{path}.response")
            if kind == "response.failed" and response.get("error") is None:
                response = {**response, "error": {"message": "response failed"}}
            return _responses_reply(response, request_seq, f"{path}.response",
                                    [items[i] for i in sorted(items)])
    raise DecodeError("the responses stream ended before response.completed")


# -- anthropic -----------------------------------------------------------------------------
def _anthropic_usage(usage: _Json, path: str) -> Usage:
    write = _count(usage, "cache_creation_input_tokens", path)
    read = _count(usage, "cache_read_input_tokens", path)
    return Usage(input_tokens=_count(usage, "input_tokens", path) + write + read,
                 output_tokens=_count(usage, "output_tokens", path),
                 cache_read_tokens=read, cache_write_tokens=write)


def _anthropic_block(block: _Json, path: str) -> list[Part]:
    kind = _str(block, "type", path)
    if kind == "text":
        return [TextPart(text=_str(block, "text", path))]
    if kind == "thinking":
        return [ReasoningPart(text=_str(block, "thinking", path),
                              opaque=_str(block, "signature", path), provider="anthropic")]
    if kind == "redacted_thinking":
        return [ReasoningPart(opaque=_str(block, "data", path, required=True),
                              provider="anthropic-redacted")]
    if kind == "tool_use":
        tool_input = block.get("input")
        return [ToolCall(id=_str(block, "id", path, required=True),
                         name=_str(block, "name", path, required=True),
                         arguments=_json_text(_obj(tool_input, f"{path}.input")
                                              if tool_input is not None else {}))]
    return []  # server tools and future block kinds are not turnlog parts


def _parse_anthropic(root: _Json, request_seq: int | None) -> Reply:
    if _is_error_body(root):
        return Reply(error=_error_from(root, None, request_seq))
    if root.get("type") not in (None, "message"):
        raise DecodeError(f"expected type 'message' at $.type, found {root.get('type')!r}")
    response_id = _str(root, "id", "$")
    model = _str(root, "model", "$")
    parts: list[Part] = []
    for i, raw in enumerate(_list(root.get("content"), "$.content")):
        parts.extend(_anthropic_block(_obj(raw, f"$.content[{i}]"), f"$.content[{i}]"))
    usage = _anthropic_usage(_opt_obj(root, "usage", "$"), "$.usage")
    return Reply(message=_message(_merge_text(parts), model, response_id),
                 response=ResponseReceived(request_seq=request_seq, usage=usage,
                                           stop_reason=_str(root, "stop_reason", "$"),
                                           model=model, response_id=response_id))


class _Block:
    def __init__(self, start: _Json, path: str) -> None:
        self.start = start
        self.kind = _str(start, "type", path)
        self.text: list[str] = []
        self.signature: list[str] = []
        self.json: list[str] = []


def _parse_anthropic_stream(events: list[object], request_seq: int | None) -> Reply:
    message: _Json | None = None
    usage: _Json = {}
    stop = ""
    blocks: dict[int, _Block] = {}
    for n, event in enumerate(events):
        if event is _DONE:
            continue
        path = f"event[{n}]"
        data = _obj(event, path)
        kind = _str(data, "type", path)
        if kind == "error":
            return Reply(error=_error_from(data, None, request_seq))
        if kind == "message_start":
            message = _obj(data.get("message"), f"{path}.message")
            usage.update(_opt_obj(message, "usage", f"{path}.message"))
        elif kind == "content_block_start":
            index = _index(data, path)
            blocks[index] = _Block(_obj(data.get("content_block"), f"{path}.content_block"),
                                   f"{path}.content_block")
        elif kind == "content_block_delta":
            index = _index(data, path)
            if index not in blocks:
                raise DecodeError(f"{path}: a delta for content block {index}, which has not "
                                  "started")
            _apply_delta(blocks[index], _obj(data.get("delta"), f"{path}.delta"),
                         f"{path}.delta")
        elif kind == "message_delta":
            delta = _opt_obj(data, "delta", path)
            stop = _str(delta, "stop_reason", f"{path}.delta") or stop
            usage.update({k: v for k, v in _opt_obj(data, "usage", path).items()
                          if v is not None})
        elif kind == "message_stop":
            if message is None:
                raise DecodeError(f"{path}: message_stop before message_start")
            parts: list[Part] = []
            for index in sorted(blocks):
                parts.extend(_finish_block(blocks[index], f"content block {index}"))
            response_id = _str(message, "id", "message")
            model = _str(message, "model", "message")
            return Reply(message=_message(_merge_text(parts), model, response_id),
                         response=ResponseReceived(
                             request_seq=request_seq,
                             usage=_anthropic_usage(usage, "usage"),
                             stop_reason=stop or _str(message, "stop_reason", "message"),
                             model=model, response_id=response_id))
    raise DecodeError("the anthropic stream ended before message_stop")


def _index(data: _Json, path: str) -> int:
    index = data.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise DecodeError(f"expected an int >= 0 at {path}.index, found {index!r}")
    return index


def _apply_delta(block: _Block, delta: _Json, path: str) -> None:
    kind = _str(delta, "type", path)
    if kind == "text_delta":
        block.text.append(_str(delta, "text", path))
    elif kind == "thinking_delta":
        block.text.append(_str(delta, "thinking", path))
    elif kind == "signature_delta":
        block.signature.append(_str(delta, "signature", path))
    elif kind == "input_json_delta":
        block.json.append(_str(delta, "partial_json", path))


def _finish_block(block: _Block, path: str) -> list[Part]:
    start = block.start
    if block.kind == "text":
        return [TextPart(text=_str(start, "text", path) + "".join(block.text))]
    if block.kind == "thinking":
        return [ReasoningPart(text=_str(start, "thinking", path) + "".join(block.text),
                              opaque=_str(start, "signature", path) + "".join(block.signature),
                              provider="anthropic")]
    if block.kind == "redacted_thinking":
        return [ReasoningPart(opaque=_str(start, "data", path, required=True),
                              provider="anthropic-redacted")]
    if block.kind == "tool_use":
        raw = "".join(block.json)
        if raw.strip():
            try:
                arguments = _json_text(json.loads(raw))
            except (ValueError, RecursionError):
                arguments = raw  # kept as the model produced it
        else:
            tool_input = start.get("input")
            arguments = _json_text(_obj(tool_input, f"{path}.input")
                                   if tool_input is not None else {})
        return [ToolCall(id=_str(start, "id", path, required=True),
                         name=_str(start, "name", path, required=True), arguments=arguments)]
    return []


# -- dispatch ------------------------------------------------------------------------------
def _json_parser(format: str) -> _JsonParser:  # noqa: A002
    parsers: dict[str, _JsonParser] = {
        "openai-chat": _parse_chat, "openai-responses": _parse_responses,
        "anthropic": _parse_anthropic}
    if format not in parsers:
        raise DecodeError(f"unknown format {format!r}; expected one of {list(PARSE_FORMATS)}")
    return parsers[format]


def _stream_parser(format: str) -> _StreamParser:  # noqa: A002
    parsers: dict[str, _StreamParser] = {
        "openai-chat": _parse_chat_stream, "openai-responses": _parse_responses_stream,
        "anthropic": _parse_anthropic_stream}
    if format not in parsers:
        raise DecodeError(f"unknown format {format!r}; expected one of {list(PARSE_FORMATS)}")
    return parsers[format]

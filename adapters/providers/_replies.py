"""Provider replies (JSON bodies, SSE streams, errors) as turnlog events: the rules
every reply parser shares.

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
`turnlog.errors.DecodeError` and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from turnlog.errors import DecodeError
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    Part,
    ProviderErrorReceived,
    ResponseReceived,
    TextPart,
)

__all__ = [
    "OVERFLOW_CODES",
    "OVERFLOW_PATTERNS",
    "Reply",
    "is_overflow",
    "parse_error",
]

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


_RATE_LIMIT = frozenset(
    {"rate_limit_error", "rate_limit_exceeded", "requests", "tokens", "insufficient_quota"}
)


_MAX_NAME = 1024


_MAX_RAW_MESSAGE = 2000

Json = dict[str, Any]


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


def parse_error(
    status: int | None,
    body: bytes | str | Mapping[str, object] | None,
    *,
    request_seq: int | None = None,
) -> ProviderErrorReceived:
    """Turn an HTTP error (status and body) of any provider into ``ProviderErrorReceived``.

    Never raises for a malformed body: a body that is not a known error shape
    is kept as (clipped) text in ``message``.

    Parameters:
        status: the HTTP status (None for an error event inside a stream).
        body: the HTTP body, or the decoded JSON object.
    """
    if status is not None and (
        isinstance(status, bool) or not isinstance(status, int) or not -(2**63) <= status < 2**63
    ):
        status = None
    try:
        value: object = body if isinstance(body, Mapping) else load_json(body or b"")
    except DecodeError:
        value = _raw_text(body)
    return error_from(value, status, request_seq)


def is_overflow(
    *, status: int | None = None, error_type: str = "", code: str = "", message: str = ""
) -> bool:
    """Whether an error means the prompt is too large for the model (see the module
    docstring for the rules)."""
    kinds = {error_type.lower(), code.lower()}
    if status == 429 or kinds & _RATE_LIMIT:
        return False
    if kinds & OVERFLOW_CODES or status == 413:
        return True
    text = message.lower()
    return any(pattern in text for pattern in OVERFLOW_PATTERNS)


def load_json(data: bytes | str | Mapping[str, object]) -> object:
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


def obj(value: object, path: str) -> Json:
    if not isinstance(value, Mapping):
        raise DecodeError(f"expected a JSON object at {path}, found {_type_name(value)}")
    return dict(value)


def array(value: object, path: str) -> list[object]:
    if not isinstance(value, list):
        raise DecodeError(f"expected a JSON array at {path}, found {_type_name(value)}")
    return value


def opt_obj(parent: Json, key: str, path: str) -> Json:
    value = parent.get(key)
    return {} if value is None else obj(value, f"{path}.{key}")


def opt_array(parent: Json, key: str, path: str) -> list[object]:
    value = parent.get(key)
    return [] if value is None else array(value, f"{path}.{key}")


def string(parent: Json, key: str, path: str, *, required: bool = False) -> str:
    value = parent.get(key)
    if value is None:
        if required:
            raise DecodeError(f"expected a string at {path}.{key}, found nothing")
        return ""
    if not isinstance(value, str):
        raise DecodeError(f"expected a string at {path}.{key}, found {_type_name(value)}")
    return value


def count(parent: Json, key: str, path: str) -> int:
    value = parent.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**62:
        raise DecodeError(f"expected a token count (int >= 0) at {path}.{key}, found {value!r}")
    return value


def arguments_text(value: object, path: str) -> str:
    """Tool-call arguments as JSON text (some servers send an object instead of text)."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value or "{}"
    if isinstance(value, Mapping):
        return json_text(value)
    raise DecodeError(f"expected JSON text at {path}, found {_type_name(value)}")


def json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def message_of(parts: list[Part], model: str, response_id: str) -> AssistantMessageAdded | None:
    if not parts:
        return None
    return AssistantMessageAdded(parts=tuple(parts), model=model, response_id=response_id)


def merge_text(parts: list[Part]) -> list[Part]:
    """Adjacent text parts joined (streams deliver text in pieces)."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, TextPart) and out and isinstance(out[-1], TextPart):
            out[-1] = TextPart(text=out[-1].text + part.text)
        else:
            out.append(part)
    return [p for p in out if not (isinstance(p, TextPart) and not p.text)]


DONE = object()


def sse_events(stream: bytes | str | Iterable[bytes | str | Mapping[str, object]]) -> list[object]:
    """The data of each SSE event, decoded: a JSON value, or `DONE` for ``[DONE]``."""
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
            raise DecodeError(
                f"expected SSE text or an iterable of events, found {_type_name(stream)}"
            ) from exc
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
            raise DecodeError(f"stream event {n}: expected str or bytes, found {_type_name(block)}")
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
            out.append(DONE)
            continue
        try:
            out.append(json.loads(payload))
        except (ValueError, RecursionError) as exc:
            raise DecodeError(
                f"stream event {n}: data is not JSON ({exc}): {payload[:80]!r}"
            ) from exc
    return out


def _clean(text: str) -> str:
    """``text`` with lone surrogates (which JSON escapes can carry) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _clip_name(value: object) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json_text(value)
    return _clean(text[:_MAX_NAME])


def error_from(
    value: object,
    status: int | None,
    request_seq: int | None,
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
        message = _raw_text(json_text(value))
    message = _clean(message)
    return ProviderErrorReceived(
        request_seq=request_seq,
        status=status,
        code=code,
        error_type=error_type,
        message=message,
        overflow=is_overflow(status=status, error_type=error_type, code=code, message=message),
    )


def is_error_body(root: Json) -> bool:
    return root.get("type") == "error" or (
        root.get("error") not in (None, {})
        and "choices" not in root
        and "output" not in root
        and "content" not in root
    )

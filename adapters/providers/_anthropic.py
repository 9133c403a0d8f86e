"""Anthropic Messages: requests and replies.

``system`` is one text block per section, so a cache breakpoint can sit
between the static sections and the summary; tool results become
``tool_result`` blocks at the front of the next user turn; turns strictly
alternate (consecutive messages of one role are merged, and a user turn is put
first when the prompt starts with the assistant); thinking blocks keep their
signature (``opaque``) and are sent only for reasoning this API produced;
breakpoints become ``cache_control`` (at most four). Tool-call arguments that
are not a JSON object go as ``{"_raw_arguments": TEXT}``, a freeform call's text as
``{"input": TEXT}`` (``input`` must be an
object); call ids outside ``[A-Za-z0-9_-]`` are replaced by ``toolu_`` plus a
blake3 digest. The API requires ``max_tokens``. From render version 2 a prompt with
calls but no tool definitions gets definitions derived from its calls (the API
refuses ``tool_use`` and ``tool_result`` blocks in a request without ``tools``),
and tool names outside ``[a-zA-Z0-9_-]{1,64}`` are replaced by ``tool_`` plus a
blake3 digest, in the definitions and the calls alike. A ``compaction`` block (the
``compact`` context-management edit) in a reply becomes a `NativePart` holding the
block as JSON text (its summary as the part's text; a stream's ``compaction_delta``
content joined into the block), and goes back unchanged in a later request (never
with ``cache_control``: it is sent as kept). Replies: ``input_tokens`` is
made the whole prompt (the cache reads and writes are added), so usage means
the same on every provider.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
from turnlog.errors import DecodeError
from turnlog.events import (
    ImagePart,
    NativePart,
    Part,
    ReasoningPart,
    ResponseReceived,
    TextPart,
    ToolCall,
    Usage,
)
from turnlog.packing import SUMMARY_SECTION, Message, Prompt
from turnlog.replay import BREAKPOINT_CACHE

from ._replies import (
    DONE,
    Json,
    Reply,
    array,
    count,
    error_from,
    is_error_body,
    json_text,
    merge_text,
    message_of,
    obj,
    opt_obj,
    string,
)
from ._wire import (
    EMPTY_TEXT,
    FIRST_TURN_TEXT,
    Provider,
    RenderOptions,
    hashed_id,
    image_data,
    image_note,
    text_or_empty,
    tool_schema,
    tool_text,
)

__all__ = ["ANTHROPIC_CACHE_LIMIT", "ANTHROPIC_VERSION", "PROVIDER"]

#: Anthropic accepts at most this many ``cache_control`` markers per request.
ANTHROPIC_CACHE_LIMIT = 4

#: The ``anthropic-version`` header sent with every request.
ANTHROPIC_VERSION = "2023-06-01"

_ANTHROPIC_ID = re.compile(r"^[A-Za-z0-9_-]{1,256}$")

_ANTHROPIC_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


_ANTHROPIC_MEDIA = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


_EPHEMERAL: dict[str, object] = {"type": "ephemeral"}


def _anthropic_id(call_id: str) -> str:
    return call_id if _ANTHROPIC_ID.match(call_id) else hashed_id("toolu_", call_id)


def _tool_name(name: str, opts: RenderOptions) -> str:
    if opts.version < 2 or _ANTHROPIC_TOOL_NAME.match(name):
        return name
    return hashed_id("tool_", name)


def _anthropic_image(part: ImagePart, opts: RenderOptions) -> dict[str, Any]:
    data = image_data(part, opts)
    if data is not None:
        if part.media_type not in _ANTHROPIC_MEDIA:
            return {"type": "text", "text": image_note(part, "unsupported media type")}
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": part.media_type, "data": data},
        }
    if part.url:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    return {"type": "text", "text": image_note(part, "no URL or blob")}


_MAX_INPUT_DEPTH = 256


def _nested_deeper(value: object, limit: int) -> bool:
    """True when ``value`` nests containers deeper than ``limit``."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= limit:
                return True
            stack.extend(
                (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return False


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        value = None
    # Arguments nested so deep that encoding the body would exceed the interpreter's
    # recursion limit are sent as text, like arguments that are not JSON.
    if isinstance(value, dict) and not _nested_deeper(value, _MAX_INPUT_DEPTH):
        return value
    return {"_raw_arguments": arguments}


def _anthropic_blocks(message: Message, opts: RenderOptions) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": _anthropic_id(message.tool_call_id),
            "content": text_or_empty(tool_text(message), strict=True),
        }
        if message.is_error:
            block["is_error"] = True
        return [block]
    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text.strip():
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            if message.role == "user":
                blocks.append(_anthropic_image(part, opts))
            else:
                blocks.append(
                    {"type": "text", "text": image_note(part, "assistant messages carry no images")}
                )
        elif isinstance(part, ToolCall):
            # a freeform call's raw text goes as the object {"input": TEXT}
            blocks.append(
                {
                    "type": "tool_use",
                    "id": _anthropic_id(part.id),
                    "name": _tool_name(part.name, opts),
                    "input": {"input": part.arguments}
                    if part.freeform
                    else _tool_input(part.arguments),
                }
            )
        elif isinstance(part, ReasoningPart) and part.opaque:
            if part.provider == "anthropic":
                blocks.append({"type": "thinking", "thinking": part.text, "signature": part.opaque})
            elif part.provider == "anthropic-redacted":
                blocks.append({"type": "redacted_thinking", "data": part.opaque})
        elif isinstance(part, NativePart):
            # render_body refused the items of other formats: this one is ours, unchanged
            blocks.append(msgspec.json.decode(part.data))
    if not any(b["type"] not in ("thinking", "redacted_thinking") for b in blocks):
        blocks.append({"type": "text", "text": EMPTY_TEXT})
    return blocks


def _cacheable(block: dict[str, Any]) -> bool:
    return block["type"] not in ("thinking", "redacted_thinking", "compaction")


def _build_anthropic(prompt: Prompt, opts: RenderOptions) -> dict[str, Any]:
    turns: list[dict[str, Any]] = []
    # neutral message index -> the block its cache breakpoint goes on
    last_block: dict[int, dict[str, Any]] = {}
    if prompt.messages and prompt.messages[0].role != "user":
        turns.append({"role": "user", "content": [{"type": "text", "text": FIRST_TURN_TEXT}]})
    for i, message in enumerate(prompt.messages):
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _anthropic_blocks(message, opts)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
        cacheable = [b for b in blocks if _cacheable(b)]
        if cacheable:
            last_block[i] = cacheable[-1]
    if not turns:
        turns.append({"role": "user", "content": [{"type": "text", "text": EMPTY_TEXT}]})
    final = turns[-1]
    if final["role"] == "assistant" and final["content"][-1]["type"] == "text":
        # The API refuses a final assistant turn that ends in whitespace.
        tail = final["content"][-1]
        tail["text"] = tail["text"].rstrip() or EMPTY_TEXT
    system = [{"type": "text", "text": text_or_empty(s.text, strict=True)} for s in prompt.system]
    tools = [
        {
            "name": _tool_name(t.name, opts),
            "description": t.description,
            "input_schema": tool_schema(t),
            **({"strict": True} if t.strict and not t.freeform else {}),
        }
        for t in prompt.tools
    ]
    _place_cache_control(prompt, system, tools, last_block)
    body: dict[str, Any] = {"model": opts.model, "max_tokens": opts.max_tokens, "messages": turns}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
    return body


def _place_cache_control(
    prompt: Prompt,
    system: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    last_block: dict[int, dict[str, Any]],
) -> None:
    """Put ``cache_control`` on the blocks the prompt's breakpoints name (at most four)."""
    has_summary = bool(prompt.system) and prompt.system[-1].name == SUMMARY_SECTION
    static = system[:-1] if has_summary else system
    marked: list[dict[str, Any]] = []
    for point in prompt.breakpoints:
        target: dict[str, Any] | None = None
        if point.at == "tools":
            target = tools[-1] if tools else (static[-1] if static else None)
        elif point.at == "system":
            target = static[-1] if static else (tools[-1] if tools else None)
        elif point.at == "summary":
            target = system[-1] if has_summary else None
        else:
            target = last_block.get(point.index)
        if target is None or any(target is m for m in marked):
            continue
        if len(marked) == ANTHROPIC_CACHE_LIMIT:
            break
        target["cache_control"] = dict(_EPHEMERAL)
        marked.append(target)


# -- replies --------------------------------------------------------------------------------
def _anthropic_usage(usage: Json, path: str) -> Usage:
    write = count(usage, "cache_creation_input_tokens", path)
    read = count(usage, "cache_read_input_tokens", path)
    return Usage(
        input_tokens=count(usage, "input_tokens", path) + write + read,
        output_tokens=count(usage, "output_tokens", path),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def _anthropic_block(block: Json, path: str) -> list[Part]:
    kind = string(block, "type", path)
    if kind == "text":
        return [TextPart(text=string(block, "text", path))]
    if kind == "thinking":
        return [
            ReasoningPart(
                text=string(block, "thinking", path),
                opaque=string(block, "signature", path),
                provider="anthropic",
            )
        ]
    if kind == "redacted_thinking":
        return [
            ReasoningPart(
                opaque=string(block, "data", path, required=True), provider="anthropic-redacted"
            )
        ]
    if kind == "tool_use":
        tool_input = block.get("input")
        return [
            ToolCall(
                id=string(block, "id", path, required=True),
                name=string(block, "name", path, required=True),
                arguments=json_text(
                    obj(tool_input, f"{path}.input") if tool_input is not None else {}
                ),
            )
        ]
    if kind == "compaction":
        return [_compaction(block)]
    return []  # server tools and future block kinds are not turnlog parts


def _compaction(block: Json) -> NativePart:
    """A compaction block, kept as the API gave it (its summary as readable text)."""
    summary = block.get("content")
    return NativePart(
        format="anthropic",
        item_type="compaction",
        data=msgspec.json.encode(block).decode(),
        text=summary if isinstance(summary, str) else "",
    )


def _parse_anthropic(root: Json, request_seq: int | None) -> Reply:
    if is_error_body(root):
        return Reply(error=error_from(root, None, request_seq))
    if root.get("type") not in (None, "message"):
        raise DecodeError(f"expected type 'message' at $.type, found {root.get('type')!r}")
    response_id = string(root, "id", "$")
    model = string(root, "model", "$")
    parts: list[Part] = []
    for i, raw in enumerate(array(root.get("content"), "$.content")):
        parts.extend(_anthropic_block(obj(raw, f"$.content[{i}]"), f"$.content[{i}]"))
    usage = _anthropic_usage(opt_obj(root, "usage", "$"), "$.usage")
    return Reply(
        message=message_of(merge_text(parts), model, response_id),
        response=ResponseReceived(
            request_seq=request_seq,
            usage=usage,
            stop_reason=string(root, "stop_reason", "$"),
            model=model,
            response_id=response_id,
        ),
    )


class _Block:
    def __init__(self, start: Json, path: str) -> None:
        self.start = start
        self.kind = string(start, "type", path)
        self.text: list[str] = []
        self.signature: list[str] = []
        self.json: list[str] = []


def _parse_anthropic_stream(events: list[object], request_seq: int | None) -> Reply:
    message: Json | None = None
    usage: Json = {}
    stop = ""
    blocks: dict[int, _Block] = {}
    for n, event in enumerate(events):
        if event is DONE:
            continue
        path = f"event[{n}]"
        data = obj(event, path)
        kind = string(data, "type", path)
        if kind == "error":
            return Reply(error=error_from(data, None, request_seq))
        if kind == "message_start":
            message = obj(data.get("message"), f"{path}.message")
            usage.update(opt_obj(message, "usage", f"{path}.message"))
        elif kind == "content_block_start":
            index = _index(data, path)
            blocks[index] = _Block(
                obj(data.get("content_block"), f"{path}.content_block"), f"{path}.content_block"
            )
        elif kind == "content_block_delta":
            index = _index(data, path)
            if index not in blocks:
                raise DecodeError(
                    f"{path}: a delta for content block {index}, which has not started"
                )
            _apply_delta(blocks[index], obj(data.get("delta"), f"{path}.delta"), f"{path}.delta")
        elif kind == "message_delta":
            delta = opt_obj(data, "delta", path)
            stop = string(delta, "stop_reason", f"{path}.delta") or stop
            usage.update({k: v for k, v in opt_obj(data, "usage", path).items() if v is not None})
        elif kind == "message_stop":
            if message is None:
                raise DecodeError(f"{path}: message_stop before message_start")
            parts: list[Part] = []
            for index in sorted(blocks):
                parts.extend(_finish_block(blocks[index], f"content block {index}"))
            response_id = string(message, "id", "message")
            model = string(message, "model", "message")
            return Reply(
                message=message_of(merge_text(parts), model, response_id),
                response=ResponseReceived(
                    request_seq=request_seq,
                    usage=_anthropic_usage(usage, "usage"),
                    stop_reason=stop or string(message, "stop_reason", "message"),
                    model=model,
                    response_id=response_id,
                ),
            )
    raise DecodeError("the anthropic stream ended before message_stop")


def _index(data: Json, path: str) -> int:
    index = data.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise DecodeError(f"expected an int >= 0 at {path}.index, found {index!r}")
    return index


def _apply_delta(block: _Block, delta: Json, path: str) -> None:
    kind = string(delta, "type", path)
    if kind == "text_delta":
        block.text.append(string(delta, "text", path))
    elif kind == "thinking_delta":
        block.text.append(string(delta, "thinking", path))
    elif kind == "signature_delta":
        block.signature.append(string(delta, "signature", path))
    elif kind == "input_json_delta":
        block.json.append(string(delta, "partial_json", path))
    elif kind == "compaction_delta":
        block.text.append(string(delta, "content", path))


def _finish_block(block: _Block, path: str) -> list[Part]:
    start = block.start
    if block.kind == "text":
        return [TextPart(text=string(start, "text", path) + "".join(block.text))]
    if block.kind == "thinking":
        return [
            ReasoningPart(
                text=string(start, "thinking", path) + "".join(block.text),
                opaque=string(start, "signature", path) + "".join(block.signature),
                provider="anthropic",
            )
        ]
    if block.kind == "redacted_thinking":
        return [
            ReasoningPart(
                opaque=string(start, "data", path, required=True), provider="anthropic-redacted"
            )
        ]
    if block.kind == "tool_use":
        raw = "".join(block.json)
        if raw.strip():
            try:
                arguments = json_text(json.loads(raw))
            except (ValueError, RecursionError):
                arguments = raw  # kept as the model produced it
        else:
            tool_input = start.get("input")
            arguments = json_text(
                obj(tool_input, f"{path}.input") if tool_input is not None else {}
            )
        return [
            ToolCall(
                id=string(start, "id", path, required=True),
                name=string(start, "name", path, required=True),
                arguments=arguments,
            )
        ]
    if block.kind == "compaction":
        whole = dict(start)
        if block.text:
            whole["content"] = string(start, "content", path) + "".join(block.text)
        return [_compaction(whole)]
    return []


def _headers(api_key: str) -> dict[str, str]:
    return {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}


PROVIDER = Provider(
    name="anthropic",
    description="Anthropic Messages",
    path="/v1/messages",
    base_url="https://api.anthropic.com",
    headers=_headers,
    build=_build_anthropic,
    parse=_parse_anthropic,
    parse_stream=_parse_anthropic_stream,
    max_tokens_required=True,
    tools_required=True,
    caching=BREAKPOINT_CACHE,
)

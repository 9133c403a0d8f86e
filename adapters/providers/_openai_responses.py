"""OpenAI Responses: requests and replies.

The system sections become ``instructions``; an assistant message becomes, in
part order, ``reasoning`` items (only those this API produced: provider
``openai`` with an item id; ``encrypted_content`` from ``opaque``), assistant
``message`` items and ``function_call`` items, and a provider item it keeps
(a ``compaction`` item, `NativePart`) goes back unchanged; a tool message
becomes a ``function_call_output``. Replies: ``output`` items in order (a
``compaction`` item becomes a `NativePart` holding it as JSON text; built-in
tool calls and unknown item kinds are not turnlog parts); ``incomplete_details``
gives the stop reason of an incomplete response.
"""

from __future__ import annotations

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
    ToolSpec,
    Usage,
)
from turnlog.packing import Message, Prompt

from ._replies import (
    DONE,
    Json,
    Reply,
    arguments_text,
    count,
    error_from,
    is_error_body,
    merge_text,
    message_of,
    obj,
    opt_array,
    opt_obj,
    string,
)
from ._wire import (
    EMPTY_TEXT,
    Provider,
    RenderOptions,
    image_note,
    image_url,
    set_limit,
    text_or_empty,
    tool_format,
    tool_schema,
    tool_text,
)

__all__ = ["PROVIDER"]


def _responses_user(message: Message, opts: RenderOptions) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append({"type": "input_text", "text": text_or_empty(part.text)})
        elif isinstance(part, ImagePart):
            url = image_url(part, opts)
            if url is None:
                content.append({"type": "input_text", "text": image_note(part, "no URL or blob")})
            else:
                content.append({"type": "input_image", "image_url": url, "detail": "auto"})
    if not content:
        content.append({"type": "input_text", "text": EMPTY_TEXT})
    return {"type": "message", "role": "user", "content": content}


def _responses_assistant(message: Message) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    native = False

    def flush() -> None:
        if texts:
            items.append({"type": "message", "role": "assistant", "content": "".join(texts)})
            texts.clear()

    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text:
                texts.append(part.text)
        elif isinstance(part, ImagePart):
            texts.append(image_note(part, "assistant messages carry no images"))
        elif isinstance(part, ToolCall) and part.freeform:
            flush()
            items.append(
                {
                    "type": "custom_tool_call",
                    "call_id": part.id,
                    "name": part.name,
                    "input": part.arguments,
                }
            )
        elif isinstance(part, ToolCall):
            flush()
            items.append(
                {
                    "type": "function_call",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": part.arguments,
                }
            )
        elif isinstance(part, ReasoningPart) and part.provider == "openai" and part.id:
            flush()
            item: dict[str, Any] = {
                "type": "reasoning",
                "id": part.id,
                "summary": [{"type": "summary_text", "text": part.text}] if part.text else [],
            }
            if part.opaque:
                item["encrypted_content"] = part.opaque
            items.append(item)
        elif isinstance(part, NativePart):
            # render_body refused the items of other formats: this one is ours, unchanged
            flush()
            items.append(msgspec.json.decode(part.data))
            native = True
    flush()
    if not native and not any(
        i["type"] in ("message", "function_call", "custom_tool_call") for i in items
    ):
        # A reasoning item must be followed by an output item; an empty reply still says so.
        items.append({"type": "message", "role": "assistant", "content": EMPTY_TEXT})
    return items


def _build_responses(prompt: Prompt, opts: RenderOptions) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    freeform: set[str] = set()  # ids of the freeform calls so far: their outputs differ
    for message in prompt.messages:
        if message.role == "user":
            items.append(_responses_user(message, opts))
        elif message.role == "assistant":
            items.extend(_responses_assistant(message))
            freeform.update(p.id for p in message.tool_calls if p.freeform)
        else:
            kind = (
                "custom_tool_call_output"
                if message.tool_call_id in freeform
                else "function_call_output"
            )
            items.append(
                {
                    "type": kind,
                    "call_id": message.tool_call_id,
                    "output": text_or_empty(tool_text(message)),
                }
            )
    body: dict[str, Any] = {"model": opts.model, "input": items}
    instructions = "\n\n".join(s.text for s in prompt.system if s.text)
    if instructions:
        body["instructions"] = instructions
    set_limit(opts, "max_output_tokens", body)
    if prompt.tools:
        body["tools"] = [
            _responses_custom_tool(t)
            if t.freeform
            else {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": tool_schema(t),
                "strict": t.strict,
            }
            for t in prompt.tools
        ]
    return body


def _responses_custom_tool(tool: ToolSpec) -> dict[str, Any]:
    """A freeform tool: ``{"type": "custom", name, description, format}``."""
    out: dict[str, Any] = {"type": "custom", "name": tool.name}
    if tool.description:
        out["description"] = tool.description
    fmt = tool_format(tool)
    if fmt is not None:
        out["format"] = fmt
    return out


# -- replies --------------------------------------------------------------------------------
def _responses_usage(usage: Json, path: str) -> Usage:
    details = opt_obj(usage, "input_tokens_details", path)
    output = opt_obj(usage, "output_tokens_details", path)
    return Usage(
        input_tokens=count(usage, "input_tokens", path),
        output_tokens=count(usage, "output_tokens", path),
        cache_read_tokens=count(details, "cached_tokens", f"{path}.input_tokens_details"),
        cache_write_tokens=count(details, "cache_write_tokens", f"{path}.input_tokens_details"),
        reasoning_tokens=count(output, "reasoning_tokens", f"{path}.output_tokens_details"),
    )


def _responses_item(item: Json, path: str) -> list[Part]:
    kind = string(item, "type", path)
    if kind == "message":
        texts = []
        for i, raw in enumerate(opt_array(item, "content", path)):
            part = obj(raw, f"{path}.content[{i}]")
            part_kind = string(part, "type", f"{path}.content[{i}]")
            if part_kind == "output_text":
                texts.append(string(part, "text", f"{path}.content[{i}]"))
            elif part_kind == "refusal":
                texts.append(string(part, "refusal", f"{path}.content[{i}]"))
        return [TextPart(text="".join(texts))]
    if kind == "reasoning":
        summary = [
            string(obj(s, f"{path}.summary[{i}]"), "text", f"{path}.summary[{i}]")
            for i, s in enumerate(opt_array(item, "summary", path))
        ]
        content = [
            string(obj(c, f"{path}.content[{i}]"), "text", f"{path}.content[{i}]")
            for i, c in enumerate(opt_array(item, "content", path))
        ]
        text = "\n\n".join(t for t in summary if t) or "\n\n".join(t for t in content if t)
        return [
            ReasoningPart(
                text=text,
                opaque=string(item, "encrypted_content", path),
                provider="openai",
                id=string(item, "id", path),
            )
        ]
    if kind == "custom_tool_call":
        return [
            ToolCall(
                id=string(item, "call_id", path, required=True),
                name=string(item, "name", path, required=True),
                arguments=string(item, "input", path),
                freeform=True,
            )
        ]
    if kind == "function_call":
        return [
            ToolCall(
                id=string(item, "call_id", path, required=True),
                name=string(item, "name", path, required=True),
                arguments=arguments_text(item.get("arguments"), f"{path}.arguments"),
            )
        ]
    if kind == "compaction":
        # opaque: kept as the provider gave it, sent back unchanged
        return [
            NativePart(
                format="openai-responses",
                item_type="compaction",
                data=msgspec.json.encode(item).decode(),
            )
        ]
    return []  # built-in tool calls and future item kinds are not turnlog parts


def _responses_reply(
    root: Json, request_seq: int | None, path: str, items: list[object] | None = None
) -> Reply:
    error = root.get("error")
    if error is not None or root.get("status") == "failed":
        return Reply(
            error=error_from({"error": error or {"message": "response failed"}}, None, request_seq)
        )
    response_id = string(root, "id", path)
    model = string(root, "model", path)
    output = opt_array(root, "output", path)
    if not output and items:
        output = items
    parts: list[Part] = []
    for i, raw in enumerate(output):
        parts.extend(_responses_item(obj(raw, f"{path}.output[{i}]"), f"{path}.output[{i}]"))
    status = string(root, "status", path)
    stop = status
    if status == "incomplete":
        details = opt_obj(root, "incomplete_details", path)
        stop = string(details, "reason", f"{path}.incomplete_details") or status
    usage = _responses_usage(opt_obj(root, "usage", path), f"{path}.usage")
    return Reply(
        message=message_of(merge_text(parts), model, response_id),
        response=ResponseReceived(
            request_seq=request_seq,
            usage=usage,
            stop_reason=stop,
            model=model,
            response_id=response_id,
        ),
    )


def _parse_responses(root: Json, request_seq: int | None) -> Reply:
    if is_error_body(root):
        return Reply(error=error_from(root, None, request_seq))
    if "output" not in root:
        raise DecodeError(
            f"expected a response object with $.output, found keys {sorted(root)[:8]}"
        )
    return _responses_reply(root, request_seq, "$")


def _parse_responses_stream(events: list[object], request_seq: int | None) -> Reply:
    items: dict[int, object] = {}
    for n, event in enumerate(events):
        if event is DONE:
            continue
        path = f"event[{n}]"
        data = obj(event, path)
        kind = string(data, "type", path)
        if kind == "error":
            return Reply(error=error_from({"error": data}, None, request_seq))
        if kind == "response.output_item.done":
            index = data.get("output_index", len(items))
            if isinstance(index, bool) or not isinstance(index, int):
                raise DecodeError(f"expected an int at {path}.output_index, found {index!r}")
            items[index] = obj(data.get("item"), f"{path}.item")
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = obj(data.get("response"), f"{path}.response")
            if kind == "response.failed" and response.get("error") is None:
                response = {**response, "error": {"message": "response failed"}}
            return _responses_reply(
                response, request_seq, f"{path}.response", [items[i] for i in sorted(items)]
            )
    raise DecodeError("the responses stream ended before response.completed")


def _headers(api_key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"}


PROVIDER = Provider(
    name="openai-responses",
    description="OpenAI Responses",
    path="/responses",
    base_url="https://api.openai.com/v1",
    headers=_headers,
    build=_build_responses,
    parse=_parse_responses,
    parse_stream=_parse_responses_stream,
)

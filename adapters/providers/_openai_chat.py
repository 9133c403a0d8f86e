"""OpenAI Chat Completions (and compatible endpoints): requests and replies.

One system message (the sections joined by a blank line), user/assistant/tool
messages as they come; assistant tool calls carry ``function.arguments`` as
JSON text; reasoning is not sent (the API takes none back). Call ids longer
than the API accepts (40 characters) are replaced, consistently in the call
and its result, by ``call_`` plus a blake3 digest of the id. Replies: the
first choice becomes the message; ``reasoning_content`` (DeepSeek and other
compatible servers) becomes a ``ReasoningPart`` with provider ``openai-chat``.
"""

from __future__ import annotations

from typing import Any

from turnlog.errors import DecodeError
from turnlog.events import (
    ImagePart,
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
    array,
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
    hashed_id,
    image_note,
    image_url,
    set_limit,
    text_or_empty,
    tool_format,
    tool_schema,
    tool_text,
)

__all__ = ["PROVIDER"]

_CHAT_ID_MAX = 40


def _chat_id(call_id: str) -> str:
    return call_id if len(call_id) <= _CHAT_ID_MAX else hashed_id("call_", call_id)


def _chat_user(message: Message, opts: RenderOptions) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": text_or_empty(part.text)})
        elif isinstance(part, ImagePart):
            url = image_url(part, opts)
            if url is None:
                parts.append({"type": "text", "text": image_note(part, "no URL or blob")})
            else:
                parts.append({"type": "image_url", "image_url": {"url": url}})
    if not parts:
        return {"role": "user", "content": EMPTY_TEXT}
    if len(parts) == 1 and parts[0]["type"] == "text":
        return {"role": "user", "content": parts[0]["text"]}
    return {"role": "user", "content": parts}


def _chat_assistant(message: Message) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ImagePart):
            texts.append(image_note(part, "assistant messages carry no images"))
        elif isinstance(part, ToolCall) and part.freeform:
            calls.append(
                {
                    "id": _chat_id(part.id),
                    "type": "custom",
                    "custom": {"name": part.name, "input": part.arguments},
                }
            )
        elif isinstance(part, ToolCall):
            calls.append(
                {
                    "id": _chat_id(part.id),
                    "type": "function",
                    "function": {"name": part.name, "arguments": part.arguments},
                }
            )
    text = "".join(texts)
    out: dict[str, Any] = {"role": "assistant"}
    if calls:
        out["content"] = text or None
        out["tool_calls"] = calls
    else:
        out["content"] = text_or_empty(text)
    return out


def _build_chat(prompt: Prompt, opts: RenderOptions) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(s.text for s in prompt.system if s.text)
    if system:
        messages.append({"role": "system", "content": system})
    for message in prompt.messages:
        if message.role == "user":
            messages.append(_chat_user(message, opts))
        elif message.role == "assistant":
            messages.append(_chat_assistant(message))
        else:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _chat_id(message.tool_call_id),
                    "content": text_or_empty(tool_text(message)),
                }
            )
    body: dict[str, Any] = {"model": opts.model, "messages": messages}
    set_limit(opts, "max_completion_tokens", body)
    if prompt.tools:
        body["tools"] = [
            _chat_custom_tool(t)
            if t.freeform
            else {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": tool_schema(t),
                    **({"strict": True} if t.strict else {}),
                },
            }
            for t in prompt.tools
        ]
    return body


def _chat_custom_tool(tool: ToolSpec) -> dict[str, Any]:
    """A freeform tool: ``{"type": "custom", "custom": {name, description, format}}``."""
    custom: dict[str, Any] = {"name": tool.name}
    if tool.description:
        custom["description"] = tool.description
    fmt = tool_format(tool)
    if fmt is not None:
        # stored as the Responses API writes it: {type: grammar, syntax, definition};
        # Chat Completions nests the grammar
        if fmt.get("type") == "grammar" and "grammar" not in fmt:
            fmt = {"type": "grammar", "grammar": {k: v for k, v in fmt.items() if k != "type"}}
        custom["format"] = fmt
    return {"type": "custom", "custom": custom}


# -- replies --------------------------------------------------------------------------------
def _chat_usage(usage: Json, path: str) -> Usage:
    prompt = opt_obj(usage, "prompt_tokens_details", path)
    completion = opt_obj(usage, "completion_tokens_details", path)
    cached = count(prompt, "cached_tokens", f"{path}.prompt_tokens_details")
    if not cached:  # DeepSeek's name for the same number
        cached = count(usage, "prompt_cache_hit_tokens", path)
    return Usage(
        input_tokens=count(usage, "prompt_tokens", path),
        output_tokens=count(usage, "completion_tokens", path),
        cache_read_tokens=cached,
        cache_write_tokens=count(prompt, "cache_write_tokens", f"{path}.prompt_tokens_details"),
        reasoning_tokens=count(completion, "reasoning_tokens", f"{path}.completion_tokens_details"),
    )


def _chat_content(value: object, path: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    texts = []
    for i, item in enumerate(array(value, path)):
        part = obj(item, f"{path}[{i}]")
        texts.append(string(part, "text", f"{path}[{i}]"))
    return "".join(texts)


def _parse_chat(root: Json, request_seq: int | None) -> Reply:
    if is_error_body(root):
        return Reply(error=error_from(root, None, request_seq))
    response_id = string(root, "id", "$")
    model = string(root, "model", "$")
    choices = array(root.get("choices"), "$.choices")
    if not choices:
        raise DecodeError("expected at least one choice at $.choices, found none")
    choice = obj(choices[0], "$.choices[0]")
    message = obj(choice.get("message"), "$.choices[0].message")
    path = "$.choices[0].message"
    parts: list[Part] = []
    reasoning = string(message, "reasoning_content", path)
    if reasoning:
        parts.append(ReasoningPart(text=reasoning, provider="openai-chat"))
    text = _chat_content(message.get("content"), f"{path}.content")
    refusal = string(message, "refusal", path)
    parts.append(TextPart(text=text or refusal))
    for i, raw in enumerate(opt_array(message, "tool_calls", path)):
        where = f"{path}.tool_calls[{i}]"
        call = obj(raw, where)
        if call.get("type") == "custom":  # a freeform call: raw text input
            custom = obj(call.get("custom"), f"{where}.custom")
            parts.append(
                ToolCall(
                    id=string(call, "id", where, required=True),
                    name=string(custom, "name", f"{where}.custom", required=True),
                    arguments=string(custom, "input", f"{where}.custom"),
                    freeform=True,
                )
            )
            continue
        function = obj(call.get("function"), f"{where}.function")
        parts.append(
            ToolCall(
                id=string(call, "id", where, required=True),
                name=string(function, "name", f"{where}.function", required=True),
                arguments=arguments_text(function.get("arguments"), f"{where}.function.arguments"),
            )
        )
    usage = _chat_usage(opt_obj(root, "usage", "$"), "$.usage")
    stop = string(choice, "finish_reason", "$.choices[0]")
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


class _ChatCall:
    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []
        self.freeform = False


def _parse_chat_stream(events: list[object], request_seq: int | None) -> Reply:
    response_id = model = stop = ""
    usage = Usage()
    reasoning: list[str] = []
    texts: list[str] = []
    calls: dict[int, _ChatCall] = {}
    done = False
    for n, event in enumerate(events):
        if event is DONE:
            done = True
            break
        path = f"event[{n}]"
        chunk = obj(event, path)
        if chunk.get("error") is not None:
            return Reply(error=error_from(chunk, None, request_seq))
        response_id = response_id or string(chunk, "id", path)
        model = model or string(chunk, "model", path)
        if chunk.get("usage") is not None:
            usage = _chat_usage(obj(chunk["usage"], f"{path}.usage"), f"{path}.usage")
        for i, raw in enumerate(opt_array(chunk, "choices", path)):
            where = f"{path}.choices[{i}]"
            choice = obj(raw, where)
            index = choice.get("index", 0)
            if index != 0:
                continue  # only the first choice becomes the message
            delta = opt_obj(choice, "delta", where)
            reasoning.append(string(delta, "reasoning_content", f"{where}.delta"))
            texts.append(_chat_content(delta.get("content"), f"{where}.delta.content"))
            texts.append(string(delta, "refusal", f"{where}.delta"))
            for j, item in enumerate(opt_array(delta, "tool_calls", f"{where}.delta")):
                at = f"{where}.delta.tool_calls[{j}]"
                piece = obj(item, at)
                slot = piece.get("index", j)
                if isinstance(slot, bool) or not isinstance(slot, int):
                    raise DecodeError(f"expected an int at {at}.index, found {slot!r}")
                call = calls.setdefault(slot, _ChatCall())
                call.id = call.id or string(piece, "id", at)
                if piece.get("type") == "custom" or "custom" in piece:  # freeform input
                    custom = opt_obj(piece, "custom", at)
                    call.freeform = True
                    call.name = call.name or string(custom, "name", f"{at}.custom")
                    call.arguments.append(string(custom, "input", f"{at}.custom"))
                    continue
                function = opt_obj(piece, "function", at)
                call.name = call.name or string(function, "name", f"{at}.function")
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    call.arguments.append(arguments)
                elif arguments is not None:
                    call.arguments.append(arguments_text(arguments, f"{at}.function.arguments"))
            finish = string(choice, "finish_reason", where)
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
        if call.freeform:
            parts.append(
                ToolCall(
                    id=call.id, name=call.name, arguments="".join(call.arguments), freeform=True
                )
            )
            continue
        parts.append(
            ToolCall(id=call.id, name=call.name, arguments="".join(call.arguments) or "{}")
        )
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


def _headers(api_key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"}


PROVIDER = Provider(
    name="openai-chat",
    description="OpenAI Chat Completions (and compatible endpoints)",
    path="/chat/completions",
    base_url="https://api.openai.com/v1",
    headers=_headers,
    build=_build_chat,
    parse=_parse_chat,
    parse_stream=_parse_chat_stream,
    stream_fields={"stream_options": {"include_usage": True}},
)

"""Render a neutral `Prompt` to a provider request body.

Theory of operation
-------------------
A renderer is a pure function of its arguments: the prompt, the model name,
the output cap, the blob reader (content-addressed, so a blob's bytes are
fixed by its hash) and any extra top-level fields. It reads no clock, no
environment and no randomness, and the canonical bytes (`canonical`: JSON with
sorted keys, no spaces, UTF-8) of the same arguments are always the same. That
is what lets `Packer.record` hash the rendered body into the request record
and `Packer.replay` re-render and compare.

Three formats (`FORMATS`):

* ``openai-chat``: Chat Completions. One system message (the sections joined
  by a blank line), user/assistant/tool messages as they come; assistant
  tool calls carry ``function.arguments`` as JSON text; reasoning is not sent
  (the API takes none back).
* ``openai-responses``: Responses. The sections become ``instructions``; an
  assistant message becomes, in part order, ``reasoning`` items (only those
  this API produced: provider ``openai`` with an item id; ``encrypted_content``
  from ``opaque``), assistant ``message`` items and ``function_call`` items;
  a tool message becomes a ``function_call_output``.
* ``anthropic``: Messages. ``system`` is one text block per section, so a
  cache breakpoint can sit between the static sections and the summary; tool
  results become ``tool_result`` blocks at the front of the next user turn;
  turns strictly alternate (consecutive messages of one role are merged, and
  a user turn is put first when the prompt starts with the assistant);
  thinking blocks keep their signature (``opaque``) and are sent only for
  reasoning this API produced; breakpoints become ``cache_control`` (at most
  four).

Rules shared by all formats, so every body is valid on the wire:

* when the prompt ends in the results of the last assistant message's calls
  and some are missing (calls still running), each missing one is answered
  with `MISSING_RESULT_TEXT` as an error, as the packer does for older calls
  (every API refuses a call without its result once a result follows it); a
  prompt that ends in the assistant message itself is rendered as it is;
* text that is empty (or, for Anthropic, only whitespace) becomes
  `EMPTY_TEXT`; a message with nothing to send carries that text;
* tool schemas are JSON objects with ``"type": "object"`` (added when absent);
* tool-call arguments that are not a JSON object go to Anthropic as
  ``{"_raw_arguments": TEXT}`` (its ``input`` must be an object);
* call ids that a provider would refuse (Anthropic: ``[A-Za-z0-9_-]+``;
  Chat Completions: at most 40 characters) are replaced, consistently in the
  call and its result, by a prefix plus a blake3 digest of the id;
* images go as URLs, or as base64 data read with ``blobs``; an image the
  format cannot carry (in an assistant or tool message, an unsupported media
  type) becomes a text note.

The prompt must satisfy `Prompt.problems` (every packed prompt
does); a prompt that does not is refused with `RenderError` rather than sent.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import blake3
from turnlog import (
    SUMMARY_SECTION,
    BlobRef,
    ImagePart,
    KernelError,
    Message,
    Prompt,
    ReasoningPart,
    RequestIssued,
    TextPart,
    ToolCall,
    ToolSpec,
)

__all__ = [
    "ANTHROPIC_CACHE_LIMIT",
    "EMPTY_TEXT",
    "FIRST_TURN_TEXT",
    "FORMATS",
    "MISSING_RESULT_TEXT",
    "BlobReader",
    "Format",
    "RenderError",
    "canonical",
    "render",
    "render_body",
    "render_args",
    "renderer",
    "renderer_for",
]

#: Stands in for empty text (the packer never produces it on its own).
EMPTY_TEXT = "(empty)"
#: The user turn put in front when a prompt for Anthropic starts with the assistant.
FIRST_TURN_TEXT = "(continued)"
#: The result given to a call still open when the prompt ends in its run of results.
MISSING_RESULT_TEXT = "[no result was recorded for this call]"
#: Anthropic accepts at most this many ``cache_control`` markers per request.
ANTHROPIC_CACHE_LIMIT = 4

#: Reads a blob's bytes (e.g. ``Log.blob``).
BlobReader = Callable[[BlobRef], bytes]

_ANTHROPIC_ID = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_ANTHROPIC_MEDIA = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_CHAT_ID_MAX = 40
_EPHEMERAL: dict[str, object] = {"type": "ephemeral"}


class RenderError(KernelError, ValueError):
    """A prompt (or an argument) cannot be rendered to a valid request body."""


class _Options(NamedTuple):
    model: str
    max_tokens: int | None
    blobs: BlobReader | None


class Format(NamedTuple):
    """One wire format.

    Attributes:
        name: the registry key (recorded as ``RequestIssued.format``).
        path: the request path relative to the API base URL (OpenAI base URLs
            end in ``/v1``; Anthropic's do not).
        description: in words.
        build: the renderer itself (use `render` / `render_body`, which check the
            arguments and the prompt first).
    """

    name: str
    path: str
    description: str
    build: Callable[[Prompt, _Options], dict[str, Any]]


def canonical(body: Mapping[str, object]) -> bytes:
    """The canonical bytes of a request body: JSON, sorted keys, no spaces, UTF-8.

    Raises:
        RenderError: the body holds something JSON cannot carry (a lone surrogate,
            a non-finite float, an object that is not JSON).
    """
    try:
        return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise RenderError(f"the request body cannot be encoded as JSON: {exc}") from exc


def render_body(prompt: Prompt, format: str, *, model: str,  # noqa: A002
                max_tokens: int | None, blobs: BlobReader | None = None,
                extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """Render ``prompt`` as the request body of ``format`` (a dict of JSON values).

    Parameters:
        prompt: a packed prompt.
        format: a key of `FORMATS` (``openai-chat``, ``openai-responses``, ``anthropic``).
        model: the model name put in the body.
        max_tokens: the output cap (``max_completion_tokens``, ``max_output_tokens``
            or ``max_tokens``); required for Anthropic, omitted elsewhere when None.
        blobs: reads the bytes of images stored as blobs (``Log.blob``).
        extra: further top-level fields (``stream``, ``temperature``, ``thinking``,
            ``include``...); they may not replace a rendered field.

    Raises:
        RenderError: unknown format, bad arguments, a malformed prompt, a tool schema
            that is not a JSON object, a blob image without ``blobs``.
    """
    spec = FORMATS.get(format)
    if spec is None:
        raise RenderError(f"unknown format {format!r}; expected one of {sorted(FORMATS)}")
    if not isinstance(model, str) or not model:
        raise RenderError(f"model must be a non-empty str, found {model!r}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(
            max_tokens, int) or max_tokens < 1):
        raise RenderError(f"max_tokens must be a positive int or None, found {max_tokens!r}")
    if max_tokens is None and format == "anthropic":
        raise RenderError("the anthropic format needs max_tokens (the API requires it)")
    problems = prompt.problems()
    if problems:
        raise RenderError(f"the prompt is malformed ({len(problems)} problem(s)): "
                          f"{'; '.join(problems[:3])}. Render only prompts that the packer made")
    body = spec.build(_answer_pending(prompt), _Options(model, max_tokens, blobs))
    for key, value in (extra or {}).items():
        if key in body:
            raise RenderError(f"extra field {key!r} would replace a rendered field; "
                              "change the prompt or the arguments instead")
        body[key] = value
    return body


def render(prompt: Prompt, format: str, *, model: str, max_tokens: int | None,  # noqa: A002
           blobs: BlobReader | None = None, extra: Mapping[str, object] | None = None) -> bytes:
    """Render ``prompt`` as the canonical bytes of a ``format`` request body.

    The same arguments always give the same bytes. See `render_body` for the
    parameters; use `renderer` to get the one-argument function that
    ``Packer.record(..., render=...)`` and ``Packer.replay`` take.

    Raises:
        RenderError: as `render_body`, or the body cannot be encoded.
    """
    return canonical(render_body(prompt, format, model=model, max_tokens=max_tokens,
                                 blobs=blobs, extra=extra))


def renderer_for(request: RequestIssued, *, blobs: BlobReader | None = None,
                 ) -> Callable[[Prompt], bytes] | None:
    """The renderer a recorded request was rendered with (None for ``neutral``).

    Pass it to ``Packer.replay(..., render=...)`` to check the rendered body too.

    Raises:
        RenderError: the record names a format this version does not know.
    """
    if request.format == "neutral" or not request.rendered_hash:
        return None
    try:
        args = json.loads(request.render_args) if request.render_args else {}
    except ValueError as exc:
        raise RenderError(f"the record's render_args are not JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise RenderError("the record's render_args must be a JSON object")
    max_tokens = args.get("max_tokens")
    extra = args.get("extra")
    if max_tokens is not None and not isinstance(max_tokens, int):
        raise RenderError(f"render_args.max_tokens must be an int, found {max_tokens!r}")
    if extra is not None and not isinstance(extra, dict):
        raise RenderError("render_args.extra must be a JSON object")
    return renderer(request.format, model=request.model, max_tokens=max_tokens,
                    blobs=blobs, extra=extra)


def render_args(*, max_tokens: int | None, extra: Mapping[str, object] | None = None) -> str:
    """The ``render_args`` to record with a request rendered with these arguments
    (`renderer_for` reads them back)."""
    args: dict[str, object] = {"max_tokens": max_tokens}
    if extra:
        args["extra"] = dict(extra)
    return canonical(args).decode()


def renderer(format: str, *, model: str, max_tokens: int | None,  # noqa: A002
             blobs: BlobReader | None = None,
             extra: Mapping[str, object] | None = None) -> Callable[[Prompt], bytes]:
    """A pure ``Prompt -> bytes`` function for ``Packer.record`` / ``Packer.replay``.

    Example::

        render = renderer("anthropic", model="claude-sonnet-4-5", max_tokens=8192)
        recorded = packer.record(session, format="anthropic", render=render)

    Raises:
        RenderError: ``format`` is unknown (checked now, not at the first call).
    """
    if format not in FORMATS:
        raise RenderError(f"unknown format {format!r}; expected one of {sorted(FORMATS)}")
    frozen = dict(extra or {})

    def render_prompt(prompt: Prompt) -> bytes:
        return render(prompt, format, model=model, max_tokens=max_tokens, blobs=blobs,
                      extra=frozen)

    return render_prompt


def _answer_pending(prompt: Prompt) -> Prompt:
    """Answer, with `MISSING_RESULT_TEXT`, the calls of the last assistant message that
    the tool messages ending the prompt leave open (every API refuses a partial run)."""
    messages = prompt.messages
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    if last < 0 or last == len(messages) - 1:
        return prompt
    if any(m.role != "tool" for m in messages[last + 1:]):
        return prompt
    answered = {m.tool_call_id for m in messages[last + 1:]}
    missing = tuple(
        Message(role="tool", parts=(TextPart(text=MISSING_RESULT_TEXT),), tool_call_id=c.id,
                name=c.name, is_error=True, source=messages[last].source)
        for c in messages[last].tool_calls if c.id not in answered)
    if not missing:
        return prompt
    return Prompt(system=prompt.system, tools=prompt.tools, messages=messages + missing,
                  breakpoints=prompt.breakpoints)


# -- shared helpers -------------------------------------------------------------------------
def _text(text: str, *, strict: bool = False) -> str:
    """``text``, or `EMPTY_TEXT` when it is empty (``strict``: or only whitespace)."""
    if not text or (strict and not text.strip()):
        return EMPTY_TEXT
    return text


def _schema(tool: ToolSpec) -> dict[str, Any]:
    try:
        value = json.loads(tool.parameters or "{}")
    except (ValueError, RecursionError) as exc:
        raise RenderError(f"tool {tool.name!r}: parameters are not JSON ({exc}); fix the "
                          "ToolsSet event's schema") from exc
    if not isinstance(value, dict):
        raise RenderError(f"tool {tool.name!r}: parameters must be a JSON object (a JSON "
                          f"Schema), found {type(value).__name__}")
    if "type" not in value:
        value = {"type": "object", **value}
    if value.get("type") == "object" and "properties" not in value:
        value["properties"] = {}
    return value


def _image_data(part: ImagePart, opts: _Options) -> str | None:
    """Base64 of a blob image, or None when the image has no blob."""
    if part.blob is None:
        return None
    if opts.blobs is None:
        raise RenderError(f"image blob {part.blob.hash[:16]} ({part.media_type}) needs a blob "
                          "reader: pass blobs=log.blob")
    try:
        data = opts.blobs(part.blob)
    except KernelError as exc:
        raise RenderError(f"image blob {part.blob.hash[:16]} cannot be read: {exc}") from exc
    return base64.b64encode(data).decode("ascii")


def _image_url(part: ImagePart, opts: _Options) -> str | None:
    """A URL for an image (a ``data:`` URL for a blob), or None when there is none."""
    data = _image_data(part, opts)
    if data is not None:
        return f"data:{part.media_type};base64,{data}"
    return part.url or None


def _image_note(part: ImagePart, why: str) -> str:
    return f"[image {part.media_type} not sent: {why}]"


def _hashed_id(prefix: str, call_id: str) -> str:
    return prefix + blake3.blake3(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _chat_id(call_id: str) -> str:
    return call_id if len(call_id) <= _CHAT_ID_MAX else _hashed_id("call_", call_id)


def _anthropic_id(call_id: str) -> str:
    return call_id if _ANTHROPIC_ID.match(call_id) else _hashed_id("toolu_", call_id)


def _message_text(message: Message) -> str:
    """The text of a tool message (images noted in words)."""
    out: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            out.append(part.text)
        elif isinstance(part, ImagePart):
            out.append(_image_note(part, "images are not sent in tool results"))
    return "".join(out)


def _limit(opts: _Options, key: str, body: dict[str, Any]) -> None:
    if opts.max_tokens is not None:
        body[key] = opts.max_tokens


# -- openai-chat ---------------------------------------------------------------------------
def _chat_user(message: Message, opts: _Options) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": _text(part.text)})
        elif isinstance(part, ImagePart):
            url = _image_url(part, opts)
            if url is None:
                parts.append({"type": "text", "text": _image_note(part, "no URL or blob")})
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
            texts.append(_image_note(part, "assistant messages carry no images"))
        elif isinstance(part, ToolCall):
            calls.append({"id": _chat_id(part.id), "type": "function",
                          "function": {"name": part.name, "arguments": part.arguments}})
    text = "".join(texts)
    out: dict[str, Any] = {"role": "assistant"}
    if calls:
        out["content"] = text or None
        out["tool_calls"] = calls
    else:
        out["content"] = _text(text)
    return out


def _build_chat(prompt: Prompt, opts: _Options) -> dict[str, Any]:
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
            messages.append({"role": "tool", "tool_call_id": _chat_id(message.tool_call_id),
                             "content": _text(_message_text(message))})
    body: dict[str, Any] = {"model": opts.model, "messages": messages}
    _limit(opts, "max_completion_tokens", body)
    if prompt.tools:
        body["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description,
                                               "parameters": _schema(t)}}
            for t in prompt.tools]
    return body


# -- openai-responses ----------------------------------------------------------------------
def _responses_user(message: Message, opts: _Options) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append({"type": "input_text", "text": _text(part.text)})
        elif isinstance(part, ImagePart):
            url = _image_url(part, opts)
            if url is None:
                content.append({"type": "input_text", "text": _image_note(part, "no URL or blob")})
            else:
                content.append({"type": "input_image", "image_url": url, "detail": "auto"})
    if not content:
        content.append({"type": "input_text", "text": EMPTY_TEXT})
    return {"type": "message", "role": "user", "content": content}


def _responses_assistant(message: Message) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    texts: list[str] = []

    def flush() -> None:
        if texts:
            items.append({"type": "message", "role": "assistant", "content": "".join(texts)})
            texts.clear()

    for part in message.parts:
        if isinstance(part, TextPart):
            if part.text:
                texts.append(part.text)
        elif isinstance(part, ImagePart):
            texts.append(_image_note(part, "assistant messages carry no images"))
        elif isinstance(part, ToolCall):
            flush()
            items.append({"type": "function_call", "call_id": part.id, "name": part.name,
                          "arguments": part.arguments})
        elif isinstance(part, ReasoningPart) and part.provider == "openai" and part.id:
            flush()
            item: dict[str, Any] = {
                "type": "reasoning", "id": part.id,
                "summary": [{"type": "summary_text", "text": part.text}] if part.text else []}
            if part.opaque:
                item["encrypted_content"] = part.opaque
            items.append(item)
    flush()
    if not any(i["type"] in ("message", "function_call") for i in items):
        # A reasoning item must be followed by an output item; an empty reply still says so.
        items.append({"type": "message", "role": "assistant", "content": EMPTY_TEXT})
    return items


def _build_responses(prompt: Prompt, opts: _Options) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for message in prompt.messages:
        if message.role == "user":
            items.append(_responses_user(message, opts))
        elif message.role == "assistant":
            items.extend(_responses_assistant(message))
        else:
            items.append({"type": "function_call_output", "call_id": message.tool_call_id,
                          "output": _text(_message_text(message))})
    body: dict[str, Any] = {"model": opts.model, "input": items}
    instructions = "\n\n".join(s.text for s in prompt.system if s.text)
    if instructions:
        body["instructions"] = instructions
    _limit(opts, "max_output_tokens", body)
    if prompt.tools:
        body["tools"] = [{"type": "function", "name": t.name, "description": t.description,
                          "parameters": _schema(t), "strict": False} for t in prompt.tools]
    return body


# -- anthropic -----------------------------------------------------------------------------
def _anthropic_image(part: ImagePart, opts: _Options) -> dict[str, Any]:
    data = _image_data(part, opts)
    if data is not None:
        if part.media_type not in _ANTHROPIC_MEDIA:
            return {"type": "text", "text": _image_note(part, "unsupported media type")}
        return {"type": "image", "source": {"type": "base64", "media_type": part.media_type,
                                            "data": data}}
    if part.url:
        return {"type": "image", "source": {"type": "url", "url": part.url}}
    return {"type": "text", "text": _image_note(part, "no URL or blob")}


_MAX_INPUT_DEPTH = 256


def _nested_deeper(value: object, limit: int) -> bool:
    """True when ``value`` nests containers deeper than ``limit``."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                  else item))
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


def _anthropic_blocks(message: Message, opts: _Options) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.role == "tool":
        block: dict[str, Any] = {"type": "tool_result",
                                 "tool_use_id": _anthropic_id(message.tool_call_id),
                                 "content": _text(_message_text(message), strict=True)}
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
                blocks.append({"type": "text", "text": _image_note(
                    part, "assistant messages carry no images")})
        elif isinstance(part, ToolCall):
            blocks.append({"type": "tool_use", "id": _anthropic_id(part.id), "name": part.name,
                           "input": _tool_input(part.arguments)})
        elif isinstance(part, ReasoningPart) and part.opaque:
            if part.provider == "anthropic":
                blocks.append({"type": "thinking", "thinking": part.text,
                               "signature": part.opaque})
            elif part.provider == "anthropic-redacted":
                blocks.append({"type": "redacted_thinking", "data": part.opaque})
    if not any(b["type"] not in ("thinking", "redacted_thinking") for b in blocks):
        blocks.append({"type": "text", "text": EMPTY_TEXT})
    return blocks


def _cacheable(block: dict[str, Any]) -> bool:
    return block["type"] not in ("thinking", "redacted_thinking")


def _build_anthropic(prompt: Prompt, opts: _Options) -> dict[str, Any]:
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
    system = [{"type": "text", "text": _text(s.text, strict=True)} for s in prompt.system]
    tools = [{"name": t.name, "description": t.description, "input_schema": _schema(t)}
             for t in prompt.tools]
    _place_cache_control(prompt, system, tools, last_block)
    body: dict[str, Any] = {"model": opts.model, "max_tokens": opts.max_tokens,
                            "messages": turns}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
    return body


def _place_cache_control(prompt: Prompt, system: list[dict[str, Any]],
                         tools: list[dict[str, Any]],
                         last_block: dict[int, dict[str, Any]]) -> None:
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


#: Every wire format, by name.
FORMATS: Mapping[str, Format] = {
    "openai-chat": Format("openai-chat", "/chat/completions",
                          "OpenAI Chat Completions (and compatible endpoints)", _build_chat),
    "openai-responses": Format("openai-responses", "/responses", "OpenAI Responses",
                               _build_responses),
    "anthropic": Format("anthropic", "/v1/messages", "Anthropic Messages", _build_anthropic),
}

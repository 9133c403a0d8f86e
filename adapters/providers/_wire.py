"""What every wire format shares: the provider record, render options and helpers.

Theory of operation
-------------------
A provider is one `Provider` record: its name (recorded as
``RequestIssued.format``), the request path and the public base URL, the
authentication headers, its quirks (an output cap the API requires), the
renderer (``Prompt`` -> request body) and the two reply parsers (a JSON body,
an SSE stream). The registry (``_registry``) holds one record per provider;
rendering, parsing, the HTTP client, the summarizers and the session facade
all look a provider up there and never branch on its name.

Renderers are pure functions of the prompt and `RenderOptions`: no clock, no
environment, no randomness. The helpers below are the rules every format
applies the same way (empty text, tool schemas, images, hashed call ids).

Render versions
---------------
A rule that changes the bytes a renderer makes is a new *render version*, never a
new meaning for old bytes: a request record names the version it was rendered
with in its ``render_args`` (absent: version 1, everything recorded before
versions existed), and replay renders with that version. New renderings use
`RENDER_LATEST`.

* 1: the rules of turnlog 0.2.0.
* 2: a prompt with tool calls or results but no tool definitions (a session
  imported from a transcript records no ``ToolsSet``) gets definitions derived
  from the calls it holds (`derived_tools`: each name once, sorted, with a
  permissive schema) where the API requires them (Anthropic refuses
  ``tool_use``/``tool_result`` blocks in a request without ``tools``); and a
  tool name Anthropic would refuse (outside ``[a-zA-Z0-9_-]{1,64}``) is
  replaced, consistently in the definitions and the calls, by ``tool_`` plus a
  blake3 digest of the name.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import blake3
from turnlog import KernelError
from turnlog.errors import InvalidArgumentError
from turnlog.events import BlobRef, ImagePart, TextPart, ToolSpec
from turnlog.packing import Message, Prompt
from turnlog.replay import PREFIX_CACHE, CacheRule

from ._replies import Reply

__all__ = [
    "BlobReader",
    "DERIVED_TOOL_DESCRIPTION",
    "EMPTY_TEXT",
    "FIRST_TURN_TEXT",
    "MISSING_RESULT_TEXT",
    "Provider",
    "RENDER_LATEST",
    "RenderError",
    "RenderOptions",
    "canonical",
]

#: Stands in for empty text (the packer never produces it on its own).
EMPTY_TEXT = "(empty)"


#: The user turn put in front when a prompt for Anthropic starts with the assistant.
FIRST_TURN_TEXT = "(continued)"


#: The result given to a call still open when the prompt ends in its run of results.
MISSING_RESULT_TEXT = "[no result was recorded for this call]"


#: The newest render version (see the module docstring): what a rendering gets unless
#: it names another, and what a request record without one means is version 1.
RENDER_LATEST = 2


#: The description of a tool definition derived from the calls of a history.
DERIVED_TOOL_DESCRIPTION = (
    "No definition of this tool was recorded; this one is derived "
    "from the calls in the conversation."
)


#: The schema of a derived tool definition: any object.
DERIVED_TOOL_SCHEMA = '{"type":"object","properties":{},"additionalProperties":true}'


#: Reads a blob's bytes (e.g. ``Log.blob``).
BlobReader = Callable[[BlobRef], bytes]


Json = dict[str, Any]


class RenderError(InvalidArgumentError):
    """A prompt (or an argument) cannot be rendered to a valid request body (an
    argument error: also a ``ValueError`` and a ``KernelError``)."""


class RenderOptions(NamedTuple):
    """What a renderer needs besides the prompt (``version``: the render version,
    see the module docstring)."""

    model: str
    max_tokens: int | None
    blobs: BlobReader | None
    version: int = RENDER_LATEST


class Provider(NamedTuple):
    """One wire format: everything turnlog knows about a provider's API.

    Attributes:
        name: the registry key (recorded as ``RequestIssued.format``).
        description: in words.
        path: the request path relative to the API base URL (OpenAI base URLs
            end in ``/v1``; Anthropic's do not).
        base_url: the public API root, used when no base URL is given.
        headers: the authentication (and version) headers for an API key.
        build: the renderer (use ``render`` / ``render_body``, which check the
            arguments and the prompt first).
        parse: parses a complete JSON reply (use ``parse_response``).
        parse_stream: parses the decoded events of an SSE reply (use ``parse_stream``).
        max_tokens_required: the API refuses a request without an output cap.
        stream_fields: further top-level fields a streamed request needs (the
            Chat Completions API reports usage in a stream only when asked).
        tools_required: the API refuses tool calls or results in a request that
            defines no tools; from render version 2 such a prompt gets
            `derived_tools`.
        caching: how the provider's prompt cache serves a request (what
            `turnlog.Replayer.cost` reads its records by): automatic prefix caching
            (OpenAI) unless the record says otherwise.
    """

    name: str
    description: str
    path: str
    base_url: str
    headers: Callable[[str], dict[str, str]]
    build: Callable[[Prompt, RenderOptions], Json]
    parse: Callable[[Json, int | None], Reply]
    parse_stream: Callable[[list[object], int | None], Reply]
    max_tokens_required: bool = False
    stream_fields: Mapping[str, object] = {}
    tools_required: bool = False
    caching: CacheRule = PREFIX_CACHE

    def endpoint(self, base_url: str | None = None) -> str:
        """The URL a request is posted to (``base_url`` or the public root, plus `path`)."""
        return (base_url or self.base_url).rstrip("/") + self.path


def canonical(body: Mapping[str, object]) -> bytes:
    """The canonical bytes of a request body: JSON, sorted keys, no spaces, UTF-8.

    Raises:
        RenderError: the body holds something JSON cannot carry (a lone surrogate,
            a non-finite float, an object that is not JSON).
    """
    try:
        return json.dumps(
            body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise RenderError(f"the request body cannot be encoded as JSON: {exc}") from exc


# -- rules every renderer applies ------------------------------------------------------------
def text_or_empty(text: str, *, strict: bool = False) -> str:
    """``text``, or `EMPTY_TEXT` when it is empty (``strict``: or only whitespace)."""
    if not text or (strict and not text.strip()):
        return EMPTY_TEXT
    return text


#: The input schema a freeform tool gets where a provider has no freeform tools: one
#: string field, ``input`` (a freeform call's text is sent as ``{"input": TEXT}``).
FREEFORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
}


def derived_tools(prompt: Prompt) -> tuple[ToolSpec, ...]:
    """Tool definitions for a prompt that has tool calls or results but defines no tools:
    one per tool name its calls use, sorted by name, each with a permissive
    schema and `DERIVED_TOOL_DESCRIPTION`. Empty when the prompt defines tools or has no
    call or result.

    A session imported from a transcript records calls without a ``ToolsSet``; an API
    that refuses calls in a request without definitions (``Provider.tools_required``)
    gets these from render version 2.
    """
    if prompt.tools:
        return ()
    # Every result answers a call of the prompt (`Prompt.problems`), so the calls name
    # every tool the request uses.
    names = {call.name for message in prompt.messages for call in message.tool_calls}
    return tuple(
        ToolSpec(name=name, description=DERIVED_TOOL_DESCRIPTION, parameters=DERIVED_TOOL_SCHEMA)
        for name in sorted(names)
    )


def tool_format(tool: ToolSpec) -> dict[str, Any] | None:
    """A freeform tool's input format (None for unconstrained text)."""
    try:
        value = json.loads(tool.parameters or "{}")
    except (ValueError, RecursionError) as exc:
        raise RenderError(
            f"tool {tool.name!r}: the freeform input format is not JSON ({exc}); "
            "fix the ToolsSet event"
        ) from exc
    if not isinstance(value, dict):
        raise RenderError(
            f"tool {tool.name!r}: the freeform input format must be a JSON "
            f"object, found {type(value).__name__}"
        )
    return value or None


def tool_schema(tool: ToolSpec) -> dict[str, Any]:
    if tool.freeform:
        return dict(FREEFORM_SCHEMA)
    try:
        value = json.loads(tool.parameters or "{}")
    except (ValueError, RecursionError) as exc:
        raise RenderError(
            f"tool {tool.name!r}: parameters are not JSON ({exc}); fix the ToolsSet event's schema"
        ) from exc
    if not isinstance(value, dict):
        raise RenderError(
            f"tool {tool.name!r}: parameters must be a JSON object (a JSON "
            f"Schema), found {type(value).__name__}"
        )
    if "type" not in value:
        value = {"type": "object", **value}
    if value.get("type") == "object" and "properties" not in value:
        value["properties"] = {}
    return value


def image_data(part: ImagePart, opts: RenderOptions) -> str | None:
    """Base64 of a blob image, or None when the image has no blob."""
    if part.blob is None:
        return None
    if opts.blobs is None:
        raise RenderError(
            f"image blob {part.blob.hash[:16]} ({part.media_type}) needs a blob "
            "reader: pass blobs=log.blob"
        )
    try:
        data = opts.blobs(part.blob)
    except KernelError as exc:
        raise RenderError(f"image blob {part.blob.hash[:16]} cannot be read: {exc}") from exc
    return base64.b64encode(data).decode("ascii")


def image_url(part: ImagePart, opts: RenderOptions) -> str | None:
    """A URL for an image (a ``data:`` URL for a blob), or None when there is none."""
    data = image_data(part, opts)
    if data is not None:
        return f"data:{part.media_type};base64,{data}"
    return part.url or None


def image_note(part: ImagePart, why: str) -> str:
    return f"[image {part.media_type} not sent: {why}]"


def hashed_id(prefix: str, call_id: str) -> str:
    return prefix + blake3.blake3(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def tool_text(message: Message) -> str:
    """The text of a tool message (images noted in words)."""
    out: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            out.append(part.text)
        elif isinstance(part, ImagePart):
            out.append(image_note(part, "images are not sent in tool results"))
    return "".join(out)


def set_limit(opts: RenderOptions, key: str, body: dict[str, Any]) -> None:
    if opts.max_tokens is not None:
        body[key] = opts.max_tokens


def strict_schema_problems(name: object, schema: object, *, every_required: bool) -> list[str]:
    """What OpenAI (``every_required``) or Anthropic refuses in the schema of a strict
    function tool, in OpenAI's words: an object that does not set
    ``additionalProperties`` to false and, for OpenAI, one whose ``required`` does not
    list every property. Used by the fake server and by `Session.tools`, which refuses
    what every provider refuses before anything is appended."""
    out: list[str] = []

    def walk(node: object, context: tuple[str, ...]) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, (*context, str(i)))
            return
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        kinds: list[object] = kind if isinstance(kind, list) else [kind]
        if "object" in kinds or "properties" in node:
            where = f"Invalid schema for function '{name}': In context={context}, "
            if node.get("additionalProperties") is not False:
                out.append(
                    where + "'additionalProperties' is required to be supplied and to be false."
                )
            properties = node.get("properties")
            required = node.get("required")
            if every_required and isinstance(properties, dict):
                missing = [
                    key
                    for key in properties
                    if not isinstance(required, list) or key not in required
                ]
                if missing:
                    out.append(
                        where + "'required' is required to be supplied and to be an array "
                        f"including every key in properties. Missing '{missing[0]}'."
                    )
        for key in ("properties", "$defs", "definitions"):
            children = node.get(key)
            if isinstance(children, dict):
                for child_name, child in children.items():
                    walk(child, (*context, key, str(child_name)))
        for key in ("items", "anyOf", "oneOf", "allOf", "prefixItems", "additionalProperties"):
            if key in node:
                walk(node[key], (*context, key))

    try:
        walk(schema, ())
    except RecursionError:
        out.append(f"Invalid schema for function '{name}': the schema is nested too deeply.")
    return out

"""OpenAI Responses API item lists, and the item mapping Codex rollouts share.

Theory of operation
-------------------
A Responses conversation is a list of items. Items the model produced
(``reasoning``, assistant ``message``, ``function_call``, ``custom_tool_call``
and the other ``*_call`` items) that follow each other form one model turn
and are merged into one ``AssistantMessageAdded`` (reasoning with its
``encrypted_content`` in ``ReasoningPart.opaque``; a ``compaction`` item, the
provider's own compaction, starts a new one and is kept whole, byte for byte,
as its ``NativePart``, which renders back to Responses only and replaces the
conversation before it in prompts); ``*_output`` items become
``ToolResultAdded`` (tool name from the call with the same ``call_id``); user
messages become one event per content part; system and developer messages
are classified by the format (a system section here, a notification in a
Codex rollout). Items that map to no event are kept in a neighbour's meta.

`ItemMapper` does the per-item work for both formats: it returns the
payload pieces and the item's residual (the item without the moved values),
and puts moved values back on export.

A file is a JSON list of items, or a request body (``{"input": [...],
"instructions": ..., "tools": [...]}``: the instructions become the
``instructions`` system section, the tools a ``ToolsSet``), or a response
(``{"output": [...], "usage": ...}``: usage becomes a ``ResponseReceived``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgspec
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    Event,
    ImagePart,
    NativePart,
    NotificationAdded,
    Part,
    ReasoningPart,
    ResponseReceived,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    Usage,
    UserMessageAdded,
)

from ._plan import (
    JSON_ERRORS,
    BadRecord,
    Entry,
    ExportSession,
    Format,
    Obj,
    Parsed,
    Plan,
    RecordSink,
    SkippedRecord,
    count_of,
    decode_or_text,
    dumps_sorted,
    get_list,
    get_str,
    kind_of,
    load_document,
    natural_id,
    positioned,
    text_of,
    without,
)

__all__ = [
    "FORMAT",
    "ITEM_TYPES",
    "ItemMapper",
    "NAME",
    "OLD_NAME",
    "Sections",
    "export",
    "parse",
    "restore_items",
    "tools_set",
    "usage_of",
]

NAME = "openai-responses"
#: The spelling of `NAME` before it took the provider's (still accepted; see `Format`).
OLD_NAME = "openai_responses"

#: Item types that identify a Responses item list.
ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_call",
        "item_reference",
        "compaction",
    }
)

#: What an event's records keep of a compaction item (its `NativePart` holds it whole).
_COMPACTION_STUB: Obj = {"type": "compaction"}

#: Classifies a message that is not the model's: (role, text) -> payload.
Classify = Callable[[str, str], Body]


class ItemMapper:
    """Maps Responses items to payload pieces and back; remembers tool names by call id."""

    def __init__(self) -> None:
        self.tools: dict[str, str] = {}

    # -- import ------------------------------------------------------------------------------
    @staticmethod
    def is_model_item(item: Obj) -> bool:
        """True for an item the model produced (reasoning, assistant text, tool calls)."""
        kind = item.get("type")
        if kind == "message":
            return item.get("role") == "assistant"
        return kind in ("reasoning", "compaction") or (
            isinstance(kind, str) and kind.endswith("_call")
        )

    @staticmethod
    def starts_message(item: Obj) -> bool:
        """True for an item that starts a new assistant message (a ``compaction`` item:
        it replaces what came before it)."""
        return item.get("type") == "compaction"

    def model_parts(self, item: Obj, where: str, path: str) -> tuple[list[Part], Obj]:
        """The parts of a model item, and its residual."""
        kind = item.get("type")
        if kind == "compaction":
            if not isinstance(item.get("encrypted_content"), str):
                raise BadRecord(
                    where,
                    f"{path}.encrypted_content",
                    "expected the compaction item's encrypted content (a string)",
                )
            return (
                [
                    NativePart(
                        format="openai-responses",
                        item_type="compaction",
                        data=msgspec.json.encode(item).decode(),
                    )
                ],
                dict(_COMPACTION_STUB),
            )
        if kind == "message":
            return self._assistant(item, where, path)
        if kind == "reasoning":
            return self._reasoning(item, where, path)
        call = item.get("call_id")
        if kind in ("function_call", "custom_tool_call"):
            call_id = get_str(item, "call_id", where, f"{path}.call_id")
            if not call_id:
                raise BadRecord(where, f"{path}.call_id", "expected a non-empty call id")
            name = get_str(item, "name", where, f"{path}.name")
            field = "arguments" if kind == "function_call" else "input"
            arguments = get_str(item, field, where, f"{path}.{field}")
            self.tools[call_id] = name
            return (
                [
                    ToolCall(
                        id=call_id[:256],
                        name=name,
                        arguments=arguments,
                        freeform=kind == "custom_tool_call",
                    )
                ],
                without(item, "call_id", "name", field),
            )
        # Other calls (local shell, web search...): the whole item stays in meta.
        found = call if isinstance(call, str) and call else item.get("id")
        ident = found if isinstance(found, str) and found else str(kind)
        name = str(item.get("name") or kind)
        self.tools[ident] = name
        action = item.get("action", item.get("arguments", {}))
        text = action if isinstance(action, str) else dumps_sorted(action)
        return [ToolCall(id=ident[:256], name=name[:1024], arguments=text)], item

    def _assistant(self, item: Obj, where: str, path: str) -> tuple[list[Part], Obj]:
        content = item.get("content")
        if isinstance(content, str):
            return [TextPart(text=content)], without(item, "content")
        blocks = get_list(item, "content", where, f"{path}.content", optional=True)
        parts: list[Part] = []
        rest: list[Any] = []
        for i, block in enumerate(blocks):
            if isinstance(block, dict) and block.get("type") == "output_text":
                parts.append(
                    TextPart(text=get_str(block, "text", where, f"{path}.content[{i}].text"))
                )
                rest.append(without(block, "text"))
            else:
                rest.append(block)
        residual = dict(item)
        if "content" in item:
            residual["content"] = rest
        return parts, residual

    @staticmethod
    def _reasoning(item: Obj, where: str, path: str) -> tuple[list[Part], Obj]:
        residual = dict(item)
        summary = get_list(item, "summary", where, f"{path}.summary", optional=True)
        texts: list[str] = []
        for i, entry in enumerate(summary):
            if isinstance(entry, dict) and isinstance(entry.get("text"), str):
                texts.append(entry["text"])
            elif entry is not None:
                raise BadRecord(
                    where,
                    f"{path}.summary[{i}]",
                    f"expected a summary object with text, found {kind_of(entry)}",
                )
        if len(summary) == 1:
            residual["summary"] = [without(summary[0], "text")]
        opaque = item.get("encrypted_content")
        if isinstance(opaque, str) and opaque:
            del residual["encrypted_content"]
        else:
            opaque = ""
        return (
            [ReasoningPart(text="\n\n".join(texts), opaque=opaque, provider="openai")],
            residual,
        )

    def input_bodies(
        self,
        item: Obj,
        where: str,
        path: str,
        classify: Classify,
    ) -> tuple[list[Body], Obj] | None:
        """Payloads of an item the model did not produce (messages, tool outputs), and
        its residual; None for an item that maps to no event."""
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = get_str(item, "role", where, f"{path}.role")
            return self._message(item, role, where, path, classify)
        if isinstance(kind, str) and kind.endswith("_output"):
            call = get_str(item, "call_id", where, f"{path}.call_id")
            if not call:
                raise BadRecord(where, f"{path}.call_id", "expected a non-empty call id")
            output = item.get("output")
            residual = without(item, "call_id")
            if isinstance(output, str):
                text = output
                del residual["output"]
            else:
                text = _output_text(output)
            body = ToolResultAdded(
                call_id=call[:256],
                tool_name=self.tools.get(call, "")[:1024],
                output=text,
                exit_code=_exit_code(text),
            )
            return [body], residual
        return None

    def _message(
        self,
        item: Obj,
        role: str,
        where: str,
        path: str,
        classify: Classify,
    ) -> tuple[list[Body], Obj]:
        content = item.get("content")
        if isinstance(content, str):
            return [classify(role, content)], without(item, "content")
        blocks = get_list(item, "content", where, f"{path}.content", optional=True)
        bodies: list[Body] = []
        rest: list[Any] = []
        for i, block in enumerate(blocks):
            btype = block.get("type") if isinstance(block, dict) else None
            if btype in ("input_text", "output_text", "text"):
                text = get_str(block, "text", where, f"{path}.content[{i}].text")
                bodies.append(classify(role, text))
                rest.append(without(block, "text"))
            elif btype == "input_image" and isinstance(block.get("image_url"), str):
                url = block["image_url"]
                media = (
                    url[5 : url.index(";")] if url.startswith("data:") and ";" in url else "image/*"
                )
                bodies.append(
                    UserMessageAdded(text="", images=(ImagePart(media_type=media[:1024], url=url),))
                )
                rest.append(without(block, "image_url"))
            else:
                rest.append(block)
        residual = dict(item)
        residual["content"] = rest
        return bodies, residual

    # -- export --------------------------------------------------------------------------------
    @staticmethod
    def fill_model(residual: Obj, parts: list[Part]) -> Obj:
        """The item back from its residual, taking its parts from the front of ``parts``."""
        item = copy.deepcopy(residual)
        kind = item.get("type")
        if kind == "message":
            if "content" not in item:
                first = parts.pop(0) if parts else TextPart(text="")
                item["content"] = first.text if isinstance(first, TextPart) else ""
                return item
            blocks: Any = item.get("content")
            for i, block in enumerate(blocks if isinstance(blocks, list) else ()):
                if (
                    isinstance(block, dict)
                    and block.get("type") == "output_text"
                    and "text" not in block
                    and parts
                ):
                    text = parts.pop(0)
                    blocks[i] = {**block, "text": text.text if isinstance(text, TextPart) else ""}
            return item
        part: Part | None = parts.pop(0) if parts else None
        if kind == "compaction" and item == _COMPACTION_STUB and isinstance(part, NativePart):
            restored: Obj = msgspec.json.decode(part.data)
            return restored
        if kind == "reasoning" and isinstance(part, ReasoningPart):
            summary = item.get("summary")
            if (
                isinstance(summary, list)
                and len(summary) == 1
                and isinstance(summary[0], dict)
                and "text" not in summary[0]
            ):
                item["summary"] = [{**summary[0], "text": part.text}]
            if part.opaque and "encrypted_content" not in item:
                item["encrypted_content"] = part.opaque
        elif kind in ("function_call", "custom_tool_call") and isinstance(part, ToolCall):
            field = "arguments" if kind == "function_call" else "input"
            if "call_id" not in item:
                item = {
                    "type": kind,
                    "name": part.name,
                    field: part.arguments,
                    "call_id": part.id,
                    **without(item, "type"),
                }
        return item

    @staticmethod
    def fill_input(residual: Obj, bodies: list[Body]) -> Obj:
        """The item back from its residual and its payloads."""
        item = copy.deepcopy(residual)
        pending = list(bodies)
        if item.get("type", "message") == "message" or "role" in item:
            if "content" not in item:
                item["content"] = text_of(pending[0]) if pending else ""
                return item
            blocks: Any = item.get("content")
            for i, block in enumerate(blocks if isinstance(blocks, list) else ()):
                if not isinstance(block, dict) or not pending:
                    continue
                btype = block.get("type")
                if btype in ("input_text", "output_text", "text") and "text" not in block:
                    blocks[i] = {**block, "text": text_of(pending.pop(0))}
                elif btype == "input_image" and "image_url" not in block:
                    image = pending.pop(0)
                    url = (
                        image.images[0].url
                        if isinstance(image, UserMessageAdded) and image.images
                        else ""
                    )
                    blocks[i] = {**block, "image_url": url}
            return item
        body: Body | None = pending[0] if pending else None
        if isinstance(body, ToolResultAdded):
            item = {**item, "call_id": body.call_id}
            if "output" not in item:
                item["output"] = body.output
        return item

    # -- native export -------------------------------------------------------------------------
    @staticmethod
    def items_of(body: Body) -> list[Obj]:
        """Items for an event that was not imported (empty for kinds the format lacks)."""
        if isinstance(body, UserMessageAdded):
            content: list[Obj] = (
                [{"type": "input_text", "text": body.text}] if body.text or not body.images else []
            )
            content += [
                {"type": "input_image", "image_url": image.url}
                for image in body.images
                if image.url
            ]
            return [{"type": "message", "role": "user", "content": content}]
        if isinstance(body, NotificationAdded):
            return [
                {
                    "type": "message",
                    "role": "developer",
                    "content": [{"type": "input_text", "text": body.text}],
                }
            ]
        if isinstance(body, AssistantMessageAdded):
            items: list[Obj] = []
            for part in body.parts:
                if isinstance(part, ReasoningPart):
                    reasoning: Obj = {
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": part.text}]
                        if part.text
                        else [],
                    }
                    if part.opaque:
                        reasoning["encrypted_content"] = part.opaque
                    items.append(reasoning)
                elif isinstance(part, TextPart):
                    items.append(
                        {
                            "type": "message",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": part.text}],
                        }
                    )
                elif isinstance(part, ToolCall) and part.freeform:
                    items.append(
                        {
                            "type": "custom_tool_call",
                            "call_id": part.id,
                            "name": part.name,
                            "input": part.arguments,
                        }
                    )
                elif isinstance(part, ToolCall):
                    items.append(
                        {
                            "type": "function_call",
                            "call_id": part.id,
                            "name": part.name,
                            "arguments": part.arguments,
                        }
                    )
                elif isinstance(part, NativePart) and part.format == "openai-responses":
                    items.append(msgspec.json.decode(part.data))
                elif isinstance(part, NativePart):  # another API's own item: named
                    items.append(
                        {
                            "type": "message",
                            "role": "assistant",
                            "content": [
                                {
                                    "type": "output_text",
                                    "text": f"[{part.format} {part.item_type} "
                                    "item: opaque to this format, kept in the turnlog session]",
                                }
                            ],
                        }
                    )
            return items
        if isinstance(body, ToolResultAdded):
            return [
                {"type": "function_call_output", "call_id": body.call_id, "output": body.output}
            ]
        return []


def _output_text(output: object) -> str:
    if output is None:
        return ""
    if isinstance(output, list):
        texts = [
            b.get("text") for b in output if isinstance(b, dict) and isinstance(b.get("text"), str)
        ]
        if len(texts) == len(output):
            return "\n".join(str(t) for t in texts)
    return dumps_sorted(output)


def _exit_code(output: str) -> int | None:
    """The exit code a Codex shell output reports: ``Exit code: N`` on its first line
    (newer CLIs) or ``metadata.exit_code`` of a JSON output (older ones)."""
    if output.startswith("Exit code: "):
        first = output[11:].split("\n", 1)[0].strip()
        if first.lstrip("-").isdigit() and len(first) < 18:
            return int(first)
        return None
    if output.startswith("{") and '"exit_code"' in output:
        try:
            doc = msgspec.json.decode(output)
        except JSON_ERRORS:
            return None
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        code = meta.get("exit_code") if isinstance(meta, dict) else None
        if isinstance(code, int) and not isinstance(code, bool) and abs(code) < 2**62:
            return code
    return None


def tools_set(tools: list[Any]) -> ToolsSet | None:
    """A ``ToolsSet`` from OpenAI tool definitions (Chat Completions or Responses shape)."""
    specs: list[ToolSpec] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        spec: Obj = (
            tool["function"]
            if isinstance(tool.get("function"), dict)
            else tool["custom"]
            if isinstance(tool.get("custom"), dict)
            else tool
        )
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            continue
        freeform = tool.get("type") == "custom"  # raw text input; parameters: its format
        params = (
            spec.get("format", {}) if freeform else spec.get("parameters", spec.get("format", {}))
        )
        if freeform and isinstance(params, dict) and isinstance(params.get("grammar"), dict):
            params = {**params["grammar"], "type": "grammar"}  # Chat's nesting, flattened
        specs.append(
            ToolSpec(
                name=name[:256],
                description=str(spec.get("description") or ""),
                parameters=dumps_sorted(params if params is not None else {}),
                freeform=freeform,
            )
        )
    return ToolsSet(tools=tuple(specs)) if specs else None


def usage_of(usage: object) -> Usage:
    """Usage from an OpenAI ``usage`` object (Responses, Chat Completions or Codex
    ``token_count`` names)."""
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("input_tokens_details") or usage.get("prompt_tokens_details") or {}
    out = usage.get("output_tokens_details") or usage.get("completion_tokens_details") or {}
    details = details if isinstance(details, dict) else {}
    out = out if isinstance(out, dict) else {}
    return Usage(
        input_tokens=count_of(usage.get("input_tokens", usage.get("prompt_tokens"))),
        output_tokens=count_of(usage.get("output_tokens", usage.get("completion_tokens"))),
        cache_read_tokens=count_of(details.get("cached_tokens", usage.get("cached_input_tokens"))),
        cache_write_tokens=count_of(usage.get("cache_creation_input_tokens")),
        reasoning_tokens=count_of(
            out.get("reasoning_tokens", usage.get("reasoning_output_tokens"))
        ),
    )


# -- the openai_responses format ------------------------------------------------------------
class Sections:
    """Classifies non-model messages of a plain OpenAI conversation: system and
    developer messages before the first user message set system sections
    (``system``, ``system-2``...); later ones are notifications
    (``openai/<role>``), which keeps them at their place in the conversation."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.started = False

    def __call__(self, role: str, text: str) -> Body:
        if role in ("system", "developer") and not self.started:
            name, n = role, 1
            while name in self.names:
                n += 1
                name = f"{role}-{n}"
            self.names.add(name)
            return SystemSectionSet(name=name, text=text)
        if role in ("system", "developer"):
            return NotificationAdded(source=f"openai/{role}", text=text)
        self.started = True
        return UserMessageAdded(text=text)


def parse(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map a Responses item list (or request or response body) to one plan.

    Raises:
        BadRecord: a malformed item (unless ``skip_bad``).
    """
    doc = load_document(data)
    residual: Obj = {}
    key = ""
    if isinstance(doc, dict):
        key = "input" if isinstance(doc.get("input"), list) else "output"
        items = get_list(doc, key, "document", key)
        residual = without(doc, key)
        residual["$items"] = key
    elif isinstance(doc, list):
        items = doc
    else:
        raise BadRecord(
            "document", "", f"expected an array of items or an object, found {kind_of(doc)}"
        )
    plan = Plan(natural=natural_id(source, data))
    parsed = Parsed(format=NAME, plans=[plan])
    entries = plan.entries
    sink = RecordSink(NAME)
    head: list[Entry] = []
    if residual:
        instructions = residual.get("instructions")
        if isinstance(instructions, str) and instructions:
            head.append(
                Entry(
                    SystemSectionSet(name="instructions", text=instructions),
                    "rs:instructions",
                    None,
                    {"derived": True},
                    "instructions",
                )
            )
        tools = tools_set(residual.get("tools") or [])
        if tools is not None:
            head.append(Entry(tools, "rs:tools", None, {"derived": True}, "tools"))
    entries.extend(head)
    mapper = ItemMapper()
    classify = Sections()
    run: Entry | None = None
    for index, item in enumerate(items):
        where = f"{key or 'items'}[{index}]"
        try:
            if not isinstance(item, dict):
                raise BadRecord(where, "", f"expected an item object, found {kind_of(item)}")
            if mapper.is_model_item(item):
                parts, rest = mapper.model_parts(item, where, "")
                record = {"index": index, "raw": rest}
                if run is not None and not mapper.starts_message(item):
                    body = run.body
                    assert isinstance(body, AssistantMessageAdded)
                    run.body = msgspec.structs.replace(body, parts=body.parts + tuple(parts))
                    run.meta["records"].append(record)
                    continue
                run = Entry(
                    AssistantMessageAdded(parts=tuple(parts)),
                    f"rs:{index}",
                    None,
                    sink.attach({"records": [record]}),
                    where,
                )
                entries.append(run)
                continue
            mapped = mapper.input_bodies(item, where, "", classify)
        except BadRecord as exc:
            if not skip_bad:
                raise
            parsed.skipped.append(_skip(source, exc))
            sink.hold({"index": index, "record": item})
            continue
        if mapped is None:
            sink.hold({"index": index, "record": item})
            continue
        run = None
        bodies, rest = mapped
        for i, body in enumerate(bodies):
            meta: Obj = {"index": index, "raw": rest} if i == 0 else {"cont": True}
            entries.append(
                Entry(
                    body,
                    f"rs:{index}" if len(bodies) == 1 else f"rs:{index}:{i}",
                    None,
                    sink.attach(meta),
                    where,
                )
            )
        if not bodies:
            sink.hold({"index": index, "record": item})
    if residual and isinstance(residual.get("usage"), dict):
        entries.append(
            Entry(
                ResponseReceived(
                    usage=usage_of(residual["usage"]),
                    model=str(residual.get("model") or "")[:1024],
                    response_id=str(residual.get("id") or "")[:256],
                ),
                "rs:usage",
                None,
                {"derived": True},
                "usage",
            )
        )
    sink.finish(entries, key="rs:records", time=None, where="document")
    if entries:
        entries[0].meta = {"doc": residual, **entries[0].meta} if residual else entries[0].meta
    return parsed


def _skip(source: str, exc: BadRecord) -> SkippedRecord:
    return SkippedRecord(source, exc.where, exc.field, exc.reason)


def restore_items(mapper: ItemMapper, group: list[Event]) -> list[tuple[object, Obj]]:
    """The items one event group holds, with their ``index`` (see `positioned`)."""
    event = group[0]
    meta = event.meta
    body = event.body
    if "records" in meta and isinstance(body, AssistantMessageAdded):
        parts = list(body.parts)
        return [(r.get("index"), mapper.fill_model(r["raw"], parts)) for r in meta["records"]]
    if isinstance(meta.get("raw"), dict):
        return [(meta.get("index"), mapper.fill_input(meta["raw"], [e.body for e in group]))]
    return [(None, item) for e in group for item in mapper.items_of(e.body)]


def export(view: ExportSession) -> bytes:
    """The session as a Responses item list (or the request/response body it came from)."""
    mapper = ItemMapper()
    items = [
        item
        for _, _, item in positioned(
            view.events, lambda group: restore_items(mapper, group), at="index"
        )
    ]
    doc: Any = items
    first = view.events[0].meta if view.events else {}
    residual = first.get("doc")
    if isinstance(residual, dict):
        doc = dict(residual)
        doc[doc.pop("$items", "input")] = items
    elif view.events:
        system = [
            e.body
            for e in view.events
            if isinstance(e.body, SystemSectionSet) and e.body.text and not e.meta
        ]
        tools = [e.body for e in view.events if isinstance(e.body, ToolsSet) and not e.meta]
        if system or tools:
            doc = {"input": items}
            if system:
                doc["instructions"] = "\n\n".join(s.text for s in system)
            if tools:
                doc["tools"] = [
                    {
                        "type": "custom",
                        "name": t.name,
                        "description": t.description,
                        "format": decode_or_text(t.parameters),
                    }
                    if t.freeform
                    else {
                        "type": "function",
                        "name": t.name,
                        "description": t.description,
                        "parameters": decode_or_text(t.parameters),
                        **({"strict": True} if t.strict else {}),
                    }
                    for t in tools[-1].tools
                ]
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


#: This module's transcript format, as the registry (`_transcripts._REGISTRY`) lists it.
FORMAT = Format(NAME, parse, export, aliases=(OLD_NAME,))

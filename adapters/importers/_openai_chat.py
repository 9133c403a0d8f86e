"""OpenAI Chat Completions message lists, and the message mapping that
mini-swe-agent and SWE-agent trajectories share.

Theory of operation
-------------------
Each message maps to events by role: ``user`` to one ``UserMessageAdded`` per
content part (a string content is one part), ``assistant`` to one
``AssistantMessageAdded`` (text, ``tool_calls`` as ``ToolCall`` parts with
their ``arguments`` text as given, a ``reasoning_content``/``reasoning``
string as a ``ReasoningPart`` that is derived, so the field stays in meta),
``tool`` to a ``ToolResultAdded`` (tool name from the call with the same id),
and ``system``/``developer`` messages before the first user message to system
sections (later ones to notifications; see `openai_responses.Sections`).
Every other field of a message stays in its meta residual.

A file is a JSON list of messages or a request body ``{"messages": [...],
"tools": [...], ...}`` (the tools become a derived ``ToolsSet``; the other
fields stay in the first event's meta).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    Event,
    ImagePart,
    NotificationAdded,
    Part,
    ReasoningPart,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolsSet,
    UserMessageAdded,
)

from ._openai_responses import Sections, tools_set
from ._plan import (
    BadRecord,
    Entry,
    ExportSession,
    Format,
    Obj,
    Parsed,
    Plan,
    RecordSink,
    SkippedRecord,
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
    "MessageMapper",
    "Messages",
    "NAME",
    "OLD_NAME",
    "export",
    "export_messages",
    "parse",
    "parse_messages",
]

NAME = "openai-chat"
#: The spelling of `NAME` before it took the provider's (still accepted; see `Format`).
OLD_NAME = "openai_chat"


class MessageMapper:
    """Maps chat messages to payloads and back; remembers tool names by call id."""

    def __init__(self) -> None:
        self.tools: dict[str, str] = {}
        self.classify = Sections()

    def message(self, msg: Obj, where: str) -> tuple[list[Body], Obj] | None:
        """The payloads of one message and its residual; None for a message of an
        unknown role (kept whole in meta)."""
        role = msg.get("role")
        if role == "assistant":
            return self._assistant(msg, where)
        if role in ("tool", "function"):
            return self._tool(msg, where, str(role))
        if role in ("user", "system", "developer"):
            return self._parts(msg, where, str(role))
        if not isinstance(role, str):
            raise BadRecord(where, "role", f"expected a string, found {kind_of(role)}")
        return None

    def _parts(self, msg: Obj, where: str, role: str) -> tuple[list[Body], Obj]:
        content = msg.get("content")
        if isinstance(content, str):
            return [self.classify(role, content)], without(msg, "content")
        blocks = get_list(msg, "content", where, "content", optional=True)
        bodies: list[Body] = []
        rest: list[Any] = []
        for i, block in enumerate(blocks):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                bodies.append(
                    self.classify(role, get_str(block, "text", where, f"content[{i}].text"))
                )
                rest.append(without(block, "text"))
            elif kind == "image_url" and role == "user":
                image = block.get("image_url")
                url = image.get("url") if isinstance(image, dict) else image
                if not isinstance(url, str):
                    rest.append(block)
                    continue
                media = (
                    url[5 : url.index(";")] if url.startswith("data:") and ";" in url else "image/*"
                )
                bodies.append(
                    UserMessageAdded(text="", images=(ImagePart(media_type=media[:1024], url=url),))
                )
                rest.append(
                    {**block, "image_url": without(image, "url")}
                    if isinstance(image, dict)
                    else without(block, "image_url")
                )
            else:
                rest.append(block)
        residual = dict(msg)
        if "content" in msg:
            residual["content"] = rest
        return bodies, residual

    def _assistant(self, msg: Obj, where: str) -> tuple[list[Body], Obj]:
        parts: list[Part] = []
        residual = dict(msg)
        for field in ("reasoning_content", "reasoning"):
            if isinstance(msg.get(field), str) and msg[field]:
                parts.append(ReasoningPart(text=msg[field]))  # derived: stays in meta
                break
        content = msg.get("content")
        if isinstance(content, str):
            parts.append(TextPart(text=content))
            del residual["content"]
        elif isinstance(content, list):
            rest: list[Any] = []
            for i, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "text":
                    parts.append(TextPart(text=get_str(block, "text", where, f"content[{i}].text")))
                    rest.append(without(block, "text"))
                else:
                    rest.append(block)
            residual["content"] = rest
        calls = get_list(msg, "tool_calls", where, "tool_calls", optional=True)
        if calls:
            rest_calls: list[Any] = []
            for i, call in enumerate(calls):
                path = f"tool_calls[{i}]"
                if not isinstance(call, dict):
                    raise BadRecord(where, path, f"expected an object, found {kind_of(call)}")
                function = call.get("function")
                if not isinstance(function, dict):
                    raise BadRecord(
                        where, f"{path}.function", f"expected an object, found {kind_of(function)}"
                    )
                ident = get_str(call, "id", where, f"{path}.id")
                if not ident:
                    raise BadRecord(where, f"{path}.id", "expected a non-empty call id")
                name = get_str(function, "name", where, f"{path}.function.name")
                arguments = function.get("arguments")
                moved = isinstance(arguments, str)
                text = arguments if isinstance(arguments, str) else dumps_sorted(arguments)
                parts.append(ToolCall(id=ident[:256], name=name[:1024], arguments=text))
                self.tools[ident] = name
                rest_function = (
                    without(function, "name", "arguments") if moved else without(function, "name")
                )
                rest_calls.append({**without(call, "id"), "function": rest_function})
            residual["tool_calls"] = rest_calls
        return [AssistantMessageAdded(parts=tuple(parts))], residual

    def _tool(self, msg: Obj, where: str, role: str) -> tuple[list[Body], Obj]:
        residual = dict(msg)
        call = msg.get("tool_call_id")
        if isinstance(call, str) and call:
            del residual["tool_call_id"]
        else:
            ids = msg.get("tool_call_ids")
            call = ids[0] if isinstance(ids, list) and ids and isinstance(ids[0], str) else ""
            if not call and role == "tool":
                raise BadRecord(
                    where, "tool_call_id", "expected the id of the call this result answers"
                )
            call = call or f"function:{msg.get('name', '')}"
        content = msg.get("content")
        if isinstance(content, str):
            output = content
            del residual["content"]
        elif isinstance(content, list):
            output = "\n".join(
                str(b.get("text"))
                for b in content
                if isinstance(b, dict) and isinstance(b.get("text"), str)
            )
        elif content is None:
            output = ""
        else:
            raise BadRecord(
                where, "content", f"expected a string or a list of parts, found {kind_of(content)}"
            )
        name = self.tools.get(call) or str(msg.get("name") or "")
        return [ToolResultAdded(call_id=call[:256], tool_name=name[:1024], output=output)], residual

    # -- export ----------------------------------------------------------------------------------
    @staticmethod
    def fill(residual: Obj, bodies: list[Body]) -> Obj:
        """The message back from its residual and its payloads."""
        msg = copy.deepcopy(residual)
        role = msg.get("role")
        if role == "assistant":
            body = bodies[0] if bodies else None
            parts = (
                [p for p in body.parts if not isinstance(p, ReasoningPart)]
                if isinstance(body, AssistantMessageAdded)
                else []
            )
            texts = [p for p in parts if isinstance(p, TextPart)]
            calls = [p for p in parts if isinstance(p, ToolCall)]
            if "content" not in msg and texts:
                msg["content"] = texts.pop(0).text
            elif isinstance(msg.get("content"), list):
                for i, block in enumerate(msg["content"]):
                    if (
                        isinstance(block, dict)
                        and block.get("type") == "text"
                        and "text" not in block
                        and texts
                    ):
                        msg["content"][i] = {**block, "text": texts.pop(0).text}
            for i, call in enumerate(msg.get("tool_calls") or ()):
                if isinstance(call, dict) and "id" not in call and calls:
                    part = calls.pop(0)
                    function = dict(call.get("function") or {})
                    function["name"] = part.name
                    if "arguments" not in function:
                        function["arguments"] = part.arguments
                    msg["tool_calls"][i] = {"id": part.id, **call, "function": function}
            return msg
        if role in ("tool", "function"):
            body = bodies[0] if bodies else None
            if isinstance(body, ToolResultAdded):
                if "tool_call_id" not in msg and "tool_call_ids" not in msg and role == "tool":
                    msg["tool_call_id"] = body.call_id
                if "content" not in msg:
                    msg["content"] = body.output
            return msg
        pending = list(bodies)
        if "content" not in msg:
            if pending:
                msg["content"] = text_of(pending[0])
            return msg
        for i, block in enumerate(msg["content"] if isinstance(msg["content"], list) else ()):
            if not isinstance(block, dict) or not pending:
                continue
            if block.get("type") == "text" and "text" not in block:
                msg["content"][i] = {**block, "text": text_of(pending.pop(0))}
            elif block.get("type") == "image_url" and (
                "image_url" not in block
                or (isinstance(block["image_url"], dict) and "url" not in block["image_url"])
            ):
                body = pending.pop(0)
                url = (
                    body.images[0].url if isinstance(body, UserMessageAdded) and body.images else ""
                )
                image = block.get("image_url")
                msg["content"][i] = {
                    **block,
                    "image_url": {**image, "url": url} if isinstance(image, dict) else url,
                }
        return msg

    @staticmethod
    def native(body: Body) -> list[Obj]:
        """Messages for an event that was not imported (empty for kinds the format lacks)."""
        if isinstance(body, UserMessageAdded):
            if not body.images:
                return [{"role": "user", "content": body.text}]
            content: list[Obj] = [{"type": "text", "text": body.text}] if body.text else []
            content += [
                {"type": "image_url", "image_url": {"url": image.url}}
                for image in body.images
                if image.url
            ]
            return [{"role": "user", "content": content}]
        if isinstance(body, SystemSectionSet) and body.text:
            return [{"role": "system", "content": body.text}]
        if isinstance(body, NotificationAdded):
            return [{"role": "user", "content": body.text}]
        if isinstance(body, AssistantMessageAdded):
            msg: Obj = {
                "role": "assistant",
                "content": "".join(p.text for p in body.parts if isinstance(p, TextPart)) or None,
            }
            calls = [
                {
                    "id": p.id,
                    "type": "function",
                    "function": {"name": p.name, "arguments": p.arguments},
                }
                for p in body.parts
                if isinstance(p, ToolCall)
            ]
            if calls:
                msg["tool_calls"] = calls
            return [msg]
        if isinstance(body, ToolResultAdded):
            return [{"role": "tool", "tool_call_id": body.call_id, "content": body.output}]
        return []


@dataclass
class Messages:
    """How one format keys and extends the events of a message list.

    Attributes:
        prefix: idempotency key prefix (``oc``, ``ms``, ``sw``).
        path: the list's name in messages (``messages``, ``history``).
        extra: derives more entries from a message (usage records): returns
            ``(payload, key suffix)`` pairs appended after the message's events.
        amend: adjusts a message's payloads (e.g. model and response id).
    """

    prefix: str
    path: str
    extra: Callable[[Obj], list[tuple[Body, str]]] | None = None
    amend: Callable[[Obj, Body], Body] | None = None


def parse_messages(
    messages: list[Any],
    spec: Messages,
    source: str,
    skip_bad: bool,
    parsed: Parsed,
    entries: list[Entry],
    *,
    time: int | None = None,
) -> None:
    """Append the entries of a chat message list to ``entries``."""
    mapper = MessageMapper()
    sink = RecordSink(parsed.format)
    for index, msg in enumerate(messages):
        where = f"{spec.path}[{index}]"
        try:
            if not isinstance(msg, dict):
                raise BadRecord(where, "", f"expected a message object, found {kind_of(msg)}")
            mapped = mapper.message(msg, where)
        except BadRecord as exc:
            if not skip_bad:
                raise
            parsed.skipped.append(SkippedRecord(source, exc.where, exc.field, exc.reason))
            sink.hold({"index": index, "record": msg})
            continue
        if mapped is None or not mapped[0]:
            sink.hold({"index": index, "record": msg})
            continue
        bodies, residual = mapped
        key = f"{spec.prefix}:{index}"
        for i, mapped_body in enumerate(bodies):
            body = spec.amend(msg, mapped_body) if spec.amend is not None else mapped_body
            meta: Obj = {"index": index, "raw": residual} if i == 0 else {"cont": True}
            entries.append(
                Entry(
                    body, key if len(bodies) == 1 else f"{key}:{i}", time, sink.attach(meta), where
                )
            )
        for body, suffix in spec.extra(msg) if spec.extra is not None else ():
            entries.append(Entry(body, f"{key}:{suffix}", time, {"derived": True}, where))
    sink.finish(entries, key=f"{spec.prefix}:records", time=time, where=spec.path)


def export_messages(events: list[Event]) -> list[Obj]:
    """The message list a session's events hold, in source order."""

    def own(group: list[Event]) -> list[tuple[object, Obj]]:
        meta = group[0].meta
        if isinstance(meta.get("raw"), dict):
            return [(meta.get("index"), MessageMapper.fill(meta["raw"], [e.body for e in group]))]
        return [(None, msg) for e in group for msg in MessageMapper.native(e.body)]

    return [record for _, _, record in positioned(events, own, at="index")]


# -- the openai_chat format ----------------------------------------------------------------
def parse(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map a Chat Completions message list (or request body) to one plan.

    Raises:
        BadRecord: a malformed message (unless ``skip_bad``).
    """
    doc = load_document(data)
    plan = Plan(natural=natural_id(source, data))
    parsed = Parsed(format=NAME, plans=[plan])
    entries: list[Entry] = []
    residual: Obj = {}
    if isinstance(doc, dict):
        messages = get_list(doc, "messages", "document", "messages")
        residual = without(doc, "messages")
        tools = tools_set(residual.get("tools") or [])
        if tools is not None:
            entries.append(Entry(tools, "oc:tools", None, {"derived": True}, "tools"))
    elif isinstance(doc, list):
        messages = doc
    else:
        raise BadRecord(
            "document", "", f"expected an array of messages or an object, found {kind_of(doc)}"
        )
    parse_messages(messages, Messages("oc", "messages"), source, skip_bad, parsed, entries)
    if entries and residual:
        entries[0].meta = {"doc": residual, **entries[0].meta}
    plan.entries = list(entries)
    return parsed


def export(view: ExportSession) -> bytes:
    """The session as a message list (or the request body it came from)."""
    messages = export_messages(view.events)
    doc: Any = messages
    residual = view.events[0].meta.get("doc") if view.events else None
    if isinstance(residual, dict):
        doc = {**residual, "messages": messages}
    else:
        tools = [e.body for e in view.events if isinstance(e.body, ToolsSet) and not e.meta]
        if tools:
            doc = {
                "messages": messages,
                "tools": [
                    {
                        "type": "custom",
                        "custom": {
                            "name": t.name,
                            "description": t.description,
                            "format": decode_or_text(t.parameters),
                        },
                    }
                    if t.freeform
                    else {
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": decode_or_text(t.parameters),
                            **({"strict": True} if t.strict else {}),
                        },
                    }
                    for t in tools[-1].tools
                ],
            }
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


#: This module's transcript format, as the registry (`_transcripts._REGISTRY`) lists it.
FORMAT = Format(NAME, parse, export, aliases=(OLD_NAME,))

"""LangChain chat history on a turnlog session (``pip install 'turnlog[langchain]'``).

Theory of operation
-------------------
`TurnlogChatMessageHistory` implements LangChain's ``BaseChatMessageHistory``
over one session of a log. ``add_messages`` appends one event per message,
as one atomic batch:

=================  ==========================================================
LangChain          turnlog event
=================  ==========================================================
``HumanMessage``   ``UserMessageAdded`` (text blocks joined, ``image_url``
                   blocks as ``ImagePart`` URLs)
``AIMessage``      ``AssistantMessageAdded``: text (and thinking blocks) as
                   parts, a ``compaction`` block (Anthropic's, or a Responses
                   compaction item) as a ``NativePart`` holding it byte for
                   byte, each ``tool_calls`` entry as a ``ToolCall`` part
                   (``args`` as JSON text); the first one after a request
                   recorded by `packed_messages` also gets a
                   ``ResponseReceived`` for it (usage from ``usage_metadata``)
``ToolMessage``    ``ToolResultAdded`` (``status="error"`` → ``is_error``; the
                   tool name from the message, else from the call it answers)
``SystemMessage``  ``SystemSectionSet`` named ``langchain.N`` (N counts the
                   system messages of the session), so it is packed as system
                   prompt
other kinds        ``NotificationAdded`` (source: the message type or role)
=================  ==========================================================

What the event cannot hold (ids, names, ``additional_kwargs``,
``response_metadata``, ``usage_metadata``, block-list content, tool-call ids
the event had to make up, an artifact that is JSON) goes to the event's
``meta["langchain"]``, so `messages` gives back equal messages: the history
is lossless for human, AI, tool and system messages, tool calls included. A
value that is not JSON (an artifact object) is not kept. Events appended by
other means (the `Session` facade, an importer) read back as the closest
message: notifications and recall results as ``HumanMessage`` text as the
model sees it, system sections as ``SystemMessage`` where they were set.

A log never deletes. `clear` appends ``SessionRewound(to_seq=-1)``: every
earlier event leaves the session's view (messages, system sections, tools,
the policy in force), stays in the log and can still be replayed and
explained; `messages` is empty until new messages are added. Setting
``messages`` is a `clear` plus `add_messages`, in one batch.

`packed_messages` packs the session under a policy (budget, truncation,
dedup, pruning, summaries, trimming) and returns the prompt as LangChain
messages: one ``SystemMessage`` with the sections joined by a blank line,
then the packed conversation, with calls still open at the end of a run of
results answered by a placeholder as every provider requires. With
``record=True`` (the default) the request is recorded first (``RequestIssued``,
format ``neutral``), so it can be replayed and explained like any other.

Writes go through `Log.update`, the kernel's one rule for writers that
decide from what is stored: read the head, build the events, append with
``expected_seq``, and on a conflict with another writer wait, re-read and
rebuild (tool names, system section numbers), up to ``attempts`` times.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import blake3
import msgspec
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)
from turnlog import Draft, Log, Packer, Policy, Replayer
from turnlog.errors import InvalidEventError
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    Event,
    ImagePart,
    NativePart,
    NotificationAdded,
    Part,
    ReasoningPart,
    RecallAdded,
    ResponseReceived,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    Usage,
    UserMessageAdded,
)
from turnlog.log import Head
from turnlog.packing import Message, Projection, Prompt, notification_text, recall_text

from ..providers import MISSING_RESULT_TEXT

__all__ = ["META_KEY", "TurnlogChatMessageHistory", "prompt_messages"]

#: The ``meta`` key holding what an event cannot (see the module docstring).
META_KEY = "langchain"

_DEFAULT_POLICY = Policy()
_SYSTEM_PREFIX = "langchain."


class TurnlogChatMessageHistory(BaseChatMessageHistory):
    """LangChain chat history kept in a turnlog session (see the module docstring).

    Parameters:
        log: the log.
        session_id: the session (created by the first message).
        policy: the policy `packed_messages` uses by default (the one in force when None).
        packer: a packer to share (one per log is best).
        clock: called for event times (microseconds since the epoch); none when None.
        attempts: tries per write when other writers keep moving the head.
    """

    def __init__(
        self,
        log: Log,
        session_id: str,
        *,
        policy: Policy | None = None,
        packer: Packer | None = None,
        clock: Callable[[], int] | None = None,
        attempts: int = 8,
    ) -> None:
        super().__init__()
        self.log = log
        self.session_id = session_id
        self.policy = policy
        self.packer = packer if packer is not None else Packer(log)
        self.replayer = Replayer(self.packer)
        self._clock = clock
        self._attempts = attempts
        self._lock = threading.RLock()
        self._request: int | None = None  # recorded by packed_messages, not yet answered

    # -- BaseChatMessageHistory -----------------------------------------------------------
    @property
    def messages(self) -> list[BaseMessage]:
        """The session's history as LangChain messages, oldest first (rewinds honoured)."""
        with self._lock:
            if self.log.head(self.session_id) is None:
                return []
            return [m for e in _visible(self._view()) if (m := self._to_message(e)) is not None]

    @messages.setter
    def messages(self, messages: Sequence[BaseMessage]) -> None:
        """Replace the history: `clear` and `add_messages` in one atomic batch."""
        self._append(messages, clear=True)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append messages as events, in one atomic batch (see the module docstring).

        Raises:
            InvalidEventError: a ``RemoveMessage`` (a log never deletes: use `clear`),
                or a message that does not fit the event schema.
        """
        self._append(messages, clear=False)

    #: When set, `clear` also erases the content of the session's events with this
    #: reason (`Log.erase`, docs/erasure.md): nothing of it is left in the store.
    erase_reason: str | None = None

    def clear(self) -> None:
        """Empty the view: append ``SessionRewound(to_seq=-1)`` (nothing is deleted,
        unless `erase_reason` is set: then the content is erased too).

        System sections, tools and the policy leave the view too; the next recorded
        request appends the policy again.
        """
        with self._lock:
            head = self.log.head(self.session_id)
            if head is None:
                return
            if _visible(self._view()):
                self.log.append(
                    self.session_id,
                    Draft(body=SessionRewound(to_seq=-1, reason="clear"), time=self._time()),
                )
                self._request = None
            if self.erase_reason is not None:
                self.log.erase(self.session_id, reason=self.erase_reason, time=self._time())

    # -- packing -----------------------------------------------------------------------------
    def packed_messages(
        self,
        policy: Policy | None = None,
        *,
        record: bool = True,
        model: str = "",
        time: int | None = None,
        key: str | None = None,
    ) -> list[BaseMessage]:
        """The packed, budgeted prompt for the next model call, as LangChain messages.

        Parameters:
            policy: the packing policy (this history's when None, else the one in force).
            record: record the request (``RequestIssued``) before returning it; the
                next ``AIMessage`` added with ``usage_metadata`` is recorded as its
                response.
            model: the model the request goes to (recorded).
            time: the record's time (else the clock's).
            key: idempotency key of the request record.

        Raises:
            UnknownSessionError: the session has no events.
            BudgetExceededError: the mandatory tail does not fit the policy's window.
        """
        with self._lock:
            policy = policy or self.policy
            if record:
                recorded = self.replayer.record(
                    self.session_id,
                    policy=policy,
                    model=model,
                    time=time if time is not None else self._time(),
                    key=key,
                )
                self._request = recorded.request_seq
                prompt = recorded.packed.prompt
            else:
                prompt = self.packer.pack(self.session_id, policy=policy, explain=False).prompt
            return prompt_messages(prompt, blobs=self.log.blob)

    # -- internals ---------------------------------------------------------------------------
    def _time(self) -> int | None:
        return self._clock() if self._clock is not None else None

    def _view(self) -> Projection:
        policy = self.policy or self.packer.policy_in_force(self.session_id) or _DEFAULT_POLICY
        return self.packer.projection(self.session_id, self.packer.counter_for(policy))

    def _append(self, messages: Sequence[BaseMessage], *, clear: bool) -> None:
        messages = list(messages)
        for i, message in enumerate(messages):
            if isinstance(message, RemoveMessage) or not isinstance(message, BaseMessage):
                raise InvalidEventError(
                    f"message {i}: expected a LangChain message, found {type(message).__name__}"
                    "; a log never deletes: use clear() to empty the history"
                )
        with self._lock:
            time = self._time()
            appended: list[tuple[Body, dict[str, Any]]] = []

            def decide(head: Head | None) -> list[Draft]:
                view = self._view() if head is not None else None
                appended[:] = self._bodies(messages, view, clear=clear)
                return [Draft(body=b, time=time, meta=m) for b, m in appended]

            if self.log.update(self.session_id, decide, attempts=self._attempts) is None:
                return
            if any(isinstance(b, ResponseReceived) for b, _ in appended) or clear:
                self._request = None

    def _bodies(
        self, messages: list[BaseMessage], view: Projection | None, *, clear: bool
    ) -> list[tuple[Body, dict[str, Any]]]:
        events = [] if view is None or clear else _visible(view)
        calls: dict[str, str] = {}
        systems = 0
        for event in events:
            body = event.body
            if isinstance(body, AssistantMessageAdded):
                calls.update((p.id, p.name) for p in body.parts if isinstance(p, ToolCall))
            elif isinstance(body, SystemSectionSet) and body.name.startswith(_SYSTEM_PREFIX):
                systems += 1
        out: list[tuple[Body, dict[str, Any]]] = []
        if clear and view is not None:
            out.append((SessionRewound(to_seq=-1, reason="clear"), {}))
        request = None if clear else self._request
        for message in messages:
            body, residual = _to_body(message, calls, systems)
            out.append((body, {META_KEY: residual}))
            if isinstance(body, AssistantMessageAdded):
                calls.update((p.id, p.name) for p in body.parts if isinstance(p, ToolCall))
                if request is not None and isinstance(message, AIMessage):
                    out.append((_response(message, request), {}))
                    request = None
            elif isinstance(body, SystemSectionSet):
                systems += 1
        return out

    def _to_message(self, event: Event) -> BaseMessage | None:
        body = event.body
        residual = event.meta.get(META_KEY)
        if isinstance(residual, dict):
            return _from_residual(body, residual, self.log)
        if isinstance(body, UserMessageAdded):
            text = _full_text(self.log, body.text, body.blob)
            if not body.images:
                return HumanMessage(content=text, name=body.name or None)
            blocks: list[str | dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            blocks += [_image_block(p, self.log.blob) for p in body.images]
            return HumanMessage(content=blocks, name=body.name or None)
        if isinstance(body, AssistantMessageAdded):
            return _ai_message(body.parts, name=None)
        if isinstance(body, ToolResultAdded):
            return ToolMessage(
                content=_full_text(self.log, body.output, body.blob),
                tool_call_id=body.call_id,
                name=body.tool_name or None,
                status="error" if body.is_error else "success",
            )
        if isinstance(body, NotificationAdded):
            text = _full_text(self.log, body.text, body.blob)
            return HumanMessage(content=notification_text(body.source, text))
        if isinstance(body, RecallAdded):
            return HumanMessage(content=recall_text(body, len(body.hits)))
        if isinstance(body, SystemSectionSet) and body.text:
            return SystemMessage(content=body.text)
        return None


# -- prompt -> messages -------------------------------------------------------------------------
def prompt_messages(
    prompt: Prompt, *, blobs: Callable[[Any], bytes] | None = None
) -> list[BaseMessage]:
    """A packed prompt as LangChain messages (system sections joined into one
    ``SystemMessage``; calls left open by a final run of results answered with
    the missing-result placeholder; reasoning is not sent).

    Parameters:
        blobs: reads images stored as blobs (``Log.blob``); without it such images
            become a short text note.
    """
    out: list[BaseMessage] = []
    if prompt.system:
        out.append(SystemMessage(content="\n\n".join(s.text for s in prompt.system)))
    messages = list(prompt.messages)
    for message in messages:
        if message.role == "user":
            out.append(_user_message(message, blobs))
        elif message.role == "assistant":
            out.append(_ai_message(message.parts, name=None))
        else:
            out.append(
                ToolMessage(
                    content=message.text,
                    tool_call_id=message.tool_call_id,
                    name=message.name or None,
                    status="error" if message.is_error else "success",
                )
            )
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    if 0 <= last < len(messages) - 1 and all(m.role == "tool" for m in messages[last + 1 :]):
        answered = {m.tool_call_id for m in messages[last + 1 :]}
        out += [
            ToolMessage(content=MISSING_RESULT_TEXT, tool_call_id=c.id, name=c.name, status="error")
            for c in messages[last].tool_calls
            if c.id not in answered
        ]
    return out


def _user_message(message: Message, blobs: Callable[[Any], bytes] | None) -> HumanMessage:
    if all(isinstance(p, TextPart) for p in message.parts):
        return HumanMessage(content=message.text)
    blocks: list[str | dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append(_image_block(part, blobs))
    return HumanMessage(content=blocks)


def _image_block(part: ImagePart, blobs: Callable[[Any], bytes] | None) -> dict[str, Any]:
    url = part.url
    if part.blob is not None and blobs is not None:
        url = f"data:{part.media_type};base64,{base64.b64encode(blobs(part.blob)).decode()}"
    if not url:
        return {"type": "text", "text": f"[image {part.media_type} not available]"}
    return {"type": "image_url", "image_url": {"url": url}}


def _ai_message(parts: Sequence[Part], *, name: str | None) -> AIMessage:
    text = "".join(p.text for p in parts if isinstance(p, TextPart))
    tool_calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, ToolCall):
            continue
        try:
            args = json.loads(part.arguments or "{}")
        except (ValueError, RecursionError):
            args = None
        if isinstance(args, dict):
            tool_calls.append({"name": part.name, "args": args, "id": part.id, "type": "tool_call"})
        else:
            invalid.append(
                {
                    "name": part.name,
                    "args": part.arguments,
                    "id": part.id,
                    "error": "arguments are not a JSON object",
                    "type": "invalid_tool_call",
                }
            )
    content: str | list[str | dict[str, Any]] = text
    if any(isinstance(p, NativePart) for p in parts):  # a provider's own item, unchanged
        blocks: list[str | dict[str, Any]] = []
        for part in parts:
            if isinstance(part, NativePart):
                blocks.append(msgspec.json.decode(part.data))
            elif isinstance(part, TextPart) and part.text:
                blocks.append({"type": "text", "text": part.text})
        content = blocks
    return AIMessage(content=content, tool_calls=tool_calls, invalid_tool_calls=invalid, name=name)


# -- messages -> events -------------------------------------------------------------------------
def _dump(message: BaseMessage) -> dict[str, Any]:
    """The message's fields that differ from their defaults, as JSON values."""
    try:
        data: dict[str, Any] = message.model_dump(mode="json", exclude_defaults=True)
    except (ValueError, TypeError):  # a field that is not JSON (an artifact object)
        data = {}
        for field in type(message).model_fields:
            try:
                data.update(message.model_dump(mode="json", exclude_defaults=True, include={field}))
            except (ValueError, TypeError):
                continue
    data["type"] = message.type
    return data


def _text_of(content: str | list[str | dict[str, Any]]) -> str:
    if isinstance(content, str):
        return content
    texts = [
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str) or b.get("type") == "text"
    ]
    return "\n".join(texts)


def _images(content: str | list[str | dict[str, Any]]) -> tuple[ImagePart, ...]:
    if isinstance(content, str):
        return ()
    out: list[ImagePart] = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "image_url":
            continue
        ref = block.get("image_url")
        url = ref.get("url") if isinstance(ref, dict) else ref
        if isinstance(url, str) and url:
            media = url[5 : url.index(";")] if url.startswith("data:") and ";" in url else "image/*"
            out.append(ImagePart(media_type=media[:1024], url=url))
    return tuple(out)


def _to_body(
    message: BaseMessage, calls: dict[str, str], systems: int
) -> tuple[Body, dict[str, Any]]:
    residual = _dump(message)
    content = message.content
    if isinstance(content, str):
        residual.pop("content", None)
    if isinstance(message, HumanMessage):
        return UserMessageAdded(text=_text_of(content), images=_images(content)), residual
    if isinstance(message, AIMessage):
        parts: list[Part] = []
        if isinstance(content, str):
            if content:
                parts.append(TextPart(text=content))
        else:
            for block in content:
                if isinstance(block, str):
                    parts.append(TextPart(text=block))
                elif block.get("type") == "text":
                    parts.append(TextPart(text=str(block.get("text", ""))))
                elif block.get("type") == "thinking":
                    parts.append(
                        ReasoningPart(
                            text=str(block.get("thinking", "")),
                            opaque=str(block.get("signature", "")),
                            provider="anthropic",
                        )
                    )
                elif block.get("type") == "compaction":
                    parts.append(_native(block))
            if any(isinstance(p, NativePart) for p in parts):  # held once, in the event
                residual["content"] = [
                    _COMPACTION_STUB if isinstance(b, dict) and b.get("type") == "compaction" else b
                    for b in content
                ]
        exact = all(c.get("id") for c in message.tool_calls) and not message.invalid_tool_calls
        for i, call in enumerate(message.tool_calls):
            arguments = json.dumps(call["args"], ensure_ascii=False)
            parts.append(
                ToolCall(
                    id=call.get("id") or _made_up_id(message, i),
                    name=call["name"],
                    arguments=arguments,
                )
            )
        for i, bad in enumerate(message.invalid_tool_calls):
            parts.append(
                ToolCall(
                    id=bad.get("id") or _made_up_id(message, 1000 + i),
                    name=bad.get("name") or "unknown",
                    arguments=bad.get("args") or "{}",
                )
            )
        if exact:
            residual.pop("tool_calls", None)
        else:  # the parts hold made-up ids or invalid calls: keep the list as it was
            residual["tool_calls"] = message.model_dump(mode="json", include={"tool_calls"})[
                "tool_calls"
            ]
        return AssistantMessageAdded(parts=tuple(parts)), residual
    if isinstance(message, ToolMessage):
        residual.pop("tool_call_id", None)
        name = message.name or calls.get(message.tool_call_id, "")
        return ToolResultAdded(
            call_id=message.tool_call_id,
            tool_name=name,
            output=content
            if isinstance(content, str)
            else _text_of(content) or json.dumps(content),
            is_error=message.status == "error",
        ), residual
    if isinstance(message, SystemMessage):
        return SystemSectionSet(name=f"{_SYSTEM_PREFIX}{systems}", text=_text_of(content)), residual
    source = str(getattr(message, "role", "") or message.type)
    return NotificationAdded(source=source, text=_text_of(content)), residual


#: What a message's residual content holds in place of a compaction block (its
#: `NativePart` holds the block whole).
_COMPACTION_STUB: dict[str, Any] = {"type": "compaction"}


def _native(block: dict[str, Any]) -> NativePart:
    """A ``compaction`` content block as the `NativePart` of the format that owns it: a
    Responses compaction item (langchain-openai) has its ``encrypted_content``, an
    Anthropic compaction block (langchain-anthropic) its ``content``."""
    try:
        data = msgspec.json.encode(block).decode()
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidEventError(
            f"an AIMessage's 'compaction' content block is not JSON ({e}); a provider's "
            "compaction is kept byte for byte as JSON text: pass the block as the "
            "provider's client gave it"
        ) from None
    if isinstance(block.get("encrypted_content"), str):
        return NativePart(format="openai-responses", item_type="compaction", data=data)
    summary = block.get("content")
    if "content" in block and (summary is None or isinstance(summary, str)):
        return NativePart(
            format="anthropic",
            item_type="compaction",
            data=data,
            text=summary if isinstance(summary, str) else "",
        )
    raise InvalidEventError(
        "an AIMessage's 'compaction' content block has neither an encrypted_content "
        "string (a Responses compaction item) nor a content string (an Anthropic "
        f"compaction block), found keys {sorted(block)}; nothing was appended. Pass the "
        "block as the provider's client gave it"
    )


def _made_up_id(message: BaseMessage, index: int) -> str:
    seed = f"{message.id}:{index}:{message.content!r}".encode("utf-8", "surrogatepass")
    return "lc_" + blake3.blake3(seed).hexdigest()[:24]


def _response(message: AIMessage, request_seq: int) -> ResponseReceived:
    usage = message.usage_metadata
    meta = message.response_metadata or {}
    stop = meta.get("finish_reason") or meta.get("stop_reason") or ""
    model = meta.get("model_name") or meta.get("model") or ""
    counts = Usage()
    if usage is not None:
        details = usage.get("input_token_details") or {}
        counts = Usage(
            input_tokens=max(0, usage["input_tokens"]),
            output_tokens=max(0, usage["output_tokens"]),
            cache_read_tokens=max(0, details.get("cache_read") or 0),
            cache_write_tokens=max(0, details.get("cache_creation") or 0),
        )
    return ResponseReceived(
        request_seq=request_seq, stop_reason=str(stop)[:1024], model=str(model)[:1024], usage=counts
    )


# -- events -> messages -------------------------------------------------------------------------
def _visible(view: Projection) -> list[Event]:
    """The lineage events still in the view (rewound ones and rewinds left out)."""
    return [
        e
        for pos, e in enumerate(view.events)
        if pos not in view.rewound and not isinstance(e.body, SessionRewound)
    ]


def _full_text(log: Log, text: str, blob: Any) -> str:
    if blob is None:
        return text
    return log.blob(blob).decode("utf-8", "replace")


def _native_block(part: NativePart | None, stub: Any) -> Any:
    if part is None:  # the block's part was erased (`Log.erase`): the stub stays
        return stub
    block: Any = msgspec.json.decode(part.data)
    return block


def _from_residual(body: Body, residual: dict[str, Any], log: Log) -> BaseMessage | None:
    data = dict(residual)
    kind = data.get("type", "")
    if "content" not in data:
        if isinstance(body, UserMessageAdded):
            data["content"] = _full_text(log, body.text, body.blob)
        elif isinstance(body, AssistantMessageAdded):
            data["content"] = "".join(p.text for p in body.parts if isinstance(p, TextPart))
        elif isinstance(body, ToolResultAdded):
            data["content"] = _full_text(log, body.output, body.blob)
        elif isinstance(body, NotificationAdded):
            data["content"] = _full_text(log, body.text, body.blob)
        elif isinstance(body, SystemSectionSet):
            data["content"] = body.text
        else:
            data["content"] = ""
    if isinstance(body, AssistantMessageAdded) and isinstance(data["content"], list):
        natives = iter(p for p in body.parts if isinstance(p, NativePart))
        data["content"] = [
            _native_block(next(natives, None), b) if b == _COMPACTION_STUB else b
            for b in data["content"]
        ]
    if isinstance(body, AssistantMessageAdded) and "tool_calls" not in data:
        data["tool_calls"] = [
            {"name": p.name, "args": json.loads(p.arguments), "id": p.id, "type": "tool_call"}
            for p in body.parts
            if isinstance(p, ToolCall)
        ]
    if isinstance(body, ToolResultAdded):
        data["tool_call_id"] = body.call_id
    return messages_from_dict([{"type": kind, "data": data}])[0]

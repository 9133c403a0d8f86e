"""OpenAI Agents SDK session memory on a turnlog session (``pip install 'turnlog[openai-agents]'``).

Theory of operation
-------------------
`TurnlogSession` implements the SDK's ``agents.memory.Session`` contract
(a ``SessionABC``: ``get_items``, ``add_items``, ``pop_item``,
``clear_session``, ``session_settings``, and ``close``) over one session of a
log; pass it as ``Runner.run(agent, input, session=...)``. Its
``session_settings`` is a ``SessionSettings`` (the default one when none is
given; a dict is normalized to one, and an unknown key raises ``TypeError``,
as the SDK's own sessions do). ``close()`` ends the object's use (the log
stays open: it is the caller's); a closed session refuses every method with
``RuntimeError``. The
SDK stores Responses input items; ``add_items`` appends them as events, in
one atomic batch:

=================================================  ==================================
item                                               event
=================================================  ==================================
``message`` from ``user``                          ``UserMessageAdded``
``message`` from ``system`` / ``developer``        ``NotificationAdded`` (source: role)
a run of model items: assistant ``message``,       one ``AssistantMessageAdded``: text,
``reasoning``, ``function_call``,                  ``ReasoningPart`` (``encrypted_content``
``custom_tool_call``, ``computer_call``,           as ``opaque``, the item id), a
``local_shell_call``, ``shell_call``,              ``ToolCall`` per call; built-in tool
``apply_patch_call``, built-in tool calls          calls without an output item (web or
                                                   file search...) as a short text note
``compaction`` (the provider's compaction, with    starts a new ``AssistantMessageAdded``
its ``encrypted_content``)                         and is its ``NativePart``: the item's
                                                   JSON text, kept byte for byte
``*_call_output``                                  ``ToolResultAdded`` (tool name from the
                                                   call)
anything else (``item_reference``...)              ``NotificationAdded`` naming the type
=================================================  ==================================

Each event keeps its items in ``meta["openai_agents"]`` (a user message's
text, a tool output's text and a compaction item only once, in the event), so
`get_items` gives
back exactly the items added, in order, large outputs included (read back
from their blobs). Events appended by other means read back as the items the
Responses importer/exporter gives them; one holding another API's own item (an
Anthropic ``compaction`` block) is refused with ``InvalidEventError`` naming it,
as the SDK would send it to a model that cannot read it.

A log never deletes. ``pop_item`` appends ``SessionRewound`` to just before
the event holding the last item and, when that event held several items,
appends the others again in the same atomic batch. ``clear_session``
appends ``SessionRewound(to_seq=-1)``. Rewound events (and the records after
them: requests, responses, the policy) leave the session's view but stay in
the log, replayable and explainable.

The SDK's methods are coroutines; the work runs in a worker thread
(``asyncio.to_thread``) under a lock. Writes go through `Log.update`
(the kernel's one rule for writers that decide from what is stored): read
the head, build the events, append with ``expected_seq``, and wait and
rebuild on a conflict with another writer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, cast

import blake3
import msgspec
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.memory import SessionABC, SessionSettings
from agents.memory.session_settings import coerce_session_settings
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.models.openai_responses import Converter
from agents.tool import FunctionTool, Tool
from agents.usage import Usage
from openai import APIStatusError
from openai.types.responses import Response, ResponseCompletedEvent
from openai.types.responses.response_prompt_param import ResponsePromptParam
from turnlog import Draft, Log, Packer, Policy
from turnlog.errors import InvalidArgumentError, InvalidEventError, KernelError
from turnlog.events import (
    AssistantMessageAdded,
    BlobRef,
    Body,
    Event,
    ImagePart,
    NativePart,
    NotificationAdded,
    Part,
    ReasoningPart,
    SessionRewound,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.log import Head
from turnlog.packing import Projection

from ..importers import ItemMapper
from ..session import AsyncSession, _tool_spec

__all__ = ["META_KEY", "TurnlogModel", "TurnlogSession"]

#: The ``meta`` key holding an event's items.
META_KEY = "openai_agents"

#: Calls answered by an output item (``KIND_output``).
_ANSWERED_CALLS = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "computer_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
    }
)
_DEFAULT_POLICY = Policy()

_Item = dict[str, Any]


class TurnlogSession(SessionABC):
    """The Agents SDK ``Session`` contract over a turnlog session (see the module docstring).

    Parameters:
        log: the log.
        session_id: the session (created by the first item).
        session_settings: the SDK's settings (``limit`` for `get_items`): a
            ``SessionSettings``, a dict of its fields, or None for the default.
        policy: the policy whose tokenizer the shared projection uses (packing and
            recording are the caller's, e.g. with `turnlog._packer.Packer`).
        packer: a packer to share (one per log is best).
        clock: called for event times (microseconds since the epoch); none when None.
        attempts: tries per write when other writers keep moving the head.
    """

    def __init__(
        self,
        log: Log,
        session_id: str,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        policy: Policy | None = None,
        packer: Packer | None = None,
        clock: Callable[[], int] | None = None,
        attempts: int = 8,
    ) -> None:
        self.log = log
        self.session_id = session_id
        self.session_settings: SessionSettings | None = (
            coerce_session_settings(
                dict(session_settings)
                if isinstance(session_settings, Mapping)
                else session_settings
            )
            if session_settings is not None
            else SessionSettings()
        )
        self.policy = policy
        self.packer = packer if packer is not None else Packer(log)
        self._clock = clock
        self._attempts = attempts
        self._lock = threading.RLock()
        self._closed = False

    def close(self) -> None:
        """End this object's use: later calls raise ``RuntimeError`` (the log stays open)."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                f"TurnlogSession {self.session_id!r} is closed; make a new "
                "TurnlogSession on the log to use the session again"
            )

    # -- the protocol --------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; the latest ``limit`` ones when given (else
        ``session_settings.limit``)."""
        self._check_open()
        items = await asyncio.to_thread(self.items)
        count = (
            limit
            if limit is not None
            else (self.session_settings.limit if self.session_settings is not None else None)
        )
        if count is not None:
            items = items[-count:] if count > 0 else []
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items as events, in one atomic batch."""
        self._check_open()
        await asyncio.to_thread(self.add, [dict(cast(Mapping[str, Any], i)) for i in items])

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the latest item out of the view and return it (None when empty)."""
        self._check_open()
        return cast("TResponseInputItem | None", await asyncio.to_thread(self.pop))

    async def clear_session(self) -> None:
        """Empty the view: ``SessionRewound(to_seq=-1)`` (nothing is deleted, unless
        `erase_reason` is set: then the content is erased too)."""
        self._check_open()
        await asyncio.to_thread(self.clear)

    # -- synchronous API ---------------------------------------------------------------------
    def items(self) -> list[dict[str, Any]]:
        """The session's items, oldest first (synchronous)."""
        self._check_open()
        with self._lock:
            if self.log.head(self.session_id) is None:
                return []
            return [item for event in _visible(self._view()) for item in self._items_of(event)]

    def add(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Append items (synchronous `add_items`)."""
        self._check_open()
        copies = [dict(i) for i in items]
        if copies:
            self._write(lambda view: _bodies(copies, _calls(view)))

    def pop(self) -> dict[str, Any] | None:
        """Take the latest item out of the view (synchronous `pop_item`)."""
        self._check_open()
        popped: list[dict[str, Any]] = []

        def build(view: Projection | None) -> list[tuple[Body, dict[str, Any]]]:
            popped.clear()
            if view is None:
                return []
            for pos in range(len(view.events) - 1, -1, -1):
                event = view.events[pos]
                if pos in view.rewound or isinstance(event.body, SessionRewound):
                    continue
                items = self._items_of(event)
                if not items:
                    continue
                popped.append(items[-1])
                out: list[tuple[Body, dict[str, Any]]] = [
                    (SessionRewound(to_seq=pos - 1, reason="pop_item"), {})
                ]
                if len(items) > 1:
                    out += _bodies(items[:-1], _calls(view))
                return out
            return []

        self._write(build)
        return popped[0] if popped else None

    #: When set, `clear_session` also erases the content of the session's events with
    #: this reason (`Log.erase`, docs/erasure.md): nothing of it is left in the store.
    erase_reason: str | None = None

    def clear(self) -> None:
        """Empty the view (synchronous `clear_session`)."""
        self._check_open()

        def build(view: Projection | None) -> list[tuple[Body, dict[str, Any]]]:
            if view is None or not _visible(view):
                return []
            return [(SessionRewound(to_seq=-1, reason="clear_session"), {})]

        self._write(build)
        if self.erase_reason is not None and self.log.head(self.session_id) is not None:
            self.log.erase(self.session_id, reason=self.erase_reason)

    # -- internals ---------------------------------------------------------------------------
    def _view(self) -> Projection:
        policy = self.policy or self.packer.policy_in_force(self.session_id) or _DEFAULT_POLICY
        return self.packer.projection(self.session_id, self.packer.counter_for(policy))

    def _write(
        self, build: Callable[[Projection | None], list[tuple[Body, dict[str, Any]]]]
    ) -> None:
        with self._lock:
            time = self._clock() if self._clock is not None else None

            def decide(head: Head | None) -> list[Draft]:
                view = self._view() if head is not None else None
                return [Draft(body=b, time=time, meta=m) for b, m in build(view)]

            self.log.update(self.session_id, decide, attempts=self._attempts)

    def _items_of(self, event: Event) -> list[dict[str, Any]]:
        body = event.body
        held = event.meta.get(META_KEY)
        if isinstance(held, list):
            return [
                self._restore(dict(item), body, i)
                for i, item in enumerate(held)
                if isinstance(item, dict)
            ]
        # An event appended by other means: the exporter's items, with full texts.
        if isinstance(body, AssistantMessageAdded):
            for part in body.parts:
                if isinstance(part, NativePart) and part.format != "openai-responses":
                    raise InvalidEventError(
                        f"event {event.seq} of session {self.session_id!r} holds the "
                        f"{part.format} format's own {part.item_type!r} item, which only "
                        "that format can carry: the SDK would send it to the "
                        "Responses API, which cannot read it, and it is never sent as a "
                        "placeholder. Read this session with a turnlog.Session for "
                        f"{part.format}, or rewind it to before that event"
                    )
        if isinstance(body, ToolResultAdded) and body.blob is not None:
            body = msgspec.structs.replace(
                body, output=self._text(body.output, body.blob), blob=None
            )
        elif isinstance(body, (UserMessageAdded, NotificationAdded)) and body.blob is not None:
            body = msgspec.structs.replace(body, text=self._text(body.text, body.blob), blob=None)
        return ItemMapper.items_of(body)

    def _restore(self, item: _Item, body: Body, index: int) -> _Item:
        """The item back, with the text (or the whole compaction item) `_bodies` left to
        the event."""
        kind = _kind(item)
        if (
            item == _COMPACTION_STUB
            and isinstance(body, AssistantMessageAdded)
            and index < len(body.parts)
        ):
            part = body.parts[index]  # a model item's one part (`_model_parts`)
            if isinstance(part, NativePart):
                restored: _Item = msgspec.json.decode(part.data)
                return restored
        if (
            isinstance(body, ToolResultAdded)
            and kind.endswith("_call_output")
            and "output" not in item
        ):
            item["output"] = self._text(body.output, body.blob)
        elif (
            isinstance(body, (UserMessageAdded, NotificationAdded))
            and kind == "message"
            and "content" not in item
        ):
            item["content"] = self._text(body.text, body.blob)
        return item

    def _text(self, text: str, blob: BlobRef | None) -> str:
        return text if blob is None else self.log.blob(blob).decode("utf-8", "replace")


# -- items -> events ---------------------------------------------------------------------------
def _kind(item: _Item) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if isinstance(kind, str) else ""


def _is_model(item: _Item) -> bool:
    kind = _kind(item)
    if kind == "message":
        return item.get("role") == "assistant"
    return kind.endswith("_call") or kind in {
        "reasoning",
        "mcp_approval_request",
        "mcp_list_tools",
        "compaction",
    }


#: What an event's meta holds for a compaction item, which its `NativePart` holds whole.
_COMPACTION_STUB: dict[str, Any] = {"type": "compaction"}


def _is_compaction(item: _Item) -> bool:
    return _kind(item) == "compaction" and isinstance(item.get("encrypted_content"), str)


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else json.dumps(content, ensure_ascii=False)
    texts = []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block, dict) and isinstance(block.get("refusal"), str):
            texts.append(block["refusal"])
    return "\n".join(texts)


def _images(content: object) -> tuple[ImagePart, ...]:
    if not isinstance(content, list):
        return ()
    out = []
    for block in content:
        url = (
            block.get("image_url")
            if isinstance(block, dict) and block.get("type") == "input_image"
            else None
        )
        if isinstance(url, str) and url:
            media = url[5 : url.index(";")] if url.startswith("data:") and ";" in url else "image/*"
            out.append(ImagePart(media_type=media[:1024], url=url))
    return tuple(out)


def _call_id(item: _Item) -> str:
    found = item.get("call_id") or item.get("id")
    if isinstance(found, str) and 0 < len(found) <= 256:
        return found
    seed = json.dumps(item, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    return "item_" + blake3.blake3(seed).hexdigest()[:24]


def _call_name(item: _Item, kind: str) -> str:
    name = item.get("name")
    return name[:1024] if isinstance(name, str) and name else kind.removesuffix("_call")


def _model_parts(item: _Item) -> list[Part]:
    kind = _kind(item)
    if _is_compaction(item):
        return [
            NativePart(
                format="openai-responses",
                item_type="compaction",
                data=msgspec.json.encode(item).decode(),
            )
        ]
    if kind == "compaction":
        raise InvalidEventError(
            "a 'compaction' item needs its encrypted_content (a string), as the Responses "
            f"API gives it; found keys {sorted(item)[:8]}. Pass the item the API returned, "
            "unchanged"
        )
    if kind == "message":
        return [TextPart(text=_text_of(item.get("content")))]
    if kind == "reasoning":
        summary = item.get("summary")
        text = (
            "\n\n".join(
                s["text"] for s in summary if isinstance(s, dict) and isinstance(s.get("text"), str)
            )
            if isinstance(summary, list)
            else ""
        )
        opaque = item.get("encrypted_content")
        ident = item.get("id")
        return [
            ReasoningPart(
                text=text,
                opaque=opaque if isinstance(opaque, str) else "",
                provider="openai",
                id=ident[:256] if isinstance(ident, str) else "",
            )
        ]
    if kind in _ANSWERED_CALLS:
        if kind == "function_call":
            arguments = item.get("arguments")
        elif kind == "custom_tool_call":
            arguments = item.get("input")
        else:
            arguments = item.get("action", item.get("operation", {}))
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        return [ToolCall(id=_call_id(item), name=_call_name(item, kind), arguments=arguments)]
    return [TextPart(text=f"[{kind or 'item'}]")]


def _bodies(items: list[_Item], calls: dict[str, str]) -> list[tuple[Body, dict[str, Any]]]:
    out: list[tuple[Body, dict[str, Any]]] = []
    group: list[_Item] = []

    def flush() -> None:
        if group:
            parts = [p for item in group for p in _model_parts(item)]
            held = [_COMPACTION_STUB if _is_compaction(item) else item for item in group]
            out.append((AssistantMessageAdded(parts=tuple(parts)), {META_KEY: held}))
            calls.update((p.id, p.name) for p in parts if isinstance(p, ToolCall))
            group.clear()

    for item in items:
        if _is_model(item):
            if _is_compaction(item):
                flush()  # it replaces what came before it: it starts its own message
            group.append(item)
            continue
        flush()
        kind = _kind(item)
        residual = dict(item)
        if kind == "message":
            role = str(item.get("role") or "user")
            content = item.get("content")
            if isinstance(content, str):
                del residual["content"]
            if role == "user":
                body: Body = UserMessageAdded(text=_text_of(content), images=_images(content))
            else:
                body = NotificationAdded(source=role[:1024], text=_text_of(content))
        elif kind.endswith("_call_output"):
            call = _call_id(item)
            output = item.get("output")
            if isinstance(output, str):
                del residual["output"]
            body = ToolResultAdded(
                call_id=call, tool_name=calls.get(call, ""), output=_text_of(output)
            )
        else:
            body = NotificationAdded(source="item", text=f"[{kind or 'unknown'} item]")
        out.append((body, {META_KEY: [residual]}))
    flush()
    return out


def _unrepresentable(item: _Item) -> str | None:
    """The item's type when `_bodies` could keep it only as a placeholder, else None."""
    kind = _kind(item)
    if kind == "message" or kind.endswith("_call_output"):
        return None
    if _is_model(item):
        return (
            None
            if kind in _ANSWERED_CALLS or kind == "reasoning" or _is_compaction(item)
            else kind or "item"
        )
    return kind or "unknown"


def _calls(view: Projection | None) -> dict[str, str]:
    if view is None:
        return {}
    return {
        p.id: p.name
        for e in _visible(view)
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, ToolCall)
    }


def _visible(view: Projection) -> list[Event]:
    return [
        e
        for pos, e in enumerate(view.events)
        if pos not in view.rewound and not isinstance(e.body, SessionRewound)
    ]


# -- the model call in the request path ----------------------------------------------------------
def _refuse_server_state(
    previous_response_id: str | None,
    conversation_id: str | None,
    prompt: ResponsePromptParam | None,
) -> None:
    """Refuse what would make the provider add to a request text the log does not hold:
    a stored response or conversation it continues, or a prompt template it expands."""
    given = [
        name
        for name, value in (
            ("previous_response_id", previous_response_id),
            ("conversation_id", conversation_id),
            ("prompt", prompt),
        )
        if value is not None
    ]
    if given:
        raise InvalidArgumentError(
            f"TurnlogModel was given {', '.join(given)}: the provider would add to the "
            "request what it stored under that name (an earlier response or conversation, "
            "a prompt template), which the log does not hold, so the request could not be "
            "replayed or explained; nothing was appended or sent. The log is the memory: "
            "run without previous_response_id and conversation_id, and give the agent its "
            "text as instructions instead of a prompt template"
        )


class TurnlogModel(Model):
    """An Agents SDK ``Model`` whose every call is packed, recorded and replayable by turnlog.

    Pass it as the agent's ``model`` and run the agent *without* the SDK's
    ``session=``: the log is the memory. On each call the SDK makes it

    1. appends the input items the log does not hold yet (the run's new input,
       tool outputs; the model's own items are recorded in step 4) as events, the
       way `TurnlogSession` does, plus the agent's instructions (a system section)
       and tools (``ToolsSet``) when they changed;
    2. packs the prompt from the log under the session's policy and records the
       ``RequestIssued`` with the rendered ``openai-responses`` body (`AsyncSession.prepare`);
    3. sends that body with the given ``AsyncOpenAI`` client (``responses.create``);
    4. records the response (`AsyncSession.record`) and returns it to the SDK; an
       error status is recorded as the provider's error (``ProviderErrorReceived``)
       before the SDK gets the exception, and after a context overflow the next
       call packs a recovery (see `Session.prepare`).

    So ``turnlog replay`` reproduces every request the SDK made. ``stream_response``
    does the same and gives the SDK the finished response as one
    ``response.completed`` event.

    The call's ``ModelSettings`` and output schema become the body's fields as the
    SDK's own Responses model sends them (``temperature``, ``top_p``,
    ``truncation``, ``tool_choice``, ``parallel_tool_calls``, ``text``, ``store``,
    ``reasoning``, ``metadata``, ``include``, ``top_logprobs``,
    ``prompt_cache_retention``, ``prompt_cache_options``, ``context_management``,
    ``extra_args`` and ``extra_body``), recorded with the request so that replay
    renders it as it was sent (a field the client's ``create`` does not name goes
    through its ``extra_body``); ``extra_headers`` and ``extra_query`` go to the
    client and are no part of the body. ``max_tokens`` replaces the output cap
    (``max_output_tokens``), at most the policy's ``output_reserve`` (the room
    packing left for the reply).
    The agent's function tools and its handoffs are the request's tools; a tool of
    another kind (a hosted tool, a computer) is refused with ``InvalidEventError``
    naming it, before anything is appended or sent. Give every agent of a run that
    hands off the same `TurnlogModel`: a call continues the previous one only on
    the same object.

    A ``compaction`` item in the input (the provider's own compaction, from
    ``responses.compact`` or an earlier response) is kept byte for byte as a
    `NativePart` and sent back unchanged, and the conversation before it is not
    sent again (the provider carries it in the item; the events stay in the log).
    An input item turnlog cannot put in a request it packs (an ``item_reference``,
    a hosted tool's call: anything `TurnlogSession` keeps only as a placeholder)
    is refused with ``InvalidEventError`` naming its type, before anything is
    appended or sent: the model never sees a placeholder. So is a call given a
    ``previous_response_id``, a ``conversation_id`` or a ``prompt`` (a template the
    provider expands): the provider would add text the log does not hold.

    Parameters:
        log: the log.
        session_id: the turnlog session of the agent.
        model: the model name sent.
        openai_client: an ``openai.AsyncOpenAI`` client (any base URL).
        policy: the packing policy (see `AsyncSession`).
        clock: called for event times (microseconds since the epoch); none when None.
    """

    def __init__(
        self,
        log: Log,
        session_id: str,
        *,
        model: str,
        openai_client: Any,
        policy: Policy | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.session = AsyncSession(
            log, session_id, model=model, format="openai-responses", policy=policy, clock=clock
        )
        self.items = TurnlogSession(
            log, session_id, policy=policy, packer=self.session.packer, clock=clock
        )
        self.client = openai_client
        self._max_tokens = self.session.max_tokens  # the cap when the settings name none
        self._last_input = 0  # items of the previous call's input, plus its output
        self._previous: list[dict[str, Any]] = []  # the previous call's input

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: ResponsePromptParam | None = None,
    ) -> ModelResponse:
        """Pack from the log, record, send, record the answer (see the class docstring)."""
        _refuse_server_state(previous_response_id, conversation_id, prompt)
        response = await self._call(
            system_instructions, input, model_settings, tools, output_schema, handoffs
        )
        usage = response.usage
        return ModelResponse(
            output=list(response.output),
            usage=Usage(
                requests=1,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
                input_tokens_details=usage.input_tokens_details,
                output_tokens_details=usage.output_tokens_details,
            )
            if usage is not None
            else Usage(requests=1),
            response_id=None,
        )

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: ResponsePromptParam | None = None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """`get_response`, given to the SDK as one ``response.completed`` event."""
        _refuse_server_state(previous_response_id, conversation_id, prompt)
        response = await self._call(
            system_instructions, input, model_settings, tools, output_schema, handoffs
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )

    async def _call(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002
        settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
    ) -> Response:
        specs = _tool_specs(tools, handoffs)
        # checked (a strict schema the API refuses) before anything is appended
        checked = [_tool_spec(spec, i, every_required=True) for i, spec in enumerate(specs)]
        fields, options = _settings_fields(settings, output_schema, tools, handoffs, specs)
        max_tokens = self._max_tokens
        if settings.max_tokens is not None:
            reserve = await asyncio.to_thread(self.session._output_reserve)
            if settings.max_tokens > reserve:
                raise InvalidArgumentError(
                    f"ModelSettings(max_tokens={settings.max_tokens}) is above the packing "
                    f"policy's output_reserve of {reserve}, the room packing leaves for the "
                    "reply; nothing was appended or sent. Lower max_tokens or give the model "
                    "a policy with a larger output_reserve"
                )
            max_tokens = settings.max_tokens
        items = (
            [{"role": "user", "content": input}]
            if isinstance(input, str)
            else [dict(cast(Mapping[str, Any], i)) for i in input]
        )
        # A call that continues the previous one (its input, its output, then new items)
        # appends only the new items; any other call starts a run: all of its input.
        continues = (
            0 < self._last_input <= len(items) and items[: len(self._previous)] == self._previous
        )
        fresh = items[self._last_input :] if continues else items
        for item in fresh:
            kind = _unrepresentable(item)
            if kind is not None:
                raise InvalidEventError(
                    f"the run's input holds a {kind!r} item, which turnlog cannot put in a "
                    "request it packs (only messages, reasoning, function and tool calls "
                    "and their outputs, and compaction items); nothing was appended or "
                    "sent. Run this agent with the SDK's own model, or leave the item out "
                    "of the input"
                )
        if fresh:
            await asyncio.to_thread(self.items.add, fresh)
        # The items are in the log: a retry of this call (the SDK's retry after a
        # failed request) continues it and appends none of them again.
        self._previous = items
        self._last_input = len(items)
        await self.session.system("instructions", system_instructions or "")
        if specs or await self.session.head() is not None:
            await self.session.tools(checked)
        self.session._body_fields(fields, max_tokens)
        request = await self.session.prepare()
        try:
            create = self.client.responses.create
            response: Response = await create(
                **_create_arguments(create, request.json()), **options
            )
        except APIStatusError as exc:
            # The provider's refusal is part of what happened: recorded as its error
            # (a context overflow makes the next call recover), then the SDK's to handle.
            try:
                await self.session.record(
                    exc.response.content, status=exc.status_code, request_seq=request.request_seq
                )
            except KernelError as failed:  # the SDK still gets the provider's error
                exc.add_note(f"turnlog could not record this error: {failed}")
            raise
        await self.session.record(response, request_seq=request.request_seq)
        self._previous = items
        self._last_input = len(items) + len(response.output)
        return response


#: The fields of a Responses body that turnlog renders (`_settings_fields` may not set them).
_RENDERED = frozenset({"model", "input", "instructions", "tools", "max_output_tokens"})

#: What the client's ``create`` takes besides the body's fields.
_CLIENT_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


def _create_arguments(create: Callable[..., Any], body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the keyword arguments of the client's ``create``: the fields it names
    as themselves, the others (newer than the client) through ``extra_body``, which it
    sends as they are."""
    try:
        named = set(inspect.signature(create).parameters) - _CLIENT_OPTIONS
    except (TypeError, ValueError):  # (a client whose create has no signature)
        return body
    arguments = {k: v for k, v in body.items() if k in named}
    others = {k: v for k, v in body.items() if k not in named}
    if others:
        arguments["extra_body"] = others
    return arguments


def _tool_specs(tools: list[Tool], handoffs: list[Handoff]) -> list[dict[str, Any]]:
    """The request's tools: the agent's function tools, then its handoffs (each a
    function tool to the model, as the SDK's own model sends it)."""
    specs: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, FunctionTool):
            name = getattr(tool, "name", "")
            raise InvalidEventError(
                f"the agent's tool {name!r} is a {type(tool).__name__}, which turnlog cannot "
                "put in a request it packs (only function tools and handoffs); nothing was "
                "appended or sent. Run this agent with the SDK's own model, or leave the "
                "tool out"
            )
        # What the SDK's own model sends besides these, and a ToolSpec does not hold:
        # refused rather than dropped (the getattr defaults: an SDK without the field).
        unsent = [
            field
            for field, given in (
                ("defer_loading", bool(getattr(tool, "defer_loading", False))),
                ("allowed_callers", getattr(tool, "allowed_callers", None) is not None),
                ("output_json_schema", getattr(tool, "output_json_schema", None) is not None),
                ("a tool namespace", bool(getattr(tool, "_tool_namespace", None))),
            )
            if given
        ]
        if unsent:
            raise InvalidEventError(
                f"the agent's tool {tool.name!r} sets {', '.join(unsent)}, which turnlog "
                "does not record or send (a recorded tool holds its name, description, "
                "schema and strictness); nothing was appended or sent. Run this agent with "
                "the SDK's own model, or leave that out of the tool"
            )
        specs.append(
            {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.params_json_schema,
                "strict": tool.strict_json_schema,
            }
        )
    for handoff in handoffs:
        specs.append(
            {
                "name": handoff.tool_name,
                "description": handoff.tool_description,
                "parameters": handoff.input_json_schema,
                "strict": handoff.strict_json_schema,
            }
        )
    return specs


def _settings_fields(
    settings: ModelSettings,
    output_schema: AgentOutputSchemaBase | None,
    tools: list[Tool],
    handoffs: list[Handoff],
    specs: list[dict[str, Any]],
) -> tuple[dict[str, object], dict[str, Any]]:
    """The body fields of a call's settings and output schema, as the SDK's own
    Responses model sends them, and the client's options (headers, query): no part
    of the body. ``include`` is sorted (the SDK builds it from a set)."""
    fields: dict[str, object] = {}

    def put(name: str, value: object) -> None:
        if value is not None:
            fields[name] = _json(value)

    put("temperature", settings.temperature)
    put("top_p", settings.top_p)
    put("truncation", settings.truncation)
    choice = Converter.convert_tool_choice(
        settings.tool_choice,
        tools=tools,
        handoffs=handoffs,
        # (a function tool named like a hosted one, "web_search"..., is chosen as a function)
        tool_params=cast(Any, [{"type": "function", "name": spec["name"]} for spec in specs]),
    )
    if isinstance(choice, (str, dict)):  # (not omitted)
        fields["tool_choice"] = _json(choice)
    if specs:
        put("parallel_tool_calls", settings.parallel_tool_calls)
    text = Converter.get_response_format(output_schema)
    text_fields: dict[str, Any] = dict(text) if isinstance(text, dict) else {}
    if settings.verbosity is not None:
        text_fields["verbosity"] = settings.verbosity
    if text_fields:
        fields["text"] = _json(text_fields)
    put("store", settings.store)
    put("prompt_cache_retention", settings.prompt_cache_retention)
    put("prompt_cache_options", settings.prompt_cache_options)
    put("reasoning", settings.reasoning)
    put("metadata", settings.metadata)
    put("context_management", settings.context_management)
    include = set(settings.response_include or ())
    if settings.top_logprobs is not None:
        include.add("message.output_text.logprobs")
    if include:
        fields["include"] = sorted(str(_json(i)) for i in include)
    extra = dict(settings.extra_args or {})
    if settings.top_logprobs is not None:
        extra["top_logprobs"] = settings.top_logprobs
    for name, value in extra.items():
        if name in fields:
            raise InvalidArgumentError(
                f"ModelSettings.extra_args sets {name!r}, which the settings set already; "
                "nothing was appended or sent. Set it in one place"
            )
        fields[name] = _json(value)
    body = settings.extra_body
    if body is not None and not isinstance(body, Mapping):
        raise InvalidArgumentError(
            f"ModelSettings.extra_body must be a mapping of body fields, not a "
            f"{type(body).__name__}; nothing was appended or sent"
        )
    for name, value in (body or {}).items():
        fields[str(name)] = _json(value)
    clash = sorted(set(fields) & _RENDERED)
    if clash:
        raise InvalidArgumentError(
            f"ModelSettings.extra_args or extra_body sets {', '.join(map(repr, clash))}, which "
            "turnlog renders from the log and the policy; nothing was appended or sent. "
            "Leave it out (ModelSettings.max_tokens sets the output cap)"
        )
    options: dict[str, Any] = {}
    if settings.extra_headers:
        options["extra_headers"] = settings.extra_headers
    if settings.extra_query:
        options["extra_query"] = settings.extra_query
    return fields, options


def _json(value: object) -> object:
    """``value`` as JSON values (a pydantic model as its fields set, without None)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _json(dump(mode="json", exclude_none=True))
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value

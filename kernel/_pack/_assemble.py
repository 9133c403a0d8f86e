"""Stage 7 and the prompt itself: sections, kept messages, answers, cache breakpoints.

Both engines end here: given the units the prompt keeps (ascending) and each kept
item's message and tokens, `assemble` builds the provider-neutral `Prompt`. A call
with no recorded result is answered by a placeholder (providers refuse a call
without its result). Cache breakpoints are placed, in priority order, at the end
of the static system sections (and tools), the latest message, the end of older
history (the message before the mandatory tail) and the end of the summary
section; at most ``cache_breakpoints`` of them. Under rules 3 the third is the end of
the previous request (the message before the latest assistant message), where this
request reads what the previous one wrote to the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import msgspec

from .._errors import PackError
from .._events import (
    AssistantMessageAdded,
    ContentErased,
    EventErased,
    EventsPinned,
    NotificationAdded,
    Part,
    PolicySet,
    RecallAdded,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolsSet,
    UserMessageAdded,
)
from .._policy import Policy
from .._projection import (
    EMPTY_ASSISTANT_TEXT,
    EMPTY_USER_TEXT,
    Item,
    Projection,
    Unit,
    notification_text,
    recall_text,
)
from .._prompt import Breakpoint, Message, Prompt, Section
from .._tokens import MESSAGE_OVERHEAD, TokenCounter
from ._budget import placeholder_result
from ._model import SUMMARY_SECTION, StageReport

if TYPE_CHECKING:
    from ._ledger import Marker

__all__: list[str] = []

#: An item's message and its tokens in the prompt (None: the item is not in it).
MessageOf = Callable[[int], "tuple[Message, int] | None"]
#: Appends the messages of a run of kept units, in order, and their tokens (what an
#: engine puts in the prompt).
AddUnits = Callable[[list[Unit], list[Message], list[int]], None]


def unit_adder(message_of: MessageOf) -> AddUnits:
    """An `AddUnits` from a per-item `MessageOf` (None: the item is not in the prompt)."""

    def add_units(units: list[Unit], messages: list[Message], tokens: list[int]) -> None:
        for unit in units:
            for i in unit.items:
                found = message_of(i)
                if found is not None:
                    messages.append(found[0])
                    tokens.append(found[1])

    return add_units


def message(item: Item, parts: tuple[Part, ...] | None) -> Message:
    """The message of an item: verbatim, or with its content replaced by ``parts``."""
    body = item.event.body
    if isinstance(body, ToolResultAdded):
        return Message(
            role="tool",
            parts=parts or (TextPart(text=body.output),),
            tool_call_id=body.call_id,
            name=body.tool_name,
            is_error=body.is_error,
            source=(item.pos,),
        )
    if isinstance(body, AssistantMessageAdded):
        # A reply with no parts (an empty completion) still answers the turn.
        return Message(
            role="assistant",
            parts=parts or body.parts or (TextPart(text=EMPTY_ASSISTANT_TEXT),),
            source=(item.pos,),
        )
    if isinstance(body, UserMessageAdded):
        if parts:  # clipped (rules 2)
            return Message(role="user", parts=parts, source=(item.pos,))
        user_parts: tuple[Part, ...] = (TextPart(text=body.text),) if body.text else ()
        user_parts += tuple(body.images)
        return Message(
            role="user", parts=user_parts or (TextPart(text=EMPTY_USER_TEXT),), source=(item.pos,)
        )
    if isinstance(body, NotificationAdded):
        return Message(
            role="user",
            parts=parts or (TextPart(text=notification_text(body.source, body.text)),),
            source=(item.pos,),
        )
    if isinstance(body, RecallAdded):
        return Message(
            role="user",
            parts=parts or (TextPart(text=recall_text(body, len(body.hits))),),
            source=(item.pos,),
        )
    raise PackError(f"internal: no message form for {type(body).__name__}")


def assemble(
    view: Projection,
    policy: Policy,
    counter: TokenCounter,
    kept: Iterable[int],
    add_units: AddUnits,
    summary: tuple[str, int],
    tail_unit: int,
    marker: Marker | None = None,
) -> tuple[Prompt, tuple[int, ...], tuple[int, ...]]:
    """The prompt from the kept units, with its message and section tokens.

    Parameters:
        kept: the units in the prompt, ascending.
        add_units: appends kept units' messages and tokens (see `unit_adder`).
        summary: the summary section's text ("" for none) and tokens.
        tail_unit: where the current turn starts (for the "older history" breakpoint).
        marker: the message a trimmed run leaves (rules 2), and where it goes.
    """
    sections = [Section(name=name, text=text) for name, text, _ in view.sorted_sections()]
    section_tokens = [view.section_tokens[s.name] for s in sections]
    static_count = len(sections)
    if summary[0]:
        sections.append(Section(name=SUMMARY_SECTION, text=summary[0]))
        section_tokens.append(summary[1])
    messages: list[Message] = []
    tokens: list[int] = []
    tail_message = -1
    units = view.units
    wire = policy.rules >= 2
    # Most units only add their messages: they are added in runs (one call per run);
    # a unit where the marker goes, the tail starts, a call is renamed or answered
    # by a placeholder is added on its own.
    special = {tail_unit} if marker is None else {tail_unit, marker.before}
    run: list[Unit] = []
    for u in kept:
        unit = units[u]
        renamed = wire and unit.wire_ids is not unit.calls
        if u not in special and not renamed and not unit.open_calls:
            run.append(unit)
            continue
        if run:
            add_units(run, messages, tokens)
            run = []
        if marker is not None and u == marker.before:
            messages.append(marker.message)
            tokens.append(marker.tokens)
            marker = None
        if u == tail_unit:
            tail_message = len(messages)
        rename = dict(zip(unit.calls, unit.wire_ids, strict=True)) if renamed else None
        start = len(messages)
        add_units([unit], messages, tokens)
        if rename is not None:
            messages[start:] = [_renamed(m, rename) for m in messages[start:]]
        if unit.open_calls:
            _answer_open_calls(view, u, counter, messages, tokens, rename, policy.rules)
    if run:
        add_units(run, messages, tokens)
    if marker is not None:
        messages.append(marker.message)
        tokens.append(marker.tokens)
    if policy.rules >= 3:
        # the previous request ended before the latest assistant message: a breakpoint
        # there is where this request reads what the previous one wrote to the cache
        last = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), 0
        )
        tail_message, reason = last, "previous request"
    else:
        reason = "older history"
    breakpoints = _breakpoints(
        policy, view, static_count, len(sections), len(messages), tail_message, reason
    )
    prompt = Prompt(
        system=tuple(sections),
        tools=tuple(view.tools),
        messages=tuple(messages),
        breakpoints=breakpoints,
    )
    return prompt, tuple(tokens), tuple(section_tokens)


def _answer_open_calls(
    view: Projection,
    unit_index: int,
    counter: TokenCounter,
    messages: list[Message],
    tokens: list[int],
    rename: dict[str, str] | None,
    rules: int,
) -> None:
    """Answer each call without a result with a placeholder that says why (never
    returned, or still running)."""
    unit = view.units[unit_index]
    text = placeholder_result(unit.index, len(view.units), rules)
    first = view.items[unit.items[0]]
    for call in unit.calls:
        if call in unit.open_calls:
            wire = rename.get(call, call) if rename else call
            messages.append(
                Message(
                    role="tool",
                    parts=(TextPart(text=text),),
                    tool_call_id=wire,
                    is_error=True,
                    source=(first.pos,),
                )
            )
            tokens.append(MESSAGE_OVERHEAD + 1 + counter.count(text))


def _renamed(message: Message, rename: dict[str, str]) -> Message:
    """A message with its call ids (or the id its result answers) as the prompt sends
    them: unique within the prompt (rules 2; see `Unit.wire_ids`)."""
    if message.role == "tool":
        wire = rename.get(message.tool_call_id, message.tool_call_id)
        return (
            message
            if wire == message.tool_call_id
            else msgspec.structs.replace(message, tool_call_id=wire)
        )
    parts = tuple(
        msgspec.structs.replace(p, id=rename[p.id])
        if isinstance(p, ToolCall) and rename.get(p.id, p.id) != p.id
        else p
        for p in message.parts
    )
    return msgspec.structs.replace(message, parts=parts)


def _breakpoints(
    policy: Policy,
    view: Projection,
    static_sections: int,
    all_sections: int,
    n_messages: int,
    tail_message: int,
    reason: str = "older history",
) -> tuple[Breakpoint, ...]:
    wanted: list[Breakpoint] = []
    if static_sections or view.tools:
        wanted.append(
            Breakpoint(
                at="system" if static_sections else "tools", reason="static system prompt and tools"
            )
        )
    if n_messages:
        wanted.append(Breakpoint(at="message", index=n_messages - 1, reason="latest message"))
    if 0 < tail_message < n_messages and tail_message - 1 != n_messages - 1:
        wanted.append(Breakpoint(at="message", index=tail_message - 1, reason=reason))
    if all_sections > static_sections:
        wanted.append(Breakpoint(at="summary", reason="conversation summary"))
    chosen = wanted[: policy.cache_breakpoints]
    order = {"tools": 0, "system": 1, "summary": 2, "message": 3}
    return tuple(sorted(chosen, key=lambda b: (order[b.at], b.index)))


def breakpoints_report(
    prompt: Prompt, rules: int = 0, view: Projection | None = None
) -> StageReport:
    """The breakpoints stage's report. Under rules 3 it also says what the log changed
    since the previous request that earlier requests held (see `changed_since`), and
    names the tools first called since then in a prompt that defines none (see
    `first_called`)."""
    detail = ", ".join(
        f"{b.at}{'' if b.index < 0 else b.index} ({b.reason})" for b in prompt.breakpoints
    )
    changes = changed_since(view) if rules >= 3 and view is not None else ()
    if changes:
        detail += f"; {INPUT_BREAK}: {', '.join(changes)} since the previous request"
    names = first_called(prompt) if rules >= 3 else ()
    if names:
        detail += (
            f"; {DERIVED_TOOLS_BREAK}: {', '.join(names)} first called since the "
            "previous request, and the prompt defines no tools"
        )
    return StageReport(name="breakpoints", fired=bool(prompt.breakpoints), detail=detail)


#: What the breakpoints report says when the log changed, since the previous request,
#: something that earlier requests held.
INPUT_BREAK = "prefix break by the log"


def changed_since(view: Projection) -> tuple[str, ...]:
    """What the events since the previous request (from the latest assistant message
    on) changed that an earlier request held: a system section set or removed, the
    tools set, events pinned or unpinned, a rewind, a policy set, content erased. The
    application made these changes, not the packer; each one can change the prompt
    ahead of what this request appends."""
    events = view.events
    found: list[str] = []
    # back to the latest assistant message, rewound or not (the previous request was
    # made before it); none: this is the first request
    for pos in range(len(events) - 1, -1, -1):
        body = events[pos].body
        if isinstance(body, AssistantMessageAdded):
            return tuple(dict.fromkeys(reversed(found)))
        if isinstance(body, SystemSectionSet):
            found.append(f"system section {body.name!r} {'set' if body.text else 'removed'}")
        elif type(body) in _INPUTS:
            found.append(_INPUTS[type(body)])
    return ()


_INPUTS: dict[type, str] = {
    ToolsSet: "tools set",
    EventsPinned: "pins changed",
    SessionRewound: "events rewound",
    PolicySet: "policy set",
    ContentErased: "content erased",
    EventErased: "an event erased",
}


#: What the breakpoints report says when the tool definitions a provider derives from
#: the calls change (``render`` derives them for a format whose API refuses calls
#: without definitions, ahead of the system prompt and every message).
DERIVED_TOOLS_BREAK = "prefix break where the tool definitions are derived from the calls"


def first_called(prompt: Prompt) -> tuple[str, ...]:
    """The tools that the messages since the previous request (from the latest
    assistant message on) call and no earlier message does, sorted; empty when the
    prompt defines tools. A session recorded without tool definitions (a transcript
    imported) gets them derived from its calls where the provider needs them, so a
    tool called for the first time changes the definitions, which go before
    everything else: that is a prefix break for those formats only."""
    if prompt.tools:
        return ()
    messages = prompt.messages
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), 0)
    new = {c.name for m in messages[last:] for c in m.tool_calls}
    for i in range(last - 1, -1, -1):  # newest first: a tool is mostly called again soon
        if not new:
            break
        if messages[i].role == "assistant":
            new.difference_update(c.name for c in messages[i].tool_calls)
    return tuple(sorted(new))

"""Clipping (rules 2): no single text may take more than a share of the history budget.

Truncation cuts tool outputs by lines and bytes; some texts are still too big for
the window (a 360 KB user message, a 50k-token ``Write`` argument, a tool output
under a small budget). Under rules 2 every item whose tokens (after truncation)
exceed ``clip_ratio`` x the history budget (at least `MIN_TOKENS`) is clipped to a
head/tail preview of that size, with a notice naming the event (and its blob) that
holds the whole text:

* a user message, notification, recall result or tool result: its text;
* an assistant message: each text part and each tool call's arguments over its
  share. Arguments that are a JSON object stay a JSON object: their string values
  are clipped, never the JSON itself; arguments that are not JSON and the
  input of freeform calls are clipped as text. Reasoning parts are left out of a clipped message
  (their signatures cover the whole text).

A policy that sets ``tool_clip_ratio`` gives tool traffic a limit of its own, that
share of the history budget (at least `TOOL_MIN_TOKENS`, or the text limit if lower):
a tool result over it is clipped, and so is each tool call's arguments over it (an
assistant message within its own limit keeps its text and reasoning parts as they
are). The model reads the rest of a clipped result with the ``read_output`` tool,
and a request that adds a short preview instead of a quarter of the window leaves
more of the prompt to the provider's cache.

Clipping applies to protected units too (the mandatory tail, pins): it is what
lets the latest message fit. Decision ``clipped``, rule ``clip.tokens``. The
limit depends on the policy and on the system sections and tool schemas (through
the history budget), so the `Packer`'s index keys its cuts by it.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import msgspec

from .._events import (
    AssistantMessageAdded,
    ImagePart,
    NativePart,
    NotificationAdded,
    Part,
    ReasoningPart,
    RecallAdded,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from .._policy import Policy
from .._projection import Item, notification_text, recall_text
from .._tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    REPLY_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TokenCounter,
)
from .._validation import plural
from ._ledger import Ledger
from ._model import Limits, StageReport

__all__: list[str] = []

#: The smallest clip limit, in tokens, whatever the budget.
MIN_TOKENS = 64
_PART_MIN = 32


#: The fewest tokens ``tool_clip_ratio`` clips a tool result or call to (never more than
#: the limit of any other text).
TOOL_MIN_TOKENS = 256


class ClipCut(NamedTuple):
    """An item's clipped form: the parts the prompt carries, their tokens, the numbers."""

    parts: tuple[Part, ...]
    tokens: int
    detail: str


def limits(policy: Policy, system: int, tools: int) -> Limits:
    """The most tokens one item may take, any text and a tool result."""
    if policy.rules < 2:
        return Limits(0, 0)
    history = policy.usable - system - tools - REPLY_OVERHEAD
    text = max(MIN_TOKENS, int(history * policy.clip_ratio))
    ratio = policy.tool_clip_ratio
    if ratio is None:
        return Limits(text, text)
    return Limits(text, max(min(TOOL_MIN_TOKENS, text), int(history * ratio)))


def _preview(text: str, chars: int, where: str) -> str:
    head_chars = chars * 3 // 5
    tail_chars = chars - head_chars
    omitted = len(text) - head_chars - tail_chars
    notice = (
        f"\n[... clipped: {omitted} characters omitted to fit the context window. "
        f"The whole text is {where} ...]\n"
    )
    return text[:head_chars] + notice + text[len(text) - tail_chars :]


def clip_text(
    text: str, tokens: int, counter: TokenCounter, where: str, *, fill: bool = False
) -> str:
    """``text`` cut to a head/tail preview of at most ``tokens`` tokens (whole when it
    fits), around a notice that says where the whole text is.

    The preview keeps ``3 * tokens`` characters, halved until it fits, so it may take
    half the limit or less. With ``fill`` (tool traffic under ``tool_clip_ratio``, which
    no earlier record used) the length is then searched between the last size that fit
    and the first that did not, to within 2%, so a preview takes most of its limit."""
    if counter.count(text) <= tokens:
        return text
    chars = max(16, tokens * 3)
    over = len(text)  # the fewest characters known not to fit
    while True:
        clipped = _preview(text, chars, where)
        if counter.count(clipped) <= tokens or chars <= 16:
            break
        over = chars
        chars //= 2
    if not fill or chars <= 16:
        return clipped
    while over - chars > max(16, chars // 50):
        middle = (chars + over) // 2
        candidate = _preview(text, middle, where)
        if counter.count(candidate) <= tokens:
            chars, clipped = middle, candidate
        else:
            over = middle
    return clipped


#: How deep `clip_arguments` walks a JSON object; a deeper one (which a recursive walk
#: could not take) is clipped as a whole, into ``{"_clipped_arguments": PREVIEW}``.
MAX_WALK_DEPTH = 256


def _nested_deeper(value: object, limit: int) -> bool:
    """True when ``value`` nests lists and dicts deeper than ``limit`` (no recursion)."""
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


def _clip_json(value: Any, keep: int, notice: str) -> Any:
    """``value`` with every string longer than ``keep`` characters cut to head and tail."""
    if isinstance(value, str):
        if len(value) <= keep:
            return value
        head = keep * 3 // 5
        return value[:head] + notice + value[len(value) - (keep - head) :]
    if isinstance(value, list):
        return [_clip_json(v, keep, notice) for v in value]
    if isinstance(value, dict):
        return {k: _clip_json(v, keep, notice) for k, v in value.items()}
    return value


def clip_arguments(
    arguments: str, tokens: int, counter: TokenCounter, where: str, *, fill: bool = False
) -> str:
    """Tool-call arguments within ``tokens``: a JSON object keeps its keys and
    structure with its long strings clipped; other JSON (an array, an object nested
    too deep to walk) becomes ``{"_clipped_arguments": PREVIEW}``, still JSON; text
    that was not JSON is clipped as text."""
    if counter.count(arguments) <= tokens:
        return arguments
    try:
        value = json.loads(arguments)
    except ValueError:  # not JSON to begin with: clipped as text
        return clip_text(arguments, tokens, counter, where, fill=fill)
    except RecursionError:  # JSON nested too deep to walk
        value = None
    if not isinstance(value, dict) or _nested_deeper(value, MAX_WALK_DEPTH):
        # valid JSON that is not an object walkable here: an object holding its preview
        room = max(_PART_MIN, tokens - 16)
        return json.dumps(
            {"_clipped_arguments": clip_text(arguments, room, counter, where, fill=fill)},
            ensure_ascii=False,
        )
    notice = f" [... clipped; the whole argument is {where} ...] "
    keep = max(64, tokens * 3)
    over = 0  # the shortest string length known not to fit (0: none tried)
    while True:
        text = json.dumps(_clip_json(value, keep, notice), ensure_ascii=False)
        if counter.count(text) <= tokens or keep <= 64:
            break
        over = keep
        keep //= 2
    if not fill or not over or keep <= 64:
        return text
    while over - keep > max(16, keep // 50):  # as in `clip_text`
        middle = (keep + over) // 2
        candidate = json.dumps(_clip_json(value, middle, notice), ensure_ascii=False)
        if counter.count(candidate) <= tokens:
            keep, text = middle, candidate
        else:
            over = middle
    return text


class Clip:
    """The clipping stage (see the module docstring)."""

    name = "clip"
    decision = "clipped"

    @staticmethod
    def where(item: Item) -> str:
        """Where the whole text of an item is: its event, and its blob if any."""
        event = item.event
        blob = getattr(event.body, "blob", None)
        if item.kit:
            ref = blob.hash if blob is not None else f"{event.session}#{event.seq}"
            return (
                f"in event {event.session}#{event.seq} (read ranges of it with the "
                f'read_output tool, ref "{ref}")'
            )
        at = f"in event {event.session}#{event.seq} (`turnlog show {event.session} {event.seq}`)"
        if blob is not None:
            at += f", blob {blob.hash} (`turnlog blob {blob.hash}`)"
        return at

    @staticmethod
    def cut(
        item: Item,
        parts: tuple[Part, ...] | None,
        tokens: int,
        limits: Limits,
        counter: TokenCounter,
    ) -> ClipCut | None:
        """The item's clipped form, given its current parts (None: verbatim) and
        tokens; None when it fits its limit (or the limit is 0)."""
        body = item.event.body
        split = limits.tool != limits.text
        tool = split and isinstance(body, ToolResultAdded)
        limit = limits.tool if tool else limits.text
        if not limit or item.unit < 0:
            return None
        calls = (
            split
            and isinstance(body, AssistantMessageAdded)
            and _calls_over(body.parts, limits.tool, counter)
        )
        if tokens <= limit and not calls:
            return None
        where = Clip.where(item)
        if isinstance(body, AssistantMessageAdded):
            if tokens <= limit:  # only its calls' arguments are over their limit
                tool, limit = True, limits.tool
                new = _calls(body.parts, limit, counter, where)
            else:
                new = _assistant(body.parts, limit, counter, where, limits.tool if split else 0)
        elif isinstance(body, UserMessageAdded):
            images = tuple(body.images)
            room = max(_PART_MIN, limit - MESSAGE_OVERHEAD - IMAGE_TOKENS * len(images))
            new = (TextPart(text=clip_text(body.text, room, counter, where)), *images)
        else:
            text = _text(body, parts)
            if text is None:
                return None
            new = (
                TextPart(
                    text=clip_text(
                        text,
                        max(_PART_MIN, limit - MESSAGE_OVERHEAD - 1),
                        counter,
                        where,
                        fill=tool,
                    )
                ),
            )
        after = _measure(item, new, counter)
        if after >= tokens:
            return None
        return ClipCut(
            new,
            after,
            f"clipped to {after} tokens (was {tokens}; limit {limit} "
            f"= {'tool_clip_ratio' if tool else 'clip_ratio'} of the history budget)",
        )

    def __call__(self, ledger: Ledger) -> StageReport | None:
        if ledger.policy.rules < 2:
            return None
        before = ledger.total
        count = ledger.clip()
        limits = ledger.clip_limits
        to = f"{limits.text} tokens"
        if limits.tool != limits.text:
            to += f" ({limits.tool} for a tool result)"
        return StageReport(
            name="clip",
            fired=count > 0,
            detail=f"{plural(count, 'text')} clipped to {to}",
            tokens_before=before,
            tokens_after=ledger.total,
            events=count,
        )


def _text(body: object, parts: tuple[Part, ...] | None) -> str | None:
    """The text a tool result, notification or recall carries now."""
    if parts:
        first = parts[0]
        return first.text if isinstance(first, TextPart) else None
    if isinstance(body, ToolResultAdded):
        return body.output
    if isinstance(body, NotificationAdded):
        return notification_text(body.source, body.text)
    if isinstance(body, RecallAdded):
        return recall_text(body, len(body.hits))
    return None


def _call_tokens(call: ToolCall, counter: TokenCounter) -> int:
    return TOOL_CALL_OVERHEAD + counter.count(call.name) + counter.count(call.arguments)


def _calls_over(parts: tuple[Part, ...], limit: int, counter: TokenCounter) -> bool:
    """True when a tool call among ``parts`` takes more than ``limit`` tokens."""
    return any(isinstance(p, ToolCall) and _call_tokens(p, counter) > limit for p in parts)


def _clip_call(
    call: ToolCall, room: int, counter: TokenCounter, where: str, fill: bool
) -> ToolCall:
    """A call with its arguments within ``room`` tokens (JSON kept JSON)."""
    args = (
        clip_text(call.arguments, room, counter, where, fill=fill)
        if call.freeform
        else clip_arguments(call.arguments, room, counter, where, fill=fill)
    )
    return call if args == call.arguments else msgspec.structs.replace(call, arguments=args)


def _calls(
    parts: tuple[Part, ...], limit: int, counter: TokenCounter, where: str
) -> tuple[Part, ...]:
    """An assistant message within its limit whose calls are not: each call
    over ``limit`` clipped to it; its text and reasoning parts kept as they are."""
    return tuple(
        _clip_call(
            p,
            max(_PART_MIN, limit - TOOL_CALL_OVERHEAD - counter.count(p.name)),
            counter,
            where,
            True,
        )
        if isinstance(p, ToolCall) and _call_tokens(p, counter) > limit
        else p
        for p in parts
    )


def _assistant(
    parts: tuple[Part, ...], limit: int, counter: TokenCounter, where: str, call_limit: int = 0
) -> tuple[Part, ...]:
    """An assistant message's parts within ``limit``: reasoning left out, each text
    part and call's arguments within an equal share (a call within ``call_limit`` too,
    when it is set)."""
    kept = [p for p in parts if not isinstance(p, ReasoningPart)]
    clippable = sum(1 for p in kept if isinstance(p, (TextPart, ToolCall)))
    share = max(_PART_MIN, (limit - MESSAGE_OVERHEAD) // max(1, clippable))
    out: list[Part] = []
    for part in kept:
        if isinstance(part, TextPart):
            out.append(TextPart(text=clip_text(part.text, share, counter, where)))
        elif isinstance(part, ToolCall):
            room = share if not call_limit else min(share, call_limit)
            room = max(_PART_MIN, room - TOOL_CALL_OVERHEAD - counter.count(part.name))
            out.append(_clip_call(part, room, counter, where, bool(call_limit)))
        else:
            out.append(part)
    return tuple(out) or (TextPart(text="(clipped)"),)


def _measure(item: Item, parts: tuple[Part, ...], counter: TokenCounter) -> int:
    """Tokens of an item's message carrying ``parts`` (as the projection counts)."""
    total = MESSAGE_OVERHEAD
    if item.kind == "tool":
        total += 1
    for part in parts:
        if isinstance(part, TextPart):
            total += counter.count(part.text)
        elif isinstance(part, ToolCall):
            total += TOOL_CALL_OVERHEAD + counter.count(part.name) + counter.count(part.arguments)
        elif isinstance(part, ReasoningPart):  # kept where only calls are clipped
            total += counter.count(part.text) + counter.count(part.opaque)
        elif isinstance(part, ImagePart):
            total += IMAGE_TOKENS
        elif isinstance(part, NativePart):
            total += counter.count(part.data)
    return total

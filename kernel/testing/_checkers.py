"""Invariant checkers for packing (and custom stages).

`pack` promises a handful of invariants (see ``turnlog._pack`` and
docs/packing.md). Each checker states one: a function that reads a projection
and a `Packed` result, and raises `AssertionError` with a message naming the
lineage position or the prompt message index that breaks it. The checkers do
not trust the packer's bookkeeping: they recompute what they can (the mandatory
tail, pending calls, token counts of every message) from the events and the
prompt itself. `check_stage` runs them all on a pipeline with a custom stage
inserted (`with_stage`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec

from .._errors import BudgetExceededError
from .._events import (
    AssistantMessageAdded,
    CompactionCommitted,
    ImagePart,
    NativePart,
    NotificationAdded,
    ReasoningPart,
    RecallAdded,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolsSet,
    UserMessageAdded,
)
from .._pack import DECISIONS, DEFAULT_STAGES, Packed, PackState, Stage, pack
from .._pack._summaries import summaries_shown
from .._policy import Policy
from .._projection import Projection
from .._prompt import Message, Prompt
from .._tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    REPLY_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TOOL_SCHEMA_OVERHEAD,
    TokenCounter,
    get_counter,
)
from ._strategies import SessionItem, build, memory_log, project

__all__ = [
    "check_all",
    "check_budget",
    "check_decisions",
    "check_deterministic",
    "check_mandatory_tail",
    "check_order",
    "check_overflow",
    "check_packed",
    "check_protected",
    "check_stage",
    "check_summaries",
    "check_tool_pairs",
    "with_stage",
]

#: Decisions under which an item's content is in the prompt.
_PRESENT = frozenset({"verbatim", "truncated", "clipped", "deduplicated", "pruned"})
#: The roots of the rules the built-in pipeline decides by.
_BUILTIN_RULES = frozenset(
    {
        "verbatim",
        "truncate",
        "clip",
        "summaries",
        "dedup",
        "prune",
        "trim",
        "orphan",
        "rewind",
        "system",
        "tools",
        "policy",
    }
)
#: The text every trimming marker (rules 2) starts with; the marker names no source.
_MARKER = "[turnlog: earlier history of this session"
#: Decisions under which an item is not in the prompt.
_ABSENT = frozenset({"summarized", "trimmed", "dropped"})
#: Decisions a protected unit must never get.
_REDUCED = frozenset({"deduplicated", "pruned", "trimmed", "summarized"})


def with_stage(
    name: str,
    stage: Stage,
    position: str = "before:trim",
    base: Sequence[tuple[str, Stage]] = DEFAULT_STAGES,
) -> tuple[tuple[str, Stage], ...]:
    """A copy of ``base`` with ``(name, stage)`` inserted.

    Parameters:
        position: ``"before:NAME"``, ``"after:NAME"`` (NAME a stage of ``base``),
            ``"first"`` or ``"last"``.

    Raises:
        ValueError: an unknown position or stage name.
    """
    stages = list(base)
    names = [n for n, _ in stages]
    if position == "first":
        at = 0
    elif position == "last":
        at = len(stages)
    else:
        where, _, target = position.partition(":")
        if where not in ("before", "after") or target not in names:
            raise ValueError(
                f"position must be 'first', 'last', 'before:NAME' or "
                f"'after:NAME' with NAME in {names}, found {position!r}"
            )
        at = names.index(target) + (where == "after")
    stages.insert(at, (name, stage))
    return tuple(stages)


# -- checkers ----------------------------------------------------------------------------------
def _where(view: Projection, pos: int) -> str:
    if 0 <= pos < len(view.events):
        event = view.events[pos]
        return f"position {pos} ({event.kind} {event.session}#{event.seq})"
    return f"position {pos}"


def _recount(message: Message, counter: TokenCounter) -> int:
    """Tokens of a message under the framing convention of ``turnlog._tokens``."""
    total = MESSAGE_OVERHEAD + (1 if message.role == "tool" else 0)
    for part in message.parts:
        if isinstance(part, TextPart):
            total += counter.count(part.text)
        elif isinstance(part, ToolCall):
            total += TOOL_CALL_OVERHEAD + counter.count(part.name) + counter.count(part.arguments)
        elif isinstance(part, ReasoningPart):
            total += counter.count(part.text) + counter.count(part.opaque)
        elif isinstance(part, ImagePart):
            total += IMAGE_TOKENS
        elif isinstance(part, NativePart):
            total += counter.count(part.data)
    return total


def check_budget(
    packed: Packed, policy: Policy, *, counter: TokenCounter | None = None, recount: bool = True
) -> None:
    """The prompt fits and its accounting adds up.

    Checks ``tokens <= policy.usable``; that ``sum(message_tokens) +
    sum(section_tokens) + budget.tools`` plus the framing (3 to prime the reply,
    3 for the system message when there is one) equals ``tokens``; and, with
    ``recount``, that every message, section and the tool schemas are counted
    as their content measures under ``counter`` (the packed tokenizer when None),
    never less.

    Raises:
        AssertionError: naming the message index or section that is off.
    """
    prompt = packed.prompt
    assert packed.budget.usable == policy.usable, (
        f"budget.usable {packed.budget.usable} != policy.usable {policy.usable}"
    )
    assert packed.tokens <= policy.usable, (
        f"prompt has {packed.tokens} tokens, over the usable budget {policy.usable} "
        f"by {packed.tokens - policy.usable}"
    )
    assert len(packed.message_tokens) == len(prompt.messages), (
        f"{len(packed.message_tokens)} message token counts for {len(prompt.messages)} messages"
    )
    assert len(packed.section_tokens) == len(prompt.system), (
        f"{len(packed.section_tokens)} section token counts for {len(prompt.system)} sections"
    )
    framing = REPLY_OVERHEAD + (MESSAGE_OVERHEAD if prompt.system else 0)
    parts = sum(packed.message_tokens) + sum(packed.section_tokens) + packed.budget.tools
    assert parts + framing == packed.tokens, (
        f"accounting: messages {sum(packed.message_tokens)} + sections "
        f"{sum(packed.section_tokens)} + tools {packed.budget.tools} + framing {framing} = "
        f"{parts + framing}, but the prompt claims {packed.tokens} tokens"
    )
    if not recount:
        return
    counter = counter or get_counter(packed.tokenizer)
    for i, (message, claimed) in enumerate(
        zip(prompt.messages, packed.message_tokens, strict=True)
    ):
        actual = _recount(message, counter)
        assert actual <= claimed <= actual + 1, (
            f"message {i} (role {message.role}, from positions {list(message.source)}) is "
            f"counted as {claimed} tokens but measures {actual}"
        )
    for i, (section, claimed) in enumerate(zip(prompt.system, packed.section_tokens, strict=True)):
        actual = counter.count(section.text) + 1
        assert actual == claimed, (
            f"system section {i} ({section.name!r}) is counted as "
            f"{claimed} tokens but measures {actual}"
        )
    tools = sum(
        TOOL_SCHEMA_OVERHEAD
        + counter.count(t.name)
        + counter.count(t.description)
        + counter.count(t.parameters)
        for t in prompt.tools
    )
    assert tools == packed.budget.tools, (
        f"tool schemas are counted as {packed.budget.tools} tokens but measure {tools}"
    )


def check_tool_pairs(prompt: Prompt) -> None:
    """Tool calls and results are paired: `Prompt.problems` finds nothing, every tool
    message answers a call of the assistant message that opens its run, no call is
    answered twice, no result is an orphan, and every call of an assistant message
    that is not the last message is answered.

    Raises:
        AssertionError: naming the message index.
    """
    problems = prompt.problems()
    assert not problems, "Prompt.problems: " + "; ".join(problems)
    opener = -1
    calls: dict[str, str] = {}
    answered: set[str] = set()
    messages = prompt.messages
    for i, message in enumerate(messages):
        if message.role == "tool":
            assert opener >= 0, (
                f"message {i}: tool result {message.tool_call_id!r} before any assistant message"
            )
            assert message.tool_call_id in calls, (
                f"message {i}: tool result {message.tool_call_id!r} is an orphan: message "
                f"{opener} makes calls {sorted(calls)}"
            )
            assert message.tool_call_id not in answered, (
                f"message {i}: call {message.tool_call_id!r} is answered twice"
            )
            answered.add(message.tool_call_id)
            continue
        if opener >= 0 and opener != len(messages) - 1:
            missing = sorted(set(calls) - answered)
            assert not missing, f"message {opener}: calls {missing} have no result"
        opener, calls, answered = -1, {}, set()
        if message.role == "assistant":
            opener = i
            calls = {c.id: c.name for c in message.tool_calls}


def _anchors(view: Projection, prompt: Prompt) -> list[tuple[int, int, int]]:
    """An order key per message: (unit anchor position, rank, position)."""
    keys: list[tuple[int, int, int]] = []
    call_pos: dict[str, int] = {}
    for i, message in enumerate(prompt.messages):
        if _is_marker(message):
            continue
        assert message.source, f"message {i} ({message.role}) names no source position"
        src = message.source[0]
        index = view.item_at.get(src)
        assert index is not None, (
            f"message {i} ({message.role}) comes from {_where(view, src)}, which is not a "
            "model-visible event of the view"
        )
        kind = view.items[index].kind
        if message.role == "assistant":
            for call in message.tool_calls:
                call_pos[call.id] = src
        if message.role == "tool":
            anchor = call_pos.get(message.tool_call_id)
            assert anchor is not None, (
                f"message {i}: tool result for {message.tool_call_id!r} comes before (or "
                "without) the assistant message that made the call"
            )
            if kind == "assistant":  # a placeholder for a result that never came
                keys.append((anchor, 2, i))
            else:
                assert src > anchor, (
                    f"message {i}: result at {_where(view, src)} precedes "
                    f"its call at position {anchor} in the log"
                )
                keys.append((anchor, 1, src))
        else:
            keys.append((src, 0, src))
    return keys


def check_order(view: Projection, packed: Packed) -> None:
    """Messages keep the relative order of their source events, except that a
    call's results come right after its assistant message (in arrival order,
    then placeholders for results that never came).

    Raises:
        AssertionError: naming the two message indexes out of order.
    """
    keys = _anchors(view, packed.prompt)
    sourced = [m for m in packed.prompt.messages if not _is_marker(m)]
    for i in range(1, len(keys)):
        assert keys[i - 1] < keys[i], (
            f"messages {i - 1} and {i} are out of order: message {i - 1} comes from "
            f"{_where(view, sourced[i - 1].source[0])}, message {i} from "
            f"{_where(view, sourced[i].source[0])}"
        )
    markers = [i for i, m in enumerate(packed.prompt.messages) if _is_marker(m)]
    assert len(markers) <= 1, f"messages {markers} are all trimming markers; a pack has one"


def _is_marker(message: Message) -> bool:
    """A trimming marker (rules 2): a user message with no source, in the marker's words."""
    return not message.source and message.role == "user" and message.text.startswith(_MARKER)


def _tail_units(view: Projection) -> range:
    """Units of the mandatory tail under rules 1, recomputed from the items."""
    users = [item for item in view.items if item.kind == "user" and item.unit >= 0]
    if users:
        start = users[-1].unit
    elif view.units:
        start = len(view.units) - 1
    else:
        start = 0
    return range(start, len(view.units))


def _tail_v2(view: Projection, steps: int) -> tuple[int, range]:
    """Rules 2, recomputed from the items: the unit of the latest user message (-1 when
    there is none) and the units of the last ``steps`` steps after it (a step starts
    at an assistant message)."""
    n_units = len(view.units)
    users = [item for item in view.items if item.kind == "user" and item.unit >= 0]
    opening = users[-1].unit if users else -1
    starts = [
        u
        for u in range(opening + 1, n_units)
        if view.items[view.units[u].items[0]].kind == "assistant"
    ]
    if len(starts) > steps:
        start = (
            starts[len(starts) - steps]
            if steps
            else (n_units if opening >= 0 else max(n_units - 1, 0))
        )
    elif opening >= 0:
        start = min(opening + 1, n_units)
    else:
        start = 0 if steps else max(n_units - 1, 0)
    return opening, range(start, n_units)


def _by_position(view: Projection, packed: Packed) -> dict[int, int]:
    """Lineage position -> index of the message that carries that event."""
    out: dict[int, int] = {}
    for i, message in enumerate(packed.prompt.messages):
        if _is_marker(message):
            continue
        src = message.source[0] if message.source else -1
        index = view.item_at.get(src)
        if message.role == "tool" and index is not None and view.items[index].kind != "tool":
            continue  # placeholder for a missing result
        assert src not in out, f"messages {out[src]} and {i} both come from {_where(view, src)}"
        out[src] = i
    return out


def check_mandatory_tail(
    view: Projection,
    packed: Packed,
    policy: Policy | None = None,
) -> None:
    """The mandatory tail is in the prompt.

    Rules 1: every item of the unit where the latest user turn starts, and of every
    unit after it, is in the prompt, verbatim or at worst truncated. Rules 2 (the
    whichever ``packed.rules`` names; ``policy`` gives ``tail_steps``): the latest user message
    is in the prompt, verbatim, truncated or clipped, and so is every item of the
    last ``tail_steps`` steps, except that the last resort of trimming (rule
    ``trim.tail``) may drop the oldest of those steps once every older unit that is
    not protected is out of the prompt.

    Raises:
        AssertionError: naming the position that was reduced or left out.
    """
    present = _by_position(view, packed)
    decisions = packed.decisions
    policy = msgspec.structs.replace(policy or Policy(), rules=packed.rules)
    if packed.rules >= 2:
        _check_tail_v2(view, packed, policy, present)
        return
    for unit in _tail_units(view):
        for index in view.units[unit].items:
            item = view.items[index]
            assert item.pos in present, (
                f"{_where(view, item.pos)} is in the mandatory tail (unit {unit}) but not in "
                "the prompt"
            )
            if decisions:
                decision = decisions[item.pos].decision
                assert decision in ("verbatim", "truncated"), (
                    f"{_where(view, item.pos)} is in the mandatory tail but was {decision} "
                    f"({decisions[item.pos].rule})"
                )


def _check_tail_v2(
    view: Projection, packed: Packed, policy: Policy, present: dict[int, int]
) -> None:
    decisions = packed.decisions
    opening, tail = _tail_v2(view, policy.tail_steps)
    kept_ok = ("verbatim", "truncated", "clipped")
    if opening >= 0:
        for index in view.units[opening].items:
            item = view.items[index]
            assert item.pos in present, (
                f"{_where(view, item.pos)} is the latest user message but not in the prompt"
            )
            if decisions:
                decision = decisions[item.pos]
                assert decision.decision in kept_ok, (
                    f"{_where(view, item.pos)} is the latest user message but was "
                    f"{decision.decision} ({decision.rule})"
                )
    dropped_tail = False
    for unit in tail:
        for index in view.units[unit].items:
            item = view.items[index]
            if not decisions:
                continue
            decision = decisions[item.pos]
            if decision.decision == "trimmed":
                assert decision.rule == "trim.tail", (
                    f"{_where(view, item.pos)} is in the last {policy.tail_steps} steps but "
                    f"was trimmed by {decision.rule}, not the last resort trim.tail"
                )
                dropped_tail = True
                continue
            assert item.pos in present, (
                f"{_where(view, item.pos)} is in the mandatory tail (unit {unit}) but not in "
                f"the prompt ({decision.decision}, {decision.rule})"
            )
            assert decision.decision in kept_ok, (
                f"{_where(view, item.pos)} is in the mandatory tail but was "
                f"{decision.decision} ({decision.rule})"
            )
    if dropped_tail and decisions:
        hard = {opening} | {u for u in range(max(opening, 0), len(view.units)) if _pending(view, u)}
        for pin in view.pins:
            at = view.item_at.get(pin)
            if at is not None and view.items[at].unit >= 0:
                hard.add(view.items[at].unit)
        first_tail = tail.start
        for unit in range(first_tail):
            if unit in hard:
                continue
            for index in view.units[unit].items:
                pos = view.items[index].pos
                assert pos not in present, (
                    f"a protected step was trimmed (trim.tail) while the older "
                    f"{_where(view, pos)} is still in the prompt"
                )


def _same_content(view: Projection, pos: int, message: Message) -> str:
    """Why a verbatim message differs from its event ("" when it does not)."""
    body = view.events[pos].body
    if isinstance(body, ToolResultAdded):
        ok = (
            message.role == "tool"
            and message.text == body.output
            and (
                message.tool_call_id == body.call_id
                or message.tool_call_id.startswith(body.call_id + "_")
            )
        )
    elif isinstance(body, AssistantMessageAdded):
        # call ids may go out renamed (rules 2: unique within the prompt)
        ok = (
            message.role == "assistant"
            and len(message.parts) == len(body.parts)
            and all(
                a == b
                or (
                    isinstance(a, ToolCall)
                    and isinstance(b, ToolCall)
                    and msgspec.structs.replace(a, id=b.id) == b
                )
                for a, b in zip(message.parts, body.parts, strict=True)
            )
        )
    elif isinstance(body, UserMessageAdded):
        ok = (
            message.role == "user"
            and message.text in (body.text, "(empty message)")
            and tuple(p for p in message.parts if isinstance(p, ImagePart)) == body.images
        )
    elif isinstance(body, (NotificationAdded, RecallAdded)):
        ok = message.role == "user"
    else:
        return f"a {type(body).__name__} cannot be a message"
    return "" if ok else f"message content differs from the {view.events[pos].kind} event"


def check_decisions(view: Projection, packed: Packed) -> None:
    """Exactly one decision per lineage event, in position order, each one of
    `DECISIONS`, and consistent with the prompt: an item decided verbatim,
    truncated, deduplicated or pruned is in the prompt (verbatim ones unchanged,
    with the decision's tokens); one summarized, trimmed or dropped is not; a
    section or tool set decided verbatim is in the prompt as logged.

    Raises:
        AssertionError: naming the position.
    """
    decisions = packed.decisions
    n = len(view.events)
    assert len(decisions) == n, f"{len(decisions)} decisions for {n} lineage events"
    present = _by_position(view, packed)
    for pos, decision in enumerate(decisions):
        event = view.events[pos]
        assert decision.pos == pos, f"decision {pos} names position {decision.pos}"
        assert (decision.session, decision.seq, decision.kind) == (
            event.session,
            event.seq,
            event.kind,
        ), (
            f"decision {pos} names {decision.kind} {decision.session}#{decision.seq}, the "
            f"event is {_where(view, pos)}"
        )
        assert decision.decision in DECISIONS, (
            f"{_where(view, pos)}: unknown decision {decision.decision!r}"
        )
        index = view.item_at.get(pos)
        if index is not None:
            if decision.decision in _PRESENT:
                assert pos in present, (
                    f"{_where(view, pos)} is {decision.decision} "
                    f"({decision.rule}) but not in the prompt"
                )
                i = present[pos]
                assert decision.tokens == packed.message_tokens[i], (
                    f"{_where(view, pos)}: decision says {decision.tokens} tokens, message {i} "
                    f"is counted as {packed.message_tokens[i]}"
                )
                if decision.decision == "verbatim":
                    why = _same_content(view, pos, packed.prompt.messages[i])
                    assert not why, f"{_where(view, pos)} is verbatim but message {i}: {why}"
            else:
                assert decision.decision in _ABSENT, (
                    f"{_where(view, pos)} is a model-visible event decided {decision.decision!r}"
                )
                assert pos not in present, (
                    f"{_where(view, pos)} is {decision.decision} ({decision.rule}) but message "
                    f"{present[pos]} carries it"
                )
            continue
        assert pos not in present, (
            f"{_where(view, pos)} is not an item but message {present.get(pos)} carries it"
        )
        body = event.body
        if decision.decision == "verbatim" and isinstance(body, SystemSectionSet):
            found = [s for s in packed.prompt.system if s.name == body.name]
            assert found and found[0].text == body.text, (
                f"{_where(view, pos)}: section {body.name!r} is verbatim but the prompt has "
                f"{[s.name for s in packed.prompt.system]}"
            )
        elif decision.decision == "verbatim" and isinstance(body, ToolsSet):
            assert packed.prompt.tools == body.tools, (
                f"{_where(view, pos)}: tool set is verbatim but the prompt's tools differ"
            )
        elif decision.decision == "verbatim" and isinstance(body, CompactionCommitted):
            summary = [s for s in packed.prompt.system if s.name == "conversation_summary"]
            assert summary and body.summary in summary[0].text, (
                f"{_where(view, pos)}: summary is shown but not in conversation_summary"
            )
        elif isinstance(body, (SystemSectionSet, ToolsSet, CompactionCommitted)):
            assert decision.decision == "dropped", (
                f"{_where(view, pos)} is decided {decision.decision!r}"
            )
        elif pos in view.rewound:
            assert decision.decision == "dropped", (
                f"{_where(view, pos)} was rewound but is decided {decision.decision!r}"
            )
        else:
            assert decision.decision in ("not_a_prompt_event", "dropped"), (
                f"{_where(view, pos)} is decided {decision.decision!r}"
            )
    for pos, i in present.items():
        assert view.item_at.get(pos) is not None, (
            f"message {i} comes from {_where(view, pos)}, not a model-visible event"
        )


def _pending(view: Projection, unit: int) -> set[str]:
    items = view.units[unit].items
    first = view.items[items[0]].event.body
    if not isinstance(first, AssistantMessageAdded):
        return set()
    calls = {p.id for p in first.parts if isinstance(p, ToolCall)}
    answered = {view.items[i].call_id for i in items[1:]}
    return calls - answered


def check_protected(view: Projection, packed: Packed) -> None:
    """Units holding a pinned event and units with a call still waiting for its
    result (rules 2: a call of the current turn) are never pruned, deduplicated,
    trimmed or summarized.

    Raises:
        AssertionError: naming the position and why it is protected.
    """
    decisions = packed.decisions
    why: dict[int, str] = {}
    for pos in sorted(view.pins):
        index = view.item_at.get(pos)
        if index is not None and view.items[index].unit >= 0:
            why.setdefault(view.items[index].unit, f"pinned position {pos}")
    # rules 2: only calls of the current turn await a result (earlier ones were abandoned)
    start = max(_tail_v2(view, 0)[0], 0) if packed.rules >= 2 else 0
    for unit in range(start, len(view.units)):
        pending = _pending(view, unit)
        if pending:
            why.setdefault(unit, f"calls {sorted(pending)} await a result")
    for unit, reason in sorted(why.items()):
        for index in view.units[unit].items:
            item = view.items[index]
            decision = decisions[item.pos]
            assert decision.decision not in _REDUCED, (
                f"{_where(view, item.pos)} is protected ({reason}) but was "
                f"{decision.decision} ({decision.rule})"
            )


def check_overflow(view: Projection, policy: Policy, error: BudgetExceededError) -> None:
    """A `BudgetExceededError` is justified: the protected part alone (static
    system sections, tool schemas, framing, and the mandatory tail, pinned units
    and units awaiting a result, truncated as far as the policy allows, plus the
    placeholder results for calls that have none) exceeds the usable budget, and the error's
    numbers say by how much. With ``policy.trim`` off, only the numbers are checked.

    Raises:
        AssertionError: the packer gave up although the protected part fits.
    """
    assert error.usable == policy.usable, (
        f"error names usable {error.usable}, the policy has {policy.usable}"
    )
    assert error.needed > error.usable, f"error needs {error.needed} <= usable {error.usable}"
    assert f"Over by {error.needed - error.usable} tokens" in str(error), (
        f"the message does not say by how much: {error}"
    )
    if not policy.trim:
        return
    policy = policy.resolved()  # as `pack` packs it
    state = PackState(view, policy, view.counter)
    if policy.truncate:
        dict(DEFAULT_STAGES)["truncate"](state)
    rules2 = policy.rules_version >= 2
    if rules2:
        dict(DEFAULT_STAGES)["clip"](state)
        opening = _tail_v2(view, policy.tail_steps)[0]
        keep: set[int] = {opening} if opening >= 0 else set()
        assert "floor" in str(error), f"the message does not name the floor: {error}"
    else:
        keep = set(_tail_units(view))
    for pos in view.pins:
        index = view.item_at.get(pos)
        if index is not None and view.items[index].unit >= 0:
            keep.add(view.items[index].unit)
    # The placeholder results the prompt needs for calls that have none are the
    # packer's own (``synthetic_tokens``): their wording is its business.
    floor = state.system_tokens + state.tools_tokens + REPLY_OVERHEAD + state.synthetic_tokens
    first = max(min(keep), 0) if rules2 and keep else 0
    for unit in range(first, len(view.units)):
        if _pending(view, unit):
            keep.add(unit)
    for unit in keep:
        floor += sum(state.tokens_of(i) for i in view.units[unit].items)
    if rules2:
        # the marker naming the trimmed history is part of the floor
        floor += MESSAGE_OVERHEAD + view.counter.count(
            _MARKER + f" (positions {len(view.events)}-{len(view.events)}) was left out of "
            "this prompt to fit the context window; it is in the log: `turnlog log "
            f"{view.events[-1].session if view.events else ''} --from {len(view.events)}`]"
        )
    assert floor > policy.usable, (
        f"BudgetExceededError ({error.needed} needed) although the protected part needs only "
        f"{floor} of {policy.usable} usable tokens: {str(error)[:200]}"
    )


def check_summaries(view: Projection, packed: Packed, policy: Policy) -> None:
    """The summaries stage's report and the decisions agree.

    The report's "N summaries shown, M events summarized" matches the decisions: N
    compactions decided verbatim (their summary in ``conversation_summary``), M
    events decided ``summarized``, each naming a compaction that is committed in
    the view and whose span holds it (or completes a tool exchange it cuts). When
    the stage did not fire, no event is summarized by it and no summary is shown
    (under rules 3 the report may open with the prefix break the summaries make). An
    event inside the span of a shown summary is never decided ``trimmed`` (it is
    summarized, or in the prompt when protected). Skipped when a custom stage
    decided events (it may change the prompt after the report). Under rules 2 with
    ``summary_budget`` 0 nothing is summarized: covered events are packed as if no
    compaction existed.

    Raises:
        AssertionError: naming the report or the position that disagrees.
    """
    decisions = packed.decisions
    if not decisions:
        return
    if any(d.rule.split(".", 1)[0] not in _BUILTIN_RULES and d.rule != d.kind for d in decisions):
        return  # a custom stage changed the prompt after the summaries stage reported
    reports = [r for r in packed.stages if r.name == "summaries"]
    # (a custom stage may summarize items itself, under its own rule)
    summarized = [
        d for d in decisions if d.decision == "summarized" and d.rule.startswith("summaries.")
    ]
    shown = [d.pos for d in decisions if d.kind == "compaction" and d.decision == "verbatim"]
    if not reports or not reports[0].fired:
        assert not summarized, (
            f"the summaries stage did not fire ({reports[0].detail if reports else 'absent'})"
            f" but {_where(view, summarized[0].pos)} is decided summarized"
        )
        assert not shown, (
            f"the summaries stage did not fire but the summary at "
            f"{_where(view, shown[0])} is decided shown"
        )
    else:
        report = reports[0]
        expected = summaries_shown(len(shown), len(summarized))
        # rules 3 put a prefix break first when the summaries change the prefix
        said = report.detail
        if said.startswith("prefix break: "):
            said = said.split("; ")[1]
        assert said == expected, (
            f"the summaries stage reports {said!r}; the decisions say {expected!r}"
        )
        assert report.events == len(summarized), (
            f"the summaries stage counts {report.events} events; {len(summarized)} are "
            "decided summarized"
        )
    if packed.rules >= 2 and policy.summary_budget == 0:
        assert not summarized, (
            f"summary_budget is 0 but {_where(view, summarized[0].pos)} is decided summarized"
        )
    spans: dict[int, tuple[int, int]] = {}
    for pos in view.compactions:
        body = view.events[pos].body
        assert isinstance(body, CompactionCommitted)
        spans[pos] = (body.first_seq, body.last_seq)
    for decision in summarized:
        detail = decision.detail
        assert detail.startswith("covered by compaction #"), (
            f"{_where(view, decision.pos)} is summarized but names no compaction: {detail!r}"
        )
        at = int(detail.removeprefix("covered by compaction #").split(" ", 1)[0])
        assert at in spans, (
            f"{_where(view, decision.pos)} is summarized by position {at}, "
            "which is no committed compaction of the view"
        )
        first, last = spans[at]
        if "completes a tool exchange" not in detail:
            assert first <= decision.pos <= last, (
                f"{_where(view, decision.pos)} is summarized by compaction #{at}, whose span "
                f"{first}-{last} does not hold it"
            )
    for pos in shown:
        first, last = spans[pos]
        for covered in range(first, min(last + 1, len(decisions))):
            if view.item_at.get(covered) is None:
                continue
            decision = decisions[covered]
            assert decision.decision != "trimmed", (
                f"{_where(view, covered)} is covered by the shown summary #{pos} but decided "
                f"trimmed ({decision.rule}): it is summarized"
            )


def check_packed(view: Projection, packed: Packed, policy: Policy) -> None:
    """Every single-pack checker: budget, tool pairs, order, mandatory tail,
    decisions, protections, summaries."""
    check_budget(packed, policy)
    check_tool_pairs(packed.prompt)
    check_order(view, packed)
    check_decisions(view, packed)
    check_mandatory_tail(view, packed, policy)
    check_protected(view, packed)
    check_summaries(view, packed, policy)


def check_deterministic(
    view_factory: Callable[[], Projection],
    policy: Policy,
    *,
    stages: Sequence[tuple[str, Stage]] | None = None,
) -> Packed | None:
    """Packing is a function of its inputs: two fresh projections give identical
    ``prompt.encode()`` and decisions, and so does packing the same projection again.

    Returns:
        The first `Packed`, or None when both raised the same `BudgetExceededError`.
    Raises:
        AssertionError: naming the first differing part.
    """
    results: list[Packed | str] = []
    first_view = view_factory()
    for view in (first_view, view_factory(), first_view):
        try:
            results.append(pack(view, policy, stages=stages))
        except BudgetExceededError as exc:
            results.append(str(exc))
    first = results[0]
    for n, other in enumerate(results[1:], 1):
        label = "a fresh projection" if n == 1 else "the same projection packed again"
        if isinstance(first, str) or isinstance(other, str):
            assert first == other, (
                f"{label}: one pack raised, the other did not "
                f"({first if isinstance(first, str) else other})"
            )
            continue
        if first.prompt.encode() != other.prompt.encode():
            raise AssertionError(
                f"{label} gives different prompt bytes: first difference "
                f"at {first.prompt.first_difference(other.prompt)}"
            )
        assert first.decisions == other.decisions, f"{label} gives different decisions"
        assert first.tokens == other.tokens, (
            f"{label} gives {other.tokens} tokens, not {first.tokens}"
        )
    return None if isinstance(first, str) else first


def check_all(
    view_factory: Callable[[], Projection],
    policy: Policy,
    *,
    stages: Sequence[tuple[str, Stage]] | None = None,
) -> Packed | None:
    """Pack a fresh projection and run every checker, determinism included.

    A `BudgetExceededError` is accepted only when `check_overflow` confirms it.

    Returns:
        The `Packed` result, or None when the budget was (rightly) exceeded.
    """
    view = view_factory()
    try:
        packed = pack(view, policy, stages=stages)
    except BudgetExceededError as exc:
        check_overflow(view, policy, exc)
        check_deterministic(view_factory, policy, stages=stages)
        return None
    check_packed(view, packed, policy)
    check_deterministic(view_factory, policy, stages=stages)
    return packed


def check_stage(
    stage_name: str,
    stage: Stage,
    session_items: Sequence[SessionItem],
    policy: Policy,
    position: str = "before:trim",
) -> Packed | None:
    """Check a custom stage against every invariant on one session.

    Builds an in-memory log from ``session_items`` (see `sessions`), packs it with
    ``stage`` inserted into a copy of `DEFAULT_STAGES` at ``position`` (see
    `with_stage`), and runs `check_all`.

    Returns:
        The `Packed` result, or None when the budget was (rightly) exceeded.
    Raises:
        AssertionError: an invariant does not hold; the message says which and where.
    """
    log = memory_log()
    session = build(log, "check-stage", session_items)
    stages = with_stage(stage_name, stage, position)
    return check_all(lambda: project(log, session), policy, stages=stages)

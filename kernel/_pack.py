"""Deterministic packing: (projection, policy, token counter) -> prompt + explanation.

Theory of operation
-------------------
`pack` is a pure function. It reads no clock, no environment, no randomness
and does no I/O; the same projection state, policy and counter give the same
bytes. It works on *units* (see ``view``): a unit is dropped or kept whole,
so a tool call is never separated from its results and no result is left
without its call. Content inside a kept unit may be replaced (truncated,
deduplicated, pruned), never reordered or removed.

Stages, in order (each switchable by policy, each reported):

1. **budget plan**: usable = window - output reserve - safety margin;
   history budget = usable - system sections - tool schemas - reply framing;
   warning / compact / blocking levels (`Policy.level`).
2. **truncate**: tool outputs and notifications over ``truncate_lines`` or
   ``truncate_bytes`` keep head and tail; the notice says where the whole
   output is (its blob, or the event itself). Blob previews count as
   truncated. Recall results are capped by chars and tokens.
3. **summaries**: events covered by committed compactions are replaced by
   their summaries, which go to the ``conversation_summary`` system section,
   filled breadth-first from the highest level within the summary budget.
   (This runs before dedup so that the pressure gates below see the history
   the model will actually get.)
4. **dedup** (pressure >= warning): superseded tool results become the seed
   placeholders: exact repeats, reads made stale by an edit and a re-read,
   greps subsumed by a later full read.
5. **prune** (pressure >= warning, savings >= ``prune_min_savings``): tool
   results outside the protected region become placeholders keeping tool name
   and target, most prunable first (kind weight minus bonuses for references
   by later assistant text and decision language), until the warning level.
6. **trim** (total > blocking level): whole turns are dropped oldest first,
   so the kept history starts at a user message; the mandatory tail (from the
   latest user message) is never dropped. If it cannot fit even so,
   `BudgetExceededError` says by how much.
7. **cache breakpoints**: end of the static system sections, the latest
   message, the end of older history, the end of the summary sections; at
   most ``cache_breakpoints`` of them, in that priority.

Protected, always: the mandatory tail, pinned events and units with a call
still waiting for its result are never deduplicated, pruned, summarized or
trimmed. Custom stages (`Stage`) run through the same `PackState` methods,
which enforce these protections, so a custom rule cannot split a tool pair.

Every event of the lineage gets exactly one `Decision` (built when
``Packed.decisions`` is first read, from what the pack decided).

Cost: with the built-in stages, `pack` does not run the stages item by item;
it reads running totals the projection keeps per policy (tokens after
truncation, what dedup and pruning save, per-unit sums, the units committed
summaries cover) and finds the trim cut by binary search, so a pack after one
append costs about O(log n) plus the prompt it returns. The result is the same
as running the stages (``tests/test_pack_paths.py``); custom pipelines, and
pruning that stops part-way (where the order of candidates decides), take the
stage-by-stage path.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import Literal, TypedDict

import msgspec

from ._errors import BudgetExceededError, PackError
from ._events import (
    AssistantMessageAdded,
    CompactionCommitted,
    NotificationAdded,
    Part,
    PolicySet,
    RecallAdded,
    SystemSectionSet,
    TextPart,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)
from ._policy import Policy
from ._projection import EMPTY_ASSISTANT_TEXT, EMPTY_USER_TEXT, DedupIndex, Item, Projection
from ._projection import notification_text as _notification_text
from ._projection import recall_text as _recall_text
from ._prompt import Breakpoint, Message, Prompt, Section
from ._tokens import MESSAGE_OVERHEAD, REPLY_OVERHEAD, TokenCounter

__all__ = [
    "Budget",
    "DECISIONS",
    "DEFAULT_STAGES",
    "Decision",
    "PackState",
    "Packed",
    "SUMMARY_SECTION",
    "Stage",
    "StageReport",
    "pack",
]

DecisionName = Literal["verbatim", "truncated", "deduplicated", "pruned", "summarized",
                       "trimmed", "dropped", "not_a_prompt_event"]
DECISIONS: tuple[str, ...] = ("verbatim", "truncated", "deduplicated", "pruned", "summarized",
                              "trimmed", "dropped", "not_a_prompt_event")
SUMMARY_SECTION = "conversation_summary"
_SUMMARY_POSITION = 2**62
_DEDUP_TEXT = {
    1: "[Superseded -- identical result returned by later call]",
    2: "[Superseded -- file was re-read after modification]",
    3: "[Superseded -- content included in later file_read of {name}]",
}
_MISSING_RESULT = "[no result was recorded for this call]"
_PENDING_RESULT = "[no result yet: the call has not returned]"


class Decision(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What packing did with one event, by which rule, with which numbers.

    Attributes:
        pos: lineage position.
        session: the event's session.
        seq: the event's seq in its session.
        kind: the event's tag.
        decision: one of `DECISIONS`.
        rule: the stage and rule (``truncate.lines``, ``trim.turn``...).
        detail: the numbers, in words.
        tokens: tokens the event contributes to this prompt.
        original_tokens: tokens it would contribute verbatim.
    """

    pos: int
    session: str
    seq: int
    kind: str
    decision: str
    rule: str
    detail: str = ""
    tokens: int = 0
    original_tokens: int = 0


class StageReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one stage did: whether it fired, why, and its numbers."""

    name: str
    fired: bool
    detail: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    events: int = 0


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """The budget plan of a pack (all in tokens)."""

    window: int
    output_reserve: int
    safety_margin: int
    usable: int
    system: int
    tools: int
    summary: int
    history: int
    warning: int
    compact: int
    blocking: int


class _Slot:
    """The running decision for one item."""

    __slots__ = ("decision", "detail", "parts", "rule", "tokens")

    def __init__(self, tokens: int) -> None:
        self.decision: DecisionName = "verbatim"
        self.rule = "verbatim"
        self.detail = ""
        self.tokens = tokens
        self.parts: tuple[Part, ...] | None = None


class PackState:
    """The running state stages read and change.

    Stages change it only through `replace` and `drop_unit`, which refuse to
    touch protected units (mandatory tail, pinned, waiting for a result).
    """

    def __init__(self, view: Projection, policy: Policy, counter: TokenCounter) -> None:
        self.view = view
        self.policy = policy
        self.counter = counter
        self.slots: dict[int, _Slot] = {}
        self.dropped: dict[int, tuple[DecisionName, str, str]] = {}  # unit -> decision
        self.summarized: dict[int, tuple[str, str]] = {}  # item -> (rule, detail)
        self.reports: list[StageReport] = []
        self.summary_text = ""
        self.summary_shown: dict[int, str] = {}  # compaction pos -> "" or why not shown
        self.summary_tokens = 0
        units = view.units
        self.tail_unit = (view.turn_starts[-1] if view.turn_starts
                          else max(len(units) - 1, 0))
        self.protected_units: set[int] = set(range(self.tail_unit, len(units)))
        self.protected_units.update(view.open_units)
        self.protected_units.update(_pinned_units(view))
        self.message_tokens = view.unit_tokens  # the sum over every unit's items
        self.system_tokens = _system_tokens(view)
        self.tools_tokens = view.tools_tokens
        self.synthetic_tokens = _synthetic_tokens(view, counter)
        self.budget = _budget(policy, self.system_tokens, self.tools_tokens)
        self.summary_budget = max(0, int(self.budget.history * policy.summary_budget))

    # -- accounting --------------------------------------------------------------
    @property
    def total(self) -> int:
        """Tokens of the whole prompt as it stands."""
        return (self.system_tokens + self.summary_tokens + self.tools_tokens
                + self.message_tokens + self.synthetic_tokens + REPLY_OVERHEAD)

    @property
    def pressure(self) -> float:
        """``total / usable``."""
        return self.total / max(self.policy.usable, 1)

    def tokens_of(self, index: int) -> int:
        """Current tokens of an item."""
        slot = self.slots.get(index)
        return slot.tokens if slot is not None else self.view.items[index].tokens

    def decision_of(self, index: int) -> str:
        """Current decision of an item."""
        item = self.view.items[index]
        if item.unit in self.dropped:
            return self.dropped[item.unit][0]
        if index in self.summarized:
            return "summarized"
        slot = self.slots.get(index)
        return slot.decision if slot is not None else "verbatim"

    def is_protected(self, unit: int) -> bool:
        """True for the mandatory tail, pinned units and units awaiting a result."""
        return unit in self.protected_units

    def is_live(self, index: int) -> bool:
        """True when the item is still headed for the prompt unchanged or replaced."""
        item = self.view.items[index]
        return item.unit >= 0 and item.unit not in self.dropped and index not in self.summarized

    # -- changes -------------------------------------------------------------------
    def replace(self, index: int, text: str, *, decision: DecisionName, rule: str,
                detail: str = "", tokens: int | None = None) -> bool:
        """Replace the content of a tool result, notification or recall item.

        Returns False (and changes nothing) for a protected unit, a dropped or
        summarized item, or a user/assistant message.
        """
        item = self.view.items[index]
        if item.kind not in ("tool", "notification", "recall") or not self.is_live(index):
            return False
        if decision not in ("truncated",) and self.is_protected(item.unit):
            return False
        slot = self.slots.get(index)
        if slot is None:
            slot = self.slots[index] = _Slot(item.tokens)
        new_tokens = (MESSAGE_OVERHEAD + 1 + self.counter.count(text) if tokens is None
                      else tokens)
        self.message_tokens += new_tokens - slot.tokens
        slot.tokens = new_tokens
        slot.parts = (TextPart(text=text),)
        slot.decision = decision
        slot.rule = rule
        slot.detail = detail
        return True

    def drop_unit(self, unit: int, *, decision: DecisionName, rule: str, detail: str = "",
                  ) -> bool:
        """Drop a whole unit (a message, or a call with all its results).

        Returns False (and changes nothing) for a protected or already dropped unit.
        """
        if unit in self.dropped or self.is_protected(unit):
            return False
        for index in self.view.units[unit].items:
            if index not in self.summarized:
                self.message_tokens -= self.tokens_of(index)
        self.dropped[unit] = (decision, rule, detail)
        return True

    def summarize(self, index: int, rule: str, detail: str) -> bool:
        """Mark an item as covered by a summary (its unit must be wholly covered)."""
        item = self.view.items[index]
        if item.unit < 0 or self.is_protected(item.unit) or not self.is_live(index):
            return False
        self.message_tokens -= self.tokens_of(index)
        self.summarized[index] = (rule, detail)
        return True


def _pinned_units(view: Projection) -> set[int]:
    out: set[int] = set()
    items = view.items
    for pos in view.pins:
        index = view.item_at.get(pos)
        if index is not None and items[index].unit >= 0:
            out.add(items[index].unit)
    return out


def _system_tokens(view: Projection) -> int:
    return sum(view.section_tokens.values()) + (MESSAGE_OVERHEAD if view.sections else 0)


def _synthetic_tokens(view: Projection, counter: TokenCounter) -> int:
    """Tokens of the placeholder results that answer every call without one (see
    `_assemble`)."""
    units = view.units
    return sum((MESSAGE_OVERHEAD + 1 + counter.count(_placeholder_result(u, len(units))))
               * len(units[u].open_calls) for u in sorted(view.open_units))


def _budget(policy: Policy, system_tokens: int, tools_tokens: int) -> Budget:
    return Budget(
        window=policy.context_window, output_reserve=policy.output_reserve,
        safety_margin=policy.safety_margin, usable=policy.usable,
        system=system_tokens, tools=tools_tokens, summary=0,
        history=policy.usable - system_tokens - tools_tokens - REPLY_OVERHEAD,
        warning=policy.level("warning"), compact=policy.level("compact"),
        blocking=policy.level("blocking"))


#: A custom stage: reads and changes the `PackState`, returns a report (or None).
Stage = Callable[[PackState], "StageReport | None"]


# -- stages ----------------------------------------------------------------------------
def truncate_stage(state: PackState) -> StageReport:
    """Stage 2: cut oversized tool outputs/notifications, cap recall results."""
    policy = state.policy
    before = state.total
    count = 0
    if not policy.truncate:
        return StageReport(name="truncate", fired=False, detail="disabled by policy")
    key = _trunc_key(policy)
    for item in state.view.items:
        if item.kind not in ("tool", "notification", "recall") or item.unit < 0:
            continue
        _, rule, text, tokens = _truncation(item, key, policy, state.counter)
        if rule and state.replace(item.index, text, decision="truncated", rule=rule,
                                  detail=_trunc_detail(item, rule), tokens=tokens):
            count += 1
    return StageReport(name="truncate", fired=count > 0, detail=f"{count} outputs truncated",
                       tokens_before=before, tokens_after=state.total, events=count)


def _trunc_key(policy: Policy) -> tuple[float, ...]:
    """Everything `_truncated_text` reads from the policy (the truncation cache key)."""
    return (policy.truncate_lines, policy.truncate_bytes, policy.truncate_head_ratio,
            policy.recall_max_chars, policy.recall_max_tokens)


def _truncation(item: Item, key: tuple[float, ...], policy: Policy, counter: TokenCounter,
                ) -> tuple[tuple[float, ...], str, str, int]:
    """``(key, rule, text, tokens)`` of an item's truncation, cached on the item."""
    cached = item.trunc
    if cached is None or cached[0] != key:
        text, rule = _truncated_text(item, policy, counter)
        tokens = MESSAGE_OVERHEAD + 1 + counter.count(text) if rule else 0
        item.trunc = cached = (key, rule, text, tokens)
    return cached


def _trunc_detail(item: Item, rule: str) -> str:
    body = item.event.body
    blob = getattr(body, "blob", None)
    if rule == "truncate.blob_preview" and blob is not None:
        return f"stored as blob {blob.hash[:16]} ({blob.size} bytes); preview kept"
    return rule.removeprefix("truncate.")


def _truncated_text(item: Item, policy: Policy, counter: TokenCounter) -> tuple[str, str]:
    """(text, rule) for an item after truncation; rule is "" when untouched."""
    body = item.event.body
    if isinstance(body, RecallAdded):
        return _capped_recall(body, policy, counter)
    if isinstance(body, NotificationAdded):
        text = body.text
        blob = body.blob
    elif isinstance(body, ToolResultAdded):
        text = body.output
        blob = body.blob
    else:
        return "", ""
    n_lines = text.count("\n") + 1
    # n characters are n to 4n UTF-8 bytes: encode only when it can matter.
    data_len = (len(text.encode("utf-8", "surrogatepass")) if len(text) * 4 > policy.truncate_bytes
                else len(text))
    if n_lines <= policy.truncate_lines and data_len <= policy.truncate_bytes:
        if blob is not None:
            return _render_tool_text(item, text), "truncate.blob_preview"
        return "", ""
    where = (f"blob {blob.hash} (read it back with `turnlog blob {blob.hash}`)" if blob
             else f"event {item.event.session}#{item.event.seq} (`turnlog show "
                  f"{item.event.session} {item.event.seq}`)")
    lines = text.split("\n")
    head_lines = max(1, int(policy.truncate_lines * policy.truncate_head_ratio))
    tail_lines = max(1, policy.truncate_lines - head_lines)
    head_bytes = max(16, int(policy.truncate_bytes * policy.truncate_head_ratio))
    tail_bytes = max(16, policy.truncate_bytes - head_bytes)
    if len(lines) > head_lines + tail_lines:
        head = "\n".join(lines[:head_lines])
        tail = "\n".join(lines[-tail_lines:])
    else:  # over the byte limit in few (maybe one) lines: cut the text itself
        head = tail = text
    head = _cut_bytes(head, head_bytes, from_end=False)
    tail = _cut_bytes(tail, tail_bytes, from_end=True)
    omitted_chars = max(0, len(text) - len(head) - len(tail))
    omitted_lines = max(0, len(lines) - head.count("\n") - tail.count("\n") - 2)
    rule = "truncate.lines" if len(lines) > policy.truncate_lines else "truncate.bytes"
    notice = (f"\n[... truncated: {omitted_lines} lines ({omitted_chars} characters) omitted. "
              f"The full output is {where}; inspect it with targeted grep/read calls rather "
              f"than pasting it back into context ...]\n")
    return _render_tool_text(item, head + notice + tail), rule


def _cut_bytes(text: str, limit: int, *, from_end: bool) -> str:
    if len(text) <= limit // 4:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    piece = data[len(data) - limit:] if from_end else data[:limit]
    return piece.decode("utf-8", "ignore")


def _render_tool_text(item: Item, text: str) -> str:
    body = item.event.body
    if isinstance(body, NotificationAdded):
        return _notification_text(body.source, text)
    return text


def _capped_recall(body: RecallAdded, policy: Policy, counter: TokenCounter) -> tuple[str, str]:
    full = _recall_text(body, len(body.hits))
    if len(full) <= policy.recall_max_chars and counter.count(full) <= policy.recall_max_tokens:
        return "", ""
    keep = len(body.hits)
    text = full
    while keep > 0:
        keep -= 1
        text = _recall_text(body, keep)
        if len(text) <= policy.recall_max_chars and \
                counter.count(text) <= policy.recall_max_tokens:
            break
    if len(text) > policy.recall_max_chars:
        text = text[:policy.recall_max_chars]
    return text, "truncate.recall_cap"


def summary_stage(state: PackState) -> StageReport:
    """Stage 3: substitute committed compactions; build the summary section."""
    view = state.view
    before = state.total
    if not view.compactions:
        return StageReport(name="summaries", fired=False, detail="no compaction committed")
    # The summaries never take the room the protected part (mandatory tail,
    # pins, calls awaiting results) needs: that part cannot be trimmed.
    protected = state.synthetic_tokens + sum(
        state.tokens_of(i) for u in state.protected_units for i in view.units[u].items)
    plan = _SummaryPlan(view, state.counter, state.budget.history, state.summary_budget,
                        protected)
    state.summary_shown.update(plan.why)
    bodies = plan.bodies
    covered = 0
    for pos in sorted(bodies, key=lambda p: (bodies[p].level, p)):
        body = bodies[pos]
        for cpos in range(body.first_seq, body.last_seq + 1):
            index = view.item_at.get(cpos)
            if index is None or index in state.summarized:
                continue
            if state.summarize(index, "summaries.compaction", _summarized_detail(pos, body)):
                covered += 1
    # A unit cut by a summary boundary would split a tool pair: summarize its
    # remaining items too, or restore the ones summarized (when protected).
    _close_units(state)
    framing = 0
    if plan.shown:
        framing = plan.framing
        state.summary_text = plan.text
        state.summary_tokens = plan.tokens
        state.system_tokens += framing
    state.budget = msgspec.structs.replace(
        state.budget, summary=state.summary_tokens, system=state.system_tokens,
        history=state.budget.history - state.summary_tokens - framing)
    return StageReport(name="summaries", fired=True,
                       detail=f"{len(plan.shown)} summaries shown, {covered} events summarized",
                       tokens_before=before, tokens_after=state.total, events=covered)


def _summarized_detail(pos: int, body: CompactionCommitted) -> str:
    return (f"covered by compaction #{pos} (level {body.level}, positions "
            f"{body.first_seq}-{body.last_seq})")


class _SummaryPlan:
    """Which committed summaries the prompt shows, and its summary section.

    Parameters:
        history: the history budget before summaries.
        budget: the summary budget (``summary_budget`` x history).
        protected: tokens of the protected part (tail, pins, calls awaiting
            results, their placeholder results), which summaries never take.

    Attributes:
        bodies: every committed compaction of the view, by position.
        shown: positions of the summaries shown, oldest span first.
        text: the summary section ("" when none is shown); tokens: its tokens.
        framing: system-message framing the section adds when it opens it.
        why: why a compaction is not shown ("" when it is).
    """

    def __init__(self, view: Projection, counter: TokenCounter, history: int, budget: int,
                 protected: int) -> None:
        bodies: dict[int, CompactionCommitted] = {}
        for pos in view.compactions:
            body = view.events[pos].body
            assert isinstance(body, CompactionCommitted)
            bodies[pos] = body
        self.bodies = bodies
        self.why: dict[int, str] = {}
        children_of = {pos: [c for c in b.children if c in bodies] for pos, b in bodies.items()}
        is_child = {c for kids in children_of.values() for c in kids}
        roots = sorted(pos for pos in bodies if pos not in is_child)
        # A later root whose span contains an earlier root's span supersedes it.
        kept_roots: list[int] = []
        for pos in roots:
            b = bodies[pos]
            kept_roots = [r for r in kept_roots
                          if not (b.first_seq <= bodies[r].first_seq
                                  and bodies[r].last_seq <= b.last_seq)]
            kept_roots.append(pos)
        for pos in bodies:
            if pos not in kept_roots and pos not in is_child:
                self.why[pos] = "superseded by a later summary covering its span"
        cache = view.pack_cache.setdefault(_SUMMARY_TOKENS, {})
        assert isinstance(cache, dict)
        tokens: dict[int, int] = {}
        for pos, body in bodies.items():
            n = cache.get(pos)
            if n is None:
                n = cache[pos] = counter.count(_summary_block(body)) + 1
            tokens[pos] = n
        shown = sorted(kept_roots, key=lambda p: bodies[p].first_seq)
        room = history - protected
        limit = max(0, min(budget, room))
        used = sum(tokens[p] for p in shown)
        why = (f"over the summary budget ({limit} tokens)" if limit == budget
               else f"the protected part leaves {limit} tokens for summaries")
        while used > limit and shown:  # too many roots: the oldest go first
            oldest = shown.pop(0)
            used -= tokens[oldest]
            self.why[oldest] = f"{why}; its events stay summarized"
        # Breadth-first expansion: highest level first, oldest first.
        expanded = True
        while expanded:
            expanded = False
            for pos in sorted(shown, key=lambda p: (-bodies[p].level, bodies[p].first_seq)):
                kids = children_of[pos]
                if not kids:
                    continue
                extra = sum(tokens[k] for k in kids) - tokens[pos]
                if used + extra <= limit:
                    shown.remove(pos)
                    shown.extend(kids)
                    used += extra
                    self.why[pos] = "expanded into its children"
                    expanded = True
                    break
        shown.sort(key=lambda p: bodies[p].first_seq)
        # The summary opens the system message when there is no other section.
        self.framing = 0 if view.sections else MESSAGE_OVERHEAD
        text = ""
        while shown:  # the rendered section (wrapper and framing included) must fit the room
            text = ("<conversation_summary>\n"
                    + "\n".join(_summary_block(bodies[p]) for p in shown)
                    + "\n</conversation_summary>")
            if counter.count(text) + 1 + self.framing <= room:
                break
            oldest = shown.pop(0)
            text = ""
            self.why[oldest] = (f"the protected part leaves {room} tokens for summaries; "
                                "its events stay summarized")
        for pos in bodies:
            self.why.setdefault(pos, "" if pos in shown else "rolled up: shown through its parent")
        self.shown = shown
        self.text = text
        self.tokens = counter.count(text) + 1 if shown else 0


_SUMMARY_TOKENS = "pack.summary_tokens"


def _close_units(state: PackState) -> None:
    view = state.view
    for unit in view.units:
        covered = [i for i in unit.items if i in state.summarized]
        if not covered or len(covered) == len(unit.items):
            continue
        rule, detail = state.summarized[covered[0]]
        for index in unit.items:
            if index not in state.summarized:
                state.summarize(index, rule, detail + "; completes a tool exchange")


def _summary_block(body: CompactionCommitted) -> str:
    return (f'<summary level="L{body.level}" positions="{body.first_seq}-{body.last_seq}">\n'
            f"{body.summary}\n</summary>")


def dedup_stage(state: PackState) -> StageReport:
    """Stage 4: replace superseded tool results by the seed placeholders."""
    policy = state.policy
    before = state.total
    if not policy.dedup:
        return StageReport(name="dedup", fired=False, detail="disabled by policy")
    if before < state.budget.warning:
        return StageReport(name="dedup", fired=False,
                           detail=f"pressure below warning ({before} < {state.budget.warning} "
                                  "tokens)", tokens_before=before, tokens_after=before)
    index = state.view.dedup(policy.tool_kinds)
    count = 0
    for item_index in sorted(index.superseded):
        tier, by, name = index.superseded[item_index]
        item = state.view.items[item_index]
        if item.unit < 0 or state.is_protected(item.unit):
            continue
        text = _DEDUP_TEXT[tier].format(name=name)
        by_item = state.view.items[by]
        if state.replace(item_index, text, decision="deduplicated", rule=f"dedup.tier{tier}",
                         detail=f"superseded by position {by_item.pos}"):
            count += 1
    return StageReport(name="dedup", fired=count > 0, detail=f"{count} results superseded",
                       tokens_before=before, tokens_after=state.total, events=count)


def prune_stage(state: PackState) -> StageReport:
    """Stage 5: score-based pruning of old tool results to placeholders."""
    policy = state.policy
    before = state.total
    warning = state.budget.warning
    if not policy.prune:
        return StageReport(name="prune", fired=False, detail="disabled by policy")
    if before < warning:
        return StageReport(name="prune", fired=False,
                           detail=f"pressure below warning ({before} < {warning} tokens)",
                           tokens_before=before, tokens_after=before)
    view = state.view
    items = view.items
    current_turn = len(view.turn_starts)
    protect_from_turn = current_turn - policy.prune_protect_turns + 1
    candidates: list[tuple[int, int, int, str]] = []  # (-priority, pos, index, placeholder)
    protected_output = 0
    protecting = True
    for unit in reversed(view.units):
        if unit.turn >= protect_from_turn or state.is_protected(unit.index) \
                or unit.index in state.dropped:
            continue
        for index in reversed(unit.items):
            item = items[index]
            if item.kind != "tool" or not state.is_live(index):
                continue
            if state.decision_of(index) == "deduplicated":
                continue
            tokens = state.tokens_of(index)
            if protecting and protected_output + tokens <= policy.prune_protect_tokens:
                protected_output += tokens
                continue
            protecting = False
            placeholder = _placeholder(item, policy)
            saving = tokens - (MESSAGE_OVERHEAD + 1 + state.counter.count(placeholder))
            if saving <= 0:
                continue
            kind = policy.kind_of(item.tool_name)
            priority = (policy.tool_weights.get(kind, policy.tool_weights.get("other", 50))
                        - policy.prune_reference_bonus * item.refs
                        - (policy.prune_decision_bonus if item.decision_language else 0))
            candidates.append((-priority, item.pos, index, placeholder))
    potential = sum(state.tokens_of(c[2]) for c in candidates)
    if potential < policy.prune_min_savings or not candidates:
        return StageReport(name="prune", fired=False,
                           detail=f"potential savings {potential} < minimum "
                                  f"{policy.prune_min_savings}", tokens_before=before,
                           tokens_after=before)
    candidates.sort()
    count = 0
    for neg_priority, _, index, placeholder in candidates:
        if state.total <= warning:
            break
        item = items[index]
        if state.replace(index, placeholder, decision="pruned", rule="prune.score",
                         detail=f"priority {-neg_priority} (kind "
                                f"{policy.kind_of(item.tool_name)}, {item.refs} references, "
                                f"decision language {'yes' if item.decision_language else 'no'})"):
            count += 1
    return StageReport(name="prune", fired=count > 0,
                       detail=f"{count} of {len(candidates)} candidates pruned",
                       tokens_before=before, tokens_after=state.total, events=count)


def _placeholder(item: Item, policy: Policy) -> str:
    kind = policy.kind_of(item.tool_name)
    target = item.target
    if kind in ("bash", "shell_read"):
        return ("[Old shell output cleared; inspect truncation storage or rerun targeted "
                "commands if needed]")
    if kind == "glob":
        return "[Old glob output cleared]"
    if target:
        return f"[Old {item.tool_name} output cleared for {target}]"
    return "[Old tool result content cleared]"


def trim_stage(state: PackState) -> StageReport:
    """Stage 6: drop whole oldest turns until the prompt is under the blocking level."""
    policy = state.policy
    before = state.total
    target = min(state.budget.blocking, policy.usable)
    if not policy.trim:
        return StageReport(name="trim", fired=False, detail="disabled by policy")
    if before <= target:
        return StageReport(name="trim", fired=False,
                           detail=f"{before} tokens <= blocking level {target}",
                           tokens_before=before, tokens_after=before)
    view = state.view
    dropped = 0
    turns = 0
    unit_index = 0
    units = view.units
    while state.total > target and unit_index < state.tail_unit:
        turn = units[unit_index].turn
        while unit_index < state.tail_unit and units[unit_index].turn == turn:
            if state.drop_unit(unit_index, decision="trimmed", rule="trim.turn",
                               detail=f"turn {turn} dropped: prompt was over the blocking "
                                      f"level {target}"):
                dropped += 1
            unit_index += 1
        turns += 1
    return StageReport(name="trim", fired=dropped > 0,
                       detail=f"{turns} oldest turns dropped ({dropped} units)",
                       tokens_before=before, tokens_after=state.total, events=dropped)


#: The built-in pipeline after the budget plan, in order.
DEFAULT_STAGES: tuple[tuple[str, Stage], ...] = (
    ("truncate", truncate_stage),
    ("summaries", summary_stage),
    ("dedup", dedup_stage),
    ("prune", prune_stage),
    ("trim", trim_stage),
)


class _Explanation:
    """The per-event decisions of a pack, built on first use: a hot loop that packs
    after every append does not pay for one `Decision` per event of a long session.
    It holds what the decisions need as of the pack (never the live projection), so
    they are the same whenever they are built."""

    __slots__ = ("_build", "_value")

    def __init__(self, build: Callable[[], tuple[Decision, ...]] | None = None,
                 value: tuple[Decision, ...] | None = None) -> None:
        self._build = build
        self._value = value

    @property
    def decisions(self) -> tuple[Decision, ...]:
        if self._value is None:
            assert self._build is not None
            self._value = self._build()
            self._build = None
        return self._value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Explanation):
            return NotImplemented
        return self.decisions == other.decisions

    def __hash__(self) -> int:
        return hash(self.decisions)

    def __repr__(self) -> str:
        return "<decisions>" if self._value is None else f"<{len(self._value)} decisions>"


class Packed(msgspec.Struct, frozen=True, kw_only=True):
    """The result of `pack`.

    Attributes:
        prompt: the provider-neutral prompt.
        tokens: its total token count (system, tools, messages, framing).
        message_tokens: tokens per message of ``prompt.messages``.
        section_tokens: tokens per system section.
        budget: the budget plan.
        pressure: tokens / usable, after packing.
        pressure_before: the same before any reduction stage.
        thresholds: thresholds crossed before reduction (``warning``, ``compact``,
            ``blocking``, ``overflow``).
        compaction_due: the history (before trimming) is at or over the compact level.
        stages: what each stage did.
        decisions: one per lineage event (a property, built on first access; empty
            when packed with ``explain=False``).
        tokenizer: the counter's id.
        policy_hash: the policy's hash.
        head: lineage position of the last event packed.
    """

    prompt: Prompt
    tokens: int
    message_tokens: tuple[int, ...]
    section_tokens: tuple[int, ...]
    budget: Budget
    pressure: float
    pressure_before: float
    thresholds: tuple[str, ...]
    compaction_due: bool
    stages: tuple[StageReport, ...]
    tokenizer: str
    policy_hash: str
    head: int
    recovery: bool = False
    _explanation: _Explanation | None = None

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """One `Decision` per lineage event, in position order."""
        return () if self._explanation is None else self._explanation.decisions


def recovery_policy(policy: Policy) -> Policy:
    """The policy of a recovery pack after a context-overflow error (seed 004's
    emergency path, without a model call): truncation limits quartered, dedup and
    pruning at any pressure with no minimum savings, trimming down to 3/4 of the
    usable budget."""
    return msgspec.structs.replace(
        policy, truncate=True, truncate_lines=max(2, policy.truncate_lines // 4),
        truncate_bytes=max(64, policy.truncate_bytes // 4), dedup=True, prune=True,
        prune_min_savings=0, prune_protect_tokens=policy.prune_protect_tokens // 4,
        warning_buffer=None, warning_ratio=0.0, blocking_buffer=None, blocking_ratio=0.75,
        trim=True)


def pack(view: Projection, policy: Policy, *, stages: Sequence[tuple[str, Stage]] | None = None,
         explain: bool = True) -> Packed:
    """Pack the projection's history into a prompt under ``policy``.

    Parameters:
        view: the projection (its counter measures every token).
        policy: the packing policy.
        stages: the pipeline; `DEFAULT_STAGES` when None. Insert custom
            stages into a copy of it.
        explain: keep the per-event decisions (built on first access of
            ``Packed.decisions``); skip them when only the prompt is needed.

    Raises:
        BudgetExceededError: the mandatory tail (and pinned events) cannot fit.
        PackError: a stage produced a structurally invalid prompt.
    """
    policy_hash = policy.hash
    recovering = view.overflow_pending
    if recovering:
        policy = recovery_policy(policy)
    if stages is None or tuple(stages) == DEFAULT_STAGES:
        # The built-in pipeline: the same result from running totals and per-unit
        # sums (see `_pack_default`).
        packed = _pack_default(view, policy, policy_hash, recovering, explain)
        if packed is not None:
            return packed
    state = PackState(view, policy, view.counter)
    before = state.total
    state.reports.extend(_opening_reports(view, policy, state.budget, before, recovering))
    pre_trim: int | None = None
    for name, stage in (DEFAULT_STAGES if stages is None else stages):
        if name == "trim":
            pre_trim = state.total
        report = stage(state)
        if report is not None:
            state.reports.append(report)
    # `PackState.summarize` marks single items: a custom stage that covered part
    # of a tool exchange gets the rest of it covered too, never a split pair.
    _close_units(state)
    # Compaction is due when the history, before trimming, reaches the compact level.
    due = (state.total if pre_trim is None else pre_trim) >= state.budget.compact
    if state.total > policy.usable:
        raise _over_budget(state.total, policy)
    prompt, message_tokens, section_tokens = _assemble(state)
    state.reports.append(_breakpoints_report(prompt))
    explanation = None
    if explain:
        facts = _Facts(view)
        explanation = _Explanation(value=_decisions(
            facts, lambda index, common: _item_decision(state, index, common),
            state.summary_shown))
    return Packed(
        prompt=prompt, tokens=state.total, message_tokens=message_tokens,
        section_tokens=section_tokens, budget=state.budget,
        pressure=round(state.total / max(policy.usable, 1), 6),
        pressure_before=round(before / max(policy.usable, 1), 6),
        thresholds=_thresholds(state.budget, policy, before), compaction_due=due,
        stages=tuple(state.reports), tokenizer=view.counter.id, policy_hash=policy_hash,
        head=view.head, recovery=recovering, _explanation=explanation)


def _thresholds(budget: Budget, policy: Policy, before: int) -> tuple[str, ...]:
    return tuple(name for name, level in (("warning", budget.warning),
                                         ("compact", budget.compact),
                                         ("blocking", budget.blocking),
                                         ("overflow", policy.usable)) if before > level)


def _opening_reports(view: Projection, policy: Policy, budget: Budget, before: int,
                     recovering: bool) -> list[StageReport]:
    reports = [StageReport(
        name="budget", fired=True,
        detail=(f"usable {policy.usable} = window {policy.context_window} - reserve "
                f"{policy.output_reserve} - margin {policy.safety_margin}; system "
                f"{budget.system}, tools {budget.tools}; history budget "
                f"{budget.history}; pressure {before / max(policy.usable, 1):.3f}"),
        tokens_before=before, tokens_after=before)]
    if recovering:
        reports.append(StageReport(
            name="recovery", fired=True,
            detail=(f"the latest request ended in a context-overflow error (position "
                    f"{view.last_overflow}): truncation to {policy.truncate_lines} lines / "
                    f"{policy.truncate_bytes} bytes, dedup and pruning at any pressure, trim to "
                    f"{policy.level('blocking')} tokens"), tokens_before=before,
            tokens_after=before))
    return reports


def _over_budget(needed: int, policy: Policy) -> BudgetExceededError:
    return BudgetExceededError(
        f"the prompt needs {needed} tokens but only {policy.usable} are usable "
        f"(window {policy.context_window} - reserve {policy.output_reserve} - margin "
        f"{policy.safety_margin}); the mandatory tail from the latest user message, pinned "
        f"events and calls awaiting results cannot be dropped. Over by {needed - policy.usable}"
        " tokens: raise context_window, lower output_reserve, or compact/unpin",
        needed=needed, usable=policy.usable)


def _breakpoints_report(prompt: Prompt) -> StageReport:
    return StageReport(name="breakpoints", fired=bool(prompt.breakpoints),
                       detail=", ".join(f"{b.at}{'' if b.index < 0 else b.index} ({b.reason})"
                                        for b in prompt.breakpoints))


def _sections(view: Projection) -> tuple[list[Section], list[int]]:
    sections = [Section(name=name, text=text) for name, text, _ in view.sorted_sections()]
    return sections, [view.section_tokens[s.name] for s in sections]


def _assemble(state: PackState) -> tuple[Prompt, tuple[int, ...], tuple[int, ...]]:
    view = state.view
    items = view.items
    sections, section_tokens = _sections(view)
    static_count = len(sections)
    if state.summary_text:
        sections.append(Section(name=SUMMARY_SECTION, text=state.summary_text))
        section_tokens.append(state.summary_tokens)
    messages: list[Message] = []
    tokens: list[int] = []
    tail_message = -1
    for unit in view.units:
        if unit.index in state.dropped:
            continue
        live = [i for i in unit.items if i not in state.summarized]
        if not live:
            continue
        if unit.index == state.tail_unit:
            tail_message = len(messages)
        for index in live:
            item = items[index]
            slot = state.slots.get(index)
            messages.append(_message(item, slot.parts if slot is not None else None))
            tokens.append(slot.tokens if slot is not None else item.tokens)
        if unit.open_calls:
            _answer_open_calls(view, unit.index, state.counter, messages, tokens)
    breakpoints = _breakpoints(state.policy, view, static_count, len(sections), len(messages),
                               tail_message)
    prompt = Prompt(system=tuple(sections), tools=tuple(_tools(view)), messages=tuple(messages),
                    breakpoints=breakpoints)
    return prompt, tuple(tokens), tuple(section_tokens)


def _answer_open_calls(view: Projection, unit_index: int, counter: TokenCounter,
                       messages: list[Message], tokens: list[int]) -> None:
    # Providers reject a call without a result: answer it with a
    # placeholder that says why (never returned, or still running).
    unit = view.units[unit_index]
    text = _placeholder_result(unit.index, len(view.units))
    first = view.items[unit.items[0]]
    for call in unit.calls:
        if call in unit.open_calls:
            messages.append(Message(role="tool", parts=(TextPart(text=text),),
                                    tool_call_id=call, is_error=True,
                                    source=(first.pos,)))
            tokens.append(MESSAGE_OVERHEAD + 1 + counter.count(text))


def _placeholder_result(unit: int, units: int) -> str:
    """The text answering a call with no result: still running when its unit is the
    last one, else never returned."""
    return _PENDING_RESULT if unit == units - 1 else _MISSING_RESULT


def _tools(view: Projection) -> tuple[ToolSpec, ...]:
    return tuple(view.tools)


def _message(item: Item, parts: tuple[Part, ...] | None) -> Message:
    body = item.event.body
    if isinstance(body, ToolResultAdded):
        return Message(role="tool", parts=parts or (TextPart(text=body.output),),
                       tool_call_id=body.call_id, name=body.tool_name, is_error=body.is_error,
                       source=(item.pos,))
    if isinstance(body, AssistantMessageAdded):
        # A reply with no parts (an empty completion) still answers the turn.
        parts = body.parts or (TextPart(text=EMPTY_ASSISTANT_TEXT),)
        return Message(role="assistant", parts=parts, source=(item.pos,))
    if isinstance(body, UserMessageAdded):
        user_parts: tuple[Part, ...] = (TextPart(text=body.text),) if body.text else ()
        user_parts += tuple(body.images)
        if not user_parts:
            user_parts = (TextPart(text=EMPTY_USER_TEXT),)
        return Message(role="user", parts=user_parts, source=(item.pos,))
    if isinstance(body, NotificationAdded):
        return Message(role="user", parts=parts or (
            TextPart(text=_notification_text(body.source, body.text)),), source=(item.pos,))
    if isinstance(body, RecallAdded):
        return Message(role="user", parts=parts or (
            TextPart(text=_recall_text(body, len(body.hits))),), source=(item.pos,))
    raise PackError(f"internal: no message form for {type(body).__name__}")


def _breakpoints(policy: Policy, view: Projection, static_sections: int, all_sections: int,
                 n_messages: int, tail_message: int) -> tuple[Breakpoint, ...]:
    limit = policy.cache_breakpoints
    wanted: list[Breakpoint] = []
    if static_sections or view.tools:
        wanted.append(Breakpoint(at="system" if static_sections else "tools",
                                 reason="static system prompt and tools"))
    if n_messages:
        wanted.append(Breakpoint(at="message", index=n_messages - 1, reason="latest message"))
    if 0 < tail_message < n_messages and tail_message - 1 != n_messages - 1:
        wanted.append(Breakpoint(at="message", index=tail_message - 1, reason="older history"))
    if all_sections > static_sections:
        wanted.append(Breakpoint(at="summary", reason="conversation summary"))
    chosen = wanted[:limit]
    order = {"tools": 0, "system": 1, "summary": 2, "message": 3}
    return tuple(sorted(chosen, key=lambda b: (order[b.at], b.index)))


# -- decisions --------------------------------------------------------------------------
class _Common(TypedDict):
    pos: int
    session: str
    seq: int
    kind: str


class _Facts:
    """What the decisions read from the projection, as of one pack. The projection
    only appends to these lists and maps (a rewind replaces them), so references to
    them and the count of events are a snapshot; the small maps are copied."""

    __slots__ = ("compactions", "events", "item_at", "items", "latest_section", "n_compactions",
                 "n_events", "policy_pos", "rewinds", "rewound", "section_tokens", "tools_pos",
                 "tools_tokens", "units")

    def __init__(self, view: Projection) -> None:
        self.events = view.events
        self.n_events = len(view.events)
        self.rewound = view.rewound
        self.rewinds = dict(view._rewinds)
        self.item_at = view.item_at
        self.items = view.items
        self.units = view.units
        self.latest_section = {name: pos for name, (_, _, pos) in view.sections.items()}
        self.section_tokens = dict(view.section_tokens)
        self.tools_pos = view.tools_pos
        self.tools_tokens = view.tools_tokens
        self.policy_pos = view.policy_pos
        self.compactions = view.compactions
        self.n_compactions = len(view.compactions)


def _decisions(facts: _Facts, item_decision: Callable[[int, _Common], Decision],
               summary_shown: dict[int, str]) -> tuple[Decision, ...]:
    out: list[Decision] = []
    rewind_by = _rewind_positions(facts.rewinds)
    events = facts.events
    for pos in range(facts.n_events):
        event = events[pos]
        kind = event.kind
        common = _Common(pos=pos, session=event.session, seq=event.seq, kind=kind)
        if pos in facts.rewound:
            out.append(Decision(**common, decision="dropped", rule="rewind",
                                detail=f"rewound by position {rewind_by.get(pos, -1)}"))
            continue
        index = facts.item_at.get(pos)
        if index is not None:
            out.append(item_decision(index, common))
            continue
        body = event.body
        if isinstance(body, SystemSectionSet):
            if body.text and facts.latest_section.get(body.name) == pos:
                out.append(Decision(**common, decision="verbatim", rule="system.section",
                                    detail=f"section {body.name!r}",
                                    tokens=facts.section_tokens.get(body.name, 0),
                                    original_tokens=facts.section_tokens.get(body.name, 0)))
            else:
                out.append(Decision(**common, decision="dropped", rule="system.replaced",
                                    detail=f"section {body.name!r} "
                                           + ("removed" if not body.text else "set again later")))
        elif isinstance(body, ToolsSet):
            if pos == facts.tools_pos:
                out.append(Decision(**common, decision="verbatim", rule="tools.schemas",
                                    detail=f"{len(body.tools)} tools", tokens=facts.tools_tokens,
                                    original_tokens=facts.tools_tokens))
            else:
                out.append(Decision(**common, decision="dropped", rule="tools.replaced",
                                    detail="tool set declared again later"))
        elif isinstance(body, CompactionCommitted):
            why = summary_shown.get(pos, "")
            if why:
                out.append(Decision(**common, decision="dropped", rule="summaries.not_shown",
                                    detail=why))
            else:
                out.append(Decision(**common, decision="verbatim", rule="summaries.shown",
                                    detail=f"summary of positions {body.first_seq}-"
                                           f"{body.last_seq} in {SUMMARY_SECTION}"))
        elif isinstance(body, PolicySet):
            out.append(Decision(**common, decision="not_a_prompt_event", rule="policy",
                                detail="in force" if pos == facts.policy_pos else "replaced"))
        else:
            out.append(Decision(**common, decision="not_a_prompt_event", rule=kind,
                                detail="record of the session, not model input"))
    return tuple(out)


def _rewind_positions(rewinds: dict[int, frozenset[int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for at, rewound in sorted(rewinds.items()):
        for pos in rewound:
            out.setdefault(pos, at)
    return out


def _orphan_decision(item: Item, common: _Common) -> Decision:
    return Decision(**common, decision="dropped", rule="orphan",
                    detail=f"tool result for call {item.call_id!r}, which no open call "
                           "in the history matches", original_tokens=item.tokens)


def _item_decision(state: PackState, index: int, common: _Common) -> Decision:
    item = state.view.items[index]
    original = item.tokens
    if item.unit < 0:
        return _orphan_decision(item, common)
    if item.unit in state.dropped:
        decision, rule, detail = state.dropped[item.unit]
        return Decision(**common, decision=decision, rule=rule,
                        detail=detail, original_tokens=original)
    if index in state.summarized:
        rule, detail = state.summarized[index]
        return Decision(**common, decision="summarized", rule=rule,
                        detail=detail, original_tokens=original)
    slot = state.slots.get(index)
    if slot is not None:
        return Decision(**common, decision=slot.decision, rule=slot.rule,
                        detail=slot.detail, tokens=slot.tokens, original_tokens=original)
    rule = "verbatim.protected" if state.is_protected(item.unit) else "verbatim"
    return Decision(**common, decision="verbatim", rule=rule,
                    tokens=original, original_tokens=original)


# -- the built-in pipeline from running totals ---------------------------------------------
# `pack` with the built-in stages takes this path. It gives the same prompt,
# numbers, reports and decisions as running the stages, without a loop over the
# history: the projection keeps, per policy (the fields the stages' per-item
# results depend on), the tokens of every item after truncation, what
# deduplicating or pruning it saves, per-unit sums of those in Fenwick trees, and
# the units committed summaries cover. A pack then costs O(log n) for the totals,
# the prune and trim decisions (a binary search over turns), plus the prompt it
# builds, the protected units and the units near the pruning boundary. When
# pruning would stop part-way (the order of the candidates matters), the stages
# run instead. tests/test_pack_paths.py checks that both paths agree.

_REPLACEABLE = ("tool", "notification", "recall")
_VERBATIM, _TRUNCATED, _DEDUPLICATED, _PRUNED = range(4)


class _Sums:
    """Prefix sums over a growing list of ints with point changes (a Fenwick tree).

    Changes go to ``values`` at once and into the tree at `sync`, which rebuilds
    it in linear time after a bulk load and updates it in O(log n) per change
    otherwise.
    """

    __slots__ = ("_built", "_pending", "_tree", "values")

    def __init__(self) -> None:
        self.values: list[int] = []
        self._tree = [0]
        self._built = 0
        self._pending: dict[int, int] = {}

    def append(self, value: int) -> None:
        self.values.append(value)

    def add(self, index: int, delta: int) -> None:
        self.values[index] += delta
        if index < self._built:
            self._pending[index] = self._pending.get(index, 0) + delta

    def sync(self) -> None:
        values = self.values
        n = len(values)
        built = self._built
        if n == built and not self._pending:
            return
        if (n - built + len(self._pending)) * 8 > n:
            tree = [0, *values]
            for i in range(1, n + 1):
                j = i + (i & -i)
                if j <= n:
                    tree[j] += tree[i]
            self._tree = tree
        else:
            tree = self._tree
            for index, delta in self._pending.items():
                i = index + 1
                while i <= built:
                    tree[i] += delta
                    i += i & -i
            for i in range(built + 1, n + 1):
                total = values[i - 1]
                j = i - 1
                low = i - (i & -i)
                while j > low:
                    total += tree[j]
                    j -= j & -j
                tree.append(total)
        self._built = n
        self._pending.clear()

    def prefix(self, end: int) -> int:
        """``sum(values[:end])`` (after `sync`)."""
        tree = self._tree
        total = 0
        while end > 0:
            total += tree[end]
            end &= end - 1
        return total


class _PackIndex:
    """What the built-in stages would do to each item under one policy, kept up to
    date as the projection grows.

    Keyed by everything those per-item results depend on: the truncation limits
    (None when truncation is off), whether dedup is on, and the tool-kind mapping.
    Per item: tokens after truncation, and for a tool result what pruning it saves;
    superseded results and their placeholder tokens (the index runs its own
    `DedupIndex`). Per unit, in `_Sums`: tokens after truncation, the dedup savings
    and count, and the savings, tokens and number of the results pruning could
    replace (those that save tokens and are not superseded).

    Committed summaries: a unit with an item inside the span of a compaction is
    *covered*; unless protected, its items are summarized. The `_Sums` leave
    covered units out (they hold 0 for them); ``raw`` keeps every unit's tokens
    after truncation. Covered units are also kept as runs of unit indexes, so
    that the prompt and the pruning walk skip a summarized stretch in one step.
    """

    __slots__ = ("compactions", "covered", "dcount", "dedup", "dedup_tokens", "done", "dsave",
                 "in_range", "in_range_total", "kinds", "marks", "messages", "pcount",
                 "positions", "psave", "ptokens", "raw", "run_ends", "run_starts", "saving",
                 "spans", "tokens", "tool_units", "trunc_delta", "trunc_key", "truncated",
                 "verbatim")

    def __init__(self, trunc_key: tuple[float, ...] | None, dedup: bool,
                 kinds: dict[str, str]) -> None:
        self.trunc_key = trunc_key
        self.kinds = dict(kinds)
        self.dedup = DedupIndex(self.kinds) if dedup else None
        self.done = 0  # items folded in
        self.marks = 0  # superseded marks folded in
        self.compactions = 0  # compactions folded in
        self.tokens: list[int] = []  # per item, after truncation
        self.saving: list[int] = []  # per item: tokens pruning saves (0 unless a tool result)
        self.positions: list[int] = []  # per item, its lineage position (ascending)
        self.truncated: dict[int, str] = {}  # item -> truncation rule
        self.trunc_delta = 0
        self.dedup_tokens: dict[int, int] = {}  # superseded item -> its placeholder's tokens
        self.raw: list[int] = []  # per unit, tokens after truncation (covered or not)
        self.verbatim = _Sums()
        self.dsave = _Sums()
        self.dcount = _Sums()
        self.psave = _Sums()
        self.ptokens = _Sums()
        self.pcount = _Sums()
        self.tool_units: list[int] = []  # units holding a tool result, ascending
        self.spans: list[tuple[int, int]] = []  # covered positions: disjoint, ascending
        self.covered: set[int] = set()
        self.run_starts: list[int] = []  # covered units as runs [start, end), ascending
        self.run_ends: list[int] = []
        self.in_range: dict[int, int] = {}  # covered unit -> its items inside a span
        self.in_range_total = 0
        self.messages: dict[int, Message] = {}  # item * 4 + form -> message (recent ones)

    def matches(self, policy: Policy) -> bool:
        return (self.trunc_key == (_trunc_key(policy) if policy.truncate else None)
                and (self.dedup is not None) == policy.dedup and self.kinds == policy.tool_kinds)

    def _sums(self) -> tuple[_Sums, ...]:
        return (self.verbatim, self.dsave, self.dcount, self.psave, self.ptokens, self.pcount)

    def catch_up(self, view: Projection, policy: Policy) -> None:
        items = view.items
        counter = view.counter
        key = self.trunc_key
        dedup = self.dedup
        covered = self.covered
        for index in range(self.done, len(items)):
            item = items[index]
            unit = item.unit
            tokens = item.tokens
            saving = 0
            kind = item.kind
            if unit >= 0:
                if key is not None and kind in _REPLACEABLE:
                    _, rule, _, cut = _truncation(item, key, policy, counter)
                    if rule:
                        self.truncated[index] = rule
                        self.trunc_delta += cut - tokens
                        tokens = cut
                if unit == len(self.raw):
                    for sums in self._sums():
                        sums.append(0)
                    self.raw.append(0)
                self.raw[unit] += tokens
                live = unit not in covered
                if live:
                    self.verbatim.add(unit, tokens)
                if kind == "tool":
                    _add_sorted(self.tool_units, unit)
                    saving = tokens - (MESSAGE_OVERHEAD + 1
                                       + counter.count(_placeholder(item, policy)))
                    if saving > 0 and live:
                        self.psave.add(unit, saving)
                        self.ptokens.add(unit, tokens)
                        self.pcount.add(unit, 1)
            self.tokens.append(tokens)
            self.saving.append(saving)
            self.positions.append(item.pos)
            if dedup is not None and unit >= 0 and kind == "tool":
                dedup.add(item)
                self._fold_marks(items, counter)
        self.done = len(items)
        self._cover(view)
        for sums in self._sums():
            sums.sync()

    def _fold_marks(self, items: list[Item], counter: TokenCounter) -> None:
        assert self.dedup is not None
        marked = self.dedup.marked
        while self.marks < len(marked):
            index = marked[self.marks]
            self.marks += 1
            tier, _, name = self.dedup.superseded[index]
            placeholder = MESSAGE_OVERHEAD + 1 + counter.count(_DEDUP_TEXT[tier].format(name=name))
            self.dedup_tokens[index] = placeholder
            unit = items[index].unit
            if unit in self.covered:
                continue
            tokens = self.tokens[index]
            self.dsave.add(unit, tokens - placeholder)
            self.dcount.add(unit, 1)
            saving = self.saving[index]
            if saving > 0:  # a superseded result is deduplicated, not pruned
                self.psave.add(unit, -saving)
                self.ptokens.add(unit, -tokens)
                self.pcount.add(unit, -1)

    def _cover(self, view: Projection) -> None:
        """Fold in the spans of compactions committed since the last call."""
        items = view.items
        positions = self.positions
        for pos in view.compactions[self.compactions:]:
            body = view.events[pos].body
            assert isinstance(body, CompactionCommitted)
            first, last = body.first_seq, body.last_seq
            for start, end in _uncovered(self.spans, first, last):
                for index in range(bisect_left(positions, start),
                                   bisect_left(positions, end + 1)):
                    unit = items[index].unit
                    if unit < 0:
                        continue
                    self.in_range[unit] = self.in_range.get(unit, 0) + 1
                    self.in_range_total += 1
                    if unit not in self.covered:
                        self.covered.add(unit)
                        for sums in self._sums():
                            if sums.values[unit]:
                                sums.add(unit, -sums.values[unit])
                        _add_run(self.run_starts, self.run_ends, unit)
            self.spans = _merge_span(self.spans, first, last)
        self.compactions = len(view.compactions)

    def message(self, item: Item, form: int, policy: Policy, counter: TokenCounter) -> Message:
        key = item.index * 4 + form
        message = self.messages.get(key)
        if message is None:
            if form == _VERBATIM:
                message = _message(item, None)
            elif form == _TRUNCATED:
                assert self.trunc_key is not None
                text = _truncation(item, self.trunc_key, policy, counter)[2]
                message = _message(item, (TextPart(text=text),))
            elif form == _DEDUPLICATED:
                assert self.dedup is not None
                tier, _, name = self.dedup.superseded[item.index]
                message = _message(item, (TextPart(text=_DEDUP_TEXT[tier].format(name=name)),))
            else:
                message = _message(item, (TextPart(text=_placeholder(item, policy)),))
            self.messages[key] = message
        return message


def _add_sorted(values: list[int], value: int) -> None:
    """Add ``value`` to an ascending list of distinct ints (usually at its end)."""
    if not values or values[-1] < value:
        values.append(value)
        return
    at = bisect_left(values, value)
    if values[at] != value:
        values.insert(at, value)


def _uncovered(spans: list[tuple[int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """The parts of ``[first, last]`` outside the disjoint ascending ``spans``."""
    out: list[tuple[int, int]] = []
    at = first
    for start, end in spans:
        if end < at:
            continue
        if start > last:
            break
        if start > at:
            out.append((at, start - 1))
        at = max(at, end + 1)
        if at > last:
            break
    if at <= last:
        out.append((at, last))
    return out


def _merge_span(spans: list[tuple[int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """``spans`` with ``[first, last]`` added (adjacent spans joined)."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if end + 1 < first or start > last + 1:
            out.append((start, end))
        else:
            first, last = min(first, start), max(last, end)
    out.append((first, last))
    out.sort()
    return out


def _add_run(starts: list[int], ends: list[int], unit: int) -> None:
    """Add ``unit`` to runs ``[starts[k], ends[k])`` (disjoint, ascending, not adjacent)."""
    k = bisect_left(starts, unit + 1) - 1  # the run starting at or before the unit
    joins_left = k >= 0 and ends[k] == unit
    joins_right = k + 1 < len(starts) and starts[k + 1] == unit + 1
    if joins_left and joins_right:
        ends[k] = ends[k + 1]
        del starts[k + 1], ends[k + 1]
    elif joins_left:
        ends[k] = unit + 1
    elif joins_right:
        starts[k + 1] = unit
    else:
        starts.insert(k + 1, unit)
        ends.insert(k + 1, unit + 1)


def _run_of(starts: list[int], ends: list[int], unit: int) -> tuple[int, int] | None:
    """The run holding ``unit``, if any."""
    k = bisect_left(starts, unit + 1) - 1
    if k >= 0 and unit < ends[k]:
        return starts[k], ends[k]
    return None


_INDEXES = "pack.indexes"
_MAX_INDEXES = 4


def _index_for(view: Projection, policy: Policy) -> _PackIndex:
    """The projection's index for this policy (created, or brought up to date)."""
    indexes = view.pack_cache.setdefault(_INDEXES, [])
    assert isinstance(indexes, list)
    found: _PackIndex | None = None
    for candidate in indexes:
        if candidate.matches(policy):
            found = candidate
            break
    if found is None:
        found = _PackIndex(_trunc_key(policy) if policy.truncate else None, policy.dedup,
                           policy.tool_kinds)
        indexes.append(found)
        del indexes[:-_MAX_INDEXES]
    found.catch_up(view, policy)
    return found


def _pack_default(view: Projection, policy: Policy, policy_hash: str, recovering: bool,
                  explain: bool) -> Packed | None:
    """`pack` with the built-in stages, from the running totals (None when pruning
    would stop part-way: then the stages run)."""
    index = _index_for(view, policy)
    counter = view.counter
    items, units = view.items, view.units
    n_units = len(units)
    tail_unit = view.turn_starts[-1] if view.turn_starts else max(n_units - 1, 0)
    # Protected: the mandatory tail (units >= tail_unit), calls awaiting results, pins.
    older_protected = sorted(u for u in view.open_units | _pinned_units(view) if u < tail_unit)
    older_set = set(older_protected)
    covered = index.covered  # units with an item under a summary (summarized unless protected)
    system_tokens = _system_tokens(view)
    synthetic = _synthetic_tokens(view, counter)
    budget = _budget(policy, system_tokens, view.tools_tokens)
    warning = budget.warning
    total = system_tokens + view.tools_tokens + synthetic + REPLY_OVERHEAD + view.unit_tokens
    before = total
    reports = _opening_reports(view, policy, budget, before, recovering)

    # truncate: every item the policy cuts (all are live, none protected from it)
    if policy.truncate:
        count = len(index.truncated)
        after = total + index.trunc_delta
        reports.append(StageReport(name="truncate", fired=count > 0,
                                   detail=f"{count} outputs truncated", tokens_before=total,
                                   tokens_after=after, events=count))
        total = after
    else:
        reports.append(StageReport(name="truncate", fired=False, detail="disabled by policy"))

    # summaries: covered units that are not protected leave the messages
    plan: _SummaryPlan | None = None
    if not view.compactions:
        reports.append(StageReport(name="summaries", fired=False,
                                   detail="no compaction committed"))
    else:
        protected_covered = [u for u in chain(older_protected, range(tail_unit, n_units))
                             if u in covered]
        protected_tokens = synthetic + sum(index.raw[u] for u in older_protected)
        protected_tokens += sum(index.raw[tail_unit:n_units])
        plan = _SummaryPlan(view, counter, budget.history,
                            max(0, int(budget.history * policy.summary_budget)),
                            protected_tokens)
        summarized = (view.unit_tokens + index.trunc_delta - index.verbatim.prefix(n_units)
                      - sum(index.raw[u] for u in protected_covered))
        count = index.in_range_total - sum(index.in_range[u] for u in protected_covered)
        after = total - summarized
        framing = 0
        summary_tokens = 0
        if plan.shown:
            framing, summary_tokens = plan.framing, plan.tokens
            system_tokens += framing
            after += summary_tokens + framing
        budget = msgspec.structs.replace(budget, summary=summary_tokens, system=system_tokens,
                                         history=budget.history - summary_tokens - framing)
        reports.append(StageReport(name="summaries", fired=True,
                                   detail=f"{len(plan.shown)} summaries shown, {count} events "
                                          "summarized", tokens_before=total, tokens_after=after,
                                   events=count))
        total = after

    # dedup: every superseded result outside protected and summarized units
    deduped = False
    superseded = index.dedup.superseded if index.dedup is not None else {}
    if not policy.dedup:
        reports.append(StageReport(name="dedup", fired=False, detail="disabled by policy"))
    elif total < warning:
        reports.append(StageReport(name="dedup", fired=False,
                                   detail=f"pressure below warning ({total} < {warning} tokens)",
                                   tokens_before=total, tokens_after=total))
    else:
        deduped = True
        saved, count = index.dsave.prefix(n_units), index.dcount.prefix(n_units)
        for u in chain(older_protected, range(tail_unit, n_units)):
            saved -= index.dsave.values[u]
            count -= index.dcount.values[u]
        after = total - saved
        reports.append(StageReport(name="dedup", fired=count > 0,
                                   detail=f"{count} results superseded", tokens_before=total,
                                   tokens_after=after, events=count))
        total = after

    # prune: candidates are the results of units before `boundary` (older than the
    # protected turns), outside protected and summarized units, not deduplicated, that
    # save tokens, minus the most recent ones `prune_protect_tokens` shields.
    pruned = False
    boundary = 0
    shielded: list[int] = []  # items shielded by prune_protect_tokens, newest first
    if not policy.prune:
        reports.append(StageReport(name="prune", fired=False, detail="disabled by policy"))
    elif total < warning:
        reports.append(StageReport(name="prune", fired=False,
                                   detail=f"pressure below warning ({total} < {warning} tokens)",
                                   tokens_before=total, tokens_after=total))
    else:
        turns = view.turn_starts
        first_protected_turn = len(turns) - policy.prune_protect_turns + 1
        if first_protected_turn <= 0:
            boundary = 0
        elif first_protected_turn <= len(turns):
            boundary = turns[first_protected_turn - 1]
        else:
            boundary = n_units
        shield_left = policy.prune_protect_tokens
        tool_units = index.tool_units
        k = bisect_left(tool_units, boundary) - 1
        while k >= 0:
            u = tool_units[k]
            if u in covered:  # skip the whole summarized run
                run = _run_of(index.run_starts, index.run_ends, u)
                assert run is not None
                k = bisect_left(tool_units, run[0]) - 1
                continue
            k -= 1
            if u >= tail_unit or u in older_set:
                continue
            for i in reversed(units[u].items):
                if items[i].kind != "tool" or (deduped and i in superseded):
                    continue
                tokens = index.tokens[i]
                if tokens > shield_left:
                    k = -1
                    break
                shield_left -= tokens
                shielded.append(i)
        potential = index.ptokens.prefix(boundary)
        count = index.pcount.prefix(boundary)
        saved = index.psave.prefix(boundary)
        for u in chain(older_protected, range(tail_unit, boundary)):
            if u < boundary:
                potential -= index.ptokens.values[u]
                count -= index.pcount.values[u]
                saved -= index.psave.values[u]
        for i in shielded:
            if index.saving[i] > 0:
                potential -= index.tokens[i]
                count -= 1
                saved -= index.saving[i]
        if potential < policy.prune_min_savings or count == 0:
            reports.append(StageReport(name="prune", fired=False,
                                       detail=f"potential savings {potential} < minimum "
                                              f"{policy.prune_min_savings}",
                                       tokens_before=total, tokens_after=total))
        elif total - saved > warning:  # every candidate goes, in any order
            pruned = True
            after = total - saved
            reports.append(StageReport(name="prune", fired=True,
                                       detail=f"{count} of {count} candidates pruned",
                                       tokens_before=total, tokens_after=after, events=count))
            total = after
        else:
            return None  # pruning stops part-way: which ones go depends on their order

    # trim: whole turns, oldest first, until at the blocking level (protected units stay)
    pre_trim = total
    cut = 0  # units before `cut`, except protected ones, are dropped
    target = min(budget.blocking, policy.usable)
    if not policy.trim:
        reports.append(StageReport(name="trim", fired=False, detail="disabled by policy"))
    elif total <= target:
        reports.append(StageReport(name="trim", fired=False,
                                   detail=f"{total} tokens <= blocking level {target}",
                                   tokens_before=total, tokens_after=total))
    else:
        kept_older = [0]  # prefix sums of the tokens of the older protected units
        for u in older_protected:
            kept_older.append(kept_older[-1] + _unit_tokens(index, u, deduped, pruned, boundary))
        shield_units: list[int] = []  # units of shielded items that save tokens, ascending
        shield_saved = [0]
        for i in reversed(shielded):
            if index.saving[i] > 0:
                shield_units.append(items[i].unit)
                shield_saved.append(shield_saved[-1] + index.saving[i])

        def dropped(end: int) -> int:
            """Tokens of the unprotected, unsummarized units before ``end``."""
            out = index.verbatim.prefix(end)
            if deduped:
                out -= index.dsave.prefix(end)
            if pruned:
                out -= index.psave.prefix(min(end, boundary))
                out += shield_saved[bisect_left(shield_units, end)]
            return out - kept_older[bisect_left(older_protected, end)]

        turns = view.turn_starts
        if turns:
            shift = 0 if turns[0] > 0 else 1  # turn 0 (units before the first user message)
            groups = len(turns) - shift

            def end_of(k: int) -> int:
                return turns[k - 1 + shift]
        else:
            groups = 1 if tail_unit > 0 else 0

            def end_of(k: int) -> int:
                return tail_unit
        turns_dropped = 0
        if groups:
            lo, hi = 1, groups
            while lo < hi:
                mid = (lo + hi) // 2
                if total - dropped(end_of(mid)) <= target:
                    hi = mid
                else:
                    lo = mid + 1
            turns_dropped = lo
            cut = end_of(lo)
        units_dropped = cut - bisect_left(older_protected, cut)
        after = total - dropped(cut) if cut else total
        reports.append(StageReport(name="trim", fired=units_dropped > 0,
                                   detail=f"{turns_dropped} oldest turns dropped "
                                          f"({units_dropped} units)",
                                   tokens_before=total, tokens_after=after,
                                   events=units_dropped))
        total = after
    due = pre_trim >= budget.compact
    if total > policy.usable:
        raise _over_budget(total, policy)

    # the prompt: the protected units before the cut, then every unit from the cut on
    # except summarized ones
    sections, section_tokens = _sections(view)
    static_count = len(sections)
    if plan is not None and plan.shown:
        sections.append(Section(name=SUMMARY_SECTION, text=plan.text))
        section_tokens.append(plan.tokens)
    messages: list[Message] = []
    tokens_of: list[int] = []
    forms: dict[int, int] = {}  # kept items not verbatim -> form
    refs: dict[int, tuple[int, bool]] = {}  # pruned kept items -> references, decision language
    used: list[int] = []
    tail_message = -1
    shielded_set = set(shielded)
    for u in _kept_units(index, older_protected, cut, tail_unit, n_units):
        unit = units[u]
        if u == tail_unit:
            tail_message = len(messages)
        protected = u >= tail_unit or u in older_set
        for i in unit.items:
            item = items[i]
            if deduped and not protected and i in superseded:
                form, tokens = _DEDUPLICATED, index.dedup_tokens[i]
            elif (pruned and not protected and u < boundary and index.saving[i] > 0
                  and i not in shielded_set):
                form, tokens = _PRUNED, index.tokens[i] - index.saving[i]
                refs[i] = (item.refs, item.decision_language)
            elif i in index.truncated:
                form, tokens = _TRUNCATED, index.tokens[i]
            else:
                form, tokens = _VERBATIM, item.tokens
            if form != _VERBATIM:
                forms[i] = form
            messages.append(index.message(item, form, policy, counter))
            used.append(i * 4 + form)
            tokens_of.append(tokens)
        if unit.open_calls:
            _answer_open_calls(view, u, counter, messages, tokens_of)
    if len(index.messages) > 2 * len(used) + 256:  # keep the cache to recent messages
        index.messages = {key: index.messages[key] for key in used}
    breakpoints = _breakpoints(policy, view, static_count, len(sections), len(messages),
                               tail_message)
    prompt = Prompt(system=tuple(sections), tools=tuple(_tools(view)), messages=tuple(messages),
                    breakpoints=breakpoints)
    reports.append(_breakpoints_report(prompt))
    explanation = None
    if explain:
        explanation = _Explanation(_DefaultDecisions(
            view, index, policy, forms, refs, cut, tail_unit, older_set, target,
            {} if plan is None else plan.why).build)
    return Packed(
        prompt=prompt, tokens=total, message_tokens=tuple(tokens_of),
        section_tokens=tuple(section_tokens), budget=budget,
        pressure=round(total / max(policy.usable, 1), 6),
        pressure_before=round(before / max(policy.usable, 1), 6),
        thresholds=_thresholds(budget, policy, before), compaction_due=due,
        stages=tuple(reports), tokenizer=counter.id, policy_hash=policy_hash, head=view.head,
        recovery=recovering, _explanation=explanation)


def _kept_units(index: _PackIndex, older_protected: list[int], cut: int, tail_unit: int,
                n_units: int) -> Iterator[int]:
    """Units in the prompt, ascending: protected units before the cut, then every unit
    from the cut on that is not summarized (covered and unprotected)."""
    for u in older_protected:
        if u >= cut:
            break
        yield u
    starts, ends = index.run_starts, index.run_ends
    k = bisect_left(ends, cut + 1)  # the first run ending after the cut
    u = cut
    while u < n_units:
        if k < len(starts) and starts[k] <= u:
            end = min(ends[k], n_units)
            yield from older_protected[bisect_left(older_protected, u):
                                       bisect_left(older_protected, end)]
            yield from range(max(u, tail_unit), end)
            u = end
            k += 1
        else:
            end = starts[k] if k < len(starts) else n_units
            yield from range(u, end)
            u = end


def _unit_tokens(index: _PackIndex, unit: int, deduped: bool, pruned: bool,
                 boundary: int) -> int:
    """A unit's tokens as the per-unit sums count them (0 when covered)."""
    out = index.verbatim.values[unit]
    if deduped:
        out -= index.dsave.values[unit]
    if pruned and unit < boundary:
        out -= index.psave.values[unit]
    return out


class _DefaultDecisions:
    """The decisions of a pack by `_pack_default`, from what it decided (kept items
    that are not verbatim, the trim cut, the protected and summarized units) and the
    facts of the projection at the pack."""

    __slots__ = ("cut", "facts", "forms", "index", "n_items", "older", "policy", "refs",
                 "run_ends", "run_starts", "shown", "summaries", "tail_unit", "target")

    def __init__(self, view: Projection, index: _PackIndex, policy: Policy,
                 forms: dict[int, int], refs: dict[int, tuple[int, bool]], cut: int,
                 tail_unit: int, older: set[int], target: int, shown: dict[int, str]) -> None:
        self.facts = _Facts(view)
        self.n_items = len(view.items)
        self.index = index
        self.policy = policy
        self.forms = forms
        self.refs = refs  # of pruned items as of the pack (later messages add references)
        self.cut = cut
        self.tail_unit = tail_unit
        self.older = older
        self.target = target
        self.shown = shown
        self.run_starts = list(index.run_starts)
        self.run_ends = list(index.run_ends)
        self.summaries: dict[int, str] | None = None

    def build(self) -> tuple[Decision, ...]:
        return _decisions(self.facts, self.item, self.shown)

    def _prune_detail(self, item: Item) -> str:
        policy = self.policy
        refs, decided = self.refs[item.index]
        kind = policy.kind_of(item.tool_name)
        weights = policy.tool_weights
        priority = (weights.get(kind, weights.get("other", 50))
                    - policy.prune_reference_bonus * refs
                    - (policy.prune_decision_bonus if decided else 0))
        return (f"priority {priority} (kind {kind}, {refs} references, decision language "
                f"{'yes' if decided else 'no'})")

    def _summary_detail(self, item: Item) -> str:
        """Which compaction an item is summarized by (the first by level, then
        position, whose span holds it, or holds the first such item of its unit)."""
        if self.summaries is None:
            facts = self.facts
            bodies: list[tuple[int, CompactionCommitted]] = []
            for pos in facts.compactions[:facts.n_compactions]:
                body = facts.events[pos].body
                assert isinstance(body, CompactionCommitted)
                bodies.append((pos, body))
            bodies.sort(key=lambda pb: (pb[1].level, pb[0]))
            self.summaries = {}
            for pos, body in bodies:
                text = _summarized_detail(pos, body)
                for cpos in range(body.first_seq, body.last_seq + 1):
                    self.summaries.setdefault(cpos, text)
        detail = self.summaries.get(item.pos)
        if detail is not None:
            return detail
        facts = self.facts
        for i in facts.units[item.unit].items:
            if i < self.n_items:
                first = self.summaries.get(facts.items[i].pos)
                if first is not None:
                    return first + "; completes a tool exchange"
        raise PackError(f"internal: position {item.pos} is in no summarized span")

    def item(self, i: int, common: _Common) -> Decision:
        item = self.facts.items[i]
        original = item.tokens
        unit = item.unit
        if unit < 0:
            return _orphan_decision(item, common)
        protected = unit >= self.tail_unit or unit in self.older
        if unit < self.cut and not protected:
            return Decision(**common, decision="trimmed", rule="trim.turn",
                            detail=f"turn {self.facts.units[unit].turn} dropped: prompt was over "
                                   f"the blocking level {self.target}", original_tokens=original)
        if not protected and _run_of(self.run_starts, self.run_ends, unit) is not None:
            return Decision(**common, decision="summarized", rule="summaries.compaction",
                            detail=self._summary_detail(item), original_tokens=original)
        form = self.forms.get(i, _VERBATIM)
        index = self.index
        if form == _TRUNCATED:
            rule = index.truncated[i]
            return Decision(**common, decision="truncated", rule=rule,
                            detail=_trunc_detail(item, rule), tokens=index.tokens[i],
                            original_tokens=original)
        if form == _DEDUPLICATED:
            assert index.dedup is not None
            tier, by, _ = index.dedup.superseded[i]
            return Decision(**common, decision="deduplicated", rule=f"dedup.tier{tier}",
                            detail=f"superseded by position {self.facts.items[by].pos}",
                            tokens=index.dedup_tokens[i], original_tokens=original)
        if form == _PRUNED:
            return Decision(**common, decision="pruned", rule="prune.score",
                            detail=self._prune_detail(item),
                            tokens=index.tokens[i] - index.saving[i],
                            original_tokens=original)
        return Decision(**common, decision="verbatim",
                        rule="verbatim.protected" if protected else "verbatim",
                        tokens=original, original_tokens=original)

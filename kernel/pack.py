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

Every event of the lineage gets exactly one `Decision`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypedDict

import msgspec

from .errors import BudgetExceededError, PackError
from .events import (
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
from .policy import Policy
from .prompt import Breakpoint, Message, Prompt, Section
from .tokens import MESSAGE_OVERHEAD, REPLY_OVERHEAD, TokenCounter
from .view import EMPTY_USER_TEXT, Item, Projection
from .view import notification_text as _notification_text
from .view import recall_text as _recall_text

__all__ = [
    "DECISIONS",
    "DEFAULT_STAGES",
    "Budget",
    "Decision",
    "PackState",
    "Packed",
    "Stage",
    "StageReport",
    "SUMMARY_SECTION",
    "pack",
    "recovery_policy",
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
        items = view.items
        units = view.units
        self.tail_unit = (view.turn_starts[-1] if view.turn_starts
                          else max(len(units) - 1, 0))
        self.protected_units: set[int] = set(range(self.tail_unit, len(units)))
        for unit in units:
            if unit.open_calls:
                self.protected_units.add(unit.index)
        for pos in view.pins:
            index = view.item_at.get(pos)
            if index is not None and items[index].unit >= 0:
                self.protected_units.add(items[index].unit)
        self.message_tokens = 0
        for unit in units:
            for index in unit.items:
                self.message_tokens += items[index].tokens
        self.system_tokens = sum(view.section_tokens.values())
        self.system_tokens += MESSAGE_OVERHEAD if view.sections else 0
        self.tools_tokens = view.tools_tokens
        # Every call without a result gets a placeholder result (see _assemble).
        self.synthetic_tokens = sum(
            (MESSAGE_OVERHEAD + 1 + counter.count(_placeholder_result(u.index, len(units))))
            * len(u.open_calls) for u in units if u.open_calls)
        base_history = (policy.usable - self.system_tokens - self.tools_tokens
                        - REPLY_OVERHEAD)
        self.summary_budget = max(0, int(base_history * policy.summary_budget))
        self.budget = Budget(
            window=policy.context_window, output_reserve=policy.output_reserve,
            safety_margin=policy.safety_margin, usable=policy.usable,
            system=self.system_tokens, tools=self.tools_tokens, summary=0,
            history=base_history, warning=policy.level("warning"),
            compact=policy.level("compact"), blocking=policy.level("blocking"))

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
    # Everything `_truncated_text` reads from the policy: the cache is per item.
    key = (policy.truncate_lines, policy.truncate_bytes, policy.truncate_head_ratio,
           policy.recall_max_chars, policy.recall_max_tokens)
    for item in state.view.items:
        if item.kind not in ("tool", "notification", "recall") or item.unit < 0:
            continue
        cached = item.trunc
        if cached is None or cached[0] != key:
            text, rule = _truncated_text(item, state)
            tokens = MESSAGE_OVERHEAD + 1 + state.counter.count(text) if rule else 0
            item.trunc = cached = (key, rule, text, tokens)
        _, rule, text, tokens = cached
        if rule and state.replace(item.index, text, decision="truncated", rule=rule,
                                  detail=_trunc_detail(item, rule), tokens=tokens):
            count += 1
    return StageReport(name="truncate", fired=count > 0, detail=f"{count} outputs truncated",
                       tokens_before=before, tokens_after=state.total, events=count)


def _trunc_detail(item: Item, rule: str) -> str:
    body = item.event.body
    blob = getattr(body, "blob", None)
    if rule == "truncate.blob_preview" and blob is not None:
        return f"stored as blob {blob.hash[:16]} ({blob.size} bytes); preview kept"
    return rule.removeprefix("truncate.")


def _truncated_text(item: Item, state: PackState) -> tuple[str, str]:
    """(text, rule) for an item after truncation; rule is "" when untouched."""
    body = item.event.body
    policy = state.policy
    if isinstance(body, RecallAdded):
        return _capped_recall(body, policy, state.counter)
    if isinstance(body, NotificationAdded):
        text = body.text
        blob = body.blob
    elif isinstance(body, ToolResultAdded):
        text = body.output
        blob = body.blob
    else:
        return "", ""
    where = (f"blob {blob.hash} (read it back with `turnlog blob {blob.hash}`)" if blob
             else f"event {item.event.session}#{item.event.seq} (`turnlog show "
                  f"{item.event.session} {item.event.seq}`)")
    lines = text.split("\n")
    # n characters are n to 4n UTF-8 bytes: encode only when it can matter.
    data_len = (len(text.encode("utf-8", "surrogatepass")) if len(text) * 4 > policy.truncate_bytes
                else len(text))
    if len(lines) <= policy.truncate_lines and data_len <= policy.truncate_bytes:
        if blob is not None:
            return _render_tool_text(item, text), "truncate.blob_preview"
        return "", ""
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
    active = [pos for pos in view.compactions if pos not in view.rewound]
    if not active:
        return StageReport(name="summaries", fired=False, detail="no compaction committed")
    bodies: dict[int, CompactionCommitted] = {}
    for pos in active:
        body = view.events[pos].body
        assert isinstance(body, CompactionCommitted)
        bodies[pos] = body
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
            state.summary_shown[pos] = "superseded by a later summary covering its span"
    tokens = {pos: state.counter.count(_summary_block(bodies[pos])) + 1 for pos in bodies}
    shown = sorted(kept_roots, key=lambda p: bodies[p].first_seq)
    # The summaries never take the room the protected part (mandatory tail,
    # pins, calls awaiting results) needs: that part cannot be trimmed.
    protected = state.synthetic_tokens + sum(
        state.tokens_of(i) for u in state.protected_units for i in view.units[u].items)
    room = state.budget.history - protected
    budget = max(0, min(state.summary_budget, room))
    used = sum(tokens[p] for p in shown)
    why = (f"over the summary budget ({budget} tokens)" if budget == state.summary_budget
           else f"the protected part leaves {budget} tokens for summaries")
    while used > budget and shown:  # too many roots: the oldest go first
        oldest = shown.pop(0)
        used -= tokens[oldest]
        state.summary_shown[oldest] = f"{why}; its events stay summarized"
    # Breadth-first expansion: highest level first, oldest first.
    expanded = True
    while expanded:
        expanded = False
        for pos in sorted(shown, key=lambda p: (-bodies[p].level, bodies[p].first_seq)):
            kids = children_of[pos]
            if not kids:
                continue
            extra = sum(tokens[k] for k in kids) - tokens[pos]
            if used + extra <= budget:
                shown.remove(pos)
                shown.extend(kids)
                used += extra
                state.summary_shown[pos] = "expanded into its children"
                expanded = True
                break
    shown.sort(key=lambda p: bodies[p].first_seq)
    framing = 0 if view.sections else MESSAGE_OVERHEAD  # the summary opens the system message
    text = ""
    while shown:  # the rendered section (wrapper and framing included) must fit the room
        text = ("<conversation_summary>\n" + "\n".join(_summary_block(bodies[p]) for p in shown)
                + "\n</conversation_summary>")
        if state.counter.count(text) + 1 + framing <= room:
            break
        oldest = shown.pop(0)
        text = ""
        state.summary_shown[oldest] = (f"the protected part leaves {room} tokens for summaries; "
                                       "its events stay summarized")
    for pos in bodies:
        state.summary_shown.setdefault(pos, "" if pos in shown else
                                       "rolled up: shown through its parent")
    covered = 0
    for pos in sorted(bodies, key=lambda p: (bodies[p].level, p)):
        body = bodies[pos]
        for cpos in range(body.first_seq, body.last_seq + 1):
            index = view.item_at.get(cpos)
            if index is None or index in state.summarized:
                continue
            if state.summarize(index, "summaries.compaction",
                               f"covered by compaction #{pos} (level {body.level}, positions "
                               f"{body.first_seq}-{body.last_seq})"):
                covered += 1
    # A unit cut by a summary boundary would split a tool pair: summarize its
    # remaining items too, or restore the ones summarized (when protected).
    _close_units(state)
    if shown:
        state.summary_text = text
        state.summary_tokens = state.counter.count(text) + 1
        state.system_tokens += framing
    else:
        framing = 0
    state.budget = msgspec.structs.replace(
        state.budget, summary=state.summary_tokens, system=state.system_tokens,
        history=state.budget.history - state.summary_tokens - framing)
    return StageReport(name="summaries", fired=True,
                       detail=f"{len(shown)} summaries shown, {covered} events summarized",
                       tokens_before=before, tokens_after=state.total, events=covered)


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
        decisions: one per lineage event.
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
    decisions: tuple[Decision, ...]
    tokenizer: str
    policy_hash: str
    head: int
    recovery: bool = False


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
        explain: build the per-event decisions (skip for speed when only the
            prompt is needed).

    Raises:
        BudgetExceededError: the mandatory tail (and pinned events) cannot fit.
        PackError: a stage produced a structurally invalid prompt.
    """
    policy_hash = policy.hash
    recovering = view.overflow_pending
    if recovering:
        policy = recovery_policy(policy)
    state = PackState(view, policy, view.counter)
    before = state.total
    thresholds = tuple(name for name, level in (("warning", state.budget.warning),
                                               ("compact", state.budget.compact),
                                               ("blocking", state.budget.blocking),
                                               ("overflow", policy.usable)) if before > level)
    state.reports.append(StageReport(
        name="budget", fired=True,
        detail=(f"usable {policy.usable} = window {policy.context_window} - reserve "
                f"{policy.output_reserve} - margin {policy.safety_margin}; system "
                f"{state.system_tokens}, tools {state.tools_tokens}; history budget "
                f"{state.budget.history}; pressure {before / max(policy.usable, 1):.3f}"),
        tokens_before=before, tokens_after=before))
    if recovering:
        state.reports.append(StageReport(
            name="recovery", fired=True,
            detail=(f"the latest request ended in a context-overflow error (position "
                    f"{view.last_overflow}): truncation to {policy.truncate_lines} lines / "
                    f"{policy.truncate_bytes} bytes, dedup and pruning at any pressure, trim to "
                    f"{policy.level('blocking')} tokens"), tokens_before=before,
            tokens_after=before))
    pre_trim: int | None = None
    for name, stage in (DEFAULT_STAGES if stages is None else stages):
        if name == "trim":
            pre_trim = state.total
        report = stage(state)
        if report is not None:
            state.reports.append(report)
    # Compaction is due when the history, before trimming, reaches the compact level.
    due = (state.total if pre_trim is None else pre_trim) >= state.budget.compact
    if state.total > policy.usable:
        needed = state.total
        raise BudgetExceededError(
            f"the prompt needs {needed} tokens but only {policy.usable} are usable "
            f"(window {policy.context_window} - reserve {policy.output_reserve} - margin "
            f"{policy.safety_margin}); the mandatory tail from the latest user message, pinned "
            f"events and calls awaiting results cannot be dropped. Over by {needed - policy.usable}"
            " tokens: raise context_window, lower output_reserve, or compact/unpin",
            needed=needed, usable=policy.usable)
    prompt, message_tokens, section_tokens = _assemble(state)
    state.reports.append(StageReport(name="breakpoints", fired=bool(prompt.breakpoints),
                                     detail=", ".join(f"{b.at}{'' if b.index < 0 else b.index}"
                                                      f" ({b.reason})"
                                                      for b in prompt.breakpoints)))
    decisions = _decisions(state) if explain else ()
    return Packed(
        prompt=prompt, tokens=state.total, message_tokens=message_tokens,
        section_tokens=section_tokens, budget=state.budget,
        pressure=round(state.total / max(policy.usable, 1), 6),
        pressure_before=round(before / max(policy.usable, 1), 6), thresholds=thresholds,
        compaction_due=due, stages=tuple(state.reports), decisions=decisions,
        tokenizer=view.counter.id, policy_hash=policy_hash, head=view.head,
        recovery=recovering)


def _assemble(state: PackState) -> tuple[Prompt, tuple[int, ...], tuple[int, ...]]:
    view = state.view
    items = view.items
    sections = [Section(name=name, text=text) for name, text, _ in view.sorted_sections()]
    section_tokens = [view.section_tokens[s.name] for s in sections]
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
            # Providers reject a call without a result: answer it with a
            # placeholder that says why (never returned, or still running).
            text = _placeholder_result(unit.index, len(view.units))
            first = items[unit.items[0]]
            for call in unit.calls:
                if call in unit.open_calls:
                    messages.append(Message(role="tool", parts=(TextPart(text=text),),
                                            tool_call_id=call, is_error=True,
                                            source=(first.pos,)))
                    tokens.append(MESSAGE_OVERHEAD + 1 + state.counter.count(text))
    breakpoints = _breakpoints(state, static_count, len(sections), len(messages), tail_message)
    prompt = Prompt(system=tuple(sections), tools=tuple(_tools(view)), messages=tuple(messages),
                    breakpoints=breakpoints)
    return prompt, tuple(tokens), tuple(section_tokens)


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
        return Message(role="assistant", parts=body.parts, source=(item.pos,))
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


def _breakpoints(state: PackState, static_sections: int, all_sections: int, n_messages: int,
                 tail_message: int) -> tuple[Breakpoint, ...]:
    limit = state.policy.cache_breakpoints
    wanted: list[Breakpoint] = []
    if static_sections or state.view.tools:
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


def _decisions(state: PackState) -> tuple[Decision, ...]:
    view = state.view
    out: list[Decision] = []
    latest_section: dict[str, int] = {}
    for name, (_, _, pos) in view.sections.items():
        latest_section[name] = pos
    rewind_by = _rewind_positions(view)
    for pos, event in enumerate(view.events):
        kind = event.kind
        common = _Common(pos=pos, session=event.session, seq=event.seq, kind=kind)
        if pos in view.rewound:
            out.append(Decision(**common, decision="dropped", rule="rewind",
                                detail=f"rewound by position {rewind_by.get(pos, -1)}"))
            continue
        index = view.item_at.get(pos)
        if index is not None:
            out.append(_item_decision(state, index, common))
            continue
        body = event.body
        if isinstance(body, SystemSectionSet):
            if body.text and latest_section.get(body.name) == pos:
                out.append(Decision(**common, decision="verbatim", rule="system.section",
                                    detail=f"section {body.name!r}",
                                    tokens=view.section_tokens.get(body.name, 0),
                                    original_tokens=view.section_tokens.get(body.name, 0)))
            else:
                out.append(Decision(**common, decision="dropped", rule="system.replaced",
                                    detail=f"section {body.name!r} "
                                           + ("removed" if not body.text else "set again later")))
        elif isinstance(body, ToolsSet):
            if pos == view.tools_pos:
                out.append(Decision(**common, decision="verbatim", rule="tools.schemas",
                                    detail=f"{len(body.tools)} tools", tokens=view.tools_tokens,
                                    original_tokens=view.tools_tokens))
            else:
                out.append(Decision(**common, decision="dropped", rule="tools.replaced",
                                    detail="tool set declared again later"))
        elif isinstance(body, CompactionCommitted):
            why = state.summary_shown.get(pos, "")
            if why:
                out.append(Decision(**common, decision="dropped", rule="summaries.not_shown",
                                    detail=why))
            else:
                out.append(Decision(**common, decision="verbatim", rule="summaries.shown",
                                    detail=f"summary of positions {body.first_seq}-"
                                           f"{body.last_seq} in {SUMMARY_SECTION}"))
        elif isinstance(body, PolicySet):
            out.append(Decision(**common, decision="not_a_prompt_event", rule="policy",
                                detail="in force" if pos == view.policy_pos else "replaced"))
        else:
            out.append(Decision(**common, decision="not_a_prompt_event", rule=kind,
                                detail="record of the session, not model input"))
    return tuple(out)


def _rewind_positions(view: Projection) -> dict[int, int]:
    out: dict[int, int] = {}
    for at, rewound in sorted(view._rewinds.items()):
        for pos in rewound:
            out.setdefault(pos, at)
    return out


class _Common(TypedDict):
    pos: int
    session: str
    seq: int
    kind: str


def _item_decision(state: PackState, index: int, common: _Common) -> Decision:
    item = state.view.items[index]
    original = item.tokens
    if item.unit < 0:
        return Decision(**common, decision="dropped", rule="orphan",
                        detail=f"tool result for call {item.call_id!r}, which no open call "
                               "in the history matches", original_tokens=original)
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


"""What a pack returns: the prompt, the budget plan, stage reports and decisions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import msgspec

from .._prompt import Prompt

__all__ = ["Budget", "DECISIONS", "Decision", "Packed", "SUMMARY_SECTION", "StageReport"]

DecisionName = Literal[
    "verbatim",
    "truncated",
    "clipped",
    "deduplicated",
    "pruned",
    "summarized",
    "trimmed",
    "dropped",
    "not_a_prompt_event",
]
#: Every decision an event can get, in the order docs/packing.md lists them.
DECISIONS: tuple[str, ...] = (
    "verbatim",
    "truncated",
    "clipped",
    "deduplicated",
    "pruned",
    "summarized",
    "trimmed",
    "dropped",
    "not_a_prompt_event",
)
#: The system section that carries committed summaries.
SUMMARY_SECTION = "conversation_summary"


class Limits(NamedTuple):
    """The most tokens one item may take when clipped: any text, and a tool result
    (tool results and calls have one of their own when the policy sets
    ``tool_clip_ratio``; 0: clipping is off)."""

    text: int
    tool: int


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


class Explanation:
    """The per-event decisions of a pack, built on first use: a hot loop that packs
    after every append does not pay for one `Decision` per event of a long session.
    It holds what the decisions need as of the pack (never the live projection), so
    they are the same whenever they are built."""

    __slots__ = ("_build", "_value")

    def __init__(self, build: Callable[[], tuple[Decision, ...]]) -> None:
        self._build: Callable[[], tuple[Decision, ...]] | None = build
        self._value: tuple[Decision, ...] | None = None

    @property
    def decisions(self) -> tuple[Decision, ...]:
        if self._value is None:
            assert self._build is not None
            self._value = self._build()
            self._build = None
        return self._value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Explanation):
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
        recovery: packed under the recovery policy after a context-overflow error.
        rules: the packing rules version it was packed with (see ``Policy.rules``).
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
    rules: int = 1
    _explanation: Explanation | None = None

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """One `Decision` per lineage event, in position order."""
        return () if self._explanation is None else self._explanation.decisions

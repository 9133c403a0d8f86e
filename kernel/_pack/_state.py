"""The reference engine: `PackState`, the prompt as it is packed, item by item.

A custom pipeline runs here: every stage, built-in or custom, reads and changes
one `PackState`. Custom stages change it only through `replace`, `drop_unit` and
`summarize`, which refuse to touch protected units (the mandatory tail, pinned
units, units waiting for a result) and work on whole units, so a custom rule
cannot split a tool pair. The built-in stages act through the `Ledger` moves,
implemented here by walking the items.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, MutableMapping, Sequence

from .._events import Part, TextPart
from .._policy import Policy
from .._projection import Projection, Unit
from .._prompt import Message
from .._tokens import MESSAGE_OVERHEAD, REPLY_OVERHEAD, TokenCounter
from ._budget import placeholder_tokens, plan, synthetic_tokens, system_tokens
from ._explain import Common
from ._index import PackIndex, PolicyIndex
from ._ledger import (
    CutRule,
    Marker,
    Protection,
    Replacer,
    ReplayMemo,
    Shrinker,
    SummarySection,
)
from ._model import Decision, DecisionName, Limits, StageReport
from ._prune import PruneFacts
from ._summaries import compactions, covering, shown_budget
from ._truncate import REPLACEABLE

__all__ = ["PackState"]


class _Slot:
    """The running decision for one item whose content was replaced."""

    __slots__ = ("decision", "detail", "parts", "rule", "tokens")

    def __init__(self, tokens: int) -> None:
        self.decision: DecisionName = "verbatim"
        self.rule = "verbatim"
        self.detail = ""
        self.tokens = tokens
        self.parts: tuple[Part, ...] | None = None


class PackState:
    """The running state stages read and change (the reference engine).

    Parameters:
        view: the projection being packed.
        policy: the policy in use (the recovery policy in a recovery pack).
        counter: the token counter.
        index: the projection's `PackIndex` (a fresh one when None).

    Stages change it only through `replace`, `drop_unit` and `summarize`, which
    refuse to touch protected units (mandatory tail, pinned, waiting for a result).
    """

    def __init__(
        self,
        view: Projection,
        policy: Policy,
        counter: TokenCounter,
        index: PackIndex | None = None,
    ) -> None:
        self.view = view
        self.policy = policy
        self.counter = counter
        if index is None:
            index = PackIndex()
        index.catch_up(view)
        self._index = index
        self._policy_index: PolicyIndex | None = None
        self.slots: dict[int, _Slot] = {}
        self.dropped: dict[int, tuple[DecisionName, str, str]] = {}  # unit -> decision
        self.summarized: dict[int, tuple[str, str]] = {}  # item -> (rule, detail)
        self.reports: list[StageReport] = []
        self.summary_text = ""
        self.summary_shown: dict[int, str] = {}  # compaction pos -> "" or why not shown
        self.summary_tokens_used = 0
        self.marker: Marker | None = None
        self.protection = Protection(view, policy)
        self.tail_unit = self.protection.tail_unit
        self.protected_units: set[int] = set(self.protection.units(len(view.units)))
        self.message_tokens = view.unit_tokens  # the sum over every unit's items
        self.system_tokens = system_tokens(view)
        self.tools_tokens = view.tools_tokens
        self.synthetic_tokens = synthetic_tokens(view, counter, policy.rules)
        self.budget = plan(policy, self.system_tokens, self.tools_tokens)

    # -- accounting --------------------------------------------------------------
    @property
    def total(self) -> int:
        """Tokens of the whole prompt as it stands."""
        return (
            self.system_tokens
            + self.summary_tokens_used
            + self.tools_tokens
            + self.message_tokens
            + self.synthetic_tokens
            + REPLY_OVERHEAD
        )

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
    def replace(
        self,
        index: int,
        text: str,
        *,
        decision: DecisionName,
        rule: str,
        detail: str = "",
        tokens: int | None = None,
    ) -> bool:
        """Replace the content of a tool result, notification or recall item.

        Returns False (and changes nothing) for a protected unit (unless the
        decision is ``truncated``), a dropped or summarized item, or a user or
        assistant message.
        """
        item = self.view.items[index]
        if item.kind not in REPLACEABLE or not self.is_live(index):
            return False
        if decision not in ("truncated", "clipped") and self.is_protected(item.unit):
            return False
        new_tokens = MESSAGE_OVERHEAD + 1 + self.counter.count(text) if tokens is None else tokens
        self._set(index, (TextPart(text=text),), new_tokens, decision, rule, detail)
        return True

    def _set(
        self,
        index: int,
        parts: tuple[Part, ...],
        tokens: int,
        decision: DecisionName,
        rule: str,
        detail: str,
    ) -> None:
        slot = self.slots.get(index)
        if slot is None:
            slot = self.slots[index] = _Slot(self.view.items[index].tokens)
        self.message_tokens += tokens - slot.tokens
        slot.tokens = tokens
        slot.parts = parts
        slot.decision = decision
        slot.rule = rule
        slot.detail = detail

    def drop_unit(
        self,
        unit: int,
        *,
        decision: DecisionName,
        rule: str,
        detail: str = "",
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
        """Mark an item as covered by a summary (its unit must end up wholly covered:
        `pack` covers the rest of a partly covered unit after the stages)."""
        item = self.view.items[index]
        if item.unit < 0 or self.is_protected(item.unit) or not self.is_live(index):
            return False
        self.message_tokens -= self.tokens_of(index)
        self.summarized[index] = (rule, detail)
        return True

    def close_units(self) -> None:
        """Cover the rest of every partly summarized unit (never a split tool pair)."""
        for unit in self.view.units:
            covered = [i for i in unit.items if i in self.summarized]
            if not covered or len(covered) == len(unit.items):
                continue
            rule, detail = self.summarized[covered[0]]
            for index in unit.items:
                if index not in self.summarized:
                    self.summarize(index, rule, detail + "; completes a tool exchange")

    # -- the ledger moves of the built-in stages --------------------------------------
    @property
    def policy_index(self) -> PolicyIndex:
        if self._policy_index is None:
            self._policy_index = self._index.policy_index(self.view, self.policy)
        return self._policy_index

    @property
    def dedup_index(self) -> PolicyIndex:
        index = self.policy_index
        assert index.dedup is not None, "dedup is off in this policy"
        return index

    @property
    def clip_limits(self) -> Limits:
        return self.policy_index.clip_limits

    @property
    def prune_facts(self) -> PruneFacts:
        return self._index.facts

    @property
    def summary_tokens(self) -> MutableMapping[int, int]:
        return self._index.summary_tokens

    def truncate(self, stage: CutRule) -> int:
        count = 0
        for index, cut in sorted(self.policy_index.truncated.items()):
            item = self.view.items[index]
            if self.replace(
                index,
                cut.text,
                decision="truncated",
                rule=cut.rule,
                detail=stage.detail(item, cut.rule),
                tokens=cut.tokens,
            ):
                count += 1
        return count

    def clip(self) -> int:
        count = 0
        for index, cut in sorted(self.policy_index.clipped.items()):
            if self.is_live(index):
                self._set(index, cut.parts, cut.tokens, "clipped", "clip.tokens", cut.detail)
                count += 1
        return count

    def protected_tokens(self) -> int:
        units = self.view.units
        return self.synthetic_tokens + sum(
            self.tokens_of(i) for u in self.protected_units for i in units[u].items
        )

    def summarize_covered(self, plan: SummarySection) -> int:
        self.summary_shown.update(plan.why)
        view = self.view
        before = len(self.summarized)
        found = compactions(view.events, view.compactions).items()
        for pos, body in sorted(found, key=lambda pb: (pb[1].level, pb[0])):
            for cpos in range(body.first_seq, body.last_seq + 1):
                index = view.item_at.get(cpos)
                if index is None or index in self.summarized:
                    continue
                self.summarize(index, "summaries.compaction", covering(pos, body))
        # A unit cut by a summary boundary would split a tool pair.
        self.close_units()
        if plan.shown:
            self.summary_text = plan.text
            self.summary_tokens_used = plan.tokens
        self.budget, framing = shown_budget(self.budget, plan)
        self.system_tokens += framing
        return len(self.summarized) - before

    def keep_originals(self, why: str) -> None:
        for pos in self.view.compactions:
            self.summary_shown[pos] = why

    def deduplicate(self, stage: Replacer) -> int:
        count = 0
        items = self.view.items
        for index in sorted(self.dedup_index.superseded):
            item = items[index]
            if item.unit < 0 or self.is_protected(item.unit):
                continue
            text, tokens, rule, detail = stage.replacement(item, self)
            if self.replace(
                index, text, decision="deduplicated", rule=rule, detail=detail, tokens=tokens
            ):
                count += 1
        return count

    def prunable_newest_first(self, end: int) -> Iterator[tuple[int, int]]:
        items = self.view.items
        for unit in reversed(self.view.units[:end]):
            if self.is_protected(unit.index) or unit.index in self.dropped:
                continue
            for index in reversed(unit.items):
                if items[index].kind != "tool" or not self.is_live(index):
                    continue
                if self.decision_of(index) == "deduplicated":
                    continue
                yield index, self.tokens_of(index)

    def prune_candidates(self, stage: Shrinker, end: int, shielded: Sequence[int]) -> list[int]:
        skip = set(shielded)
        items, policy, counter = self.view.items, self.policy, self.counter
        return [
            index
            for index, tokens in self.prunable_newest_first(end)
            if index not in skip and tokens - stage.tokens(items[index], policy, counter) > 0
        ]

    def prune_potential(
        self, stage: Shrinker, end: int, shielded: Sequence[int]
    ) -> tuple[int, int, int]:
        candidates = self.prune_candidates(stage, end, shielded)
        items, policy, counter = self.view.items, self.policy, self.counter
        tokens = sum(self.tokens_of(i) for i in candidates)
        saving = sum(
            self.tokens_of(i) - stage.tokens(items[i], policy, counter) for i in candidates
        )
        return tokens, len(candidates), saving

    def prune_all(self, stage: Shrinker, end: int, shielded: Sequence[int]) -> int:
        return sum(
            self.prune_one(stage, index) for index in self.prune_candidates(stage, end, shielded)
        )

    def prune_one(self, stage: Shrinker, index: int) -> bool:
        text, tokens, rule, detail = stage.replacement(self.view.items[index], self)
        return self.replace(index, text, decision="pruned", rule=rule, detail=detail, tokens=tokens)

    def drop_oldest(
        self, ends: Sequence[int], target: int, why: Callable[[Unit], tuple[str, str]]
    ) -> tuple[int, int]:
        return self._drop(ends, 0, target, why)

    def droppable_before(self) -> Callable[[int], int]:
        sums = [0]
        for unit in self.view.units:
            tokens = 0
            if unit.index not in self.dropped and not self.is_protected(unit.index):
                tokens = sum(self.tokens_of(i) for i in unit.items if i not in self.summarized)
            sums.append(sums[-1] + tokens)
        return lambda end: sums[end]

    def kept_before(self) -> Callable[[int], int]:
        sums = [0]
        for unit in self.view.units:
            tokens = 0
            if unit.index not in self.dropped:
                tokens = sum(self.tokens_of(i) for i in unit.items if i not in self.summarized)
            sums.append(sums[-1] + tokens)
        return lambda end: sums[end]

    def replay_memo(self, slot: Hashable) -> ReplayMemo | None:
        del slot
        return None  # the reference engine replays every request

    @property
    def sizes(self) -> PolicyIndex:
        return self.policy_index

    def left_out(self, unit: int) -> bool:
        return all(i in self.summarized for i in self.view.units[unit].items)

    def rewrite(
        self,
        deduplicated: Sequence[int],
        pruned: Sequence[int],
        dedup: Replacer,
        prune: Replacer,
        note: str,
    ) -> tuple[int, int]:
        counts = [0, 0]
        items = self.view.items
        moves: tuple[tuple[Sequence[int], Replacer, DecisionName], ...] = (
            (deduplicated, dedup, "deduplicated"),
            (pruned, prune, "pruned"),
        )
        for k, (chosen, stage, decision) in enumerate(moves):
            for index in chosen:
                item = items[index]
                if self.is_protected(item.unit) or self.left_out(item.unit):
                    continue
                text, tokens, rule, detail = stage.replacement(item, self)
                if self.replace(
                    index,
                    text,
                    decision=decision,
                    rule=rule,
                    detail=f"{detail}; {note}",
                    tokens=tokens,
                ):
                    counts[k] += 1
        return counts[0], counts[1]

    def keep(self, unit: int) -> None:
        if any(i in self.summarized for i in self.view.units[unit].items):
            return  # a summary stands for it
        self.protected_units.add(unit)

    def release(self, units: Sequence[int], why: Callable[[Unit], tuple[str, str]]) -> int:
        protection, released = self.protection, 0
        for unit in units:
            if unit >= protection.tail_unit or unit in protection.hard:
                continue
            if unit not in self.protected_units:
                continue  # not kept (a summary stands for it)
            self.protected_units.discard(unit)
            rule, detail = why(self.view.units[unit])
            if self.drop_unit(unit, decision="trimmed", rule=rule, detail=detail):
                released += 1
        return released

    def drop_tail(
        self, ends: Sequence[int], target: int, why: Callable[[Unit], tuple[str, str]]
    ) -> tuple[int, int]:
        start = self.protection.tail_unit
        # the last resort lifts the tail's protection, not that of pins and open calls;
        # the steps it keeps stay the protected tail
        soft = set(range(start, len(self.view.units))) - self.protection.hard
        self.protected_units -= soft
        done = self._drop(ends, start, target, why)
        self.protected_units |= soft - set(self.dropped)
        return done

    def _drop(
        self, ends: Sequence[int], start: int, target: int, why: Callable[[Unit], tuple[str, str]]
    ) -> tuple[int, int]:
        units = self.view.units
        groups = dropped = 0
        for end in ends:
            if self.total <= target:
                break
            for unit in units[start:end]:
                if all(i in self.summarized for i in unit.items):
                    continue  # summarized, not trimmed
                rule, detail = why(unit)
                if self.drop_unit(unit.index, decision="trimmed", rule=rule, detail=detail):
                    dropped += 1
            start = end
            groups += 1
        return groups, dropped

    def dropped_run(self) -> tuple[int, int, int] | None:
        trimmed = sorted(u for u, (decision, _, _) in self.dropped.items() if decision == "trimmed")
        if not trimmed:
            return None
        view = self.view
        first = view.items[view.units[trimmed[0]].items[0]].pos
        last = max(view.items[i].pos for i in view.units[trimmed[-1]].items)
        after = next((u for u in self.kept_units() if u > trimmed[-1]), -1)
        return first, last, after

    def mark(self, marker: Marker) -> None:
        self.marker = marker
        self.message_tokens += marker.tokens

    def settle(self) -> None:
        view = self.view
        self.synthetic_tokens = sum(
            placeholder_tokens(view, self.counter, u, self.policy.rules)
            for u in sorted(view.open_units)
            if u not in self.dropped and any(i not in self.summarized for i in view.units[u].items)
        )

    # -- the outcome -------------------------------------------------------------------
    def kept_units(self) -> Iterator[int]:
        """Units in the prompt, ascending."""
        for unit in self.view.units:
            if unit.index not in self.dropped and any(i not in self.summarized for i in unit.items):
                yield unit.index

    def message(
        self,
        index: int,
        build: Callable[[int, tuple[Part, ...] | None], Message],
    ) -> tuple[Message, int] | None:
        """An item's message and tokens in the prompt (None when it is not in it)."""
        if index in self.summarized:
            return None
        slot = self.slots.get(index)
        if slot is None:
            return build(index, None), self.view.items[index].tokens
        return build(index, slot.parts), slot.tokens

    def decision(self, index: int, common: Common) -> Decision:
        """The decision of an item of a unit (orphans are decided by the caller)."""
        item = self.view.items[index]
        original = item.tokens
        if item.unit in self.dropped:
            decision, rule, detail = self.dropped[item.unit]
            return Decision(
                **common, decision=decision, rule=rule, detail=detail, original_tokens=original
            )
        if index in self.summarized:
            rule, detail = self.summarized[index]
            return Decision(
                **common, decision="summarized", rule=rule, detail=detail, original_tokens=original
            )
        slot = self.slots.get(index)
        if slot is not None:
            return Decision(
                **common,
                decision=slot.decision,
                rule=slot.rule,
                detail=slot.detail,
                tokens=slot.tokens,
                original_tokens=original,
            )
        rule = "verbatim.protected" if self.is_protected(item.unit) else "verbatim"
        return Decision(
            **common, decision="verbatim", rule=rule, tokens=original, original_tokens=original
        )

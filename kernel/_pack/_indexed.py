"""The incremental engine: the ledger moves answered from the index's running sums.

Theory of operation
-------------------
The built-in pipeline runs here. Every move the stages make is answered from
the per-unit Fenwick sums of the projection's `PolicyIndex` (see ``_index``)
instead of a walk over the history:

* truncation is already in the sums (tokens after truncation);
* summarizing takes the covered units (which hold 0 in the sums) out of the
  total, minus the protected ones;
* dedup and "prune every candidate" subtract the sums' savings over the units
  they apply to, minus the protected units' values, and (for pruning) the
  shielded results;
* pruning one candidate at a time (when the order of the candidates decides
  which ones go) records each one;
* trimming finds the cut by binary search over the group ends, with the tokens
  dropped before a unit boundary computed from the same sums.

What was decided is kept in that compact form (flags, the prune boundary and
shield, the pruned points, the cut), so the prompt walks only the units it
keeps and the decisions are built only when read. The engine is correct for
the built-in stages in their built-in order only (truncation must come first,
since the sums hold tokens after it); `pack` never runs anything else here.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterator, Mapping, MutableMapping, Sequence

from .._events import TextPart
from .._policy import Policy
from .._projection import Item, Projection, Unit
from .._prompt import Message
from .._tokens import REPLY_OVERHEAD, TokenCounter
from ._assemble import message
from ._budget import placeholder_tokens, plan, synthetic_tokens, system_tokens
from ._dedup import Dedup
from ._explain import Common, Facts
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
from ._model import Budget, Decision, Limits
from ._prune import Prune, PruneFacts, RefsAsOf
from ._summaries import Summaries, run_of, shown_budget
from ._truncate import Truncate

__all__: list[str] = []

_VERBATIM, _TRUNCATED, _DEDUPLICATED, _PRUNED, _CLIPPED = range(5)


class IndexedLedger:
    """The prompt as the built-in stages pack it, from running sums."""

    def __init__(
        self, view: Projection, policy: Policy, counter: TokenCounter, index: PackIndex
    ) -> None:
        self.view = view
        self.policy = policy
        self.counter = counter
        index.catch_up(view)
        self._pack_index = index
        self.index: PolicyIndex = index.policy_index(view, policy)
        self.protection = Protection(view, policy)
        self.n_units = len(view.units)
        self.system = system_tokens(view)
        self.synthetic = synthetic_tokens(view, counter, policy.rules)
        self.budget: Budget = plan(policy, self.system, view.tools_tokens)
        self.total = (
            self.system + view.tools_tokens + self.synthetic + REPLY_OVERHEAD + view.unit_tokens
        )
        # what was decided
        self.plan: SummarySection | None = None  # summaries shown (covered units left out)
        self.deduped = False
        self.pruned_all = False
        self.boundary = 0  # prune applies to units before it
        self.shielded: set[int] = set()
        self.points: dict[int, int] = {}  # items pruned one at a time -> their saving
        self.dedup_points: dict[int, int] = {}  # items a break deduplicated -> their saving
        self.rewrite_note = ""  # how a break's rewrites (points, dedup_points) were chosen
        self.cut = 0  # units before it, except protected ones, are dropped
        self.tail_cut = 0  # and, past the tail's start, those before this (last resort)
        self.why: Callable[[Unit], tuple[str, str]] | None = None
        self.tail_why: Callable[[Unit], tuple[str, str]] | None = None
        self.released: dict[int, tuple[str, str]] = {}  # kept units dropped after all
        self.marker: Marker | None = None
        self.summary_why: Mapping[int, str] = {}  # compaction -> why it is not shown
        self._unanswered: set[int] = set()  # open units left out: no placeholder counted

    # -- what the stages read --------------------------------------------------------
    @property
    def held(self) -> bool:
        """True while covered units count (no summary replaces them)."""
        return self.plan is None

    @property
    def clip_limits(self) -> Limits:
        return self.index.clip_limits

    @property
    def dedup_index(self) -> PolicyIndex:
        assert self.index.dedup is not None, "dedup is off in this policy"
        return self.index

    @property
    def prune_facts(self) -> PruneFacts:
        return self._pack_index.facts

    @property
    def summary_tokens(self) -> MutableMapping[int, int]:
        return self._pack_index.summary_tokens

    def summarized(self, unit: int) -> bool:
        """True for a covered unit left out for its summary (not protected)."""
        return (
            self.plan is not None
            and unit in self._pack_index.coverage.covered
            and unit not in self.protection
        )

    # -- the moves ----------------------------------------------------------------------
    def truncate(self, stage: CutRule) -> int:
        self.total += self.index.trunc_delta
        return len(self.index.truncated)

    def clip(self) -> int:
        self.total += self.index.clip_delta
        return len(self.index.clipped)

    def protected_tokens(self) -> int:
        raw = self.index.raw
        return self.synthetic + sum(raw[u] for u in self.protection.units(self.n_units))

    def summarize_covered(self, plan: SummarySection) -> int:
        coverage = self._pack_index.coverage
        index = self.index
        covered = [u for u in self.protection.units(self.n_units) if u in coverage.covered]
        summarized = index.verbatim.held.prefix(self.n_units) - sum(index.raw[u] for u in covered)
        self.total -= summarized
        if plan.shown:
            self.total += plan.tokens + plan.framing
        self.budget, framing = shown_budget(self.budget, plan)
        self.system += framing
        self.plan = plan
        self.summary_why = plan.why
        return index.icount.held.prefix(self.n_units) - sum(
            index.icount.held.values[u] for u in covered
        )

    def keep_originals(self, why: str) -> None:
        self.summary_why = {pos: why for pos in self.view.compactions}

    def deduplicate(self, stage: Replacer) -> int:
        index, held = self.index, self.held
        saved = index.dsave.prefix(self.n_units, held)
        count = index.dcount.prefix(self.n_units, held)
        for u in self.protection.units(self.n_units):
            saved -= index.dsave.value(u, held)
            count -= index.dcount.value(u, held)
        self.total -= saved
        self.deduped = True
        return count

    def prunable_newest_first(self, end: int) -> Iterator[tuple[int, int]]:
        index = self.index
        coverage = self._pack_index.coverage
        units, items = self.view.units, self.view.items
        superseded = index.superseded if self.deduped and index.dedup else {}
        tool_units = index.tool_units
        protection = self.protection
        skip_runs = not self.held
        k = bisect_left(tool_units, end) - 1
        while k >= 0:
            u = tool_units[k]
            if skip_runs and u in coverage.covered:  # skip the whole summarized run
                run = coverage.run_of(u)
                assert run is not None
                k = bisect_left(tool_units, run[0]) - 1
                continue
            k -= 1
            if u in protection:
                continue
            for i in reversed(units[u].items):
                if items[i].kind == "tool" and i not in superseded:
                    yield i, index.tokens[i]

    def prune_candidates(self, stage: Shrinker, end: int, shielded: Sequence[int]) -> list[int]:
        skip = set(shielded)
        saving = self.index.saving
        return [i for i, _ in self.prunable_newest_first(end) if i not in skip and saving[i] > 0]

    def prune_potential(
        self, stage: Shrinker, end: int, shielded: Sequence[int]
    ) -> tuple[int, int, int]:
        index, held = self.index, self.held
        potential = index.ptokens.prefix(end, held)
        count = index.pcount.prefix(end, held)
        saved = index.psave.prefix(end, held)
        for u in self.protection.units(self.n_units):
            if u < end:
                potential -= index.ptokens.value(u, held)
                count -= index.pcount.value(u, held)
                saved -= index.psave.value(u, held)
        for i in shielded:
            if index.saving[i] > 0:
                potential -= index.tokens[i]
                count -= 1
                saved -= index.saving[i]
        return potential, count, saved

    def prune_all(self, stage: Shrinker, end: int, shielded: Sequence[int]) -> int:
        _, count, saved = self.prune_potential(stage, end, shielded)
        self.total -= saved
        self.pruned_all = True
        self.boundary = end
        self.shielded = set(shielded)
        return count

    def prune_one(self, stage: Shrinker, index: int) -> bool:
        saving = self.index.saving[index]
        self.points[index] = saving
        self.total -= saving
        return True

    def drop_oldest(
        self, ends: Sequence[int], target: int, why: Callable[[Unit], tuple[str, str]]
    ) -> tuple[int, int]:
        if not ends:
            return 0, 0
        dropped = self._dropped_before()
        lo, hi = 1, len(ends)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.total - dropped(ends[mid - 1]) <= target:
                hi = mid
            else:
                lo = mid + 1
        self.cut = ends[lo - 1]
        self.why = why
        self.total -= dropped(self.cut)
        units = self.cut - bisect_left(self.protection.older, self.cut)
        if not self.held:  # summarized units are not trimmed
            units -= self._summarized_before(self.cut)
        return lo, units

    def droppable_before(self) -> Callable[[int], int]:
        return self._dropped_before()

    def kept_before(self) -> Callable[[int], int]:
        kept = self._kept_before()
        extra = self._protected_extra()
        if not extra:
            return kept
        ends = [u for u, _ in extra]
        sums = [0]
        for _, tokens in extra:
            sums.append(sums[-1] + tokens)
        return lambda end: kept(end) + sums[bisect_left(ends, end)]

    def _protected_extra(self) -> list[tuple[int, int]]:
        """``(unit, tokens)`` the sums leave out of protected units, which no stage but
        truncation reduces: a covered one is in the prompt as it is (not summarized),
        and what dedup or pruning every candidate would save on one is not saved."""
        index, held = self.index, self.held
        covered = self._pack_index.coverage.covered
        dedup, prune = self.deduped, self.pruned_all
        if held and not dedup and not prune:
            return []
        extra = []
        for u in self.protection.units(self.n_units):
            tokens = 0
            if not held and u in covered:
                tokens = index.raw[u]
            else:
                if dedup:
                    tokens += index.dsave.value(u, held)
                if prune and u < self.boundary:
                    tokens += index.psave.value(u, held)
            if tokens:
                extra.append((u, tokens))
        return extra

    def replay_memo(self, slot: Hashable) -> ReplayMemo | None:
        index = self.index
        memo = index.replay_memo(slot)
        sizes = self._sizes()
        marks = self.deduped or self.pruned_all  # the dedup and prune sums are read
        seen = (len(index.edits), len(index.mark_edits))
        moved = _moved(memo.sizes, sizes) if memo.seen else None
        if moved is None:
            memo.state, memo.edited, memo.sizes, memo.left_out = None, None, sizes, False
        else:
            changed = index.edits[memo.seen[0] :]
            if moved >= 0:  # the protected units counted apart changed from ``moved`` on
                changed.append(moved)
                memo.sizes = sizes
                memo.left_out = memo.left_out or not self.held
            if marks:
                changed += index.mark_edits[memo.seen[1] :]
            if changed:
                first = min(changed)
                memo.edited = first if memo.edited is None else min(memo.edited, first)
        memo.seen = seen
        return memo

    def _sizes(self) -> tuple[Hashable, ...]:
        """What `kept_before` reads beside the index's per-unit sums: the stages'
        decisions so far (equal for two packs: the same sizes where the sums are). The
        last field, the protected units the sums leave out (`_protected_extra`),
        changes as the tail moves on: it changes the sizes from its first changed unit
        on only (`_moved`)."""
        saving = self.index.saving
        return (
            # which units a shown summary stands for (the rewrites leave them out)
            self.held,
            0 if self.held else len(self._pack_index.coverage.covered),
            self.deduped,
            self.boundary if self.pruned_all else -1,
            tuple(sorted(i for i in self.shielded if saving[i] > 0)),
            tuple(sorted(self.points.items())),
            tuple(u for u, _ in self._protected_extra()),
        )

    @property
    def sizes(self) -> PolicyIndex:
        return self.index

    def left_out(self, unit: int) -> bool:
        return self.summarized(unit)

    def rewrite(
        self,
        deduplicated: Sequence[int],
        pruned: Sequence[int],
        dedup: Replacer,
        prune: Replacer,
        note: str,
    ) -> tuple[int, int]:
        index, items, protection = self.index, self.view.items, self.protection
        counts = [0, 0]
        for k, chosen in enumerate((deduplicated, pruned)):
            for i in chosen:
                unit = items[i].unit
                if unit in protection or self.summarized(unit):
                    continue
                if k == 0:
                    saving = index.tokens[i] - index.dedup_tokens[i]
                    self.dedup_points[i] = saving
                else:
                    saving = index.saving[i]
                    self.points[i] = saving
                self.total -= saving
                counts[k] += 1
        self.rewrite_note = note
        return counts[0], counts[1]

    def keep(self, unit: int) -> None:
        protection = self.protection
        if unit in protection or self.summarized(unit):  # a summary stands for it
            return
        insort(protection.older, unit)
        protection.older_set.add(unit)

    def release(self, units: Sequence[int], why: Callable[[Unit], tuple[str, str]]) -> int:
        protection, released = self.protection, 0
        for unit in units:
            if unit >= self.cut or unit in protection.hard or unit not in protection.older_set:
                continue
            # counted as `_dropped_before` counts a kept unit before the cut
            self.total -= self._sum_tokens(unit)
            protection.older.remove(unit)
            protection.older_set.discard(unit)
            self.released[unit] = why(self.view.units[unit])
            released += 1
        return released

    def drop_tail(
        self, ends: Sequence[int], target: int, why: Callable[[Unit], tuple[str, str]]
    ) -> tuple[int, int]:
        # The tail is a few steps: walk it. Its units were never reduced by a stage
        # (protected), so they hold their tokens after truncation and clipping.
        start, raw, hard = self.protection.tail_unit, self.index.raw, self.protection.hard
        groups = dropped = 0
        at = start
        for end in ends:
            if self.total <= target:
                break
            for u in range(at, end):
                if u not in hard:
                    self.total -= raw[u]
                    dropped += 1
            at = end
            groups += 1
        self.tail_cut = at
        self.tail_why = why
        return groups, dropped

    def _summarized_before(self, end: int) -> int:
        """Covered units before ``end`` left out for their summaries (not protected)."""
        coverage = self._pack_index.coverage
        count = 0
        for start, stop in zip(coverage.starts, coverage.ends, strict=True):
            if start >= end:
                break
            count += min(stop, end) - start
        older = self.protection.older
        return count - sum(1 for u in older[: bisect_left(older, end)] if u in coverage.covered)

    def _dropped_before(self) -> Callable[[int], int]:
        """Tokens of the unprotected, unsummarized units before a unit boundary, as the
        stages so far left them."""
        older = self.protection.older
        kept_older = [0]  # prefix sums of the older protected units' tokens
        for u in older:
            kept_older.append(kept_older[-1] + self._sum_tokens(u))
        kept = self._kept_before()

        def dropped(end: int) -> int:
            return kept(end) - kept_older[bisect_left(older, end)]

        return dropped

    def _kept_before(self) -> Callable[[int], int]:
        """Tokens of the unsummarized units before a unit boundary, protected or not, as
        the stages so far left them."""
        index, held = self.index, self.held
        # results shielded from "prune every candidate" and results pruned one by one,
        # by unit: their savings are added back / taken off
        adjust = sorted(
            [
                (self.view.items[i].unit, index.saving[i])
                for i in self.shielded
                if index.saving[i] > 0
            ]
            + [(self.view.items[i].unit, -s) for i, s in self.points.items()]
            + [(self.view.items[i].unit, -s) for i, s in self.dedup_points.items()]
        )
        adjust_units = [u for u, _ in adjust]
        adjust_sums = [0]
        for _, s in adjust:
            adjust_sums.append(adjust_sums[-1] + s)

        def kept(end: int) -> int:
            out = index.verbatim.prefix(end, held)
            if self.deduped:
                out -= index.dsave.prefix(end, held)
            if self.pruned_all:
                out -= index.psave.prefix(min(end, self.boundary), held)
            return out + adjust_sums[bisect_left(adjust_units, end)]

        return kept

    def _sum_tokens(self, unit: int) -> int:
        """A unit's tokens as the sums count them (0 when summarized away)."""
        index, held = self.index, self.held
        out = index.verbatim.value(unit, held)
        if self.deduped:
            out -= index.dsave.value(unit, held)
        if self.pruned_all and unit < self.boundary:
            out -= index.psave.value(unit, held)
        return out

    def dropped_run(self) -> tuple[int, int, int] | None:
        first = self._first_dropped()
        if first < 0:
            return None
        last = self._last_dropped()
        items = self.view.items
        units = self.view.units
        first_pos = items[units[first].items[0]].pos
        last_pos = max(items[i].pos for i in units[last].items)
        after = next((u for u in self.kept_units() if u > last), -1)
        return first_pos, last_pos, after

    def _dropped(self, u: int) -> bool:
        if u < self.cut:
            return u not in self.protection and not self.summarized(u)
        return self.protection.tail_unit <= u < self.tail_cut and u not in self.protection.hard

    def _first_dropped(self) -> int:
        for u in range(max(self.cut, self.tail_cut)):
            if self._dropped(u):
                return u
        return -1

    def _last_dropped(self) -> int:
        for u in range(max(self.cut, self.tail_cut) - 1, -1, -1):
            if self._dropped(u):
                return u
        return -1

    def mark(self, marker: Marker) -> None:
        self.marker = marker
        self.total += marker.tokens

    def settle(self) -> None:
        protection = self.protection
        for u in self.view.open_units:
            if u in protection or u in self._unanswered:
                continue
            if self._dropped(u) or self.summarized(u):
                self._unanswered.add(u)
                tokens = placeholder_tokens(self.view, self.counter, u, self.policy.rules)
                self.total -= tokens
                self.synthetic -= tokens

    # -- the outcome -------------------------------------------------------------------
    def kept_units(self) -> list[int]:
        """Units in the prompt, ascending: protected units before the cut, then every
        unit from the cut on that is neither summarized nor dropped by the last resort.

        Built from ranges (a re-pack walks every kept unit, so no generator per unit)."""
        protection = self.protection
        older, cut, n_units = protection.older, self.cut, self.n_units
        tail = protection.tail_unit
        kept = older[: bisect_left(older, cut)]
        coverage = self._pack_index.coverage
        starts, ends = (coverage.starts, coverage.ends) if self.plan is not None else ([], [])
        k = bisect_left(ends, cut + 1)  # the first run ending after the cut
        u = cut
        while u < n_units:
            if k < len(starts) and starts[k] <= u:
                end = min(ends[k], n_units)
                kept.extend(older[bisect_left(older, u) : bisect_left(older, end)])
                kept.extend(range(max(u, tail), end))
                u = end
                k += 1
            else:
                end = starts[k] if k < len(starts) else n_units
                kept.extend(range(u, end))
                u = end
        if self.tail_cut > tail:  # the last resort dropped protected steps of the tail
            hard, tail_cut = protection.hard, self.tail_cut
            kept = [u for u in kept if u < tail or u >= tail_cut or u in hard]
        return kept

    def message(self, item: Item, form: int) -> Message:
        """A kept item's message in its form (cached in the index)."""
        key = item.index * 5 + form
        cache = self.index.messages
        found = cache.get(key)
        if found is None:
            if form == _VERBATIM:
                found = message(item, None)
            elif form == _TRUNCATED:
                found = message(item, (TextPart(text=self.index.truncated[item.index].text),))
            elif form == _CLIPPED:
                found = message(item, self.index.clipped[item.index].parts)
            elif form == _DEDUPLICATED:
                mark = self.dedup_index.superseded[item.index]
                found = message(item, (TextPart(text=Dedup.text(mark)),))
            else:
                found = message(item, (TextPart(text=Prune.text(item, self.policy)),))
            cache[key] = found
        return found

    def outcome(self) -> Kept:
        """Walk the kept units once: the messages, and what the decisions need."""
        return Kept(self)


def _moved(before: Hashable, now: tuple[Hashable, ...]) -> int | None:
    """How the sizes ``now`` (`IndexedLedger._sizes`) differ from ``before``: -1 not at
    all, a unit when only the protected units counted apart differ (the first unit in
    one and not the other: the sizes of the units before it are the same), None
    otherwise (sizes of another kind)."""
    if before == now:
        return -1
    if not isinstance(before, tuple) or len(before) != len(now) or before[:-1] != now[:-1]:
        return None
    old, new = before[-1], now[-1]
    assert isinstance(old, tuple) and isinstance(new, tuple)
    moved: set[int] = set(old).symmetric_difference(new)
    return min(moved)


class Kept:
    """The kept items' messages of an indexed pack and, on demand, its decisions.

    Holds what the decisions need as of the pack: the forms of kept items that are
    not verbatim, the references of pruned ones, the cut, the protection and the
    covered runs."""

    def __init__(self, ledger: IndexedLedger) -> None:
        self.ledger = ledger
        self.forms: dict[int, int] = {}
        self.refs: RefsAsOf | None = None  # of pruned items, as of the pack (`freeze`)
        self.used: list[int] = []
        self.facts: Facts | None = None
        coverage = ledger._pack_index.coverage
        self.runs = (
            (list(coverage.starts), list(coverage.ends)) if ledger.plan is not None else ([], [])
        )
        self._details: dict[int, str] | None = None

    def adder(self) -> Callable[[list[Unit], list[Message], list[int]], None]:
        """The function that appends kept units' messages in their forms and their
        tokens, recording the forms for the decisions: the hot loop of a re-pack, so
        what it reads is bound once here (the stages are done) and the cheap tests come
        first (most items are in none of the sets)."""
        ledger = self.ledger
        index = ledger.index
        items, cache = ledger.view.items, index.messages
        tail, older = ledger.protection.tail_unit, ledger.protection.older_set
        superseded: Mapping[int, object] = (
            index.superseded if ledger.deduped and index.dedup is not None else ledger.dedup_points
        )
        points, shielded, saving = ledger.points, ledger.shielded, index.saving
        prune_before = ledger.boundary if ledger.pruned_all else -1
        clipped, truncated = index.clipped, index.truncated
        forms, used = self.forms, self.used.append
        message_in = ledger.message

        def add_units(
            units: list[Unit],
            messages: list[Message],
            tokens: list[int],
        ) -> None:
            append_message, append_tokens = messages.append, tokens.append
            for unit in units:
                u = unit.index
                protected = u >= tail or u in older  # `u in ledger.protection`, inlined
                prunable = not protected and u < prune_before
                for i in unit.items:
                    if i in superseded and not protected:
                        form, count = _DEDUPLICATED, index.dedup_tokens[i]
                    elif i in points or (prunable and saving[i] > 0 and i not in shielded):
                        form, count = _PRUNED, index.tokens[i] - saving[i]
                    elif i in clipped:
                        form, count = _CLIPPED, index.tokens[i]
                    elif i in truncated:
                        form, count = _TRUNCATED, index.tokens[i]
                    else:
                        form, count = _VERBATIM, items[i].tokens
                    if form:  # not _VERBATIM, which is 0
                        forms[i] = form
                    key = i * 5 + form
                    used(key)
                    found = cache.get(key)  # the usual case: built by an earlier pack
                    append_message(found if found is not None else message_in(items[i], form))
                    append_tokens(count)

        return add_units

    def trim_cache(self) -> None:
        """Keep the message cache to recent messages."""
        cache = self.ledger.index.messages
        if len(cache) > 2 * len(self.used) + 256:
            self.ledger.index.messages = {key: cache[key] for key in self.used if key in cache}

    def freeze(self) -> None:
        """Snapshot the projection's facts for decisions built later."""
        self.facts = Facts(self.ledger.view)
        if _PRUNED in self.forms.values():
            self.refs = self.ledger.prune_facts.as_of_now()

    def decision(self, i: int, common: Common) -> Decision:
        """The decision of an item of a unit, as of the pack."""
        assert self.facts is not None
        ledger = self.ledger
        item = self.facts.items[i]
        original, unit = item.tokens, item.unit
        protected = unit in ledger.protection
        if not protected and run_of(*self.runs, unit) is not None:
            return Decision(
                **common,
                decision="summarized",
                rule="summaries.compaction",
                detail=self._summary_detail(item),
                original_tokens=original,
            )
        released = ledger.released.get(unit)
        if released is not None:
            rule, detail = released
            return Decision(
                **common, decision="trimmed", rule=rule, detail=detail, original_tokens=original
            )
        why = None
        if unit < ledger.cut and not protected:
            why = ledger.why
        elif (
            ledger.protection.tail_unit <= unit < ledger.tail_cut
            and unit not in ledger.protection.hard
        ):
            why = ledger.tail_why
        if why is not None:
            rule, detail = why(self.facts.units[unit])
            return Decision(
                **common, decision="trimmed", rule=rule, detail=detail, original_tokens=original
            )
        return self._kept(item, common, protected)

    def _kept(self, item: Item, common: Common, protected: bool) -> Decision:
        ledger, index, i = self.ledger, self.ledger.index, item.index
        form, original = self.forms.get(i, _VERBATIM), item.tokens
        if form == _CLIPPED:
            clip = index.clipped[i]
            return Decision(
                **common,
                decision="clipped",
                rule="clip.tokens",
                detail=clip.detail,
                tokens=clip.tokens,
                original_tokens=original,
            )
        if form == _TRUNCATED:
            cut = index.truncated[i]
            return Decision(
                **common,
                decision="truncated",
                rule=cut.rule,
                detail=Truncate.detail(item, cut.rule),
                tokens=cut.tokens,
                original_tokens=original,
            )
        if form == _DEDUPLICATED:
            tier, by, _ = ledger.dedup_index.superseded[i]
            assert self.facts is not None
            detail = f"superseded by position {self.facts.items[by].pos}"
            if i in ledger.dedup_points:
                detail += f"; {ledger.rewrite_note}"
            return Decision(
                **common,
                decision="deduplicated",
                rule=f"dedup.tier{tier}",
                detail=detail,
                tokens=index.dedup_tokens[i],
                original_tokens=original,
            )
        if form == _PRUNED:
            assert self.refs is not None
            detail = Prune.detail(item, ledger.policy, self.refs.refs(i), self.refs.decided(i))
            if ledger.rewrite_note:
                detail += f"; {ledger.rewrite_note}"
            return Decision(
                **common,
                decision="pruned",
                rule="prune.score",
                detail=detail,
                tokens=index.tokens[i] - index.saving[i],
                original_tokens=original,
            )
        return Decision(
            **common,
            decision="verbatim",
            rule="verbatim.protected" if protected else "verbatim",
            tokens=original,
            original_tokens=original,
        )

    def _summary_detail(self, item: Item) -> str:
        assert self.facts is not None
        if self._details is None:
            facts = self.facts
            self._details = Summaries.detail_of(
                facts.events, facts.compactions[: facts.n_compactions]
            )
        found = self._details.get(item.pos)
        if found is not None:
            return found
        facts = self.facts
        members = [facts.items[i] for i in facts.units[item.unit].items if i < facts.n_items]
        return Summaries.unit_detail(self._details, members)

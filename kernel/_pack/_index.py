"""What the built-in stages would do to each item, kept up to date as a session grows.

Theory of operation
-------------------
A `PackIndex` belongs to one projection and is owned by whoever keeps the
projection (the `Packer` keeps one per cached session and passes it to `pack`;
`pack` builds a throwaway one when none is given). It folds the projection's
items and compactions in order, once each, into the state the stages' rules
read:

* per session (the same under every policy): the pruning facts
  (`PruneFacts`: references and decision language; folded when first read,
  which a pack that prunes nothing never does), the units committed
  compactions cover (`Coverage`), and each summary block's tokens;
* per policy, in a `PolicyIndex` keyed by the policy fields the per-item
  results depend on (the truncation limits, whether dedup is on, the
  tool-kind mapping): each item's truncation (`Truncate.cut`) and tokens after
  it, the dedup marks (`DedupIndex`) and their placeholders' tokens, what
  pruning each result saves (`Prune.tokens`), and per-unit sums of those in
  Fenwick trees: tokens after truncation, dedup savings and counts, and the
  savings, tokens and number of the results pruning could replace (those that
  save tokens and are not superseded). Each sum keeps the units committed
  compactions cover apart (`Tally`), so a pack can count them or leave them out;
  ``raw`` keeps every unit's tokens after truncation.

The incremental engine (``_indexed``) answers the stages' moves from these
sums; the reference engine reads the same per-item results, so an item's
truncation, marks and placeholders are computed by one piece of code for both.
A rewind rebuilds the projection (its ``generation`` changes) and the index
starts again. Up to four policy indexes are kept, most recently used last.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Sequence

from .._events import Part, TextPart
from .._policy import Policy
from .._projection import Item, Projection
from .._prompt import Message
from .._tokens import TokenCounter
from ._budget import system_tokens
from ._clip import Clip, ClipCut, limits
from ._dedup import Dedup, DedupIndex
from ._ledger import ReplayMemo
from ._model import Limits
from ._prune import Prune, PruneFacts
from ._summaries import Coverage
from ._truncate import REPLACEABLE, Cut, Truncate

__all__ = ["PackIndex"]

_MAX_POLICY_INDEXES = 4
_MAX_REPLAYS = 4


class Sums:
    """Prefix sums over a growing list of ints with point changes (a Fenwick tree).

    Changes go to ``values`` at once and into the tree when a prefix sum is next
    asked for (`sync`), which rebuilds it in linear time after a bulk load and
    updates it in O(log n) per change otherwise: a tree no stage reads in a pack
    (the dedup and prune sums of a pack with neither) is not brought up to date.
    """

    __slots__ = ("_built", "_pending", "_stale", "_tree", "values")

    def __init__(self) -> None:
        self.values: list[int] = []
        self._tree = [0]
        self._built = 0
        self._pending: dict[int, int] = {}
        self._stale = False  # values or changes not yet in the tree

    def append(self, value: int) -> None:
        self.values.append(value)
        self._stale = True

    def add(self, index: int, delta: int) -> None:
        self.values[index] += delta
        if index < self._built:
            self._pending[index] = self._pending.get(index, 0) + delta
            self._stale = True

    def sync(self) -> None:
        """Bring the tree up to date with ``values``."""
        if not self._stale:
            return
        values = self.values
        n = len(values)
        built = self._built
        if (n - built + len(self._pending)) * 8 > n:
            self._tree = _built_tree(values)
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
        self._stale = False

    def prefix(self, end: int) -> int:
        """``sum(values[:end])``."""
        if self._stale:
            self.sync()
        tree = self._tree
        total = 0
        while end > 0:
            total += tree[end]
            end &= end - 1
        return total


class Tally:
    """A per-unit quantity in two Fenwick trees: the units no committed compaction
    covers (``live``) and the covered ones (``held``), so that a pack that shows the
    originals of covered units counts both and one that summarizes them only the first."""

    __slots__ = ("held", "live")

    def __init__(self) -> None:
        self.live = Sums()
        self.held = Sums()

    def append(self) -> None:
        self.live.append(0)
        self.held.append(0)

    def add(self, unit: int, delta: int, covered: bool) -> None:
        (self.held if covered else self.live).add(unit, delta)

    def cover(self, unit: int) -> None:
        """Move a unit's value from live to held."""
        value = self.live.values[unit]
        if value:
            self.live.add(unit, -value)
            self.held.add(unit, value)

    def value(self, unit: int, held: bool) -> int:
        """A unit's value (a covered unit counts only with ``held``)."""
        return self.live.values[unit] + (self.held.values[unit] if held else 0)

    def prefix(self, end: int, held: bool) -> int:
        """The sum over units before ``end`` (covered ones only with ``held``)."""
        return self.live.prefix(end) + (self.held.prefix(end) if held else 0)


def _built_tree(values: list[int]) -> list[int]:
    n = len(values)
    tree = [0, *values]
    for i in range(1, n + 1):
        j = i + (i & -i)
        if j <= n:
            tree[j] += tree[i]
    return tree


class PolicyIndex:
    """Per-item results of the stages under one policy key, and per-unit sums."""

    __slots__ = (
        "clip_delta",
        "clip_limits",
        "clipped",
        "dcount",
        "dedup",
        "dedup_tokens",
        "done",
        "dsave",
        "edits",
        "icount",
        "kinds",
        "mark_edits",
        "marks",
        "messages",
        "pcount",
        "positions",
        "psave",
        "ptokens",
        "raw",
        "replays",
        "rules",
        "saving",
        "superseded",
        "tokens",
        "tool_units",
        "trunc_delta",
        "trunc_key",
        "truncated",
        "verbatim",
    )

    def __init__(self, policy: Policy, clip_limits: Limits) -> None:
        self.trunc_key = Truncate.key(policy)
        self.rules = policy.rules
        self.clip_limits = clip_limits
        self.clipped: dict[int, ClipCut] = {}  # item -> its clipped form
        self.clip_delta = 0
        self.kinds = dict(policy.tool_kinds)
        self.dedup = DedupIndex(self.kinds) if policy.dedup else None
        self.done = 0  # items folded in
        self.marks = 0  # superseded marks folded in
        self.tokens: list[int] = []  # per item, after truncation
        self.saving: list[int] = []  # per item: tokens pruning saves (0 unless a tool result)
        self.positions: list[int] = []  # per item, its lineage position (ascending)
        self.truncated: dict[int, Cut] = {}  # item -> its truncation
        self.trunc_delta = 0
        self.dedup_tokens: dict[int, int] = {}  # superseded item -> its placeholder's tokens
        #: the marks dedup acts on: every mark, except (rules 3) one whose placeholder
        #: would not be smaller than the result it replaces
        self.superseded: dict[int, tuple[int, int, str]] = {}
        self.raw: list[int] = []  # per unit, tokens after truncation (covered or not)
        self.verbatim = Tally()
        self.dsave = Tally()
        self.dcount = Tally()
        self.psave = Tally()
        self.ptokens = Tally()
        self.pcount = Tally()
        self.icount = Tally()  # per unit, its items
        self.tool_units: list[int] = []  # units holding a tool result, ascending
        self.messages: dict[int, Message] = {}  # item * 5 + form -> message (recent ones)
        #: units whose values changed after a later unit was folded (a late result, a
        #: unit newly covered), in order: what a replay memo saved before must not
        #: resume past; ``mark_edits`` the same for the dedup and prune sums
        self.edits: list[int] = []
        self.mark_edits: list[int] = []
        self.replays: dict[Hashable, ReplayMemo] = {}  # replay memos, most recent last

    def matches(self, policy: Policy, clip_limits: Limits) -> bool:
        """True when this index holds the per-item results of ``policy``."""
        return (
            self.trunc_key == Truncate.key(policy)
            and self.rules == policy.rules
            and self.clip_limits == clip_limits
            and (self.dedup is not None) == policy.dedup
            and self.kinds == policy.tool_kinds
        )

    def replay_memo(self, slot: Hashable) -> ReplayMemo:
        """The replay memo kept in ``slot`` (a new one the first time); the few most
        recently used are kept."""
        memo = self.replays.pop(slot, None)
        if memo is None:
            memo = ReplayMemo()
        self.replays[slot] = memo
        while len(self.replays) > _MAX_REPLAYS:
            del self.replays[next(iter(self.replays))]
        return memo

    def sums(self) -> tuple[Tally, ...]:
        """Every per-unit sum."""
        return (
            self.verbatim,
            self.dsave,
            self.dcount,
            self.psave,
            self.ptokens,
            self.pcount,
            self.icount,
        )

    def catch_up(self, view: Projection, policy: Policy, covered: set[int]) -> None:
        """Fold in the items appended since the last call."""
        items = view.items
        counter = view.counter
        for index in range(self.done, len(items)):
            item = items[index]
            self._item(item, policy, counter, covered)
            if self.dedup is not None and item.unit >= 0 and item.kind == "tool":
                self.dedup.add(item)
                self._fold_marks(items, counter, covered)
        self.done = len(items)

    def _item(self, item: Item, policy: Policy, counter: TokenCounter, covered: set[int]) -> None:
        unit = item.unit
        tokens = item.tokens
        saving = 0
        if unit >= 0:
            parts: tuple[Part, ...] | None = None
            if self.trunc_key is not None and item.kind in REPLACEABLE:
                cut = Truncate.cut(item, policy, counter)
                if cut is not None:
                    self.truncated[item.index] = cut
                    self.trunc_delta += cut.tokens - tokens
                    tokens = cut.tokens
                    parts = (TextPart(text=cut.text),)
            clip = Clip.cut(item, parts, tokens, self.clip_limits, counter)
            if clip is not None:
                self.clipped[item.index] = clip
                self.clip_delta += clip.tokens - tokens
                tokens = clip.tokens
            if unit == len(self.raw):
                for sums in self.sums():
                    sums.append()
                self.raw.append(0)
            self.raw[unit] += tokens
            if unit < len(self.raw) - 1:
                self.edits.append(unit)
            held = unit in covered
            self.verbatim.add(unit, tokens, held)
            self.icount.add(unit, 1, held)
            if item.kind == "tool":
                _add_sorted(self.tool_units, unit)
                saving = tokens - Prune.tokens(item, policy, counter)
                if saving > 0:
                    self.psave.add(unit, saving, held)
                    self.ptokens.add(unit, tokens, held)
                    self.pcount.add(unit, 1, held)
        self.tokens.append(tokens)
        self.saving.append(saving)
        self.positions.append(item.pos)

    def _fold_marks(self, items: Sequence[Item], counter: TokenCounter, covered: set[int]) -> None:
        assert self.dedup is not None
        marked = self.dedup.marked
        while self.marks < len(marked):
            index = marked[self.marks]
            self.marks += 1
            mark = self.dedup.superseded[index]
            placeholder = Dedup.tokens(mark, counter)
            tokens = self.tokens[index]
            if self.rules >= 3 and placeholder >= tokens:
                continue  # a placeholder is never larger than what it replaces
            self.superseded[index] = mark
            self.dedup_tokens[index] = placeholder
            unit = items[index].unit
            if unit < len(self.raw) - 1:
                self.mark_edits.append(unit)
            held = unit in covered
            self.dsave.add(unit, tokens - placeholder, held)
            self.dcount.add(unit, 1, held)
            saving = self.saving[index]
            if saving > 0:  # a superseded result is deduplicated, not pruned
                self.psave.add(unit, -saving, held)
                self.ptokens.add(unit, -tokens, held)
                self.pcount.add(unit, -1, held)

    def cover(self, units: list[int]) -> None:
        """Move newly covered units to the held sums."""
        folded = [unit for unit in units if unit < len(self.raw)]
        if folded:
            self.edits.append(min(folded))
        for unit in units:
            if unit >= len(self.raw):
                continue  # folded later, as covered
            for sums in self.sums():
                sums.cover(unit)


class PackIndex:
    """The stages' incremental state for one projection (see the module docstring)."""

    def __init__(self) -> None:
        self.generation = -1
        self._reset()

    def _reset(self) -> None:
        self._facts = PruneFacts()
        self._items: Sequence[Item] = ()
        self.coverage = Coverage()
        self.summary_tokens: dict[int, int] = {}
        self._policies: list[PolicyIndex] = []
        self._positions: list[int] = []

    @property
    def facts(self) -> PruneFacts:
        """The pruning facts as of the latest `catch_up`, folded when first read: only
        pruning's priorities and a pruned result's decision read them (no rules 3 pack
        outside a recovery), so a pack that reads none does not pay for the fold of
        every assistant message's text."""
        facts, items = self._facts, self._items
        seen = len(self._positions)
        if facts.done < seen:
            facts.catch_up(items if len(items) == seen else items[:seen])
        return facts

    def catch_up(self, view: Projection) -> None:
        """Fold in what the projection gained since the last call (session state)."""
        if view.generation != self.generation:
            self._reset()
            self.generation = view.generation
        items = self._items = view.items
        self._positions.extend(item.pos for item in items[len(self._positions) :])
        new = self.coverage.catch_up(view, self._positions)
        if new:
            for index in self._policies:
                index.cover(new)

    def policy_index(self, view: Projection, policy: Policy) -> PolicyIndex:
        """The policy's index, created or brought up to date (`catch_up` first)."""
        clip_limits = limits(policy, system_tokens(view), view.tools_tokens)
        found: PolicyIndex | None = None
        for candidate in self._policies:
            if candidate.matches(policy, clip_limits):
                found = candidate
                break
        if found is None:
            found = PolicyIndex(policy, clip_limits)
            self._policies.append(found)
            del self._policies[:-_MAX_POLICY_INDEXES]
        found.catch_up(view, policy, self.coverage.covered)
        return found


def _add_sorted(values: list[int], value: int) -> None:
    """Add ``value`` to an ascending list of distinct ints (usually at its end)."""
    if not values or values[-1] < value:
        values.append(value)
        return
    at = bisect_left(values, value)
    if values[at] != value:
        values.insert(at, value)

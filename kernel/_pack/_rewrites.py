"""Rules 3: the dedup and pruning a prefix break applies, and the cost model.

Under rules 3 earlier tool results are rewritten (deduplicated or pruned) only
at a prefix break, all the pending ones together, and those rewrites, and only
they, stay until the next break; between breaks a request only appends. Like
the cut, the rewrites are recomputed from the log prefix at every pack, never
remembered: a break's rewrites are what dedup and pruning choose on the log as
it stood at that break's request (a `Point`), applied to the history the break
keeps (from the cut on):

* dedup: every result superseded by a result before the request (a mark of
  the dedup index whose superseding result came first), older than the
  request's protected tail (its latest ``tail_steps`` steps);
* pruning: every result older than the protected turns and than the newest
  ``prune_protect_tokens`` of tool output before them that pruning shrinks and
  dedup does not replace. A break prunes every candidate (the order of the
  candidates matters only when pruning stops at a level; a break rewrites the
  history it keeps anyway), so neither references nor decision language change
  what a break rewrites.

A trim break (forced by the high watermark) re-sends everything after the cut
uncached anyway, so its rewrites cost nothing more. Between trim breaks the
rewrites that became pending may be worth a break of their own: `value` weighs
the tokens they save on each of the next ``cache_horizon_turns`` requests
(cache reads no longer paid) against the tokens after the first rewritten
result written to the cache again, at the policy's prices, in exact fractions,
so the decision is the same on every platform. `Trim.estimate` words the same
arithmetic.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from itertools import compress, islice
from operator import sub
from typing import NamedTuple, Protocol

from .._policy import Policy
from .._projection import Projection

__all__: list[str] = []

_CACHED_REWRITES = 64  # rewrites a basis kept between packs holds (the recent points)


class ItemSizes(Protocol):
    """What the policy's index says of each item (``_index.PolicyIndex``)."""

    @property
    def tokens(self) -> Sequence[int]:
        """Per item, its tokens after truncation and clipping."""

    @property
    def saving(self) -> Sequence[int]:
        """Per item, what pruning it saves (0 unless a tool result)."""

    @property
    def superseded(self) -> Mapping[int, tuple[int, int, str]]:
        """The dedup marks acted on, in the order they were made."""

    @property
    def dedup_tokens(self) -> Mapping[int, int]:
        """A superseded item's placeholder tokens."""


def value(policy: Policy, saved: int, written: int) -> Fraction:
    """A break's value in millionths of the price unit: ``saved`` tokens no longer sent
    on each of the next ``cache_horizon_turns`` requests (cache reads had they stayed)
    against ``written`` tokens after the change written to the cache again (cache reads
    had there been no break). Exact (the prices as the binary fractions they are)."""
    horizon = max(policy.cache_horizon_turns, 1)
    read = Fraction(policy.cache_read_price)
    write = Fraction(policy.cache_write_price)
    return saved * horizon * read - written * (write - read)


class Point(NamedTuple):
    """The log as a request saw it, for the rewrites: ``marks``, the dedup marks made
    before the request; ``boundary``, the first unit of its protected turns; ``shield``,
    the first tool result (in `Basis.results`) of the newest ``prune_protect_tokens``
    of tool output before that boundary; ``tail``, the first unit of its protected
    tail (its latest ``tail_steps`` steps, or its turn after the opening message)."""

    marks: int
    boundary: int
    shield: int
    tail: int


class Basis:
    """Per pack, the tool results and dedup marks a break may rewrite, with prefix sums.

    Results in units a shown summary stands for (``left_out``) count nothing: they are
    not in the prompt."""

    def __init__(
        self,
        view: Projection,
        sizes: ItemSizes,
        policy: Policy,
        left_out: Callable[[int], bool],
    ) -> None:
        self.policy = policy
        self.turns = view.turn_starts
        self.assistants = view.assistant_units
        self.steps = max(policy.tail_steps, 1)
        self.results: list[int] = []
        self.result_units: list[int] = []
        self.tsum, self.psum = [0], [0]
        self.saving = sizes.saving
        self._where: dict[int, int] = {}
        # the marks by the unit of the superseding result: (that unit,
        # unit of the superseded one, its item, what dedup saves, its place in results)
        self.marks: list[tuple[int, int, int, int, int]] = []
        self.by_units: list[int] = []
        self._cache: dict[Point, Rewrites] = {}
        self._last: Rewrites | None = None  # the rewrites built last
        self.version = 0  # moves on when marks go in before a point's
        self._items = self._marks = 0  # items and marks folded in
        self.extend(view, sizes, left_out)

    def extend(self, view: Projection, sizes: ItemSizes, left_out: Callable[[int], bool]) -> None:
        """Fold in the items and dedup marks added since the last call: a basis kept
        between packs of one projection (the replay memo keeps it) is then the one a
        fresh `Basis` would be, as long as ``left_out`` answers as before for the units
        folded in (the memo is dropped when the summaries shown change)."""
        items = view.items
        self.turns, self.assistants = view.turn_starts, view.assistant_units
        self._last = None  # a pack builds its rewrites up from its own
        if len(self._cache) > _CACHED_REWRITES:
            self._cache.clear()  # a memo's basis would grow with every request
        tokens, saving = sizes.tokens, sizes.saving
        self.saving = saving
        prune = self.policy.prune
        results, result_units, where = self.results, self.result_units, self._where
        tsum, psum = self.tsum, self.psum
        for i in range(self._items, len(items)):
            item = items[i]
            if item.kind != "tool" or item.unit < 0:
                continue
            out = left_out(item.unit)
            where[i] = len(results)
            results.append(i)
            result_units.append(item.unit)
            tsum.append(tsum[-1] + (0 if out else tokens[i]))
            psum.append(psum[-1] + (saving[i] if prune and not out and saving[i] > 0 else 0))
        self._items = len(items)
        if not self.policy.dedup:
            return
        superseded = sizes.superseded
        if len(superseded) == self._marks:
            return
        dedup_tokens = sizes.dedup_tokens
        marks, by_units = self.marks, self.by_units
        for i, (_, by, _) in islice(superseded.items(), self._marks, None):
            unit = items[i].unit
            if unit < 0 or left_out(unit):
                continue
            mark = (items[by].unit, unit, i, tokens[i] - dedup_tokens[i], where[i])
            # stable by the superseding unit: a late result's marks go in order
            at = bisect_right(by_units, mark[0])
            if at < len(marks):
                self._cache.clear()  # the marks before a point changed
                self.version += 1
            marks.insert(at, mark)
            by_units.insert(at, mark[0])
        self._marks = len(superseded)

    @staticmethod
    def key(policy: Policy) -> tuple[object, ...]:
        """The policy fields the rewrites and the cost model read (beside the index's
        own: truncation, dedup, the tool kinds)."""
        return (
            policy.dedup,
            policy.prune,
            policy.prune_protect_turns,
            policy.prune_protect_tokens,
            policy.cache_horizon_turns,
            policy.cache_read_price,
            policy.cache_write_price,
        )

    def point(self, end: int) -> Point:
        """The `Point` of the request made before unit ``end``."""
        protect = self.policy.prune_protect_turns
        n_turns = bisect_left(self.turns, end)
        if protect == 0:
            boundary = end
        elif n_turns - protect < 0:
            boundary = 0
        else:
            boundary = self.turns[n_turns - protect]
        before = bisect_left(self.result_units, boundary)
        tsum = self.tsum
        shield = bisect_left(tsum, tsum[before] - self.policy.prune_protect_tokens, 0, before + 1)
        if not self.policy.prune:
            shield = 0
        # the protected tail, as the watermark replay reckons it
        assistants, steps = self.assistants, self.steps
        opening = self.turns[n_turns - 1] if n_turns else -1
        j = bisect_left(assistants, end)
        first = bisect_right(assistants, opening)
        tail = assistants[j - steps] if j - first > steps else opening + 1
        return Point(bisect_left(self.by_units, end), boundary, shield, max(tail, 0))

    def clear(self) -> None:
        """Forget the rewrites computed so far (a pack's own; the basis outlives it)."""
        self._cache.clear()
        self._last = None

    def rewrites(self, point: Point) -> Rewrites:
        """The rewrites of a break at ``point`` (shared by the requests that see it)."""
        cache = self._cache
        found = cache.pop(point, None)
        if found is None:
            if len(cache) >= 4:  # a few points at a time (the basis is kept)
                del cache[next(iter(cache))]  # the one used longest ago
            last = self._last
            found = Rewrites(
                self, point, last if last is not None and last.follows(point) else None
            )
            self._last = found
        cache[point] = found
        return found


class Rewrites:
    """The rewrites a break at a `Point` makes: dedup of the marks it knows whose result
    is older than its protected tail, pruning of the unshielded results before those
    turns that dedup does not replace. `saving` and `items` take the cut: only the
    history a break keeps is rewritten.

    Built from ``base``, the rewrites of an earlier point of the same basis (no more
    marks, a tail no later), when given: the marks newly under the tail are found by
    bisect among those the base left waiting, so a replay's rewrites cost what changed
    between its points, not every mark so far (`_reference` is the walk over every
    mark that this must equal)."""

    def __init__(self, basis: Basis, point: Point, base: Rewrites | None = None) -> None:
        self.basis, self.point = basis, point
        self.version = basis.version
        saving = basis.saving
        prune = basis.policy.prune
        marks, tail = basis.marks, point.tail

        def row(mark: tuple[int, int, int, int, int]) -> tuple[int, int, int, int, int]:
            _, unit, i, dsave, p = mark
            return (unit, i, dsave, p, dsave - (saving[i] if prune and saving[i] > 0 else 0))

        # per mark under the tail, by unit and item: its unit and item, what dedup
        # saves, its place in results, and what it saves on a pruned result
        if base is None:
            rows = sorted(row(mark) for mark in marks[: point.marks])
            under = bisect_left(rows, (tail,))
            self.waiting = rows[under:]  # the marks known, not yet under the tail
            rows = rows[:under]
            self.keys = [(r[0], r[1]) for r in rows]
            self.units = [r[0] for r in rows]
            self.deduped = [r[1] for r in rows]
            self.dsaves = [r[2] for r in rows]
            self.places = [r[3] for r in rows]
            self.cuts = [r[4] for r in rows]
            return
        # the marks the base left waiting that are now under the tail follow every
        # mark the base has under its own
        waiting = base.waiting
        under = bisect_left(waiting, (tail,))
        moved, self.waiting = waiting[:under], waiting[under:]
        keys = base.keys + [(r[0], r[1]) for r in moved]
        units, deduped = base.units + [r[0] for r in moved], base.deduped + [r[1] for r in moved]
        dsaves, places = base.dsaves + [r[2] for r in moved], base.places + [r[3] for r in moved]
        cuts = base.cuts + [r[4] for r in moved]
        for mark in marks[base.point.marks : point.marks]:
            new = row(mark)
            if new[0] >= tail:
                insort(self.waiting, new)
                continue
            at = bisect_left(keys, (new[0], new[1]))
            keys.insert(at, (new[0], new[1]))
            units.insert(at, new[0])
            deduped.insert(at, new[1])
            dsaves.insert(at, new[2])
            places.insert(at, new[3])
            cuts.insert(at, new[4])
        self.keys, self.units, self.deduped = keys, units, deduped
        self.dsaves, self.places, self.cuts = dsaves, places, cuts

    def follows(self, point: Point) -> bool:
        """Whether the rewrites at ``point`` may be built from these."""
        return (
            self.version == self.basis.version
            and self.point.marks <= point.marks
            and self.point.tail <= point.tail
        )

    def saving(self, start: int) -> int:
        """Tokens the rewrites save in units from ``start`` on."""
        basis = self.basis
        p = bisect_left(basis.result_units, start)
        shield = self.point.shield
        pruned = basis.psum[shield] - basis.psum[p] if p < shield else 0
        # a mark saves what dedup saves beyond pruning when its result is before the
        # shield, else what dedup saves
        b = bisect_left(self.units, start)
        below = map(shield.__gt__, self.places[b:])
        kept: int = sum(compress(map(sub, self.dsaves[b:], self.cuts[b:]), below))
        return pruned + sum(self.dsaves[b:]) - kept

    def items(self, cut: int) -> tuple[list[int], list[int]]:
        """``(deduplicated, pruned)`` item indexes from unit ``cut`` on, ascending."""
        basis = self.basis
        deduped = self.deduped[bisect_left(self.units, cut) :]
        if not basis.policy.prune:
            return sorted(deduped), []
        skip = set(self.deduped)
        saving, results = basis.saving, basis.results
        pruned = [
            results[p]
            for p in range(bisect_left(basis.result_units, cut), self.point.shield)
            if saving[results[p]] > 0 and results[p] not in skip
        ]
        return sorted(deduped), pruned

    def first_change(self, earlier: Rewrites | None, cut: int) -> int:
        """The first unit from ``cut`` on whose results these rewrites change beyond the
        ``earlier`` break's (-1: none)."""
        basis = self.basis
        first = -1
        b = bisect_left(self.units, cut)
        new = set(self.deduped[b:])
        if earlier is not None:
            new.difference_update(earlier.deduped)
        if new:
            first = next(compress(self.units[b:], map(new.__contains__, self.deduped[b:])))
        if basis.policy.prune:
            skip = set(self.deduped)
            saving, results = basis.saving, basis.results
            start = bisect_left(basis.result_units, cut)
            if earlier is not None:
                start = max(start, earlier.point.shield)
            stop = self.point.shield
            if first >= 0:
                stop = min(stop, bisect_right(basis.result_units, first))
            for p in range(start, stop):
                i = results[p]
                if saving[i] > 0 and i not in skip and basis.psum[p + 1] > basis.psum[p]:
                    unit = basis.result_units[p]
                    return unit if first < 0 else min(unit, first)
        return first

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
from collections.abc import Callable, Container, Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from heapq import heappop, heappush
from itertools import accumulate, compress, islice
from typing import NamedTuple, Protocol

from .._policy import Policy
from .._projection import Projection

__all__: list[str] = []


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
    gain, cost, scale = _prices(
        max(policy.cache_horizon_turns, 1), policy.cache_read_price, policy.cache_write_price
    )
    return Fraction(saved * gain - written * cost, scale)


def worth(policy: Policy, saved: int, written: int) -> bool:
    """Whether a break's `value` is above 0 (in integers)."""
    gain, cost, _ = _prices(
        max(policy.cache_horizon_turns, 1), policy.cache_read_price, policy.cache_write_price
    )
    return saved * gain > written * cost


@lru_cache(maxsize=16)
def _prices(horizon: int, read: float, write: float) -> tuple[int, int, int]:
    """`value` over a common denominator: ``saved * horizon * read - written * (write -
    read)`` is ``(saved * gain - written * cost) / scale`` (integers: a replay weighs
    thousands of points)."""
    r, w = Fraction(read), Fraction(write)
    scale = r.denominator * w.denominator
    return (
        horizon * r.numerator * w.denominator,
        w.numerator * r.denominator - r.numerator * w.denominator,
        scale,
    )


_new_point = tuple.__new__  # a `Point` from a tuple, without its Python-level constructor


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
        self.front = _Front(self)
        self._items = self._marks = 0  # items and marks folded in
        self.extend(view, sizes, left_out)

    def extend(self, view: Projection, sizes: ItemSizes, left_out: Callable[[int], bool]) -> None:
        """Fold in the items and dedup marks added since the last call: a basis kept
        between packs of one projection (the replay memo keeps it) is then the one a
        fresh `Basis` would be, as long as ``left_out`` answers as before for the units
        folded in (the memo is dropped when the summaries shown change)."""
        items = view.items
        self.turns, self.assistants = view.turn_starts, view.assistant_units
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
                self._last = None
                self.version += 1
                self.front.reset()
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
        return _new_point(Point, (bisect_left(self.by_units, end), boundary, shield, max(tail, 0)))

    def clear(self) -> None:
        """Forget the rewrites computed so far (a pack's own; the basis outlives it)
        but the marks of the latest asked for, which the next pack asks for first (its
        latest break's): what they saved is computed again."""
        cache = self._cache
        while len(cache) > 1:
            del cache[next(iter(cache))]
        for kept in cache.values():
            kept._saved.clear()
            kept._changes.clear()
            kept._beyond.clear()

    def rewrites(self, point: Point) -> Rewrites:
        """The rewrites of a break at ``point`` (shared by the requests that see it)."""
        cache = self._cache
        found = cache.pop(point, None)
        if found is None:
            if len(cache) >= 4:  # a few points at a time (the basis is kept)
                del cache[next(iter(cache))]  # the one used longest ago
            last, front = self._last, self.front
            if last is None or last.version != self.version or not front.reaches(point):
                found = self._last = Rewrites(self, point)
            else:
                front.reach(point)
                if len(front.entries) == last.count and front.shield == last.point.shield:
                    found = last  # no mark went in, the shield stayed: the same rewrites
                else:
                    found = self._last = Rewrites(self, point, last)
        cache[point] = found
        return found


class _Front:
    """The dedup marks under the protected tail at the latest point a replay reached
    (the front), kept from point to point: a replay's points only move on (no fewer
    marks, a tail, a shield no earlier), so each mark goes in once, found by a heap of
    those known but not yet under the tail. What a mark saves from a cut on is a sum
    over units in a tree of prefix sums (a Fenwick tree); the marks are listed in the
    order they went in, so the rewrites of an earlier point of the same run (an
    ``epoch``) are the first marks of the list. A point the front cannot move on to
    starts a new run from nothing."""

    __slots__ = (
        "basis",
        "entries",
        "epoch",
        "fresh",
        "fresh_from",
        "marks",
        "members",
        "shield",
        "tail",
        "tree",
        "waiting",
    )

    def __init__(self, basis: Basis) -> None:
        self.basis = basis
        self.epoch = 0
        self.reset()

    def reset(self) -> None:
        """Start a new run from no mark."""
        self.epoch += 1
        self.marks = self.tail = self.shield = 0
        # per mark gone in, in order: (its unit, its item, what dedup saves, its place
        # in results, what pruning it would save)
        self.entries: list[tuple[int, int, int, int, int]] = []
        self.members: dict[int, int] = {}  # item -> what pruning it would save
        self.waiting: list[tuple[int, int, int, int, int]] = []  # a heap, by unit
        # per unit, what its marks save: dedup's saving, less pruning's before the shield
        self.tree = _Tree()
        self.fresh: list[int] = []  # the units of the marks from `fresh_from` on, sorted
        self.fresh_from = -1

    def reaches(self, point: Point) -> bool:
        """Whether the front can move on to ``point``."""
        return point.marks >= self.marks and point.tail >= self.tail and point.shield >= self.shield

    def reach(self, point: Point) -> None:
        """Move on to ``point`` (`reaches`)."""
        basis = self.basis
        tail, waiting = point.tail, self.waiting
        if point.marks > self.marks:
            saving, prune = basis.saving, basis.policy.prune
            for _, unit, i, dsave, place in basis.marks[self.marks : point.marks]:
                ps = saving[i] if prune and saving[i] > 0 else 0
                if unit < tail:
                    self._enter((unit, i, dsave, place, ps))
                else:
                    heappush(waiting, (unit, i, dsave, place, ps))
            self.marks = point.marks
        while waiting and waiting[0][0] < tail:
            self._enter(heappop(waiting))
        self.tail = tail
        if point.shield > self.shield:
            # the marks' results newly before the shield save pruning's share less
            members, results, units = self.members, basis.results, basis.result_units
            add = self.tree.add
            for p in range(self.shield, point.shield):
                pruned = members.get(results[p])
                if pruned:
                    add(units[p], -pruned)
            self.shield = point.shield

    def _enter(self, entry: tuple[int, int, int, int, int]) -> None:
        unit, i, dsave, place, ps = entry
        self.entries.append(entry)
        self.members[i] = ps
        self.tree.add(unit, dsave - ps if place < self.shield else dsave)
        if self.fresh_from >= 0:
            insort(self.fresh, unit)

    def first_since(self, count: int, cut: int) -> int:
        """The first unit from ``cut`` on of the marks that went in after the first
        ``count`` (-1: none)."""
        if self.fresh_from != count:
            self.fresh = sorted(entry[0] for entry in islice(self.entries, count, None))
            self.fresh_from = count
        fresh = self.fresh
        at = bisect_left(fresh, cut)
        return fresh[at] if at < len(fresh) else -1


class _Tree:
    """Sums of values by position, with prefix sums in O(log n) (a Fenwick tree that
    doubles its capacity as positions come)."""

    __slots__ = ("size", "total", "tree")

    def __init__(self) -> None:
        self.size = 64
        self.tree = [0] * (self.size + 1)
        self.total = 0

    def add(self, position: int, delta: int) -> None:
        size, tree = self.size, self.tree
        while position >= size:
            # the new half starts empty; its last node covers everything
            tree.extend([0] * size)
            size *= 2
            tree[size] = self.total
        self.size = size
        i = position + 1
        while i <= size:
            tree[i] += delta
            i += i & -i
        self.total += delta

    def after(self, position: int) -> int:
        """The sum over positions from ``position`` on."""
        tree = self.tree
        i = min(max(position, 0), self.size)
        total = self.total
        while i > 0:
            total -= tree[i]
            i &= i - 1
        return total


class Rewrites:
    """The rewrites a break at a `Point` makes: dedup of the marks it knows whose result
    is older than its protected tail, pruning of the unshielded results before those
    turns that dedup does not replace. `saving` and `items` take the cut: only the
    history a break keeps is rewritten.

    Built on the basis' front (`_Front`), moved on from ``base``, the rewrites of an
    earlier point (no more marks, a tail and a shield no later), or started over from
    this point when there is none: a replay's rewrites cost what changed between its
    points, not every mark so far. While the front stands at this point, `saving` reads
    its tree and `first_change` the marks that went in since the earlier break's
    point; once it has moved on, what these rewrites answered stays (per cut), and
    anything else is read from their marks listed by a walk (`_Marks`;
    `tests/test_rules3_rewrites.py` holds the walk over every mark that all of this
    must equal)."""

    __slots__ = (
        "_beyond",
        "_changes",
        "_listed",
        "_saved",
        "basis",
        "count",
        "epoch",
        "point",
        "version",
    )

    def __init__(self, basis: Basis, point: Point, base: Rewrites | None = None) -> None:
        self.basis, self.point = basis, point
        self.version = basis.version
        front = basis.front
        if base is None or not front.reaches(point):
            front.reset()
        front.reach(point)
        self.epoch, self.count = front.epoch, len(front.entries)
        self._saved: dict[int, int] = {}  # per cut, `saving`
        self._changes: dict[tuple[Rewrites | None, int], int] = {}  # `first_change`
        self._beyond: dict[tuple[Rewrites | None, int], tuple[int, int, int] | None] = {}
        self._listed: _Marks | None = None

    def follows(self, point: Point) -> bool:
        """Whether the rewrites at ``point`` may be built from these."""
        return self.version == self.basis.version and self.basis.front.reaches(point)

    def live(self) -> bool:
        """Whether the front stands at these rewrites' point."""
        front = self.basis.front
        return (
            front.epoch == self.epoch
            and len(front.entries) == self.count
            and front.shield == self.point.shield
        )

    def _marks(self) -> _Marks:
        listed = self._listed
        if listed is None:
            listed = self._listed = _Marks(self.basis, self.point)
        return listed

    def saving(self, start: int) -> int:
        """Tokens the rewrites save in units from ``start`` on."""
        saved = self._saved.get(start)
        if saved is None:
            basis = self.basis
            p = bisect_left(basis.result_units, start)
            shield = self.point.shield
            saved = basis.psum[shield] - basis.psum[p] if p < shield else 0
            if self.live():
                saved += basis.front.tree.after(start)
            else:
                saved += self._marks().after(start)
            self._saved[start] = saved
        return saved

    def items(self, cut: int) -> tuple[list[int], list[int]]:
        """``(deduplicated, pruned)`` item indexes from unit ``cut`` on, ascending."""
        basis = self.basis
        listed = self._marks()
        deduped = listed.deduped[bisect_left(listed.units, cut) :]
        if not basis.policy.prune:
            return sorted(deduped), []
        skip = listed.members()
        saving, results = basis.saving, basis.results
        pruned = [
            results[p]
            for p in range(bisect_left(basis.result_units, cut), self.point.shield)
            if saving[results[p]] > 0 and results[p] not in skip
        ]
        return sorted(deduped), pruned

    def beyond(self, earlier: Rewrites | None, cut: int) -> tuple[int, int, int] | None:
        """What these rewrites save from ``cut`` on beyond the ``earlier`` break's, the
        first unit they change (`first_change`) and what they save from it on; None
        when they save no more or change nothing. What the cost model weighs at every
        request, the same for every request that sees the same rewrites."""
        key = (earlier, cut)
        if key in self._beyond:
            return self._beyond[key]
        saved = self.saving(cut) - (earlier.saving(cut) if earlier is not None else 0)
        changed = self.first_change(earlier, cut) if saved > 0 else -1
        found = None if changed < 0 else (saved, changed, self.saving(changed))
        self._beyond[key] = found
        return found

    def first_change(self, earlier: Rewrites | None, cut: int) -> int:
        """The first unit from ``cut`` on whose results these rewrites change beyond the
        ``earlier`` break's (-1: none)."""
        found = self._changes.get((earlier, cut))
        if found is None:
            found = self._changes[earlier, cut] = self._first_change(earlier, cut)
        return found

    def _first_change(self, earlier: Rewrites | None, cut: int) -> int:
        basis = self.basis
        skip: Container[int]
        if self.live() and (
            earlier is None or (earlier.epoch == self.epoch and earlier.count <= self.count)
        ):
            # the earlier break's marks are the first ones of this run
            first = basis.front.first_since(0 if earlier is None else earlier.count, cut)
            skip = basis.front.members
        else:
            listed = self._marks()
            b = bisect_left(listed.units, cut)
            new = set(listed.deduped[b:])
            if earlier is not None:
                new.difference_update(earlier._marks().deduped)
            first = -1
            if new:
                first = next(compress(listed.units[b:], map(new.__contains__, listed.deduped[b:])))
            skip = listed.members()
        if basis.policy.prune:
            psum, results, units = basis.psum, basis.results, basis.result_units
            start = bisect_left(units, cut)
            if earlier is not None:
                start = max(start, earlier.point.shield)
            stop = self.point.shield
            if first >= 0:
                stop = min(stop, bisect_right(units, first))
            p = start
            while p < stop:
                # the next result pruning shrinks (its prefix sum grows past it)
                p = bisect_right(psum, psum[p], p, stop + 1) - 1
                if p >= stop:
                    break
                if results[p] not in skip:
                    unit = units[p]
                    return unit if first < 0 else min(unit, first)
                p += 1
        return first


class _Marks:
    """The marks of a `Point` under its tail, listed by unit and item, with what those
    from each on save: a walk over the marks made before the point, for rewrites asked
    about once the front has moved on."""

    __slots__ = ("_members", "deduped", "saves", "units")

    def __init__(self, basis: Basis, point: Point) -> None:
        saving, shield, tail = basis.saving, point.shield, point.tail
        prune = basis.policy.prune
        rows = sorted(
            (unit, i, dsave - (saving[i] if prune and p < shield and saving[i] > 0 else 0))
            for _, unit, i, dsave, p in basis.marks[: point.marks]
            if unit < tail
        )
        self.units = [row[0] for row in rows]
        self.deduped = [row[1] for row in rows]
        saves = list(accumulate(row[2] for row in reversed(rows)))
        saves.reverse()
        saves.append(0)
        self.saves = saves  # saves[k]: what the marks from the k-th on save
        self._members: set[int] | None = None

    def after(self, start: int) -> int:
        """What the marks in units from ``start`` on save."""
        return self.saves[bisect_left(self.units, start)]

    def members(self) -> set[int]:
        """The items deduplicated."""
        if self._members is None:
            self._members = set(self.deduped)
        return self._members

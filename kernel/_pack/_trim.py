"""Stage 7, trimming: the oldest history is dropped at the blocking level.

When the prompt is over the blocking level, the oldest units are dropped, in
groups, until it is at that level; protected units stay wherever they are.

* Rules 1: the groups are whole turns (units before the first user message form
  a turn of their own), so the kept history starts at a user message; the
  mandatory tail (the whole current turn) is never reached.
* Rules 2: whole turns first, then the older steps of the current turn (a step:
  an assistant message with its calls and results, and what arrived after it),
  oldest first; the turn's opening user message stays. If the prompt is still
  over the usable budget (the protected steps themselves are too big), the
  protected steps go too, oldest first, down to the floor: the system sections,
  tools, the (clipped) opening user message, pinned units and calls awaiting a
  result. A trimmed run leaves one short marker message where it was, naming
  how much was left out and where it is in the log.
* Rules 3: the prefix is kept. The cut (where the kept history starts) only
  moves when the kept history passes the blocking level (the high watermark),
  and then in one step down to ``trim_low_ratio`` of that level (the low
  watermark), at a turn boundary (or a step boundary of the current turn).
  Between two such breaks a request only appends to the one before it. The cut
  is not remembered anywhere: it is recomputed from the log prefix by replaying
  the watermarks over every group end in order (each end stands for a request
  made there), so the packer stays a pure function of the log, the policy and
  the tokenizer. Each trimmed unit's decision says which break dropped it and
  why, with the cache estimate of the break.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .._policy import Policy
from .._projection import Unit
from .._tokens import MESSAGE_OVERHEAD, numbers_by_width
from ._budget import placeholder_tokens
from ._dedup import Dedup
from ._ledger import Ledger, Marker
from ._model import StageReport
from ._prune import Prune
from ._rewrites import Basis, Point, Rewrites, value, worth

__all__: list[str] = []


def _marker_text(first: int, last: int, session: str, seq: int) -> str:
    """The marker for a dropped run from lineage position ``first`` to ``last``, whose
    first event is ``seq`` of ``session``."""
    return (
        f"[turnlog: earlier history of this session (positions {first}-{last}) was "
        f"left out of this prompt to fit the context window; it is in the log: "
        f"`turnlog log {session} --from {seq}`]"
    )


def _smallest(n: int) -> int:
    """The smallest number written with as many digits as ``n`` (``n >= 0``)."""
    return int("1".ljust(len(str(n)), "0"))


class Trim:
    """The trimming stage (see the module docstring)."""

    name = "trim"

    @staticmethod
    def ends(ledger: Ledger) -> list[int]:
        """Where each droppable group ends (unit indexes, ascending)."""
        view, protection = ledger.view, ledger.protection
        turns = view.turn_starts
        if ledger.policy.rules < 2:
            if turns:
                return list(turns[0 if turns[0] > 0 else 1 :])
            tail = protection.tail_unit
            return [tail] if tail > 0 else []
        ends = list(turns[0 if turns and turns[0] > 0 else 1 :]) if turns else []
        ends += Trim._step_ends(ledger, protection.turn_unit, protection.tail_unit)
        return ends

    @staticmethod
    def _step_ends(ledger: Ledger, after: int, until: int) -> list[int]:
        """Ends of the step groups between unit ``after`` and unit ``until``."""
        assistants = ledger.view.assistant_units
        steps = [a for a in assistants[bisect_right(assistants, after) :] if a < until]
        ends = [*steps[1:], until]
        return [e for e in ends if e > after + 1] if until > after + 1 else []

    @staticmethod
    def tail_ends(ledger: Ledger) -> list[int]:
        """Ends of the protected steps' groups (rules 2), for the last resort."""
        protection = ledger.protection
        n_units = len(ledger.view.units)
        start = protection.tail_unit
        assistants = ledger.view.assistant_units
        steps = [a for a in assistants[bisect_right(assistants, start - 1) :] if a < n_units]
        ends = [e for e in steps if e > start] + [n_units]
        return [e for e in ends if e > start] if n_units > start else []

    @staticmethod
    def why(unit: Unit, current: int, target: int) -> tuple[str, str]:
        """The rule and detail of a trimmed unit."""
        if unit.turn < current:
            return "trim.turn", (
                f"turn {unit.turn} dropped: prompt was over the blocking level {target}"
            )
        return "trim.step", (
            f"an older step of turn {unit.turn} dropped: prompt was over the "
            f"blocking level {target}"
        )

    def __call__(self, ledger: Ledger) -> StageReport:
        policy = ledger.policy
        before = ledger.total
        target = min(ledger.budget.blocking, policy.usable)
        if not policy.trim:
            return StageReport(name="trim", fired=False, detail="disabled by policy")
        if policy.rules >= 3:
            return self._rules3(ledger, before, target)
        if before <= target:
            return StageReport(
                name="trim",
                fired=False,
                detail=f"{before} tokens <= blocking level {target}",
                tokens_before=before,
                tokens_after=before,
            )
        current = len(ledger.view.turn_starts)
        reserve = self.reserve(ledger) if policy.rules >= 2 else 0
        groups, units = ledger.drop_oldest(
            self.ends(ledger), target - reserve, lambda unit: self.why(unit, current, target)
        )
        ledger.settle()
        detail = f"{groups} oldest turns dropped ({units} units)"
        if policy.rules >= 2:
            detail = f"{groups} oldest turns or steps dropped ({units} units)"
            detail, units = self._fit_tail(ledger, reserve, detail, units)
        return StageReport(
            name="trim",
            fired=units > 0,
            detail=detail,
            tokens_before=before,
            tokens_after=ledger.total,
            events=units,
        )

    @staticmethod
    def reserve(ledger: Ledger) -> int:
        """Tokens set aside for the marker while choosing what to drop: the marker with
        the largest numbers it could hold."""
        view = ledger.view
        if not view.events:
            return 0
        last = len(view.events) - 1
        session = max((e.session for e in (view.events[0], view.events[last])), key=len)
        if numbers_by_width(ledger.counter):
            # the same count for every number of this width: counted (and cached by the
            # counter) once per width, not once per event count
            last = 10 ** (len(str(last)) - 1)
        return MESSAGE_OVERHEAD + ledger.counter.count(_marker_text(last, last, session, last))

    def _fit_tail(
        self, ledger: Ledger, reserve: int, detail: str, units: int, *, mark: bool = True
    ) -> tuple[str, int]:
        """Drop protected steps while the tail alone is over the usable budget, then put
        the marker (unless ``mark`` is False); the report's detail and unit count with
        what was dropped."""
        policy = ledger.policy
        if ledger.total + reserve > policy.usable:
            more, extra = ledger.drop_tail(
                self.tail_ends(ledger),
                policy.usable - reserve,
                lambda unit: (
                    "trim.tail",
                    f"a protected step of turn {unit.turn} dropped: "
                    "the latest steps alone were over the usable "
                    f"budget {policy.usable}",
                ),
            )
            ledger.settle()
            detail += f"; then {more} protected steps ({extra} units) to fit the window"
            units += extra
        if mark:
            self._mark(ledger)
        return detail, units

    def _release(self, ledger: Ledger, reserve: int, kept: Sequence[int], breaks: int) -> int:
        """Drop the units before the cut kept since prefix break ``breaks`` (`Ledger.keep`:
        the opening of its turn, calls awaiting a result then) when the prompt with its
        marker would still be over the usable budget, that is when the pack would be
        refused: they are no part of the floor. How many went."""
        policy = ledger.policy
        if not kept or ledger.total + reserve <= policy.usable:
            return 0
        marker = self._marker(ledger)
        if ledger.total + (marker.tokens if marker is not None else 0) <= policy.usable:
            return 0
        freed = ledger.release(
            kept,
            lambda unit: (
                "trim.break",
                f"kept since prefix break {breaks} (the opening of its turn, or a call "
                f"awaiting its result then), dropped at this break: the prompt was over "
                f"the usable budget {policy.usable} with everything else above the floor "
                "trimmed",
            ),
        )
        ledger.settle()
        return freed

    def _mark(self, ledger: Ledger) -> None:
        """Put the marker where the dropped run was."""
        marker = self._marker(ledger)
        if marker is not None:
            ledger.mark(marker)

    def _marker(self, ledger: Ledger) -> Marker | None:
        """The marker for where the dropped run is (None when nothing was dropped)."""
        gap = ledger.dropped_run()
        if gap is None:
            return None
        first, last, before = gap
        event = ledger.view.events[first]
        text = _marker_text(first, last, event.session, event.seq)
        count = None
        if numbers_by_width(ledger.counter):
            # The marker's numbers change with every cut, and its count with their
            # widths only: counted as the same text with the same widths' smallest
            # numbers, which the counter's cache keeps, not as a new text at each pack.
            same = _marker_text(
                _smallest(first), _smallest(last), event.session, _smallest(event.seq)
            )
            count = ledger.counter.count(same)
        return Marker(before, text, ledger.counter, count)

    @staticmethod
    def cut(ledger: Ledger, high: int, low: int, reserve: int) -> Cut:
        """Where the kept history starts under rules 3, and the rewrites kept with it,
        recomputed from the log prefix.

        A request stands before every assistant message (the units before it) and at
        the end. Each request's kept history is sized the same way at every pack, from
        the units before it (their tokens after truncation and clipping), the cut, the
        rewrites of the latest break (``_rewrites``), the opening message of its turn
        and the opening kept since the latest break, so the replay of an earlier
        request never changes as the log grows. A break is forced when a request would
        pass ``high``: its rewrites are those pending then, and the cut moves to the
        first turn or step boundary that brings that request to ``low`` with them (it
        never passes the request's latest ``tail_steps`` steps; when the rewrites alone
        bring it there, the cut stays). Between forced breaks, a request whose pending
        rewrites are worth a break of their own by the cost model
        (`_rewrites.value`) makes one, the cut staying where it is.

        The replay is a fold of `Watermarks.step` over the requests. Where the ledger
        keeps a memo (`Ledger.replay_memo`), the fold resumes from the state after the
        requests an earlier pack replayed, as long as what a step reads is what it
        read then: the same levels and fixed part (the memo's key), the same kind of
        sizes (the ledger's), and no unit before a replayed request's end changed
        size since (the ledger's ``edited``; later requests are replayed again). A
        pack after one more event replays the new requests only; the result is that
        of the whole replay."""
        view = ledger.view
        marks = Watermarks(ledger, high, low, reserve)
        assistants = view.assistant_units
        key = (high, low, marks.steps, marks.base, Basis.key(ledger.policy))
        memo = ledger.replay_memo(key[:3])
        saved = memo.state if memo is not None and memo.key == key else None
        if not isinstance(saved, _Saved):
            saved = _Saved()
        elif memo is not None and memo.edited is not None:
            saved.forget(bisect_right(assistants, memo.edited))
            if memo.left_out:
                # the basis counts nothing of a unit left out: build it again (it is
                # the same for the requests kept, which read only units before theirs)
                saved.basis = None
        saved.catch_up(view.turn_starts, assistants)
        marks.bounds = saved.bounds
        policy = ledger.policy
        if policy.dedup or policy.prune:
            if saved.basis is None:
                saved.basis = Basis(view, ledger.sizes, policy, ledger.left_out)
            else:
                saved.basis.extend(view, ledger.sizes, ledger.left_out)
            marks.basis = saved.basis
        state = saved.last()
        for j in range(saved.done, len(assistants)):
            after = marks.step(state, j, assistants[j])
            if after is not state:
                saved.add(after)
                state = after
        saved.done = len(assistants)
        if memo is not None:
            memo.key, memo.state, memo.edited, memo.left_out = key, saved, None, False
        state = marks.step(state, len(assistants), len(view.units))
        deferred = None
        if state.request != len(assistants):  # no break now: is a rewrite waiting?
            deferred = marks.weigh(state, len(view.units))
        if not state.breaks and deferred is None:
            return Cut()
        rewrites = marks.rewrites(state.rewrites)
        if marks.basis is not None:
            marks.basis.clear()
        return Cut(
            tuple(saved.bounds[: state.k]),
            state.size,
            state.after,
            state.breaks,
            state.request == len(assistants),
            state.anchor,
            state.cut_break,
            rewrites,
            state.chosen,
            state.forced,
            deferred,
        )

    def _rules3(self, ledger: Ledger, before: int, high: int) -> StageReport:
        policy = ledger.policy
        reserve = self.reserve(ledger)
        low = int(high * policy.trim_low_ratio)
        cut = self.cut(ledger, high, low, reserve)
        units = 0
        detail = f"{before} tokens; the prefix is kept (no break: under the high watermark)"
        ends, target = list(cut.ends), -1
        start = ends[-1] if ends else 0
        kept = [cut.anchor] if cut.anchor >= 0 else []  # kept since the latest break
        if ends:
            # calls awaiting a result when the latest break was made were protected
            # then: their units stay until the next break (their turn may have ended
            # since, which leaves them unprotected, but dropping them would change the
            # prefix with no break)
            kept += [u for u in sorted(ledger.view.open_units) if max(cut.anchor, 0) <= u < start]
        for u in kept:
            ledger.keep(u)
        rewrote = self._rewrite(ledger, cut, high, low)
        over = ledger.total - (ledger.droppable_before()(start) if ends else 0) + reserve
        further = ""
        if over > policy.usable:
            # the sizes of the replay fell short of this prompt (pinned units, calls
            # awaiting results, older steps of a turn): cut further now, as rules 2 would
            more = [e for e in self.ends(ledger) if e >= start]
            if more:
                ends, target = more, high - reserve
                further = (
                    f"prefix break now: the prompt reached {over} tokens, over the "
                    f"usable budget {policy.usable} (more than the replayed sizes "
                    f"say); cut at a turn or step boundary down to the blocking level "
                    f"{high}"
                )
        if ends:
            fixed = ledger.total - ledger.kept_before()(len(ledger.view.units))
            if further:
                reason = further
                estimate = self.estimate(policy, over - high, high - fixed - reserve)
            else:
                reason = (
                    f"prefix break {cut.cut_break}: the kept history reached {cut.size} "
                    f"tokens, over the blocking level {high}; cut at a turn or step "
                    f"boundary down to the low watermark {low}"
                )
                if not (cut.now and cut.cut_break == cut.breaks):
                    reason = f"cut kept from the earlier {reason}"
                estimate = self.estimate(policy, cut.size - cut.after, cut.after - fixed - reserve)
            current = len(ledger.view.turn_starts)
            groups, units = ledger.drop_oldest(
                ends,
                target,
                lambda unit: (
                    "trim.break" if unit.turn < current else "trim.step",
                    f"{reason}; {estimate}",
                ),
            )
            ledger.settle()
            cut_at = ends[groups - 1] if groups else 0
            kept = [u for u in kept if u < cut_at]  # before the cut: out of the floor
            detail = f"{reason}: {groups} oldest turns or steps dropped ({units} units); {estimate}"
        if rewrote:
            first = cut.now and cut.cut_break != cut.breaks and not further
            if first and not ends:
                detail = rewrote
            else:
                detail = f"{rewrote}; {detail}" if first else f"{detail}; {rewrote}"
        if cut.deferred is not None:
            saved, written = cut.deferred
            detail += (
                f"; rewrites deferred by the cost model: {saved} tokens pending per request "
                f"not worth a break yet ({self.estimate(policy, saved, written)})"
            )
        cut_units = units
        detail, units = self._fit_tail(ledger, reserve, detail, units, mark=False)
        if units > cut_units:  # the protected steps went too: the prefix changed here
            detail = (
                f"prefix break now: the latest steps alone were over the usable budget "
                f"{policy.usable}; {detail}"
            )
        freed = self._release(ledger, reserve, kept, cut.breaks) if ends else 0
        if freed:  # so did what the latest break kept: the prefix changed here
            detail += (
                f"; then what prefix break {cut.breaks} kept ({freed} units) to fit the window"
            )
            units += freed
        self._mark(ledger)
        return StageReport(
            name="trim",
            fired=units > 0,
            detail=detail,
            tokens_before=before,
            tokens_after=ledger.total,
            events=units,
        )

    @staticmethod
    def _rewrite(ledger: Ledger, cut: Cut, high: int, low: int) -> str:
        """Apply the latest break's rewrites to the history it keeps; what was done, in
        words ("" when nothing). A recovery pack (warning level 0) has had dedup and
        pruning of its own."""
        if cut.rewrites is None or ledger.budget.warning <= 0:
            return ""
        deduped, pruned = cut.rewrites.items(cut.ends[-1] if cut.ends else 0)
        policy = ledger.policy
        if cut.chosen is not None:
            saved, written = cut.chosen
            why = (
                f"chosen by the cost model: {saved} tokens saved on each request against "
                f"{written} written to the cache again; "
                f"{Trim.estimate(policy, saved, written)}"
            )
        elif cut.forced is not None:
            size, after = cut.forced
            why = (
                f"the kept history reached {size} tokens, over the blocking level {high}; "
                f"the rewrites alone bring it to {after} (the low watermark is {low}); "
                f"{Trim.estimate(policy, size - after, after)}"
            )
        else:
            why = "with the cut, at the high watermark"
        note = f"rewritten at prefix break {cut.breaks} ({why})"
        done = ledger.rewrite(deduped, pruned, Dedup(), Prune(), note)
        if not any(done):
            return ""
        words = f"{done[0]} superseded results deduplicated and {done[1]} old tool results pruned"
        if not cut.now:
            return f"{words} at prefix break {cut.breaks}, kept since"
        if cut.cut_break != cut.breaks:
            return f"prefix break {cut.breaks}: {words}, {why} (the cut stays)"
        return f"{words} at this break"

    @staticmethod
    def estimate(policy: Policy, saved: int, written: int) -> str:
        """A break's cache estimate in words: the ``saved`` tokens no longer sent on each
        of the next ``cache_horizon_turns`` requests (cache reads had they stayed)
        against the ``written`` tokens after the break written to the cache again
        (cache reads had there been no break), at the policy's cache prices."""
        horizon = max(policy.cache_horizon_turns, 1)
        net = value(policy, saved, written) / 1_000_000
        return (
            f"estimate over {horizon} requests: {saved * horizon} cached input tokens "
            f"saved against {written} tokens written to the cache again "
            f"(${float(net):.4f} net)"
        )


class Cut(NamedTuple):
    """The rules 3 cut: ``ends``, the group ends dropped up to (the last one is the
    cut; empty when nothing is cut); ``size`` and ``after``, the kept history of the
    request of the latest break before and after it; ``breaks``, the breaks so far;
    ``now``, whether the latest break is this request's; ``anchor``, the opening
    message kept since that break (-1: none); ``cut_break``, the break that set
    the cut (the latest one forced); ``rewrites``, the dedup and pruning
    of the latest break (None: none yet); ``chosen``, for a break the cost model
    chose, the tokens it saves on each request and those it writes to the cache
    again (None: the latest break was forced); ``forced``, for a forced break
    whose rewrites alone bring the request to the low watermark (the cut stays),
    the kept history before and after them; ``deferred``, the same for rewrites
    pending at this request that the cost model declined to break for."""

    ends: tuple[int, ...] = ()
    size: int = 0
    after: int = 0
    breaks: int = 0
    now: bool = False
    anchor: int = -1
    cut_break: int = 0
    rewrites: Rewrites | None = None
    chosen: tuple[int, int] | None = None
    forced: tuple[int, int] | None = None
    deferred: tuple[int, int] | None = None


class Step(NamedTuple):
    """The rules 3 replay's state after a request: ``k``, the group boundaries cut
    (the first ``k``); ``anchor``, the opening message kept since the latest break
    (-1: none); ``size`` and ``after``, the kept history of the latest break's request
    before and after it; ``breaks``, the breaks so far; ``request``, the latest break's
    request (its number: the assistant messages before it); ``cut_break``, the break
    that set the cut; ``rewrites``, the `Point` of the latest break's rewrites (None:
    none yet); ``chosen`` and ``forced``, for a break the cost model chose or one whose
    rewrites alone met the low watermark, its numbers (see `Cut`). A request the
    cost model declines to break at leaves the state as it was."""

    k: int = 0
    anchor: int = -1
    size: int = 0
    after: int = 0
    breaks: int = 0
    request: int = -1
    cut_break: int = 0
    rewrites: Point | None = None
    chosen: tuple[int, int] | None = None
    forced: tuple[int, int] | None = None


_START = Step()


class _Sizes(dict[int, int]):
    """``size(end)`` by unit, each asked of the ledger once: a replay asks again for
    the cut's, the openings' and the first rewritten unit's at every request."""

    __slots__ = ("find",)

    def __init__(self, find: Callable[[int], int]) -> None:
        super().__init__()
        self.find = find

    def __missing__(self, end: int) -> int:
        found = self[end] = self.find(end)
        return found


class Watermarks:
    """What the rules 3 replay reads at each request, and its step.

    ``size(end)`` is the ledger's `kept_before`; ``base`` what every request holds
    beside its history (the system sections, the summary section, tools and
    framing, as they are now, and the marker's reserve); the placeholder results of
    the calls without one count in the requests that hold their units;
    ``bounds`` the turn and step boundaries (unit indexes but 0, ascending);
    ``basis`` the results and dedup marks a break may rewrite (None when the policy
    neither deduplicates nor prunes)."""

    __slots__ = (
        "answers",
        "assistants",
        "base",
        "basis",
        "bounds",
        "declined",
        "high",
        "holders",
        "low",
        "pending_at",
        "policy",
        "size",
        "steps",
        "turns",
    )

    def __init__(self, ledger: Ledger, high: int, low: int, reserve: int) -> None:
        view = ledger.view
        size = self.size = _Sizes(ledger.kept_before()).__getitem__
        # the placeholder results of calls without one, each counted only in the
        # requests that hold its unit: counted in ``base``, a call still awaiting its
        # result would grow every earlier request's size and move a cut already made
        self.holders: list[int] = []
        self.answers = [0]  # running sums of their tokens
        for u in sorted(view.open_units):
            if size(u + 1) > size(u):  # summarized: its placeholder is not counted
                self.holders.append(u)
                self.answers.append(
                    self.answers[-1]
                    + placeholder_tokens(view, ledger.counter, u, ledger.policy.rules)
                )
        self.base = ledger.total - size(len(view.units)) - self.answers[-1] + reserve
        policy = ledger.policy
        self.turns = view.turn_starts
        self.assistants = view.assistant_units
        self.steps = max(policy.tail_steps, 1)
        self.high, self.low = high, low
        self.bounds: Sequence[int] = ()
        self.policy = policy
        self.basis: Basis | None = None  # set by `Trim.cut` (kept in its memo)
        # the latest `pending` asked and its answer: the last request's step weighs
        # its pending rewrites, and `weigh` asks the same again for the report
        self.pending_at: tuple[Step, int, Point, tuple[int, int] | None] | None = None
        self.declined: tuple[Step, Rewrites] | None = None  # the latest rewrites declined

    def rewrites(self, point: Point | None) -> Rewrites | None:
        """The rewrites of a break at ``point``."""
        if point is None or self.basis is None:
            return None
        return self.basis.rewrites(point)

    def estimate(self, end: int, opening: int, anchor: int, k: int, point: Point | None) -> int:
        """The kept history of the request ending at ``end`` with the first ``k``
        boundaries cut and the rewrites of a break at ``point``: what follows the cut,
        with the turn's opening and the anchor."""
        size = self.size
        cut = self.bounds[k - 1] if k else 0
        kept = self.base + size(end) - (size(cut) if k else 0)
        holders, answers = self.holders, self.answers
        kept += answers[bisect_left(holders, end)] - answers[bisect_left(holders, cut)]
        rewrites = self.rewrites(point)
        if rewrites is not None:
            kept -= rewrites.saving(cut)
        for u in {opening, anchor}:
            if 0 <= u < cut:
                kept += size(u + 1) - size(u)
        return kept

    def step(self, state: Step, j: int, end: int) -> Step:
        """The state after request ``j`` (ending at unit ``end``); ``state`` itself when
        the request changes nothing. Reads only units and boundaries before ``end``."""
        turns, assistants, bounds = self.turns, self.assistants, self.bounds
        t = bisect_left(turns, end) - 1
        opening = turns[t] if t >= 0 else -1
        # the request's protected tail: its latest `steps` steps, or its whole turn
        # after the opening when the turn has no more steps than that
        first = bisect_right(assistants, opening)
        steps = self.steps
        limit = bisect_right(bounds, assistants[j - steps] if j - first > steps else opening + 1)
        k = state.k
        kept = self.estimate(end, opening, state.anchor, k, state.rewrites)
        point = self.basis.point(end) if self.basis is not None else None
        if kept > self.high:
            return self._forced(state, j, end, opening, limit, kept, point)
        if point is None or point == state.rewrites:
            return state
        return self._chosen(state, j, end, point)

    def _forced(
        self,
        state: Step,
        j: int,
        end: int,
        opening: int,
        limit: int,
        kept: int,
        point: Point | None,
    ) -> Step:
        """A request over the high watermark: a break with the pending rewrites, and
        the cut moved to the first boundary at the low watermark (unless the rewrites
        alone bring the request there)."""
        k = state.k
        lo, hi = k, max(limit, k)  # the first k' whose request is at the low watermark
        while lo < hi:
            mid = (lo + hi) // 2
            if self.estimate(end, opening, state.anchor, mid, point) <= self.low:
                hi = mid
            else:
                lo = mid + 1
        if lo == k and point == state.rewrites:
            return state  # neither the cut nor the rewrites can change
        breaks = state.breaks + 1
        if lo == k:
            after = self.estimate(end, opening, state.anchor, k, point)
            return state._replace(
                breaks=breaks,
                request=j,
                rewrites=point,
                chosen=None,
                forced=(kept, after),
            )
        after = self.estimate(end, opening, opening, lo, point)
        return Step(lo, opening, kept, after, breaks, j, breaks, point)

    def _chosen(self, state: Step, j: int, end: int, point: Point) -> Step:
        """A request under the high watermark with new pending rewrites: a break of
        their own when the cost model says they are worth it, else ``state``."""
        basis = self.basis
        assert basis is not None
        pending = basis.rewrites(point)
        declined = self.declined
        if declined is not None and declined[0] is state and declined[1] is pending:
            # the same rewrites weighed against the same break: they save the same
            # and write no less (the request is longer), so they are declined again
            return state
        found = self.pending(state, end, point)
        if found is None or not worth(self.policy, *found):
            if found is None or self.policy.cache_write_price >= self.policy.cache_read_price:
                self.declined = (state, pending)
            return state
        return state._replace(
            breaks=state.breaks + 1,
            request=j,
            rewrites=point,
            chosen=found,
            forced=None,
        )

    def pending(self, state: Step, end: int, point: Point) -> tuple[int, int] | None:
        """The rewrites pending at the request ending at ``end`` beyond those of the
        latest break: ``(saved, written)``, the tokens they would save on each request
        and those from the first rewritten result on that a break would write to the
        cache again (None: nothing pending)."""
        asked = self.pending_at
        if asked is not None and asked[0] is state and asked[1] == end and asked[2] == point:
            return asked[3]
        found = self._pending(state, end, point)
        self.pending_at = (state, end, point, found)
        return found

    def _pending(self, state: Step, end: int, point: Point) -> tuple[int, int] | None:
        basis = self.basis
        assert basis is not None
        pending = basis.rewrites(point)
        current = self.rewrites(state.rewrites)
        cut = self.bounds[state.k - 1] if state.k else 0
        found = pending.beyond(current, cut)
        if found is None:
            return None
        saved, changed, after = found
        size = self.size
        return saved, size(end) - size(changed) - after

    def weigh(self, state: Step, end: int) -> tuple[int, int] | None:
        """The rewrites pending at the request ending at ``end`` that the cost model
        declines (see `pending`), None when none are."""
        if self.basis is None:
            return None
        point = self.basis.point(end)
        if point == state.rewrites:
            return None
        found = self.pending(state, end, point)
        return found if found is not None and not worth(self.policy, *found) else None


class _Saved:
    """A replay's state kept in a `ReplayMemo`: the boundaries seen so far, the number
    of requests before the last one replayed (``done``) and the state after each break
    among them (the state after request ``done - 1`` is the last one); and the
    rewrites' `Basis`, extended as the log grows."""

    __slots__ = ("assistants", "basis", "bounds", "breaks", "done", "turns")

    def __init__(self) -> None:
        self.basis: Basis | None = None
        self.bounds: list[int] = []
        self.turns = self.assistants = 0  # turn and step starts taken into ``bounds``
        self.done = 0
        # the states as flat tuples of ints (`_flat`): the collector stops walking
        # them, however many breaks a long session has
        self.breaks: list[tuple[int, ...]] = []

    def catch_up(self, turns: Sequence[int], assistants: Sequence[int]) -> None:
        """Take the new turn and step starts into ``bounds`` (they follow every older
        one: units only grow)."""
        new = {*turns[self.turns :], *assistants[self.assistants :]} - {0}
        self.bounds.extend(sorted(new))
        self.turns, self.assistants = len(turns), len(assistants)

    def forget(self, done: int) -> None:
        """Keep the states of the first ``done`` requests only."""
        if done < self.done:
            self.done = done
            while self.breaks and self.last().request >= done:
                self.breaks.pop()

    def add(self, state: Step) -> None:
        """Keep the state after a break."""
        self.breaks.append(_flat(state))

    def last(self) -> Step:
        """The state after the latest break kept (the start when none is)."""
        return _unflat(self.breaks[-1]) if self.breaks else _START


def _flat(state: Step) -> tuple[int, ...]:
    """A `Step` as a flat tuple of ints (what a memo keeps: the collector untracks it)."""
    out = list(state[:7])
    for part, width in ((state.rewrites, 4), (state.chosen, 2), (state.forced, 2)):
        out += [0] * (width + 1) if part is None else [1, *part]
    return tuple(out)


def _unflat(flat: tuple[int, ...]) -> Step:
    """The `Step` `_flat` made ``flat`` of."""
    point = Point._make(flat[8:12]) if flat[7] else None
    chosen = (flat[13], flat[14]) if flat[12] else None
    forced = (flat[16], flat[17]) if flat[15] else None
    k, anchor, size, after, breaks, request, cut_break = flat[:7]
    return Step(k, anchor, size, after, breaks, request, cut_break, point, chosen, forced)

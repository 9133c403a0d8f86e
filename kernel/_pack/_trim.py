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
from typing import NamedTuple

from .._policy import Policy
from .._projection import Unit
from .._tokens import MESSAGE_OVERHEAD
from ._ledger import Ledger, Marker
from ._model import StageReport

__all__: list[str] = []


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

    @staticmethod
    def marker_text(ledger: Ledger, first: int, last: int) -> str:
        """The marker for a dropped run from lineage position ``first`` to ``last``."""
        event = ledger.view.events[first]
        return (
            f"[turnlog: earlier history of this session (positions {first}-{last}) was "
            f"left out of this prompt to fit the context window; it is in the log: "
            f"`turnlog log {event.session} --from {event.seq}`]"
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
        widest = (
            f"[turnlog: earlier history of this session (positions {last}-{last}) was "
            f"left out of this prompt to fit the context window; it is in the log: "
            f"`turnlog log {session} --from {last}`]"
        )
        return MESSAGE_OVERHEAD + ledger.counter.count(widest)

    def _fit_tail(self, ledger: Ledger, reserve: int, detail: str, units: int) -> tuple[str, int]:
        """Drop protected steps while the tail alone is over the usable budget, then put
        the marker; the report's detail and unit count with what was dropped."""
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
        self._mark(ledger)
        return detail, units

    def _mark(self, ledger: Ledger) -> None:
        """Put the marker where the dropped run was."""
        gap = ledger.dropped_run()
        if gap is None:
            return
        first, last, before = gap
        ledger.mark(Marker(before, self.marker_text(ledger, first, last), ledger.counter))

    @staticmethod
    def cut(ledger: Ledger, high: int, low: int, reserve: int) -> Cut:
        """Where the kept history starts under rules 3, recomputed from the log prefix.

        A request stands before every assistant message (the units before it) and at
        the end. Each request's kept history is sized the same way at every pack, from
        the units before it (their tokens after truncation and clipping), the cut, the
        opening message of its turn and the opening kept since the latest break, so
        the replay of an earlier request never changes as the log grows. The cut
        moves when a request would pass ``high``, and then to the first turn or step
        boundary that brings that request to ``low``; it never passes the request's
        latest ``tail_steps`` steps."""
        view = ledger.view
        size = ledger.kept_before()
        # what every request holds beside its history: the system sections, the summary
        # section, tools, placeholder results and framing (as they are now), the marker
        base = ledger.total - size(len(view.units)) + reserve
        turns = view.turn_starts
        assistants = view.assistant_units
        steps = max(ledger.policy.tail_steps, 1)
        bounds = sorted({*turns, *assistants} - {0})
        at = [size(b) for b in bounds]
        out = Cut()
        k = 0  # bounds[:k] are cut
        anchor = -1  # the opening message kept since the latest break

        def estimate(end: int, opening: int, k: int) -> int:
            cut = bounds[k - 1] if k else 0
            kept = base + size(end) - (at[k - 1] if k else 0)
            for u in {opening, anchor}:
                if 0 <= u < cut:
                    kept += size(u + 1) - size(u)
            return kept

        for j, end in enumerate([*assistants, len(view.units)]):
            t = bisect_left(turns, end) - 1
            opening = turns[t] if t >= 0 else -1
            # the request's protected tail: its latest `steps` steps, or its whole turn
            # after the opening when the turn has no more steps than that
            first = bisect_right(assistants, opening)
            limit = bisect_right(
                bounds, assistants[j - steps] if j - first > steps else opening + 1
            )
            kept = estimate(end, opening, k)
            if kept <= high or limit <= k:
                continue
            lo, hi = k + 1, limit  # the first k' whose request is at the low watermark
            while lo < hi:
                mid = (lo + hi) // 2
                if estimate(end, opening, mid) <= low:
                    hi = mid
                else:
                    lo = mid + 1
            k, anchor = lo, opening
            out = Cut(
                tuple(bounds[:k]),
                kept,
                estimate(end, opening, k),
                out.breaks + 1,
                j == len(assistants),
                anchor,
            )
        return out

    def _rules3(self, ledger: Ledger, before: int, high: int) -> StageReport:
        policy = ledger.policy
        reserve = self.reserve(ledger)
        low = int(high * policy.trim_low_ratio)
        cut = self.cut(ledger, high, low, reserve)
        units = 0
        detail = f"{before} tokens; the prefix is kept (no break: under the high watermark)"
        ends, target = list(cut.ends), -1
        start = ends[-1] if ends else 0
        if cut.anchor >= 0:
            ledger.keep(cut.anchor)
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
                    f"prefix break {cut.breaks}: the kept history reached {cut.size} "
                    f"tokens, over the blocking level {high}; cut at a turn or step "
                    f"boundary down to the low watermark {low}"
                )
                if not cut.now:
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
            detail = f"{reason}: {groups} oldest turns or steps dropped ({units} units); {estimate}"
        cut_units = units
        detail, units = self._fit_tail(ledger, reserve, detail, units)
        if units > cut_units:  # the protected steps went too: the prefix changed here
            detail = (
                f"prefix break now: the latest steps alone were over the usable budget "
                f"{policy.usable}; {detail}"
            )
        return StageReport(
            name="trim",
            fired=units > 0,
            detail=detail,
            tokens_before=before,
            tokens_after=ledger.total,
            events=units,
        )

    @staticmethod
    def estimate(policy: Policy, saved: int, written: int) -> str:
        """A break's cache estimate in words: the ``saved`` tokens no longer sent on each
        of the next ``cache_horizon_turns`` requests (cache reads had they stayed)
        against the ``written`` tokens after the break written to the cache again
        (cache reads had there been no break), at the policy's cache prices."""
        horizon = max(policy.cache_horizon_turns, 1)
        value = (
            saved * horizon * policy.cache_read_price
            - written * (policy.cache_write_price - policy.cache_read_price)
        ) / 1e6
        return (
            f"estimate over {horizon} requests: {saved * horizon} cached input tokens "
            f"saved against {written} tokens written to the cache again "
            f"(${value:.4f} net)"
        )


class Cut(NamedTuple):
    """The rules 3 cut: ``ends``, the group ends dropped up to (the last one is the
    cut; empty when nothing is cut); ``size`` and ``after``, the kept history of the
    request of the latest break before and after it; ``breaks``, the breaks so far;
    ``now``, whether the latest break is this request's; ``anchor``, the opening
    message kept since that break (-1: none)."""

    ends: tuple[int, ...] = ()
    size: int = 0
    after: int = 0
    breaks: int = 0
    now: bool = False
    anchor: int = -1

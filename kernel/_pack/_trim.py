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
  and then in one step down to ``trim_low_ratio`` of the usable budget (the
  low watermark), at a turn boundary (or a step boundary of the current turn).
  Between two such breaks a request only appends to the one before it. The cut
  is not remembered anywhere: it is recomputed from the log prefix by replaying
  the watermarks over every group end in order (each end stands for a request
  made there), so the packer stays a pure function of the log, the policy and
  the tokenizer. Each trimmed unit's decision says which break dropped it and
  why, with the cache estimate of the break.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from .._projection import Unit
from .._tokens import MESSAGE_OVERHEAD, REPLY_OVERHEAD
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
                return list(turns[0 if turns[0] > 0 else 1:])
            tail = protection.tail_unit
            return [tail] if tail > 0 else []
        ends = list(turns[0 if turns and turns[0] > 0 else 1:]) if turns else []
        ends += Trim._step_ends(ledger, protection.turn_unit, protection.tail_unit)
        return ends

    @staticmethod
    def _step_ends(ledger: Ledger, after: int, until: int) -> list[int]:
        """Ends of the step groups between unit ``after`` and unit ``until``."""
        assistants = ledger.view.assistant_units
        steps = [a for a in assistants[bisect_right(assistants, after):] if a < until]
        ends = [*steps[1:], until]
        return [e for e in ends if e > after + 1] if until > after + 1 else []

    @staticmethod
    def tail_ends(ledger: Ledger) -> list[int]:
        """Ends of the protected steps' groups (rules 2), for the last resort."""
        protection = ledger.protection
        n_units = len(ledger.view.units)
        start = protection.tail_unit
        assistants = ledger.view.assistant_units
        steps = [a for a in assistants[bisect_right(assistants, start - 1):] if a < n_units]
        ends = [e for e in steps if e > start] + [n_units]
        return [e for e in ends if e > start] if n_units > start else []

    @staticmethod
    def why(unit: Unit, current: int, target: int) -> tuple[str, str]:
        """The rule and detail of a trimmed unit."""
        if unit.turn < current:
            return "trim.turn", (f"turn {unit.turn} dropped: prompt was over the blocking "
                                 f"level {target}")
        return "trim.step", (f"an older step of turn {unit.turn} dropped: prompt was over the "
                             f"blocking level {target}")

    @staticmethod
    def marker_text(ledger: Ledger, first: int, last: int) -> str:
        """The marker for a dropped run from lineage position ``first`` to ``last``."""
        event = ledger.view.events[first]
        return (f"[turnlog: earlier history of this session (positions {first}-{last}) was "
                f"left out of this prompt to fit the context window; it is in the log: "
                f"`turnlog log {event.session} --from {event.seq}`]")

    def __call__(self, ledger: Ledger) -> StageReport:
        policy = ledger.policy
        before = ledger.total
        target = min(ledger.budget.blocking, policy.usable)
        if not policy.trim:
            return StageReport(name="trim", fired=False, detail="disabled by policy")
        if policy.rules >= 3:
            return self._rules3(ledger, before, target)
        if before <= target:
            return StageReport(name="trim", fired=False,
                               detail=f"{before} tokens <= blocking level {target}",
                               tokens_before=before, tokens_after=before)
        current = len(ledger.view.turn_starts)
        reserve = self.reserve(ledger) if policy.rules >= 2 else 0
        groups, units = ledger.drop_oldest(self.ends(ledger), target - reserve,
                                           lambda unit: self.why(unit, current, target))
        ledger.settle()
        detail = f"{groups} oldest turns dropped ({units} units)"
        if policy.rules >= 2:
            detail = f"{groups} oldest turns or steps dropped ({units} units)"
            detail, units = self._fit_tail(ledger, reserve, detail, units)
        return StageReport(name="trim", fired=units > 0, detail=detail,
                           tokens_before=before, tokens_after=ledger.total, events=units)

    @staticmethod
    def reserve(ledger: Ledger) -> int:
        """Tokens set aside for the marker while choosing what to drop: the marker with
        the largest numbers it could hold."""
        view = ledger.view
        if not view.events:
            return 0
        last = len(view.events) - 1
        session = max((e.session for e in (view.events[0], view.events[last])), key=len)
        widest = (f"[turnlog: earlier history of this session (positions {last}-{last}) was "
                  f"left out of this prompt to fit the context window; it is in the log: "
                  f"`turnlog log {session} --from {last}`]")
        return MESSAGE_OVERHEAD + ledger.counter.count(widest)

    def _fit_tail(self, ledger: Ledger, reserve: int, detail: str,
                  units: int) -> tuple[str, int]:
        """Drop protected steps while the tail alone is over the usable budget, then put
        the marker; the report's detail and unit count with what was dropped."""
        policy = ledger.policy
        if ledger.total + reserve > policy.usable:
            more, extra = ledger.drop_tail(
                self.tail_ends(ledger), policy.usable - reserve,
                lambda unit: ("trim.tail", f"a protected step of turn {unit.turn} dropped: "
                                           "the latest steps alone were over the usable "
                                           f"budget {policy.usable}"))
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
    def cut(ledger: Ledger, high: int, low: int, reserve: int,
            ) -> tuple[list[int], int, int, bool]:
        """Where the kept history starts under rules 3, recomputed from the log prefix:
        ``(ends, size, breaks, now)``: the group ends to drop up to (the last one is the
        cut; empty when nothing is cut), the prompt's size that forced the latest break
        (0 if none), the number of breaks so far and whether the latest break is this
        request's. A request stands at every assistant message (the history before it)
        and at the end; a cut may fall at the start of a turn or of a step. The cut
        moves when a request would pass ``high``, and then to the first boundary that
        brings that request to ``low``."""
        view = ledger.view
        before = ledger.droppable_before()
        budget = ledger.budget
        base = budget.system + budget.tools + REPLY_OVERHEAD + reserve
        tail = ledger.protection.tail_unit
        steps = max(ledger.policy.tail_steps, 1)
        bounds = sorted({*view.turn_starts, *view.assistant_units} - {0})
        at = [before(b) for b in bounds]
        requests = list(view.assistant_units)
        k = 0  # bounds[:k] are cut
        size = breaks = 0
        now = False
        for i in range(len(requests) + 1):
            if i < len(requests):
                # the request before assistant message i: its latest steps were protected
                limit = bisect_right(bounds, requests[i - steps] if i >= steps else 0)
                kept = base + before(requests[i]) - (at[k - 1] if k else 0)
            else:
                limit = bisect_right(bounds, tail)
                kept = ledger.total + reserve - (at[k - 1] if k else 0)
            if kept <= high or limit <= k:
                continue
            floor = (at[k - 1] if k else 0) + kept - low  # what the cut must shed
            new = min(bisect_left(at, floor, k, limit) + 1, limit)
            if new > k:
                k, size, breaks, now = new, kept, breaks + 1, i == len(requests)
        return bounds[:k], size, breaks, now

    def _rules3(self, ledger: Ledger, before: int, high: int) -> StageReport:
        policy = ledger.policy
        reserve = self.reserve(ledger)
        low = min(high, int(policy.usable * policy.trim_low_ratio))
        ends, size, breaks, now = self.cut(ledger, high, low, reserve)
        k = len(ends)
        units = 0
        detail = f"{before} tokens; the prefix is kept (no break: under the high watermark)"
        if k:
            saved = ledger.droppable_before()(ends[k - 1])
            horizon = max(policy.cache_horizon_turns, 1)
            write = before - saved
            dollars = (saved * horizon * policy.input_price
                       - write * (policy.cache_write_price - policy.cache_read_price)) / 1e6
            estimate = (f"estimate over {horizon} requests: {saved * horizon} input tokens "
                        f"saved against {write} tokens written to the cache once "
                        f"(${dollars:.4f} saved)")
            reason = (f"prefix break {breaks}: the kept history reached {size} tokens, over "
                      f"the blocking level {high}; cut at a turn boundary down to the low "
                      f"watermark {low}")
            if not now:
                reason = f"cut kept from the earlier {reason}"
            current = len(ledger.view.turn_starts)
            groups, units = ledger.drop_oldest(
                ends, -1, lambda unit: ("trim.break" if unit.turn < current
                                            else "trim.step", f"{reason}; {estimate}"))
            ledger.settle()
            detail = (f"{reason}: {groups} oldest turns or steps dropped ({units} units); "
                      f"{estimate}")
        detail, units = self._fit_tail(ledger, reserve, detail, units)
        return StageReport(name="trim", fired=units > 0, detail=detail,
                           tokens_before=before, tokens_after=ledger.total, events=units)

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
"""

from __future__ import annotations

from bisect import bisect_right

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

    def _mark(self, ledger: Ledger) -> None:
        """Put the marker where the dropped run was."""
        gap = ledger.dropped_run()
        if gap is None:
            return
        first, last, before = gap
        ledger.mark(Marker(before, self.marker_text(ledger, first, last), ledger.counter))

"""Stage 6, trimming: whole turns are dropped, oldest first, at the blocking level.

When the prompt is over the blocking level, whole turns are dropped oldest
first until it is at that level, so the kept history starts at a user message.
Protected units stay wherever they are (the mandatory tail is never reached:
the groups end where it starts). Units before the first user message form a
turn of their own (turn 0).
"""

from __future__ import annotations

from .._projection import Unit
from ._ledger import Ledger
from ._model import StageReport

__all__: list[str] = []


class Trim:
    """The trimming stage (see the module docstring)."""

    name = "trim"

    @staticmethod
    def ends(ledger: Ledger) -> list[int]:
        """Where each droppable turn ends (unit indexes, ascending); the last is the
        start of the mandatory tail."""
        turns = ledger.view.turn_starts
        if turns:
            return list(turns[0 if turns[0] > 0 else 1:])
        tail = ledger.protection.tail_unit
        return [tail] if tail > 0 else []

    @staticmethod
    def detail(unit: Unit, target: int) -> str:
        """The decision detail of a trimmed unit."""
        return f"turn {unit.turn} dropped: prompt was over the blocking level {target}"

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
        turns, units = ledger.drop_oldest(self.ends(ledger), target,
                                          lambda unit: self.detail(unit, target))
        return StageReport(name="trim", fired=units > 0,
                           detail=f"{turns} oldest turns dropped ({units} units)",
                           tokens_before=before, tokens_after=ledger.total, events=units)

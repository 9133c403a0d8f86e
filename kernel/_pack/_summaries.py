"""Stage 3, summaries: committed compactions replace the events they cover.

A unit with an item inside the span of a committed compaction is *covered*;
unless protected, its items leave the messages (decision ``summarized``, naming
the compaction) and the summaries go to the ``conversation_summary`` system
section (under rules 2 only when ``summary_budget`` is not 0, the prompt is at
the ``summary_gate`` pressure, and at least one summary fits: otherwise the
covered events are ordinary history, shown or trimmed like any other), filled
breadth-first from the highest level (L2 -> L1 before L1 -> L0)
within ``summary_budget`` x the history budget and never taking the room the
protected part needs. A later summary whose span contains an earlier one
supersedes it. This runs before dedup so that the pressure gates of dedup and
pruning see the history the model will actually get.

`Coverage` keeps the covered units incrementally (the `Packer`'s index holds
it); `SummaryPlan` chooses which summaries the prompt shows.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, MutableMapping, Sequence

import msgspec

from .._events import CompactionCommitted, Event
from .._policy import Policy
from .._projection import Item, Projection
from .._tokens import MESSAGE_OVERHEAD, TokenCounter
from .._validation import plural
from ._budget import placeholder_tokens
from ._ledger import Ledger, SummarySection
from ._model import Budget, StageReport

__all__: list[str] = []


def summaries_shown(shown: int, summarized: int) -> str:
    """The summaries stage's report: ``1 summary shown, 2 events summarized``."""
    return (
        f"{plural(shown, 'summary', 'summaries')} shown, {plural(summarized, 'event')} summarized"
    )


def block(body: CompactionCommitted) -> str:
    """One summary as the section carries it."""
    return (
        f'<summary level="L{body.level}" positions="{body.first_seq}-{body.last_seq}">\n'
        f"{body.summary}\n</summary>"
    )


def covering(pos: int, body: CompactionCommitted) -> str:
    """The decision detail of an event a compaction covers."""
    return (
        f"covered by compaction #{pos} (level {body.level}, positions "
        f"{body.first_seq}-{body.last_seq})"
    )


def compactions(
    events: Sequence[Event],
    positions: Sequence[int],
) -> dict[int, CompactionCommitted]:
    """The committed compactions at ``positions`` of ``events``, by position."""
    bodies: dict[int, CompactionCommitted] = {}
    for pos in positions:
        body = events[pos].body
        assert isinstance(body, CompactionCommitted)
        bodies[pos] = body
    return bodies


class Coverage:
    """The units committed compactions cover, kept up to date as compactions arrive.

    Covered units are also kept as runs ``[start, end)`` of unit indexes, so that
    the prompt and the pruning walk skip a summarized stretch in one step.

    Attributes:
        covered: units with an item inside a compaction's span.
        in_range: covered unit -> its items inside a span; in_range_total: their sum.
        starts, ends: the covered runs (disjoint, ascending, not adjacent).
    """

    def __init__(self) -> None:
        self.done = 0  # compactions folded in
        self.covered: set[int] = set()
        self.in_range: dict[int, int] = {}
        self.in_range_total = 0
        self.starts: list[int] = []
        self.ends: list[int] = []
        self._spans: list[tuple[int, int]] = []  # covered positions: disjoint, ascending

    def catch_up(self, view: Projection, positions: list[int]) -> list[int]:
        """Fold in the compactions committed since the last call (``positions`` are the
        items' lineage positions, ascending); returns the newly covered units."""
        new: list[int] = []
        items = view.items
        for pos in view.compactions[self.done :]:
            body = view.events[pos].body
            assert isinstance(body, CompactionCommitted)
            for start, end in _uncovered(self._spans, body.first_seq, body.last_seq):
                for index in range(bisect_left(positions, start), bisect_left(positions, end + 1)):
                    unit = items[index].unit
                    if unit < 0:
                        continue
                    self.in_range[unit] = self.in_range.get(unit, 0) + 1
                    self.in_range_total += 1
                    if unit not in self.covered:
                        self.covered.add(unit)
                        _add_run(self.starts, self.ends, unit)
                        new.append(unit)
            self._spans = _merge_span(self._spans, body.first_seq, body.last_seq)
        self.done = len(view.compactions)
        return new

    def run_of(self, unit: int) -> tuple[int, int] | None:
        """The covered run holding ``unit``, if any."""
        return run_of(self.starts, self.ends, unit)


class SummaryPlan:
    """Which committed summaries the prompt shows, and its summary section.

    Parameters:
        history: the history budget before summaries.
        positions: the compactions to consider (all of the view's when None).
        budget: the summary budget (``summary_budget`` x history).
        protected: tokens of the protected part (tail, pins, calls awaiting
            results, their placeholder results), which summaries never take.
        tokens: a cache of each summary block's tokens, by position.

    Attributes:
        bodies: every committed compaction of the view, by position.
        shown: positions of the summaries shown, oldest span first.
        text: the summary section ("" when none is shown); tokens: its tokens.
        framing: system-message framing the section adds when it opens it.
        why: why a compaction is not shown ("" when it is).
    """

    def __init__(
        self,
        view: Projection,
        counter: TokenCounter,
        history: int,
        budget: int,
        protected: int,
        tokens: MutableMapping[int, int],
        positions: Sequence[int] | None = None,
    ) -> None:
        bodies = self.bodies = compactions(
            view.events, view.compactions if positions is None else positions
        )
        self.why: dict[int, str] = {}
        for pos, body in bodies.items():
            if pos not in tokens:
                tokens[pos] = counter.count(block(body)) + 1
        children = {pos: [c for c in b.children if c in bodies] for pos, b in bodies.items()}
        room = history - protected
        limit = max(0, min(budget, room))
        shown = self._roots(children)
        self._within(shown, tokens, limit, budget)
        self._expand(shown, children, tokens, limit)
        shown.sort(key=lambda p: bodies[p].first_seq)
        # The summary opens the system message when there is no other section.
        self.framing = 0 if view.sections else MESSAGE_OVERHEAD
        self.text = self._section(shown, counter, room)
        for pos in bodies:
            self.why.setdefault(pos, "" if pos in shown else "rolled up: shown through its parent")
        self.shown = shown
        self.tokens = counter.count(self.text) + 1 if shown else 0

    def _roots(self, children: Mapping[int, list[int]]) -> list[int]:
        """The summaries no rollup lists, minus those a later one's span contains."""
        bodies = self.bodies
        is_child = {c for kids in children.values() for c in kids}
        kept: list[int] = []
        for pos in sorted(pos for pos in bodies if pos not in is_child):
            b = bodies[pos]
            kept = [
                r
                for r in kept
                if not (b.first_seq <= bodies[r].first_seq and bodies[r].last_seq <= b.last_seq)
            ]
            kept.append(pos)
        for pos in bodies:
            if pos not in kept and pos not in is_child:
                self.why[pos] = "superseded by a later summary covering its span"
        return sorted(kept, key=lambda p: bodies[p].first_seq)

    def _within(self, shown: list[int], tokens: Mapping[int, int], limit: int, budget: int) -> None:
        """Too many roots for the limit: the oldest go first."""
        used = sum(tokens[p] for p in shown)
        why = (
            f"over the summary budget ({limit} tokens)"
            if limit == budget
            else f"the protected part leaves {limit} tokens for summaries"
        )
        while used > limit and shown:
            oldest = shown.pop(0)
            used -= tokens[oldest]
            self.why[oldest] = f"{why}; its events stay summarized"

    def _expand(
        self,
        shown: list[int],
        children: Mapping[int, list[int]],
        tokens: Mapping[int, int],
        limit: int,
    ) -> None:
        """Breadth-first expansion: highest level first, oldest first."""
        bodies = self.bodies
        used = sum(tokens[p] for p in shown)
        expanded = True
        while expanded:
            expanded = False
            for pos in sorted(shown, key=lambda p: (-bodies[p].level, bodies[p].first_seq)):
                kids = children[pos]
                if not kids:
                    continue
                extra = sum(tokens[k] for k in kids) - tokens[pos]
                if used + extra <= limit:
                    shown.remove(pos)
                    shown.extend(kids)
                    used += extra
                    self.why[pos] = "expanded into its children"
                    expanded = True
                    break

    def _section(self, shown: list[int], counter: TokenCounter, room: int) -> str:
        """The rendered section (wrapper and framing included) within the room."""
        while shown:
            text = (
                "<conversation_summary>\n"
                + "\n".join(block(self.bodies[p]) for p in shown)
                + "\n</conversation_summary>"
            )
            if counter.count(text) + 1 + self.framing <= room:
                return text
            oldest = shown.pop(0)
            self.why[oldest] = (
                f"the protected part leaves {room} tokens for summaries; its events stay summarized"
            )
        return ""


def shown_budget(budget: Budget, plan: SummarySection) -> tuple[Budget, int]:
    """The budget once the plan's section is in the prompt, and the framing it adds."""
    framing = plan.framing if plan.shown else 0
    summary = plan.tokens if plan.shown else 0
    return msgspec.structs.replace(
        budget,
        summary=summary,
        system=budget.system + framing,
        history=budget.history - summary - framing,
    ), framing


class Summaries:
    """The summaries stage (see the module docstring)."""

    name = "summaries"

    @staticmethod
    def skipped(ledger: Ledger) -> str:
        """Why the originals are shown instead of the summaries ("" when they are not):
        under rules 2, summaries are a packing choice, off with ``summary_budget`` 0 and
        used only when the prompt is at the ``summary_gate`` pressure (seed 002)."""
        policy = ledger.policy
        if policy.rules < 2:
            return ""
        if policy.summary_budget == 0:
            return "summary_budget is 0: the covered events are packed as if no compaction existed"
        gate = policy.summary_gate
        pressure = ledger.total / max(policy.usable, 1)
        if pressure < gate:
            return (
                f"pressure {pressure:.3f} is below the summary gate {gate}: the covered "
                "events are shown instead of their summaries"
            )
        return ""

    @staticmethod
    def detail_of(events: Sequence[Event], positions: Sequence[int]) -> dict[int, str]:
        """Position -> the decision detail of a summarized event at it: the first
        compaction (by level, then position) whose span holds it."""
        found = sorted(compactions(events, positions).items(), key=lambda pb: (pb[1].level, pb[0]))
        details: dict[int, str] = {}
        for pos, body in found:
            text = covering(pos, body)
            for cpos in range(body.first_seq, body.last_seq + 1):
                details.setdefault(cpos, text)
        return details

    @staticmethod
    def unit_detail(details: Mapping[int, str], items: Sequence[Item]) -> str:
        """The detail of a summarized item outside every span: its unit's first item
        inside one, completing a tool exchange."""
        for item in items:
            first = details.get(item.pos)
            if first is not None:
                return first + "; completes a tool exchange"
        return ""

    def __call__(self, ledger: Ledger) -> StageReport:
        if not ledger.view.compactions:
            return StageReport(name="summaries", fired=False, detail="no compaction committed")
        if ledger.policy.rules < 3:
            return self._decide(ledger)[0]
        previous = Previous(ledger)
        report, shown = self._decide(ledger)
        why = previous.change(ledger, shown)
        if not why:
            return report
        from ._trim import Trim

        view = ledger.view
        static = sum(view.section_tokens.values()) + ledger.budget.tools
        estimate = Trim.estimate(
            ledger.policy,
            max(0, report.tokens_before - report.tokens_after),
            max(0, ledger.total - static),
        )
        return msgspec.structs.replace(
            report, detail=f"prefix break: {why}; {report.detail}; {estimate}"
        )

    def _decide(self, ledger: Ledger) -> tuple[StageReport, SummaryPlan | None]:
        """The stage's report, and the plan whose summaries the prompt shows (None:
        the covered events are shown)."""
        view = ledger.view
        before = ledger.total
        skip = self.skipped(ledger)
        if skip:
            ledger.keep_originals(skip)
            return StageReport(
                name="summaries",
                fired=False,
                detail=skip,
                tokens_before=before,
                tokens_after=before,
            ), None
        history = ledger.budget.history
        protected = ledger.protected_tokens()
        if ledger.policy.rules >= 2:
            # the floor keeps the marker of a trimmed run too: summaries never take its room
            from ._trim import Trim

            protected += Trim.reserve(ledger)
        plan = SummaryPlan(
            view,
            ledger.counter,
            history,
            max(0, int(history * ledger.policy.summary_budget)),
            protected,
            ledger.summary_tokens,
        )
        if ledger.policy.rules >= 2 and not plan.shown:
            # no summary fits: summarizing would leave the covered events out unseen
            why = (
                f"none of the {len(plan.bodies)} summaries fits the room the protected part "
                "leaves: the covered events are packed as ordinary history"
            )
            ledger.keep_originals(why)
            return StageReport(
                name="summaries", fired=False, detail=why, tokens_before=before, tokens_after=before
            ), None
        count = ledger.summarize_covered(plan)
        return StageReport(
            name="summaries",
            fired=True,
            detail=summaries_shown(len(plan.shown), count),
            tokens_before=before,
            tokens_after=ledger.total,
            events=count,
        ), plan


class Previous:
    """What the previous request (the one made before the latest assistant message)
    showed of the committed summaries, sized the same way from the log prefix before
    it: its summary section and the covered units it kept because they were protected.

    Rules 3 report a change of either as a prefix break: a summary shown or withdrawn
    (a compaction committed, the pressure gate passed, the protected part grown past
    the room a summary needs) rewrites the summary section and takes the covered
    events out of the messages or puts them back; a covered unit that leaves the
    protected part (an older step once newer ones arrive, the opening of a turn once
    the next turn starts) leaves the messages for its summary. Must be built before
    the stage changes the ledger (it reads the sizes of every unit)."""

    def __init__(self, ledger: Ledger) -> None:
        view, policy = ledger.view, ledger.policy
        assistants = view.assistant_units
        self.text: str | None = None  # None: there is no previous request
        self.kept: list[int] = []
        if not assistants:
            return
        end = assistants[-1]  # the previous request holds the units before it
        units, items = view.units, view.items
        boundary = items[units[end].items[0]].pos
        positions = [p for p in view.compactions if p < boundary]
        self.text = ""
        if not positions or policy.summary_budget == 0:
            return
        size = ledger.kept_before()
        counter = ledger.counter

        def answers(u: int) -> int:
            return placeholder_tokens(view, counter, u, policy.rules) if u in open_ else 0

        open_ = view.open_units
        later = sum(answers(u) for u in open_ if u >= end)
        total = ledger.total - (size(len(units)) - size(end)) - later
        if total / max(policy.usable, 1) < policy.summary_gate:
            return
        protected = _protected_at(view, policy, end)
        tokens = sum(size(u + 1) - size(u) + answers(u) for u in protected)
        from ._trim import Trim

        history = ledger.budget.history
        plan = SummaryPlan(
            view,
            counter,
            history,
            max(0, int(history * policy.summary_budget)),
            tokens + Trim.reserve(ledger),
            ledger.summary_tokens,
            positions,
        )
        if plan.shown:
            self.text = plan.text
            self.kept = _covered(view, protected, positions)

    def change(self, ledger: Ledger, plan: SummaryPlan | None) -> str:
        """How this request's summaries differ from the previous one's ("" when they
        do not)."""
        if self.text is None:
            return ""
        text = plan.text if plan is not None and plan.shown else ""
        if text != self.text:
            if not text:
                return "the summaries are withdrawn: the covered events are shown again"
            if not self.text:
                return (
                    f"{plural(len(plan.shown) if plan else 0, 'summary', 'summaries')} shown "
                    "from this request on: the covered events leave the messages"
                )
            return "the summary section changed (a compaction committed or one rolled up)"
        left = [u for u in self.kept if u not in ledger.protection]
        if text and left:
            return (
                f"{len(left)} covered units left the protected part and are summarized "
                "from this request on"
            )
        return ""


def _protected_at(view: Projection, policy: Policy, end: int) -> list[int]:
    """The units a request holding the units before ``end`` protected (as
    `Protection` does for rules 2 and later), ascending."""
    turns, assistants = view.turn_starts, view.assistant_units
    t = bisect_left(turns, end) - 1
    turn = turns[t] if t >= 0 else -1
    steps = policy.tail_steps
    held = bisect_left(assistants, end)  # the request's steps: assistants[:held]
    first = bisect_right(assistants, turn, 0, held)
    if held - first > steps:
        tail = assistants[held - steps] if steps else (end if turn >= 0 else max(end - 1, 0))
    elif turn >= 0:
        tail = min(turn + 1, end)
    else:
        tail = 0 if steps else max(end - 1, 0)
    older = {u for u in view.open_units if max(turn, 0) <= u < end}
    if turn >= 0:
        older.add(turn)
    for pos in view.pins:
        index = view.item_at.get(pos)
        if index is not None and 0 <= view.items[index].unit < end:
            older.add(view.items[index].unit)
    return sorted(older | set(range(tail, end)))


def _covered(view: Projection, units: Sequence[int], positions: Sequence[int]) -> list[int]:
    """Those of ``units`` with an item inside the span of a compaction at ``positions``."""
    spans = []
    for pos in positions:
        body = view.events[pos].body
        assert isinstance(body, CompactionCommitted)
        spans.append((body.first_seq, body.last_seq))
    items = view.items
    return [
        u
        for u in units
        if any(first <= items[i].pos <= last for i in view.units[u].items for first, last in spans)
    ]


def _uncovered(spans: list[tuple[int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """The parts of ``[first, last]`` outside the disjoint ascending ``spans``."""
    out: list[tuple[int, int]] = []
    at = first
    for start, end in spans:
        if end < at:
            continue
        if start > last:
            break
        if start > at:
            out.append((at, start - 1))
        at = max(at, end + 1)
        if at > last:
            break
    if at <= last:
        out.append((at, last))
    return out


def _merge_span(spans: list[tuple[int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """``spans`` with ``[first, last]`` added (adjacent spans joined)."""
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if end + 1 < first or start > last + 1:
            out.append((start, end))
        else:
            first, last = min(first, start), max(last, end)
    out.append((first, last))
    out.sort()
    return out


def _add_run(starts: list[int], ends: list[int], unit: int) -> None:
    """Add ``unit`` to runs ``[starts[k], ends[k])`` (disjoint, ascending, not adjacent)."""
    k = bisect_left(starts, unit + 1) - 1  # the run starting at or before the unit
    joins_left = k >= 0 and ends[k] == unit
    joins_right = k + 1 < len(starts) and starts[k + 1] == unit + 1
    if joins_left and joins_right:
        ends[k] = ends[k + 1]
        del starts[k + 1], ends[k + 1]
    elif joins_left:
        ends[k] = unit + 1
    elif joins_right:
        starts[k + 1] = unit
    else:
        starts.insert(k + 1, unit)
        ends.insert(k + 1, unit + 1)


def run_of(starts: list[int], ends: list[int], unit: int) -> tuple[int, int] | None:
    """The run holding ``unit``, if any."""
    k = bisect_left(starts, unit + 1) - 1
    if k >= 0 and unit < ends[k]:
        return starts[k], ends[k]
    return None

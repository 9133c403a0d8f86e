"""Durable compaction: choose a span, summarize it, commit it as an event.

Theory of operation
-------------------
Compaction creates new model-visible content (a summary), so unlike pruning
it is a fact in the log: a ``CompactionCommitted`` event with provenance
(covered positions and a digest of their hashes, summarizer, model, prompt
hash, reason, token counts, cost-model numbers). Failures are facts too
(``CompactionFailed``). The packer then substitutes committed summaries;
nothing is deleted.

Span choice (level 0): from the first position no summary covers yet, up to a
safe split point: the start of the turn that begins the ``keep_recent_turns``
most recent turns, moved back so that at least ``keep_recent_messages``
messages stay verbatim, never into the mandatory tail, never past a call
still waiting for its result, and never through a unit (a call and its
results are covered together or not at all).

Segments: the span is cut into level-0 segments at user-turn boundaries, of
about ``segment_target_tokens`` (at least ``segment_min_tokens``), and early at
a topic shift (low lexical overlap between consecutive user messages) once a
segment has its minimum. Every ``rollup_fanout`` consecutive summaries of one
level roll up into one of the next level; rollups summarize the child
summaries explicitly. Summaries never become source text of a level-0 summary.

Full content: a level-0 summary is made from the whole text of the events it
covers: a blob-stored output is read back from its blob (the prompt shows its
preview; the summarizer gets all of it), and the summary's ``tokens_before``
counts that whole text. When a segment's transcript is larger than the
summarizer's ``window``, it is summarized in parts (map) and the parts'
summaries merged (reduce): the cuts are fixed by the text and the token counter
(`split_transcript`), each part's summary is appended as a
``CompactionPartSummarized`` before any merge reads it (so every input a model
summarizer gets is in the log first), merges whose input is still too large are
parts of the next level, and the ``CompactionCommitted`` lists the parts it
merges in ``parts``.

Validation: a summary must be non-empty and within ``summary_max_tokens``; the
pack that follows is re-checked (a fresh compaction suppresses no check), and
the outcome says whether it fits.

Circuit breaker: after ``compact_max_failures`` consecutive failures the
compactor skips until a request is recorded below the warning level; packing
meanwhile falls back to trimming (it always can).

Triggers: pressure (the packer's ``compaction_due``) with a cooldown in turns,
every N turns, every N tool calls, manual, and overflow recovery. The cost
model weighs tokens freed against the prompt-cache write the compaction
causes and the cache reads it forfeits, with the policy's prices.

Overflow recovery: after a recorded context-overflow error, `Compactor.recover`
compacts with the extractive summarizer (no model call: the model is refusing)
keeping ``max(4, keep_recent_messages // 2)`` messages, and the next pack is a
recovery pack (see ``pack.recovery_policy``). Both are recorded.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Literal

import msgspec

from ._chain import covered_digest
from ._errors import AppendConflictError, BlobNotFoundError, BudgetExceededError, CompactionError
from ._events import (
    CompactionCommitted,
    CompactionFailed,
    CompactionPartSummarized,
    NotificationAdded,
    SessionRewound,
    TextPart,
    ToolResultAdded,
)
from ._log import Draft, Head, Log, check_log
from ._otel import set_attributes as otel_attributes
from ._otel import span as otel_span
from ._pack import Packed
from ._pack._assemble import message
from ._pack._engine import pack_stored
from ._pack._ledger import Protection
from ._packer import Packer
from ._policy import Policy, check_policy
from ._projection import Item, Projection, Unit, notification_text
from ._prompt import Message
from ._summarize import (
    WINDOW_SHARE,
    ExtractiveSummarizer,
    Summarizer,
    Summary,
    SummaryRequest,
    split_transcript,
    window_of,
)
from ._tokens import TokenCounter
from ._validation import check_type, invalid, plural, refuse_unknown_options

__all__ = ["Compactor", "CostEstimate", "Outcome"]

Reason = Literal["threshold", "overflow", "manual", "schedule", "rollup"]
_WORD = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{2,}")


class CostEstimate(msgspec.Struct, frozen=True, kw_only=True):
    """The cost model's numbers for compacting now versus not.

    Costs are in the policy's price unit per million tokens times tokens.

    Attributes:
        prompt_tokens: tokens of the prompt before compacting.
        freed_tokens: tokens the summaries would free (span minus summaries).
        keep_cost: cost over ``horizon`` turns of keeping the cached prompt.
        compact_cost: cost of one cache write of the smaller prompt plus its
            reads over the remaining turns.
        cache_reads_lost: cached-prefix tokens the compaction invalidates.
        horizon: turns considered.
        worth: compact_cost < keep_cost.
    """

    prompt_tokens: int
    freed_tokens: int
    keep_cost: float
    compact_cost: float
    cache_reads_lost: int
    horizon: int
    worth: bool

    def describe(self) -> str:
        """One line for explanations and the event's ``costs`` field."""
        return (
            f"freed={self.freed_tokens} prompt={self.prompt_tokens} "
            f"keep_cost={self.keep_cost:.2f} compact_cost={self.compact_cost:.2f} "
            f"cache_reads_lost={self.cache_reads_lost} horizon={self.horizon} "
            f"worth={'yes' if self.worth else 'no'}"
        )


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a compaction attempt did.

    Attributes:
        status: ``committed``, ``failed`` or ``skipped``.
        reason: the trigger (or why it was skipped).
        seqs: seqs of the events appended (compactions, rollups, failures).
        detail: in words.
        cost: the cost model's numbers, when evaluated.
        next_tokens: tokens of the next pack after the compaction.
        fits: whether that pack fits the usable budget.
        covered_tokens: tokens of the whole text the level-0 summaries cover.
        parts: part summaries made for spans larger than the summarizer's window.
    """

    status: Literal["committed", "failed", "skipped"]
    reason: str
    seqs: tuple[int, ...] = ()
    detail: str = ""
    cost: CostEstimate | None = None
    next_tokens: int = 0
    fits: bool = True
    covered_tokens: int = 0
    parts: int = 0


class Compactor:
    """Compacts sessions of a log.

    Parameters:
        log: the log.
        packer: the packer to measure pressure with (shares its projections).
        summarizer: the summarizer; the offline extractive one when None.
        timeout: seconds a summarizer may take before the attempt is recorded
            as failed (it is then abandoned).
    """

    @refuse_unknown_options("Compactor()", usage="Compactor(turnlog.open(path))")
    def __init__(
        self,
        log: Log,
        packer: Packer | None = None,
        *,
        summarizer: Summarizer | None = None,
        timeout: float = 120.0,
    ) -> None:
        check_log(log, "Compactor")
        if packer is not None:
            check_type(packer, Packer, "packer", what="None or a Packer of the same log")
        if summarizer is not None and not (
            isinstance(getattr(summarizer, "id", None), str)
            and callable(getattr(summarizer, "summarize", None))
        ):
            invalid(
                "summarizer",
                "None or a Summarizer (an object with an id string and a "
                "summarize(request) method)",
                summarizer,
                hint="pass ExtractiveSummarizer(counter) or a model summarizer of "
                "turnlog.adapters.providers (OpenAISummarizer, AnthropicSummarizer)",
                with_type=True,
            )
        self.log = log
        self.packer = packer if packer is not None else Packer(log)
        self.summarizer = summarizer
        self.timeout = timeout

    # -- entry points ----------------------------------------------------------------
    def maybe_compact(
        self, session: str, *, policy: Policy | None = None, time: int | None = None
    ) -> Outcome:
        """Evaluate the policy's triggers, the circuit breaker and the cost model;
        compact when they say so."""
        policy, view = self._setup(session, policy)
        trigger = self._trigger(view, policy)
        if trigger is None:
            return Outcome(status="skipped", reason="no trigger fired")
        reason, forced = trigger
        if self.breaker_open(view, policy):
            return Outcome(
                status="skipped",
                reason="circuit breaker open",
                detail=f"{policy.compact_max_failures} consecutive failures; "
                "packing falls back to trimming until pressure drops below "
                "the warning level",
            )
        span, why = self.span(view, policy)
        if span is None:
            return Outcome(status="skipped", reason="nothing to compact", detail=why)
        cost = self.estimate(view, policy, span)
        if not forced and not cost.worth:
            return Outcome(
                status="skipped", reason="not worth it now", cost=cost, detail=cost.describe()
            )
        return self._compact(session, view, policy, span, reason, time=time, cost=cost)

    def compact(
        self,
        session: str,
        *,
        policy: Policy | None = None,
        reason: Reason = "manual",
        time: int | None = None,
    ) -> Outcome:
        """Compact now, whatever the triggers say (the circuit breaker still applies
        to automatic reasons)."""
        policy, view = self._setup(session, policy)
        if reason != "manual" and self.breaker_open(view, policy):
            return Outcome(status="skipped", reason="circuit breaker open")
        span, why = self.span(view, policy)
        if span is None:
            return Outcome(status="skipped", reason="nothing to compact", detail=why)
        return self._compact(
            session, view, policy, span, reason, time=time, cost=self.estimate(view, policy, span)
        )

    def recover(
        self, session: str, *, policy: Policy | None = None, time: int | None = None
    ) -> Outcome:
        """Overflow recovery: compact with the extractive summarizer (no model call),
        keeping ``max(4, keep_recent_messages // 2)`` messages."""
        policy, view = self._setup(session, policy)
        if not view.overflow_pending:
            return Outcome(status="skipped", reason="no pending context-overflow error")
        keep = max(4, policy.keep_recent_messages // 2)
        emergency = msgspec.structs.replace(policy, keep_recent_turns=1, keep_recent_messages=keep)
        span = self.choose_span(view, emergency)
        if span is None:
            return Outcome(
                status="skipped",
                reason="overflow: nothing before the tail to "
                "compact; the recovery pack truncates instead",
            )
        extractive = ExtractiveSummarizer(view.counter)
        return self._compact(
            session,
            view,
            emergency,
            span,
            "overflow",
            time=time,
            summarizer=extractive,
            cost=None,
            segmented=False,
        )

    # -- decisions ------------------------------------------------------------------
    def _setup(self, session: str, policy: Policy | None) -> tuple[Policy, Projection]:
        check_policy(policy)
        policy = (
            policy.resolved()
            if policy is not None
            else self.packer.policy_in_force(session) or Policy().resolved()
        )
        counter = self.packer.counter_for(policy)
        return policy, self.packer.projection(session, counter)

    def _pack(self, view: Projection, policy: Policy) -> Packed:
        """A pack with the built-in pipeline, incremental on the packer's index."""
        return pack_stored(view, policy, explain=False, index=self.packer.index_of(view))

    def _trigger(self, view: Projection, policy: Policy) -> tuple[Reason, bool] | None:
        turn = len(view.turn_starts)
        last = _last_compaction_turn(view)
        if policy.auto_compact and turn - last >= policy.compact_cooldown_turns:
            packed = self._pack(view, policy) if view.items else None
            if packed is not None and packed.compaction_due:
                forced = packed.pressure_before * policy.usable >= policy.level("blocking")
                return "threshold", forced
        if policy.compact_every_turns and turn - last >= policy.compact_every_turns:
            return "schedule", True
        if policy.compact_every_tool_calls:
            since = view.tool_calls - _tool_calls_at(view, _last_compaction_pos(view))
            if since >= policy.compact_every_tool_calls:
                return "schedule", True
        return None

    def breaker_open(self, view: Projection, policy: Policy) -> bool:
        """True after ``compact_max_failures`` consecutive failures, until a request
        is recorded below the warning level."""
        if not policy.compact_max_failures:
            return False
        # Walk back from the newest event: a committed compaction ends the run
        # of failures, and so does a request recorded below the warning level
        # (the breaker resets once pressure has dropped).
        failures = 0
        warning = policy.level("warning")
        for pos in range(len(view.events) - 1, -1, -1):
            if pos in view.rewound:
                continue
            body = view.events[pos].body
            if isinstance(body, CompactionCommitted):
                break
            if pos in view.requests and view.requests[pos] < warning:
                break
            if isinstance(body, CompactionFailed):
                failures += 1
        return failures >= policy.compact_max_failures

    def choose_span(self, view: Projection, policy: Policy) -> tuple[int, int] | None:
        """The lineage positions ``(first, last)`` a level-0 compaction may cover."""
        return self.span(view, policy)[0]

    def span(self, view: Projection, policy: Policy) -> tuple[tuple[int, int] | None, str]:
        """The span a level-0 compaction may cover, or None and why there is none.

        Rules 1: the units before the ``keep_recent_turns`` most recent turns (never
        the current turn). Rules 2: those, and the older steps of the current turn
        (before the ``tail_steps`` protected ones, after its opening message): a long
        autonomous turn compacts too. The older turns go first; once everything before
        the opening is covered or stays verbatim (the kept turns, or what came before a
        session's only instruction), the older steps do. Either way at least
        ``keep_recent_messages`` messages stay, the split falls between turns (rules 2:
        between steps), never inside a unit, and never past a call awaiting its result.
        """
        units = view.units
        if not units:
            return None, "the session has no messages"
        stop = _stop_v2(view, policy) if policy.rules >= 2 else _stop_v1(view, policy)
        covered = _covered_until(view)
        start = 0
        if policy.rules >= 2 and view.turn_starts and view.turn_starts[-1] < stop:
            # the current turn's opening message stays as it is: start after it when
            # everything before it is covered already
            opening = view.turn_starts[-1]
            if all(_first_pos(view, u) <= covered for u in units[:opening]):
                start = opening + 1
        chosen = [u for u in units[start:stop] if _first_pos(view, u) > covered]
        if policy.rules >= 2 and view.turn_starts:
            # never cover the current turn's opening message: a span ends before it (a
            # later compaction then takes the older steps after it)
            opening = view.turn_starts[-1]
            opening_pos = _first_pos(view, units[opening])
            before: list[Unit] = []
            for unit in chosen:
                # a unit whose late result arrived after the opening message ends the span
                if (
                    unit.index >= opening
                    or max(view.items[i].pos for i in unit.items) > opening_pos
                ):
                    break
                before.append(unit)
            chosen = before or [u for u in chosen if u.index > opening]
            if not chosen:
                # Everything before the opening is covered or stays verbatim (the kept
                # turns; in a one-instruction session, what came before the instruction):
                # the current turn's older steps are ordinary history.
                stop = _stop_v2(view, policy, keep_turns=False)
                chosen = [u for u in units[opening + 1 : stop] if _first_pos(view, u) > covered]
        if not chosen:
            return None, _nothing(view, policy, stop, covered)
        first = _first_pos(view, chosen[0])
        last = max(view.items[i].pos for u in chosen for i in u.items)
        last = _no_straddle(view, first, last, stop)
        if last < first:
            return None, (
                "the units that could be compacted hold results that arrived after "
                "later messages; the split would separate a call from its result"
            )
        return (first, last), ""

    def estimate(self, view: Projection, policy: Policy, span: tuple[int, int]) -> CostEstimate:
        """The cost model for compacting ``span`` now."""
        packed = self._pack(view, policy)
        span_tokens = sum(
            it.tokens for it in view.items if span[0] <= it.pos <= span[1] and it.unit >= 0
        )
        summary_tokens = min(policy.summary_max_tokens, max(1, span_tokens // 10))
        freed = max(0, span_tokens - summary_tokens)
        now = packed.tokens
        after = max(1, now - freed)
        horizon = max(1, policy.cache_horizon_turns)
        per_m = 1_000_000
        keep_cost = (now * policy.cache_read_price * horizon) / per_m
        compact_cost = (
            after * policy.cache_write_price + after * policy.cache_read_price * (horizon - 1)
        ) / per_m
        cached = sum(packed.section_tokens) + packed.budget.tools + sum(packed.message_tokens)
        return CostEstimate(
            prompt_tokens=now,
            freed_tokens=freed,
            keep_cost=round(keep_cost, 6),
            compact_cost=round(compact_cost, 6),
            cache_reads_lost=cached,
            horizon=horizon,
            worth=compact_cost < keep_cost,
        )

    # -- doing it ----------------------------------------------------------------------
    def _compact(
        self,
        session: str,
        view: Projection,
        policy: Policy,
        span: tuple[int, int],
        reason: Reason,
        *,
        time: int | None,
        cost: CostEstimate | None,
        summarizer: Summarizer | None = None,
        segmented: bool = True,
    ) -> Outcome:
        with otel_span(
            "turnlog.compaction",
            {
                "gen_ai.operation.name": "compaction",
                "turnlog.session": session,
                "turnlog.compaction.reason": reason,
                "turnlog.compaction.first_seq": span[0],
                "turnlog.compaction.last_seq": span[1],
            },
        ) as current:
            outcome = self._compact_traced(
                session,
                view,
                policy,
                span,
                reason,
                time=time,
                cost=cost,
                summarizer=summarizer,
                segmented=segmented,
            )
            otel_attributes(
                current,
                {
                    "turnlog.compaction.status": outcome.status,
                    "turnlog.compaction.tokens_covered": outcome.covered_tokens,
                    "turnlog.compaction.parts": outcome.parts,
                },
            )
            return outcome

    def _compact_traced(
        self,
        session: str,
        view: Projection,
        policy: Policy,
        span: tuple[int, int],
        reason: Reason,
        *,
        time: int | None,
        cost: CostEstimate | None,
        summarizer: Summarizer | None,
        segmented: bool,
    ) -> Outcome:
        summarizer = summarizer or self.summarizer or ExtractiveSummarizer(view.counter)
        window = window_of(summarizer)
        segments = self.segments(view, policy, span) if segmented else [span]
        seqs: list[int] = []
        covered_total = parts_total = 0
        for first, last in segments:
            head = self.log.head(session)
            assert head is not None
            messages, covered = self._full_span(view, first, last)
            request = SummaryRequest(
                session=session,
                first_pos=first,
                last_pos=last,
                level=0,
                max_tokens=policy.summary_max_tokens,
                messages=tuple(messages),
                reason=reason,
            )
            covered_total += covered
            parts: tuple[int, ...] = ()
            if window is not None:
                budget = _source_budget(request, window, view.counter)
                if view.counter.count(request.source_text()) > budget:
                    made, merge, error = self._summarize_parts(
                        session,
                        view.counter,
                        policy,
                        request,
                        summarizer,
                        budget,
                        reason,
                        time=time,
                    )
                    seqs += made
                    parts_total += len(made) - (1 if error else 0)
                    if error or merge is None:
                        return Outcome(
                            status="failed",
                            reason=reason,
                            seqs=tuple(seqs),
                            detail=error,
                            cost=cost,
                            covered_tokens=covered_total,
                            parts=parts_total,
                        )
                    request, parts = merge
            done = self._commit(
                session,
                view,
                policy,
                request,
                summarizer,
                reason,
                time=time,
                cost=cost,
                covered=covered,
                parts=parts,
                since=head.seq,
            )
            seqs.append(done[0])
            if not done[1]:
                return Outcome(
                    status="failed",
                    reason=reason,
                    seqs=tuple(seqs),
                    detail=done[2],
                    cost=cost,
                    covered_tokens=covered_total,
                    parts=parts_total,
                )
            view = self.packer.projection(session, view.counter)
        seqs += self._rollups(session, policy, summarizer, time=time)
        view = self.packer.projection(session, view.counter)
        try:
            after = self._pack(view, policy)
            next_tokens, fits = after.tokens, True
        except BudgetExceededError as exc:
            next_tokens, fits = exc.needed, False
        detail = f"{plural(len(segments), 'segment')} summarized"
        if parts_total:
            detail += f" ({parts_total} part summaries: larger than the summarizer's window)"
        return Outcome(
            status="committed",
            reason=reason,
            seqs=tuple(seqs),
            detail=detail,
            cost=cost,
            next_tokens=next_tokens,
            fits=fits,
            covered_tokens=covered_total,
            parts=parts_total,
        )

    def _full_span(self, view: Projection, first: int, last: int) -> tuple[list[Message], int]:
        """The span's items as verbatim neutral messages with the whole text of every
        blob-stored output (exit codes made visible), and the tokens of that text."""
        counter = view.counter
        out: list[Message] = []
        covered = 0
        for item in view.items:
            if item.unit < 0 or not first <= item.pos <= last:
                continue
            body = item.event.body
            verbatim = message(item, None)
            covered += item.tokens
            blob = body.blob if isinstance(body, (ToolResultAdded, NotificationAdded)) else None
            if blob is not None:
                try:
                    whole = self.log.blob(blob).decode("utf-8", "surrogatepass")
                except BlobNotFoundError:  # erased with its content: the preview is all
                    whole = None
                if whole is not None:
                    text = (
                        notification_text(body.source, whole)
                        if isinstance(body, NotificationAdded)
                        else whole
                    )
                    full = message(item, (TextPart(text=text),))
                    covered += counter.count(full.text) - counter.count(verbatim.text)
                    verbatim = full
            if isinstance(body, ToolResultAdded) and body.exit_code is not None:
                verbatim = msgspec.structs.replace(
                    verbatim,
                    parts=(*verbatim.parts, TextPart(text=f"\n[exit code {body.exit_code}]")),
                )
            out.append(verbatim)
        return out, covered

    def _summarize(
        self, summarizer: Summarizer, request: SummaryRequest, policy: Policy, counter: TokenCounter
    ) -> tuple[Summary | None, str]:
        """One summarizer call, validated: (summary, "") or (None, what went wrong)."""
        with otel_span(
            "turnlog.summarize",
            {
                "gen_ai.operation.name": "summarize",
                "turnlog.session": request.session,
                "turnlog.summary.summarizer": summarizer.id,
                "turnlog.summary.level": request.level,
                "turnlog.summary.part": request.part,
                "turnlog.summary.parts": request.parts,
            },
        ) as current:
            try:
                summary = _call_with_timeout(lambda: summarizer.summarize(request), self.timeout)
            except TimeoutError:
                return None, f"summarizer {summarizer.id} timed out after {self.timeout} s"
            except Exception as exc:  # any summarizer failure is recorded
                return None, f"summarizer {summarizer.id} failed: {type(exc).__name__}: {exc}"
            tokens = counter.count(summary.text)
            otel_attributes(
                current,
                {"gen_ai.request.model": summary.model, "gen_ai.usage.output_tokens": tokens},
            )
        if not summary.text.strip():
            return None, "summary is empty"
        if tokens > policy.summary_max_tokens:
            return None, (
                f"summary is {tokens} tokens, over summary_max_tokens {policy.summary_max_tokens}"
            )
        return summary, ""

    def _summarize_parts(
        self,
        session: str,
        counter: TokenCounter,
        policy: Policy,
        request: SummaryRequest,
        summarizer: Summarizer,
        budget: int,
        reason: Reason,
        *,
        time: int | None,
    ) -> tuple[list[int], tuple[SummaryRequest, tuple[int, ...]] | None, str]:
        """Map and reduce a segment too large for the summarizer: append each part's
        summary, merge them level by level while a merge's input is still too large.

        Returns:
            The seqs appended (parts, and a ``CompactionFailed`` last on failure), then
            the final merge request with the seqs of the parts it merges (None on
            failure), then the failure ("" when none).
        """
        appended: list[int] = []

        def fail(
            error: str, first: int, last: int
        ) -> tuple[list[int], tuple[SummaryRequest, tuple[int, ...]] | None, str]:
            failed = CompactionFailed(
                error=error[:4000],
                reason=reason,
                summarizer=summarizer.id,
                first_seq=first,
                last_seq=last,
            )
            appended.append(self.log.append(session, Draft(body=failed, time=time)).last_seq)
            return appended, None, error

        try:
            pieces = split_transcript(request.messages, budget, counter)
        except ValueError as exc:
            return fail(
                f"summarizer {summarizer.id}'s window is too small for this span: {exc}",
                request.first_pos,
                request.last_pos,
            )
        # (seq, first_pos, first_offset, last_pos, last_offset, summary) per part
        level: list[tuple[int, int, int, int, int, str]] = []
        for number, chunk in enumerate(pieces, start=1):
            first, last = chunk[0].message.source[0], chunk[-1].message.source[0]
            sub = SummaryRequest(
                session=session,
                first_pos=first,
                last_pos=last,
                level=0,
                max_tokens=request.max_tokens,
                messages=tuple(p.message for p in chunk),
                reason=reason,
                part=number,
                parts=len(pieces),
            )
            summary, error = self._summarize(summarizer, sub, policy, counter)
            if summary is None:
                return fail(f"part {number} of {len(pieces)}: {error}", first, last)
            body = CompactionPartSummarized(
                first_seq=first,
                last_seq=last,
                first_offset=chunk[0].start,
                last_offset=chunk[-1].end,
                part=number,
                parts=len(pieces),
                summary=summary.text,
                summarizer=summary.summarizer,
                model=summary.model,
                prompt_hash=summary.prompt_hash or sub.prompt_hash(),
                tokens_before=counter.count(sub.source_text()),
                tokens_after=counter.count(summary.text),
            )
            seq = self.log.append(session, Draft(body=body, time=time)).last_seq
            appended.append(seq)
            level.append((seq, first, chunk[0].start, last, chunk[-1].end, summary.text))
        depth = 0
        while True:
            merge = msgspec.structs.replace(
                request, messages=(), children=tuple(p[5] for p in level)
            )
            if len(level) == 1 or counter.count(merge.source_text()) <= budget:
                return appended, (merge, tuple(p[0] for p in level)), ""
            groups = _groups([p[5] for p in level], budget, request, counter)
            if groups is None:
                return fail(
                    f"summarizer {summarizer.id}'s window cannot merge two part "
                    f"summaries of up to {request.max_tokens} tokens (summary_max_"
                    "tokens); give it a larger window or lower summary_max_tokens",
                    request.first_pos,
                    request.last_pos,
                )
            depth += 1
            merged: list[tuple[int, int, int, int, int, str]] = []
            for number, (lo, hi) in enumerate(groups, start=1):
                members = level[lo:hi]
                if len(members) == 1:
                    merged.append(members[0])
                    continue
                first, last = members[0][1], members[-1][3]
                sub = SummaryRequest(
                    session=session,
                    first_pos=first,
                    last_pos=last,
                    level=0,
                    max_tokens=request.max_tokens,
                    children=tuple(m[5] for m in members),
                    reason=reason,
                    part=number,
                    parts=len(groups),
                )
                summary, error = self._summarize(summarizer, sub, policy, counter)
                if summary is None:
                    return fail(
                        f"merge {number} of {len(groups)} (level {depth}): {error}", first, last
                    )
                body = CompactionPartSummarized(
                    first_seq=first,
                    last_seq=last,
                    first_offset=members[0][2],
                    last_offset=members[-1][4],
                    part=number,
                    parts=len(groups),
                    level=depth,
                    children=tuple(m[0] for m in members),
                    summary=summary.text,
                    summarizer=summary.summarizer,
                    model=summary.model,
                    prompt_hash=summary.prompt_hash or sub.prompt_hash(),
                    tokens_before=sum(counter.count(m[5]) for m in members),
                    tokens_after=counter.count(summary.text),
                )
                seq = self.log.append(session, Draft(body=body, time=time)).last_seq
                appended.append(seq)
                merged.append((seq, first, members[0][2], last, members[-1][4], summary.text))
            level = merged

    def segments(
        self,
        view: Projection,
        policy: Policy,
        span: tuple[int, int],
    ) -> list[tuple[int, int]]:
        """Cut a span into level-0 segments at user-turn boundaries and topic shifts."""
        target = max(1, min(policy.segment_target_tokens, policy.usable // 2))
        minimum = min(policy.segment_min_tokens, target // 3)
        turns: list[tuple[int, int, int, set[str], int]] = []  # first, last, tokens, words, msgs
        for unit in view.units:
            first = _first_pos(view, unit)
            if first < span[0] or first > span[1]:
                continue
            last = max(view.items[i].pos for i in unit.items)
            tokens = sum(view.items[i].tokens for i in unit.items)
            lead = view.items[unit.items[0]]
            if not turns or lead.kind == "user":
                words = (
                    set(_WORD.findall(_item_text(lead).lower())) if lead.kind == "user" else set()
                )
                turns.append((first, last, tokens, words, len(unit.items)))
            else:
                f, end, t, w, m = turns[-1]
                turns[-1] = (f, max(end, last), t + tokens, w, m + len(unit.items))
        unsafe = _straddled(view, [t[0] for t in turns])
        segments: list[tuple[int, int]] = []
        start = -1
        size = msgs = 0
        end = -1
        previous: set[str] = set()
        for first, last, tokens, words, count in turns:
            shift = bool(previous) and bool(words) and _jaccard(previous, words) < 0.1
            if (
                start >= 0
                and first not in unsafe
                and (
                    (size >= target)
                    or (shift and size >= minimum and msgs >= policy.segment_min_messages)
                )
            ):
                segments.append((start, first - 1))
                start = -1
                size = msgs = 0
            if start < 0:
                start = first
            size += tokens
            msgs += count
            previous = words or previous
            end = max(end, last)
        if start >= 0:
            if segments and size < minimum:
                segments[-1] = (segments[-1][0], end)
            else:
                segments.append((start, end))
        return [(max(a, span[0]), min(b, span[1])) for a, b in segments if a <= b]

    def _commit(
        self,
        session: str,
        view: Projection,
        policy: Policy,
        request: SummaryRequest,
        summarizer: Summarizer,
        reason: Reason,
        *,
        time: int | None,
        cost: CostEstimate | None,
        level: int = 0,
        children: tuple[int, ...] = (),
        covered: int | None = None,
        parts: tuple[int, ...] = (),
        since: int | None = None,
    ) -> tuple[int, bool, str]:
        """Summarize and append the compaction (or the failure). Returns (seq, ok, detail).

        ``covered`` is the tokens the summary covers (the span's items otherwise),
        ``parts`` the part summaries ``request`` merges, ``since`` the head seq the
        span was read at (a rewind after it voids the compaction)."""
        head = self.log.head(session)
        assert head is not None
        summary, error = self._summarize(summarizer, request, policy, view.counter)
        if error or summary is None:
            failed = CompactionFailed(
                error=error[:4000],
                reason=reason,
                summarizer=summarizer.id,
                first_seq=request.first_pos,
                last_seq=request.last_pos,
            )
            done = self.log.append(session, Draft(body=failed, time=time))
            return done.last_seq, False, error
        hashes = [view.events[p].hash for p in range(request.first_pos, request.last_pos + 1)]
        before = (
            covered
            if covered is not None
            else sum(
                it.tokens
                for it in view.items
                if request.first_pos <= it.pos <= request.last_pos and it.unit >= 0
            )
        )
        body = CompactionCommitted(
            first_seq=request.first_pos,
            last_seq=request.last_pos,
            covered_digest=covered_digest(hashes),
            summary=summary.text,
            level=level,
            children=children,
            summarizer=summary.summarizer,
            model=summary.model,
            prompt_hash=summary.prompt_hash or request.prompt_hash(),
            reason=reason,
            tokens_before=before
            if level == 0
            else sum(view.counter.count(c) for c in request.children),
            tokens_after=view.counter.count(summary.text),
            costs=cost.describe() if cost is not None else "",
            parts=parts,
        )
        summarized = head.seq if since is None else min(since, head.seq)

        def decide(now: Head | None) -> Draft:
            # What others appended since the span was chosen (read after ``now``, so
            # it covers up to ``now`` at least) keeps the compaction valid unless it
            # rewinds the session: the summary may cover events no longer in view.
            if (
                now is not None
                and now.seq > summarized
                and any(
                    isinstance(e.body, SessionRewound)
                    for e in self.log.read(session, summarized + 1)
                )
            ):
                raise CompactionError(
                    "the session was rewound while summarizing; the compaction was not committed"
                )
            return Draft(body=body, time=time)

        try:
            landed = self.log.update(session, decide)
        except AppendConflictError as exc:
            raise CompactionError(
                f"session {session!r} kept moving; compaction not committed ({exc})"
            ) from exc
        assert landed is not None
        return landed.last_seq, True, ""

    def _rollups(
        self, session: str, policy: Policy, summarizer: Summarizer, *, time: int | None
    ) -> list[int]:
        seqs: list[int] = []
        fanout = policy.rollup_fanout
        counter = self.packer.counter_for(policy)
        for level in range(15):
            while True:
                view = self.packer.projection(session, counter)
                roots = _roots(view, level)
                if len(roots) < fanout:
                    break
                group = roots[:fanout]
                bodies = [_compaction(view, p) for p in group]
                request = SummaryRequest(
                    session=session,
                    first_pos=min(b.first_seq for b in bodies),
                    last_pos=max(b.last_seq for b in bodies),
                    level=level + 1,
                    max_tokens=policy.summary_max_tokens,
                    children=tuple(b.summary for b in bodies),
                    reason="rollup",
                )
                seq, ok, _ = self._commit(
                    session,
                    view,
                    policy,
                    request,
                    summarizer,
                    "rollup",
                    time=time,
                    cost=None,
                    level=level + 1,
                    children=tuple(group),
                )
                seqs.append(seq)
                if not ok:
                    return seqs
            if not _roots(self.packer.projection(session, counter), level + 1):
                break
        return seqs


# -- helpers ---------------------------------------------------------------------------
def _call_with_timeout(fn: Callable[[], Summary], timeout: float) -> Summary:
    result: list[Summary] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised in the caller
            error.append(exc)

    worker = threading.Thread(target=run, name="turnlog-summarizer", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError
    if error:
        raise error[0]
    return result[0]


def _stop_v1(view: Projection, policy: Policy) -> int:
    """The first unit kept verbatim (rules 1): the kept turns, the current turn, a
    call awaiting its result; moved back to keep ``keep_recent_messages`` messages and
    snapped to a turn start."""
    units = view.units
    keep_turn = len(view.turn_starts) - policy.keep_recent_turns + 1
    tail_unit = view.turn_starts[-1] if view.turn_starts else len(units) - 1
    stop = len(units)
    for unit in units:
        if unit.turn >= keep_turn or unit.index >= tail_unit or unit.open_calls:
            stop = unit.index
            break
    kept_messages = sum(len(u.items) for u in units[stop:])
    while stop > 0 and kept_messages < policy.keep_recent_messages:
        stop -= 1
        kept_messages += len(units[stop].items)
    while (
        0 < stop < len(units) and units[stop].turn == units[stop - 1].turn and units[stop].turn > 0
    ):
        stop -= 1
    return stop


def _stop_v2(view: Projection, policy: Policy, *, keep_turns: bool = True) -> int:
    """The first unit kept verbatim (rules 2): the kept turns (unless not ``keep_turns``:
    the end of the current turn's older steps), except that the current turn's older
    steps may go; the protected steps, a call awaiting its result; moved back to keep
    ``keep_recent_messages`` messages and snapped to a step start."""
    units = view.units
    turns = view.turn_starts
    protection = Protection(view, policy)
    keep_turn = len(turns) - policy.keep_recent_turns + 1
    current = len(turns)
    stop = len(units)
    for unit in units:
        if (
            unit.index >= protection.tail_unit
            or unit.open_calls
            or (keep_turns and keep_turn <= unit.turn < current)
        ):
            stop = unit.index
            break
    kept_messages = sum(len(u.items) for u in units[stop:])
    while stop > 0 and kept_messages < policy.keep_recent_messages:
        stop -= 1
        kept_messages += len(units[stop].items)
    starts = set(turns) | set(view.assistant_units)
    while 0 < stop < len(units) and stop not in starts:
        stop -= 1
    return stop


def _no_straddle(view: Projection, first: int, last: int, stop: int) -> int:
    """``last`` moved back until no kept unit lies in the span and no unit straddles
    its end (a result that arrived after the next turn started)."""
    units = view.units
    changed = True
    while changed and last >= first:
        changed = False
        for unit in units:
            positions = [view.items[i].pos for i in unit.items]
            inside = [first <= p <= last for p in positions]
            kept = unit.index >= stop
            if any(inside) and (kept or not all(inside)) and min(positions) >= first:
                last = min(positions) - 1
                changed = True
    return last


def _nothing(view: Projection, policy: Policy, stop: int, covered: int) -> str:
    """Why no span can be compacted, and what would allow one."""
    if stop == 0 or not view.units:
        if policy.rules < 2 and len(view.turn_starts) <= 1:
            return (
                "the session is one turn, and under packing rules 1 the current turn is "
                "never compacted; packing rules 2 compact its older steps (Policy "
                "rules=2)"
            )
        return (
            f"every message is within what must stay verbatim: the last "
            f"{policy.keep_recent_turns} turns (keep_recent_turns), the last "
            f"{policy.keep_recent_messages} messages (keep_recent_messages)"
            + (f" and the last {policy.tail_steps} steps (tail_steps)" if policy.rules >= 2 else "")
            + "; lower them to compact more"
        )
    return (
        f"everything before what must stay verbatim is summarized already (up to "
        f"position {covered}); more history must accumulate first"
    )


def _straddled(view: Projection, cuts: list[int]) -> set[int]:
    """The cut positions that would separate items of one unit (a late result)."""
    cuts = sorted(cuts)
    unsafe: set[int] = set()
    for unit in view.units:
        if len(unit.items) < 2:
            continue
        positions = [view.items[i].pos for i in unit.items]
        low, high = min(positions), max(positions)
        if high - low <= len(unit.items) - 1:
            continue  # contiguous: no turn can start inside it
        unsafe.update(c for c in cuts if low < c <= high)
    return unsafe


def _first_pos(view: Projection, unit: Unit) -> int:
    return view.items[unit.items[0]].pos


def _item_text(item: Item) -> str:
    return message(item, None).text


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / max(1, len(a | b))


def _active_compactions(view: Projection) -> list[CompactionCommitted]:
    return [_compaction(view, p) for p in view.compactions if p not in view.rewound]


def _covered_until(view: Projection) -> int:
    return max((b.last_seq for b in _active_compactions(view)), default=-1)


def _compaction(view: Projection, pos: int) -> CompactionCommitted:
    body = view.events[pos].body
    assert isinstance(body, CompactionCommitted)
    return body


def _roots(view: Projection, level: int) -> list[int]:
    """Active summaries of ``level`` that no active rollup lists as a child."""
    active = [p for p in view.compactions if p not in view.rewound]
    children = {c for p in active for c in _compaction(view, p).children}
    return [p for p in active if p not in children and _compaction(view, p).level == level]


def _last_compaction_pos(view: Projection) -> int:
    active = [p for p in view.compactions if p not in view.rewound]
    return active[-1] if active else -1


def _last_compaction_turn(view: Projection) -> int:
    pos = _last_compaction_pos(view)
    if pos < 0:
        return 0
    return sum(1 for start in view.turn_starts if view.items[view.units[start].items[0]].pos < pos)


def _tool_calls_at(view: Projection, pos: int) -> int:
    if pos < 0:
        return 0
    total = 0
    for unit in view.units:
        if view.items[unit.items[0]].pos > pos:
            break
        total += len(unit.calls)
    return total


def _source_budget(request: SummaryRequest, window: int, counter: TokenCounter) -> int:
    """Tokens of transcript one request may carry: the summarizer's window (a share of
    it, for tokenizers that count differently) less the answer and the instructions
    of a part request."""
    sample = msgspec.structs.replace(request, part=999_999, parts=999_999)
    return int(window * WINDOW_SHARE) - request.max_tokens - counter.count(sample.instructions())


def _groups(
    summaries: list[str], budget: int, request: SummaryRequest, counter: TokenCounter
) -> list[tuple[int, int]] | None:
    """Consecutive runs ``[lo, hi)`` of summaries whose merge input fits ``budget``,
    greedily from the first; None when two adjacent ones do not fit together."""
    groups: list[tuple[int, int]] = []
    lo = 0
    while lo < len(summaries):
        hi = lo + 1
        while (
            hi < len(summaries)
            and counter.count(
                msgspec.structs.replace(
                    request, messages=(), children=tuple(summaries[lo : hi + 1])
                ).source_text()
            )
            <= budget
        ):
            hi += 1
        if hi - lo < 2 and hi < len(summaries):
            return None
        groups.append((lo, hi))
        lo = hi
    return groups

"""`pack`: (projection, policy, token counter) -> prompt + explanation, deterministically.

Theory of operation
-------------------
`pack` is a pure function. It reads no clock, no environment, no randomness
and does no I/O; the same projection state, policy and counter give the same
bytes. It works on *units* (see ``_projection``): a unit is dropped or kept
whole, so a tool call is never separated from its results and no result is
left without its call. Content inside a kept unit may be replaced (truncated,
deduplicated, pruned), never reordered or removed.

Stages, in order (each switchable by policy, each reported): the budget plan
(``_budget``), truncation (``_truncate``), summaries (``_summaries``), dedup
(``_dedup``), pruning (``_prune``), trimming (``_trim``), then the prompt and its
cache breakpoints (``_assemble``). Protected, always: the mandatory tail, pinned
events and units with a call still waiting for its result are never
deduplicated, pruned, summarized or trimmed (``_ledger.Protection``). If they
cannot fit, `BudgetExceededError` says by how much.

Two engines run the stages (see ``_ledger``): the built-in pipeline runs on the
incremental engine, any other pipeline on the reference engine (`PackState`),
which custom stages change directly. ``engine="reference"`` runs the built-in
pipeline on the reference engine too: the two give the same bytes, reports and
decisions. Every event of the lineage gets exactly one `Decision`, built when
``Packed.decisions`` is first read, from what the pack decided.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from .._errors import InvalidArgumentError
from .._policy import Policy
from .._projection import Projection
from .._prompt import Message, Prompt
from .._validation import check_type, invalid, refuse_unknown_options
from ._assemble import assemble, breakpoints_report, message, unit_adder
from ._budget import opening_reports, over_budget, recovery_policy, thresholds
from ._clip import Clip
from ._dedup import Dedup
from ._explain import Facts, decisions
from ._index import PackIndex
from ._indexed import IndexedLedger
from ._model import Budget, Explanation, Packed, StageReport
from ._prune import Prune
from ._state import PackState
from ._summaries import Summaries
from ._trim import Trim
from ._truncate import Truncate

__all__ = ["DEFAULT_STAGES", "Stage", "pack"]

#: A stage: reads and changes the `PackState`, returns a report (or None).
Stage = Callable[[PackState], "StageReport | None"]

#: The built-in pipeline after the budget plan, in order. Insert custom stages into
#: a copy of it (a custom pipeline runs on the reference engine).
DEFAULT_STAGES: tuple[tuple[str, Stage], ...] = (
    ("truncate", Truncate()),
    ("clip", Clip()),
    ("summaries", Summaries()),
    ("dedup", Dedup()),
    ("prune", Prune()),
    ("trim", Trim()),
)

Engine = Literal["incremental", "reference"]


@refuse_unknown_options(
    "turnlog.pack()",
    usage="turnlog.pack(view, policy); to pack a session of a log, "
    "turnlog.Packer(log).pack(session, policy=...)",
)
def pack(
    view: Projection,
    policy: Policy,
    *,
    stages: Sequence[tuple[str, Stage]] | None = None,
    explain: bool = True,
    index: PackIndex | None = None,
    engine: Engine | None = None,
) -> Packed:
    """Pack the projection's history into a prompt under ``policy``.

    Parameters:
        view: the projection (its counter measures every token).
        policy: the packing policy; with ``rules`` unset it packs as
            ``policy.resolved()`` (the newest rules). To pack a policy read
            from the log exactly as recorded, replay its request
            (`Replayer.repack`).
        stages: a custom pipeline (runs on the reference engine); the built-in one
            (`DEFAULT_STAGES`, on the incremental engine) when None.
        explain: keep the per-event decisions (built on first access of
            ``Packed.decisions``); skip them when only the prompt is needed.
        index: the projection's incremental index, kept by its owner between
            packs (a `Packer` passes its own); a fresh one when None.
        engine: ``"reference"`` runs the built-in pipeline on the reference engine
            (same result, stage by stage); None chooses as described above.

    Raises:
        BudgetExceededError: the mandatory tail (and pinned events) cannot fit.
        InvalidArgumentError: the incremental engine asked for a custom pipeline.
        PackError: a stage produced a structurally invalid prompt.
    """
    check_type(
        view,
        Projection,
        "view",
        what="a Projection",
        hint="to pack a session of a log, call turnlog.Packer(log).pack(session, policy=...)",
    )
    check_type(policy, Policy, "policy", what="a turnlog.Policy")
    check_stages(stages)
    return pack_stored(
        view, policy.resolved(), stages=stages, explain=explain, index=index, engine=engine
    )


def check_stages(stages: object) -> None:
    """``stages`` is None or a pipeline: a sequence of ``(name, stage)`` pairs, each a
    str and a callable; else an `InvalidArgumentError` (it failed in the first pack
    with "'int' object is not iterable" or "too many values to unpack")."""
    if stages is None:
        return
    expected = "None or a sequence of (name, stage) pairs, a str and a callable"
    hint = "start from a copy of turnlog.packing.DEFAULT_STAGES (docs/packing.md)"
    if isinstance(stages, (str, bytes, Mapping)) or not isinstance(stages, Sequence):
        invalid("stages", expected, stages, hint=hint, with_type=True)
    for index, item in enumerate(stages):
        if not (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and isinstance(item[0], str)
            and callable(item[1])
        ):
            invalid(
                f"stages[{index}]", "a (name, stage) pair, a str and a callable", item, hint=hint
            )


def pack_stored(
    view: Projection,
    policy: Policy,
    *,
    stages: Sequence[tuple[str, Stage]] | None = None,
    explain: bool = True,
    index: PackIndex | None = None,
    engine: Engine | None = None,
) -> Packed:
    """`pack` with the policy as given: ``rules`` unset means rules 1, as in a policy
    read back from the log (a 0.1.0 record). The packer uses it for policies in force
    and for replay; callers' policies go through `pack`, which resolves them."""
    if engine not in (None, "incremental", "reference"):
        raise InvalidArgumentError(f"engine must be 'incremental' or 'reference', found {engine!r}")
    if engine == "incremental" and stages is not None:
        raise InvalidArgumentError(
            "the incremental engine runs the built-in pipeline only; "
            "pass stages=None or engine='reference'"
        )
    policy_hash = policy.hash
    recovering = view.overflow_pending
    if recovering:
        policy = recovery_policy(policy)
    index = index if index is not None else PackIndex()
    if stages is None and engine != "reference":
        return _incremental(view, policy, policy_hash, recovering, explain, index)
    return _reference(
        view,
        policy,
        policy_hash,
        recovering,
        explain,
        index,
        DEFAULT_STAGES if stages is None else tuple(stages),
    )


def _incremental(
    view: Projection,
    policy: Policy,
    policy_hash: str,
    recovering: bool,
    explain: bool,
    index: PackIndex,
) -> Packed:
    ledger = IndexedLedger(view, policy, view.counter, index)
    before = ledger.total
    reports = opening_reports(view, policy, ledger.budget, before, recovering)
    pre_trim = before
    for name, stage in DEFAULT_STAGES:
        if name == "trim":
            pre_trim = ledger.total
        report = stage(ledger)  # type: ignore[arg-type]
        ledger.settle()
        if report is not None:
            reports.append(report)
    if ledger.total > policy.usable:
        raise over_budget(ledger.total, policy, ledger.budget)
    outcome = ledger.outcome()
    plan = ledger.plan
    summary = (plan.text, plan.tokens) if plan is not None and plan.shown else ("", 0)
    prompt, message_tokens, section_tokens = assemble(
        view,
        policy,
        ledger.counter,
        ledger.kept_units(),
        outcome.adder(),
        summary,
        ledger.protection.turn_unit,
        ledger.marker,
    )
    outcome.trim_cache()
    reports.append(breakpoints_report(prompt, policy.rules, view))
    explanation = None
    if explain:
        outcome.freeze()
        facts = outcome.facts
        assert facts is not None
        shown = ledger.summary_why
        wire = policy.rules_version >= 2
        explanation = Explanation(lambda: decisions(facts, outcome.decision, shown, wire_ids=wire))
    return _packed(
        view,
        policy,
        policy_hash,
        recovering,
        prompt,
        message_tokens,
        section_tokens,
        ledger.total,
        before,
        pre_trim,
        ledger.budget,
        reports,
        explanation,
    )


def _reference(
    view: Projection,
    policy: Policy,
    policy_hash: str,
    recovering: bool,
    explain: bool,
    index: PackIndex,
    stages: Sequence[tuple[str, Stage]],
) -> Packed:
    state = PackState(view, policy, view.counter, index)
    before = state.total
    state.reports.extend(opening_reports(view, policy, state.budget, before, recovering))
    pre_trim: int | None = None
    for name, stage in stages:
        if name == "trim":
            pre_trim = state.total
        report = stage(state)
        state.settle()
        if report is not None:
            state.reports.append(report)
    # `PackState.summarize` marks single items: a custom stage that covered part of a
    # tool exchange gets the rest of it covered too, never a split pair.
    state.close_units()
    state.settle()
    if state.total > policy.usable:
        raise over_budget(state.total, policy, state.budget)
    items = view.items

    def message_of(i: int) -> tuple[Message, int] | None:
        return state.message(i, lambda j, parts: message(items[j], parts))

    prompt, message_tokens, section_tokens = assemble(
        view,
        policy,
        state.counter,
        state.kept_units(),
        unit_adder(message_of),
        (state.summary_text, state.summary_tokens_used),
        state.protection.turn_unit,
        state.marker,
    )
    state.reports.append(breakpoints_report(prompt, policy.rules, view))
    explanation = None
    if explain:
        value = decisions(
            Facts(view), state.decision, state.summary_shown, wire_ids=policy.rules_version >= 2
        )
        explanation = Explanation(lambda: value)
    return _packed(
        view,
        policy,
        policy_hash,
        recovering,
        prompt,
        message_tokens,
        section_tokens,
        state.total,
        before,
        state.total if pre_trim is None else pre_trim,
        state.budget,
        state.reports,
        explanation,
    )


def _packed(
    view: Projection,
    policy: Policy,
    policy_hash: str,
    recovering: bool,
    prompt: Prompt,
    message_tokens: tuple[int, ...],
    section_tokens: tuple[int, ...],
    total: int,
    before: int,
    pre_trim: int,
    budget: Budget,
    reports: list[StageReport],
    explanation: Explanation | None,
) -> Packed:
    # Compaction is due when the history, before trimming, reaches the compact level.
    return Packed(
        prompt=prompt,
        tokens=total,
        message_tokens=message_tokens,
        section_tokens=section_tokens,
        budget=budget,
        pressure=round(total / max(policy.usable, 1), 6),
        pressure_before=round(before / max(policy.usable, 1), 6),
        thresholds=thresholds(budget, policy, before),
        compaction_due=pre_trim >= budget.compact,
        stages=tuple(reports),
        tokenizer=view.counter.id,
        policy_hash=policy_hash,
        head=view.head,
        recovery=recovering,
        rules=policy.rules_version,
        _explanation=explanation,
    )

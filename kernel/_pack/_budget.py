"""Stage 1, the budget plan: what the prompt may hold, and the levels that gate the stages."""

from __future__ import annotations

import msgspec

from .._errors import BudgetExceededError
from .._policy import Policy
from .._projection import Projection
from .._tokens import MESSAGE_OVERHEAD, REPLY_OVERHEAD, TokenCounter
from ._model import Budget, StageReport

__all__: list[str] = []

_MISSING_RESULT = "[no result was recorded for this call]"
_PENDING_RESULT = "[no result yet: the call has not returned]"


def placeholder_result(unit: int, units: int, rules: int = 2) -> str:
    """The text answering a call with no result: still running when its unit is the
    last one, else never returned. Rules 3 says the second in both cases (true of both
    when the prompt is packed), so the message does not change when the next request
    finds the call still without a result and the prefix is kept."""
    if rules >= 3:
        return _MISSING_RESULT
    return _PENDING_RESULT if unit == units - 1 else _MISSING_RESULT


def system_tokens(view: Projection) -> int:
    """Tokens of the system sections, framing included."""
    return sum(view.section_tokens.values()) + (MESSAGE_OVERHEAD if view.sections else 0)


def synthetic_tokens(view: Projection, counter: TokenCounter, rules: int = 2) -> int:
    """Tokens of the placeholder results that answer every call without one."""
    return sum(placeholder_tokens(view, counter, u, rules) for u in sorted(view.open_units))


def placeholder_tokens(view: Projection, counter: TokenCounter, unit: int, rules: int = 2) -> int:
    """Tokens of the placeholder results answering a unit's calls without a result."""
    units = view.units
    text = placeholder_result(unit, len(units), rules)
    return (MESSAGE_OVERHEAD + 1 + counter.count(text)) * len(units[unit].open_calls)


def plan(policy: Policy, system: int, tools: int) -> Budget:
    """The budget plan: usable = window - output reserve - safety margin; history
    budget = usable - system sections - tool schemas - reply framing; the levels."""
    return Budget(
        window=policy.context_window,
        output_reserve=policy.output_reserve,
        safety_margin=policy.safety_margin,
        usable=policy.usable,
        system=system,
        tools=tools,
        summary=0,
        history=policy.usable - system - tools - REPLY_OVERHEAD,
        warning=policy.level("warning"),
        compact=policy.level("compact"),
        blocking=policy.level("blocking"),
    )


def thresholds(budget: Budget, policy: Policy, before: int) -> tuple[str, ...]:
    """The thresholds the prompt crossed before any reduction."""
    return tuple(
        name
        for name, level in (
            ("warning", budget.warning),
            ("compact", budget.compact),
            ("blocking", budget.blocking),
            ("overflow", policy.usable),
        )
        if before > level
    )


def opening_reports(
    view: Projection, policy: Policy, budget: Budget, before: int, recovering: bool
) -> list[StageReport]:
    """The budget stage's report (and the recovery notice of a recovery pack)."""
    reports = [
        StageReport(
            name="budget",
            fired=True,
            detail=(
                f"usable {policy.usable} = window {policy.context_window} - reserve "
                f"{policy.output_reserve} - margin {policy.safety_margin}; system "
                f"{budget.system}, tools {budget.tools}; history budget "
                f"{budget.history}; pressure {before / max(policy.usable, 1):.3f}"
            ),
            tokens_before=before,
            tokens_after=before,
        )
    ]
    if recovering:
        reports.append(
            StageReport(
                name="recovery",
                fired=True,
                detail=(
                    f"the latest request ended in a context-overflow error (position "
                    f"{view.last_overflow}): truncation to {policy.truncate_lines} lines / "
                    f"{policy.truncate_bytes} bytes, dedup and pruning at any pressure, trim to "
                    f"{policy.level('blocking')} tokens"
                ),
                tokens_before=before,
                tokens_after=before,
            )
        )
    return reports


def recovery_policy(policy: Policy) -> Policy:
    """The policy of a recovery pack after a context-overflow error (seed 004's
    emergency path, without a model call): truncation limits quartered, dedup and
    pruning at any pressure with no minimum savings, trimming down to 3/4 of the
    usable budget, and (rules 2) committed summaries shown at any pressure."""
    return msgspec.structs.replace(
        policy,
        truncate=True,
        truncate_lines=max(2, policy.truncate_lines // 4),
        truncate_bytes=max(64, policy.truncate_bytes // 4),
        dedup=True,
        prune=True,
        prune_min_savings=0,
        prune_protect_tokens=policy.prune_protect_tokens // 4,
        warning_buffer=None,
        warning_ratio=0.0,
        blocking_buffer=None,
        blocking_ratio=0.75,
        trim=True,
        summary_gate=0.0,
    )


def over_budget(
    needed: int,
    policy: Policy,
    budget: Budget | None = None,
) -> BudgetExceededError:
    """The error for a prompt whose protected part cannot fit.

    Under rules 2 that part is the *floor*: the system sections, the tool schemas,
    the latest user message (clipped), pinned events, calls awaiting a result (with
    their placeholder results) and the marker of the trimmed history; everything
    else is trimmed before the error is raised."""
    where = (
        f"only {policy.usable} are usable (window {policy.context_window} - reserve "
        f"{policy.output_reserve} - margin {policy.safety_margin})"
    )
    if policy.rules_version >= 2:
        parts = (
            f"system sections {budget.system} + tools {budget.tools} + "
            if budget is not None
            else ""
        )
        return BudgetExceededError(
            f"the prompt is below its floor: the floor ({parts}the latest user message "
            f"clipped, pinned events, calls awaiting results and the trim marker) needs "
            f"{needed} tokens but {where}; everything else was trimmed already. Over by "
            f"{needed - policy.usable} tokens: raise context_window, lower output_reserve, "
            "shorten the system sections or tools, or unpin events",
            needed=needed,
            usable=policy.usable,
        )
    return BudgetExceededError(
        f"the prompt needs {needed} tokens but {where}; the mandatory tail from the latest "
        f"user message, pinned "
        f"events and calls awaiting results cannot be dropped. Over by {needed - policy.usable}"
        " tokens: raise context_window, lower output_reserve, or compact/unpin",
        needed=needed,
        usable=policy.usable,
    )

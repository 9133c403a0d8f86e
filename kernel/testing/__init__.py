"""Hypothesis strategies and invariant checkers for packing (and custom stages), and the
conformance suite for stores.

Theory of operation
-------------------
`pack` promises a handful of invariants (see ``turnlog._pack`` and
docs/packing.md). This module states each one as a *checker*: a function that
reads a projection and a `Packed` result, and raises `AssertionError` with a
message naming the lineage position or the prompt message index that breaks
it. The checkers do not trust the packer's bookkeeping: they recompute what
they can (the mandatory tail, pending calls, token counts of every message)
from the events and the prompt itself.

The strategies generate what the checkers run on: `policies` gives valid
policies over many budgets (small windows included, with buffers and pruning
numbers scaled so that every stage actually fires), `sessions` gives realistic
agent sessions (parallel tool calls, errors, huge and blob-sized outputs,
late and out-of-order results, notifications, recalls, pins, system changes,
compactions, a rewind and a fork). `build` appends a generated session to a
log. `check_stage` puts it together for a custom stage::

    from hypothesis import given, settings
    from turnlog.testing import check_stage, policies, sessions

    def drop_old_notifications(state):
        ...  # reads and changes the PackState, returns a StageReport

    @settings(max_examples=50, deadline=None)
    @given(items=sessions(), policy=policies(max_window=32_000))
    def test_my_stage_keeps_the_invariants(items, policy):
        check_stage("old-notifications", drop_old_notifications, items, policy,
                    position="before:trim")

The package's modules, one job each: ``_strategies`` (what to generate),
``_checkers`` (what must hold of a pack), ``_stores`` (what every store backend
keeps: `StoreConformance` and `agreement_machine`, to run against a backend of
your own with one factory).

This package imports hypothesis, which the core library does not need: install it
with ``pip install 'turnlog[testing]'`` and import this package explicitly
(``turnlog`` never imports it).
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed in every test run
    raise ImportError("turnlog.testing needs hypothesis: pip install 'turnlog[testing]'") from exc

from ._checkers import (
    check_all,
    check_budget,
    check_decisions,
    check_deterministic,
    check_mandatory_tail,
    check_order,
    check_overflow,
    check_packed,
    check_protected,
    check_stage,
    check_summaries,
    check_tool_pairs,
    with_stage,
)
from ._stores import (
    StoreConformance,
    StoreFactory,
    agreement_machine,
    payloads,
    store_contents,
)
from ._strategies import (
    Compact,
    Fork,
    SessionItem,
    build,
    long_turns,
    memory_log,
    policies,
    project,
    sessions,
)

__all__ = [
    "Compact",
    "Fork",
    "SessionItem",
    "StoreConformance",
    "StoreFactory",
    "agreement_machine",
    "build",
    "check_all",
    "check_budget",
    "check_decisions",
    "check_deterministic",
    "check_mandatory_tail",
    "check_order",
    "check_overflow",
    "check_packed",
    "check_protected",
    "check_stage",
    "check_summaries",
    "check_tool_pairs",
    "long_turns",
    "memory_log",
    "payloads",
    "policies",
    "project",
    "sessions",
    "store_contents",
    "with_stage",
]

"""The built-in pipeline packs the same from running totals as stage by stage.

`pack` with the built-in stages computes the
result from the projection's per-policy sums (`turnlog._pack._pack_default`);
with any other pipeline it runs the stages one by one. A no-op stage appended
to the built-in pipeline forces the stage-by-stage path, so the two can be
compared on every output: prompt bytes, token counts, budget, stage reports,
decisions, and the error when the budget is exceeded. Projections are packed
fresh, midway through their history (so the sums are built in steps), and
under several policies in turn (so per-policy sums are kept apart).
"""

from __future__ import annotations

import contextlib

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnlog import Policy
from turnlog._errors import BudgetExceededError, PolicyError
from turnlog._pack import DEFAULT_STAGES, Packed, PackState, _pack_default, pack
from turnlog._projection import Projection
from turnlog._tokens import get_counter
from turnlog.testing import SessionItem, build, check_packed, memory_log, policies, sessions

FAST = settings(deadline=None, max_examples=max(80, settings.default.max_examples),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _noop(state: PackState) -> None:
    del state


STAGE_BY_STAGE = (*DEFAULT_STAGES, ("noop", _noop))


def _outcome(view: Projection, policy: Policy, *, stepwise: bool) -> Packed | str:
    try:
        return pack(view, policy, stages=STAGE_BY_STAGE if stepwise else None)
    except BudgetExceededError as exc:
        return f"over: {exc}"


def _same(fast: Packed | str, slow: Packed | str) -> None:
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    assert fast.prompt.encode() == slow.prompt.encode(), (
        fast.prompt.first_difference(slow.prompt))
    for field in ("tokens", "message_tokens", "section_tokens", "budget", "pressure",
                  "pressure_before", "thresholds", "compaction_due", "tokenizer",
                  "policy_hash", "head", "recovery"):
        assert getattr(fast, field) == getattr(slow, field), field
    for a, b in zip(fast.stages, slow.stages, strict=True):
        assert a == b, f"stage report {a} != {b}"
    for da, db in zip(fast.decisions, slow.decisions, strict=True):
        assert da == db, f"decision {da} != {db}"
    assert fast == slow


def _view(lineage: list[msgspec.Struct]) -> Projection:
    view = Projection(get_counter("cl100k_base"))
    view.extend(lineage)  # type: ignore[arg-type]
    return view


def _lineage(items: list[SessionItem]) -> list[msgspec.Struct]:
    log = memory_log()
    session = build(log, "s", items)
    return list(log.lineage(session))


@FAST
@given(items=sessions(), policy=policies())
def test_both_paths_pack_alike(items: list[SessionItem], policy: Policy) -> None:
    lineage = _lineage(items)
    fast = _outcome(_view(lineage), policy, stepwise=False)
    _same(fast, _outcome(_view(lineage), policy, stepwise=True))
    if not isinstance(fast, str):
        check_packed(_view(lineage), fast, policy)


@FAST
@given(items=sessions(), policy=policies(min_window=2_000, max_window=12_000))
def test_both_paths_pack_alike_in_small_windows(items: list[SessionItem],
                                                policy: Policy) -> None:
    lineage = _lineage(items)
    _same(_outcome(_view(lineage), policy, stepwise=False),
          _outcome(_view(lineage), policy, stepwise=True))


@FAST
@given(items=sessions(), policy=policies(max_window=24_000), data=st.data())
def test_a_projection_packed_after_every_few_events_packs_alike(
        items: list[SessionItem], policy: Policy, data: st.DataObject) -> None:
    lineage = _lineage(items)
    stops = sorted(set(data.draw(st.lists(st.integers(0, max(0, len(lineage) - 1)),
                                          max_size=6))))
    view = Projection(get_counter("cl100k_base"))
    for i, event in enumerate(lineage):
        view.apply(event)  # type: ignore[arg-type]
        if i in stops:
            fast = _outcome(view, policy, stepwise=False)
            _same(fast, _outcome(_view(lineage[:i + 1]), policy, stepwise=True))
    _same(_outcome(view, policy, stepwise=False), _outcome(view, policy, stepwise=True))


@FAST
@given(items=sessions(), first=policies(max_window=24_000),
       other=policies(max_window=24_000),
       fields=st.sets(st.sampled_from(("truncate", "truncate_lines", "truncate_bytes", "dedup",
                                       "prune", "prune_protect_tokens", "prune_protect_turns",
                                       "prune_min_savings", "trim", "context_window",
                                       "recall_max_chars", "warning_buffer")),
                      min_size=1, max_size=3))
def test_one_projection_under_several_policies_packs_alike(
        items: list[SessionItem], first: Policy, other: Policy, fields: set[str]) -> None:
    with contextlib.suppress(PolicyError):
        second = msgspec.structs.replace(first, **{f: getattr(other, f) for f in fields})
        lineage = _lineage(items)
        view = _view(lineage)
        for policy in (first, second, first, other):
            _same(_outcome(view, policy, stepwise=False),
                  _outcome(_view(lineage), policy, stepwise=True))


def test_the_running_totals_path_is_taken_on_generated_sessions() -> None:
    # Most packs without summaries go the fast way; pruning that stops part-way
    # (when the order of the candidates decides) is left to the stages.
    taken: list[bool] = []

    @settings(deadline=None, max_examples=120, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(items=sessions(), policy=policies(max_window=32_000))
    def explore(items: list[SessionItem], policy: Policy) -> None:
        view = _view(_lineage(items))
        with contextlib.suppress(BudgetExceededError):
            taken.append(_pack_default(view, policy, policy.hash, False, True) is not None)

    explore()
    assert sum(taken) >= 0.8 * len(taken), f"{sum(taken)} of {len(taken)} packs"


def test_decisions_are_those_of_the_pack_even_when_read_after_more_events() -> None:
    lineage = _lineage([*_turns(40)])
    # Later assistant messages name src/app.py: the references of earlier results grow.
    policy = Policy(context_window=3_000, output_reserve=500, prune_min_savings=0,
                    prune_protect_tokens=0, prune_protect_turns=1, warning_buffer=None,
                    warning_ratio=0.5, blocking_buffer=None, blocking_ratio=0.6)
    view = _view(lineage[:len(lineage) // 2])
    early = pack(view, policy)
    expected = pack(_view(lineage[:len(lineage) // 2]), policy, stages=STAGE_BY_STAGE)
    view.extend(lineage[len(lineage) // 2:])  # type: ignore[arg-type]
    pack(view, policy)
    assert early.decisions == expected.decisions
    assert {d.decision for d in early.decisions} >= {"trimmed", "pruned", "verbatim"}


def _turns(n: int) -> list[SessionItem]:
    from turnlog import AssistantMessageAdded, TextPart, ToolCall, ToolResultAdded, UserMessageAdded
    out: list[SessionItem] = []
    for t in range(n):
        out.append(UserMessageAdded(text=f"turn {t}: look at the files and fix the failing test"))
        call = f"c{t}"
        out.append(AssistantMessageAdded(parts=(
            TextPart(text="Reading the file."),
            ToolCall(id=call, name="bash", arguments='{"command": "cat src/app.py"}'))))
        out.append(ToolResultAdded(call_id=call, tool_name="bash",
                                   output="\n".join(f"line {i} of output {t}" for i in range(60))))
        out.append(AssistantMessageAdded(parts=(TextPart(text=f"Done with src/app.py ({t})."),)))
    return out


def test_a_long_session_compacted_as_it_goes_packs_alike_after_every_turn() -> None:
    # The compactor commits segment summaries and roll-ups while the session grows;
    # after every turn the packer's (incremental) projection and a fresh one pack the
    # same both ways, under the compactor's policy and a tighter one that trims.
    import json

    import turnlog
    from turnlog import (
        AssistantMessageAdded,
        SystemSectionSet,
        TextPart,
        ToolCall,
        ToolResultAdded,
        UserMessageAdded,
    )
    from turnlog._compact import Compactor
    from turnlog._packer import Packer

    policy = Policy(context_window=9_000, output_reserve=1_000, warning_buffer=3_000,
                    compact_buffer=2_000, blocking_buffer=1_000, prune_protect_tokens=800,
                    prune_min_savings=200, summary_max_tokens=200, segment_target_tokens=1_500,
                    segment_min_tokens=300, segment_min_messages=2, rollup_fanout=3,
                    keep_recent_turns=2, keep_recent_messages=4, compact_cooldown_turns=1)
    tight = msgspec.structs.replace(policy, context_window=5_000, prune_min_savings=0)
    log = turnlog.open(":memory:")
    log.append("s", SystemSectionSet(name="base", text="You are a coding agent."))
    packer = Packer(log)
    compactor = Compactor(log, packer)
    fired: set[str] = set()
    taken = 0
    for t in range(70):
        log.append("s", UserMessageAdded(text=f"turn {t}: fix the failing test in mod{t % 5}.py"))
        calls = (ToolCall(id=f"r{t}", name="Read",
                          arguments=json.dumps({"file_path": f"mod{t % 5}.py"})),
                 ToolCall(id=f"b{t}", name="Bash", arguments=json.dumps({"command": "pytest"})))
        log.append("s", [
            AssistantMessageAdded(parts=(TextPart(text="Looking."), *calls)),
            ToolResultAdded(call_id=f"r{t}", tool_name="Read",
                            output="\n".join(f"{i}: code {t % 7} {i}" for i in range(40))),
            ToolResultAdded(call_id=f"b{t}", tool_name="Bash",
                            output="\n".join(f"test {i} failed ({t})" for i in range(30)),
                            exit_code=1),
            AssistantMessageAdded(parts=(TextPart(text=f"Based on mod{t % 5}.py the issue is "
                                                       f"case {t}."),))])
        compactor.maybe_compact("s", policy=policy)
        view = packer.projection("s", get_counter("cl100k_base"))
        for chosen in (policy, tight):
            fast = _outcome(view, chosen, stepwise=False)
            _same(fast, _outcome(view, chosen, stepwise=True))
            _same(fast, _outcome(_view(list(log.lineage("s"))), chosen, stepwise=True))
            if not isinstance(fast, str):
                fired.update(r.name for r in fast.stages if r.fired)
                taken += _pack_default(view, chosen, chosen.hash, False, False) is not None
    assert taken >= 100, f"the running totals packed {taken} of 140"
    assert view.compactions, "the compactor committed nothing"
    assert {"summaries", "dedup", "prune", "trim"} <= fired, fired

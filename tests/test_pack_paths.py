"""The two engines pack alike: the incremental one (running sums) and the reference one.

`pack` runs the built-in pipeline on the incremental engine, which answers the
stages' moves from per-unit sums kept in the projection's `PackIndex`; with
``engine="reference"``, or with any custom pipeline (here: the built-in stages and
a no-op stage), it runs the same stage objects item by item. The two are compared
on every output: prompt bytes, token counts, budget, stage reports, decisions, and
the error when the budget is exceeded. Projections are packed fresh, midway through
their history with one index kept across the packs (so the sums are built in
steps), and under several policies in turn (so per-policy sums are kept apart).
"""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from turnlog import Policy, pack
from turnlog._pack import PackIndex
from turnlog.errors import BudgetExceededError, PolicyError
from turnlog.packing import DEFAULT_STAGES, Packed, PackState, Projection, get_counter
from turnlog.testing import SessionItem, build, check_packed, memory_log, policies, sessions

FAST = settings(
    deadline=None,
    max_examples=max(80, settings().max_examples),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _noop(state: PackState) -> None:
    del state


STAGE_BY_STAGE = (*DEFAULT_STAGES, ("noop", _noop))


_INDEXES: dict[int, tuple[Projection, PackIndex]] = {}


def _index(view: Projection) -> PackIndex:
    """One index per projection, kept across its packs (as a `Packer` keeps it)."""
    found = _INDEXES.get(id(view))
    if found is None or found[0] is not view:
        found = _INDEXES[id(view)] = (view, PackIndex())
    return found[1]


def _outcome(
    view: Projection, policy: Policy, *, stepwise: bool, custom: bool = False
) -> Packed | str:
    try:
        if not stepwise:
            return pack(view, policy, index=_index(view))
        if custom:
            return pack(view, policy, stages=STAGE_BY_STAGE)
        return pack(view, policy, engine="reference")
    except BudgetExceededError as exc:
        return f"over: {exc}"


def _same(fast: Packed | str, slow: Packed | str) -> None:
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    assert fast.prompt.encode() == slow.prompt.encode(), fast.prompt.first_difference(slow.prompt)
    for field in (
        "tokens",
        "message_tokens",
        "section_tokens",
        "budget",
        "pressure",
        "pressure_before",
        "thresholds",
        "compaction_due",
        "tokenizer",
        "policy_hash",
        "head",
        "recovery",
    ):
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
    _same(fast, _outcome(_view(lineage), policy, stepwise=True, custom=True))
    if not isinstance(fast, str):
        check_packed(_view(lineage), fast, policy)


@FAST
@given(items=sessions(), policy=policies(min_window=2_000, max_window=12_000))
def test_both_paths_pack_alike_in_small_windows(items: list[SessionItem], policy: Policy) -> None:
    lineage = _lineage(items)
    _same(
        _outcome(_view(lineage), policy, stepwise=False),
        _outcome(_view(lineage), policy, stepwise=True),
    )


@FAST
@given(items=sessions(), policy=policies(max_window=24_000), data=st.data())
def test_a_projection_packed_after_every_few_events_packs_alike(
    items: list[SessionItem], policy: Policy, data: st.DataObject
) -> None:
    lineage = _lineage(items)
    stops = sorted(set(data.draw(st.lists(st.integers(0, max(0, len(lineage) - 1)), max_size=6))))
    view = Projection(get_counter("cl100k_base"))
    for i, event in enumerate(lineage):
        view.apply(event)  # type: ignore[arg-type]
        if i in stops:
            fast = _outcome(view, policy, stepwise=False)
            _same(fast, _outcome(_view(lineage[: i + 1]), policy, stepwise=True))
    _same(_outcome(view, policy, stepwise=False), _outcome(view, policy, stepwise=True))


@FAST
@given(
    items=sessions(),
    first=policies(max_window=24_000),
    other=policies(max_window=24_000),
    fields=st.sets(
        st.sampled_from(
            (
                "truncate",
                "truncate_lines",
                "truncate_bytes",
                "dedup",
                "prune",
                "prune_protect_tokens",
                "prune_protect_turns",
                "prune_min_savings",
                "trim",
                "context_window",
                "recall_max_chars",
                "warning_buffer",
            )
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_one_projection_under_several_policies_packs_alike(
    items: list[SessionItem], first: Policy, other: Policy, fields: set[str]
) -> None:
    try:
        second = msgspec.structs.replace(first, **{f: getattr(other, f) for f in fields})
    except PolicyError:
        second = None
    assume(second is not None)
    assert second is not None
    lineage = _lineage(items)
    view = _view(lineage)
    for policy in (first, second, first, other):
        _same(
            _outcome(view, policy, stepwise=False), _outcome(_view(lineage), policy, stepwise=True)
        )


def test_the_incremental_engine_folds_only_what_is_new() -> None:
    # The index a packer keeps folds every item once: a pack after one more event
    # folds that event, not the history again.
    lineage = _lineage([*_turns(30)])
    policy = Policy(context_window=4_000, output_reserve=500, prune_min_savings=0)
    view = _view(lineage[:-1])
    index = PackIndex()
    pack(view, policy, index=index)
    folded = index.policy_index(view, policy).done
    assert folded == len(view.items)
    view.apply(lineage[-1])  # type: ignore[arg-type]
    pack(view, policy, index=index)
    assert index.policy_index(view, policy).done == folded + 1


def test_a_custom_pipeline_cannot_ask_for_the_incremental_engine() -> None:
    view = _view(_lineage([*_turns(2)]))
    try:
        pack(view, Policy(), stages=STAGE_BY_STAGE, engine="incremental")
    except ValueError as exc:
        assert "built-in pipeline" in str(exc)
    else:
        raise AssertionError("a custom pipeline ran on the incremental engine")


def test_decisions_are_those_of_the_pack_even_when_read_after_more_events() -> None:
    lineage = _lineage([*_turns(40)])
    # Later assistant messages name src/app.py: the references of earlier results grow.
    policy = Policy(
        context_window=3_000,
        output_reserve=500,
        prune_min_savings=0,
        prune_protect_tokens=0,
        prune_protect_turns=1,
        warning_buffer=None,
        warning_ratio=0.5,
        blocking_buffer=None,
        blocking_ratio=0.6,
        rules=2,
    )  # dedup and pruning on pressure (rules 3: in recovery only)
    view = _view(lineage[: len(lineage) // 2])
    early = pack(view, policy)
    expected = pack(_view(lineage[: len(lineage) // 2]), policy, stages=STAGE_BY_STAGE)
    view.extend(lineage[len(lineage) // 2 :])  # type: ignore[arg-type]
    pack(view, policy)
    assert early.decisions == expected.decisions
    assert {d.decision for d in early.decisions} >= {"trimmed", "pruned", "verbatim"}


def test_references_made_after_the_pack_are_not_in_its_decisions() -> None:
    # Each turn reads its own file and the next turns name the files read before, so
    # every pruned read gains references after the pack: its decision keeps the count
    # the pack used.
    from turnlog.events import (
        AssistantMessageAdded,
        TextPart,
        ToolCall,
        ToolResultAdded,
        UserMessageAdded,
    )

    items: list[SessionItem] = []
    for t in range(40):
        items.append(UserMessageAdded(text=f"turn {t}: read the next module"))
        items.append(
            AssistantMessageAdded(
                parts=(
                    ToolCall(
                        id=f"c{t}", name="read_file", arguments=f'{{"path": "src/mod{t}.py"}}'
                    ),
                )
            )
        )
        items.append(
            ToolResultAdded(
                call_id=f"c{t}",
                tool_name="read_file",
                output="\n".join(f"def function_{t}_{i}(): return {i}" for i in range(60)),
            )
        )
        named = " ".join(f"src/mod{k}.py" for k in range(t + 1))
        items.append(AssistantMessageAdded(parts=(TextPart(text=f"Read so far: {named}"),)))
    lineage = _lineage(items)
    policy = Policy(
        context_window=4_000,
        output_reserve=500,
        prune_min_savings=0,
        prune_protect_tokens=0,
        prune_protect_turns=1,
        warning_buffer=None,
        warning_ratio=0.5,
        blocking_buffer=None,
        blocking_ratio=0.6,
        rules=2,
    )  # dedup and pruning on pressure (rules 3: in recovery only)
    half = len(lineage) // 2
    view = _view(lineage[:half])
    early = pack(view, policy, index=_index(view))  # one index, as a `Packer` keeps it
    expected = pack(_view(lineage[:half]), policy, stages=STAGE_BY_STAGE)
    view.extend(lineage[half : half + 8])  # type: ignore[arg-type]  # two more turns
    later = pack(view, policy, index=_index(view))
    assert early.decisions == expected.decisions
    pruned = {d.pos: d.detail for d in early.decisions if d.decision == "pruned"}
    assert pruned
    grown = {
        d.pos: d.detail
        for d in later.decisions
        if d.pos in pruned and d.decision == "pruned" and d.detail != pruned[d.pos]
    }
    assert grown, "no pruned result gained references after the pack"


def _turns(n: int) -> list[SessionItem]:
    from turnlog.events import (
        AssistantMessageAdded,
        TextPart,
        ToolCall,
        ToolResultAdded,
        UserMessageAdded,
    )

    out: list[SessionItem] = []
    for t in range(n):
        out.append(UserMessageAdded(text=f"turn {t}: look at the files and fix the failing test"))
        call = f"c{t}"
        out.append(
            AssistantMessageAdded(
                parts=(
                    TextPart(text="Reading the file."),
                    ToolCall(id=call, name="bash", arguments='{"command": "cat src/app.py"}'),
                )
            )
        )
        out.append(
            ToolResultAdded(
                call_id=call,
                tool_name="bash",
                output="\n".join(f"line {i} of output {t}" for i in range(60)),
            )
        )
        out.append(AssistantMessageAdded(parts=(TextPart(text=f"Done with src/app.py ({t})."),)))
    return out


def test_a_long_session_compacted_as_it_goes_packs_alike_after_every_turn() -> None:
    # The compactor commits segment summaries and roll-ups while the session grows;
    # after every turn the packer's (incremental) projection and a fresh one pack the
    # same both ways, under the compactor's policy and a tighter one that trims.
    import json

    import turnlog
    from turnlog import Compactor, Packer
    from turnlog.events import (
        AssistantMessageAdded,
        SystemSectionSet,
        TextPart,
        ToolCall,
        ToolResultAdded,
        UserMessageAdded,
    )

    policy = Policy(
        context_window=9_000,
        output_reserve=1_000,
        warning_buffer=3_000,
        compact_buffer=2_000,
        blocking_buffer=1_000,
        prune_protect_tokens=800,
        prune_min_savings=200,
        summary_max_tokens=200,
        segment_target_tokens=1_500,
        segment_min_tokens=300,
        segment_min_messages=2,
        rollup_fanout=3,
        keep_recent_turns=2,
        keep_recent_messages=4,
        compact_cooldown_turns=1,
        rules=2,
    )  # dedup and pruning on pressure (rules 3: in recovery only)
    tight = msgspec.structs.replace(policy, context_window=5_000, prune_min_savings=0)
    log = turnlog.open(":memory:")
    log.append("s", SystemSectionSet(name="base", text="You are a coding agent."))
    packer = Packer(log)
    compactor = Compactor(log, packer)
    fired: set[str] = set()
    for t in range(70):
        log.append("s", UserMessageAdded(text=f"turn {t}: fix the failing test in mod{t % 5}.py"))
        calls = (
            ToolCall(
                id=f"r{t}", name="Read", arguments=json.dumps({"file_path": f"mod{t % 5}.py"})
            ),
            ToolCall(id=f"b{t}", name="Bash", arguments=json.dumps({"command": "pytest"})),
        )
        log.append(
            "s",
            [
                AssistantMessageAdded(parts=(TextPart(text="Looking."), *calls)),
                ToolResultAdded(
                    call_id=f"r{t}",
                    tool_name="Read",
                    output="\n".join(f"{i}: code {t % 7} {i}" for i in range(40)),
                ),
                ToolResultAdded(
                    call_id=f"b{t}",
                    tool_name="Bash",
                    output="\n".join(f"test {i} failed ({t})" for i in range(30)),
                    exit_code=1,
                ),
                AssistantMessageAdded(
                    parts=(TextPart(text=f"Based on mod{t % 5}.py the issue is case {t}."),)
                ),
            ],
        )
        compactor.maybe_compact("s", policy=policy)
        view = packer.projection("s", get_counter("cl100k_base"))
        for chosen in (policy, tight):
            fast = pack(view, chosen, index=packer.index_of(view))  # the packer's own index
            _same(fast, _outcome(view, chosen, stepwise=True))
            _same(fast, _outcome(_view(list(log.lineage("s"))), chosen, stepwise=True))
            fired.update(r.name for r in fast.stages if r.fired)
    assert view.compactions, "the compactor committed nothing"
    assert {"summaries", "dedup", "prune", "trim"} <= fired, fired

"""Each checker of `turnlog.testing` fails on a stage built to break its invariant.

The broken stages poke `PackState` internals (which the public methods protect),
so they show that the checkers can fail, and what their messages name.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import msgspec
import pytest
from turnlog import Policy, pack
from turnlog.errors import BudgetExceededError
from turnlog.events import (
    AssistantMessageAdded,
    EventsPinned,
    NotificationAdded,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)
from turnlog.packing import DEFAULT_STAGES, Packed, PackState, Projection, Stage, StageReport
from turnlog.testing import (
    Compact,
    SessionItem,
    build,
    check_all,
    check_budget,
    check_decisions,
    check_deterministic,
    check_mandatory_tail,
    check_order,
    check_overflow,
    check_protected,
    check_stage,
    check_summaries,
    check_tool_pairs,
    memory_log,
    project,
    with_stage,
)

ROOMY = Policy(context_window=200_000, output_reserve=16_000)


def _call(call_id: str, name: str, **args: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(args))


SESSION: list[SessionItem] = [
    SystemSectionSet(name="base", text="You are a careful engineer."),  # 0
    ToolsSet(tools=(ToolSpec(name="Read"), ToolSpec(name="Bash"))),  # 1
    UserMessageAdded(text="first task"),  # 2
    AssistantMessageAdded(
        parts=(
            TextPart(text="Reading."),  # 3 (pinned)
            _call("c1", "Read", file_path="a.py"),
            _call("c2", "Bash", command="make"),
        )
    ),
    ToolResultAdded(call_id="c1", tool_name="Read", output="print('a')\n" * 30),  # 4
    ToolResultAdded(call_id="c2", tool_name="Bash", output="built ok\n" * 30),  # 5
    AssistantMessageAdded(parts=(TextPart(text="Done with the first."),)),  # 6
    UserMessageAdded(text="second task"),  # 7
    AssistantMessageAdded(parts=(_call("c3", "Read", file_path="b.py"),)),  # 8
    ToolResultAdded(call_id="c3", tool_name="Read", output="print('b')\n" * 30),  # 9
    AssistantMessageAdded(parts=(_call("c5", "Bash", command="sleep 999"),)),  # 10 (pending)
    NotificationAdded(source="watcher", text="b.py changed"),  # 11
    EventsPinned(seqs=(3,)),  # 12
    UserMessageAdded(text="third task"),  # 13
    AssistantMessageAdded(
        parts=(
            TextPart(text="On it."),  # 14
            _call("c4", "Read", file_path="c.py"),
        )
    ),
    ToolResultAdded(call_id="c4", tool_name="Read", output="print('c')\n" * 30),  # 15
]

# Item indexes (the projection numbers model-visible events from 0).
USER_1, CALLS_1, READ_A, BASH, DONE_1 = 0, 1, 2, 3, 4
USER_2, CALL_B, READ_B, PENDING, NOTE = 5, 6, 7, 8, 9
USER_3, CALLS_3, READ_C = 10, 11, 12


def packed_with(
    stage: Stage,
    *,
    policy: Policy = ROOMY,
    position: str = "before:trim",
    items: list[SessionItem] = SESSION,
) -> tuple[Projection, Packed]:
    log = memory_log()
    session = build(log, "s", items)
    view = project(log, session)
    return view, pack(view, policy, stages=with_stage("broken", stage, position))


def unit_of(state: PackState, item: int) -> int:
    return state.view.items[item].unit


def test_the_session_passes_every_checker_without_a_broken_stage() -> None:
    log = memory_log()
    session = build(log, "s", SESSION)
    packed = check_all(lambda: project(log, session), ROOMY)
    assert packed is not None
    assert packed.decisions[10].rule == "verbatim"  # rules 2: c5 was abandoned by turn 2
    rules1 = check_all(lambda: project(log, session), msgspec.structs.replace(ROOMY, rules=1))
    assert rules1 is not None
    assert rules1.decisions[10].rule == "verbatim.protected"  # rules 1: c5 awaits its result


# -- mandatory tail ------------------------------------------------------------------------------
def test_check_mandatory_tail_fails_when_a_stage_drops_the_tail() -> None:
    def drop_tail(state: PackState) -> None:
        state.dropped[state.tail_unit] = ("trimmed", "broken.tail", "")

    rules1 = msgspec.structs.replace(ROOMY, rules=1)
    view, packed = packed_with(drop_tail, policy=rules1)
    with pytest.raises(
        AssertionError,
        match=r"position 13 \(user s#13\) is in the mandatory "
        r"tail \(unit \d+\) but not in the prompt",
    ):
        check_mandatory_tail(view, packed, rules1)


def test_check_mandatory_tail_fails_when_a_stage_drops_the_latest_user_message() -> None:
    # rules 2: the turn's opening message is never dropped, whatever else goes
    def drop_opening(state: PackState) -> None:
        state.dropped[state.protection.turn_unit] = ("trimmed", "broken.opening", "")

    view, packed = packed_with(drop_opening)
    with pytest.raises(
        AssertionError,
        match=r"position 13 \(user s#13\) is the latest user "
        r"message but not in the prompt",
    ):
        check_mandatory_tail(view, packed, ROOMY)


def test_check_mandatory_tail_fails_when_a_stage_trims_a_latest_step() -> None:
    # rules 2: only the last resort (trim.tail) may drop one of the last tail_steps steps
    def drop_step(state: PackState) -> None:
        state.dropped[state.tail_unit] = ("trimmed", "broken.tail", "")

    view, packed = packed_with(drop_step)
    with pytest.raises(
        AssertionError,
        match=r"position 14 \(assistant s#14\) is in the last 4 "
        r"steps but was trimmed by broken.tail",
    ):
        check_mandatory_tail(view, packed, ROOMY)


def test_check_mandatory_tail_fails_when_a_stage_prunes_inside_the_tail() -> None:
    def prune_tail(state: PackState) -> None:
        state.protected_units.discard(unit_of(state, READ_C))
        state.replace(READ_C, "[gone]", decision="pruned", rule="broken.prune")

    view, packed = packed_with(prune_tail)
    with pytest.raises(AssertionError, match=r"position 15 .* mandatory tail but was pruned"):
        check_mandatory_tail(view, packed, ROOMY)


# -- tool pairs ------------------------------------------------------------------------------------
def test_check_tool_pairs_fails_when_one_result_of_an_exchange_is_removed() -> None:
    def drop_one_result(state: PackState) -> None:
        state.summarized[BASH] = ("broken.split", "")
        state.message_tokens -= state.tokens_of(BASH)

    _, packed = packed_with(drop_one_result)
    with pytest.raises(AssertionError, match=r"calls \['c2'\] of message 1 are not answered"):
        check_tool_pairs(packed.prompt)


def test_check_tool_pairs_fails_on_an_orphan_result() -> None:
    def drop_the_call(state: PackState) -> None:
        state.summarized[CALLS_1] = ("broken.split", "")
        state.message_tokens -= state.tokens_of(CALLS_1)

    _, packed = packed_with(drop_the_call)
    with pytest.raises(AssertionError, match=r"message 1: tool result for 'c1' does not answer"):
        check_tool_pairs(packed.prompt)


# -- order -----------------------------------------------------------------------------------------
def test_check_order_fails_when_units_are_reordered() -> None:
    # The projection is read-only, so no stage can reorder units: reorder the prompt.
    view, packed = packed_with(lambda state: None)
    messages = packed.prompt.messages
    swapped = (*messages[1:4], messages[0], *messages[4:])
    packed = msgspec.structs.replace(
        packed, prompt=msgspec.structs.replace(packed.prompt, messages=swapped)
    )
    with pytest.raises(
        AssertionError,
        match=r"messages 2 and 3 are out of order: message 2 "
        r"comes from position 5 .*message 3 from position 2",
    ):
        check_order(view, packed)


# -- budget ----------------------------------------------------------------------------------------
def test_check_budget_fails_when_a_stage_hides_tokens() -> None:
    def hide(state: PackState) -> None:
        state.message_tokens -= 40

    _, packed = packed_with(hide)
    with pytest.raises(AssertionError, match=r"accounting: .* but the prompt claims"):
        check_budget(packed, ROOMY)


def test_check_budget_fails_when_a_stage_lies_about_a_replacement() -> None:
    def lie(state: PackState) -> None:
        state.replace(
            READ_A, "a long replacement " * 50, decision="truncated", rule="broken.lie", tokens=5
        )

    _, packed = packed_with(lie)
    with pytest.raises(
        AssertionError,
        match=r"message 2 \(role tool, from positions \[4\]\) "
        r"is counted as 5 tokens but measures",
    ):
        check_budget(packed, ROOMY)


def test_check_budget_fails_on_a_prompt_over_the_usable_budget() -> None:
    _, packed = packed_with(lambda state: None)
    over = msgspec.structs.replace(packed, tokens=ROOMY.usable + 7)
    with pytest.raises(AssertionError, match=r"over the usable budget 184000 by 7"):
        check_budget(over, ROOMY)


def test_check_overflow_fails_when_trimming_is_skipped() -> None:
    # A pipeline that lost its trim stage gives up although the tail fits.
    log = memory_log()
    session = build(log, "s", SESSION)
    view = project(log, session)
    total = pack(view, ROOMY).tokens
    tight = Policy(context_window=total - 20 + 100, output_reserve=100, truncate=False)
    no_trim = tuple((n, s) for n, s in DEFAULT_STAGES if n != "trim")
    with pytest.raises(BudgetExceededError) as info:
        pack(view, tight, stages=no_trim)
    with pytest.raises(
        AssertionError,
        match=r"although the protected part needs only \d+ of "
        r"\d+ usable tokens",
    ):
        check_overflow(view, tight, info.value)
    pack(view, tight)  # the full pipeline fits it


# -- protections ----------------------------------------------------------------------------------
def test_check_protected_fails_when_a_pinned_unit_is_pruned() -> None:
    def prune_pinned(state: PackState) -> None:
        state.protected_units.discard(unit_of(state, CALLS_1))
        state.replace(BASH, "[gone]", decision="pruned", rule="broken.pin")

    view, packed = packed_with(prune_pinned)
    with pytest.raises(
        AssertionError,
        match=r"position 5 .* is protected \(pinned position 3\) "
        r"but was pruned \(broken.pin\)",
    ):
        check_protected(view, packed)


def test_check_protected_fails_when_a_unit_awaiting_a_result_is_trimmed() -> None:
    def trim_pending(state: PackState) -> None:
        unit = unit_of(state, PENDING)
        state.protected_units.discard(unit)
        state.drop_unit(unit, decision="trimmed", rule="broken.pending")

    # rules 1: c5 awaits its result though a later turn started (rules 2: abandoned)
    view, packed = packed_with(trim_pending, policy=msgspec.structs.replace(ROOMY, rules=1))
    with pytest.raises(
        AssertionError,
        match=r"position 10 .* is protected \(calls \['c5'\] await "
        r"a result\) but was trimmed",
    ):
        check_protected(view, packed)


# -- summaries ------------------------------------------------------------------------------------
def test_check_summaries_fails_when_summarized_events_are_labelled_trimmed() -> None:
    # The receipt of an imported session once said "1 summaries shown, 565 events
    # summarized" while every covered event was labelled trimmed.
    shown = msgspec.structs.replace(ROOMY, summary_gate=0.0)
    items = [*SESSION, Compact(first=2, last=6, summary="The first task was done.")]
    log = memory_log()
    session = build(log, "s", items)
    view = project(log, session)
    assert check_all(lambda: project(log, session), shown) is not None

    def relabel(state: PackState) -> None:
        for i in sorted(state.summarized):
            del state.summarized[i]
            state.dropped[state.view.items[i].unit] = ("trimmed", "trim.turn", "relabelled")

    packed = pack(view, shown, stages=with_stage("broken", relabel, "before:trim"))
    with pytest.raises(
        AssertionError,
        match=r"the summaries stage reports '1 summary shown, "
        r"2 events summarized'; the decisions say '1 "
        r"summary shown, 0 events summarized'",
    ):
        check_summaries(view, packed, shown)


# -- decisions ------------------------------------------------------------------------------------
def test_check_decisions_fails_when_a_decision_contradicts_the_prompt() -> None:
    def mislabel(state: PackState) -> None:
        state.replace(READ_B, "[short]", decision="pruned", rule="broken.label")
        state.slots[READ_B].decision = "trimmed"

    view, packed = packed_with(mislabel)
    with pytest.raises(
        AssertionError,
        match=r"position 9 .* is trimmed \(broken.label\) but "
        r"message 7 carries it",
    ):
        check_decisions(view, packed)


def test_check_decisions_fails_when_verbatim_content_was_changed() -> None:
    def rewrite(state: PackState) -> None:
        state.replace(READ_B, "[short]", decision="pruned", rule="broken.verbatim")
        state.slots[READ_B].decision = "verbatim"

    view, packed = packed_with(rewrite)
    with pytest.raises(
        AssertionError,
        match=r"position 9 .* is verbatim but message 7: message "
        r"content differs",
    ):
        check_decisions(view, packed)


# -- determinism ----------------------------------------------------------------------------------
def test_check_deterministic_fails_on_a_stage_with_global_state() -> None:
    runs = itertools.count()

    def counting(state: PackState) -> StageReport:
        state.replace(READ_B, f"[pass {next(runs)}]", decision="pruned", rule="broken.global")
        return StageReport(name="broken", fired=True)

    log = memory_log()
    session = build(log, "s", SESSION)
    stages = with_stage("broken", counting)
    with pytest.raises(
        AssertionError,
        match=r"gives different prompt bytes: first difference "
        r"at message 7",
    ):
        check_deterministic(lambda: project(log, session), ROOMY, stages=stages)


# -- check_stage, as users call it ----------------------------------------------------------------
def drop_old_notifications(state: PackState) -> StageReport:
    """The custom stage of docs/packing.md: notifications older than 5 turns go."""
    n = 0
    for unit in state.view.units:
        first = state.view.items[unit.items[0]]
        if first.kind == "notification" and first.turn < len(state.view.turn_starts) - 5:
            n += state.drop_unit(unit.index, decision="trimmed", rule="custom.notifications")
    return StageReport(name="old-notifications", fired=n > 0, events=n)


BROKEN: dict[str, Callable[[PackState], None]] = {
    "drops the tail": lambda s: s.dropped.__setitem__(s.tail_unit, ("trimmed", "x", "")),
    "hides tokens": lambda s: setattr(s, "message_tokens", s.message_tokens - 40),
    "splits a pair": lambda s: s.summarized.__setitem__(BASH, ("x", "")),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_check_stage_fails_on_a_broken_stage(name: str) -> None:
    with pytest.raises(AssertionError):
        check_stage(name, BROKEN[name], SESSION, ROOMY, position="after:summaries")


def test_check_stage_passes_a_well_behaved_stage() -> None:
    packed = check_stage(
        "old-notifications", drop_old_notifications, SESSION, ROOMY, position="before:dedup"
    )
    assert packed is not None
    assert with_stage("x", drop_old_notifications, "first")[0][0] == "x"
    with pytest.raises(ValueError, match="before:NAME"):
        with_stage("x", drop_old_notifications, "before:nothing")

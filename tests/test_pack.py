"""Focused examples of each packing stage (the properties are in test_pack_properties.py).

Every example is also run through every checker of `turnlog.testing`, so each one
doubles as a test that the stage keeps the invariants.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from turnlog import Log, Policy, pack
from turnlog._tokens import MESSAGE_OVERHEAD
from turnlog.errors import BudgetExceededError, PolicyError
from turnlog.events import (
    AssistantMessageAdded,
    EventsPinned,
    NotificationAdded,
    RecallAdded,
    RecallHit,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.packing import Message, Packed, Projection, get_counter
from turnlog.stores import MemoryStore
from turnlog.testing import (
    Compact,
    SessionItem,
    build,
    check_overflow,
    check_packed,
    memory_log,
    project,
)

COUNTER = get_counter("cl100k_base")
ROOMY = Policy(context_window=200_000, output_reserve=16_000)
#: Rules 1 (turnlog 0.1.0's), which every old record keeps: the tests of the whole-turn
#: tail and of summaries that always replace their events (rules 2: tests/test_rules.py).
RULES1: dict[str, Any] = {"rules": 1}
#: Summaries shown at any pressure (rules 2 shows the originals below ``summary_gate``).
SUMMARIES = msgspec.structs.replace(ROOMY, summary_gate=0.0)


# -- helpers ---------------------------------------------------------------------------------------
def call(call_id: str, name: str, **args: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(args))


def asst(*parts: ToolCall, text: str = "Let me look.") -> AssistantMessageAdded:
    return AssistantMessageAdded(parts=(TextPart(text=text), *parts))


def result(call_id: str, name: str, output: str, **kw: Any) -> ToolResultAdded:
    return ToolResultAdded(call_id=call_id, tool_name=name, output=output, **kw)


def user(text: str) -> UserMessageAdded:
    return UserMessageAdded(text=text)


def run(
    items: list[SessionItem],
    policy: Policy,
    *,
    log: Log | None = None,
) -> tuple[Projection, Packed]:
    """Build, pack, and check every invariant."""
    log = log or memory_log()
    session = build(log, "s", items)
    view = project(log, session)
    packed = pack(view, policy)
    check_packed(view, packed, policy)
    return view, packed


def message_of(packed: Packed, pos: int) -> Message:
    found = [
        m
        for m in packed.prompt.messages
        if m.source == (pos,) and not (m.role == "tool" and m.text.startswith("[no result"))
    ]
    assert len(found) == 1, f"position {pos} is in {len(found)} messages"
    return found[0]


def decision(packed: Packed, pos: int) -> str:
    return packed.decisions[pos].decision


def pressured(**overrides: Any) -> Policy:
    """A roomy window whose warning level is 0: dedup and pruning always run (rules 2;
    rules 3 rewrite earlier results only in a recovery pack)."""
    base: dict[str, Any] = dict(
        context_window=100_000,
        output_reserve=1_000,
        warning_buffer=None,
        warning_ratio=0.0,
        compact_buffer=None,
        blocking_buffer=None,
        trim=False,
        rules=2,
    )
    base.update(overrides)
    return Policy(**base)


def file_lines(name: str, n: int, version: int = 0) -> str:
    return "\n".join(f"{i:4d}  {name}_line_{i} = compute({i}, version={version})" for i in range(n))


# -- truncation -----------------------------------------------------------------------------------
def test_truncation_keeps_head_and_tail_and_names_the_event() -> None:
    output = "\n".join(f"line {i}" for i in range(500))
    policy = msgspec.structs.replace(ROOMY, truncate_lines=100, truncate_head_ratio=0.6)
    _, packed = run(
        [user("go"), asst(call("c1", "Bash", command="seq 500")), result("c1", "Bash", output)],
        policy,
    )
    text = message_of(packed, 2).text
    head, _, rest = text.partition("\n[... truncated: ")
    notice, _, tail = rest.partition("...]\n")
    assert head.split("\n") == [f"line {i}" for i in range(60)]
    assert tail.split("\n") == [f"line {i}" for i in range(460, 500)]
    assert "400 lines" in notice
    assert "event s#2 (`turnlog show s 2`)" in notice
    assert decision(packed, 2) == "truncated"
    assert packed.decisions[2].rule == "truncate.lines"


def test_truncation_by_bytes_cuts_one_long_line() -> None:
    output = "x" * 5_000
    policy = msgspec.structs.replace(ROOMY, truncate_bytes=1_000, truncate_head_ratio=0.5)
    _, packed = run(
        [user("go"), asst(call("c1", "Bash", command="yes x")), result("c1", "Bash", output)],
        policy,
    )
    text = message_of(packed, 2).text
    assert packed.decisions[2].rule == "truncate.bytes"
    assert text.startswith("x" * 500 + "\n[... truncated:")
    assert text.endswith("...]\n" + "x" * 500)
    assert "(4000 characters) omitted" in text


def test_a_blob_output_is_a_truncated_preview_and_the_notice_names_the_blob() -> None:
    log = Log(MemoryStore(), blob_threshold=2_048, preview_chars=1_024)
    output = "\n".join(f"row {i} " + "y" * 30 for i in range(300))
    items: list[SessionItem] = [
        user("go"),
        asst(call("c1", "Bash", command="dump")),
        result("c1", "Bash", output),
    ]
    view, packed = run(items, ROOMY, log=log)
    body = view.events[2].body
    assert isinstance(body, ToolResultAdded) and body.blob is not None
    assert packed.decisions[2].rule == "truncate.blob_preview"
    assert body.blob.hash[:16] in packed.decisions[2].detail
    assert message_of(packed, 2).text == body.output  # the stored preview, as is
    # With a byte limit below the preview, the cut names the blob to read back.
    small = msgspec.structs.replace(ROOMY, truncate_bytes=200)
    packed = pack(view, small)
    check_packed(view, packed, small)
    assert packed.decisions[2].rule == "truncate.bytes"
    assert f"blob {body.blob.hash} (read it back with `turnlog blob {body.blob.hash}`)" in (
        message_of(packed, 2).text
    )


def test_a_long_notification_is_truncated_inside_its_wrapper() -> None:
    text = "\n".join(f"event {i}" for i in range(300))
    policy = msgspec.structs.replace(ROOMY, truncate_lines=50)
    _, packed = run([user("go"), NotificationAdded(source="jobs", text=text)], policy)
    shown = message_of(packed, 1).text
    assert shown.startswith('<notification source="jobs">\nevent 0\n')
    assert shown.endswith("event 299\n</notification>")
    assert "event s#1" in shown
    assert decision(packed, 1) == "truncated"


# -- dedup ----------------------------------------------------------------------------------------
def test_dedup_tier1_replaces_an_identical_earlier_read() -> None:
    content = file_lines("app", 40)
    items: list[SessionItem] = [
        user("read it twice"),
        asst(call("c1", "Read", file_path="src/app.py")),
        result("c1", "Read", content),
        asst(call("c2", "Read", file_path="src/app.py")),
        result("c2", "Read", content),
        user("thanks"),
    ]
    _, packed = run(items, pressured(prune=False))
    assert message_of(packed, 2).text == "[Superseded -- identical result returned by later call]"
    assert packed.decisions[2].rule == "dedup.tier1"
    assert "position 4" in packed.decisions[2].detail
    assert message_of(packed, 4).text == content


def test_dedup_tier2_replaces_a_read_made_stale_by_an_edit_and_a_re_read() -> None:
    items: list[SessionItem] = [
        user("fix it"),
        asst(call("c1", "Read", file_path="src/app.py")),
        result("c1", "Read", file_lines("app", 40)),
        asst(call("c2", "Edit", file_path="src/app.py", old_string="a", new_string="b")),
        result("c2", "Edit", "The file src/app.py has been updated."),
        asst(call("c3", "Read", file_path="src/app.py")),
        result("c3", "Read", file_lines("app", 40, version=1)),
        user("thanks"),
    ]
    _, packed = run(items, pressured(prune=False))
    assert message_of(packed, 2).text == "[Superseded -- file was re-read after modification]"
    assert packed.decisions[2].rule == "dedup.tier2"
    assert decision(packed, 4) == "verbatim" and decision(packed, 6) == "verbatim"


def test_dedup_tier3_replaces_a_grep_subsumed_by_a_full_read() -> None:
    items: list[SessionItem] = [
        user("where is compute"),
        asst(call("c1", "Grep", pattern="compute", path="src/app.py")),
        result("c1", "Grep", "src/app.py:3: app_line_3 = compute(3)"),
        asst(call("c2", "Read", file_path="src/app.py")),
        result("c2", "Read", file_lines("app", 40)),
        user("thanks"),
    ]
    _, packed = run(items, pressured(prune=False))
    assert message_of(packed, 2).text == (
        "[Superseded -- content included in later file_read of app.py]"
    )
    assert packed.decisions[2].rule == "dedup.tier3"


def test_dedup_waits_for_the_warning_level_and_spares_the_tail() -> None:
    content = file_lines("app", 40)
    items: list[SessionItem] = [
        user("read it twice"),
        asst(call("c1", "Read", file_path="src/app.py")),
        result("c1", "Read", content),
        asst(call("c2", "Read", file_path="src/app.py")),
        result("c2", "Read", content),
    ]
    _, packed = run([*items, user("thanks")], ROOMY)
    assert decision(packed, 2) == "verbatim"  # below warning: nothing superseded
    _, packed = run(items, pressured(prune=False))
    assert decision(packed, 2) == "verbatim"  # the mandatory tail is never deduplicated


# -- pruning --------------------------------------------------------------------------------------
PRUNE = dict(dedup=False, prune_protect_turns=1, prune_protect_tokens=0, prune_min_savings=0)


def test_pruning_placeholders_keep_the_tool_name_and_target() -> None:
    big = file_lines("x", 60)
    items: list[SessionItem] = [
        user("look around"),
        asst(
            call("c1", "Read", file_path="src/models/user.py"),
            call("c2", "Bash", command="ls"),
            call("c3", "Glob", pattern="**/*.py"),
            call("c4", "Grep", pattern="def", path="src/"),
            call("c5", "mystery"),
        ),
        result("c1", "Read", big),
        result("c2", "Bash", big),
        result("c3", "Glob", big),
        result("c4", "Grep", big),
        result("c5", "mystery", big),
        user("now fix it"),
    ]
    _, packed = run(items, pressured(**PRUNE))
    assert [message_of(packed, p).text for p in range(2, 7)] == [
        "[Old Read output cleared for src/models/user.py]",
        "[Old shell output cleared; inspect truncation storage or rerun targeted commands if "
        "needed]",
        "[Old glob output cleared]",
        "[Old Grep output cleared for src/]",
        "[Old tool result content cleared]",
    ]
    assert {decision(packed, p) for p in range(2, 7)} == {"pruned"}
    assert all(packed.decisions[p].rule == "prune.score" for p in range(2, 7))


def _prune_one(items: list[SessionItem], **overrides: Any) -> Packed:
    """Pack with the warning level one token under the unreduced total: exactly the
    most prunable candidate goes."""
    log = memory_log()
    session = build(log, "s", items)
    view = project(log, session)
    total = pack(view, pressured(prune=False, dedup=False)).tokens
    # rules 2: pruning on pressure (rules 3 prunes only in a recovery pack)
    policy = pressured(
        **{**PRUNE, **overrides}, warning_ratio=None, warning_buffer=99_000 - (total - 1), rules=2
    )
    packed = pack(view, policy)
    check_packed(view, packed, policy)
    return packed


def test_pruning_goes_by_kind_weight_first() -> None:
    out = file_lines("z", 30)
    items: list[SessionItem] = [
        user("survey"),
        asst(
            call("c1", "Glob", pattern="*"),
            call("c2", "Read", file_path="a.txt"),
            call("c3", "Bash", command="make"),
        ),
        result("c1", "Glob", out),
        result("c2", "Read", out),
        result("c3", "Bash", out),
        user("go on"),
    ]
    packed = _prune_one(items)
    assert [decision(packed, p) for p in (2, 3, 4)] == ["verbatim", "verbatim", "pruned"]
    assert "priority 70" in packed.decisions[4].detail


def test_pruning_spares_results_referenced_later_and_breaks_ties_oldest_first() -> None:
    out_a, out_b = file_lines("a", 30), file_lines("b", 30)
    items: list[SessionItem] = [
        user("read both"),
        asst(call("c1", "Read", file_path="src/a.py"), call("c2", "Read", file_path="src/b.py")),
        result("c1", "Read", out_a),
        result("c2", "Read", out_b),
        asst(text="Both are read."),
        user("go on"),
    ]
    packed = _prune_one(items)
    assert [decision(packed, p) for p in (2, 3)] == ["pruned", "verbatim"]  # tie: oldest first
    items[4] = asst(text="The helper in a.py matters most.")
    packed = _prune_one(items)
    assert [decision(packed, p) for p in (2, 3)] == ["verbatim", "pruned"]  # a.py referenced
    assert "1 references" in _prune_one(items, prune_reference_bonus=0).decisions[2].detail


def test_pruning_spares_results_that_led_to_a_decision() -> None:
    out_a, out_b = file_lines("a", 30), file_lines("b", 30)
    items: list[SessionItem] = [
        user("read"),
        asst(call("c1", "Bash", command="cat a")),
        result("c1", "Bash", out_a),
        asst(text="The issue is clear now."),
        asst(call("c2", "Bash", command="cat b")),
        result("c2", "Bash", out_b),
        asst(text="Nothing here."),
        user("go on"),
    ]
    packed = _prune_one(items)
    assert [decision(packed, p) for p in (2, 5)] == ["verbatim", "pruned"]
    unbonused = _prune_one(items, prune_decision_bonus=0)
    assert "decision language yes" in unbonused.decisions[2].detail


def test_pruning_needs_the_minimum_savings() -> None:
    out = file_lines("z", 30)
    items: list[SessionItem] = [
        user("survey"),
        asst(call("c1", "Bash", command="make")),
        result("c1", "Bash", out),
        user("go on"),
    ]
    _, packed = run(items, pressured(**{**PRUNE, "prune_min_savings": 10_000}))
    assert decision(packed, 2) == "verbatim"
    report = next(r for r in packed.stages if r.name == "prune")
    assert not report.fired and "< minimum 10000" in report.detail
    _, packed = run(items, pressured(**PRUNE))
    assert decision(packed, 2) == "pruned"


def test_pruning_protects_the_latest_turns_and_recent_output() -> None:
    out = file_lines("z", 30)
    items: list[SessionItem] = [
        user("one"),
        asst(call("c1", "Bash", command="a")),
        result("c1", "Bash", out),
        user("two"),
        asst(call("c2", "Bash", command="b")),
        result("c2", "Bash", out),
        user("three"),
    ]
    _, packed = run(items, pressured(**{**PRUNE, "prune_protect_turns": 2}))
    assert [decision(packed, p) for p in (2, 5)] == ["pruned", "verbatim"]
    tokens = pack(project(*_log_and_session(items)), ROOMY).decisions[5].tokens
    _, packed = run(items, pressured(**{**PRUNE, "prune_protect_tokens": tokens}))
    assert [decision(packed, p) for p in (2, 5)] == ["pruned", "verbatim"]


def _log_and_session(items: list[SessionItem]) -> tuple[Log, str]:
    log = memory_log()
    return log, build(log, "s", items)


# -- trimming -------------------------------------------------------------------------------------
def _turns(n: int) -> list[SessionItem]:
    items: list[SessionItem] = []
    for t in range(n):
        items += [
            user(f"turn {t}: " + "please " * 20),
            asst(call(f"c{t}", "Bash", command=f"job {t}")),
            result(f"c{t}", "Bash", file_lines(f"t{t}", 20)),
        ]
    return items


def test_trimming_drops_whole_oldest_turns_and_keeps_the_tail() -> None:
    items = _turns(5)
    log, session = _log_and_session(items)
    full = pack(project(log, session), ROOMY)
    per_turn = sum(full.message_tokens[:3])
    usable = 8_000
    # Blocking level leaves room for a bit more than two turns.
    policy = Policy(
        context_window=usable + 1_000,
        output_reserve=1_000,
        warning_buffer=None,
        compact_buffer=None,
        blocking_buffer=usable - (full.tokens - 2 * per_turn - 5),
        prune=False,
        dedup=False,
        **RULES1,
    )
    _, packed = run(items, policy)
    assert [decision(packed, p) for p in range(15)] == ["trimmed"] * 9 + ["verbatim"] * 6
    assert packed.prompt.messages[0].role == "user"
    assert packed.prompt.messages[0].text.startswith("turn 3:")
    assert packed.tokens <= policy.level("blocking")
    assert packed.decisions[0].rule == "trim.turn"


def test_trimming_never_drops_the_mandatory_tail() -> None:
    items = [
        *_turns(3),
        user("last " * 50),
        asst(call("cz", "Bash", command="big")),
        result("cz", "Bash", file_lines("big", 120)),
    ]
    log, session = _log_and_session(items)
    tail = sum(pack(project(log, session), ROOMY).message_tokens[-3:])
    policy = Policy(
        context_window=tail + 1_100,
        output_reserve=1_000,
        blocking_buffer=0,
        warning_buffer=None,
        compact_buffer=None,
        truncate=False,
        **RULES1,
    )
    _, packed = run(items, policy)
    assert [decision(packed, p) for p in range(9)] == ["trimmed"] * 9
    assert [decision(packed, p) for p in range(9, 12)] == ["verbatim"] * 3


def test_budget_exceeded_says_by_how_much() -> None:
    items: list[SessionItem] = [user("earlier"), user("word " * 3_000)]
    log, session = _log_and_session(items)
    view = project(log, session)
    policy = Policy(context_window=2_000, output_reserve=500, **RULES1)
    with pytest.raises(BudgetExceededError) as info:
        pack(view, policy)
    error = info.value
    assert error.usable == 1_500
    assert error.needed == view.items[1].tokens + 3  # the tail and the reply framing
    assert f"Over by {error.needed - 1_500} tokens" in str(error)
    check_overflow(view, policy, error)


def test_pinned_and_pending_units_are_never_trimmed() -> None:
    items = _turns(4)
    items.insert(6, asst(call("open", "Bash", command="still running")))
    items.append(EventsPinned(seqs=(0,)))
    items.append(user("and now?"))
    log, session = _log_and_session(items)
    policy = Policy(
        context_window=1_500,
        output_reserve=200,
        warning_buffer=None,
        compact_buffer=None,
        blocking_buffer=0,
        truncate=False,
        **RULES1,
    )
    view = project(log, session)
    packed = pack(view, policy)
    check_packed(view, packed, policy)
    assert decision(packed, 0) == "verbatim"  # pinned
    assert decision(packed, 6) == "verbatim"  # awaits its result
    assert decision(packed, 3) == "trimmed"
    placeholder = [m for m in packed.prompt.messages if m.tool_call_id == "open"]
    assert placeholder and placeholder[0].text == "[no result was recorded for this call]"


# -- breakpoints ----------------------------------------------------------------------------------
@pytest.mark.parametrize("limit", [0, 1, 2, 3, 4])
def test_breakpoints_are_at_most_the_policy_limit(limit: int) -> None:
    items: list[SessionItem] = [
        SystemSectionSet(name="base", text="You are helpful."),
        *_turns(3),
        Compact(first=1, last=3, summary="Turn 0 ran a job."),
    ]
    items.append(user("next"))
    policy = msgspec.structs.replace(SUMMARIES, cache_breakpoints=limit)
    _, packed = run(items, policy)
    assert len(packed.prompt.breakpoints) == min(limit, 4)
    if limit == 4:
        assert {b.at for b in packed.prompt.breakpoints} == {"system", "summary", "message"}
        latest = [b for b in packed.prompt.breakpoints if b.reason == "latest message"]
        assert latest[0].index == len(packed.prompt.messages) - 1


# -- summaries ------------------------------------------------------------------------------------
def test_a_compaction_replaces_its_span_by_the_summary_section() -> None:
    items: list[SessionItem] = [
        SystemSectionSet(name="base", text="You are helpful."),
        *_turns(3),
        Compact(first=1, last=6, summary="Ran jobs 0 and 1."),
        user("next"),
    ]
    _, packed = run(items, SUMMARIES)
    assert [decision(packed, p) for p in range(1, 7)] == ["summarized"] * 6
    assert [decision(packed, p) for p in range(7, 10)] == ["verbatim"] * 3
    assert packed.decisions[10].rule == "summaries.shown"
    summary = packed.prompt.system[-1]
    assert summary.name == "conversation_summary"
    assert '<summary level="L0" positions="1-6">\nRan jobs 0 and 1.\n</summary>' in summary.text
    assert packed.prompt.messages[0].text.startswith("turn 2:")


def test_a_compaction_cutting_a_tool_exchange_summarizes_the_whole_exchange() -> None:
    items: list[SessionItem] = [
        *_turns(3),
        Compact(first=0, last=1, summary="Started a job."),
        user("next"),
    ]
    _, packed = run(items, SUMMARIES)
    assert [decision(packed, p) for p in range(3)] == ["summarized"] * 3
    assert "completes a tool exchange" in packed.decisions[2].detail


def _hierarchy(summary_budget: float) -> Packed:
    items: list[SessionItem] = [
        *_turns(4),
        Compact(first=0, last=2, summary="Job 0 ran."),  # pos 12
        Compact(first=3, last=5, summary="Job 1 ran."),  # pos 13
        Compact(first=0, last=5, summary="Jobs 0-1.", level=1, children=(12, 13)),  # pos 14
        user("next"),
    ]
    policy = msgspec.structs.replace(SUMMARIES, summary_budget=summary_budget)
    return run(items, policy)[1]


def test_a_rollup_is_expanded_into_its_children_when_the_budget_allows() -> None:
    packed = _hierarchy(0.75)
    text = packed.prompt.system[-1].text
    assert "Job 0 ran." in text and "Job 1 ran." in text and "Jobs 0-1." not in text
    assert [decision(packed, p) for p in (12, 13, 14)] == ["verbatim", "verbatim", "dropped"]
    assert packed.decisions[14].detail == "expanded into its children"
    assert [decision(packed, p) for p in range(6)] == ["summarized"] * 6


def test_a_rollup_stands_for_its_children_when_the_budget_is_tight() -> None:
    parent = COUNTER.count('<summary level="L1" positions="0-5">\nJobs 0-1.\n</summary>') + 1
    history = ROOMY.usable - 3
    packed = _hierarchy((parent + 3) / history)  # room for one summary block, not two
    text = packed.prompt.system[-1].text
    assert "Jobs 0-1." in text and "Job 0 ran." not in text
    assert [decision(packed, p) for p in (12, 13, 14)] == ["dropped", "dropped", "verbatim"]
    assert packed.decisions[12].detail == "rolled up: shown through its parent"


def test_a_summary_never_takes_the_room_of_the_mandatory_tail() -> None:
    # Regression: a summary that fits its ratio of the history budget, next to a
    # tail that fills the rest, used to raise BudgetExceededError.
    tail = "word " * 1_000
    items: list[SessionItem] = [
        *_turns(2),
        Compact(first=0, last=5, summary="Job. " * 150),
        user(tail),
    ]
    log, session = _log_and_session(items)
    need = pack(
        project(log, session), msgspec.structs.replace(ROOMY, summary_budget=0.0, rules=1)
    ).tokens
    policy = Policy(
        context_window=need + 100,
        output_reserve=50,
        blocking_buffer=0,
        summary_budget=0.75,
        **RULES1,
    )
    _, packed = run(items, policy)
    assert decision(packed, 6) == "dropped"
    assert "the protected part leaves" in packed.decisions[6].detail
    assert [decision(packed, p) for p in range(6)] == ["summarized"] * 6


def test_a_summary_alone_in_the_system_prompt_counts_its_framing() -> None:
    # Regression: with no static sections the summary opens the system message,
    # whose framing was not counted.
    items: list[SessionItem] = [
        *_turns(2),
        Compact(first=0, last=2, summary="Job 0."),
        user("next"),
    ]
    _, packed = run(items, SUMMARIES)  # check_budget verifies the accounting
    assert [s.name for s in packed.prompt.system] == ["conversation_summary"]


# -- rewind, orphans, pending calls ---------------------------------------------------------------
def test_a_rewind_removes_events_and_their_effects_from_the_view() -> None:
    items: list[SessionItem] = [
        user("first"),
        asst(text="answer one"),
        SystemSectionSet(name="mode", text="plan mode"),
        user("second"),
        asst(text="answer two"),
        SessionRewound(to_seq=1, reason="user went back"),
        user("second, again"),
    ]
    view, packed = run(items, ROOMY)
    assert [m.text for m in packed.prompt.messages] == ["first", "answer one", "second, again"]
    assert [decision(packed, p) for p in (2, 3, 4)] == ["dropped"] * 3
    assert {packed.decisions[p].rule for p in (2, 3, 4)} == {"rewind"}
    assert packed.prompt.system == ()  # the section set after the rewind point is forgotten
    assert 3 not in view.item_at


def test_an_orphan_result_is_dropped_and_a_missing_one_is_stood_in_for() -> None:
    items: list[SessionItem] = [
        user("go"),
        asst(call("c1", "Bash", command="a"), call("c2", "Bash", command="b")),
        result("c2", "Bash", "b done"),
        result("nobody", "Bash", "who called me"),
        user("status?"),
    ]
    _, packed = run(items, ROOMY)
    assert decision(packed, 3) == "dropped" and packed.decisions[3].rule == "orphan"
    roles = [(m.role, m.tool_call_id, m.text) for m in packed.prompt.messages]
    assert roles[2] == ("tool", "c2", "b done")
    assert roles[3] == ("tool", "c1", "[no result was recorded for this call]")


# -- recall caps ----------------------------------------------------------------------------------
def _recall(n: int, words: int) -> RecallAdded:
    return RecallAdded(
        query="budget",
        hits=tuple(
            RecallHit(session="old", seq=i, text=f"hit {i}: " + "word " * words) for i in range(n)
        ),
    )


def test_recall_is_capped_by_characters_then_tokens() -> None:
    items: list[SessionItem] = [user("go"), _recall(5, 100), user("next")]
    policy = msgspec.structs.replace(ROOMY, recall_max_chars=1_200)
    _, packed = run(items, policy)
    text = message_of(packed, 1).text
    assert len(text) <= 1_200
    assert "hit 1:" in text and "hit 2:" not in text
    assert "[3 more results omitted by the recall cap]" in text
    assert packed.decisions[1].rule == "truncate.recall_cap"
    policy = msgspec.structs.replace(ROOMY, recall_max_tokens=250)
    _, packed = run(items, policy)
    text = message_of(packed, 1).text
    assert COUNTER.count(text) <= 250
    assert "hit 0:" in text and "[4 more results omitted by the recall cap]" in text


def test_recall_under_the_caps_is_verbatim_and_counted_as_sent() -> None:
    # Regression: a recall result was counted as 3 tokens whatever its size.
    items: list[SessionItem] = [user("go"), _recall(3, 50), user("next")]
    view, packed = run(items, ROOMY)
    assert decision(packed, 1) == "verbatim"
    sent = message_of(packed, 1).text
    assert view.items[1].tokens == MESSAGE_OVERHEAD + COUNTER.count(sent)


def test_notifications_and_empty_messages_are_counted_as_sent() -> None:
    items: list[SessionItem] = [user(""), NotificationAdded(source="watcher", text="a.py changed")]
    view, packed = run(items, ROOMY)
    assert view.items[0].tokens == MESSAGE_OVERHEAD + COUNTER.count("(empty message)")
    assert view.items[1].tokens == MESSAGE_OVERHEAD + COUNTER.count(message_of(packed, 1).text)


def test_a_projection_packed_under_other_recall_caps_is_not_stale() -> None:
    # Regression: the per-item truncation cache ignored the recall caps.
    log, session = _log_and_session([user("go"), _recall(5, 100), user("next")])
    view = project(log, session)
    capped = msgspec.structs.replace(ROOMY, recall_max_chars=600)
    assert decision(pack(view, ROOMY), 1) == "verbatim"
    assert decision(pack(view, capped), 1) == "truncated"
    assert decision(pack(view, ROOMY), 1) == "verbatim"


# -- Policy.from_toml -----------------------------------------------------------------------------
TOML = """
context_window = 32000
output_reserve = 4000
prune_min_savings = 5000

[agents.reviewer]
context_window = 8000
prune = false
"""


def test_policy_from_toml_reads_fields_and_applies_an_agent_override() -> None:
    base = Policy.from_toml(TOML)
    assert (base.context_window, base.output_reserve, base.prune) == (32_000, 4_000, True)
    reviewer = Policy.from_toml(TOML.encode(), agent="reviewer")
    assert (reviewer.context_window, reviewer.output_reserve, reviewer.prune) == (
        8_000,
        4_000,
        False,
    )
    assert reviewer.prune_min_savings == 5_000
    assert reviewer.hash != base.hash


@pytest.mark.parametrize(
    ("text", "agent", "says"),
    [
        (TOML, "nobody", "no [agents.nobody] table; known agents: ['reviewer']"),
        ("contxt_window = 1000\n", None, "contxt_window"),
        ('context_window = "big"\n', None, "context_window"),
        ("context_window = 1000\noutput_reserve = 1000\n", None, "must be below context_window"),
        ("warning_ratio = 1.5\n", None, "warning_ratio"),
        ("context_window = \n", None, "not valid TOML"),
        ("agents = 3\n", None, "'agents' must be a table"),
        ("[agents]\nreviewer = 3\n", "reviewer", "[agents.reviewer] must be a table"),
        (b"\xff\xfe", None, "not UTF-8"),
    ],
)
def test_policy_from_toml_names_what_is_wrong(
    text: str | bytes, agent: str | None, says: str
) -> None:
    with pytest.raises(PolicyError) as info:
        Policy.from_toml(text, agent=agent)
    assert says in str(info.value)

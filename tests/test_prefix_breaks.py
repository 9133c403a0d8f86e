"""Packing rules 3 on real sessions: a request changes an earlier part of the one before it
only at a reported prefix break.

Every corpus transcript's main session is grown event by event and packed before every
assistant message (`tests.bench.prefix_changes`), at several windows; the leading part
of each request is compared with the previous request in the neutral prompt and in the
request body of every provider format (`render_body`). Every change must be reported:
a stage report that opens with ``prefix break`` (trimming, the summaries), the
breakpoints report saying what the log changed since the previous request (a system
section, the tools, pins...), or, for a format that derives tool definitions from the
calls, the breakpoints report naming the tools first called. Each case the corpus
raised has its own small test below too.
"""

from __future__ import annotations

import functools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from turnlog import Policy, pack
from turnlog.events import (
    AssistantMessageAdded,
    Event,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolsSet,
    UserMessageAdded,
)
from turnlog.testing import Compact, SessionItem, build, memory_log, project

from tests.bench import prefix_changes
from tests.bench.cache_share import CORPUS, lineages

FORMATS = prefix_changes.FORMATS
WINDOWS = (8_000, 16_000, 32_000, 128_000)


@functools.cache
def _sessions() -> tuple[tuple[str, tuple[Event, ...]], ...]:
    return tuple((name, tuple(events)) for name, events in lineages(CORPUS, None))


def _unreported(events: list[Event], window: int, formats: tuple[str, ...]) -> list[str]:
    return [
        f"request {n} (before position {pos}), {fmt}: {diff}"
        for n, pos, fmt, diff, _, new in prefix_changes.changes(
            events, Policy(context_window=window), formats
        )
        if not prefix_changes.reported(new, fmt)
    ]


@pytest.mark.parametrize("window", WINDOWS)
def test_every_change_of_an_earlier_part_of_a_real_request_is_a_reported_break(
    window: int,
) -> None:
    sessions = _sessions() if CORPUS.is_dir() else ()
    if not sessions:
        pytest.skip("shared corpus not present")
    found = {
        name: bad
        for name, events in sessions
        if (bad := _unreported(list(events), window, FORMATS))
    }
    assert not found, json.dumps(found, indent=1)[:3_000]


# -- the cases the corpus raised, each on a small session -------------------------------------
def _call(turn: int, step: int, *, calls: int = 1, name: str = "Bash") -> AssistantMessageAdded:
    return AssistantMessageAdded(
        parts=tuple(
            ToolCall(id=f"c{turn}_{step}_{k}", name=name, arguments=json.dumps({"k": k}))
            for k in range(calls)
        )
    )


def _result(turn: int, step: int, k: int, words: int) -> ToolResultAdded:
    return ToolResultAdded(
        call_id=f"c{turn}_{step}_{k}",
        tool_name="Bash",
        output=" ".join(f"w{turn}x{step}y{i}" for i in range(words)),
    )


def _grown(items: list[SessionItem], window: int) -> list[str]:
    log = memory_log()
    session = build(log, "s", items)
    return _unreported(list(log.lineage(session)), window, FORMATS)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(20, 300), min_size=8, max_size=30),
    waiting=st.integers(0, 3),
)
def test_a_call_still_awaiting_its_result_moves_no_earlier_request(
    sizes: list[int], waiting: int
) -> None:
    # The latest step's calls await their results: the replay of earlier requests must not
    # count their placeholders (the cut moved by one unit with no break).
    items: list[SessionItem] = [SystemSectionSet(name="base", text="You are careful.")]
    for turn, words in enumerate(sizes):
        if turn % 4 == 0:
            items.append(UserMessageAdded(text=f"task {turn}"))
        items.append(_call(turn, 0, calls=2))
        items.append(_result(turn, 0, 0, words))
        if turn % 3 != waiting:  # some calls get their second result only later
            items.append(_result(turn, 0, 1, 5))
    items.append(AssistantMessageAdded(parts=(TextPart(text="done"),)))
    assert _grown(items, 4_000) == []


def test_a_call_left_without_a_result_stays_until_the_next_break() -> None:
    # A call awaiting its result when the prefix broke was protected; its turn ends
    # before the next break, and its unit (behind the cut) must stay until that break.
    items: list[SessionItem] = [UserMessageAdded(text="task 0")]
    for step in range(12):
        items.append(_call(0, step, calls=2))
        items.append(_result(0, step, 0, 250))
        if step != 6:
            items.append(_result(0, step, 1, 5))
    items.append(AssistantMessageAdded(parts=(TextPart(text="done"),)))
    items.append(UserMessageAdded(text="task 1"))
    items.append(_call(1, 0))
    items.append(_result(1, 0, 0, 10))
    items.append(AssistantMessageAdded(parts=(TextPart(text="done"),)))
    assert _grown(items, 4_000) == []


def _compacted(steps: int, *, last: int) -> list[SessionItem]:
    items: list[SessionItem] = [
        SystemSectionSet(name="base", text="You are careful."),
        UserMessageAdded(text="task 0 " + "word " * 50),
    ]
    for step in range(steps):
        items.append(_call(0, step))
        items.append(_result(0, step, 0, 120))
        if step == last:
            # an agent's own compaction covering everything so far, its latest steps too
            items.append(Compact(first=0, last=len(items) - 1, summary="Steps so far: done."))
    items.append(AssistantMessageAdded(parts=(TextPart(text="done"),)))
    items.append(UserMessageAdded(text="task 1"))
    items.append(_call(1, 0))
    items.append(_result(1, 0, 0, 10))
    items.append(AssistantMessageAdded(parts=(TextPart(text="done"),)))
    return items


@pytest.mark.parametrize("window", [8_000, 128_000])
def test_a_summary_shown_and_the_covered_steps_it_takes_later_are_reported_breaks(
    window: int,
) -> None:
    # The compaction covers the protected latest steps; they leave the messages one by
    # one as newer steps arrive, and the turn's opening when the next turn starts.
    assert _grown(_compacted(12, last=8), window) == []


def test_a_summary_shown_is_a_break_with_its_reason_and_estimate() -> None:
    log = memory_log()
    session = build(log, "s", _compacted(12, last=8))
    view = project(log, session)
    # the first request after the compaction: every request after it appends
    events = list(log.lineage(session))
    at = next(i for i, e in enumerate(events) if type(e.body).__name__ == "CompactionCommitted")
    for _, pos, packed in prefix_changes.requests(events, Policy(context_window=8_000)):
        if pos > at:
            report = next(s for s in packed.stages if s.name == "summaries")
            assert report.detail.startswith("prefix break: 1 summary shown from this request")
            assert "estimate over 10 requests" in report.detail
            break
    else:
        pytest.fail("no request after the compaction")
    assert pack(view, Policy(context_window=8_000)).rules == 3


def test_a_tool_first_called_in_a_session_without_definitions_is_reported() -> None:
    items: list[SessionItem] = [UserMessageAdded(text="task")]
    items += [_call(0, 0), _result(0, 0, 0, 10)]
    items += [_call(0, 1, name="Read"), _result(0, 1, 0, 10)]
    items.append(AssistantMessageAdded(parts=(TextPart(text="done"),)))
    log = memory_log()
    session = build(log, "s", items)
    events = list(log.lineage(session))
    said = [
        next(s.detail for s in packed.stages if s.name == "breakpoints")
        for _, _, packed in prefix_changes.requests(events, Policy(context_window=8_000))
    ]
    assert [prefix_changes.DERIVED_TOOLS_BREAK in s for s in said] == [False, True, True]
    assert "Read first called" in said[2]
    assert _grown(items, 8_000) == []


def test_what_the_log_changes_since_the_previous_request_is_reported() -> None:
    # The application sets a system section, the tools and a pin between two requests:
    # the prompt changes ahead of what the request appends, and the breakpoints report
    # says why.
    from turnlog.events import EventsPinned, ToolSpec

    items: list[SessionItem] = [
        SystemSectionSet(name="base", text="You are careful."),
        UserMessageAdded(text="task"),
        _call(0, 0),
        _result(0, 0, 0, 10),
        SystemSectionSet(name="base", text="You are careful and brief."),
        ToolsSet(tools=(ToolSpec(name="Bash"),)),
        EventsPinned(seqs=(1,)),
        AssistantMessageAdded(parts=(TextPart(text="done"),)),
    ]
    log = memory_log()
    session = build(log, "s", items)
    events = list(log.lineage(session))
    said = [
        next(s.detail for s in packed.stages if s.name == "breakpoints")
        for _, _, packed in prefix_changes.requests(events, Policy(context_window=8_000))
    ]
    assert len(said) == 2 and prefix_changes.INPUT_BREAK not in said[0]
    assert (
        f"{prefix_changes.INPUT_BREAK}: system section 'base' set, tools set, pins changed "
        "since the previous request"
    ) in said[1]
    assert _grown(items, 8_000) == []

"""A pack that resumes the rules 3 watermark replay packs as a whole replay does.

Under rules 3 the cut is replayed over every earlier request of the session. The
incremental engine keeps the replay's state in the projection's `PackIndex` and a
pack resumes it from where the previous pack stopped; the reference engine keeps
nothing and replays every request. Here a projection is grown event by event with
one index kept across its packs (as a `Packer` keeps it), packed before requests
under policies that change mid-session, and every pack is compared with the
reference engine's over the same events: prompt bytes, numbers, stage reports and
decisions. The sessions are generated (late results, system sections that change,
compactions, pins, rewinds, calls left pending) and real (corpus transcripts, one of
them with imported compactions); erasures go through a `Packer` on a log.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnlog import Packer, Policy, pack
from turnlog._pack import PackIndex
from turnlog._pack._trim import Watermarks
from turnlog.errors import BudgetExceededError
from turnlog.events import (
    AssistantMessageAdded,
    Event,
    ProviderErrorReceived,
    SystemSectionSet,
    UserMessageAdded,
)
from turnlog.packing import Packed, Projection, get_counter
from turnlog.testing import SessionItem, build, memory_log, policies, project, sessions

PROPERTY = settings(
    deadline=None,
    max_examples=max(40, settings().max_examples),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
)
#: Corpus transcripts of every importer: imported compactions and abandoned calls,
#: freeform calls, reused call ids, long tool results.
CORPUS_FILES = (
    "0a725fb5-6378-432a-9e84-9f3f49d4043d.jsonl",
    "3af9b1a7-6512-4883-ad18-320658ced099.jsonl",
    "agent-a00ad96.jsonl",
    "rollout-2025-09-29T13-09-19-01999469-65fd-7fa2-ab93-d24bb4c714cb.jsonl",
    "django__django-16255.traj.json",
    "basic.json",
    "katy.traj",
)


def _outcome(view: Projection, policy: Policy, index: PackIndex | None) -> Packed | str:
    try:
        if index is None:
            return pack(view, policy, engine="reference")
        return pack(view, policy, index=index)
    except BudgetExceededError as exc:
        return f"over: {exc}"


def _packed(packer: Packer, session: str, policy: Policy) -> Packed | str:
    try:
        return packer.pack(session, policy=policy)
    except BudgetExceededError as exc:
        return f"over: {exc}"


def _same(fast: Packed | str, slow: Packed | str) -> None:
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    assert fast.prompt.encode() == slow.prompt.encode(), fast.prompt.first_difference(slow.prompt)
    for a, b in zip(fast.stages, slow.stages, strict=True):
        assert a == b, f"stage report {a} != {b}"
    assert fast.decisions == slow.decisions
    assert fast == slow


def _rules3(policy: Policy) -> Policy:
    return msgspec.structs.replace(policy, rules=3)


def _grow(lineage: list[Event], choose: Iterator[tuple[bool, Policy]], compare: set[int]) -> int:
    """Grow a projection event by event; before every assistant message (a request) pack
    it with the kept index under the policy ``choose`` gives, and compare with the
    reference engine at the requests in ``compare`` and at the end. The number of
    packs that cut the history."""
    view = Projection(get_counter("cl100k_base"))
    index = PackIndex()
    cut = requests = 0
    for event in lineage:
        if isinstance(event.body, AssistantMessageAdded) and view.units:
            repack, policy = next(choose)
            fast = _outcome(view, policy, index)
            if repack:  # the same request packed twice: nothing new to replay
                _same(_outcome(view, policy, index), fast)
            if requests in compare:
                _same(fast, _outcome(view, policy, None))
            if not isinstance(fast, str):
                trim = next(s for s in fast.stages if s.name == "trim")
                cut += trim.detail.startswith(("prefix break", "cut kept"))
            requests += 1
        view.apply(event)
    for _ in range(2):
        _, policy = next(choose)
        _same(_outcome(view, policy, index), _outcome(view, policy, None))
    return cut


def _choices(data: st.DataObject, chosen: list[Policy]) -> Iterator[tuple[bool, Policy]]:
    while True:
        policy = chosen[0] if len(chosen) == 1 else data.draw(st.sampled_from(chosen))
        yield data.draw(st.integers(0, 7)) == 0, policy


@PROPERTY
@given(
    items=sessions(max_events=140),
    chosen=st.lists(policies(min_window=2_000, max_window=16_000), min_size=1, max_size=3),
    data=st.data(),
)
def test_a_resumed_replay_packs_as_a_whole_one_on_generated_sessions(
    items: list[SessionItem], chosen: list[Policy], data: st.DataObject
) -> None:
    # now and then a context-overflow error: every pack after it is a recovery pack
    # (dedup and pruning at any pressure), until the session's end
    at = data.draw(st.integers(0, len(items) * 2))
    if at < len(items):
        items = [*items[:at], ProviderErrorReceived(overflow=True), *items[at:]]
    log = memory_log()
    lineage = list(log.lineage(build(log, "s", items)))
    compare = set(data.draw(st.lists(st.integers(0, 80), max_size=12)))
    _grow(lineage, _choices(data, [_rules3(p) for p in chosen]), compare)


@functools.cache
def _corpus_lineage(name: str) -> list[Event] | None:
    from turnlog.adapters.importers import import_file

    found = sorted(CORPUS.rglob(name)) if CORPUS.is_dir() else []
    if not found:
        return None
    log = memory_log()
    summary = import_file(log, found[0], skip_bad=True)
    session = max(summary.sessions, key=lambda s: (len(log.lineage(s)), s))
    return list(log.lineage(session))


@settings(PROPERTY, max_examples=max(12, settings().max_examples // 8))
@given(
    name=st.sampled_from(CORPUS_FILES),
    windows=st.lists(st.sampled_from((4_000, 8_000, 16_000, 32_000)), min_size=1, max_size=2),
    low=st.sampled_from((0.5, 0.8, 0.95)),
    steps=st.sampled_from((1, 2, 4)),
    data=st.data(),
)
def test_a_resumed_replay_packs_as_a_whole_one_on_corpus_sessions(
    name: str, windows: list[int], low: float, steps: int, data: st.DataObject
) -> None:
    lineage = _corpus_lineage(name)
    if lineage is None:
        pytest.skip("shared corpus not present")
    chosen = [
        Policy(context_window=w, trim_low_ratio=low, tail_steps=steps).resolved() for w in windows
    ]
    compare = set(data.draw(st.lists(st.integers(0, 300), max_size=8)))
    _grow(lineage, _choices(data, chosen), compare)


def test_the_corpus_sessions_cut_and_compare_alike_after_every_request() -> None:
    # every request of a session with imported compactions, at a window where the
    # replay breaks the prefix again and again
    lineage = _corpus_lineage(CORPUS_FILES[1])
    if lineage is None:
        pytest.skip("shared corpus not present")
    policy = Policy(context_window=8_000).resolved()
    forever = iter(lambda: (False, policy), None)
    assert _grow(lineage, forever, set(range(1_000))) > 10


def _turn(t: int) -> list[SessionItem]:
    from turnlog.events import TextPart, ToolCall, ToolResultAdded

    return [
        UserMessageAdded(text=f"turn {t}: look at the files and fix the failing test"),
        AssistantMessageAdded(
            parts=(
                TextPart(text="Reading the file."),
                ToolCall(id=f"c{t}", name="bash", arguments='{"command": "cat src/app.py"}'),
            )
        ),
        ToolResultAdded(
            call_id=f"c{t}",
            tool_name="bash",
            output="\n".join(f"line {i} of output {t}" for i in range(60)),
        ),
        AssistantMessageAdded(parts=(TextPart(text=f"Done with src/app.py ({t})."),)),
    ]


def test_a_pack_after_one_more_request_replays_only_the_new_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = memory_log()
    items: list[SessionItem] = [SystemSectionSet(name="base", text="You are a coding agent.")]
    for t in range(40):
        items += _turn(t)
    lineage = list(log.lineage(build(log, "s", items)))
    policy = Policy(context_window=4_000, output_reserve=500, prune_min_savings=0).resolved()
    steps: list[int] = []
    step = Watermarks.step

    def counted(self: Watermarks, state: object, j: int, end: int) -> object:
        steps.append(j)
        return step(self, state, j, end)  # type: ignore[arg-type]

    monkeypatch.setattr(Watermarks, "step", counted)
    view = Projection(get_counter("cl100k_base"))
    index = PackIndex()
    replayed: list[int] = []
    for event in lineage:
        if isinstance(event.body, AssistantMessageAdded) and view.units:
            steps.clear()
            fast = pack(view, policy, index=index)
            replayed.append(len(steps))
            _same(fast, pack(view, policy, engine="reference"))
        view.apply(event)
    # the first pack replays its one request and the end; every later one the request
    # the new assistant message made and the end, never the whole session again
    assert len(replayed) == 80
    assert max(replayed) == 2, replayed
    # the session broke its prefix more than once on the way
    assert fast.stages[-2].detail.startswith("cut kept from the earlier prefix break"), fast.stages


def test_a_system_section_changed_mid_session_replays_every_request_again() -> None:
    # the fixed part of every request changes: the memo's key no longer holds
    log = memory_log()
    items: list[SessionItem] = [SystemSectionSet(name="base", text="You are a coding agent.")]
    for t in range(30):
        items += _turn(t)
        if t % 7 == 6:
            items.append(SystemSectionSet(name="base", text="You are a coding agent. " * t))
    lineage = list(log.lineage(build(log, "s", items)))
    policy = Policy(context_window=4_000, output_reserve=500).resolved()
    forever = iter(lambda: (False, policy), None)
    assert _grow(lineage, forever, set(range(1_000))) > 10


@settings(PROPERTY, max_examples=max(20, settings().max_examples // 4))
@given(
    items=sessions(max_events=100, forks=False),
    policy=policies(min_window=2_000, max_window=12_000),
    data=st.data(),
)
def test_a_packer_resumes_alike_across_erasures(
    items: list[SessionItem], policy: Policy, data: st.DataObject
) -> None:
    # the packer's projection and index are rebuilt after an erasure; its packs before
    # and after compare with the reference engine on a fresh projection of the log
    policy = _rules3(policy)
    log = memory_log()
    cut = data.draw(st.integers(0, len(items)))
    session = build(log, "s", items[:cut])
    packer = Packer(log)
    head = log.head(session)
    if head is not None:
        _same(_packed(packer, session, policy), _outcome(project(log, session), policy, None))
        seqs = data.draw(st.lists(st.integers(0, head.seq), max_size=3))
        if seqs:
            log.erase(session, seqs, reason="test")
    for item in items[cut:]:
        build(log, session, [item])
        if data.draw(st.integers(0, 3)) == 0:
            _same(_packed(packer, session, policy), _outcome(project(log, session), policy, None))
    if log.head(session) is not None:
        _same(_packed(packer, session, policy), _outcome(project(log, session), policy, None))


def test_a_late_result_replays_the_requests_after_its_call_again() -> None:
    # A result that arrives after two more assistant messages joins its call's unit:
    # the requests made while it was awaited, replayed by earlier packs without it,
    # are sized with it from then on (as a whole replay sizes them). Another call is
    # open by then, so the placeholders, and with them the fixed part of every
    # request, are what they were.
    from turnlog.events import TextPart, ToolCall, ToolResultAdded

    log = memory_log()
    items: list[SessionItem] = [SystemSectionSet(name="base", text="You are a coding agent.")]
    for t in range(24):
        run = ToolCall(id=f"c{t}", name="bash", arguments='{"command": "make test"}')
        look = ToolCall(id=f"d{t}", name="bash", arguments='{"command": "ls"}')
        items += [
            UserMessageAdded(text=f"turn {t}: run the tests"),
            AssistantMessageAdded(parts=(TextPart(text="Running them."), run)),
            AssistantMessageAdded(parts=(TextPart(text=f"Waiting for the run ({t})."),)),
            AssistantMessageAdded(parts=(TextPart(text="Meanwhile, the files."), look)),
            ToolResultAdded(
                call_id=f"c{t}",
                tool_name="bash",
                output="\n".join(f"test {i} of run {t} passed" for i in range(40 + 5 * t)),
            ),
            AssistantMessageAdded(parts=(TextPart(text=f"The run is done ({t})."),)),
            ToolResultAdded(call_id=f"d{t}", tool_name="bash", output="src tests docs"),
            AssistantMessageAdded(parts=(TextPart(text=f"All passed ({t})."),)),
        ]
    lineage = list(log.lineage(build(log, "s", items)))
    policy = Policy(context_window=6_000, output_reserve=500, tail_steps=1).resolved()
    forever = iter(lambda: (False, policy), None)
    assert _grow(lineage, forever, set(range(1_000))) > 10


def test_the_rewrites_of_a_resumed_replay_know_every_dedup_mark() -> None:
    # The same file read again and again: every read supersedes the one before (a
    # dedup mark), and the breaks the small window forces rewrite the marks made
    # before them; the rewrites' basis, kept between packs, folds each new mark.
    import json

    from turnlog.events import TextPart, ToolCall, ToolResultAdded

    log = memory_log()
    items: list[SessionItem] = [SystemSectionSet(name="base", text="You are a coding agent.")]
    source = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(30))
    for t in range(30):
        read = ToolCall(id=f"r{t}", name="Read", arguments=json.dumps({"file_path": "src/app.py"}))
        items += [
            UserMessageAdded(text=f"turn {t}: what does f{t} return?"),
            AssistantMessageAdded(parts=(TextPart(text="Reading the file."), read)),
            ToolResultAdded(call_id=f"r{t}", tool_name="Read", output=source),
            AssistantMessageAdded(parts=(TextPart(text=f"f{t} returns x + {t}."),)),
        ]
    lineage = list(log.lineage(build(log, "s", items)))
    policy = Policy(context_window=5_000, output_reserve=500, prune_protect_turns=1).resolved()
    forever = iter(lambda: (False, policy), None)
    assert _grow(lineage, forever, set(range(1_000))) > 5


def test_pruning_facts_first_read_after_many_packs_are_those_of_a_fresh_index() -> None:
    # A rules 3 pack that prunes nothing reads no pruning facts (references, decision
    # language), so the kept index folds them only when a pack first reads them; the
    # pack that does must see every assistant message since, as a fresh index does.
    import json

    from turnlog.events import TextPart, ToolCall, ToolResultAdded

    log = memory_log()
    items: list[SessionItem] = [SystemSectionSet(name="base", text="You are a coding agent.")]
    for t in range(16):
        path = f"src/mod{t % 4}.py"
        read = ToolCall(id=f"r{t}", name="Read", arguments=json.dumps({"file_path": path}))
        items += [
            UserMessageAdded(text=f"turn {t}: what does mod{t % 4} do?"),
            AssistantMessageAdded(parts=(TextPart(text="Reading the file."), read)),
            ToolResultAdded(
                call_id=f"r{t}",
                tool_name="Read",
                output="\n".join(f"def g{t}_{i}(x):  # helper number {i}" for i in range(40)),
            ),
            AssistantMessageAdded(
                parts=(TextPart(text=f"Because {path} was read, the fix goes in mod{t}."),)
            ),
        ]
    lineage = list(log.lineage(build(log, "s", items)))
    quiet = Policy(context_window=128_000).resolved()  # nothing to prune or cut
    pruning = Policy(
        context_window=9_000,
        output_reserve=500,
        rules=2,
        warning_ratio=0.3,
        warning_buffer=None,
        prune_min_savings=0,
        prune_protect_turns=1,
        prune_protect_tokens=0,
    )
    view = Projection(get_counter("cl100k_base"))
    index = PackIndex()
    requests = 0
    for event in lineage:
        if isinstance(event.body, AssistantMessageAdded) and view.units:
            pack(view, quiet, index=index, explain=False)
            requests += 1
            if requests % 9 == 0:  # read now and then, then not for several packs
                _same(pack(view, pruning, index=index), pack(view, pruning, engine="reference"))
        view.apply(event)
    fast = pack(view, pruning, index=index)
    slow = pack(view, pruning, engine="reference")
    _same(fast, slow)
    _same(fast, pack(view, pruning, index=PackIndex()))
    pruned = [d for d in fast.decisions if d.decision == "pruned"]
    assert pruned and any("decision language yes" in d.detail for d in pruned), pruned
    assert any(", 0 references" not in d.detail for d in pruned), pruned


def test_units_leaving_the_protected_tail_under_a_summary_replay_from_the_first_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Once a summary is shown, the protected units it covers are in the prompt as they
    # are and the others are left out for it: as the tail moves on, a covered unit
    # leaving it changes the sizes (and what the rewrites' basis leaves out) from that
    # unit on only. The replay resumes before it, with the basis built again, and packs
    # as a whole replay does.
    lineage = _corpus_lineage(CORPUS_FILES[0])
    if lineage is None:
        pytest.skip("shared corpus not present")
    steps: list[int] = []
    step = Watermarks.step

    def counted(self: Watermarks, state: object, j: int, end: int) -> object:
        steps.append(j)
        return step(self, state, j, end)  # type: ignore[arg-type]

    monkeypatch.setattr(Watermarks, "step", counted)
    policy = Policy(context_window=16_000).resolved()
    view = Projection(get_counter("cl100k_base"))
    index = PackIndex()
    replayed: list[int] = []
    for event in lineage:
        if isinstance(event.body, AssistantMessageAdded) and view.units:
            steps.clear()
            fast = _outcome(view, policy, index)
            replayed.append(len(steps))
            _same(fast, _outcome(view, policy, None))
        view.apply(event)
    # one replay from the start, when the summary is first shown; the units leaving
    # the tail after it replay a few requests each, not the session again
    assert sum(n > len(replayed) // 2 for n in replayed) == 1, replayed


def test_the_rewrites_leave_out_a_summarized_unit_once_it_leaves_the_tail() -> None:
    # A compaction covers the latest steps of a long turn: while they are in the
    # protected tail they are packed as they are (and their results may be pruned at a
    # break); once newer steps push them out they are left out for the summary, and the
    # rewrites' basis, kept between packs, must count nothing of them from then on
    # (the replay resumes before them, the basis built again).
    from turnlog.events import TextPart, ToolCall, ToolResultAdded
    from turnlog.testing import Compact

    def run(name: str, n: int, what: str) -> list[SessionItem]:
        return [
            AssistantMessageAdded(
                parts=(
                    TextPart(text=f"{what}."),
                    ToolCall(id=name, name="bash", arguments='{"command": "make"}'),
                )
            ),
            ToolResultAdded(
                call_id=name,
                tool_name="bash",
                output="\n".join(f"line {i} of {name}" for i in range(n)),
            ),
        ]

    log = memory_log()
    items: list[SessionItem] = [SystemSectionSet(name="base", text="You are a coding agent.")]
    for t in range(8):
        items += [UserMessageAdded(text=f"turn {t}: build it"), *run(f"c{t}", 20, "Building")]
        items.append(AssistantMessageAdded(parts=(TextPart(text=f"Built ({t})."),)))
    items.append(UserMessageAdded(text="last turn: many steps"))
    for s in range(12):
        items += run(f"s{s}", 20, f"Step {s}")
        if s == 3:  # steps 2 and 3, the protected tail now
            items.append(Compact(first=len(items) - 4, last=len(items) - 1, summary="Steps 2-3."))
    lineage = list(log.lineage(build(log, "s", items)))
    policy = Policy(
        context_window=5_000,
        output_reserve=400,
        dedup=False,
        prune_protect_turns=0,
        prune_protect_tokens=0,
        prune_min_savings=0,
        tail_steps=2,
        summary_gate=0.0,
    ).resolved()
    forever = iter(lambda: (False, policy), None)
    assert _grow(lineage, forever, set(range(1_000))) > 3


@settings(deadline=None)
@given(last=st.integers(0, 10**8), spec=st.sampled_from(("cl100k_base", "cl100k_base*1.37")))
def test_the_marker_reserve_counts_a_number_by_its_width_in_the_shipped_encodings(
    last: int, spec: str
) -> None:
    # The reserve is counted once per digit width of the event count (the counter
    # caches it): true to the byte only if every number of a width counts the same.
    from turnlog._tokens import numbers_by_width

    counter = get_counter(spec)
    assert numbers_by_width(counter)

    def text(n: int) -> str:
        return (
            f"[turnlog: earlier history of this session (positions {n}-{n}) was left out "
            f"of this prompt to fit the context window; it is in the log: `turnlog log "
            f"0a725fb5-6378 --from {n}`]"
        )

    assert counter.count(text(last)) == counter.count(text(10 ** (len(str(last)) - 1)))


@settings(deadline=None)
@given(
    numbers=st.tuples(*[st.integers(0, 10**9)] * 3),
    session=st.sampled_from(("s", "0a725fb5-6378", "agent-42", "sessão 7")),
    spec=st.sampled_from(("cl100k_base", "o200k_base", "cl100k_base*1.37")),
)
def test_a_marker_counts_as_its_numbers_widths_smallest_numbers_do(
    numbers: tuple[int, int, int], session: str, spec: str
) -> None:
    # Each pack's marker names other positions; its count is taken from the same text
    # with each number the smallest of its width (cached by the counter), which is true
    # to the byte only if the shipped encodings count a number by its width.
    from turnlog._pack._trim import _marker_text, _smallest

    counter = get_counter(spec)
    first, last, seq = numbers
    assert counter.count(_marker_text(first, last, session, seq)) == counter.count(
        _marker_text(_smallest(first), _smallest(last), session, _smallest(seq))
    )
    assert [_smallest(n) for n in (0, 9, 10, 99, 100, 12345)] == [1, 1, 10, 10, 100, 10000]


class _DigitValues:
    """A counter that counts a digit by its value: a number's digits, not only its
    width, change the count."""

    id = "digit-values"

    def count(self, text: str) -> int:
        return len(text.split()) + sum(int(c) for c in text if c.isdigit())


def test_the_marker_reserve_of_another_counter_counts_the_event_count_itself() -> None:
    from turnlog._pack._indexed import IndexedLedger
    from turnlog._pack._trim import Trim
    from turnlog._tokens import MESSAGE_OVERHEAD, numbers_by_width

    counter = _DigitValues()
    assert not numbers_by_width(counter)
    log = memory_log()
    items: list[SessionItem] = [SystemSectionSet(name="base", text="You are a coding agent.")]
    for t in range(30):
        items += _turn(t)
    lineage = list(log.lineage(build(log, "s", items)))
    view = Projection(counter)
    for event in lineage:
        view.apply(event)
    policy = Policy(context_window=4_000, output_reserve=500).resolved()
    ledger = IndexedLedger(view, policy, counter, PackIndex())
    last = len(view.events) - 1  # 120: not the first number of its width
    assert last != 10 ** (len(str(last)) - 1)
    widest = (
        f"[turnlog: earlier history of this session (positions {last}-{last}) was left "
        f"out of this prompt to fit the context window; it is in the log: `turnlog log "
        f"s --from {last}`]"
    )
    assert Trim.reserve(ledger) == MESSAGE_OVERHEAD + counter.count(widest)

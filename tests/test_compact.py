"""Compaction: span choice, segments and rollups, failures, breaker, recovery."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
import turnlog
import turnlog.adapters
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnlog import Compactor, Packer, Policy, Replayer, pack
from turnlog.compaction import ExtractiveSummarizer, Outcome, Summarizer, Summary, SummaryRequest
from turnlog.errors import CompactionError
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    CompactionFailed,
    CompactionPartSummarized,
    EventsPinned,
    ProviderErrorReceived,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
    covered_digest,
)
from turnlog.packing import get_counter

SMALL = Policy(
    context_window=12_000,
    output_reserve=1_000,
    warning_buffer=5_000,
    compact_buffer=4_000,
    blocking_buffer=1_000,
    prune=False,
    summary_max_tokens=300,
    segment_target_tokens=2_000,
    segment_min_tokens=300,
    segment_min_messages=2,
    rollup_fanout=3,
    keep_recent_turns=2,
    keep_recent_messages=4,
    compact_cooldown_turns=1,
)


def turn(
    log: turnlog.Log,
    t: int,
    *,
    size: int = 60,
    pending: bool = False,
    late: list[int] | None = None,
) -> None:
    """Append one realistic turn: user, assistant with two parallel calls, results, reply.

    With ``late``, the shell result is held back and appended (to ``late``) only
    after the next user message: a result that arrives late.
    """
    log.append("s", UserMessageAdded(text=f"turn {t}: fix the failing test in mod{t % 4}.py"))
    for held in late or []:
        log.append(
            "s",
            ToolResultAdded(call_id=f"b{held}", tool_name="Bash", output="late ok", exit_code=0),
        )
    if late:
        late.clear()
    read_args = json.dumps({"file_path": f"mod{t % 4}.py"})
    calls = (
        ToolCall(id=f"r{t}", name="Read", arguments=read_args),
        ToolCall(id=f"b{t}", name="Bash", arguments=json.dumps({"command": "pytest -q"})),
    )
    log.append("s", AssistantMessageAdded(parts=(TextPart(text="Looking."), *calls)))
    log.append(
        "s",
        ToolResultAdded(
            call_id=f"r{t}",
            tool_name="Read",
            output="\n".join(f"{i}: code {t} {i}" for i in range(size)),
        ),
    )
    if pending:
        return
    if late is not None:
        late.append(t)
        return
    log.append(
        "s",
        ToolResultAdded(call_id=f"b{t}", tool_name="Bash", output=f"1 failed ({t})", exit_code=1),
    )
    log.append(
        "s",
        AssistantMessageAdded(
            parts=(TextPart(text=f"Based on mod{t % 4}.py the issue is case {t}."),)
        ),
    )


def fresh(tmp_path: Path | None = None) -> tuple[turnlog.Log, Packer, Compactor]:
    log = turnlog.open(tmp_path / "store") if tmp_path else turnlog.open(":memory:")
    log.append("s", SystemSectionSet(name="base", text="You are a coding agent."))
    packer = Packer(log)
    return log, packer, Compactor(log, packer)


def compactions(log: turnlog.Log) -> list[tuple[int, CompactionCommitted]]:
    out = []
    for e in log.read("s", kinds=["compaction"]):
        assert isinstance(e.body, CompactionCommitted)
        out.append((e.seq, e.body))
    return out


def test_compaction_commits_provenance_over_the_covered_events(tmp_path: Path) -> None:
    log, _, compactor = fresh(tmp_path)
    for t in range(12):
        turn(log, t)
    outcome = compactor.compact("s", policy=SMALL)
    assert outcome.status == "committed", outcome
    found = compactions(log)
    assert found
    lineage = log.lineage("s")
    for _, body in found:
        if body.level:
            continue
        hashes = [e.hash for e in lineage[body.first_seq : body.last_seq + 1]]
        assert body.covered_digest == covered_digest(hashes)
        assert body.summarizer == "extractive" and body.reason == "manual"
        assert body.tokens_after <= SMALL.summary_max_tokens
        assert body.tokens_before > body.tokens_after
        assert body.prompt_hash and len(body.prompt_hash) == 64
    assert log.verify().ok


@pytest.mark.parametrize("keep_messages", [0, 4])
@pytest.mark.parametrize("late_results", [False, True])
@pytest.mark.parametrize("pending_last", [False, True])
def test_compaction_never_covers_the_tail_or_splits_a_tool_pair(
    keep_messages: int, late_results: bool, pending_last: bool
) -> None:
    policy = Policy(
        **{**_fields(SMALL), "keep_recent_messages": keep_messages, "keep_recent_turns": 1}
    )
    log, packer, compactor = fresh()
    late: list[int] | None = [] if late_results else None
    for t in range(10):
        # Turn 9's result arrives inside the last (kept) turn.
        turn(log, t, late=late if t % 3 == 1 or t == 9 else None)
    turn(log, 10, pending=pending_last, late=late)
    assert compactor.compact("s", policy=policy).status == "committed"
    view = packer.projection("s", get_counter("cl100k_base"))
    tail_start = view.items[view.units[view.turn_starts[-1]].items[0]].pos
    for _, body in compactions(log):
        assert body.last_seq < tail_start
        for unit in view.units:
            inside = [body.first_seq <= view.items[i].pos <= body.last_seq for i in unit.items]
            assert all(inside) or not any(inside), f"unit {unit.index} split by {body}"


def test_next_pack_fits_and_earlier_replays_are_unchanged() -> None:
    log, packer, compactor = fresh()
    requests = []
    for t in range(14):
        turn(log, t)
        requests.append(Replayer(packer).record("s", policy=SMALL).request_seq)
        outcome = compactor.maybe_compact("s", policy=SMALL)
        if outcome.status == "committed":
            assert outcome.fits
            packed = packer.pack("s", policy=SMALL)
            assert packed.tokens <= SMALL.usable
            assert packed.prompt.problems() == []
    assert compactions(log), "the threshold never fired"
    for seq in requests:
        assert Replayer(packer).replay("s", seq).ok


def test_no_event_is_summarized_twice_at_the_same_level() -> None:
    log, _, compactor = fresh()
    for t in range(30):
        turn(log, t)
        compactor.maybe_compact("s", policy=SMALL)
    by_level: dict[int, set[int]] = {}
    for _, body in compactions(log):
        covered = set(range(body.first_seq, body.last_seq + 1))
        seen = by_level.setdefault(body.level, set())
        assert not covered & seen, f"level {body.level} covers positions twice"
        seen |= covered
    assert any(b.level >= 1 for _, b in compactions(log)), "no rollup happened"


def test_rollups_summarize_children_and_packing_expands_breadth_first() -> None:
    log, packer, compactor = fresh()
    for t in range(30):
        turn(log, t)
        compactor.maybe_compact("s", policy=SMALL)
    rollups = [b for _, b in compactions(log) if b.level == 1]
    assert rollups
    body = rollups[0]
    assert len(body.children) == SMALL.rollup_fanout and body.reason == "rollup"
    children = [log.get("s", c).body for c in body.children]
    assert all(isinstance(c, CompactionCommitted) and c.level == 0 for c in children)
    # A roomy summary budget expands rollups into their children (more detail);
    # a tight one shows the rollups themselves.
    roomy = packer.pack("s", policy=Policy(**{**_fields(SMALL), "summary_budget": 1.0}))
    tight = packer.pack("s", policy=Policy(**{**_fields(SMALL), "summary_budget": 0.08}))
    roomy_text = roomy.prompt.system[-1].text
    tight_text = tight.prompt.system[-1].text
    assert roomy.prompt.system[-1].name == tight.prompt.system[-1].name == "conversation_summary"
    assert 'level="L1"' in tight_text
    assert roomy_text.count('level="L0"') > tight_text.count('level="L0"')
    expanded = [
        d for d in roomy.decisions if d.rule == "summaries.not_shown" and "expanded" in d.detail
    ]
    assert expanded, "no rollup was expanded under the roomy budget"


def _fields(policy: Policy) -> dict[str, Any]:
    return {f: getattr(policy, f) for f in policy.__struct_fields__}


class Scripted:
    """A summarizer that fails, then returns an oversize summary, then hangs, then works."""

    def __init__(self, counter_text: str = "x ") -> None:
        self.calls = 0
        self.release = threading.Event()
        self.filler = counter_text

    @property
    def id(self) -> str:
        return "scripted"

    def summarize(self, request: SummaryRequest) -> Summary:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("upstream 503")
        if self.calls == 2:
            return Summary(text=self.filler * (request.max_tokens * 3), summarizer=self.id)
        if self.calls == 3:
            self.release.wait(10)
            return Summary(text="late", summarizer=self.id)
        return Summary(text="## Goal\n- fix the tests", summarizer=self.id)


def test_failing_oversize_and_hanging_summarizers_are_recorded_and_the_session_goes_on() -> None:
    log, packer, _ = fresh()
    scripted = Scripted()
    compactor = Compactor(log, packer, summarizer=scripted, timeout=0.5)
    for t in range(12):
        turn(log, t)
    outcomes = [compactor.compact("s", policy=SMALL, reason="threshold") for _ in range(3)]
    scripted.release.set()
    assert [o.status for o in outcomes] == ["failed", "failed", "failed"]
    failures = [e.body for e in log.read("s", kinds=["compaction_failed"])]
    assert len(failures) == 3
    assert all(isinstance(f, CompactionFailed) for f in failures)
    assert "503" in failures[0].error  # type: ignore[union-attr]
    assert "summary_max_tokens" in failures[1].error  # type: ignore[union-attr]
    assert "timed out" in failures[2].error  # type: ignore[union-attr]
    # Three consecutive failures open the breaker for automatic compaction.
    view = packer.projection("s", get_counter("cl100k_base"))
    assert compactor.breaker_open(view, SMALL)
    assert compactor.compact("s", policy=SMALL, reason="threshold").status == "skipped"
    # Packing falls back to trimming and still fits; the session goes on.
    turn(log, 12)
    packed = Replayer(packer).record("s", policy=SMALL).packed
    assert packed.tokens <= SMALL.usable
    # A manual compaction is still allowed and now succeeds.
    assert compactor.compact("s", policy=SMALL).status == "committed"
    assert not compactor.breaker_open(packer.projection("s", get_counter("cl100k_base")), SMALL)
    assert log.verify().ok


@pytest.mark.parametrize("summarizer", [5, lambda request: request, ExtractiveSummarizer])
def test_something_that_is_not_a_summarizer_is_refused_when_given(summarizer: object) -> None:
    # Accepted, it failed at the first compaction (AttributeError: no 'id').
    log, packer, _ = fresh()
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="summarizer must be None or a"):
        Compactor(log, packer, summarizer=summarizer)  # type: ignore[arg-type]
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="summarizer must be None or a"):
        turnlog.adapters.Session(log, "s", model="gpt-4o", summarizer=summarizer)  # type: ignore[arg-type]


def test_breaker_resets_once_a_request_is_below_the_warning_level() -> None:
    log, packer, _ = fresh()
    for t in range(3):
        turn(log, t, size=5)
    for _ in range(3):
        log.append("s", CompactionFailed(error="boom"))
    compactor = Compactor(log, packer)
    view = packer.projection("s", get_counter("cl100k_base"))
    assert compactor.breaker_open(view, SMALL)
    Replayer(packer).record("s", policy=SMALL)  # a small prompt: well below the warning level
    assert not compactor.breaker_open(packer.projection("s", get_counter("cl100k_base")), SMALL)


def test_overflow_recovery_compacts_without_a_model_and_records_a_recovery_pack() -> None:
    log, packer, _ = fresh()

    class Refusing:
        id = "refusing"

        def summarize(self, request: SummaryRequest) -> Summary:
            raise AssertionError("recovery must not call the model")

    compactor = Compactor(log, packer, summarizer=Refusing())
    for t in range(10):
        turn(log, t)
    request = Replayer(packer).record("s", policy=SMALL)
    log.append(
        "s",
        ProviderErrorReceived(
            request_seq=request.request_seq,
            status=400,
            code="context_length_exceeded",
            overflow=True,
            message="This model's maximum context length is 8192",
        ),
    )
    outcome = compactor.recover("s", policy=SMALL)
    assert outcome.status == "committed" and outcome.reason == "overflow"
    body = compactions(log)[-1][1]
    assert body.reason == "overflow" and body.summarizer == "extractive"
    recovered = Replayer(packer).record("s", policy=SMALL)
    assert recovered.packed.recovery
    assert log.get("s", recovered.request_seq).body.recovery  # type: ignore[union-attr]
    assert any(s.name == "recovery" for s in recovered.packed.stages)
    assert Replayer(packer).replay("s", recovered.request_seq).ok
    assert Replayer(packer).replay("s", request.request_seq).ok
    # Once a request is recorded after the error, packing is normal again.
    turn(log, 10)
    assert not packer.pack("s", policy=SMALL).recovery


def test_pinned_events_inside_a_compacted_span_stay_verbatim() -> None:
    log, packer, compactor = fresh()
    for t in range(8):
        turn(log, t)
    pinned = 3  # the first turn's tool-call message (position 3)
    log.append("s", EventsPinned(seqs=(pinned,)))
    for t in range(8, 12):
        turn(log, t)
    compactor.compact("s", policy=SMALL)
    packed = packer.pack("s", policy=SMALL)
    decisions = {d.pos: d for d in packed.decisions}
    assert decisions[pinned].decision == "verbatim"
    assert any(pinned in m.source for m in packed.prompt.messages)
    assert packed.prompt.problems() == []


def test_cost_model_prefers_keeping_a_cheap_cached_prompt() -> None:
    log, packer, compactor = fresh()
    for t in range(12):
        turn(log, t)
    view = packer.projection("s", get_counter("cl100k_base"))
    span = compactor.choose_span(view, SMALL)
    assert span is not None
    cheap_reads = compactor.estimate(view, SMALL, span)
    assert cheap_reads.freed_tokens > 0 and cheap_reads.horizon == SMALL.cache_horizon_turns
    pricey = Policy(**{**_fields(SMALL), "cache_write_price": 1000.0})
    assert not compactor.estimate(view, pricey, span).worth
    assert "freed=" in cheap_reads.describe()


def test_extractive_summary_has_the_structured_sections() -> None:
    log, packer, _ = fresh()
    for t in range(4):
        turn(log, t)
    view = packer.projection("s", get_counter("cl100k_base"))
    messages, _ = Compactor(log, packer)._full_span(view, 0, view.head)
    request = SummaryRequest(
        session="s",
        first_pos=0,
        last_pos=view.head,
        level=0,
        max_tokens=400,
        messages=tuple(messages),
    )
    summary = ExtractiveSummarizer(get_counter("cl100k_base")).summarize(request)
    for section in ("## Goal", "## Key Decisions", "## Relevant Files", "## Errors"):
        assert section in summary.text
    assert "mod0.py" in summary.text and "exit 1" in summary.text
    assert get_counter("cl100k_base").count(summary.text) <= 400


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.integers(4, 24),
    sizes=st.lists(st.integers(1, 200), min_size=24, max_size=24),
    pending_at=st.integers(0, 30),
    window=st.sampled_from([6_000, 9_000, 14_000]),
)
def test_compaction_properties_hold_over_generated_sessions(
    turns: int, sizes: list[int], pending_at: int, window: int
) -> None:
    policy = Policy(
        **{
            **_fields(SMALL),
            "context_window": window,
            "warning_buffer": window // 3,
            "compact_buffer": window // 4,
        }
    )
    log, packer, compactor = fresh()
    for t in range(turns):
        turn(log, t, size=sizes[t], pending=(t == pending_at))
        if t == pending_at:
            log.append(
                "s", ToolResultAdded(call_id=f"b{t}", tool_name="Bash", output="ok", exit_code=0)
            )
        compactor.maybe_compact("s", policy=policy)
        try:
            packed = packer.pack("s", policy=policy)
        except turnlog.errors.BudgetExceededError:
            continue
        assert packed.tokens <= policy.usable
        assert packed.prompt.problems() == []
    view = packer.projection("s", get_counter("cl100k_base"))
    tail_start = view.items[view.units[view.turn_starts[-1]].items[0]].pos
    seen: dict[int, set[int]] = {}
    for _, body in compactions(log):
        assert body.last_seq < tail_start
        covered = set(range(body.first_seq, body.last_seq + 1))
        assert not covered & seen.setdefault(body.level, set())
        seen[body.level] |= covered
        for unit in view.units:
            inside = [body.first_seq <= view.items[i].pos <= body.last_seq for i in unit.items]
            assert all(inside) or not any(inside)
    pack(view, policy)  # the final state packs deterministically


class Meanwhile:
    """The extractive summarizer, while another writer appends ``body`` to the session."""

    def __init__(self, log: turnlog.Log, body: turnlog.events.Body) -> None:
        self.log = log
        self.body = body
        self.inner = ExtractiveSummarizer(get_counter("cl100k_base"))

    @property
    def id(self) -> str:
        return self.inner.id

    def summarize(self, request: SummaryRequest) -> Summary:
        self.log.append("s", self.body)
        return self.inner.summarize(request)


def test_a_compaction_commits_after_what_others_appended_while_it_summarized() -> None:
    log, packer, _ = fresh()
    for t in range(12):
        turn(log, t)
    other = UserMessageAdded(text="a message that arrives during the summary")
    compactor = Compactor(log, packer, summarizer=Meanwhile(log, other))
    outcome = compactor.compact("s", policy=SMALL)
    assert outcome.status == "committed", outcome
    seqs = [e.seq for e in log.read("s") if e.body == other]
    assert seqs and all(seq > seqs[0] for seq, _ in compactions(log))
    assert log.verify().ok


def test_a_rewind_while_summarizing_keeps_the_compaction_out() -> None:
    log, packer, _ = fresh()
    for t in range(12):
        turn(log, t)
    compactor = Compactor(
        log, packer, summarizer=Meanwhile(log, SessionRewound(to_seq=3, reason="undo"))
    )
    with pytest.raises(CompactionError, match="rewound while summarizing"):
        compactor.compact("s", policy=SMALL)
    assert compactions(log) == [] and log.verify().ok


# -- full content --------------------------------------------------------------------------
class Recording:
    """Wraps a summarizer and keeps every request it got (and the log's head then)."""

    def __init__(self, inner: Summarizer, log: turnlog.Log) -> None:
        self.inner = inner
        self.log = log
        self.window = getattr(inner, "window", None)
        self.requests: list[tuple[SummaryRequest, int]] = []

    @property
    def id(self) -> str:
        return self.inner.id

    def summarize(self, request: SummaryRequest) -> Summary:
        head = self.log.head(request.session)
        self.requests.append((request, head.seq if head is not None else -1))
        return self.inner.summarize(request)


def big_output(words: int = 48_000) -> str:
    """About 300 KB of log lines with one word (SIDEHILL) and one error in the middle."""
    lines = [
        f"{i:06d} INFO processed row {i} of ledger batch {i % 97} ok" for i in range(words // 8)
    ]
    middle = len(lines) // 2
    lines[middle] = f"{middle:06d} ERROR row {middle}: SIDEHILL checksum mismatch"
    lines[middle + 1] = "ValueError: checksum mismatch in batch 42"
    return "\n".join(lines)


def big_session(log: turnlog.Log, output: str) -> None:
    log.append("s", SystemSectionSet(name="base", text="You are a coding agent."))
    log.append("s", UserMessageAdded(text="import the ledger and tell me what failed"))
    log.append(
        "s",
        AssistantMessageAdded(
            parts=(
                TextPart(text="Running the import."),
                ToolCall(
                    id="b0", name="Bash", arguments=json.dumps({"command": "ledger import big.csv"})
                ),
            )
        ),
    )
    log.append("s", ToolResultAdded(call_id="b0", tool_name="Bash", output=output, exit_code=1))
    log.append("s", AssistantMessageAdded(parts=(TextPart(text="The import failed."),)))
    for t in range(1, 4):
        turn(log, t)


def test_compaction_summarizes_a_blob_stored_output_from_its_whole_text() -> None:
    output = big_output()
    assert len(output.encode()) > 300_000
    log = turnlog.open(":memory:")
    big_session(log, output)
    [(_, stored)] = blob_results(log, "s")
    assert "SIDEHILL" not in stored.output  # the preview lacks the middle
    packer = Packer(log)
    counter = get_counter("cl100k_base")
    recording = Recording(ExtractiveSummarizer(counter), log)
    outcome = Compactor(log, packer, summarizer=recording).compact(
        "s", policy=msgspec.structs.replace(SMALL, segment_target_tokens=200_000)
    )
    assert outcome.status == "committed", outcome
    first = compactions(log)[0][1]
    [(request, _)] = [
        r for r in recording.requests if r[0].first_pos == first.first_seq and not r[0].merges
    ]
    assert output in request.source_text()
    assert first.prompt_hash == request.prompt_hash()
    # what it covers is counted whole: the output's tokens, not its preview's
    assert first.tokens_before >= counter.count(output) > 10 * counter.count(stored.output)
    assert outcome.covered_tokens >= first.tokens_before
    # the error in the middle of the output reaches the extractive summary
    assert "ValueError: checksum mismatch in batch 42" in first.summary


def blob_results(log: turnlog.Log, session: str) -> list[tuple[int, ToolResultAdded]]:
    out = []
    for e in log.read(session, kinds=["tool_result"]):
        assert isinstance(e.body, ToolResultAdded)
        if e.body.blob is not None:
            out.append((e.seq, e.body))
    return out


def part_summaries(log: turnlog.Log) -> dict[int, CompactionPartSummarized]:
    out = {}
    for e in log.read("s", kinds=["compaction_part"]):
        assert isinstance(e.body, CompactionPartSummarized)
        out[e.seq] = e.body
    return out


def summarize_big(window: int | None) -> tuple[turnlog.Log, Recording, Outcome]:
    log = turnlog.open(":memory:")
    big_session(log, big_output())
    packer = Packer(log)
    recording = Recording(ExtractiveSummarizer(get_counter("cl100k_base"), window=window), log)
    policy = msgspec.structs.replace(SMALL, segment_target_tokens=200_000)
    outcome = Compactor(log, packer, summarizer=recording).compact("s", policy=policy)
    return log, recording, outcome


def test_a_span_larger_than_the_summarizer_window_is_summarized_in_parts_then_merged() -> None:
    log, recording, outcome = summarize_big(window=8_000)
    assert outcome.status == "committed", outcome
    assert outcome.parts > 1
    counter = get_counter("cl100k_base")
    parts = part_summaries(log)
    first_seq, first = compactions(log)[0]
    assert first.parts and set(first.parts) <= set(parts)
    # every request fits the window; none reads a summary that is not in the log yet
    for request, head in recording.requests:
        assert (
            counter.count(request.instructions())
            + counter.count(request.source_text())
            + request.max_tokens
            <= 8_000
        )
        for child in request.children:
            assert any(b.summary == child and seq <= head for seq, b in parts.items())
    # the level-0 parts cut the transcript in order, each output's text contiguously
    level0 = sorted((s, b) for s, b in parts.items() if b.level == 0)
    assert [b.part for _, b in level0] == list(range(1, len(level0) + 1))
    for (_, a), (_, b) in itertools.pairwise(level0):
        assert (a.last_seq, a.last_offset) <= (b.first_seq, b.first_offset)
        if a.last_seq == b.first_seq:
            assert a.last_offset == b.first_offset
    assert all(seq < first_seq for seq in parts)
    # the final summary merges the last level and covers the whole output's tokens
    [(merge, _)] = [r for r in recording.requests if r[0].children and not r[0].parts]
    assert first.prompt_hash == merge.prompt_hash()
    assert first.tokens_before >= counter.count(big_output())
    assert log.verify().ok


def test_parts_are_cut_the_same_way_every_time() -> None:
    one, _, _ = summarize_big(window=8_000)
    two, _, _ = summarize_big(window=8_000)
    assert [e.hash for e in one.read("s")] == [e.hash for e in two.read("s")]


def test_without_a_window_a_large_span_is_one_request() -> None:
    log, _, outcome = summarize_big(window=None)
    assert outcome.status == "committed" and outcome.parts == 0
    assert not log.read("s", kinds=["compaction_part"])
    assert not compactions(log)[0][1].parts


class Verbose:
    """Answers every request with a summary of about 290 tokens."""

    window = 1_100

    @property
    def id(self) -> str:
        return "verbose"

    def summarize(self, request: SummaryRequest) -> Summary:
        return Summary(text="## Goal\n- " + "word " * 280, summarizer=self.id)


def test_a_window_too_small_to_merge_is_a_recorded_failure() -> None:
    log = turnlog.open(":memory:")
    big_session(log, big_output(words=8_000))
    policy = msgspec.structs.replace(SMALL, segment_target_tokens=200_000)
    outcome = Compactor(log, Packer(log), summarizer=Verbose()).compact("s", policy=policy)
    assert outcome.status == "failed"
    assert not compactions(log)
    failed = log.read("s", kinds=["compaction_failed"])[-1].body
    assert isinstance(failed, CompactionFailed) and "window" in failed.error


def test_the_demo_compaction_summarizes_its_outputs_from_their_full_text() -> None:
    from turnlog.tools import demo

    log = turnlog.open(":memory:")
    packer = Packer(log)
    recording = Recording(ExtractiveSummarizer(get_counter("cl100k_base")), log)
    compactor = Compactor(log, packer, summarizer=recording)

    def on_turn(result: demo.TurnResult) -> None:
        if not compactions_of(log):
            demo.pack_turn(
                log,
                packer,
                compactor,
                demo.DEFAULT_SESSION,
                result,
                policy=demo.policy_for_turn(result.turn),
                overflow=result.turn == demo.OVERFLOW_TURN,
            )

    demo.run_demo(log, turns=30, on_turn=on_turn)
    _, body = compactions_of(log)[0]
    lineage = log.lineage(demo.DEFAULT_SESSION)
    blobs = [
        e.body.blob
        for e in lineage[body.first_seq : body.last_seq + 1]
        if isinstance(e.body, ToolResultAdded) and e.body.blob is not None
    ]
    assert blobs
    [(request, _)] = [
        r for r in recording.requests if r[0].first_pos == body.first_seq and not r[0].merges
    ]
    counter = get_counter("cl100k_base")
    whole = 0
    for ref in blobs:
        text = log.blob(ref).decode()
        assert text in request.source_text()
        whole += counter.count(text)
    assert body.prompt_hash == request.prompt_hash()
    assert body.tokens_before >= whole > 100_000


def compactions_of(log: turnlog.Log) -> list[tuple[int, CompactionCommitted]]:
    out = []
    for e in log.read("demo", kinds=["compaction"]) if log.head("demo") else []:
        assert isinstance(e.body, CompactionCommitted)
        out.append((e.seq, e.body))
    return out


def test_erasing_an_output_erases_the_part_summaries_made_from_it() -> None:
    log, _, outcome = summarize_big(window=8_000)
    assert outcome.status == "committed"
    [(output, _)] = blob_results(log, "s")
    parts = list(part_summaries(log))
    erased = log.erase("s", [output], reason="leaked")
    assert set(parts) <= set(erased.seqs)
    assert not log.read("s", kinds=["compaction_part"])
    assert log.verify().ok

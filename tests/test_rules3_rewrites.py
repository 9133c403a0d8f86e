"""Rules 3: dedup and pruning applied together at a prefix break, and the cost model.

Sessions of reads, edits and shell commands are grown event by event and packed before
every assistant message, as an agent loop would. Between two reported breaks a request
only appends to the one before it; a break's rewrites are what dedup and pruning choose
on the log as it stood at that request; a recorded request replays the same as the log
grows; the cost model breaks for a large stale result and waits for a small one.
"""

from __future__ import annotations

import itertools
import json
from bisect import bisect_left, bisect_right
from fractions import Fraction
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnlog import Packer, Policy, Replayer
from turnlog._pack._dedup import Dedup, DedupIndex
from turnlog._pack._prune import Prune
from turnlog._pack._rewrites import Basis, Point, Rewrites, value
from turnlog.events import (
    AssistantMessageAdded,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.packing import Packed, Projection, get_counter
from turnlog.testing import memory_log

PROPERTY = settings(
    deadline=None,
    max_examples=12,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# a step: (tool, file, size); a turn: its steps
Step = tuple[str, int, int]
STEPS = st.tuples(
    st.sampled_from(("Read", "Read", "Edit", "Bash")), st.integers(0, 2), st.integers(5, 300)
)
TURNS = st.lists(st.lists(STEPS, min_size=0, max_size=4), min_size=2, max_size=14)


def _call(
    turn: int, step: int, tool: str, file: int, size: int, version: int
) -> tuple[ToolCall, str]:
    call = f"c{turn}_{step}"
    if tool == "Bash":
        args = {"command": f"make check {turn} {step}"}
        output = " ".join(f"b{turn}x{step}y{i}" for i in range(size))
    elif tool == "Edit":
        args = {"file_path": f"src/f{file}.py", "old_string": "a", "new_string": "b"}
        output = "edited"
    else:
        args = {"file_path": f"src/f{file}.py"}
        # the same file at the same version reads the same: identical later reads
        # supersede earlier ones; an edit makes earlier reads stale
        output = "\n".join(f"line {i} of f{file} v{version}" for i in range(size // 4 + 1))
    return ToolCall(id=call, name=tool, arguments=json.dumps(args)), output


def _grow(
    turns: list[list[Step]], policy: Policy, *, record: bool = False, reply: int = 0
) -> tuple[list[Packed], Packer, list[int]]:
    """Pack (or record) before every assistant message of a session grown event by
    event (each turn ends with a reply of ``reply`` more words); the packs, the packer
    and the recorded requests' seqs."""
    log = memory_log()
    log.append("s", SystemSectionSet(name="base", text="You are a careful agent."))
    packer = Packer(log)
    replayer = Replayer(packer)
    packs: list[Packed] = []
    seqs: list[int] = []

    def request() -> None:
        if record:
            recorded = replayer.record("s", policy=policy)
            packs.append(recorded.packed)
            seqs.append(recorded.request_seq)
        else:
            packs.append(packer.pack("s", policy=policy))

    versions = [0, 0, 0]
    for turn, steps in enumerate(turns):
        log.append("s", UserMessageAdded(text=f"task {turn}: look at the files again"))
        for step, (tool, file, size) in enumerate(steps):
            request()
            call, output = _call(turn, step, tool, file, size, versions[file])
            if tool == "Edit":
                versions[file] += 1
            log.append("s", AssistantMessageAdded(parts=(call,)))
            log.append("s", ToolResultAdded(call_id=call.id, tool_name=tool, output=output))
        request()
        words = " ".join(f"r{turn}x{i}" for i in range(reply))
        log.append("s", AssistantMessageAdded(parts=(TextPart(text=f"done {turn} {words}"),)))
    return packs, packer, seqs


def _trim_detail(packed: Packed) -> str:
    return next(s for s in packed.stages if s.name == "trim").detail


def _break(packed: Packed) -> bool:
    return _trim_detail(packed).startswith("prefix break")


@PROPERTY
@given(turns=TURNS, window=st.sampled_from((4_000, 8_000)))
def test_between_breaks_each_request_starts_with_the_previous_one(
    turns: list[list[Step]], window: int
) -> None:
    packs, _, _ = _grow(turns, Policy(context_window=window))
    for before, after in itertools.pairwise(packs):
        assert after.rules == 3 and after.tokens <= after.budget.usable
        if _break(after):
            continue
        assert (after.prompt.system, after.prompt.tools) == (
            before.prompt.system,
            before.prompt.tools,
        )
        assert after.prompt.messages[: len(before.prompt.messages)] == before.prompt.messages, (
            "a request between breaks changed its prefix"
        )


def _expected(packer: Packer, packed: Packed, policy: Policy) -> tuple[set[int], set[int]]:
    """What dedup and pruning choose on the log as it stood at a request, among the
    results the request keeps: ``(deduplicated, pruned)`` positions. Computed from the
    log prefix alone, one result at a time."""
    view = Projection(get_counter(policy.tokenizer))
    view.extend(packer.log.lineage("s")[: packed.head + 1])
    counter = view.counter
    items = view.items
    marks = DedupIndex(policy.tool_kinds)
    for item in items:
        if item.kind == "tool" and item.unit >= 0:
            marks.add(item)
    turns, assistants = view.turn_starts, view.assistant_units
    # the request's protected tail: its latest tail_steps steps, or its turn after the
    # opening message
    steps, opening = max(policy.tail_steps, 1), turns[-1]
    first = bisect_right(assistants, opening)
    tail = assistants[-steps] if len(assistants) - first > steps else opening + 1
    boundary = (
        turns[len(turns) - policy.prune_protect_turns]
        if len(turns) >= policy.prune_protect_turns
        else 0
    )
    results = [i for i in items if i.kind == "tool" and 0 <= i.unit < boundary]
    superseded = {
        i.pos
        for i in items
        if i.kind == "tool"
        and 0 <= i.unit < tail
        and i.index in marks.superseded
        and Dedup.tokens(marks.superseded[i.index], counter) < i.tokens
    }
    shielded: set[int] = set()
    budget = policy.prune_protect_tokens
    for item in reversed(results):  # the newest results within prune_protect_tokens
        if item.tokens > budget:
            break
        budget -= item.tokens
        shielded.add(item.pos)
    pruned = {
        i.pos
        for i in results
        if i.pos not in superseded
        and i.pos not in shielded
        and i.tokens > Prune.tokens(i, policy, counter)
    }
    kept = {d.pos for d in packed.decisions if d.decision != "trimmed"}
    return superseded & kept, pruned & kept


@PROPERTY
@given(turns=TURNS)
def test_a_breaks_rewrites_are_what_dedup_and_pruning_choose_on_that_prefix(
    turns: list[list[Step]],
) -> None:
    policy = Policy(context_window=4_000, truncate=False, clip_ratio=1.0).resolved()
    packs, packer, _ = _grow(turns, policy)
    broke = False
    for packed in packs:
        if not _break(packed) or "kept since" in _trim_detail(packed):
            continue
        # the break's own request: its rewrites are chosen on this log prefix
        deduped = {d.pos for d in packed.decisions if d.decision == "deduplicated"}
        pruned = {d.pos for d in packed.decisions if d.decision == "pruned"}
        assert (deduped, pruned) == _expected(packer, packed, policy)
        broke = broke or bool(deduped or pruned)
    for before, after in itertools.pairwise(packs):
        if _break(after):
            continue
        # between breaks exactly the rewrites of the latest break stay
        for d in after.decisions:
            if d.decision in ("deduplicated", "pruned"):
                assert before.decisions[d.pos].decision == d.decision, d


@PROPERTY
@given(turns=TURNS, window=st.sampled_from((4_000, 8_000)))
def test_a_recorded_request_replays_the_same_as_the_log_grows(
    turns: list[list[Step]], window: int
) -> None:
    packs, packer, seqs = _grow(turns, Policy(context_window=window), record=True)
    replayer = Replayer(packer)
    for packed, seq in zip(packs, seqs, strict=True):
        again = replayer.repack("s", seq)
        assert again.prompt.encode() == packed.prompt.encode()
        assert again.decisions == packed.decisions and again.stages == packed.stages


def _one_big_result(reply: int) -> list[Packed]:
    """A session whose second turn runs one huge shell command (truncated to about
    1,900 tokens), followed by turns of a small command and a reply of ``reply``
    words."""
    turns: list[list[Step]] = [[("Bash", 0, 20)], [("Bash", 0, 6_000)]]
    turns += [[("Bash", 0, 5)] for _ in range(8)]
    policy = Policy(context_window=32_000, prune_protect_tokens=200)
    return _grow(turns, policy, reply=reply)[0]


def test_the_cost_model_breaks_for_a_large_stale_result() -> None:
    packs = _one_big_result(reply=20)
    chosen = [p for p in packs if "chosen by the cost model" in _trim_detail(p)]
    assert chosen and _break(chosen[0])
    first = chosen[0]
    assert first.pressure_before < 1  # under the high watermark: nothing forced it
    pruned = [d for d in first.decisions if d.decision == "pruned"]
    assert any(d.original_tokens > 1_500 for d in pruned)  # the result, truncated
    assert all("rewritten at prefix break" in d.detail for d in pruned)
    assert "estimate over 10 requests" in _trim_detail(first)


def test_the_cost_model_defers_a_rewrite_that_would_write_more_than_it_saves() -> None:
    # the same stale result, but followed by far more than it saves: breaking would
    # write everything after it to the cache again for a saving that does not pay
    packs = _one_big_result(reply=1_500)
    assert not any("chosen by the cost model" in _trim_detail(p) for p in packs)
    deferred = [p for p in packs if "rewrites deferred by the cost model" in _trim_detail(p)]
    assert deferred
    assert all(d.decision != "pruned" for d in deferred[-1].decisions)


def test_the_decision_is_exact_arithmetic_at_the_policy_prices() -> None:
    policy = Policy(cache_read_price=0.3, cache_write_price=3.75, cache_horizon_turns=10)
    # 0.3 and 3.75 as the binary fractions they are; no rounding in the comparison
    read, write = Fraction(0.3), Fraction(3.75)
    assert value(policy, 1_150, 1_000) == 1_150 * 10 * read - 1_000 * (write - read)
    assert value(policy, 1_200, 1_000) > 0 > value(policy, 1_100, 1_000)
    even = Policy(cache_read_price=0.5, cache_write_price=1.5, cache_horizon_turns=2)
    assert value(even, 100, 100) == 0  # a break that gains nothing is not made


# many reads of few files: every later identical read makes a dedup mark
READS = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from(("Read", "Read", "Read", "Read", "Edit", "Bash")),
            st.integers(0, 1),
            st.integers(5, 200),
        ),
        min_size=0,
        max_size=6,
    ),
    min_size=2,
    max_size=12,
)


@settings(PROPERTY, max_examples=40)
@given(
    turns=READS,
    window=st.sampled_from((4_000, 8_000)),
    tail_steps=st.sampled_from((1, 2, 4)),
    protect=st.sampled_from((0, 1, 2)),
)
def test_rewrites_built_up_over_a_replay_are_those_of_a_walk_over_every_mark(
    turns: list[list[Step]], window: int, tail_steps: int, protect: int
) -> None:
    """Every `Rewrites` a replay asks for, most built from the previous point's, answers
    `saving`, `items` and `first_change` (against every point asked for before it) as
    `_Reference` does, which walks every dedup mark at that point, at every cut."""
    built: list[bool] = []  # per `Rewrites` built: whether from an earlier point's
    seen: list[Rewrites] = []
    init, rewrites = Rewrites.__init__, Basis.rewrites

    def build(self: Rewrites, basis: Basis, point: Point, base: Rewrites | None = None) -> None:
        built.append(base is not None)
        init(self, basis, point, base)

    def check(self: Basis, point: Point) -> Rewrites:
        found = rewrites(self, point)
        if found in seen:
            return found
        ref = _Reference(self, point)
        units = range(-1, max([*self.result_units, point.tail, point.boundary]) + 3)
        for cut in units:
            assert found.saving(cut) == ref.saving(cut), (point, cut)
            assert found.items(cut) == ref.items(cut), (point, cut)
            for earlier in (None, *seen[-6:]):
                mine = found.first_change(earlier, cut)
                old = ref.first_change(
                    None if earlier is None else _Reference(self, earlier.point), cut
                )
                assert mine == old, (point, earlier, cut)
        seen.append(found)
        return found

    policy = Policy(context_window=window, tail_steps=tail_steps, prune_protect_turns=protect)
    with (
        mock.patch.object(Rewrites, "__init__", build),
        mock.patch.object(Basis, "rewrites", check),
    ):
        _grow(turns, policy)
    if sum(map(len, turns)) >= 12:
        assert any(built), "no rewrites were built up from an earlier point's"


class _Reference:
    """`Rewrites` walking every mark so far at each point, as first written: what the
    built-up `Rewrites` must equal."""

    def __init__(self, basis: Basis, point: Point) -> None:
        self.basis, self.point = basis, point
        saving, shield = basis.saving, point.shield
        prune = basis.policy.prune
        deduped = sorted(
            (unit, i, dsave - (saving[i] if prune and p < shield and saving[i] > 0 else 0))
            for _, unit, i, dsave, p in basis.marks[: point.marks]
            if unit < point.tail
        )
        self.units = [unit for unit, _, _ in deduped]
        self.deduped = [i for _, i, _ in deduped]
        after = [0]  # after[k]: what the marks from the k-th on save (by unit)
        for _, _, delta in reversed(deduped):
            after.append(after[-1] + delta)
        after.reverse()
        self.after = after

    def saving(self, start: int) -> int:
        """Tokens the rewrites save in units from ``start`` on."""
        basis = self.basis
        p = bisect_left(basis.result_units, start)
        pruned = basis.psum[self.point.shield] - basis.psum[p] if p < self.point.shield else 0
        return pruned + self.after[bisect_left(self.units, start)]

    def items(self, cut: int) -> tuple[list[int], list[int]]:
        """``(deduplicated, pruned)`` item indexes from unit ``cut`` on, ascending."""
        basis = self.basis
        deduped = self.deduped[bisect_left(self.units, cut) :]
        if not basis.policy.prune:
            return sorted(deduped), []
        skip = set(self.deduped)
        saving, results = basis.saving, basis.results
        pruned = [
            results[p]
            for p in range(bisect_left(basis.result_units, cut), self.point.shield)
            if saving[results[p]] > 0 and results[p] not in skip
        ]
        return sorted(deduped), pruned

    def first_change(self, earlier: _Reference | None, cut: int) -> int:
        """The first unit from ``cut`` on whose results these rewrites change beyond the
        ``earlier`` break's (-1: none)."""
        basis = self.basis
        known: set[int] = set(earlier.deduped) if earlier is not None else set()
        first = -1
        for unit, i in zip(self.units, self.deduped, strict=True):
            if unit >= cut and i not in known:
                first = unit
                break
        if basis.policy.prune:
            skip = set(self.deduped)
            saving, results = basis.saving, basis.results
            start = bisect_left(basis.result_units, cut)
            if earlier is not None:
                start = max(start, earlier.point.shield)
            stop = self.point.shield
            if first >= 0:
                stop = min(stop, bisect_right(basis.result_units, first))
            for p in range(start, stop):
                i = results[p]
                if saving[i] > 0 and i not in skip and basis.psum[p + 1] > basis.psum[p]:
                    unit = basis.result_units[p]
                    return unit if first < 0 else min(unit, first)
        return first


@settings(PROPERTY, max_examples=30)
@given(
    turns=READS,
    window=st.sampled_from((4_000, 8_000)),
    tail_steps=st.sampled_from((1, 2, 4)),
    protect=st.sampled_from((0, 1, 2)),
)
def test_rewrites_answer_as_the_walk_after_the_replay_has_moved_past_them(
    turns: list[list[Step]], window: int, tail_steps: int, protect: int
) -> None:
    """The rewrites a replay asked for keep answering `saving`, `items`, `first_change`
    and `beyond` as `_Reference` does once the replay has moved on to later points or
    later packs (against earlier and later points alike), at every cut."""
    asked: list[Rewrites] = []
    rewrites = Basis.rewrites

    def check(self: Basis, point: Point) -> Rewrites:
        found = rewrites(self, point)
        if found in asked:
            return found
        asked.append(found)
        units = range(-1, max([*self.result_units, point.tail, point.boundary]) + 3)
        recent = asked[-4:]
        for old in recent:
            if old.version != self.version:
                continue
            ref = _Reference(self, old.point)
            for cut in units:
                assert old.saving(cut) == ref.saving(cut), (old.point, cut)
                assert old.items(cut) == ref.items(cut), (old.point, cut)
                for other in (None, *recent):
                    if other is not None and other.version != self.version:
                        continue
                    earlier = None if other is None else _Reference(self, other.point)
                    mine = old.first_change(other, cut)
                    assert mine == ref.first_change(earlier, cut), (old.point, other, cut)
                    saved = ref.saving(cut) - (earlier.saving(cut) if earlier else 0)
                    changed = ref.first_change(earlier, cut) if saved > 0 else -1
                    expected = None if changed < 0 else (saved, changed, ref.saving(changed))
                    assert old.beyond(other, cut) == expected, (old.point, other, cut)
        return found

    policy = Policy(context_window=window, tail_steps=tail_steps, prune_protect_turns=protect)
    with mock.patch.object(Basis, "rewrites", check):
        _grow(turns, policy)

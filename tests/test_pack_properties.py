"""Properties of `turnlog.pack` over generated sessions, checked with `turnlog.testing`.

Sessions come from `turnlog.testing.sessions` (parallel tool calls, errors, huge and
blob-sized outputs, late and out-of-order results, notifications, system-section
changes, pins, compactions, a rewind, a fork), policies from
`turnlog.testing.policies` (windows from 2k to 200k, every stage firing). The same
module is what users check their own stages with.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import blake3
import msgspec
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from turnlog import Draft, Log, Packer, Policy, Replayer, pack
from turnlog.errors import BudgetExceededError, InvalidArgumentError, PolicyError
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    Event,
    NotificationAdded,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.packing import Packed, PackState, Projection, StageReport, get_counter
from turnlog.testing import (
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
    policies,
    project,
    sessions,
)

# At least 150 examples; more under a bigger profile (HYPOTHESIS_PROFILE=thorough).
# (The loaded profile is the parent: HYPOTHESIS_PROFILE=triage skips shrinking.)
FAST = settings(
    settings.default,
    deadline=None,
    max_examples=max(150, settings().max_examples),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(
    settings.default,
    deadline=None,
    max_examples=1_500,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

_CONVERSATION = (UserMessageAdded, AssistantMessageAdded, ToolResultAdded, NotificationAdded)


def _built(items: list[SessionItem]) -> tuple[Log, str]:
    log = memory_log()
    return log, build(log, "s", items)


def _pack_or_none(view: Projection, policy: Policy) -> Packed | None:
    try:
        return pack(view, policy)
    except BudgetExceededError as exc:
        check_overflow(view, policy, exc)
        return None


# -- every invariant, at every budget -----------------------------------------------------------
@FAST
@given(items=sessions(), policy=policies())
def test_every_invariant_holds_at_any_budget(items: list[SessionItem], policy: Policy) -> None:
    log, session = _built(items)
    check_all(lambda: project(log, session), policy)


@FAST
@given(items=sessions(), policy=policies(min_window=2_000, max_window=8_000))
def test_every_invariant_holds_in_small_windows(items: list[SessionItem], policy: Policy) -> None:
    log, session = _built(items)
    check_all(lambda: project(log, session), policy)


@pytest.mark.slow
@SLOW
@given(items=sessions(max_events=120), policy=policies())
def test_every_invariant_holds_thoroughly(items: list[SessionItem], policy: Policy) -> None:
    log, session = _built(items)
    check_all(lambda: project(log, session), policy)


@FAST
@given(items=sessions(), policy=policies(max_window=16_000))
def test_each_checker_passes_on_its_own(items: list[SessionItem], policy: Policy) -> None:
    # The same checks as check_all, one by one, so a failure names the property.
    log, session = _built(items)
    view = project(log, session)
    packed = _pack_or_none(view, policy)
    if packed is None:
        return
    check_budget(packed, policy)
    check_tool_pairs(packed.prompt)
    check_order(view, packed)
    check_mandatory_tail(view, packed, policy)
    check_decisions(view, packed)
    check_protected(view, packed)
    check_summaries(view, packed, policy)


# -- a custom stage, checked the way users check theirs ----------------------------------------
def drop_old_notifications(state: PackState) -> StageReport:
    """The custom stage of docs/packing.md: notifications older than 5 turns go."""
    n = 0
    for unit in state.view.units:
        first = state.view.items[unit.items[0]]
        if first.kind == "notification" and first.turn < len(state.view.turn_starts) - 5:
            n += state.drop_unit(unit.index, decision="trimmed", rule="custom.notifications")
    return StageReport(name="old-notifications", fired=n > 0, events=n)


@FAST
@given(
    items=sessions(),
    policy=policies(max_window=32_000),
    position=st.sampled_from(("first", "before:dedup", "before:trim", "last")),
)
def test_a_custom_stage_keeps_every_invariant(
    items: list[SessionItem], policy: Policy, position: str
) -> None:
    check_stage("old-notifications", drop_old_notifications, items, policy, position=position)


def reduce_everything(state: PackState) -> StageReport:
    """A careless stage: it tries every change on every item and relies on the
    `PackState` methods to refuse what is protected and to keep exchanges whole."""
    n = 0
    for item in state.view.items:
        if item.unit < 0:
            continue
        if item.index % 3 == 0:
            n += state.summarize(item.index, "custom.greedy", "one item of its unit")
        elif item.index % 3 == 1:
            n += state.replace(item.index, "[reduced]", decision="pruned", rule="custom.greedy")
        else:
            n += state.drop_unit(item.unit, decision="trimmed", rule="custom.greedy")
    return StageReport(name="greedy", fired=n > 0, events=n)


@FAST
@given(
    items=sessions(),
    policy=policies(max_window=32_000),
    position=st.sampled_from(("first", "after:summaries", "before:trim", "last")),
)
def test_a_careless_stage_cannot_break_the_protections(
    items: list[SessionItem], policy: Policy, position: str
) -> None:
    check_stage("greedy", reduce_everything, items, policy, position=position)


# -- projections: incremental == fresh, reuse across policies == fresh -----------------------------
@FAST
@given(items=sessions(), policy=policies(max_window=32_000), data=st.data())
def test_incremental_projection_packs_like_a_fresh_one(
    items: list[SessionItem], policy: Policy, data: st.DataObject
) -> None:
    log, session = _built(items)
    lineage = log.lineage(session)
    stops = set(data.draw(st.lists(st.integers(0, max(0, len(lineage) - 1)), max_size=4)))
    view = Projection(get_counter("cl100k_base"))
    for i, event in enumerate(lineage):
        view.apply(event)
        if i in stops:
            with contextlib.suppress(BudgetExceededError):
                pack(view, policy)  # fills the projection's caches midway
    check_deterministic(lambda: view, policy)
    fresh = project(log, session)
    a = _pack_or_none(view, policy)
    b = _pack_or_none(fresh, policy)
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert a.prompt.encode() == b.prompt.encode(), a.prompt.first_difference(b.prompt)
        assert a.decisions == b.decisions


# The fields packing reads (pack.py, view.py), in the groups a cache would key on
# together: the second policy differs from the first in one group (and maybe a field
# more), so that a cache keyed on too few of them is caught.
_GROUPS = (
    ("truncate", "truncate_lines", "truncate_bytes", "truncate_head_ratio"),
    ("recall_max_chars", "recall_max_tokens"),
    ("dedup", "prune", "trim"),
    ("prune_protect_turns", "prune_protect_tokens", "prune_min_savings"),
    ("prune_reference_bonus", "prune_decision_bonus"),
    ("warning_buffer", "warning_ratio", "compact_buffer", "blocking_buffer", "blocking_ratio"),
    ("context_window", "output_reserve", "safety_margin"),
    ("summary_budget", "cache_breakpoints"),
)
_FIELDS = tuple(f for group in _GROUPS for f in group)


@FAST
@given(
    items=sessions(),
    first=policies(max_window=32_000),
    other=policies(max_window=32_000),
    group=st.sampled_from(_GROUPS),
    extra=st.sets(st.sampled_from(_FIELDS), max_size=1),
)
def test_a_projection_reused_under_another_policy_packs_like_a_fresh_one(
    items: list[SessionItem], first: Policy, other: Policy, group: tuple[str, ...], extra: set[str]
) -> None:
    fields = set(group) | extra
    try:
        second = msgspec.structs.replace(first, **{f: getattr(other, f) for f in fields})
    except PolicyError:
        assume(False)
        return
    log, session = _built(items)
    view = project(log, session)
    _pack_or_none(view, first)
    reused = _pack_or_none(view, second)
    fresh = _pack_or_none(project(log, session), second)
    assert (reused is None) == (fresh is None)
    if reused is not None and fresh is not None:
        assert reused.prompt.encode() == fresh.prompt.encode(), reused.prompt.first_difference(
            fresh.prompt
        )
        assert reused.decisions == fresh.decisions


# -- determinism across processes ---------------------------------------------------------------
_CHILD = textwrap.dedent("""
    import sys, msgspec, blake3
    from turnlog import Policy
    from turnlog.events import Event
    from turnlog.errors import BudgetExceededError, PolicyError
    from turnlog import pack
    from turnlog.packing import get_counter
    from turnlog.packing import Projection
    cases = msgspec.msgpack.decode(open(sys.argv[1], "rb").read(),
                                   type=list[tuple[list[Event], list[Policy]]])
    for events, policies in cases:
        for policy in policies:
            view = Projection(get_counter("cl100k_base"))
            view.extend(events)
            try:
                packed = pack(view, policy)
            except BudgetExceededError as exc:
                print("over", exc.needed)
                continue
            print(packed.prompt.hash, blake3.blake3(msgspec.msgpack.encode(
                packed.decisions)).hexdigest())
""")


def _pack_lines(cases: list[tuple[list[Event], list[Policy]]]) -> list[str]:
    lines = []
    for events, chosen in cases:
        for policy in chosen:
            view = Projection(get_counter("cl100k_base"))
            view.extend(events)
            try:
                packed = pack(view, policy)
            except BudgetExceededError as exc:
                lines.append(f"over {exc.needed}")
                continue
            lines.append(
                f"{packed.prompt.hash} "
                f"{blake3.blake3(msgspec.msgpack.encode(packed.decisions)).hexdigest()}"
            )
    return lines


@settings(
    settings.default,
    deadline=None,
    max_examples=2,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_packing_is_identical_across_hash_seeds(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cases: list[tuple[list[Event], list[Policy]]] = []
    for _ in range(4):
        items = data.draw(sessions())
        chosen = [data.draw(policies(max_window=w)) for w in (4_000, 16_000, 128_000)]
        log, session = _built(items)
        cases.append((log.lineage(session), chosen))
    path = tmp_path_factory.mktemp("seeds") / "cases.msgpack"
    path.write_bytes(msgspec.msgpack.encode(cases))
    script = tmp_path_factory.mktemp("child") / "child.py"
    script.write_text(_CHILD)
    outputs = []
    for seed in ("1", "999"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, str(script), str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout.splitlines())
    assert outputs[0] == outputs[1], "PYTHONHASHSEED=1 and =999 pack different prompts"
    assert outputs[0] == _pack_lines(cases), "a child process packs differently from this one"


# -- requests: replay stays stable as the log grows -----------------------------------------------
@FAST
@given(items=sessions(), policy=policies(max_window=64_000), data=st.data())
def test_replay_of_an_earlier_request_survives_later_appends(
    items: list[SessionItem], policy: Policy, data: st.DataObject
) -> None:
    split = data.draw(st.integers(1, max(1, len(items))))
    log = memory_log()
    session = build(log, "s", items[:split])
    packer = Packer(log)
    replayer = Replayer(packer)
    try:
        recorded = replayer.record(session, policy=policy)
    except BudgetExceededError:
        assume(False)
        return
    build(log, session, items[split:])
    later = data.draw(policies(max_window=64_000))
    with contextlib.suppress(BudgetExceededError):
        replayer.record(session, policy=later)  # a second request on the grown log
    for fresh in (replayer, Replayer(Packer(log))):
        result = fresh.replay(session, recorded.request_seq)
        assert result.ok, result.difference
    assert Replayer(Packer(log)).repack(session, recorded.request_seq).prompt.encode() == (
        recorded.packed.prompt.encode()
    )


@FAST
@given(items=sessions(), data=st.data())
def test_a_packer_replaying_many_requests_packs_each_like_a_fresh_packer(
    items: list[SessionItem], data: st.DataObject
) -> None:
    # Requests recorded under changing policies between appends (forks, rewinds and
    # compactions included); one Packer replays them all, in order and shuffled,
    # growing its kept projection, and must give each request's bytes and decisions
    # exactly as a Packer that projects that request from nothing.
    cuts = sorted(
        set(data.draw(st.lists(st.integers(1, max(1, len(items))), min_size=1, max_size=5)))
    )
    log = memory_log()
    recorded: dict[str, list[int]] = {}
    session, start = "s", 0
    for cut in [*cuts, len(items)]:
        session = build(log, session, items[start:cut])
        start = cut
        if log.head(session) is None:
            continue
        with contextlib.suppress(BudgetExceededError):
            done = Replayer(Packer(log)).record(
                session, policy=data.draw(policies(max_window=64_000))
            )
            recorded.setdefault(session, []).append(done.request_seq)
    assume(recorded)
    for name, seqs in recorded.items():
        results = list(Replayer(Packer(log)).replay_all(name))
        assert [r.request_seq for r in results] == seqs
        assert all(r.ok for r in results), [r.difference for r in results]
        packer = Packer(log)
        replayer = Replayer(packer)
        for seq in data.draw(st.permutations(seqs)):
            kept, fresh = replayer.repack(name, seq), Replayer(Packer(log)).repack(name, seq)
            assert kept.prompt.encode() == fresh.prompt.encode()
            assert kept.decisions == fresh.decisions
            assert kept.stages == fresh.stages


# -- cache-stable prefixes ------------------------------------------------------------------------
def _has_placeholder(view: Projection, packed: Packed) -> bool:
    """A tool message standing in for a result that never came (not at the end)."""
    for message in packed.prompt.messages:
        index = view.item_at.get(message.source[0])
        if message.role == "tool" and index is not None and view.items[index].kind != "tool":
            return True
    return False


def _deferred_summary(view: Projection, packed: Packed) -> bool:
    """A committed compaction covers an event that stays in the prompt (protected)."""
    covered: set[int] = set()
    for pos in view.compactions:
        body = view.events[pos].body
        if pos not in view.rewound and isinstance(body, CompactionCommitted):
            covered.update(range(body.first_seq, body.last_seq + 1))
    return any(
        pos in view.item_at and packed.decisions[pos].decision != "summarized"
        for pos in covered
        if pos < len(packed.decisions)
    )


def _prefix_break(packed: Packed) -> bool:
    """Rules 3: the request reports a prefix break (its rewrites may change the prefix
    below the warning level when the cost model chooses them)."""
    trim = next((r for r in packed.stages if r.name == "trim"), None)
    return trim is not None and trim.detail.startswith("prefix break")


def _tokens_before(packed: Packed) -> int:
    """The prompt's tokens before any stage reduced it (the budget stage's report)."""
    return next(r.tokens_before for r in packed.stages if r.name == "budget")


def _body(item: SessionItem) -> object:
    return item.body if isinstance(item, Draft) else item


@FAST
@given(items=sessions(), policy=policies(min_window=16_000))
def test_prompt_of_request_n_is_a_prefix_of_request_n_plus_1(
    items: list[SessionItem], policy: Policy
) -> None:
    # A request after every appended item; each pair (N, N+1) with a conversation
    # event in between and both below the warning level is compared. The projection
    # is the packer's incremental one.
    log = memory_log()
    packer = Packer(log)
    counter = get_counter(policy.tokenizer)
    session = "s"
    previous: Packed | None = None
    for step, item in enumerate(items):
        session = build(log, session, [item])
        view = packer.projection(session, counter)
        packed = _pack_or_none(view, policy)
        # At the warning level (pruning runs from it on; a threshold counts as crossed
        # only above it) the history may be reduced, and under rules 2 summaries replace
        # what they cover from the summary gate on: no prefix to compare.
        reduced_from = packed.budget.warning if packed is not None else 0
        if packed is not None and policy.rules_version >= 2:
            reduced_from = min(reduced_from, math.ceil(policy.summary_gate * policy.usable))
        if packed is None or _tokens_before(packed) >= reduced_from:
            previous = None
            continue
        if (
            previous is not None
            and isinstance(_body(item), _CONVERSATION)
            and not _prefix_break(packed)
        ):
            assert packed.prompt.system == previous.prompt.system, f"step {step}: system changed"
            assert packed.prompt.tools == previous.prompt.tools, f"step {step}: tools changed"
            n = len(previous.prompt.messages)
            assert len(packed.prompt.messages) >= n, f"step {step}: fewer messages than before"
            for i, (a, b) in enumerate(
                zip(previous.prompt.messages, packed.prompt.messages, strict=False)
            ):
                assert a == b, (
                    f"step {step}: message {i} of request N (from positions "
                    f"{list(a.source)}) changed in request N+1 (from positions "
                    f"{list(b.source)})"
                )
        # A result that answers a call the prompt had to close with a placeholder
        # necessarily rewrites that message; a compaction that covers protected units
        # applies once the tail moves on: such a request is no prefix to compare.
        previous = (
            None if _has_placeholder(view, packed) or _deferred_summary(view, packed) else packed
        )


# -- monotonicity in the window -------------------------------------------------------------------
@FAST
@given(
    items=sessions(),
    policy=policies(max_window=64_000),
    extra=st.sampled_from((1, 100, 1_000, 8_000, 64_000)),
)
def test_a_larger_window_never_reduces_what_a_smaller_one_kept(
    items: list[SessionItem], policy: Policy, extra: int
) -> None:
    larger = msgspec.structs.replace(policy, context_window=policy.context_window + extra)
    log, session = _built(items)
    small = _pack_or_none(project(log, session), policy)
    large = _pack_or_none(project(log, session), larger)
    if small is None:
        return
    assert large is not None, (
        f"window {larger.context_window} overflows where {policy.context_window} fits"
    )
    reduced = {"trimmed", "pruned", "deduplicated", "summarized"}
    for a, b in zip(small.decisions, large.decisions, strict=True):
        # rules 3: a rewrite the cost model chose saves cache reads, not room; it does
        # not depend on the window
        if a.decision == "verbatim" and "chosen by the cost model" not in b.detail:
            assert b.decision not in reduced, (
                f"position {a.pos} ({a.kind}) is verbatim at window {policy.context_window} but "
                f"{b.decision} ({b.rule}: {b.detail}) at window {larger.context_window}"
            )


# -- the generators themselves --------------------------------------------------------------------
def explore_generators(examples: int = 300) -> dict[str, list[str] | int]:
    """Pack derandomized generated sessions; what they reached (run in a child process by
    the test below)."""
    seen: set[str] = set()
    fired: set[str] = set()
    overflowed = []

    @settings(
        deadline=None,
        max_examples=examples,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(items=sessions(), policy=policies(max_window=32_000))
    def explore(items: list[SessionItem], policy: Policy) -> None:
        log, session = _built(items)
        # rules 3 dedup and prune only in a recovery pack: rules 2 show them on pressure
        chosen = (
            [policy] if policy.rules != 3 else [policy, msgspec.structs.replace(policy, rules=2)]
        )
        for one in chosen:
            try:
                packed = pack(project(log, session), one)
            except BudgetExceededError:
                overflowed.append(1)
                continue
            seen.update(d.decision for d in packed.decisions)
            seen.update(d.rule for d in packed.decisions)
            fired.update(r.name for r in packed.stages if r.fired)

    explore()
    return {"seen": sorted(seen), "fired": sorted(fired), "overflowed": len(overflowed)}


def test_generated_sessions_reach_every_decision_and_stage() -> None:
    # In a child process: hypothesis mixes the literals of every module loaded so far
    # into what it generates, so in this process the examples would depend on which
    # tests ran before this one; there they depend only on the code.
    code = (
        "import json, sys; sys.path.insert(0, 'tests'); import test_pack_properties as t; "
        "print(json.dumps(t.explore_generators()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    seen, fired = set(found["seen"]), set(found["fired"])
    for decision in (
        "verbatim",
        "truncated",
        "deduplicated",
        "pruned",
        "summarized",
        "trimmed",
        "dropped",
        "not_a_prompt_event",
        "orphan",
        "rewind",
        "truncate.blob_preview",
        "dedup.tier1",
        "dedup.tier2",
    ):
        assert decision in seen, f"no generated session gave {decision!r}"
    assert {"truncate", "summaries", "dedup", "prune", "trim"} <= fired
    assert found["overflowed"], "no generated session overflowed its budget"


def test_turnlog_does_not_import_hypothesis() -> None:
    code = (
        "import sys, turnlog, turnlog._pack, turnlog._packer; "
        "assert 'hypothesis' not in sys.modules and 'turnlog.testing' not in sys.modules"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_replayer_borrows_a_packers_caches_and_refuses_anything_else() -> None:
    log = memory_log()
    log.append("s", UserMessageAdded(text="hello"))
    packer = Packer(log)
    replayer = Replayer(packer)
    recorded = replayer.record("s", policy=Policy(context_window=8_000, output_reserve=1_000))
    assert replayer.packer is packer and replayer.log is log
    assert replayer.replay("s", recorded.request_seq).ok
    # Recorded requests are the replayer's job: the packer's 0.2.0 spelling only forwards.
    with pytest.warns(DeprecationWarning, match=r"use turnlog\.Replayer\(packer\)\.replay"):
        assert packer.replay("s", recorded.request_seq).ok  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgumentError, match="packer must be a Packer"):
        Replayer(log)  # type: ignore[arg-type]

"""The demo: a realistic coding-agent session, appended turn by turn, packed every turn.

Theory of operation
-------------------
The session is data: ``demo_session.jsonl.gz`` beside this module holds one line
per turn, each the JSON list of that turn's drafts (events with their times,
idempotency keys ``demo-<turn>-<i>`` and meta): an agent working on a made-up
Python project (``ledgerly``) for `MAX_TURNS` turns, written once by a
deterministic generator (``tests/demo/generate.py``; ``tests/test_demo.py`` checks
that the file is what it writes). Nothing here reads a clock or draws a random
number, so ``demo_events(n) == demo_events(m)[:n]`` for ``n <= m``.

`run_demo` appends one batch per turn. Running the demo again on the same store
finds every batch already stored and appends nothing; a longer run appends only
the new turns. A per-turn callback (``on_turn``) lets callers act after each turn:
``turnlog demo`` packs and records a request after every turn with `pack_turn`
(compaction, memories, an overflow recovery at `OVERFLOW_TURN`).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources

import msgspec
import turnlog
from turnlog import Compactor, Draft, Packer, Replayer
from turnlog.events import ProviderErrorReceived, ResponseReceived, Usage, UserMessageAdded
from turnlog.memories import MemoryManager
from turnlog.validation import check_integer

__all__ = [
    "DEFAULT_SESSION",
    "DEFAULT_TURNS",
    "MAX_TURNS",
    "MODEL",
    "START_TIME",
    "DemoResult",
    "TurnResult",
    "demo_events",
    "run_demo",
]

#: Default number of turns of the demo session.
DEFAULT_TURNS = 40


#: Default session id the demo writes to.
DEFAULT_SESSION = "demo"


#: Time of the first event: 2024-03-12T09:00:00Z, in microseconds since the epoch.
START_TIME = 1_710_234_000_000_000


#: The (made-up) model name on assistant messages.
MODEL = "coder-large-2"

#: Turns the demo session has (the lines of the data file).
MAX_TURNS = 100
#: The data file, beside this module.
DATA_FILE = "demo_session.jsonl.gz"

_TURN = msgspec.json.Decoder(list[Draft])


@dataclass(frozen=True)
class TurnResult:
    """What one turn of `run_demo` appended.

    Attributes:
        turn: the turn number (from 1).
        drafts: the turn's events as generated.
        appended: where the batch landed (``duplicate`` when it was already stored).
        blobs: blob refs held by the turn's stored events.
        user_text: the turn's user message ("" if it has none).
    """

    turn: int
    drafts: list[Draft]
    appended: turnlog.log.Appended
    blobs: int
    user_text: str


@dataclass(frozen=True)
class DemoResult:
    """Summary of a `run_demo` call.

    Attributes:
        session: the session written to.
        turns: turns processed.
        appended: events newly appended.
        present: events found already stored (turns that were duplicates).
        blobs: blob refs held by the processed turns' events.
        head: the session head after the run.
    """

    session: str
    turns: int
    appended: int
    present: int
    blobs: int
    head: turnlog.log.Head


@cache
def _lines() -> tuple[bytes, ...]:
    data = resources.files(__package__ or "turnlog.tools").joinpath(DATA_FILE).read_bytes()
    return tuple(gzip.decompress(data).splitlines())


def demo_events(turns: int = DEFAULT_TURNS) -> list[list[Draft]]:
    """The demo session's first ``turns`` turns: one list of drafts per turn.

    Times start at `START_TIME`; idempotency keys are ``demo-<turn>-<i>`` (turns
    from 1). The same ``turns`` always give equal drafts, and a shorter session is a
    prefix of a longer one.

    Raises:
        InvalidArgumentError: ``turns`` is below 1 or above `MAX_TURNS`.
    """
    check_integer(
        turns,
        "turns",
        min_value=1,
        max_value=MAX_TURNS,
        hint=f"the demo has 1 to {MAX_TURNS} turns",
    )
    return [_TURN.decode(line) for line in _lines()[:turns]]


def run_demo(
    log: turnlog.Log,
    *,
    session: str = DEFAULT_SESSION,
    turns: int = DEFAULT_TURNS,
    on_turn: Callable[[TurnResult], None] | None = None,
) -> DemoResult:
    """Append the demo session to ``log``, one atomic batch per turn.

    Turns already stored (same idempotency keys and content) are not appended
    again, so re-running is safe and a longer run only adds the missing turns.

    Parameters:
        log: the log to append to.
        session: the session id.
        turns: number of turns (1 to `MAX_TURNS`).
        on_turn: called after each turn with its `TurnResult`.

    Returns:
        A `DemoResult` with counts and the session head.

    Raises:
        InvalidArgumentError: ``turns`` out of range.
        IdempotencyError: ``session`` holds other events under the demo's keys.
        AppendConflictError: someone else appended to ``session`` during the run.
    """
    appended = present = blobs = 0
    expected: int | None = None
    for number, drafts in enumerate(demo_events(turns), 1):
        result = log.append(session, drafts, expected_seq=expected)
        expected = result.last_seq
        stored = log.read(session, result.first_seq, result.last_seq + 1)
        count = sum(1 for event in stored if getattr(event.body, "blob", None) is not None)
        blobs += count
        if result.duplicate:
            present += len(drafts)
        else:
            appended += len(drafts)
        if on_turn is not None:
            user = next((d.body.text for d in drafts if isinstance(d.body, UserMessageAdded)), "")
            on_turn(TurnResult(number, drafts, result, count, user))
            # The callback may append (request records, compactions): continue from there.
            after = log.head(session)
            expected = after.seq if after is not None else expected
    head = log.head(session)
    assert head is not None
    return DemoResult(session, turns, appended, present, blobs, head)


# -- packing every turn -------------------------------------------------------------------

#: A small window so that every packing stage fires on the demo session.
DEMO_POLICY = turnlog.Policy(
    context_window=32_000,
    output_reserve=4_000,
    warning_buffer=12_000,
    compact_buffer=8_000,
    blocking_buffer=3_000,
    truncate_lines=300,
    truncate_bytes=12_000,
    prune_min_savings=1_500,
    prune_protect_tokens=4_000,
    prune_protect_turns=2,
    keep_recent_turns=2,
    keep_recent_messages=6,
    summary_max_tokens=700,
    segment_target_tokens=5_000,
    segment_min_tokens=1_000,
    segment_min_messages=4,
    rollup_fanout=3,
    compact_cooldown_turns=2,
    cache_breakpoints=4,
)


#: For a few turns the demo's user switches to a smaller, cheaper model: a policy
#: change recorded in the log, under which the oldest turns must be trimmed.
DEMO_SMALL_POLICY = turnlog.Policy(
    **{
        **{f: getattr(DEMO_POLICY, f) for f in DEMO_POLICY.__struct_fields__},
        "context_window": 14_000,
        "output_reserve": 2_000,
        "warning_buffer": 5_000,
        "compact_buffer": 3_000,
        "blocking_buffer": 2_000,
        "auto_compact": False,
    }
)


#: Turns (from 1) packed under `DEMO_SMALL_POLICY`.
SMALL_MODEL_TURNS = range(11, 14)


def policy_for_turn(turn: int) -> turnlog.Policy:
    """The policy the demo packs turn ``turn`` with."""
    return DEMO_SMALL_POLICY if turn in SMALL_MODEL_TURNS else DEMO_POLICY


#: The turn whose request meets a context-overflow error (a constant, so a demo
#: grown over several runs equals one written in a single run).
OVERFLOW_TURN = 26


#: The demo's model (recorded with each request; no model is called).
DEMO_MODEL = "demo-model"


@dataclass(frozen=True)
class PackedTurn:
    """What packing did after one demo turn.

    Attributes:
        turn: the turn number.
        request_seq: seq of the recorded request.
        tokens: the prompt's tokens.
        pressure_before: pressure before any reduction.
        pressure: pressure of the packed prompt.
        fired: events changed per stage (``truncate``, ``dedup``, ``prune``, ``trim``,
            ``summaries``).
        compaction: what the compactor did ("" when nothing).
        recovery: the request was a recovery pack after an overflow error.
    """

    turn: int
    request_seq: int
    tokens: int
    pressure_before: float
    pressure: float
    fired: dict[str, int]
    compaction: str
    recovery: bool


def pack_turn(
    log: turnlog.Log,
    packer: Packer,
    compactor: Compactor,
    session: str,
    turn: TurnResult,
    *,
    policy: turnlog.Policy = DEMO_POLICY,
    overflow: bool = False,
) -> PackedTurn:
    """After a demo turn: let the compactor's triggers act, then record a request.

    With ``overflow``, the recorded request is answered by a context-overflow
    error (as a provider would), the compactor's recovery runs, and a recovery
    request is recorded: that second request is the one returned.
    """
    time = _turn_time(log, session)
    memories = MemoryManager(log, memory_session=f"{session}-memories")
    if turn.turn == 1:
        _seed_memories(memories, time)
        memories.refresh(session, policy=policy, now=time, point="session_start")
    outcome = compactor.maybe_compact(session, policy=policy, time=time)
    compaction = ""
    if outcome.status != "skipped":
        events = "1 event" if len(outcome.seqs) == 1 else f"{len(outcome.seqs)} events"
        compaction = f"{outcome.status} ({outcome.reason}, {events})"
    if outcome.status == "committed":
        # Seed 003: the summary also lives on as a working memory; the memory
        # block changes at the compaction point the policy names.
        memories.save_summary(session, outcome.seqs[0], time=time)
        memories.refresh(session, policy=policy, now=time, point="compaction")
    recorded = Replayer(packer).record(session, policy=policy, model=DEMO_MODEL, time=time)
    log.append(
        session,
        Draft(
            body=ResponseReceived(
                request_seq=recorded.request_seq,
                model=DEMO_MODEL,
                stop_reason="tool_use",
                usage=Usage(input_tokens=recorded.packed.tokens, output_tokens=200),
            ),
            time=time,
        ),
    )
    if overflow:
        log.append(
            session,
            Draft(
                body=ProviderErrorReceived(
                    request_seq=recorded.request_seq,
                    status=400,
                    code="context_length_exceeded",
                    error_type="invalid_request_error",
                    overflow=True,
                    message="This model's maximum context length is 32000 tokens. However, your "
                    "messages resulted in 33018 tokens. Please reduce the length of the "
                    "messages.",
                ),
                time=time,
            ),
        )
        recovered = compactor.recover(session, policy=policy, time=time)
        compaction = f"overflow recovery: {recovered.status}"
        recorded = Replayer(packer).record(session, policy=policy, model=DEMO_MODEL, time=time)
    packed = recorded.packed
    fired = {
        s.name: s.events
        for s in packed.stages
        if s.name in ("truncate", "summaries", "dedup", "prune", "trim")
    }
    # under rules 3 earlier results are deduplicated and pruned at a prefix break (by
    # the trim stage): count the results the prompt holds rewritten
    for stage, decision in (("dedup", "deduplicated"), ("prune", "pruned")):
        rewritten = sum(1 for d in packed.decisions if d.decision == decision)
        fired[stage] = max(fired.get(stage, 0), rewritten)
    return PackedTurn(
        turn.turn,
        recorded.request_seq,
        packed.tokens,
        packed.pressure_before,
        packed.pressure,
        fired,
        compaction,
        packed.recovery,
    )


def _seed_memories(memories: MemoryManager, time: int | None) -> None:
    """Memories a user of this project would have saved in earlier sessions."""
    if memories.memories():
        return
    memories.save(
        "Amounts are Decimal",
        "Money is always decimal.Decimal, never float; "
        "parse_amount handles thousands separators and parentheses.",
        memory_type="decision",
        time=time,
    )
    memories.save(
        "Test command",
        "Run the suite with `pytest -q`; the fixtures live in tests/fixtures.",
        memory_type="project",
        time=time,
    )
    memories.save(
        "Review style",
        "Prefers small commits with imperative messages and a short summary of what changed.",
        memory_type="user",
        retention="priority",
        pinned=True,
        time=time,
    )


def _turn_time(log: turnlog.Log, session: str) -> int | None:
    head = log.head(session)
    return log.get(session, head.seq).time if head is not None else None

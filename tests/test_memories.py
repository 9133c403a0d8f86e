"""Memories: the fold, the operations as events, caps, rendering, refresh points, repairs."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import turnlog
from hypothesis import given
from hypothesis import strategies as st
from turnlog import Packer, Policy
from turnlog._memories import MEMORY_SECTION_POSITION, SUMMARY_TTL
from turnlog.errors import InvalidArgumentError, PolicyError
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    MemoryChanged,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    UserMessageAdded,
    covered_digest,
)
from turnlog.memories import MEMORY_SECTION, MemoryBook, MemoryManager
from turnlog.packing import Packed

DAY = 24 * 3600 * 1_000_000
T0 = 1_773_532_800_000_000  # 2026-03-15T00:00:00Z


@pytest.fixture
def log(tmp_path: Path) -> Iterator[turnlog.Log]:
    """A fresh LMDB log under ``tmp_path``."""
    opened = turnlog.open(tmp_path / "s")
    yield opened
    opened.close()


def memory_events(log: turnlog.Log, session: str = "memories") -> list[MemoryChanged]:
    out = []
    for event in log.read(session, kinds=["memory"]):
        assert isinstance(event.body, MemoryChanged)
        out.append(event.body)
    return out


def chat(log: turnlog.Log, session: str, n: int, *, word: str = "work") -> None:
    for i in range(n):
        log.append(session, UserMessageAdded(text=f"please {word} on step {i}"))
        log.append(session, AssistantMessageAdded(parts=(TextPart(text=f"done {word} {i}"),)))


def memory_section(packed: Packed) -> str | None:
    found = [s.text for s in packed.prompt.system if s.name == MEMORY_SECTION]
    return found[0] if found else None


# -- operations and the fold ---------------------------------------------------------
def test_every_operation_is_an_event_and_the_fold_follows_it(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    a = mm.save("Schema", "UUID keys", source_session="agent", source_seqs=(3, 4), time=T0)
    b = mm.save("Style", "early returns", memory_type="user")
    assert (a.memory_id, b.memory_id) == ("m0", "m1")
    mm.update("m0", content="UUID primary keys", retention="priority", time=T0 + DAY)
    mm.pin("m1")
    book = mm.book()
    m0 = book.get("m0")
    assert m0 is not None
    assert (m0.content, m0.retention, m0.title, m0.changed_time) == (
        "UUID primary keys",
        "priority",
        "Schema",
        T0 + DAY,
    )
    assert (m0.source_session, m0.source_seqs, m0.saved_pos, m0.changed_pos) == (
        "agent",
        (3, 4),
        0,
        2,
    )
    m1 = book.get("m1")
    assert m1 is not None and m1.pinned
    mm.unpin("m1")
    m1 = mm.book().get("m1")
    assert m1 is not None and not m1.pinned
    mm.forget("m0", reason="wrong")
    assert mm.book().get("m0") is None
    [gone] = mm.book().forgotten()
    assert (gone.memory.memory_id, gone.reason, gone.pos) == ("m0", "wrong", 5)
    ops = [(e.op, e.memory_id) for e in memory_events(log)]
    assert ops == [
        ("save", "m0"),
        ("save", "m1"),
        ("update", "m0"),
        ("pin", "m1"),
        ("unpin", "m1"),
        ("forget", "m0"),
    ]
    assert memory_events(log)[0].source_seqs == (3, 4)
    # The fold is a pure function of the events: a fresh manager and a fresh book agree.
    again = MemoryBook.from_events(log.lineage("memories"))
    assert again.memories() == mm.book().memories() == MemoryManager(log).memories()


def test_save_with_pinned_appends_save_and_pin_in_one_batch(log: turnlog.Log) -> None:
    changed = MemoryManager(log).save("Keep", "this", pinned=True)
    assert (changed.appended.first_seq, changed.appended.last_seq) == (0, 1)
    assert [e.op for e in memory_events(log)] == ["save", "pin"]


def test_operations_refuse_what_the_fold_would_ignore(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    mm.save("A", "alpha", memory_id="a")
    with pytest.raises(InvalidArgumentError, match="already exists"):
        mm.save("A", "again", memory_id="a")
    for op in (mm.forget, mm.pin, mm.unpin):
        with pytest.raises(InvalidArgumentError, match="no live memory 'nope'"):
            op("nope")
    with pytest.raises(InvalidArgumentError, match="changes nothing"):
        mm.update("a")
    with pytest.raises(InvalidArgumentError, match="memory_type"):
        mm.save("B", "beta", memory_type="misc")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="retention"):
        mm.save("B", "beta", retention="forever")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="non-empty content"):
        mm.save("B", "  ")
    assert len(memory_events(log)) == 1
    mm.forget("a")
    assert mm.save("A", "reborn", memory_id="a").memory_id == "a"  # a save after forget


def test_the_fold_ignores_operations_on_unknown_ids_and_a_resave_replaces(log: turnlog.Log) -> None:
    log.append(
        "memories",
        [
            MemoryChanged(op="update", memory_id="x", content="ghost"),
            MemoryChanged(op="pin", memory_id="x"),
            MemoryChanged(op="save", memory_id="x", content="first"),
            MemoryChanged(op="pin", memory_id="x"),
            MemoryChanged(op="save", memory_id="x", content="second", memory_type="user"),
            MemoryChanged(op="forget", memory_id="y"),
        ],
    )
    book = MemoryBook.from_events(log.read("memories"))
    [only] = book.memories()
    assert (only.content, only.memory_type, only.retention, only.pinned, only.saved_pos) == (
        "second",
        "user",
        "durable",
        False,
        4,
    )
    assert book.forgotten() == []


def test_a_rewind_in_the_memory_session_undoes_its_operations(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    mm.save("A", "alpha")
    mm.save("B", "beta")
    log.append("memories", SessionRewound(to_seq=0, reason="undo"))
    assert [m.title for m in mm.memories()] == ["A"]
    assert [m.title for m in MemoryBook.from_events(log.read("memories")).memories()] == ["A"]


# -- expiry ---------------------------------------------------------------------------------
def test_a_memory_lapses_after_a_memory_session_position(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    mm.save("Soon", "gone after position 2", expires_seq=2)
    mm.save("Stay", "durable")
    assert [m.title for m in mm.memories()] == ["Soon", "Stay"]
    mm.save("Third", "x")  # head is 2: not past it yet
    assert [m.title for m in mm.memories()] == ["Soon", "Stay", "Third"]
    mm.save("Fourth", "y")  # head 3
    assert [m.title for m in mm.memories()] == ["Stay", "Third", "Fourth"]
    assert "Soon" not in mm.render(Policy())
    assert [m.title for m in mm.book().expired()] == ["Soon"]


def test_a_memory_lapses_after_the_callers_time_and_no_clock_is_read(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    mm.save("Temp", "until T0+1d", expires_time=T0 + DAY)
    assert [m.title for m in mm.memories(now=T0 + DAY)] == ["Temp"]
    assert mm.memories(now=T0 + DAY + 1) == []
    assert [m.title for m in mm.memories()] == ["Temp"]  # no time given: not evaluated
    assert "Temp" in mm.render(Policy(), now=T0 + DAY)
    assert mm.render(Policy(), now=T0 + DAY + 1) == ""


def test_a_pinned_memory_never_expires(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    mm.save("Pinned", "stays", expires_time=T0, expires_seq=1, pinned=True)
    assert [m.title for m in mm.memories(now=T0 + 10 * DAY)] == ["Pinned"]
    assert mm.consolidate(now=T0 + 10 * DAY).forgotten == ()


# -- consolidation ----------------------------------------------------------------------
def test_consolidation_forgets_expired_and_old_summary_memories_by_events(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    mm.save("Old fact", "expired", expires_time=T0)
    ids = [
        mm.save(f"Summary {i}", f"summary {i}", retention="working", reason="compaction").memory_id
        for i in range(13)
    ]
    mm.pin(ids[0])
    mm.save("Note", "working but not a summary", retention="working")
    before = log.head("memories")
    assert before is not None
    done = mm.consolidate(now=T0 + DAY, policy=Policy(), time=T0 + DAY)
    assert done.forgotten == (
        ("m0", "expired"),
        (ids[1], "consolidation"),
        (ids[2], "consolidation"),
    )
    assert done.appended is not None and done.appended.first_seq == before.seq + 1
    events = log.read("memories", before.seq + 1)
    assert [
        (e.body.op, e.body.reason, e.time)  # type: ignore[union-attr]
        for e in events  # type: ignore[union-attr]
    ] == [("forget", "expired", T0 + DAY)] + [("forget", "consolidation", T0 + DAY)] * 2
    live = {m.memory_id for m in mm.memories(now=T0 + DAY)}
    assert ids[0] in live  # pinned: never consolidated
    assert set(ids[3:]) <= live and len([i for i in ids[1:] if i in live]) == 10
    # Nothing is deleted: every earlier event is still in the log, and verifies.
    assert len(log.read("memories")) == before.seq + 1 + 3
    assert log.verify("memories").ok
    assert mm.consolidate(now=T0 + DAY) == turnlog._memories.Consolidated((), None)


def test_consolidation_keep_count_is_a_policy_field(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    for i in range(4):
        mm.save(f"S{i}", f"s{i}", retention="working", reason="compaction")
    done = mm.consolidate(policy=Policy(memory_summary_keep=1))
    assert [mid for mid, _ in done.forgotten] == ["m0", "m1", "m2"]


def test_a_compaction_summary_becomes_a_working_memory_with_provenance(log: turnlog.Log) -> None:
    chat(log, "agent", 2)
    hashes = [e.hash for e in log.read("agent", 0, 2)]
    log.append(
        "agent",
        turnlog.Draft(
            body=CompactionCommitted(
                first_seq=0,
                last_seq=1,
                covered_digest=covered_digest(hashes),
                summary="## Goal\nShip it",
            ),
            time=T0,
        ),
    )
    mm = MemoryManager(log)
    changed = mm.save_summary("agent", 4)
    memory = mm.book().get(changed.memory_id)
    assert memory is not None and memory.is_summary
    assert (memory.retention, memory.source_session, memory.source_seqs, memory.expires_time) == (
        "working",
        "agent",
        (4,),
        T0 + SUMMARY_TTL,
    )
    assert "## Working Memory\n- Previous session summary: ## Goal\n  Ship it" in mm.render(
        Policy()
    )
    with pytest.raises(InvalidArgumentError, match="not a compaction"):
        mm.save_summary("agent", 0)


# -- rendering and caps ---------------------------------------------------------------------
def seed_memories(mm: MemoryManager) -> None:
    mm.save("Database schema", "Uses PostgreSQL with UUID primary keys", time=T0)
    mm.save("Code style", "Prefers early returns over nested conditionals", memory_type="user")
    mm.save(
        "Critical architecture note",
        "The API gateway uses rate limiting per tenant",
        retention="priority",
    )
    mm.save("Auth approach", "JWT with refresh tokens", memory_type="decision", time=T0 + 3 * DAY)
    mm.save(
        "Previous session summary", "Implemented the payment webhook handler", retention="working"
    )
    mm.save("Test conventions", "All tests extend BaseTestCase", time=T0 + 5 * DAY)


BLOCK = """# Memories

## Priority Context
- Critical architecture note: The API gateway uses rate limiting per tenant

## Project Knowledge
- Database schema: Uses PostgreSQL with UUID primary keys (2026-03-15)
- Test conventions: All tests extend BaseTestCase (2026-03-20)

## User Preferences
- Code style: Prefers early returns over nested conditionals

## Key Decisions
- Auth approach: JWT with refresh tokens (2026-03-18)

## Working Memory
- Previous session summary: Implemented the payment webhook handler"""


def test_the_block_has_the_sections_in_order(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    seed_memories(mm)
    assert mm.render(Policy()) == BLOCK
    assert mm.render(Policy(), now=T0) == BLOCK


def test_pinned_memories_come_first_within_their_section(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    seed_memories(mm)
    mm.pin("m5")
    assert "## Project Knowledge\n- Test conventions" in mm.render(Policy())


def test_the_count_cap_counts_priority_memories_first(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    seed_memories(mm)
    block = mm.render(Policy(memory_max_count=2))
    assert block == (
        "# Memories\n\n## Priority Context\n- Critical architecture note: The API "
        "gateway uses rate limiting per tenant\n\n## Project Knowledge\n- Database "
        "schema: Uses PostgreSQL with UUID primary keys (2026-03-15)"
    )
    assert mm.render(Policy(memory_max_count=0)) == ""


def test_the_working_cap_keeps_the_most_recent_working_memories(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    for i in range(7):
        mm.save(f"W{i}", f"working {i}", retention="working")
    mm.pin("m0")
    block = mm.render(Policy(memory_working_max=3, memory_max_count=100))
    assert (
        block == "# Memories\n\n## Working Memory\n- W0: working 0\n- W5: working 5\n"
        "- W6: working 6"
    )


def test_the_char_cap_drops_whole_entries_from_the_end(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    seed_memories(mm)
    full = mm.render(Policy(memory_max_count=100))
    assert mm.render(Policy(memory_max_count=100, memory_max_chars=len(full))) == full
    cut = mm.render(Policy(memory_max_count=100, memory_max_chars=len(full) - 1))
    assert cut == full[: full.index("\n\n## Working Memory")]
    for limit in range(0, len(full) + 1, 7):
        block = mm.render(Policy(memory_max_count=100, memory_max_chars=limit))
        assert len(block) <= limit
        entries = [line for line in block.splitlines() if line.startswith("- ")]
        # every entry shown is shown whole
        assert all(line in full.splitlines() for line in entries)
        assert full.startswith(block)
    assert mm.render(Policy(memory_max_chars=10)) == ""


def test_the_block_does_not_depend_on_other_sessions_or_their_order(tmp_path: Path) -> None:
    texts = []
    for order in (0, 1):
        with turnlog.open(tmp_path / f"s{order}") as log:
            mm = MemoryManager(log)
            other = ["x", "y"] if order == 0 else ["y", "x"]
            log.append(other[0], UserMessageAdded(text="first"))
            mm.save("A", "alpha", time=T0)
            chat(log, other[1], 2)
            mm.save("B", "beta", memory_type="decision")
            log.append(other[0], UserMessageAdded(text="second"))
            mm.save("C", "gamma", retention="working", expires_time=T0 + DAY)
            chat(log, "agent", 1)
            mm.refresh("agent", policy=Policy(), now=T0)
            section = log.read("agent", kinds=["system"])[-1]
            texts.append(
                (mm.render(Policy(), now=T0).encode(), msgspec.msgpack.encode(section.body))
            )
    assert texts[0] == texts[1]


# -- refresh ---------------------------------------------------------------------------
def test_refresh_appends_only_at_named_points_and_only_on_change(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    policy = Policy(memory_refresh=("session_start",))
    assert mm.refresh("agent", policy=policy, point="session_start") is None  # empty, no section
    seed_memories(mm)
    assert mm.refresh("agent", policy=policy, point="manual") is None
    assert mm.refresh("agent", policy=policy, point="every_turn") is None
    assert not log.head("agent")
    done = mm.refresh("agent", policy=policy, point="session_start", now=T0)
    assert done is not None and done.first_seq == 0
    [event] = log.read("agent")
    assert event.body == SystemSectionSet(
        name=MEMORY_SECTION, text=BLOCK, position=MEMORY_SECTION_POSITION
    )
    assert event.time == T0
    assert mm.refresh("agent", policy=policy, point="session_start") is None  # unchanged
    mm.save("New", "fact")
    assert mm.refresh("agent", policy=Policy(memory_refresh=()), point="session_start") is None
    assert mm.refresh("agent", policy=policy, point="session_start") is not None
    assert mm.block_in_force("agent") == mm.render(policy)
    with pytest.raises(InvalidArgumentError, match="refresh point"):
        mm.refresh("agent", policy=policy, point="sometimes")  # type: ignore[arg-type]


def test_an_empty_block_removes_the_section(log: turnlog.Log) -> None:
    mm = MemoryManager(log)
    mm.save("Only", "one")
    assert mm.refresh("agent", policy=Policy()) is not None
    mm.forget("m0")
    assert mm.refresh("agent", policy=Policy()) is not None
    assert log.read("agent")[-1].body == SystemSectionSet(
        name=MEMORY_SECTION, text="", position=MEMORY_SECTION_POSITION
    )
    assert mm.block_in_force("agent") == ""
    assert mm.refresh("agent", policy=Policy()) is None
    assert memory_section(Packer(log).pack("agent")) is None


def test_the_block_follows_the_static_sections_and_stays_frozen_across_turns(
    log: turnlog.Log,
) -> None:
    mm = MemoryManager(log)
    log.append("agent", SystemSectionSet(name="base", text="You are an agent.", position=0))
    seed_memories(mm)
    mm.refresh("agent", policy=Policy(), point="session_start")
    packer = Packer(log)
    sections = []
    for i in range(4):
        chat(log, "agent", 1, word=f"w{i}")
        if i == 1:
            mm.save("Late", "saved mid-session")  # not in force until a refresh
        packed = packer.pack("agent", policy=Policy())
        assert [s.name for s in packed.prompt.system] == ["base", MEMORY_SECTION]
        sections.append(msgspec.msgpack.encode(packed.prompt.system))
    assert len(set(sections)) == 1
    mm.refresh("agent", policy=Policy(), point="compaction")
    after = memory_section(packer.pack("agent", policy=Policy()))
    assert after is not None and "- Late: saved mid-session" in after


def test_memory_refresh_policy_field_is_validated() -> None:
    assert Policy().memory_refresh == ("session_start", "compaction", "manual")
    assert Policy.from_toml('memory_refresh = ["every_turn"]').memory_refresh == ("every_turn",)
    with pytest.raises(PolicyError, match="memory_refresh"):
        Policy.from_toml('memory_refresh = ["hourly"]')
    with pytest.raises(PolicyError, match="memory_refresh"):
        Policy(memory_refresh=("hourly",))  # type: ignore[arg-type]
    policy = Policy(memory_refresh=("compaction",), memory_summary_keep=3)
    assert msgspec.msgpack.decode(policy.encode(), type=Policy) == policy


class _Run:
    """One generated session: a memory manager, an agent session and its packs."""

    def __init__(self, log: turnlog.Log, policy: Policy) -> None:
        self.log = log
        self.policy = policy
        self.mm = MemoryManager(log)
        self.packer = Packer(log)
        self.clock = T0
        self.turns = 0
        log.append("agent", SystemSectionSet(name="base", text="static", position=0))
        self.last = memory_section(self.packer.pack("agent", policy=policy))
        self.refreshed = False

    def live_ids(self) -> list[str]:
        return [m.memory_id for m in self.mm.memories()]


OPS = st.one_of(
    st.tuples(
        st.just("save"),
        st.sampled_from(["project", "user", "decision"]),
        st.sampled_from(["priority", "durable", "working"]),
        st.booleans(),
        st.one_of(st.none(), st.integers(1, 5)),
    ),
    st.tuples(st.sampled_from(["update", "forget", "pin", "unpin"]), st.integers(0, 50)),
    st.tuples(st.just("turn"), st.integers(1, 3)),
    st.tuples(
        st.just("refresh"), st.sampled_from(["session_start", "compaction", "every_turn", "manual"])
    ),
    st.tuples(st.just("consolidate")),
)


@given(
    ops=st.lists(OPS, max_size=30),
    points=st.lists(
        st.sampled_from(["session_start", "compaction", "every_turn", "manual"]),
        unique=True,
        max_size=4,
    ),
    max_count=st.integers(0, 6),
    max_chars=st.integers(0, 600),
)
def test_the_memory_section_changes_only_when_a_refresh_was_appended(
    ops: list[tuple[object, ...]], points: list[str], max_count: int, max_chars: int
) -> None:
    policy = Policy(
        memory_refresh=tuple(points),  # type: ignore[arg-type]
        memory_max_count=max_count,
        memory_max_chars=max_chars,
        memory_working_max=2,
        memory_summary_keep=1,
    )
    with tempfile.TemporaryDirectory() as tmp, turnlog.open(Path(tmp) / "s") as log:
        run = _Run(log, policy)
        for op in ops:
            run.clock += DAY
            kind = op[0]
            if kind == "save":
                _, mtype, retention, summary, ttl = op
                assert ttl is None or isinstance(ttl, int)
                run.mm.save(
                    f"T{run.clock}",
                    f"content at {run.clock}",
                    memory_type=mtype,  # type: ignore[arg-type]
                    retention=retention,  # type: ignore[arg-type]
                    reason="compaction" if summary else "",
                    expires_time=None if ttl is None else run.clock + ttl * DAY,
                )
            elif kind in ("update", "forget", "pin", "unpin"):
                live = run.live_ids()
                if not live:
                    continue
                mid = live[int(op[1]) % len(live)]  # type: ignore[call-overload]
                if kind == "update":
                    run.mm.update(mid, content=f"updated at {run.clock}")
                else:
                    getattr(run.mm, kind)(mid)
            elif kind == "turn":
                chat(log, "agent", int(op[1]), word=f"t{run.turns}")  # type: ignore[call-overload]
                run.turns += 1
            elif kind == "refresh":
                done = run.mm.refresh("agent", policy=policy, now=run.clock, point=op[1])  # type: ignore[arg-type]
                if op[1] not in points:
                    assert done is None
                if done is not None:
                    run.refreshed = True
                    assert run.mm.block_in_force("agent") == run.mm.render(policy, now=run.clock)
            else:
                run.mm.consolidate(now=run.clock, policy=policy)
            packed = run.packer.pack("agent", policy=policy)
            section = memory_section(packed)
            if section != run.last:
                assert run.refreshed, f"the memory section changed after {op!r} with no refresh"
            if section is not None:
                assert len(section) <= max_chars
            run.last = section
            run.refreshed = False
        # The packs are reproducible from the log alone.
        assert (
            Packer(log).pack("agent", policy=policy).prompt
            == run.packer.pack("agent", policy=policy).prompt
        )


# -- repairs ----------------------------------------------------------------------------
def test_managers_racing_on_one_memory_session_lose_nothing(tmp_path: Path) -> None:
    # Each save picks the next free id from the book it read: a save that another
    # manager beat to the head is decided again (Log.update), never lost or doubled.
    with turnlog.open(tmp_path / "store", sync=False) as log:
        errors: list[BaseException] = []

        def work(worker: int) -> None:
            mm = MemoryManager(log)  # its own book and lock: its appends can conflict
            try:
                for n in range(15):
                    mm.save(f"w{worker}", f"note {n}")
                    mm.refresh("agent", policy=Policy(memory_refresh=("manual",)))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        saved = [m for m in MemoryManager(log).memories()]
        assert sorted(m.memory_id for m in saved) == sorted(f"m{i}" for i in range(60))
        assert sorted((m.title, m.content) for m in saved) == sorted(
            (f"w{w}", f"note {n}") for w in range(4) for n in range(15)
        )
        assert log.verify().ok


def test_repair_forgets_memories_derived_from_rewound_events(log: turnlog.Log) -> None:
    chat(log, "agent", 3)  # seqs 0..5
    mm = MemoryManager(log)
    kept = mm.save("Early", "from seq 1", source_session="agent", source_seqs=(1,))
    late = mm.save("Late", "from seq 4", source_session="agent", source_seqs=(2, 4))
    other = mm.save("Other", "another session", source_session="else", source_seqs=(4,))
    plain = mm.save("Plain", "no provenance")
    assert mm.repair("agent").forgotten == ()  # nothing rewound yet
    log.append("agent", SessionRewound(to_seq=3, reason="user undo"))
    repaired = mm.repair("agent", time=T0)
    assert repaired.forgotten == (late.memory_id,)
    assert repaired.rewound_seqs == 2
    assert repaired.appended is not None
    forget = log.get("memories", repaired.appended.first_seq)
    assert forget.body == MemoryChanged(
        op="forget", memory_id=late.memory_id, reason="source rewound"
    )
    live = [m.memory_id for m in mm.memories()]
    assert live == [kept.memory_id, other.memory_id, plain.memory_id]
    assert mm.repair("agent").forgotten == ()  # idempotent
    with pytest.raises(turnlog.errors.UnknownSessionError):
        mm.repair("nobody")


def test_a_rewound_compaction_leaves_the_view_and_its_summary_memory_is_repaired(
    log: turnlog.Log,
) -> None:
    chat(log, "agent", 2)  # seqs 0..3
    hashes = [e.hash for e in log.read("agent", 0, 2)]
    log.append(
        "agent",
        CompactionCommitted(
            first_seq=0,
            last_seq=1,
            covered_digest=covered_digest(hashes),
            summary="SUMMARY-OF-STEP-ZERO",
        ),
    )  # seq 4
    log.append("agent", UserMessageAdded(text="next"))  # seq 5
    mm = MemoryManager(log)
    summary = mm.save_summary("agent", 4, time=T0)
    mm.refresh("agent", policy=Policy(), point="compaction")  # seq 6
    packer = Packer(log)
    shown = Policy(summary_gate=0.0)  # the summary at any pressure (rules 2 gates it)
    before = packer.pack("agent", policy=shown)
    assert any(
        "SUMMARY-OF-STEP-ZERO" in s.text
        for s in before.prompt.system
        if s.name == "conversation_summary"
    )
    assert "please work on step 0" not in [m.text for m in before.prompt.messages]
    log.append("agent", SessionRewound(to_seq=3))
    after = packer.pack("agent", policy=shown)
    # The projection already drops the rewound summary and its refresh of the block.
    assert all("SUMMARY-OF-STEP-ZERO" not in s.text for s in after.prompt.system)
    assert [m.text for m in after.prompt.messages][:1] == ["please work on step 0"]
    assert memory_section(after) is None
    # The memory made from that summary lives in another session: repaired by an event.
    assert mm.repair("agent").forgotten == (summary.memory_id,)
    assert mm.memories() == []
    assert mm.refresh("agent", policy=Policy(), point="manual") is None

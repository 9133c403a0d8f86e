"""The log conformance suite: every test runs against every backend (see conftest.py).

A backend passes when appends are atomic and densely numbered, the hash chain
links, optimistic concurrency and idempotency follow EventStoreDB's rules, reads
are consistent snapshots, large outputs go to deduplicated blobs, forks and
rewinds are events, and verify and checkpoints catch what they promise to.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable

import msgspec
import pytest
import turnlog
import turnlog._log
from support import (
    GENESIS_HASH,
    LogFactory,
    body_of,
    dump,
    head_seq,
    keyed_batch,
    problem_of,
    recompute_hash,
    texts,
)
from turnlog import Draft, Log
from turnlog.errors import (
    AppendConflictError,
    IdempotencyError,
    InvalidArgumentError,
    InvalidEventError,
    UnknownSessionError,
    VerificationError,
)
from turnlog.events import (
    AssistantMessageAdded,
    BlobRef,
    EventsPinned,
    ImagePart,
    NotificationAdded,
    SessionForked,
    SessionRewound,
    TextPart,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.log import GENESIS, NEW_SESSION, Appended, Checkpoint, Head, Retries

BIG = 64 * 1024  # the default blob threshold


def fill(log: Log, session: str, n: int, *, prefix: str = "m") -> None:
    """Append ``n`` user messages to ``session`` one by one."""
    for i in range(n):
        log.append(session, UserMessageAdded(text=f"{prefix}{i}"))


def big_output(tag: str = "x") -> str:
    """A tool output well above the blob threshold, with a recognisable middle."""
    return "".join(f"{tag} line {i}\n" for i in range(12_000))


# -- batches and seqs ------------------------------------------------------------------
def test_append_assigns_dense_seqs_from_zero(log: Log) -> None:
    first = log.append("s", UserMessageAdded(text="a"))
    batch = log.append("s", [UserMessageAdded(text="b"), UserMessageAdded(text="c")])
    last = log.append("s", Draft(body=UserMessageAdded(text="d")))
    assert (first.first_seq, first.last_seq) == (0, 0)
    assert (batch.first_seq, batch.last_seq) == (1, 2)
    assert (last.first_seq, last.last_seq) == (3, 3)
    assert [e.seq for e in log.read("s")] == [0, 1, 2, 3]
    assert not any(a.duplicate for a in (first, batch, last))
    head = log.head("s")
    assert head is not None and last.head_hash == head.hash == log.get("s", 3).hash


def test_append_returns_positions_of_the_whole_batch(log: Log) -> None:
    done = log.append("s", [UserMessageAdded(text=str(i)) for i in range(7)])
    assert (done.session, done.first_seq, done.last_seq) == ("s", 0, 6)
    assert texts(log.read("s")) == [str(i) for i in range(7)]


def test_sessions_are_numbered_independently(log: Log) -> None:
    fill(log, "a", 3)
    fill(log, "b", 2)
    assert head_seq(log, "a") == 2
    assert head_seq(log, "b") == 1
    assert log.head("c") is None


def test_batch_failing_validation_writes_nothing(log: Log) -> None:
    fill(log, "s", 2)
    before = dump(log)
    with pytest.raises(InvalidEventError):
        log.append(
            "s",
            [
                UserMessageAdded(text="ok"),
                UserMessageAdded(text="ok"),
                UserMessageAdded(text="bad \ud800"),
            ],
        )
    assert dump(log) == before


def test_batch_failing_inside_the_transaction_writes_nothing(log: Log) -> None:
    # The rewind's range is checked inside the write, after the first events were
    # linked and their idempotency keys recorded.
    fill(log, "s", 2)
    before = dump(log)
    doomed = [
        *keyed_batch("k", 2),
        Draft(
            body=ToolResultAdded(call_id="c", tool_name="bash", output=big_output()), key="k-out"
        ),
        Draft(body=SessionRewound(to_seq=50), key="k-rewind"),
    ]
    with pytest.raises(InvalidEventError):
        log.append("s", doomed)
    assert dump(log) == before
    assert log.verify().ok
    # no key of the failed batch was remembered: the same keys append afresh
    done = log.append("s", keyed_batch("k", 2))
    assert not done.duplicate and done.first_seq == 2


def test_batch_failing_on_a_new_session_leaves_no_session(log: Log) -> None:
    before = dump(log)
    with pytest.raises(InvalidEventError):
        log.append("new", [UserMessageAdded(text="one"), EventsPinned(seqs=(7,))])
    assert dump(log) == before
    assert log.sessions() == []


# -- the hash chain ---------------------------------------------------------------------
def test_first_event_links_to_the_genesis_hash(log: Log) -> None:
    log.append("s", UserMessageAdded(text="hello"))
    event = log.get("s", 0)
    assert event.prev == GENESIS == GENESIS_HASH == bytes(32)
    assert event.hash == recompute_hash(event)


def test_each_event_links_to_its_predecessor(log: Log) -> None:
    fill(log, "s", 3)
    log.append("s", [UserMessageAdded(text=f"batch {i}") for i in range(4)])
    log.append(
        "s",
        Draft(
            body=UserMessageAdded(text="meta"),
            meta={"b": 1, "a": [1, 2.5]},
            time=1_700_000_000_000_000,
            key="k",
            causation="c",
        ),
    )
    events = log.read("s")
    assert len(events) == 8
    for before, after in itertools.pairwise(events):
        assert after.prev == before.hash
    for event in events:
        assert len(event.hash) == 32
        assert event.hash == recompute_hash(event)
    assert len({e.hash for e in events}) == len(events)


def test_chain_survives_reopen(log: Log, reopen: Callable[[Log], Log]) -> None:
    fill(log, "s", 3)
    hashes = [e.hash for e in log.read("s")]
    log = reopen(log)
    fill(log, "s", 2, prefix="after")
    events = log.read("s")
    assert [e.hash for e in events[:3]] == hashes
    assert events[3].prev == hashes[-1]
    assert log.verify().ok


def test_identical_content_in_different_sessions_hashes_differently(log: Log) -> None:
    log.append("a", UserMessageAdded(text="same"))
    log.append("b", UserMessageAdded(text="same"))
    assert log.get("a", 0).hash != log.get("b", 0).hash


# -- optimistic concurrency --------------------------------------------------------------
def test_append_accepts_the_current_head(log: Log) -> None:
    log.append("s", UserMessageAdded(text="a"), expected_seq=NEW_SESSION)
    log.append("s", UserMessageAdded(text="b"), expected_seq=0)
    log.append("s", [UserMessageAdded(text="c"), UserMessageAdded(text="d")], expected_seq=1)
    assert head_seq(log, "s") == 3


@pytest.mark.parametrize("expected", [NEW_SESSION, 0, 1, 5])
def test_append_rejects_stale_head(log: Log, expected: int) -> None:
    fill(log, "s", 3)
    before = dump(log)
    with pytest.raises(AppendConflictError) as info:
        log.append("s", UserMessageAdded(text="late"), expected_seq=expected)
    assert (info.value.session, info.value.expected, info.value.actual) == ("s", expected, 2)
    assert "expected_seq=2" in str(info.value)
    assert dump(log) == before


def test_append_rejects_an_expected_head_on_a_new_session(log: Log) -> None:
    before = dump(log)
    with pytest.raises(AppendConflictError) as info:
        log.append("s", UserMessageAdded(text="x"), expected_seq=0)
    assert info.value.actual == -1
    assert dump(log) == before


# -- conditional appends (Log.update) ------------------------------------------------------
def test_update_appends_what_decide_makes_of_the_head(log: Log) -> None:
    seen: list[Head | None] = []

    def decide(head: Head | None) -> list[UserMessageAdded]:
        seen.append(head)
        return [UserMessageAdded(text=f"after {head.seq if head else -1}")]

    first = log.update("s", decide)
    second = log.update("s", decide)
    assert first is not None and second is not None
    assert (first.last_seq, second.last_seq) == (0, 1)
    assert seen == [None, Head("s", 0, first.head_hash)]
    assert texts(log.read("s")) == ["after -1", "after 0"]


def test_update_with_nothing_to_append_writes_nothing(log: Log) -> None:
    fill(log, "s", 1)
    before = dump(log)
    assert log.update("s", lambda head: None) is None
    assert log.update("s", lambda head: []) is None
    assert dump(log) == before


def test_update_decides_again_when_another_writer_moved_the_head(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []
    monkeypatch.setattr(turnlog._log, "sleep", waits.append)
    fill(log, "s", 1)
    heads: list[int] = []

    def decide(head: Head | None) -> UserMessageAdded:
        assert head is not None
        heads.append(head.seq)
        if len(heads) <= 2:  # another writer lands between each of the first two decisions
            log.append("s", NotificationAdded(source="other", text=f"meanwhile {len(heads)}"))
        return UserMessageAdded(text=f"decided at {head.seq}")

    done = log.update("s", decide)
    assert heads == [0, 1, 2] and done is not None and done.last_seq == 3
    assert log.get("s", 3).body == UserMessageAdded(text="decided at 2")
    assert len(waits) == 2 and all(0 <= w <= 0.002 for w in waits)  # the first try waits not
    assert log.verify().ok


def test_update_that_keeps_conflicting_reports_the_real_head(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(turnlog._log, "sleep", lambda seconds: None)
    fill(log, "s", 1)

    def decide(head: Head | None) -> UserMessageAdded:
        log.append("s", NotificationAdded(source="other", text="meanwhile"))
        return UserMessageAdded(text="never lands")

    with pytest.raises(AppendConflictError) as info:
        log.update("s", decide, attempts=3)
    assert (info.value.session, info.value.expected, info.value.actual) == ("s", 2, 3)
    assert "3 attempts" in str(info.value)
    assert head_seq(log, "s") == 3  # three others landed, never ours
    assert not any(e.kind == "user" and e.seq > 0 for e in log.read("s"))


def test_update_passes_on_what_decide_raises_and_writes_nothing(log: Log) -> None:
    fill(log, "s", 1)
    before = dump(log)

    def decide(head: Head | None) -> UserMessageAdded:
        raise InvalidEventError("the precondition no longer holds")

    with pytest.raises(InvalidEventError, match="precondition"):
        log.update("s", decide)
    assert dump(log) == before


def test_update_of_a_stored_key_is_a_duplicate_wherever_the_head_is(log: Log) -> None:
    original = log.update("s", lambda head: keyed_batch("b", 2))
    fill(log, "s", 3)
    before = dump(log)
    retry = log.update("s", lambda head: keyed_batch("b", 2, time=7))
    assert original is not None
    assert retry == msgspec.structs.replace(original, duplicate=True)
    assert log.find_key("s", "b-1") == 1 and log.find_key("s", "b-2") is None
    assert log.find_key("nobody", "b-1") is None
    assert dump(log) == before


def test_an_async_loop_drives_retries_as_its_docstring_shows(log: Log) -> None:
    # The loop of the Retries docstring, with the sync log's calls in a thread.
    fill(log, "s", 1)
    decided: list[int] = []

    def decide(head: Head | None) -> list[UserMessageAdded]:
        assert head is not None
        decided.append(head.seq)
        if len(decided) == 1:  # another writer lands before the first append
            log.append("s", NotificationAdded(source="other", text="meanwhile"))
        return [UserMessageAdded(text=f"decided at {head.seq}")]

    async def write() -> Appended | None:
        retries = Retries("s", attempts=8)
        while True:
            delay = retries.next()
            if delay:
                await asyncio.sleep(delay)
            head = await asyncio.to_thread(log.head, "s")
            events = decide(head)
            if not events:
                return None
            try:
                return await asyncio.to_thread(
                    log.append, "s", events, expected_seq=retries.expect(head)
                )
            except AppendConflictError as exc:
                retries.conflict(exc)

    done = asyncio.run(write())
    assert decided == [0, 1] and done is not None and done.last_seq == 2
    assert log.get("s", 2).body == UserMessageAdded(text="decided at 1")


def test_retries_wait_a_doubling_random_time_and_end_with_the_last_conflict() -> None:
    retries = Retries("s", attempts=9, draw=lambda: 1.0)
    waits = []
    for _ in range(9):
        waits.append(retries.next())
        retries.expect(Head("s", 4, b""))
        retries.conflict(AppendConflictError("x", session="s", expected=4, actual=6))
    assert waits == [0.0, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05]
    with pytest.raises(AppendConflictError) as info:
        retries.next()
    assert (info.value.expected, info.value.actual) == (4, 6)
    assert "9 attempts" in str(info.value)
    assert Retries("s", draw=lambda: 0.5).next() == 0.0
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(InvalidArgumentError, match="attempts"):
            Retries("s", attempts=bad)  # type: ignore[arg-type]


def test_update_refuses_bad_arguments_before_reading_anything(log: Log) -> None:
    before = dump(log)
    with pytest.raises(InvalidArgumentError, match="decide must be callable"):
        log.update("s", [UserMessageAdded(text="not a function")])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="attempts"):
        log.update("s", lambda head: None, attempts=0)
    with pytest.raises(InvalidEventError):
        log.update("", lambda head: None)
    assert dump(log) == before


# -- idempotency -------------------------------------------------------------------------
def test_full_retry_returns_original_positions_and_writes_nothing(log: Log) -> None:
    fill(log, "s", 2)
    original = log.append("s", keyed_batch("b", 3))
    fill(log, "s", 2, prefix="later")
    before = dump(log)
    retry = log.append("s", keyed_batch("b", 3))
    assert retry.duplicate
    assert (retry.first_seq, retry.last_seq, retry.head_hash) == (
        original.first_seq,
        original.last_seq,
        original.head_hash,
    )
    assert dump(log) == before


def test_full_retry_ignores_a_stale_expected_seq(log: Log) -> None:
    original = log.append("s", keyed_batch("b", 2), expected_seq=NEW_SESSION)
    fill(log, "s", 1)
    retry = log.append("s", keyed_batch("b", 2), expected_seq=NEW_SESSION)
    assert retry == msgspec.structs.replace(original, duplicate=True)


def test_retry_after_reopen_is_still_a_duplicate(log: Log, reopen: Callable[[Log], Log]) -> None:
    original = log.append("s", keyed_batch("b", 4))
    log = reopen(log)
    retry = log.append("s", keyed_batch("b", 4))
    assert retry.duplicate and retry.first_seq == original.first_seq
    assert head_seq(log, "s") == 3


def test_partial_key_match_is_an_idempotency_error(log: Log) -> None:
    log.append("s", keyed_batch("b", 3))
    before = dump(log)
    mixed = [*keyed_batch("b", 3)[:2], Draft(body=UserMessageAdded(text="new"), key="fresh")]
    with pytest.raises(IdempotencyError):
        log.append("s", mixed)
    unkeyed: list[Draft | UserMessageAdded] = [
        *keyed_batch("b", 1),
        UserMessageAdded(text="no key"),
    ]
    with pytest.raises(IdempotencyError):
        log.append("s", unkeyed)
    assert dump(log) == before


def test_same_key_with_different_content_is_an_idempotency_error(log: Log) -> None:
    log.append("s", keyed_batch("b", 2))
    before = dump(log)
    changed = [keyed_batch("b", 2)[0], Draft(body=UserMessageAdded(text="changed"), key="b-1")]
    with pytest.raises(IdempotencyError) as info:
        log.append("s", changed)
    assert "b-1" in str(info.value)
    causes = [Draft(body=d.body, key=d.key, causation="other") for d in keyed_batch("b", 2)]
    with pytest.raises(IdempotencyError):
        log.append("s", causes)  # only the envelope differs
    meta = [Draft(body=d.body, key=d.key, meta={"x": 1}) for d in keyed_batch("b", 2)]
    with pytest.raises(IdempotencyError):
        log.append("s", meta)
    assert dump(log) == before


def test_a_retry_stamped_with_another_time_is_a_duplicate(log: Log) -> None:
    # A clock stamps every try anew: the time of a keyed retry is not its identity.
    original = log.append("s", keyed_batch("b", 2, time=1_000))
    fill(log, "s", 1)
    before = dump(log)
    for stamp in (2_000, None):
        retry = log.append("s", keyed_batch("b", 2, time=stamp))
        assert retry == msgspec.structs.replace(original, duplicate=True)
    assert [e.time for e in log.read("s", 0, 2)] == [1_000, 1_000]  # as first stored
    assert dump(log) == before
    changed = [
        keyed_batch("b", 2, time=3_000)[0],
        Draft(body=UserMessageAdded(text="changed"), key="b-1", time=3_000),
    ]
    with pytest.raises(IdempotencyError, match="b-1"):
        log.append("s", changed)
    assert dump(log) == before and log.verify().ok


def test_keys_out_of_their_stored_order_are_an_idempotency_error(log: Log) -> None:
    log.append("s", keyed_batch("b", 3))
    before = dump(log)
    with pytest.raises(IdempotencyError):
        log.append("s", list(reversed(keyed_batch("b", 3))))
    assert dump(log) == before


def test_duplicate_key_inside_one_batch_is_invalid(log: Log) -> None:
    before = dump(log)
    twice = [
        Draft(body=UserMessageAdded(text="a"), key="k"),
        Draft(body=UserMessageAdded(text="b"), key="k"),
    ]
    with pytest.raises(InvalidEventError) as info:
        log.append("s", twice)
    assert type(info.value) is InvalidEventError
    assert "twice" in str(info.value)
    assert dump(log) == before


def test_idempotency_keys_are_scoped_to_their_session(log: Log) -> None:
    log.append("a", keyed_batch("b", 2))
    other = log.append("b", keyed_batch("b", 2))
    assert not other.duplicate
    assert head_seq(log, "b") == 1


@pytest.mark.parametrize(
    "session",
    ["s" * 256, "é" * 128, "🙂" * 64, "x" + "€" * 85],
    ids=["ascii", "2-byte", "4-byte", "3-byte"],
)
def test_ids_and_keys_at_their_byte_limits_work_on_every_backend(log: Log, session: str) -> None:
    # 256 UTF-8 bytes of session id and 254 of key: the longest every backend stores.
    keys = ["k" * 254, "é" * 127, "🙂" * 63 + "kk"]
    assert [len(k.encode()) for k in keys] == [254] * 3
    assert len(session.encode()) == 256
    batch = [Draft(body=UserMessageAdded(text=f"m{i}"), key=k) for i, k in enumerate(keys)]
    first = log.append(session, batch)
    retry = log.append(session, batch)
    assert retry.duplicate and retry.head_hash == first.head_hash
    log.fork(session, 2, session[:-1] + "!", key=keys[0])
    assert [e.key for e in log.read(session)] == keys
    assert head_seq(log, session) == 2  # type: ignore[union-attr]
    assert log.verify().ok and log.verify(session).ok


def test_ids_and_keys_over_their_byte_limits_are_refused_on_every_backend(log: Log) -> None:
    log.append("s", UserMessageAdded(text="x"))
    before = dump(log)
    for session, key, limit in [
        ("é" * 129, None, "256 UTF-8 bytes"),
        ("s" * 256, "k" * 255, "254 UTF-8 bytes"),
        ("s", "🙂" * 64, "254 UTF-8 bytes"),
    ]:
        with pytest.raises(InvalidEventError, match=limit):
            log.append(session, Draft(body=UserMessageAdded(text="y"), key=key))
    assert dump(log) == before


def test_retry_of_a_batch_with_a_blob_is_a_duplicate(log: Log) -> None:
    batch = [
        Draft(body=ToolResultAdded(call_id="c", tool_name="bash", output=big_output()), key="out")
    ]
    original = log.append("s", batch)
    before = dump(log)
    retry = log.append("s", batch)
    assert retry.duplicate and retry.head_hash == original.head_hash
    assert dump(log) == before


# -- reads ---------------------------------------------------------------------------------
def test_read_by_range(log: Log) -> None:
    fill(log, "s", 10)
    assert [e.seq for e in log.read("s", 2, 5)] == [2, 3, 4]
    assert [e.seq for e in log.read("s", 0, 1)] == [0]
    assert log.read("s", 5, 5) == []
    assert log.read("s", 7, 3) == []
    assert [e.seq for e in log.read("s", 8, 100)] == [8, 9]


def test_read_from_a_seq_onward_tails_the_session(log: Log) -> None:
    fill(log, "s", 5)
    seen = log.read("s")
    fill(log, "s", 3, prefix="new")
    tail = log.read("s", seen[-1].seq + 1)
    assert texts(tail) == ["new0", "new1", "new2"]
    assert log.read("s", 100) == []


def test_read_by_kind(log: Log) -> None:
    log.append(
        "s",
        [
            UserMessageAdded(text="q"),
            AssistantMessageAdded(parts=(TextPart(text="a"),)),
            ToolResultAdded(call_id="c", tool_name="bash", output="o"),
            NotificationAdded(source="w", text="n"),
            UserMessageAdded(text="q2"),
        ],
    )
    assert [e.seq for e in log.read("s", kinds=["user"])] == [0, 4]
    assert [e.seq for e in log.read("s", kinds={"tool_result", "notification"})] == [2, 3]
    assert [e.seq for e in log.read("s", 1, 4, kinds=["user", "assistant"])] == [1]
    assert log.read("s", kinds=[]) == []


def test_get_matches_read(log: Log) -> None:
    fill(log, "s", 4)
    events = log.read("s")
    assert [log.get("s", i) for i in range(4)] == events
    with pytest.raises(UnknownSessionError):
        log.get("s", 4)


def test_read_of_an_unknown_session_raises(log: Log) -> None:
    with pytest.raises(UnknownSessionError):
        log.read("nope")
    fill(log, "s", 1)
    with pytest.raises(UnknownSessionError):
        log.read("nope")


def test_events_keep_their_envelope(log: Log) -> None:
    meta = {"z": 1, "a": {"nested": [1, "two", None, True, 2.5]}}
    log.append(
        "s",
        Draft(body=UserMessageAdded(text="x"), time=123, key="k1", causation="req-1", meta=meta),
    )
    event = log.get("s", 0)
    assert (event.time, event.key, event.causation, event.meta) == (123, "k1", "req-1", meta)
    assert event.kind == "user"


# -- snapshots ---------------------------------------------------------------------------
def test_snapshot_does_not_see_a_concurrent_append(log: Log) -> None:
    fill(log, "s", 3)
    with log.snapshot() as snap:
        head = snap.head("s")
        writer = threading.Thread(target=fill, args=(log, "s", 5), kwargs={"prefix": "later"})
        writer.start()
        writer.join(timeout=30)
        assert not writer.is_alive()
        assert snap.head("s") == head
        assert len(snap.read("s")) == 3
        assert [h.seq for h in snap.sessions()] == [2]
        with pytest.raises(UnknownSessionError):
            snap.get("s", 3)
    assert head_seq(log, "s") == 7


def test_snapshot_does_not_see_a_new_session(log: Log) -> None:
    fill(log, "a", 1)
    with log.snapshot() as snap:
        thread = threading.Thread(target=fill, args=(log, "b", 2))
        thread.start()
        thread.join(timeout=30)
        assert [h.session for h in snap.sessions()] == ["a"]
        assert snap.head("b") is None
    assert [h.session for h in log.sessions()] == ["a", "b"]


def test_reader_never_sees_half_a_batch(log: Log) -> None:
    batch_size, max_batches, wanted = 50, 400, 10
    enough = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for b in range(max_batches):
                if enough.is_set():
                    return
                log.append(
                    "s",
                    [
                        Draft(body=UserMessageAdded(text=f"{b}/{i}"), meta={"b": b})
                        for i in range(batch_size)
                    ],
                )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    seen: set[int] = set()
    while writer.is_alive():
        with log.snapshot() as snap:
            head = snap.head("s")
            if head is not None:
                seen.add(head.seq)
                assert (head.seq + 1) % batch_size == 0, f"head at {head.seq}: half a batch"
                tail = snap.read("s", head.seq + 1 - batch_size)
                assert len(tail) == batch_size
                assert len({e.meta["b"] for e in tail}) == 1
                assert tail[-1].hash == head.hash
        if len(seen) >= wanted:
            enough.set()
        time.sleep(0.0002)  # let the writer run
    writer.join()
    assert not errors
    assert len(seen) >= 2, f"the reader saw only heads {sorted(seen)}"
    assert (head_seq(log, "s") + 1) % batch_size == 0


# -- sessions ------------------------------------------------------------------------------
def test_sessions_lists_every_session_with_its_head(log: Log) -> None:
    assert log.sessions() == []
    fill(log, "charlie", 1)
    fill(log, "alpha", 3)
    fill(log, "bravo", 2)
    listed = log.sessions()
    assert [h.session for h in listed] == ["alpha", "bravo", "charlie"]
    assert [h.seq for h in listed] == [2, 1, 0]
    for head in listed:
        assert head == log.head(head.session)
        assert head.hash == log.read(head.session)[-1].hash


def test_session_ids_may_be_any_printable_unicode(log: Log) -> None:
    names = ["ß", "a b", "日本語", "emoji 🙂", "x" * 256, "a/b:c"]
    for name in names:
        log.append(name, UserMessageAdded(text=name))
    assert sorted(h.session for h in log.sessions()) == sorted(names)
    for name in names:
        assert texts(log.read(name)[:1]) == [name]


# -- blobs ---------------------------------------------------------------------------------
def test_large_output_goes_to_a_blob_with_a_preview(log: Log) -> None:
    output = big_output()
    log.append("s", ToolResultAdded(call_id="c", tool_name="bash", output=output))
    body = body_of(log.get("s", 0), ToolResultAdded)
    assert isinstance(body.blob, BlobRef)
    data = output.encode()
    assert body.blob.size == len(data)
    assert body.blob.hash in body.output
    assert len(body.output) < len(output)
    assert body.output.startswith(output[:1000])
    assert body.output.endswith(output[-500:])
    assert log.blob(body.blob.hash) == data
    assert log.blob(body.blob) == data
    assert log.blob(body.blob.hash.upper()) == data


def test_blob_threshold_is_measured_in_utf8_bytes(log: Log) -> None:
    at_limit = "a" * BIG
    over = "é" * (BIG // 2 + 1)  # fewer characters than the limit, more bytes
    log.append("s", [UserMessageAdded(text=at_limit), UserMessageAdded(text=over)])
    first, second = (body_of(e, UserMessageAdded) for e in log.read("s"))
    assert first.blob is None and first.text == at_limit
    assert second.blob is not None
    assert log.blob(second.blob).decode() == over


def test_user_messages_and_notifications_move_to_blobs_too(log: Log) -> None:
    text = big_output("n")
    log.append("s", [UserMessageAdded(text=text), NotificationAdded(source="w", text=text)])
    user = body_of(log.get("s", 0), UserMessageAdded)
    note = body_of(log.get("s", 1), NotificationAdded)
    assert user.blob is not None and user.blob == note.blob
    assert log.blob(note.blob).decode() == text


def test_identical_outputs_share_one_blob(log: Log) -> None:
    output = big_output()
    log.append(
        "s",
        [
            ToolResultAdded(call_id="a", tool_name="bash", output=output),
            ToolResultAdded(call_id="b", tool_name="bash", output=output),
        ],
    )
    log.append("t", ToolResultAdded(call_id="c", tool_name="bash", output=output))
    log.append("t", ToolResultAdded(call_id="d", tool_name="bash", output=big_output("y")))
    with log.store.read() as txn:
        stored = list(txn.blobs())
    assert len(stored) == 2
    blobs = [body_of(e, ToolResultAdded).blob for s in ("s", "t") for e in log.read(s)]
    refs = {blob.hash for blob in blobs if blob is not None}
    assert len(blobs) == 4 and None not in blobs
    assert refs == {digest for digest, _ in stored}


def test_put_blob_returns_a_ref_an_event_can_carry(log: Log) -> None:
    image = bytes(range(256)) * 10
    ref = log.put_blob(image, "image/png")
    assert ref.size == len(image) and ref.media_type == "image/png"
    log.append(
        "s", UserMessageAdded(text="look", images=(ImagePart(media_type="image/png", blob=ref),))
    )
    blob = body_of(log.get("s", 0), UserMessageAdded).images[0].blob
    assert blob is not None and log.blob(blob) == image
    report = log.verify()
    assert report.ok and report.blobs == 1


def test_blob_of_an_unknown_hash_raises(log: Log) -> None:
    with pytest.raises(turnlog.errors.BlobNotFoundError):
        log.blob("0" * 64)


# -- forks and rewinds ---------------------------------------------------------------------
def test_fork_starts_with_a_session_forked_event_chained_to_the_source(log: Log) -> None:
    fill(log, "main", 5)
    source = log.get("main", 2)
    done = log.fork("main", 2, "branch", time=42, key="fork-1")
    assert (done.first_seq, done.last_seq) == (0, 0)
    first = log.get("branch", 0)
    assert isinstance(first.body, SessionForked)
    assert first.body == SessionForked(from_session="main", from_seq=2, from_hash=source.hash.hex())
    assert first.prev == source.hash
    assert first.hash == recompute_hash(first)
    assert first.time == 42 and first.key == "fork-1"
    log.append("branch", UserMessageAdded(text="other way"))
    assert log.verify().ok


def test_lineage_follows_forks_back_to_the_root(log: Log) -> None:
    fill(log, "main", 5)
    log.fork("main", 2, "b1")
    fill(log, "b1", 2, prefix="b1-")
    log.fork("b1", 1, "b2")
    fill(log, "b2", 1, prefix="b2-")
    lineage = log.lineage("b2")
    assert [(e.session, e.seq) for e in lineage] == [
        ("main", 0),
        ("main", 1),
        ("main", 2),
        ("b1", 0),
        ("b1", 1),
        ("b2", 0),
        ("b2", 1),
    ]
    assert [(e.session, e.seq) for e in log.lineage("main")] == [("main", i) for i in range(5)]
    assert log.verify().ok


def test_fork_into_an_existing_session_is_a_conflict(log: Log) -> None:
    fill(log, "main", 2)
    fill(log, "other", 1)
    before = dump(log)
    with pytest.raises(AppendConflictError):
        log.fork("main", 0, "other")
    assert dump(log) == before


def test_fork_of_a_missing_event_raises(log: Log) -> None:
    fill(log, "main", 2)
    before = dump(log)
    with pytest.raises(UnknownSessionError):
        log.fork("main", 2, "branch")
    with pytest.raises(UnknownSessionError):
        log.fork("nope", 0, "branch")
    assert dump(log) == before


def test_forged_fork_with_a_wrong_hash_is_rejected(log: Log) -> None:
    fill(log, "main", 2)
    before = dump(log)
    forged = SessionForked(from_session="main", from_seq=1, from_hash="ab" * 32)
    with pytest.raises(InvalidEventError):
        log.append("branch", forged)
    assert dump(log) == before


def test_rewind_is_an_event_and_the_log_never_shrinks(log: Log) -> None:
    fill(log, "s", 4)
    hashes = [e.hash for e in log.read("s")]
    done = log.append("s", SessionRewound(to_seq=1, reason="user undo"))
    assert done.first_seq == 4
    events = log.read("s")
    assert [e.hash for e in events[:4]] == hashes
    assert events[4].body == SessionRewound(to_seq=1, reason="user undo")
    log.append("s", SessionRewound(to_seq=-1))
    assert head_seq(log, "s") == 5
    assert log.verify().ok


def test_rewind_must_point_before_itself(log: Log) -> None:
    fill(log, "s", 2)
    before = dump(log)
    for to_seq in (2, 3, -2):
        with pytest.raises(InvalidEventError):
            log.append("s", SessionRewound(to_seq=to_seq))
    assert dump(log) == before


# -- verify and checkpoints ----------------------------------------------------------------
def test_verify_of_an_intact_log_is_ok(log: Log) -> None:
    fill(log, "a", 3)
    log.append("b", ToolResultAdded(call_id="c", tool_name="bash", output=big_output()))
    log.fork("a", 1, "c")
    report = log.verify()
    assert report.ok and report.problem is None
    assert (report.sessions, report.events, report.blobs) == (3, 5, 1)
    single = log.verify("a")
    assert single.ok and (single.sessions, single.events) == (1, 3)


def test_verify_of_an_empty_log_is_ok(log: Log) -> None:
    report = log.verify()
    assert report.ok and (report.sessions, report.events, report.blobs) == (0, 0, 0)


def test_verify_of_an_unknown_session_raises(log: Log) -> None:
    with pytest.raises(UnknownSessionError):
        log.verify("nope")


def test_checkpoint_records_the_head(log: Log) -> None:
    fill(log, "s", 3)
    cp = log.checkpoint("s")
    head = log.head("s")
    assert head is not None
    assert cp == Checkpoint(session="s", seq=head.seq, hash=head.hash.hex())
    assert cp.mac == ""


def test_log_that_grew_still_verifies_against_its_checkpoint(log: Log) -> None:
    fill(log, "s", 3)
    cp = log.checkpoint("s")
    fill(log, "s", 3, prefix="later")
    assert log.verify(checkpoint=cp).ok
    assert log.verify("s", checkpoint=cp).ok


def test_signed_checkpoint_verifies_only_with_its_key(log: Log) -> None:
    fill(log, "s", 3)
    key = b"correct horse battery staple"
    cp = log.checkpoint("s", key=key)
    assert len(cp.mac) == 64
    fill(log, "s", 1, prefix="later")
    assert log.verify(checkpoint=cp, key=key).ok
    with pytest.raises(VerificationError):
        log.verify(checkpoint=cp, key=b"wrong key")
    with pytest.raises(VerificationError):
        log.verify(checkpoint=cp)
    with pytest.raises(VerificationError):
        log.verify(checkpoint=msgspec.structs.replace(cp, seq=0), key=key)
    with pytest.raises(VerificationError):
        log.verify(checkpoint=log.checkpoint("s"), key=key)


def test_checkpoint_catches_a_truncated_log(logs: LogFactory) -> None:
    original = logs.open()
    fill(original, "s", 10)
    cp = original.checkpoint("s")
    signed = original.checkpoint("s", key=b"k")
    shorter = logs.open()
    fill(shorter, "s", 6)  # the same first six events, the rest cut off
    assert [e.hash for e in shorter.read("s")] == [e.hash for e in original.read("s", 0, 6)]
    assert shorter.verify().ok  # the chain alone cannot tell
    for report in (shorter.verify(checkpoint=cp), shorter.verify(checkpoint=signed, key=b"k")):
        assert not report.ok
        assert problem_of(report).session == "s" and problem_of(report).seq == 9
        assert "truncated" in problem_of(report).reason


def test_checkpoint_catches_a_session_that_is_gone(logs: LogFactory) -> None:
    original = logs.open()
    fill(original, "s", 2)
    cp = original.checkpoint("s")
    empty = logs.open()
    fill(empty, "other", 1)
    report = empty.verify(checkpoint=cp)
    assert not report.ok and problem_of(report).session == "s"


def test_checkpoint_catches_a_rewritten_chain(logs: LogFactory) -> None:
    original = logs.open()
    fill(original, "s", 10)
    cp = original.checkpoint("s", key=b"k")
    rewritten = logs.open()
    fill(rewritten, "s", 3)
    rewritten.append("s", UserMessageAdded(text="history, edited"))
    fill(rewritten, "s", 8, prefix="x")
    assert rewritten.verify().ok  # a consistent chain, rebuilt from seq 3
    report = rewritten.verify(checkpoint=cp, key=b"k")
    assert not report.ok
    assert (problem_of(report).session, problem_of(report).seq) == ("s", 9)
    assert "rewritten" in problem_of(report).reason


def test_checkpoint_of_an_unknown_session_raises(log: Log) -> None:
    with pytest.raises(UnknownSessionError):
        log.checkpoint("nope")


def test_log_is_usable_as_a_context_manager(logs: LogFactory) -> None:
    with logs.open() as log:
        fill(log, "s", 1)
        assert "turnlog.Log" in repr(log)
    with pytest.raises(turnlog.errors.StoreError):
        log.append("s", UserMessageAdded(text="after close"))


def test_forks_take_rewinds_pins_and_compactions_by_lineage_position(log: Log) -> None:
    """In a fork, positions count the forked-from history first."""
    from turnlog.events import CompactionCommitted, EventsPinned, SessionRewound

    log.append("src", [UserMessageAdded(text=f"m{i}") for i in range(5)])
    log.fork("src", 3, "f")  # the fork's seq 0 is lineage position 4
    log.append("f", [UserMessageAdded(text="a"), UserMessageAdded(text="b")])  # positions 5, 6
    assert [e.seq for e in log.lineage("f")] == [0, 1, 2, 3, 0, 1, 2]
    log.append("f", EventsPinned(seqs=(6,)))  # position 7 pins position 6
    log.append(
        "f", CompactionCommitted(first_seq=0, last_seq=6, covered_digest="0" * 64, summary="s")
    )
    log.append("f", SessionRewound(to_seq=5))
    with pytest.raises(InvalidEventError, match="position"):
        log.append("f", EventsPinned(seqs=(99,)))
    assert log.verify().ok


# -- following -------------------------------------------------------------------------
def test_follow_yields_stored_events_then_new_ones_as_they_come(log: Log) -> None:
    fill(log, "s", 2)
    seen: list[str] = []

    def follow() -> None:
        seen.extend(texts(log.follow("s", 0, timeout=30, limit=3)))

    follower = threading.Thread(target=follow)
    follower.start()
    log.append("s", UserMessageAdded(text="new1"))
    log.append("s", [UserMessageAdded(text="new2"), UserMessageAdded(text="never")])
    follower.join(timeout=60)
    assert seen == ["m1", "new1", "new2"]


def test_follow_waits_for_a_session_that_does_not_exist_yet(log: Log) -> None:
    seen: list[int] = []
    follower = threading.Thread(
        target=lambda: seen.extend(e.seq for e in log.follow("later", timeout=30, limit=2))
    )
    follower.start()
    fill(log, "later", 2)
    follower.join(timeout=60)
    assert seen == [0, 1]


def test_follow_stops_after_its_timeout_without_new_events(log: Log) -> None:
    fill(log, "s", 3)
    assert [e.seq for e in log.follow("s", timeout=0)] == [0, 1, 2]
    assert list(log.follow("s", 2, timeout=0.05)) == []
    assert list(log.follow("nothing", timeout=0)) == []


def test_follow_past_the_head_is_refused_without_a_hash_and_never_skips_the_gap(
    logs: LogFactory,
) -> None:
    # The follower saw five events; the store it resumes on holds three of them
    # (restored from an older backup, or a replica behind).
    seen, restored = logs.open(), logs.open()
    fill(seen, "s", 5)
    fill(restored, "s", 3)
    last = seen.get("s", 4)
    with pytest.raises(turnlog.errors.HistoryMismatchError, match="behind seq 4") as caught:
        next(restored.follow("s", 4, timeout=0))
    assert (caught.value.seq, caught.value.head) == (4, 2)
    # With the hash, it waits for the store to catch up; here others fill the gap.
    outcome: list[object] = []

    def follow() -> None:
        try:
            outcome.extend(
                texts(restored.follow("s", 4, after_hash=last.hash, timeout=30, limit=1))
            )
        except turnlog.errors.HistoryMismatchError as exc:
            outcome.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    restored.append(
        "s",
        [
            UserMessageAdded(text="other3"),
            UserMessageAdded(text="other4"),
            UserMessageAdded(text="new"),
        ],
    )
    follower.join(timeout=60)
    assert len(outcome) == 1
    assert isinstance(outcome[0], turnlog.errors.HistoryMismatchError), outcome
    assert "s#4" in str(outcome[0]) and "another history" in str(outcome[0])
    # The same history caught up: the follower goes on after its last event.
    fill(seen, "s", 1, prefix="next")
    assert texts(seen.follow("s", 4, after_hash=last.hash.hex(), timeout=0)) == ["next0"]
    with pytest.raises(turnlog.errors.HistoryMismatchError, match="another history"):
        next(restored.follow("s", 4, after_hash=last.hash, timeout=0))


@pytest.mark.parametrize(
    "bad",
    [
        {"after_seq": -2},
        {"after_seq": "0"},
        {"timeout": -1},
        {"limit": 0},
        {"timeout": True},
        {"outage": -1},
        {"after_hash": "00"},
        {"after_hash": bytes(32)},
    ],
)
def test_follow_rejects_bad_arguments(log: Log, bad: dict[str, object]) -> None:
    with pytest.raises(turnlog.errors.InvalidArgumentError):
        log.follow("s", **bad)  # type: ignore[arg-type]


# -- copying -----------------------------------------------------------------------------
def test_copy_log_to_another_store_keeps_every_hash_key_and_blob(logs: LogFactory) -> None:
    source, target = logs.open(), logs.open()
    fill(source, "a", 3)
    source.append(
        "a",
        [
            Draft(body=UserMessageAdded(text="k"), key="key-1"),
            Draft(body=ToolResultAdded(call_id="c", tool_name="t", output=big_output())),
        ],
    )
    source.fork("a", 1, "b")
    copied = turnlog.log.copy_log(source, target)
    assert (copied.sessions, copied.events, copied.blobs) == (2, 6, 1)
    for part in ("sessions", "events", "blobs"):
        assert dump(target)[part] == dump(source)[part]
    assert target.verify().ok
    again = target.append("a", Draft(body=UserMessageAdded(text="k"), key="key-1"))
    assert again.duplicate and again.first_seq == 3


def test_the_idempotency_index_lists_and_looks_up_alike_on_every_backend(log: Log) -> None:
    """What verify reads the index with: a session's keys in key order, and a batch of
    lookups (unknown keys, and keys of another session, are None)."""
    log.append("s", keyed_batch("b", 3))
    log.append("s", UserMessageAdded(text="no key"))
    log.append("s", Draft(body=UserMessageAdded(text="z"), key="a-first"))
    log.append("t", Draft(body=UserMessageAdded(text="t"), key="t-only"))
    with log.store.read() as txn:
        listed = txn.idempotency_keys("s")
        assert listed is not None
        assert list(listed) == [("a-first", 4), ("b-0", 0), ("b-1", 1), ("b-2", 2)]
        assert list(txn.idempotency_keys("none") or ()) == []
        assert txn.idempotency_seqs("s", ["b-2", "t-only", "nope", "b-0"]) == [2, None, None, 0]
        assert txn.idempotency_seqs("s", []) == []
    assert log.verify().ok

"""LMDB-specific behaviour of the event puts (batches and single events): appending past
the last key, inserting before it, and refusing to overwrite an event beyond the head."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import support
import turnlog
from support import dump
from turnlog.errors import StoreCorruptError
from turnlog.events import AssistantMessageAdded, ToolCall, ToolResultAdded, UserMessageAdded
from turnlog.stores import LMDBStore


def _leaf_pages(log: turnlog.Log) -> int:
    store = log.store
    assert isinstance(store, LMDBStore)
    with store._env.begin() as txn:
        return int(txn.stat(store._dbs[b"events"])["leaf_pages"])


@pytest.mark.parametrize("batch", [50, 1])
def test_batches_at_the_end_of_the_database_fill_whole_pages(tmp_path: Path, batch: int) -> None:
    with turnlog.open(tmp_path / "store", sync=False) as log:
        for i in range(1000 // batch):
            events = [UserMessageAdded(text=f"{i}-{j}-" + "x" * 1000) for j in range(batch)]
            log.append("s", events if batch > 1 else events[0])
        # About three 1 KiB records fit a 4 KiB page; split pages would hold two.
        assert _leaf_pages(log) < 1000 / 2.5
        assert log.verify().ok


@pytest.mark.parametrize("batch", [3, 1])
def test_sessions_written_in_turns_read_back_in_order(tmp_path: Path, batch: int) -> None:
    with turnlog.open(tmp_path / "store", sync=False) as log:
        expected: dict[str, list[str]] = {}
        for round_ in range(5):
            # "a" and "b" sort before sessions written after them: their batches are
            # inserted, the others appended.
            for name in ["b", "a", "b 1", "b1", "c", "a"]:
                texts = [f"{name} {round_} {len(expected.get(name, [])) + j}" for j in range(batch)]
                events = [UserMessageAdded(text=t) for t in texts]
                log.append(name, events if batch > 1 else events[0])
                expected.setdefault(name, []).extend(texts)
        for name, wanted in expected.items():
            stored = log.read(name)
            assert support.texts(stored) == wanted
            assert [e.seq for e in stored] == list(range(len(wanted)))
            assert [e.seq for e in log.read(name, 2, 7)] == list(range(2, min(7, len(wanted))))
        assert log.verify().ok


@pytest.mark.parametrize(
    ("stray", "batch", "after"),
    [
        (1, 1, None),  # the next event's key is the database's last: not appended, not inserted
        (1, 3, None),  # the batch's first key
        (2, 3, None),  # a key inside the batch: its first is inserted, then the stray refuses
        (1, 1, "t"),  # another session's keys follow: inserted, and refused
        (2, 3, "t"),
    ],
)
def test_an_event_beyond_the_head_makes_the_append_fail_and_change_nothing(
    tmp_path: Path, stray: int, batch: int, after: str | None
) -> None:
    with turnlog.open(tmp_path / "store", sync=False) as log:
        log.append("s", UserMessageAdded(text="one"))
        # A record that the head does not know about (a damaged store).
        log.store.write(lambda txn: txn.put_event("s", stray, b"\x00" * 64 + b"stray"))
        if after is not None:
            log.append(after, UserMessageAdded(text="later"))
        before = dump(log)
        events = [UserMessageAdded(text=f"two {i}") for i in range(batch)]
        with pytest.raises(StoreCorruptError, match="beyond its head"):
            log.append("s", events if batch > 1 else events[0])
        assert dump(log) == before


def test_threads_sharing_a_log_read_while_another_thread_grows_the_map(tmp_path: Path) -> None:
    # A small first map makes the writer grow it eight times (1 MiB to 256 MiB);
    # growing replaces the map under every open transaction of the process, so
    # each growth must wait until no other thread has one open. Refused appends
    # in between must end their write without waiting for the readers to pause
    # (two readers in tight loops always have an LMDB call in flight).
    log = turnlog.Log(LMDBStore(tmp_path / "store", map_size=1 << 20, sync=False))
    log.append("chat", UserMessageAdded(text="start"))
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0, 0]

    def reader(slot: int) -> None:
        while not stop.is_set():
            try:
                events = log.read("chat")
                assert events[0].seq == 0 and events[-1].seq == len(events) - 1
                with log.snapshot() as snap:  # a longer transaction, walked event by event
                    assert sum(1 for _ in snap.iter("chat")) == len(snap.read("chat"))
                reads[slot] += 1
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    def writer() -> None:
        try:
            for i in range(120):
                head = log.append(
                    "chat",
                    [
                        AssistantMessageAdded(parts=(ToolCall(id=f"c{i}", name="dump"),)),
                        ToolResultAdded(
                            call_id=f"c{i}", tool_name="dump", output=f"{i:08d}" + "x" * (1 << 20)
                        ),
                    ],
                ).last_seq
                with pytest.raises(turnlog.errors.AppendConflictError):
                    log.append("chat", UserMessageAdded(text="late"), expected_seq=head - 1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    appender = threading.Thread(target=writer)
    appender.start()
    appender.join(timeout=120)  # a few seconds at most; a stall is a failure, not a hang
    stalled = appender.is_alive()
    stop.set()
    for thread in [*threads, appender]:
        thread.join()
    log.close()
    assert not stalled, f"the appending thread stalled behind readers ({reads} reads)"
    assert not errors, f"a thread failed after {reads} reads: {errors[0]!r}"
    assert all(reads)


def test_a_session_stored_under_an_id_over_the_byte_limit_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before the byte limit, LMDB took session ids of up to 502 UTF-8 bytes.
    old = "é" * 200
    with monkeypatch.context() as patched:
        patched.setattr("turnlog._log.MAX_SESSION_BYTES", 502)
        with turnlog.open(tmp_path / "store") as log:
            log.append(old, [UserMessageAdded(text="one"), UserMessageAdded(text="two")])
    with turnlog.open(tmp_path / "store") as log:
        assert [h.session for h in log.sessions()] == [old]
        assert len(log.read(old)) == 2 and log.get(old, 1).seq == 1
        assert log.verify(old).ok and log.verify(checkpoint=log.checkpoint(old)).ok
        before = dump(log)
        with pytest.raises(turnlog.errors.InvalidEventError, match=r"Log\.fork continues it"):
            log.append(old, UserMessageAdded(text="three"))
        assert dump(log) == before
        log.fork(old, 1, "short")
        log.append("short", UserMessageAdded(text="three"))
        assert [e.seq for e in log.lineage("short")] == [0, 1, 0, 1]
        assert log.verify("short").ok

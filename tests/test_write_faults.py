"""Fail the k-th write call, for k = 1, 2, ... until the operation succeeds.

SQLite's ``ioerr`` tests fail the Nth I/O operation for every N and check that nothing
changed; this is the same sweep one level up. `FailingStore` wraps a real store (LMDB
on disk or memory) and raises `StoreError` at its k-th write call: entering
``Store.write`` or any `WriteTxn` method that writes (``put_event``, ``put_events``,
``set_head``, ``put_idempotency``, ``put_blob``, ``put_cached``). For each operation
(an append with a blob and keys, a fork, a compaction, a request record) the sweep
runs k = 1, 2, ...: each failing run must raise `StoreError` and leave every byte of
the store as it was; the first run that sees no fault must leave the store exactly as
the same operation leaves a store that never failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest
from support import dump, head_seq
from turnlog import Compactor, Draft, Log, Packer, Policy, Replayer
from turnlog.errors import StoreError
from turnlog.events import (
    AssistantMessageAdded,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.stores import LMDBStore, MemoryStore, ReadTxn, Store, WriteTxn

T = TypeVar("T")
SESSION = "s"
POLICY = Policy(context_window=2_000, output_reserve=200, keep_recent_turns=1)
BIG = "a line of a tool's output that will not fit in an event\n" * 2_000  # a blob


class InjectedFault(StoreError):
    """The fault `FailingStore` raises (a `StoreError`, as a real backend's would be)."""


class Counter:
    """Counts write calls and fails the ``fail_at``-th one (0: never)."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail_at = 0

    def tick(self, what: str) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise InjectedFault(f"injected fault at write call {self.calls} ({what})")


class FailingTxn(WriteTxn):
    """A `WriteTxn` that counts its writes and fails where the counter says."""

    def __init__(self, inner: WriteTxn, counter: Counter) -> None:
        self._inner = inner
        self._counter = counter

    # reads pass through
    def head(self, session: str) -> tuple[int, bytes] | None:
        return self._inner.head(session)

    def get(self, session: str, seq: int) -> bytes | None:
        return self._inner.get(session, seq)

    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        return self._inner.scan(session, start, stop, every=every)

    def records(self, session: str, start: int, stop: int | None) -> list[bytes]:
        return self._inner.records(session, start, stop)

    def sessions(self) -> Iterator[tuple[str, int, bytes]]:
        return self._inner.sessions()

    def blob(self, digest: str) -> bytes | None:
        return self._inner.blob(digest)

    def blobs(self) -> Iterator[tuple[str, bytes]]:
        return self._inner.blobs()

    def idempotency(self, session: str, key: str) -> int | None:
        return self._inner.idempotency(session, key)

    def cached(self, namespace: str, key: bytes) -> bytes | None:
        return self._inner.cached(namespace, key)

    def cache_items(self) -> Iterator[tuple[str, bytes, bytes]]:
        return self._inner.cache_items()

    # writes count
    def put_event(self, session: str, seq: int, record: bytes) -> None:
        self._counter.tick("put_event")
        self._inner.put_event(session, seq, record)

    def put_events(self, session: str, first_seq: int, records: Sequence[bytes]) -> None:
        self._counter.tick("put_events")
        self._inner.put_events(session, first_seq, records)

    def set_head(self, session: str, seq: int, digest: bytes) -> None:
        self._counter.tick("set_head")
        self._inner.set_head(session, seq, digest)

    def put_idempotency(self, session: str, key: str, seq: int) -> None:
        self._counter.tick("put_idempotency")
        self._inner.put_idempotency(session, key, seq)

    def put_blob(self, digest: str, data: bytes) -> None:
        self._counter.tick("put_blob")
        self._inner.put_blob(digest, data)

    def put_cached(self, namespace: str, key: bytes, value: bytes) -> None:
        self._counter.tick("put_cached")
        self._inner.put_cached(namespace, key, value)


class FailingStore(Store):
    """A store that fails its k-th write call (see the module docstring)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.counter = Counter()
        self.name = inner.name
        self.location = inner.location

    def read(self) -> AbstractContextManager[ReadTxn]:
        return self.inner.read()

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        self.counter.tick("write")
        return self.inner.write(lambda txn: fn(FailingTxn(txn, self.counter)))

    def close(self) -> None:
        self.inner.close()

    def wait(self, session: str, after_seq: int, timeout: float) -> bool:
        return self.inner.wait(session, after_seq, timeout)


def contents(store: FailingStore, *, exact: bool = True) -> dict[str, Any]:
    """Every byte the wrapped store holds (`support.dump`). With ``exact`` False, what two
    stores given the same operations must agree on: not the hash of LMDB's ``data.mdb``
    (their free pages differ) nor the derived token-count cache (the counts a process
    has saved once are not saved again, to whichever store)."""
    return comparable(dump(cast(Log, SimpleNamespace(store=store.inner))), exact=exact)


def comparable(found: dict[str, Any], *, exact: bool) -> dict[str, Any]:
    if not exact:
        found.pop("data.mdb", None)
        for name in ("cache", b"cache"):
            found["raw"].pop(name, None)
    return found


# -- the operations -------------------------------------------------------------------------
def history(log: Log) -> None:
    """What every store holds before the operation: a few turns, the last with a tool."""
    for turn in range(6):
        log.append(
            SESSION,
            [
                Draft(
                    body=UserMessageAdded(text=f"turn {turn}: " + "tell me more " * 40),
                    time=turn * 10,
                    key=f"u{turn}",
                ),
                Draft(
                    body=AssistantMessageAdded(parts=(TextPart(text="more " * 60),)),
                    time=turn * 10 + 1,
                ),
            ],
        )
    Replayer(Packer(log)).record(SESSION, policy=POLICY, time=100)


def append(log: Log) -> object:
    return log.append(
        SESSION,
        [
            Draft(
                body=AssistantMessageAdded(
                    parts=(
                        TextPart(text="reading"),
                        ToolCall(id="c1", name="Read", arguments='{"file_path": "a.py"}'),
                    )
                ),
                time=200,
                key="a1",
            ),
            Draft(
                body=ToolResultAdded(call_id="c1", tool_name="Read", output=BIG), time=201, key="a2"
            ),
        ],
    )


def fork(log: Log) -> object:
    return log.fork(SESSION, 5, "branch", time=300, key="f1")


def compact(log: Log) -> object:
    outcome = Compactor(log, Packer(log)).compact(SESSION, policy=POLICY, time=400)
    assert outcome.status == "committed", outcome
    return outcome


def record(log: Log) -> object:
    log.append(SESSION, UserMessageAdded(text="one more question"), expected_seq=None)
    return Replayer(Packer(log)).record(SESSION, policy=POLICY, model="m", time=500)


def record_only(log: Log) -> object:
    return Replayer(Packer(log)).record(SESSION, policy=POLICY, model="m", time=500)


OPERATIONS: dict[str, Callable[[Log], object]] = {
    "append": append,
    "fork": fork,
    "compact": compact,
    "record": record_only,
}


def open_store(backend: str, path: Path) -> Store:
    return LMDBStore(str(path)) if backend == "lmdb" else MemoryStore()


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_failed_write_call_changes_nothing_and_the_first_clean_run_matches(
    backend: str, operation: str, tmp_path: Path
) -> None:
    run = OPERATIONS[operation]
    # the reference: the same history and operation on a store that never fails
    reference = Log(open_store(backend, tmp_path / "reference"))
    history(reference)
    run(reference)
    expected = comparable(dump(reference), exact=False)
    reference.close()

    store = FailingStore(open_store(backend, tmp_path / "store"))
    log = Log(store)
    history(log)
    before = contents(store)
    faults = 0
    for k in range(1, 200):
        store.counter.calls = 0
        store.counter.fail_at = k
        try:
            run(Log(store))  # a fresh Log each time: no state carried in the process
        except InjectedFault:
            faults += 1
            after = contents(store)
            assert after == before, (
                f"write call {k} failed and the store changed: ",
                {
                    key: sorted(set(after["raw"][key]) ^ set(before["raw"][key]))[:3]
                    for key in after["raw"]
                    if after["raw"][key] != before["raw"][key]
                },
            )
            assert log.verify().ok
            continue
        assert store.counter.calls < k, "the operation swallowed the fault"
        break
    else:
        pytest.fail("the operation never completed")
    assert faults >= 2  # every operation writes more than once: the sweep did sweep
    assert contents(store, exact=False) == expected
    assert log.verify().ok
    log.close()


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
def test_a_log_that_saw_faults_keeps_working(backend: str, tmp_path: Path) -> None:
    # The same Log object across the faults: nothing it remembers may go stale.
    store = FailingStore(open_store(backend, tmp_path / "store"))
    log = Log(store)
    history(log)
    for k in range(1, 50):
        store.counter.calls = 0
        store.counter.fail_at = k
        try:
            append(log)
        except InjectedFault:
            continue
        break
    store.counter.fail_at = 0
    record(log)
    fork(log)
    assert log.verify().ok
    assert [e.kind for e in log.read("branch")] == ["fork"]
    assert Replayer(Packer(log)).replay(SESSION, head_seq(log, SESSION)).ok


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
def test_a_recorded_request_is_not_reported_failed_when_saving_its_token_counts_fails(
    backend: str, tmp_path: Path
) -> None:
    # Texts no test has counted yet, so that recording saves new token counts (derived
    # data, written after the record commits): a failure there must not make `record`
    # raise for a request it recorded, or the caller records it again.
    store = FailingStore(open_store(backend, tmp_path / "store"))
    log = Log(store)
    log.append(SESSION, UserMessageAdded(text="a first question"))
    Replayer(Packer(log)).record(SESSION, policy=POLICY, model="m", time=0)  # policy in force
    log.append(SESSION, UserMessageAdded(text=f"a question never counted before: {tmp_path}"))
    for k in range(1, 50):
        store.counter.calls = 0
        store.counter.fail_at = k
        before = contents(store)
        try:
            Replayer(Packer(log)).record(SESSION, policy=POLICY, model="m", time=k)
        except InjectedFault:
            assert contents(store) == before, f"write call {k} failed after the record committed"
            continue
        break
    assert [e.kind for e in log.read(SESSION)] == ["user", "policy", "request", "user", "request"]

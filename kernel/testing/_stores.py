"""Store conformance: the rules every `Store` keeps, shipped for any backend to run.

Theory of operation
-------------------
The rules of the log (validation, idempotency, optimistic concurrency, hash
links, blobs, forks, verify) live once, in `Log`; a store only has to keep its
side of the interface: snapshot reads that later writes never change, writes
that land whole or not at all, and the bytes it is given back unchanged. This
module states that side as tests, run through a `Log` over the store, so a
backend written outside turnlog (SQLite, say) proves itself with one factory,
as eventsourcing's recorder test cases do:

* `StoreConformance` holds the cases as ``test_*`` methods. Subclass it in a
  test module under a name pytest collects, and give it ``make_store`` (a new,
  empty store) and, for a store that persists, ``reopen_store`` (close it and
  open the same data again, as a restarted process would)::

      class TestSQLiteStore(StoreConformance):
          def make_store(self) -> Store:
              return SQLiteStore(self.tmp / f"{next(self.names)}.db")

* `agreement_machine` drives several stores side by side with the same random
  operations (appends with and without keys and preconditions, retries, forks,
  rewinds, reads, reopening) and requires that they agree on every result,
  every error type, every hash and every stored byte; every store must verify
  after every step::

      TestAgree = agreement_machine({"memory": MemoryStore, "sqlite": make}).TestCase

The cases use hypothesis only in the machine; the rest are plain methods.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from .._errors import (
    AppendConflictError,
    IdempotencyError,
    InvalidEventError,
    KernelError,
    StoreError,
    UnknownSessionError,
)
from .._events import (
    AssistantMessageAdded,
    NotificationAdded,
    SessionRewound,
    TextPart,
    ToolResultAdded,
    UserMessageAdded,
)
from .._log import NEW_SESSION, Draft, Log
from .._store import ReadAheadMiss, ReadTxn, Store, WriteTxn

__all__ = ["StoreConformance", "StoreFactory", "agreement_machine", "payloads", "store_contents"]

#: Makes a new, empty store.
StoreFactory = Callable[[], Store]

#: Text a store must keep as given (no lone surrogates: those are not UTF-8).
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


def payloads(*, big: bool = True) -> st.SearchStrategy[Any]:
    """Payloads a log must store as given; now and then (``big``) one whose text
    crosses the default blob threshold (64 KiB), so blobs are written too."""
    text = _TEXT
    if big:
        text = st.one_of(_TEXT, _TEXT.filter(bool).map(lambda s: s * (70_000 // len(s) + 1)))
    return st.one_of(
        st.builds(UserMessageAdded, text=text),
        st.builds(
            ToolResultAdded,
            call_id=st.just("call-1"),
            tool_name=st.just("bash"),
            output=text,
            is_error=st.booleans(),
        ),
        st.builds(NotificationAdded, source=st.just("watcher"), text=_TEXT),
        st.builds(
            AssistantMessageAdded,
            parts=st.lists(st.builds(TextPart, text=_TEXT), min_size=1, max_size=3).map(tuple),
        ),
    )


def store_contents(store: Store) -> dict[str, Any]:
    """Everything ``store`` holds that the `Store` interface lists, as plain data
    (sessions and heads, every record's bytes, every blob, every cached value when
    the store lists its cache), to
    say "unchanged" or "the same as that store" and mean it."""
    with store.read() as txn:
        heads = list(txn.sessions())
        try:
            cache: list[tuple[str, bytes, bytes]] | None = sorted(
                (ns, bytes(k), bytes(v)) for ns, k, v in txn.cache_items()
            )
        except StoreError:
            cache = None  # a store need not list its (derived) cache
        return {
            "sessions": heads,
            "events": {
                name: [(seq, bytes(record)) for seq, record in txn.scan(name, 0, None, every=True)]
                for name, _, _ in heads
            },
            "blobs": sorted((digest, bytes(data)) for digest, data in txn.blobs()),
            "cache": cache,
        }


@contextmanager
def _raises(error: type[BaseException], *words: str) -> Iterator[None]:
    """Require ``error`` (its message holding ``words``) from the block."""
    try:
        yield
    except error as exc:
        for word in words:
            assert word in str(exc), f"{word!r} not in the message: {exc}"
    else:
        raise AssertionError(f"{error.__name__} was not raised")


class _Stop(Exception):
    """Raised inside a write to abandon it."""


class StoreConformance:
    """The rules every store keeps, as test methods run through a `Log` over it.

    Subclass it under a name pytest collects (``TestMyStore``) and define
    `make_store`; a store that persists defines `reopen_store` too.
    """

    def make_store(self) -> Store:
        """A new, empty store of the backend under test."""
        raise NotImplementedError("define make_store() in the subclass: a new, empty store")

    def reopen_store(self, store: Store) -> Store:
        """Close ``store`` and open the same data again (the same store, for one that
        lives in memory only)."""
        return store

    # -- plumbing --------------------------------------------------------------------------
    def setup_method(self, method: object = None) -> None:
        self._logs: list[Log] = []
        self._times = itertools.count(1)

    def teardown_method(self, method: object = None) -> None:
        for log in self._logs:
            with suppress(KernelError):  # a case may have closed it
                log.close()
        self._logs.clear()

    def open_log(self, **options: Any) -> Log:
        """A log over a new store of the backend under test."""
        log = Log(self.make_store(), **options)
        self._logs.append(log)
        return log

    def reopen_log(self, log: Log) -> Log:
        """``log``'s store closed and opened again, in a new log."""
        store = self.reopen_store(log.store)
        fresh = (
            log
            if store is log.store
            else Log(
                store,
                blob_threshold=log.blob_threshold,
                preview_chars=log.preview_head,
                max_event_bytes=log.max_event_bytes,
            )
        )
        self._logs.append(fresh)
        return fresh

    def draft(self, body: Any, key: str | None = None) -> Draft:
        return Draft(body=body, time=next(self._times), key=key)

    # -- the cases -------------------------------------------------------------------------
    def test_a_new_store_is_empty_and_verifies(self) -> None:
        log = self.open_log()
        assert log.sessions() == [] and log.head("s") is None
        report = log.verify()
        assert report.ok and (report.sessions, report.events, report.blobs) == (0, 0, 0)
        with _raises(UnknownSessionError):
            log.read("s")

    def test_appended_events_read_back_with_dense_seqs_and_linked_hashes(self) -> None:
        log = self.open_log()
        done = log.append("s", [self.draft(UserMessageAdded(text=f"m{i}")) for i in range(5)])
        assert (done.first_seq, done.last_seq) == (0, 4)
        events = log.read("s")
        assert [e.seq for e in events] == [0, 1, 2, 3, 4]
        assert all(b.prev == a.hash for a, b in itertools.pairwise(events))
        assert log.head("s") is not None and log.head("s").hash == events[-1].hash  # type: ignore[union-attr]
        assert [e.seq for e in log.read("s", 1, 3)] == [1, 2]
        assert log.read("s", 9) == [] and log.get("s", 2) == events[2]
        assert log.verify().ok

    def test_sessions_are_listed_by_name_with_their_heads(self) -> None:
        log = self.open_log()
        for name in ("b", "a", "c"):
            log.append(name, self.draft(UserMessageAdded(text=name)))
        log.append("a", self.draft(UserMessageAdded(text="again")))
        assert [(h.session, h.seq) for h in log.sessions()] == [("a", 1), ("b", 0), ("c", 0)]

    def test_a_stale_expected_seq_is_refused_and_nothing_is_written(self) -> None:
        log = self.open_log()
        log.append("s", self.draft(UserMessageAdded(text="first")))
        before = store_contents(log.store)
        with _raises(AppendConflictError):
            log.append("s", self.draft(UserMessageAdded(text="late")), expected_seq=NEW_SESSION)
        with _raises(AppendConflictError):
            log.append("s", self.draft(UserMessageAdded(text="late")), expected_seq=3)
        assert store_contents(log.store) == before
        assert (
            log.append("s", self.draft(UserMessageAdded(text="on time")), expected_seq=0).first_seq
            == 1
        )

    def test_a_keyed_retry_returns_the_stored_positions_and_writes_nothing(self) -> None:
        log = self.open_log()
        batch = [
            self.draft(UserMessageAdded(text="a"), key="k1"),
            self.draft(UserMessageAdded(text="b"), key="k2"),
        ]
        done = log.append("s", batch)
        before = store_contents(log.store)
        again = log.append("s", batch)
        assert again.duplicate and (again.first_seq, again.last_seq) == (0, 1)
        assert store_contents(log.store) == before
        with _raises(IdempotencyError):  # one key known, one new: refused whole
            log.append("s", [batch[0], self.draft(UserMessageAdded(text="c"), key="k3")])
        assert store_contents(log.store) == before and not done.duplicate

    def test_a_failed_append_leaves_the_store_as_it_was(self) -> None:
        log = self.open_log()
        log.append("s", self.draft(UserMessageAdded(text="kept")))
        before = store_contents(log.store)
        with _raises(InvalidEventError):  # the second event is bad: the first is not written
            log.append(
                "s",
                [self.draft(UserMessageAdded(text="ok")), self.draft(SessionRewound(to_seq=99))],
            )
        assert store_contents(log.store) == before

        def write_then_fail(txn: WriteTxn) -> None:
            txn.put_event("s", 1, b"\x00" * 80)
            txn.set_head("s", 1, b"\x01" * 32)
            txn.put_blob("0" * 64, b"x")
            txn.put_cached("test", b"k", b"v")
            raise _Stop

        with _raises(_Stop):
            log.store.write(write_then_fail)
        assert store_contents(log.store) == before and log.verify().ok

    def test_a_snapshot_does_not_see_later_writes(self) -> None:
        log = self.open_log()
        log.append("s", self.draft(UserMessageAdded(text="before")))
        with log.snapshot() as snap:
            log.append("s", self.draft(UserMessageAdded(text="after")))
            log.append("t", self.draft(UserMessageAdded(text="new session")))
            assert snap.head("s") is not None and snap.head("s").seq == 0  # type: ignore[union-attr]
            assert snap.head("t") is None and [h.session for h in snap.sessions()] == ["s"]
        assert log.head("s").seq == 1  # type: ignore[union-attr]

    def test_large_text_is_stored_once_as_a_blob_and_reads_back(self) -> None:
        log = self.open_log(blob_threshold=8_192, preview_chars=1_024)
        text = "0123456789" * 1_000
        log.append(
            "s",
            [
                self.draft(ToolResultAdded(call_id="c", tool_name="bash", output=text)),
                self.draft(UserMessageAdded(text=text)),
            ],
        )
        events = log.read("s")
        refs = [getattr(e.body, "blob", None) for e in events]
        assert refs[0] is not None and refs[0] == refs[1]
        assert log.blob(refs[0]) == text.encode()
        report = log.verify()
        assert report.ok and report.blobs == 2
        assert len(store_contents(log.store)["blobs"]) == 1

    def test_forks_chain_to_their_source_and_read_as_one_lineage(self) -> None:
        log = self.open_log()
        log.append("s", [self.draft(UserMessageAdded(text=f"m{i}")) for i in range(4)])
        log.fork("s", 1, "f", time=9)
        log.append("f", self.draft(UserMessageAdded(text="in the fork")))
        lineage = log.lineage("f")
        assert [(e.session, e.seq) for e in lineage] == [("s", 0), ("s", 1), ("f", 0), ("f", 1)]
        assert lineage[2].prev == lineage[1].hash
        assert log.verify("f").ok and log.verify().ok

    def test_cached_values_round_trip(self) -> None:
        log = self.open_log()

        def put(txn: WriteTxn) -> None:
            txn.put_cached("ns", b"k1", b"v1")
            txn.put_cached("ns", b"k1", b"v2")
            txn.put_cached("other", b"k1", b"w")

        log.store.write(put)
        with log.store.read() as txn:
            assert txn.cached("ns", b"k1") == b"v2" and txn.cached("other", b"k1") == b"w"
            assert txn.cached("ns", b"missing") is None

    def test_read_ahead_reads_what_a_snapshot_reads_or_says_it_missed(self) -> None:
        """`Store.read_ahead` (what a replay reads through) is a snapshot taken when it is
        entered. What it was asked for (the session's head, its event ``seq``, its events
        from ``start`` up to ``seq``) it answers as `Store.read` does; anything else
        (past its range, before it, another session) it answers alike or refuses with
        `ReadAheadMiss`, never differently."""
        log = self.open_log()
        log.append("s", [self.draft(UserMessageAdded(text=f"m{i}")) for i in range(8)])
        log.append("t", self.draft(UserMessageAdded(text="other")))
        log.append("long", [self.draft(UserMessageAdded(text=str(i))) for i in range(1_100)])
        store = log.store

        def reads(txn: ReadTxn, session: str, seq: int, start: int) -> dict[str, Any]:
            return {
                "head": txn.head(session),
                "get": txn.get(session, seq),
                "scan": list(txn.scan(session, start, seq)),
            }

        def others(session: str, seq: int, start: int) -> list[Callable[[ReadTxn], Any]]:
            return [
                lambda txn: txn.get(session, seq + 1),
                lambda txn: txn.get(session, max(start - 1, 0)),
                lambda txn: txn.get(session, 2**40),
                lambda txn: list(txn.scan(session, 0, None)),
                lambda txn: list(txn.scan(session, start, None)),
                lambda txn: list(txn.scan(session, start, seq + 2)),
                lambda txn: list(txn.scan(session, max(start - 1, 0), seq)),
                lambda txn: txn.head("t"),
                lambda txn: txn.get("t", 0),
                lambda txn: list(txn.scan("t", 0, None)),
                lambda txn: [h[:2] for h in txn.sessions()],
            ]

        probes = [
            ("s", 7, 0),
            ("s", 5, 2),
            ("s", 4, 4),
            ("s", 0, 0),
            ("s", 12, 3),  # past the head
            ("s", 3, 6),  # start past seq
            ("t", 0, 0),
            ("missing", 0, 0),
            ("long", 1_050, 0),  # more than a store may fetch at once
            ("long", 1_099, 1_090),
        ]
        for session, seq, start in probes:
            with store.read() as txn:
                expected = reads(txn, session, seq, start)
                expected_others = [read(txn) for read in others(session, seq, start)]
            with store.read_ahead(session, seq, start) as ahead:
                # a write after it was entered is not seen
                log.append(session, self.draft(UserMessageAdded(text="later")))
                try:
                    got = reads(ahead, session, seq, start)
                except ReadAheadMiss:
                    # only a range longer than a store may fetch at once may miss
                    assert session == "long" and seq - start > 100, (session, seq, start)
                else:
                    assert got == expected, (session, seq, start)
                for n, (read, want) in enumerate(
                    zip(others(session, seq, start), expected_others, strict=True)
                ):
                    try:
                        found = read(ahead)
                    except ReadAheadMiss:
                        continue
                    assert found == want, (session, seq, start, n)
        assert log.verify().ok

    def test_everything_survives_a_reopen(self) -> None:
        log = self.open_log(blob_threshold=8_192, preview_chars=1_024)
        log.append(
            "s",
            [
                self.draft(UserMessageAdded(text="x" * 10_000), key="k"),
                self.draft(UserMessageAdded(text="short")),
            ],
        )
        log.fork("s", 0, "f", time=3)
        before = store_contents(log.store)
        log = self.reopen_log(log)
        assert store_contents(log.store) == before and log.verify().ok
        assert log.append("s", self.draft(UserMessageAdded(text="x" * 10_000), key="k")).duplicate
        assert log.append("s", self.draft(UserMessageAdded(text="more"))).first_seq == 2


def agreement_machine(
    factories: Mapping[str, StoreFactory],
    *,
    reopen: Mapping[str, Callable[[Store], Store]] | None = None,
) -> type[RuleBasedStateMachine]:
    """A state machine that drives one store of each factory with the same operations
    and requires them to agree on every result, error type, hash and stored byte.

    Parameters:
        factories: at least two, by name; each makes a new, empty store.
        reopen: by name, how to close a store and open its data again (stores
            without an entry are kept open across the machine's "reopen" step).

    Returns the machine class: run it with ``agreement_machine(...).TestCase``
    under pytest, or ``hypothesis.stateful.run_state_machine_as_test``.
    """
    if len(factories) < 2:
        raise ValueError("agreement needs at least two stores to compare")
    makers = dict(factories)
    reopeners = dict(reopen or {})
    sessions = ("a", "b", "c")

    class AgreementMachine(RuleBasedStateMachine):
        """Every store, fed the same operations, must agree on everything."""

        def __init__(self) -> None:
            super().__init__()
            self.names = list(makers)
            self.logs = [Log(makers[name]()) for name in self.names]
            self.keyed: list[tuple[str, list[Draft]]] = []
            self.sessions: set[str] = set()
            self.counter = 0

        def teardown(self) -> None:
            for log in self.logs:
                with suppress(KernelError):
                    log.close()

        def all_logs(self, fn: Callable[[Log], Any]) -> tuple[str, Any]:
            """``fn(log)`` on every log; the results (or error types) must be equal."""
            outcomes: list[tuple[str, Any]] = []
            for log in self.logs:
                try:
                    outcomes.append(("ok", fn(log)))
                except KernelError as exc:
                    outcomes.append(("error", type(exc)))
            assert all(o == outcomes[0] for o in outcomes), dict(
                zip(self.names, outcomes, strict=True)
            )
            return outcomes[0]

        @rule(
            session=st.sampled_from(sessions),
            payloads=st.lists(payloads(), min_size=1, max_size=4),
            keyed=st.booleans(),
            expected=st.one_of(st.none(), st.integers(-1, 6)),
        )
        def append(
            self, session: str, payloads: list[Any], keyed: bool, expected: int | None
        ) -> None:
            self.counter += 1
            batch = [
                Draft(
                    body=p,
                    time=self.counter,
                    meta={"n": self.counter, "i": i},
                    key=f"k{self.counter}-{i}" if keyed else None,
                )
                for i, p in enumerate(payloads)
            ]
            status, _ = self.all_logs(lambda log: log.append(session, batch, expected_seq=expected))
            if status == "ok":
                self.sessions.add(session)
                if keyed:
                    self.keyed.append((session, batch))

        @precondition(lambda self: self.keyed)
        @rule(data=st.data(), cut=st.integers(0, 3))
        def retry(self, data: st.DataObject, cut: int) -> None:
            session, batch = data.draw(st.sampled_from(self.keyed))
            again = batch[:cut] if cut else batch
            self.all_logs(lambda log: log.append(session, again))

        @precondition(lambda self: self.sessions)
        @rule(data=st.data())
        def fork(self, data: st.DataObject) -> None:
            source = data.draw(st.sampled_from(sorted(self.sessions)))
            at = data.draw(st.integers(0, 8))
            name = f"fork-{source}-{at}"
            status, _ = self.all_logs(lambda log: log.fork(source, at, name, time=at))
            if status == "ok":
                self.sessions.add(name)

        @precondition(lambda self: self.sessions)
        @rule(data=st.data())
        def rewind(self, data: st.DataObject) -> None:
            session = data.draw(st.sampled_from(sorted(self.sessions)))
            to_seq = data.draw(st.integers(-2, 8))
            self.all_logs(lambda log: log.append(session, SessionRewound(to_seq=to_seq)))

        @precondition(lambda self: self.sessions)
        @rule(data=st.data())
        def read(self, data: st.DataObject) -> None:
            session = data.draw(st.sampled_from(sorted(self.sessions)))
            start = data.draw(st.integers(0, 10))
            stop = data.draw(st.one_of(st.none(), st.integers(0, 10)))
            self.all_logs(lambda log: log.read(session, start, stop))

        @rule()
        def reopen_the_stores(self) -> None:
            fresh = []
            for name, log in zip(self.names, self.logs, strict=True):
                again = reopeners.get(name)
                fresh.append(Log(again(log.store)) if again is not None else log)
            self.logs = fresh

        @invariant()
        def every_store_verifies(self) -> None:
            for name, log in zip(self.names, self.logs, strict=True):
                report = log.verify()
                assert report.ok, f"{name}: {report.problem}"

        @invariant()
        def same_sessions_events_hashes_and_bytes(self) -> None:
            first, *others = (store_contents(log.store) for log in self.logs)
            for name, other in zip(self.names[1:], others, strict=True):
                for part in ("sessions", "events", "blobs"):
                    assert first[part] == other[part], f"{self.names[0]} and {name}: {part}"
            self.all_logs(lambda log: [log.read(h.session) for h in log.sessions()])

    AgreementMachine.__name__ = AgreementMachine.__qualname__ = "AgreementMachine_" + "_".join(
        makers
    )
    return AgreementMachine

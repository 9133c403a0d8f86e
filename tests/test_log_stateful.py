"""Stateful tests: random sequences of log operations checked against a plain-list model.

`LogMachine` drives one backend and compares it, after every step, with a
model that is nothing but ``session -> [(kind, payload)]``. The machine that
drives the memory, LMDB and PostgreSQL backends side by side and requires
identical results, down to every hash and stored byte, is the one turnlog ships
(`turnlog.testing.agreement_machine`), run in test_store_suite.py.
"""

from __future__ import annotations

import tempfile
from typing import Any, ClassVar

import msgspec
import pgserver
import pytest
import turnlog
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from support import LogFactory, bodies, temp_factory
from turnlog import Draft, Log
from turnlog.errors import AppendConflictError, IdempotencyError
from turnlog.events import (
    Event,
    NotificationAdded,
    SessionForked,
    SessionRewound,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.log import NEW_SESSION, Appended

SESSIONS = ("a", "b", "c")
Model = dict[str, list[tuple[str, Any]]]

STEPS = settings(stateful_step_count=30)


def expand(log: Log, body: Any) -> Any:
    """The payload as it was given: text moved to a blob is read back and put in place."""
    ref = getattr(body, "blob", None)
    if ref is None or not isinstance(body, (ToolResultAdded, UserMessageAdded, NotificationAdded)):
        return body
    field = "output" if isinstance(body, ToolResultAdded) else "text"
    return msgspec.structs.replace(body, **{field: log.blob(ref).decode(), "blob": None})


def as_model(log: Log, events: list[Event]) -> list[tuple[str, Any]]:
    """Events as model entries ``(kind, payload as given)``."""
    return [(e.kind, expand(log, e.body)) for e in events]


def kind_of(body: Any) -> str:
    """The kind tag of a payload (``user``, ``tool_result``...)."""
    return str(body.__struct_config__.tag)


def wrong_expectation(right: int, pick: int) -> int:
    """An ``expected_seq`` that is not ``right`` (but still a valid value, >= -1)."""
    candidates = [v for v in (right - 1, right + 1, right + 7) if v >= NEW_SESSION]
    return candidates[pick % len(candidates)]


class LogMachine(RuleBasedStateMachine):
    """One backend against the model."""

    backend: ClassVar[str] = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.factory: LogFactory
        self.tmp: tempfile.TemporaryDirectory[str]
        self.factory, self.tmp = temp_factory(self.backend)
        self.log = self.factory.open()
        self.model: Model = {}
        self.keyed: list[tuple[str, list[Draft], Appended]] = []
        self.forks: dict[str, tuple[str, int]] = {}
        self.counter = 0

    def teardown(self) -> None:
        self.factory.close_all()
        self.tmp.cleanup()

    # -- helpers ---------------------------------------------------------------------------
    def head_seq(self, session: str) -> int:
        """The model's head seq (-1 when the session does not exist)."""
        return len(self.model.get(session, [])) - 1

    def drafts(self, payloads: list[Any], keyed: bool) -> list[Draft]:
        """Drafts with a fresh time and, when ``keyed``, fresh idempotency keys."""
        self.counter += 1
        return [
            Draft(body=p, time=self.counter, key=f"k{self.counter}-{i}" if keyed else None)
            for i, p in enumerate(payloads)
        ]

    # -- rules -------------------------------------------------------------------------------
    @rule(
        session=st.sampled_from(SESSIONS),
        payloads=st.lists(bodies(), min_size=1, max_size=4),
        keyed=st.booleans(),
        expect=st.sampled_from(["none", "right", "wrong"]),
        pick=st.integers(0, 2),
    )
    def append(
        self, session: str, payloads: list[Any], keyed: bool, expect: str, pick: int
    ) -> None:
        batch = self.drafts(payloads, keyed)
        right = self.head_seq(session)
        expected = {"none": None, "right": right, "wrong": wrong_expectation(right, pick)}[expect]
        if expect == "wrong":
            try:
                self.log.append(session, batch, expected_seq=expected)
            except AppendConflictError as exc:
                assert (exc.expected, exc.actual) == (expected, right)
            else:
                raise AssertionError("a stale expected_seq was accepted")
            return
        done = self.log.append(session, batch, expected_seq=expected)
        assert not done.duplicate
        assert (done.first_seq, done.last_seq) == (right + 1, right + len(batch))
        self.model.setdefault(session, []).extend((kind_of(d.body), d.body) for d in batch)
        if keyed:
            self.keyed.append((session, batch, done))

    @precondition(lambda self: self.keyed)
    @rule(data=st.data(), stale=st.booleans(), later=st.booleans())
    def retry_a_stored_batch(self, data: st.DataObject, stale: bool, later: bool) -> None:
        session, batch, original = data.draw(st.sampled_from(self.keyed))
        expected = NEW_SESSION if stale else None
        if later:  # stamped again by a clock: the time is not part of a retry's identity
            batch = [msgspec.structs.replace(d, time=(d.time or 0) + 1_000) for d in batch]
        again = self.log.append(session, batch, expected_seq=expected)
        assert again == msgspec.structs.replace(original, duplicate=True)

    @precondition(lambda self: self.keyed)
    @rule(data=st.data(), change=st.booleans())
    def retry_with_a_partial_or_changed_batch(self, data: st.DataObject, change: bool) -> None:
        session, batch, _ = data.draw(st.sampled_from(self.keyed))
        cut = data.draw(st.integers(1, len(batch)))
        if change:
            # the same keys, one of them now with different content
            index = data.draw(st.integers(0, cut - 1))
            bad = [*batch[:cut]]
            bad[index] = msgspec.structs.replace(bad[index], causation="changed")
        else:
            bad = [*batch[:cut], Draft(body=UserMessageAdded(text="new"), key="never-stored")]
        head = self.log.head(session)
        try:
            self.log.append(session, bad)
        except IdempotencyError:
            pass
        else:
            raise AssertionError("an inconsistent retry was accepted")
        assert self.log.head(session) == head

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        source = data.draw(st.sampled_from(sorted(s for s, m in self.model.items() if m)))
        at = data.draw(st.integers(0, self.head_seq(source)))
        name = f"fork{len(self.forks)}"
        source_hash = self.log.get(source, at).hash.hex()
        done = self.log.fork(source, at, name)
        assert (done.first_seq, done.last_seq) == (0, 0)
        body = SessionForked(from_session=source, from_seq=at, from_hash=source_hash)
        self.model[name] = [("fork", body)]
        self.forks[name] = (source, at)

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        session = data.draw(st.sampled_from(sorted(s for s, m in self.model.items() if m)))
        to_seq = data.draw(st.integers(-1, self.head_seq(session)))
        body = SessionRewound(to_seq=to_seq, reason="test")
        done = self.log.append(session, body)
        assert done.first_seq == self.head_seq(session) + 1
        self.model[session].append(("rewind", body))

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data())
    def read_a_range(self, data: st.DataObject) -> None:
        session = data.draw(st.sampled_from(sorted(s for s, m in self.model.items() if m)))
        size = len(self.model[session])
        start = data.draw(st.integers(0, size + 2))
        stop = data.draw(st.one_of(st.none(), st.integers(0, size + 2)))
        events = self.log.read(session, start, stop)
        assert as_model(self.log, events) == self.model[session][start:stop]
        assert [e.seq for e in events] == list(range(size))[start:stop]

    @precondition(lambda self: self.forks)
    @rule(data=st.data())
    def read_a_lineage(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.forks)))
        source, at = self.forks[name]
        lineage = self.log.lineage(name)
        assert lineage == self.log.lineage(source, at + 1) + self.log.read(name)

    @rule()
    def reopen(self) -> None:
        self.log = self.factory.reopen(self.log)

    # -- invariants --------------------------------------------------------------------------
    @invariant()
    def verify_is_ok(self) -> None:
        report = self.log.verify()
        assert report.ok, str(report.problem)
        assert report.sessions == len(self.model)
        assert report.events == sum(len(m) for m in self.model.values())

    @invariant()
    def sessions_lengths_heads_and_events_match_the_model(self) -> None:
        heads = self.log.sessions()
        assert [h.session for h in heads] == sorted(self.model)
        for head in heads:
            events = self.log.read(head.session)
            assert len(events) == len(self.model[head.session]) == head.seq + 1
            assert head.hash == events[-1].hash
            assert as_model(self.log, events) == self.model[head.session]


def _machine_for(backend: str) -> type[LogMachine]:
    """`LogMachine` bound to one backend."""
    return type(f"LogMachine_{backend}", (LogMachine,), {"backend": backend})


TestMemoryLogAgainstModel = _machine_for("memory").TestCase
TestMemoryLogAgainstModel.settings = STEPS
TestLMDBLogAgainstModel = _machine_for("lmdb").TestCase
TestLMDBLogAgainstModel.settings = STEPS
TestPostgresLogAgainstModel = pytest.mark.skipif(
    not pgserver.available(), reason=pgserver.SKIP_REASON
)(_machine_for("postgres").TestCase)
TestPostgresLogAgainstModel.settings = STEPS


def test_a_model_step_sequence_replays_on_a_fresh_log() -> None:
    # A fixed run through the machine, so the machinery itself is exercised even when
    # hypothesis is configured with very few examples.
    machine = _machine_for("lmdb")()
    try:
        machine.append("a", [UserMessageAdded(text="hi")], keyed=True, expect="right", pick=0)
        machine.append(
            "a", [UserMessageAdded(text="x" * 70_000)], keyed=False, expect="none", pick=0
        )
        machine.append("b", [UserMessageAdded(text="b")], keyed=False, expect="wrong", pick=1)
        machine.reopen()
        machine.verify_is_ok()
        machine.sessions_lengths_heads_and_events_match_the_model()
        assert machine.log.get("a", 0).prev == turnlog.log.GENESIS
    finally:
        machine.teardown()

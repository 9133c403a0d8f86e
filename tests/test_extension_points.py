"""Each extension point, exercised by a toy that adds nothing but itself.

docs/architecture.md names, for a stage, a provider, an importer and a store
backend, the one place to add it and the files that touches. Each test below adds
a toy of one kind the way the doc says (for registries, the entry a real one puts
in its registry module) and drives it through the public API: if the doc's list
were incomplete, the toy would fail here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
import turnlog
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from turnlog import Draft, Log, Packer, Policy, Replayer
from turnlog.adapters import Session
from turnlog.adapters.importers import Format, _transcripts, import_file
from turnlog.adapters.importers._plan import Entry, ExportSession, Parsed, Plan
from turnlog.adapters.providers import PROVIDERS, Provider, provider, renderer
from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    NotificationAdded,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.packing import DEFAULT_STAGES, PackState, StageReport
from turnlog.stores import ReadTxn, Store, WriteTxn
from turnlog.testing import StoreConformance, agreement_machine

T = TypeVar("T")


# -- a stage: a function and a place in a copy of DEFAULT_STAGES (no turnlog file) ----------
def drop_notifications(state: PackState) -> StageReport:
    dropped = sum(
        state.drop_unit(unit.index, decision="trimmed", rule="toy.notifications")
        for unit in state.view.units
        if state.view.items[unit.items[0]].kind == "notification"
    )
    return StageReport(name="toy-notifications", fired=dropped > 0, events=dropped)


def test_a_custom_stage_needs_no_change_to_turnlog(tmp_path: Path) -> None:
    log = turnlog.open(tmp_path / "store")
    log.append(
        "s",
        [
            UserMessageAdded(text="hello"),
            NotificationAdded(text="build finished", source="ci"),
            AssistantMessageAdded(parts=(TextPart(text="hi"),)),
            UserMessageAdded(text="and now?"),
        ],
    )
    stages = list(DEFAULT_STAGES)
    stages.insert(3, ("toy-notifications", drop_notifications))
    packer = Packer(log, stages=stages)
    replayer = Replayer(packer)
    recorded = replayer.record("s", policy=Policy(context_window=8_000, output_reserve=1_000))
    assert not any(
        "build finished" in json.dumps(m.parts, default=str)
        for m in recorded.packed.prompt.messages
    )
    assert [d.rule for d in recorded.packed.decisions if d.kind == "notification"] == [
        "toy.notifications"
    ]
    assert replayer.replay("s", recorded.request_seq).ok
    log.close()


# -- a provider: one module with a Provider record, one entry in providers/_registry.py -------
def _toy_headers(api_key: str) -> dict[str, str]:
    return {"api-key": api_key}


def toy_provider() -> Provider:
    """A Chat-Completions-shaped API behind its own deployment path and key header."""
    chat = provider("openai-chat")
    return Provider(
        name="toy-chat",
        description="a toy deployment of a chat API",
        path="/chat/completions",
        base_url="https://toy.invalid/v1",
        headers=_toy_headers,
        build=chat.build,
        parse=chat.parse,
        parse_stream=chat.parse_stream,
        max_tokens_required=True,
    )


def test_a_new_provider_is_one_record_in_the_registry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(PROVIDERS, "toy-chat", toy_provider())  # the registry line
    with pytest.raises(turnlog.KernelError, match="needs max_tokens"):
        renderer("toy-chat", model="m", max_tokens=None)("unused")  # type: ignore[arg-type]
    log = turnlog.open(tmp_path / "store")
    with FakeServer() as server:
        server.script(
            FakeReply(tool_calls=(ToolCall(id="c1", name="Read", arguments="{}"),)),
            FakeReply(text="done"),
        )
        session = Session(
            log,
            "s",
            model="toy-model",
            format="toy-chat",
            max_tokens=256,
            policy=Policy(context_window=8_000, output_reserve=1_000),
        )
        session.tools([{"name": "Read", "parameters": {"type": "object"}}])
        session.user("read it")
        request = session.prepare()
        reply = turnlog.adapters.providers.send(
            "toy-chat", request.body, api_key="secret", base_url=server.base_url("openai-chat")
        )
        answer = session.record(reply)
        for call in answer.tool_calls:
            session.tool_result(call.id, "contents")
        second = session.prepare()
        received = server.requests
    assert received[0].headers["api-key"] == "secret"
    assert "authorization" not in received[0].headers
    assert json.loads(request.body)["max_completion_tokens"] == 256
    assert session.replay(request.request_seq).ok
    assert session.replay(second.request_seq).ok
    log.close()


def test_the_fake_server_speaks_every_provider_of_the_registry() -> None:
    """The fake server looks each wire format up in one table keyed by the registry's
    names, as the product code does, instead of branching on names."""
    from turnlog.adapters.providers import fakeserver

    assert set(fakeserver._SPEAKERS) == set(PROVIDERS)
    source = Path(fakeserver.__file__).read_text()
    for name in PROVIDERS:
        assert f'fmt == "{name}"' not in source and f'fmt != "{name}"' not in source


# -- an importer: one module (parse, export, a Format record), one entry in _transcripts.py --
def _parse_toy(data: bytes, name: str, skip_bad: bool) -> Parsed:
    plan = Plan(natural="toy")
    for n, line in enumerate(data.decode().splitlines()):
        role, _, text = line.partition(": ")
        body: Body = (
            UserMessageAdded(text=text)
            if role == "user"
            else AssistantMessageAdded(parts=(TextPart(text=text),))
        )
        plan.entries.append(
            Entry(body=body, key=f"toy-{n}", time=None, meta={}, where=f"line {n + 1}")
        )
    return Parsed(format="toy", plans=[plan])


def _export_toy(session: ExportSession) -> bytes:
    raise NotImplementedError


def test_a_new_importer_is_one_module_and_one_registry_entry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    toy = Format("toy", _parse_toy, _export_toy)  # the module's record
    monkeypatch.setitem(_transcripts._REGISTRY, toy.name, toy)  # the registry line
    path = tmp_path / "chat.toy"
    path.write_text("user: what is 2+2?\nassistant: 4\n")
    log = turnlog.open(tmp_path / "store")
    summary = import_file(log, path, format="toy")
    assert list(summary.sessions) == ["toy"]
    assert [type(e.body).__name__ for e in log.read("toy")] == [
        "UserMessageAdded",
        "AssistantMessageAdded",
    ]
    assert import_file(log, path, format="toy").appended == 0  # idempotent by its keys
    assert (
        Replayer(Packer(log))
        .record("toy", policy=Policy(context_window=8_000, output_reserve=1_000))
        .packed.tokens
        > 0
    )
    log.close()


# -- a store backend: subclasses of Store, ReadTxn and WriteTxn (one module) ------------------
class _ToyRead(ReadTxn):
    """Reads one immutable snapshot (copies of the store's dicts)."""

    def __init__(self, state: dict[str, dict]) -> None:  # type: ignore[type-arg]
        self.s = state

    def head(self, session: str) -> tuple[int, bytes] | None:
        return self.s["heads"].get(session)  # type: ignore[no-any-return]

    def get(self, session: str, seq: int) -> bytes | None:
        return self.s["events"].get((session, seq))  # type: ignore[no-any-return]

    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        head = self.head(session)
        seq = max(start, 0)
        while (stop is None or seq < stop) and (every or (head is not None and seq <= head[0])):
            record = self.get(session, seq)
            if record is None:
                return
            yield seq, record
            seq += 1

    def sessions(self) -> Iterator[tuple[str, int, bytes]]:
        for session, (seq, digest) in sorted(self.s["heads"].items()):
            yield session, seq, digest

    def blob(self, digest: str) -> bytes | None:
        return self.s["blobs"].get(digest)  # type: ignore[no-any-return]

    def blobs(self) -> Iterator[tuple[str, bytes]]:
        yield from sorted(self.s["blobs"].items())

    def idempotency(self, session: str, key: str) -> int | None:
        return self.s["keys"].get((session, key))  # type: ignore[no-any-return]

    def cached(self, namespace: str, key: bytes) -> bytes | None:
        return self.s["cache"].get((namespace, key))  # type: ignore[no-any-return]


class _ToyWrite(_ToyRead, WriteTxn):
    """Writes into a private copy that replaces the store's state on commit."""

    def put_event(self, session: str, seq: int, record: bytes) -> None:
        self.s["events"][(session, seq)] = record

    def set_head(self, session: str, seq: int, digest: bytes) -> None:
        self.s["heads"][session] = (seq, digest)

    def put_idempotency(self, session: str, key: str, seq: int) -> None:
        self.s["keys"][(session, key)] = seq

    def put_blob(self, digest: str, data: bytes) -> None:
        self.s["blobs"].setdefault(digest, data)

    def put_cached(self, namespace: str, key: bytes, value: bytes) -> None:
        self.s["cache"][(namespace, key)] = value


class ToyStore(Store):
    """Copy-on-write dicts: a snapshot is the state a reader started with."""

    name = "toy"

    def __init__(self) -> None:
        self._state: dict[str, dict] = {
            k: {}
            for k in ("heads", "events", "keys", "blobs", "cache")  # type: ignore[type-arg]
        }
        self._lock = threading.Lock()

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        yield _ToyRead(self._state)

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        with self._lock:
            txn = _ToyWrite({k: dict(v) for k, v in self._state.items()})
            result = fn(txn)
            self._state = txn.s
            return result

    def close(self) -> None:
        pass


def test_a_new_store_backend_needs_nothing_above_the_store_interface() -> None:
    log = Log(ToyStore(), blob_threshold=8_192, preview_chars=1_024)
    first = log.append(
        "s",
        [
            Draft(body=UserMessageAdded(text="run it")),
            Draft(
                body=AssistantMessageAdded(parts=(ToolCall(id="c1", name="Bash", arguments="{}"),))
            ),
            Draft(
                body=ToolResultAdded(call_id="c1", tool_name="Bash", output="x" * 20_000), key="r1"
            ),
        ],
    )
    assert log.append(
        "s",
        [
            Draft(
                body=ToolResultAdded(call_id="c1", tool_name="Bash", output="x" * 20_000), key="r1"
            )
        ],
    ).duplicate
    with pytest.raises(turnlog.errors.AppendConflictError):
        log.append("s", [Draft(body=UserMessageAdded(text="late"))], expected_seq=first.first_seq)
    log.fork("s", 1, "t")
    assert log.verify().ok
    [result] = log.read("s", 2, 3)
    assert isinstance(result.body, ToolResultAdded) and result.body.blob is not None
    assert log.blob(result.body.blob) == b"x" * 20_000
    packer = Packer(log)
    replayer = Replayer(packer)
    recorded = replayer.record("s", policy=Policy(context_window=8_000, output_reserve=1_000))
    assert replayer.replay("s", recorded.request_seq).ok
    assert Replayer(Packer(log)).replay("s", recorded.request_seq).ok  # a cold projection agrees


# The shipped store suite runs on the toy with one factory, as on any backend written
# outside turnlog: the conformance cases, and the agreement machine beside memory.
class TestToyStoreConforms(StoreConformance):
    def make_store(self) -> Store:
        return ToyStore()


TestToyStoreAgreesWithMemory = agreement_machine(
    {"memory": turnlog.stores.MemoryStore, "toy": ToyStore}
).TestCase
TestToyStoreAgreesWithMemory.settings = settings(stateful_step_count=20)


class _LeakyToyStore(ToyStore):
    """Broken on purpose: a write that fails keeps what it wrote."""

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        txn = _ToyWrite(self._state)
        return fn(txn)


class _StaleToyStore(ToyStore):
    """Broken on purpose: a snapshot sees later writes (it reads the live state)."""

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        store = self

        class Live(_ToyRead):
            @property  # type: ignore[override]
            def s(self) -> dict[str, dict]:  # type: ignore[type-arg]
                return store._state

            @s.setter
            def s(self, value: object) -> None:
                pass

        yield Live(self._state)


@pytest.mark.parametrize(
    ("broken", "case"),
    [
        (_LeakyToyStore, "test_a_failed_append_leaves_the_store_as_it_was"),
        (_StaleToyStore, "test_a_snapshot_does_not_see_later_writes"),
    ],
)
def test_the_shipped_suite_fails_a_store_that_breaks_its_contract(
    broken: Callable[[], Store], case: str
) -> None:
    class Suite(StoreConformance):
        def make_store(self) -> Store:
            return broken()

    suite = Suite()
    suite.setup_method()
    try:
        with pytest.raises(AssertionError):
            getattr(suite, case)()
    finally:
        suite.teardown_method()
    fine = TestToyStoreConforms()  # the same case passes on the sound toy
    fine.setup_method()
    try:
        getattr(fine, case)()
    finally:
        fine.teardown_method()


class _ForgetfulToyStore(ToyStore):
    """Broken on purpose: an idempotency key is never remembered."""

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        def forgetting(txn: WriteTxn) -> T:
            txn.put_idempotency = lambda session, key, seq: None  # type: ignore[method-assign]
            return fn(txn)

        return super().write(forgetting)


def test_the_agreement_machine_fails_stores_that_disagree() -> None:
    machine = agreement_machine(
        {"memory": turnlog.stores.MemoryStore, "forgetful": _ForgetfulToyStore}
    )
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=50, stateful_step_count=20, database=None, deadline=None
            ),
        )

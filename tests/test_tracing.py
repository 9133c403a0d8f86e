"""OpenTelemetry spans: a request's GenAI attributes and turnlog's hashes, pack, compaction
and memory operations, from Session and AsyncSession, asserted with the SDK's in-memory
exporter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import turnlog
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from turnlog import Policy
from turnlog.adapters.session import AsyncSession, Session
from turnlog.events import RequestIssued

POLICY = Policy(context_window=16_000, output_reserve=1_000)
EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(tracer_provider)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER


def reply(text: str, ident: str, calls: list[dict[str, object]] | None = None) -> dict[str, object]:
    message: dict[str, object] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": ident,
        "object": "chat.completion",
        "created": 1,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 3,
            "total_tokens": 23,
            "prompt_tokens_details": {"cached_tokens": 8},
        },
    }


def test_a_prepared_and_recorded_request_has_a_span_each(spans: InMemorySpanExporter) -> None:
    with turnlog.open(":memory:") as log:
        session = Session(log, "s1", model="fake-model", max_tokens=64, policy=POLICY)
        session.user("hi")
        request = session.prepare()
        session.record(reply("hello", "cmpl-1"))
        record = log.get("s1", request.request_seq).body
        assert isinstance(record, RequestIssued)
    chats = [s for s in spans.get_finished_spans() if s.name == "chat fake-model"]
    assert [s.attributes["turnlog.step"] for s in chats if s.attributes] == ["prepare", "record"]
    for found in chats:
        attrs = dict(found.attributes or {})
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == "fake-model"
        assert attrs["turnlog.session"] == "s1"
        assert attrs["turnlog.request_seq"] == request.request_seq
        assert attrs["turnlog.prompt_hash"] == record.prompt_hash
        assert attrs["turnlog.policy_hash"] == record.policy_hash
    recorded = dict(chats[1].attributes or {})
    assert recorded["gen_ai.usage.input_tokens"] == 20
    assert recorded["gen_ai.usage.output_tokens"] == 3
    assert recorded["gen_ai.usage.cache_read.input_tokens"] == 8
    packs = [s for s in spans.get_finished_spans() if s.name == "turnlog.pack"]
    assert packs and dict(packs[0].attributes or {})["turnlog.prompt_hash"] == record.prompt_hash
    assert "turnlog.stages_fired" in dict(packs[0].attributes or {})


def test_compaction_and_memory_operations_have_spans(spans: InMemorySpanExporter) -> None:
    with turnlog.open(":memory:") as log:
        session = Session(log, "s1", model="fake-model", max_tokens=64, policy=POLICY)
        for turn in range(12):
            session.user(f"step {turn} " + "words " * 50)
            session.prepare()
            session.record(reply(f"done {turn}", f"cmpl-{turn}"))
        assert session.compact().status == "committed"
        from turnlog.memories import MemoryManager

        manager = MemoryManager(log)
        saved = manager.save("t", "content")
        manager.forget(saved.memory_id)
    names = [s.name for s in spans.get_finished_spans()]
    assert "turnlog.compaction" in names
    compaction = next(s for s in spans.get_finished_spans() if s.name == "turnlog.compaction")
    assert dict(compaction.attributes or {})["turnlog.compaction.status"] == "committed"
    covered = dict(compaction.attributes or {})["turnlog.compaction.tokens_covered"]
    assert isinstance(covered, int) and covered > 0
    summarized = [
        dict(s.attributes or {})
        for s in spans.get_finished_spans()
        if s.name == "turnlog.summarize"
    ]
    assert summarized and all(
        a["turnlog.summary.summarizer"] == "extractive" and a["turnlog.session"] == "s1"
        for a in summarized
    )
    ops = [
        dict(s.attributes or {})["turnlog.memory.op"]
        for s in spans.get_finished_spans()
        if s.name == "turnlog.memory"
    ]
    assert ops == ["save", "forget"]


def test_an_async_session_emits_the_same_request_spans(spans: InMemorySpanExporter) -> None:
    with turnlog.open(":memory:") as log:

        async def run() -> int:
            session = AsyncSession(log, "a1", model="fake-model", max_tokens=64, policy=POLICY)
            await session.user("hi")
            request = await session.prepare()
            await session.record(json.dumps(reply("hello", "cmpl-a")).encode(), status=200)
            return request.request_seq

        seq = asyncio.run(run())
    chats = [
        dict(s.attributes or {}) for s in spans.get_finished_spans() if s.name == "chat fake-model"
    ]
    assert [(a["turnlog.session"], a["turnlog.request_seq"], a["turnlog.step"]) for a in chats] == [
        ("a1", seq, "prepare"),
        ("a1", seq, "record"),
    ]


def test_an_erasure_has_a_span_with_counts_and_never_the_reason(
    spans: InMemorySpanExporter,
) -> None:
    with turnlog.open(":memory:") as log:
        session = Session(log, "s1", model="fake-model", max_tokens=64, policy=POLICY)
        session.user("my card number is 4111")
        session.prepare()
        session.record(reply("noted", "cmpl-1"))
        erased = log.erase("s1", [0], reason="subject request for Jane Doe")
    found = [s for s in spans.get_finished_spans() if s.name == "turnlog.erasure"]
    assert len(found) == 1
    attrs = dict(found[0].attributes or {})
    assert attrs["turnlog.session"] == "s1"
    assert attrs["turnlog.erasure.seq"] == erased.seq
    assert attrs["turnlog.erasure.events"] == len(erased.seqs) >= 1
    assert attrs["turnlog.erasure.scrub"] is True
    assert not any("Jane" in str(v) for v in attrs.values())


def test_memory_consolidation_and_refresh_have_spans(spans: InMemorySpanExporter) -> None:
    from turnlog.memories import MemoryManager

    with turnlog.open(":memory:") as log:
        manager = MemoryManager(log)
        manager.save("t", "content", retention="working", expires_time=10)
        manager.consolidate(now=20)
        policy = Policy(memory_refresh=("manual",))
        manager.save("kept", "a fact")
        assert manager.refresh("agent", policy=policy, now=30) is not None
    memory = [
        dict(s.attributes or {}) for s in spans.get_finished_spans() if s.name == "turnlog.memory"
    ]
    assert [a["turnlog.memory.op"] for a in memory] == ["save", "forget", "save", "refresh"]
    assert memory[1]["turnlog.memory.count"] == 1
    assert memory[3]["turnlog.session"] == "agent"
    assert memory[3]["turnlog.memory.changed"] is True


def test_an_async_session_compaction_has_a_span(spans: InMemorySpanExporter) -> None:
    with turnlog.open(":memory:") as log:

        async def run() -> str:
            session = AsyncSession(log, "a1", model="fake-model", max_tokens=64, policy=POLICY)
            for turn in range(12):
                await session.user(f"step {turn} " + "words " * 50)
                await session.prepare()
                await session.record(
                    json.dumps(reply(f"done {turn}", f"c-{turn}")).encode(), status=200
                )
            return (await session.compact()).status

        assert asyncio.run(run()) == "committed"
    compaction = [
        dict(s.attributes or {})
        for s in spans.get_finished_spans()
        if s.name == "turnlog.compaction"
    ]
    assert [(a["turnlog.session"], a["turnlog.compaction.status"]) for a in compaction] == [
        ("a1", "committed")
    ]

"""OpenAI Agents SDK session memory on a turnlog session, against the real ``agents`` package
(runs go to the local fake server; tracing is off, so nothing leaves 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
import pytest

pytest.importorskip("agents")

import turnlog
from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.memory import Session as SessionProtocol
from agents.memory import SessionSettings, SQLiteSession
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI
from turnlog import Draft, Log, Packer, Replayer
from turnlog.adapters import Session
from turnlog.adapters.integrations.openai_agents import META_KEY, TurnlogSession
from turnlog.adapters.providers import renderer
from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer
from turnlog.errors import InvalidEventError
from turnlog.events import (
    AssistantMessageAdded,
    NativePart,
    NotificationAdded,
    ReasoningPart,
    SessionRewound,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)

set_tracing_disabled(True)


@pytest.fixture
def log() -> Iterator[Log]:
    with turnlog.open(":memory:") as opened:
        yield opened


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> list[FakeReply]:
    return [
        FakeReply(
            text="Adding.",
            tool_calls=(ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 3}'),),
        ),
        FakeReply(text="2 + 3 = 5."),
        FakeReply(text="Still 5."),
    ]


async def two_runs(session: Any) -> tuple[list[Any], list[dict[str, object]]]:
    """Two runs of a one-tool agent against a fresh fake server: (items, request inputs)."""
    with FakeServer(script()) as server:
        client = AsyncOpenAI(
            base_url=server.base_url("openai-responses"), api_key="test", max_retries=0
        )
        agent = Agent(
            name="adder",
            instructions="Add numbers with the tool.",
            tools=[add],
            model=OpenAIResponsesModel(model="fake-model", openai_client=client),
        )
        config = RunConfig(tracing_disabled=True)
        first = await Runner.run(agent, "What is 2 + 3?", session=session, run_config=config)
        second = await Runner.run(agent, "And again?", session=session, run_config=config)
        assert (first.final_output, second.final_output) == ("2 + 3 = 5.", "Still 5.")
        inputs = [r.json()["input"] for r in server.requests]
        await client.close()
    return await session.get_items(), inputs  # type: ignore[return-value]


def test_the_session_implements_the_sdk_protocol(log: Log) -> None:
    assert isinstance(TurnlogSession(log, "agent"), SessionProtocol)


def test_runs_see_the_same_history_as_with_the_sdk_sqlite_session(log: Log) -> None:
    ours, our_inputs = asyncio.run(two_runs(TurnlogSession(log, "agent")))
    theirs, their_inputs = asyncio.run(two_runs(SQLiteSession("agent")))
    assert ours == theirs
    assert our_inputs == their_inputs  # the model received the same input items
    events = log.read("agent")
    assert [e.kind for e in events] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "user",
        "assistant",
    ]
    call = events[1].body
    assert isinstance(call, AssistantMessageAdded)
    assert call.parts == (
        TextPart(text="Adding."),
        ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 3}'),
    )
    result = events[2].body
    assert result == ToolResultAdded(call_id="call_1", tool_name="add", output="5")
    assert "output" not in events[2].meta[META_KEY][0]  # kept once, in the event
    assert log.verify("agent").ok


def test_pop_item_rewinds_and_keeps_the_rest_of_a_model_turn(log: Log) -> None:
    session = TurnlogSession(log, "agent")
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "ls",
            "arguments": "{}",
            "id": "fc_1",
            "status": "completed",
        },
    ]
    session.add(items)
    assert asyncio.run(session.pop_item()) == items[2]
    assert session.items() == items[:2]
    tail = log.read("agent", 2)
    assert [e.kind for e in tail] == ["rewind", "assistant"]
    assert tail[0].body == SessionRewound(to_seq=0, reason="pop_item")
    assert asyncio.run(session.pop_item()) == items[1]
    assert asyncio.run(session.pop_item()) == items[0]
    assert asyncio.run(session.pop_item()) is None
    asyncio.run(session.add_items([{"role": "user", "content": "again"}]))  # type: ignore[list-item]
    assert session.items() == [{"role": "user", "content": "again"}]
    assert log.verify("agent").ok


def contents(items: Iterable[Any]) -> list[object]:
    """The ``content`` of each input item (a message)."""
    return [item["content"] for item in items]


def test_clear_session_and_limits(log: Log) -> None:
    session = TurnlogSession(log, "agent", session_settings=SessionSettings(limit=2))
    session.add([{"role": "user", "content": f"m{i}"} for i in range(5)])
    assert contents(asyncio.run(session.get_items())) == ["m3", "m4"]
    assert contents(asyncio.run(session.get_items(limit=3))) == ["m2", "m3", "m4"]
    assert asyncio.run(session.get_items(limit=0)) == []
    asyncio.run(session.clear_session())
    assert session.items() == []
    assert log.read("agent")[-1].body == SessionRewound(to_seq=-1, reason="clear_session")
    asyncio.run(session.clear_session())  # empty already: nothing appended
    assert len(log.read("agent")) == 6


def test_a_closed_session_refuses_the_synchronous_methods_too(log: Log) -> None:
    session = TurnlogSession(log, "agent")
    session.add([{"role": "user", "content": "m0"}])
    session.close()
    head = log.head("agent")
    for call in (
        session.items,
        lambda: session.add([{"role": "user", "content": "after close"}]),
        session.pop,
        session.clear,
    ):
        with pytest.raises(RuntimeError, match="'agent' is closed"):
            call()
    assert log.head("agent") == head


def test_items_of_every_kind_are_kept_and_pack_for_the_responses_api(log: Log) -> None:
    output = "\n".join(f"row {i}: " + "y" * 70 for i in range(2000))  # stored as a blob
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": "Be terse."},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Show the table"},
                {"type": "input_image", "image_url": "https://x/t.png", "detail": "auto"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Query it."}],
            "encrypted_content": "gAAAA",
        },
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "table"},
        },
        {"type": "function_call", "call_id": "c1", "name": "query", "arguments": '{"q":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": output},
        {"type": "item_reference", "id": "msg_old"},
    ]
    session = TurnlogSession(log, "agent")
    session.add(items)
    assert session.items() == items
    bodies = [e.body for e in log.read("agent")]
    assert isinstance(bodies[0], NotificationAdded) and bodies[0].source == "developer"
    assert isinstance(bodies[1], UserMessageAdded) and bodies[1].images[0].url == "https://x/t.png"
    model = bodies[2]
    assert isinstance(model, AssistantMessageAdded)
    assert model.parts == (
        ReasoningPart(text="Query it.", opaque="gAAAA", provider="openai", id="rs_1"),
        TextPart(text="[web_search_call]"),
        ToolCall(id="c1", name="query", arguments='{"q":1}'),
    )
    result = bodies[3]
    assert isinstance(result, ToolResultAdded) and result.blob is not None
    assert result.tool_name == "query"
    assert isinstance(bodies[4], NotificationAdded)
    packer = Packer(log)
    replayer = Replayer(packer)
    render = renderer("openai-responses", model="fake-model", max_tokens=256, blobs=log.blob)
    recorded = replayer.record(
        "agent", format="openai-responses", model="fake-model", render=render
    )
    sent = json.loads(recorded.rendered)
    assert [i["type"] for i in sent["input"]][2:6] == [
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
    ]
    assert replayer.replay("agent", recorded.request_seq, render=render).ok


def test_events_from_the_facade_read_back_as_items(log: Log) -> None:
    facade = Session(log, "agent", model="m")
    facade.user("hi")
    facade.notify("ci", "green")
    assert TurnlogSession(log, "agent").items() == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "green"}],
        },
    ]


COMPACTION = {
    "type": "compaction",
    "id": "cmp_1",
    "encrypted_content": 'gAAAA+/="é" opaque',
    "created_by": "server",
}


def test_a_compaction_item_is_kept_byte_for_byte_and_read_back_unchanged(log: Log) -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "an old question"},
        {"type": "message", "role": "assistant", "content": "an old answer"},
        COMPACTION,
        {"type": "message", "role": "assistant", "content": "after it"},
        {"role": "user", "content": "a new question"},
    ]
    session = TurnlogSession(log, "agent")
    asyncio.run(session.add_items(items))  # type: ignore[arg-type]
    got = asyncio.run(session.get_items())
    assert got == items
    # Its JSON text, keys in the order given, is what the event keeps and gives back.
    assert json.dumps(got[2]) == json.dumps(COMPACTION)
    bodies = [e.body for e in log.read("agent")]
    native = bodies[2]
    assert isinstance(native, AssistantMessageAdded)
    # It starts its own message (what came before it is what it replaces).
    assert native.parts[0] == NativePart(
        format="openai-responses",
        item_type="compaction",
        data=msgspec.json.encode(COMPACTION).decode(),
    )
    assert native.parts[1] == TextPart(text="after it")
    assert log.read("agent")[2].meta[META_KEY][0] == {"type": "compaction"}  # stored once
    render = renderer("openai-responses", model="fake-model", max_tokens=256)
    recorded = Replayer(Packer(log)).record(
        "agent", format="openai-responses", model="fake-model", render=render
    )
    sent = json.loads(recorded.rendered)["input"]
    assert sent[0] == COMPACTION and "an old question" not in recorded.rendered.decode()
    assert asyncio.run(session.pop_item()) == items[-1]
    assert asyncio.run(session.get_items()) == items[:-1]


def test_another_apis_compaction_is_refused_not_read_back_as_a_placeholder(log: Log) -> None:
    block = {"type": "compaction", "content": "Summary: the user said hello."}
    facade = Session(log, "agent", model="m")
    facade.user("hi")
    part = NativePart(
        format="anthropic",
        item_type="compaction",
        data=json.dumps(block, separators=(",", ":")),
        text=block["content"],
    )
    log.append("agent", Draft(body=AssistantMessageAdded(parts=(part, TextPart(text="ok")))))
    session = TurnlogSession(log, "agent")
    own = "holds the anthropic format's own 'compaction' item"
    with pytest.raises(InvalidEventError, match=own) as caught:
        asyncio.run(session.get_items())
    assert "event 1 of session 'agent'" in str(caught.value)
    assert "rewind it to before that event" in str(caught.value)


def test_a_compaction_item_without_its_encrypted_content_is_refused(log: Log) -> None:
    session = TurnlogSession(log, "agent")
    with pytest.raises(InvalidEventError, match="'compaction' item needs its encrypted"):
        session.add([{"role": "user", "content": "hi"}, {"type": "compaction", "id": "c"}])
    assert log.head("agent") is None


def test_an_sdk_run_with_a_compaction_item_in_the_session(log: Log) -> None:
    session = TurnlogSession(log, "agent")
    session.add(
        [
            {"role": "user", "content": "an old question"},
            {"type": "message", "role": "assistant", "content": "an old answer"},
            COMPACTION,
        ]
    )

    async def run() -> tuple[Any, list[bytes]]:
        with FakeServer(script()) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="test", max_retries=0
            )
            agent = Agent(
                name="adder",
                instructions="Add numbers with the tool.",
                tools=[add],
                model=OpenAIResponsesModel(model="fake-model", openai_client=client),
            )
            result = await Runner.run(
                agent,
                "What is 2 + 3?",
                session=session,
                run_config=RunConfig(tracing_disabled=True),
            )
            await client.close()
            return result.final_output, [r.body for r in server.requests]

    final, bodies = asyncio.run(run())
    assert final == "2 + 3 = 5."  # the fake server took the item, as the API does
    first = json.loads(bodies[0])["input"]
    # The SDK sends the item as its param type has it (without ``created_by``).
    assert {
        "type": "compaction",
        "id": "cmp_1",
        "encrypted_content": COMPACTION["encrypted_content"],
    } in first
    items = session.items()
    assert items[2] == COMPACTION and items[3] == {"role": "user", "content": "What is 2 + 3?"}
    assert len(items) > 4

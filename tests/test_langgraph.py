"""LangGraph on turnlog: `TurnlogSaver` against LangGraph's own conformance suite, and the
model hooks in a prebuilt agent against the fake server.

The conformance suite is the ``langgraph-checkpoint-conformance`` package, run as it
ships (``validate``) on every store. Every base capability passes; of the extended ones
``copy_thread``, ``delete_for_runs`` and ``prune`` are implemented and pass too (they
hide and copy by appending events: nothing is deleted from the log).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import turnlog
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)
from turnlog import Log
from turnlog.adapters.integrations.langgraph import TurnlogModelHooks, TurnlogSaver
from turnlog.events import (
    AssistantMessageAdded,
    NativePart,
    RequestIssued,
    ResponseReceived,
    SessionRewound,
    StateSaved,
    ToolCall,
)


def _conformance(log: Log) -> Any:
    @checkpointer_test(name=f"TurnlogSaver-{log.store.name}")
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        yield TurnlogSaver(log)

    return asyncio.run(validate(factory))


def test_saver_passes_langgraphs_conformance_suite(log: Log) -> None:
    report = _conformance(log)
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert failures == {}
    assert report.passed_all_base()
    for capability in BASE_CAPABILITIES | EXTENDED_CAPABILITIES:
        result = report.results[capability.value]
        assert result.detected and result.passed, capability.value
    assert report.conformance_level() == "FULL"
    assert log.verify().ok


def test_checkpoint_values_are_blobs_shared_between_checkpoints(log: Log) -> None:
    saver = TurnlogSaver(log)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    big = "x" * 10_000
    first = saver.put(
        config,
        _checkpoint("1", {"a": big, "b": 1}, {"a": 1, "b": 1}),
        {"source": "input", "step": 0},
        {"a": 1, "b": 1},
    )
    saver.put(
        first,
        _checkpoint("2", {"a": big, "b": 2}, {"a": 1, "b": 2}),
        {"source": "loop", "step": 1},
        {"b": 2},
    )
    events = log.read("t")
    assert [e.kind for e in events] == ["state", "state"]
    second = events[1].body
    assert isinstance(second, StateSaved)
    assert second.source == "langgraph.checkpoint"
    assert len(second.blobs) == 3  # skeleton, metadata, b: a is the first one's blob
    assert sum(len(log.blob(ref)) for ref in second.blobs) < 1_000
    latest = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert latest is not None and latest.checkpoint["channel_values"] == {"a": big, "b": 2}
    assert log.verify().ok


def test_delete_thread_hides_and_keeps_everything(log: Log) -> None:
    saver = TurnlogSaver(log)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    stored = saver.put(config, _checkpoint("1", {"a": 1}, {"a": 1}), {"step": 0}, {"a": 1})
    saver.put_writes(stored, [("a", 2)], "task")
    saver.delete_thread("t")
    assert saver.get_tuple(config) is None and list(saver.list(config)) == []
    kinds = [e.kind for e in log.read("t")]
    assert kinds == ["state", "state", "rewind"]
    assert isinstance(log.read("t")[-1].body, SessionRewound)
    assert log.verify().ok
    again = saver.put(config, _checkpoint("2", {"a": 3}, {"a": 2}), {"step": 0}, {"a": 2})
    found = saver.get_tuple(again)
    assert found is not None and found.checkpoint["channel_values"] == {"a": 3}


def test_a_value_the_serializer_cannot_keep_is_refused_naming_its_type(log: Log) -> None:
    saver = TurnlogSaver(log)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    class Opaque:
        __slots__ = ()

    with pytest.raises(TypeError, match="Opaque"):
        saver.put(config, _checkpoint("1", {"a": Opaque()}, {"a": 1}), {}, {"a": 1})
    assert log.head("t") is None  # nothing written


# (an id within 256 characters but over 256 UTF-8 bytes is refused by the append only)
@pytest.mark.parametrize(
    ("thread", "refusal"),
    [
        ("", "session id must be"),
        ("t" * 300, "session id must be"),
        ("\N{GRINNING FACE}" * 100, "session id must have at most 256 UTF-8 bytes"),
    ],
    ids=["empty", "long", "wide"],
)
def test_a_thread_whose_session_id_is_refused_leaves_no_blob(
    log: Log, thread: str, refusal: str
) -> None:
    # The values were stored as blobs before the session id was refused: unreachable,
    # and out of reach of erasure too.
    saver = TurnlogSaver(log)
    config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    with pytest.raises(turnlog.errors.InvalidEventError, match=refusal):
        saver.put(config, _checkpoint("1", {"a": "private"}, {"a": 1}), {}, {"a": 1})
    with log.store.read() as txn:
        assert list(txn.blobs()) == []


def test_async_saver_calls_do_not_block_the_event_loop(tmp_path: Path) -> None:
    log = turnlog.open(tmp_path / "store")
    saver = TurnlogSaver(log)
    loop_thread: list[int] = []
    store_threads: set[int] = set()
    write = log.store.write

    def spy(fn: Any) -> Any:
        store_threads.add(threading.get_ident())
        return write(fn)

    log.store.write = spy  # type: ignore[method-assign]

    async def main() -> None:
        loop_thread.append(threading.get_ident())
        config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = await saver.aput(config, _checkpoint("1", {"a": 1}, {"a": 1}), {}, {"a": 1})
        await saver.aput_writes(stored, [("a", 2)], "task")
        assert await saver.aget_tuple(stored) is not None

    asyncio.run(main())
    assert store_threads and loop_thread[0] not in store_threads


def _checkpoint(ident: str, values: dict[str, Any], versions: dict[str, Any]) -> Any:
    return {
        "v": 1,
        "id": ident,
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": {},
        "pending_sends": [],
        "updated_channels": None,
    }


# -- the model hooks and the example -------------------------------------------------------------
def _turnlog(*argv: str) -> subprocess.CompletedProcess[str]:
    script = str(Path(sys.executable).with_name("turnlog"))
    return subprocess.run([script, *argv], capture_output=True, text=True, timeout=300, check=False)


def test_the_example_runs_and_every_request_replays_from_the_command_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = subprocess.run(
        [sys.executable, "-m", "turnlog.adapters.examples.langgraph", str(store)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert run.returncode == 0, run.stderr
    assert "recorded requests: 3  requests received: 3" in run.stdout
    replay = _turnlog("--store", str(store), "replay", "langgraph-invoice")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "3 of 3 requests reproduced byte for byte" in replay.stdout
    verify = _turnlog("--store", str(store), "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_every_model_call_is_packed_from_events_appended_before_it(tmp_path: Path) -> None:
    from turnlog.adapters.examples import langgraph as example

    out = example.run(tmp_path / "store")
    assert out["requests"] == out["received"] == 3
    log = turnlog.open(tmp_path / "store")
    session = out["session"]
    events = log.read(session)
    calls = [
        p
        for e in events
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, ToolCall)
    ]
    assert [c.name for c in calls] == ["hours_worked", "multiply", "multiply"]
    replayer = turnlog.Replayer(turnlog.Packer(log))
    for seq, body in zip(out["request_seqs"], out["bodies"], strict=True):
        record = log.get(session, seq).body
        assert isinstance(record, RequestIssued)
        prompt = replayer.repack(session, seq).prompt
        sent = body["messages"]
        assert isinstance(sent, list)
        # What the model got is the packed prompt, message for message: every message
        # was an event before the request record that packed it.
        assert [m["role"] for m in sent] == [m.role for m in prompt.messages]
        assert [m.get("content") or "" for m in sent] == [m.text for m in prompt.messages]
        answered = [
            e.body
            for e in events
            if isinstance(e.body, ResponseReceived) and e.body.request_seq == seq
        ]
        assert len(answered) == 1 and answered[0].usage.input_tokens > 0
    policy = replayer.packer.policy_in_force(session)
    assert policy is not None and policy.tokenizer == "o200k_base"  # gpt-4o-mini's
    assert log.verify().ok
    log.close()


def test_a_message_turnlog_cannot_represent_is_kept_and_rendered_back(log: Log) -> None:
    hooks = TurnlogModelHooks(log, model="gpt-4o")
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    critic = ChatMessage(role="critic", content="Check the fee.", id="m2")
    messages = [HumanMessage("hi", id="m1"), critic]
    packed = hooks.pre_model({"messages": messages}, config)["llm_input_messages"]
    assert "Check the fee." in packed[-1].content  # sent, as a notification from its role
    assert hooks.history("t").messages == messages  # kept as it was


def test_a_compaction_block_in_the_state_is_kept_and_sent_back_unchanged(log: Log) -> None:
    hooks = TurnlogModelHooks(log, model="gpt-4o")
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    block = {"type": "compaction", "content": "Summary: the user said hello. é"}
    reply = AIMessage([block, {"type": "text", "text": "Go on."}], id="m2")
    messages = [HumanMessage("hello", id="m1"), reply, HumanMessage("more", id="m3")]
    packed = hooks.pre_model({"messages": messages}, config)["llm_input_messages"]
    assert [m.content for m in packed] == [[block, {"type": "text", "text": "Go on."}], "more"]
    body = log.read("t")[1].body
    assert isinstance(body, AssistantMessageAdded)
    data = json.dumps(block, ensure_ascii=False, separators=(",", ":"))
    assert body.parts[0] == NativePart(
        format="anthropic", item_type="compaction", data=data, text=block["content"]
    )
    assert hooks.history("t").messages == messages


def test_an_item_that_is_not_a_message_is_refused_naming_its_type(log: Log) -> None:
    hooks = TurnlogModelHooks(log, model="gpt-4o")
    with pytest.raises(turnlog.errors.InvalidEventError, match="found Fraction"):
        from fractions import Fraction

        hooks.pre_model(
            {"messages": [HumanMessage("hi", id="m1"), Fraction(1, 3)]},
            {"configurable": {"thread_id": "t"}},
        )
    assert log.head("t") is None  # nothing appended


def test_hooks_made_again_without_a_policy_keep_the_threads_policy_in_force(log: Log) -> None:
    # They put the model's policy in force over it (a 128,000-token window here).
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    given = turnlog.Policy(context_window=32_000, output_reserve=2_000)
    first = TurnlogModelHooks(log, model="gpt-4o-mini", policy=given)
    messages: list[Any] = [HumanMessage("hi", id="m1")]
    first.pre_model({"messages": messages}, config)
    messages.append(AIMessage("hello", id="m2"))
    first.post_model({"messages": messages}, config)
    again = TurnlogModelHooks(log, model="gpt-4o-mini")  # after a restart
    messages.append(HumanMessage("and again", id="m3"))
    again.pre_model({"messages": messages}, config)
    assert [e.kind for e in log.read("t")].count("policy") == 1
    in_force = again.packer.policy_in_force("t")
    assert in_force is not None and in_force.context_window == 32_000
    # A new thread still packs with the model's policy.
    again.pre_model(
        {"messages": [HumanMessage("hi", id="n1")]}, {"configurable": {"thread_id": "u"}}
    )
    new = again.packer.policy_in_force("u")
    assert new is not None and new.context_window == 128_000


def test_a_reply_and_its_tool_results_go_in_once_across_calls(log: Log) -> None:
    hooks = TurnlogModelHooks(log, model="gpt-4o")
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    state: dict[str, Any] = {"messages": [HumanMessage("hi", id="m1")]}
    hooks.pre_model(state, config)
    reply = AIMessage(
        "",
        id="m2",
        tool_calls=[{"name": "f", "args": {}, "id": "c1"}],
        usage_metadata={"input_tokens": 9, "output_tokens": 2, "total_tokens": 11},
    )
    state["messages"].append(reply)
    hooks.post_model(state, config)
    state["messages"].append(ToolMessage("42", tool_call_id="c1", id="m3"))
    hooks.pre_model(state, config)
    hooks.pre_model(state, config)  # nothing new: one more request, no message twice
    kinds = [e.kind for e in log.read("t")]
    assert kinds.count("user") == kinds.count("assistant") == kinds.count("tool_result") == 1
    assert kinds.count("request") == 3 and kinds.count("response") == 1


def test_a_copy_sees_what_the_source_sees_after_pruning(log: Log) -> None:
    saver = TurnlogSaver(log)
    config: RunnableConfig = {"configurable": {"thread_id": "src", "checkpoint_ns": ""}}
    first = saver.put(
        config,
        _checkpoint("1", {"a": "kept", "b": 1}, {"a": 1, "b": 1}),
        {"step": 0},
        {"a": 1, "b": 1},
    )
    second = saver.put(
        first, _checkpoint("2", {"a": "kept", "b": 2}, {"a": 1, "b": 2}), {"step": 1}, {"b": 2}
    )
    saver.put_writes(second, [("b", 3)], "task")
    saver.prune(["src"])  # hides checkpoint 1, which holds a's value
    saver.copy_thread("src", "dst")
    copied = saver.get_tuple({"configurable": {"thread_id": "dst", "checkpoint_ns": ""}})
    assert copied is not None
    assert copied.checkpoint["channel_values"] == {"a": "kept", "b": 2}
    assert copied.pending_writes == [("task", "b", 3)]
    assert [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "dst"}})] == ["2"]


def test_the_agent_runs_on_an_event_loop_with_the_async_saver(tmp_path: Path) -> None:
    import warnings

    from langchain_core.messages import HumanMessage as Human
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent
    from turnlog.adapters.examples import langgraph as example
    from turnlog.adapters.providers.fakeserver import FakeServer

    log = turnlog.open(tmp_path / "store")
    hooks = TurnlogModelHooks(log, model=example.MODEL)
    with FakeServer(example.SCRIPT) as server:
        model = ChatOpenAI(
            model=example.MODEL,
            base_url=server.base_url("openai-chat"),
            api_key="k",  # type: ignore[arg-type]
            max_retries=0,  # type: ignore[arg-type]
        )  # type: ignore[arg-type]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            agent = create_react_agent(
                model,
                [example.hours_worked, example.multiply],
                pre_model_hook=hooks.pre_model,
                post_model_hook=hooks.post_model,
                checkpointer=TurnlogSaver(log),
            )
        config: RunnableConfig = {"configurable": {"thread_id": "async"}}
        result = asyncio.run(agent.ainvoke({"messages": [Human("Invoice 2024-117?")]}, config))
        received = len(server.requests)
    assert result["messages"][-1].content == example.SCRIPT[-1].text
    replayer = turnlog.Replayer(turnlog.Packer(log))
    requests = replayer.requests("async")
    assert len(requests) == received == 3
    assert all(replayer.replay("async", seq).ok for seq in requests)
    state = asyncio.run(agent.aget_state(config))
    assert [m.content for m in state.values["messages"]] == [m.content for m in result["messages"]]


def test_a_state_event_the_saver_did_not_write_is_named(log: Log) -> None:
    log.append("t", StateSaved(source="langgraph.checkpoint", data='{"id": "1"}'))
    log.append("u", StateSaved(source="another.framework", data="not json"))
    saver = TurnlogSaver(log)
    with pytest.raises(turnlog.errors.StoreCorruptError, match=r"t#0 is a state event"):
        saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert saver.get_tuple({"configurable": {"thread_id": "u", "checkpoint_ns": ""}}) is None

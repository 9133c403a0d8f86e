"""LangChain chat history on a turnlog session, against the real ``langchain_core``."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("langchain_core")

import turnlog
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from support import body_of
from turnlog import Log, Packer, Policy, Replayer
from turnlog.adapters import Session
from turnlog.adapters.integrations.langchain import (
    META_KEY,
    TurnlogChatMessageHistory,
    prompt_messages,
)
from turnlog.errors import InvalidEventError
from turnlog.events import (
    AssistantMessageAdded,
    NativePart,
    RequestIssued,
    ResponseReceived,
    SessionRewound,
    SystemSectionSet,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)

POLICY = Policy(context_window=16_000, output_reserve=1_000)


@pytest.fixture
def log() -> Iterator[Log]:
    with turnlog.open(":memory:") as opened:
        yield opened


def conversation() -> list[BaseMessage]:
    """Every kind of message, with the fields LangChain apps set."""
    return [
        SystemMessage("You are a careful agent."),
        HumanMessage("Read a.py and add 2 and 3.", id="h1", name="ada"),
        AIMessage(
            "",
            id="ai1",
            tool_calls=[
                {"name": "read_file", "args": {"path": "a.py"}, "id": "call_1"},
                {
                    "name": "add",
                    "args": {"a": 2, "b": 3.5, "nested": {"x": [1, None]}},
                    "id": "call_2",
                },
            ],
            usage_metadata={"input_tokens": 30, "output_tokens": 12, "total_tokens": 42},
            response_metadata={"model_name": "gpt-test", "finish_reason": "tool_calls"},
            additional_kwargs={"refusal": None},
        ),
        ToolMessage("def f(): pass", tool_call_id="call_1", artifact={"lines": 1}),
        ToolMessage("add failed: overflow", tool_call_id="call_2", status="error", name="add"),
        AIMessage(
            [
                {"type": "thinking", "thinking": "Retry.", "signature": "sig=="},
                {"type": "text", "text": "a.py defines f; the sum failed."},
            ]
        ),
        HumanMessage(
            [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/p.png"}},
            ]
        ),
        AIMessage(
            "A cat.",
            invalid_tool_calls=[
                {
                    "name": "zoom",
                    "args": "{bad json",
                    "id": "call_3",
                    "error": "bad json",
                    "type": "invalid_tool_call",
                }
            ],
        ),
        AIMessage("", tool_calls=[{"name": "look", "args": {}, "id": None}]),
        ChatMessage(content="Looks fine to me.", role="critic"),
    ]


def test_messages_read_back_equal_to_what_was_added(log: Log) -> None:
    history = TurnlogChatMessageHistory(log, "chat")
    added = conversation()
    history.add_messages(added)
    assert history.messages == added
    assert TurnlogChatMessageHistory(log, "chat").messages == added  # a new reader too


def test_messages_become_the_matching_events(log: Log) -> None:
    history = TurnlogChatMessageHistory(log, "chat")
    history.add_messages(conversation())
    events = log.read("chat")
    assert [e.kind for e in events] == [
        "system",
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
        "user",
        "assistant",
        "assistant",
        "notification",
    ]
    assert events[0].body == SystemSectionSet(name="langchain.0", text="You are a careful agent.")
    assert events[1].body == UserMessageAdded(text="Read a.py and add 2 and 3.")
    call = events[2].body
    assert isinstance(call, AssistantMessageAdded)
    assert call.parts == (
        ToolCall(id="call_1", name="read_file", arguments='{"path": "a.py"}'),
        ToolCall(
            id="call_2", name="add", arguments='{"a": 2, "b": 3.5, "nested": {"x": [1, null]}}'
        ),
    )
    first, second = events[3].body, events[4].body
    assert isinstance(first, ToolResultAdded) and isinstance(second, ToolResultAdded)
    assert (first.tool_name, first.is_error) == ("read_file", False)  # name from the call
    assert (second.tool_name, second.is_error) == ("add", True)
    assert all(META_KEY in e.meta for e in events)
    assert "content" not in events[1].meta[META_KEY]  # kept once, in the event


def test_a_large_tool_output_reads_back_in_full(log: Log) -> None:
    history = TurnlogChatMessageHistory(log, "chat")
    output = "\n".join(f"line {i}: " + "x" * 60 for i in range(3000))
    history.add_messages(
        [
            HumanMessage("go"),
            AIMessage("", tool_calls=[{"name": "cat", "args": {}, "id": "c1"}]),
            ToolMessage(output, tool_call_id="c1"),
        ]
    )
    stored = log.read("chat", kinds=["tool_result"])[0].body
    assert isinstance(stored, ToolResultAdded) and stored.blob is not None
    assert len(stored.output) < len(output)
    assert history.messages[-1].content == output


def test_clear_rewinds_instead_of_deleting(log: Log) -> None:
    history = TurnlogChatMessageHistory(log, "chat")
    history.clear()  # nothing to clear: nothing appended
    assert log.head("chat") is None
    history.add_messages(conversation())
    before = log.head("chat")
    assert before is not None
    history.clear()
    assert history.messages == []
    rewind = log.get("chat", before.seq + 1).body
    assert rewind == SessionRewound(to_seq=-1, reason="clear")
    history.clear()  # already empty: nothing appended
    assert log.head("chat").seq == before.seq + 1  # type: ignore[union-attr]
    assert len(log.read("chat")) == before.seq + 2  # every event is still in the log
    history.add_user_message("start over")
    history.add_ai_message("sure")
    assert history.messages == [HumanMessage("start over"), AIMessage("sure")]
    assert log.verify("chat").ok


def test_setting_messages_replaces_the_history_in_one_batch(log: Log) -> None:
    history = TurnlogChatMessageHistory(log, "chat")
    history.add_messages(conversation())
    head = log.head("chat")
    assert head is not None
    history.messages = [HumanMessage("only this")]
    assert history.messages == [HumanMessage("only this")]
    assert [e.kind for e in log.read("chat", head.seq + 1)] == ["rewind", "user"]


def test_remove_message_is_refused(log: Log) -> None:
    history = TurnlogChatMessageHistory(log, "chat")
    with pytest.raises(InvalidEventError, match="never deletes"):
        history.add_messages([HumanMessage("a"), RemoveMessage(id="x")])
    assert log.head("chat") is None


def test_packed_messages_are_budgeted_recorded_and_replayable(log: Log) -> None:
    policy = Policy(
        context_window=3000,
        output_reserve=500,
        warning_buffer=800,
        compact_buffer=500,
        blocking_buffer=200,
    )
    history = TurnlogChatMessageHistory(log, "chat", policy=policy)
    history.add_messages([SystemMessage("Be brief.")])
    for turn in range(12):
        history.add_messages(
            [
                HumanMessage(f"question {turn}: " + "why " * 150),
                AIMessage(f"answer {turn}: " + "because " * 150),
            ]
        )
    history.add_messages([HumanMessage("last question")])
    packed = history.packed_messages(model="gpt-test")
    assert isinstance(packed[0], SystemMessage) and packed[0].content == "Be brief."
    assert packed[-1] == HumanMessage("last question")
    assert 2 < len(packed) < len(history.messages)  # old turns trimmed to the budget
    requests = log.read("chat", kinds=["request"])
    assert len(requests) == 1
    request = body_of(requests[0], RequestIssued)
    assert request.model == "gpt-test" and request.tokens <= policy.usable
    assert Replayer(Packer(log)).replay("chat", requests[0].seq).ok
    history.add_messages(
        [
            AIMessage(
                "fine",
                usage_metadata={
                    "input_tokens": 900,
                    "output_tokens": 2,
                    "total_tokens": 902,
                    "input_token_details": {"cache_read": 600},
                },
            )
        ]
    )
    response = log.read("chat")[-1].body
    assert isinstance(response, ResponseReceived) and response.request_seq == requests[0].seq
    assert (response.usage.input_tokens, response.usage.cache_read_tokens) == (900, 600)
    history.add_messages([AIMessage("no second response")])
    assert not isinstance(log.read("chat")[-1].body, ResponseReceived)
    unrecorded = history.packed_messages(record=False)
    assert unrecorded[-1] == AIMessage("no second response")
    assert len(log.read("chat", kinds=["request"])) == 1


def test_packed_messages_answer_calls_left_open_by_a_final_run_of_results(log: Log) -> None:
    history = TurnlogChatMessageHistory(log, "chat", policy=POLICY)
    history.add_messages(
        [
            HumanMessage("go"),
            AIMessage(
                "",
                tool_calls=[
                    {"name": "a", "args": {}, "id": "c1"},
                    {"name": "b", "args": {}, "id": "c2"},
                ],
            ),
            ToolMessage("done a", tool_call_id="c1"),
        ]
    )
    packed = history.packed_messages(record=False)
    assert [type(m).__name__ for m in packed] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "ToolMessage",
    ]
    missing = packed[-1]  # every provider refuses a call without its result
    assert isinstance(missing, ToolMessage)
    assert (missing.tool_call_id, missing.status) == ("c2", "error")
    assert missing.content != "done a"
    assert prompt_messages(Packer(log).pack("chat", policy=POLICY).prompt) == packed


def test_events_from_the_facade_read_back_as_messages(log: Log) -> None:
    session = Session(log, "chat", model="m", policy=POLICY)
    session.system("base", "Be brief.")
    session.user("hi")
    session.notify("ci", "tests passed")
    history = TurnlogChatMessageHistory(log, "chat")
    assert history.messages == [
        SystemMessage("Be brief."),
        HumanMessage("hi"),
        HumanMessage('<notification source="ci">\ntests passed\n</notification>'),
    ]


def test_the_history_works_where_langchain_expects_one(log: Log) -> None:
    from langchain_core.runnables.history import RunnableWithMessageHistory

    history = TurnlogChatMessageHistory(log, "chat")
    assert isinstance(history, BaseChatMessageHistory)
    model = FakeListChatModel(responses=["Hello!", "Still here."])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the runnable is deprecated
        chain = RunnableWithMessageHistory(
            model, lambda session_id: TurnlogChatMessageHistory(log, session_id)
        )
        config = {"configurable": {"session_id": "chat"}}
        chain.invoke("hi", config=config)  # type: ignore[arg-type]
        chain.invoke("again", config=config)  # type: ignore[arg-type]
    texts = [m.content for m in asyncio.run(history.aget_messages())]
    assert texts == ["hi", "Hello!", "again", "Still here."]
    asyncio.run(history.aclear())
    assert history.messages == []


# -- a provider's own compaction in an AIMessage's content ---------------------------------------
#: As langchain-anthropic gives it (keys in the API's order, the summary as ``content``).
ANTHROPIC_COMPACTION = {"type": "compaction", "content": "Summary: the user said hello. é"}
#: As langchain-openai gives a Responses compaction item (its JSON, as a content block).
RESPONSES_COMPACTION = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA+/=="}


@pytest.mark.parametrize(
    ("block", "fmt"),
    [(ANTHROPIC_COMPACTION, "anthropic"), (RESPONSES_COMPACTION, "openai-responses")],
)
def test_a_compaction_block_is_kept_as_a_native_part_and_read_back_unchanged(
    log: Log, block: dict[str, str], fmt: str
) -> None:
    history = TurnlogChatMessageHistory(log, "chat")
    reply = AIMessage([block, {"type": "text", "text": "Go on."}], id="ai1")
    added = [HumanMessage("hello", id="h1"), reply, HumanMessage("more", id="h2")]
    history.add_messages(added)
    body = log.read("chat")[1].body
    assert isinstance(body, AssistantMessageAdded)
    native = body.parts[0]
    assert isinstance(native, NativePart)
    assert (native.format, native.item_type) == (fmt, "compaction")
    assert native.data == json.dumps(block, ensure_ascii=False, separators=(",", ":"))
    assert "encrypted_content" not in str(log.read("chat")[1].meta)  # held once, in the part
    assert "Summary" not in str(log.read("chat")[1].meta)
    assert history.messages == added
    assert TurnlogChatMessageHistory(log, "chat").messages[1].content[0] == block
    # Packed, the block opens the prompt unchanged and what it replaced is not sent.
    packed = history.packed_messages(POLICY)
    assert [type(m).__name__ for m in packed] == ["AIMessage", "HumanMessage"]
    assert packed[0].content == [block, {"type": "text", "text": "Go on."}]


def test_a_compaction_block_no_format_owns_is_refused_naming_its_type(log: Log) -> None:
    history = TurnlogChatMessageHistory(log, "chat")
    with pytest.raises(InvalidEventError, match="'compaction' content block has neither"):
        history.add_messages([AIMessage([{"type": "compaction", "summary": 3}])])
    assert log.head("chat") is None

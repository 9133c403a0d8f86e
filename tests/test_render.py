"""Renderers: neutral prompt -> provider request bodies that the providers accept.

Three layers of checks:

* structural properties of each wire format (Anthropic's strict alternation
  and tool pairing, OpenAI's call/answer pairing, no empty content, at most
  four cache markers) over generated sessions packed at many budgets, and
  over generated prompts with the awkward shapes packing rarely makes;
* the official SDKs' request types: every rendered body is walked against
  the SDK's ``TypedDict`` (unknown keys, missing required keys, wrong tags
  fail; see ``sdkcheck``), and sent through the SDK clients to the local fake
  server, which must receive exactly the rendered body;
* determinism and the record/replay contract.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import blake3
import msgspec
import openai
import pytest
import turnlog
from anthropic.types.message_create_params import (
    MessageCreateParamsNonStreaming as AnthropicParams,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming as ChatParams,
)
from openai.types.responses.response_create_params import (
    ResponseCreateParamsNonStreaming as ResponsesParams,
)
from sdkcheck import check
from support import body_of
from turnlog import Packer, Policy, Replayer, pack
from turnlog.adapters import providers
from turnlog.adapters.importers import import_file
from turnlog.adapters.providers import (
    EMPTY_TEXT,
    FIRST_TURN_TEXT,
    PROVIDERS,
    RENDER_LATEST,
    RenderError,
    canonical,
    derived_tool_names,
    fakeserver,
    render,
    render_args,
    renderer,
    renderer_for,
    send,
)
from turnlog.adapters.providers.fakeserver import (
    TOOLS_REQUIRED_MESSAGE,
    FakeReply,
    FakeServer,
    anthropic_problems,
)
from turnlog.errors import BudgetExceededError
from turnlog.events import (
    AssistantMessageAdded,
    BlobRef,
    ImagePart,
    NotificationAdded,
    ReasoningPart,
    RequestIssued,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)
from turnlog.packing import Breakpoint, Message, Prompt, Section


def render_body(prompt: Prompt, format: str, **options: Any) -> dict[str, Any]:  # noqa: A002
    """The rendered body, typed for the indexing an assertion does."""
    return providers.render_body(prompt, format, **options)


try:  # the shared session generator (the local one below runs in any case)
    from turnlog import testing
except ImportError:  # pragma: no cover - depends on the installed kernel
    testing = None  # type: ignore[assignment]

SDK_TYPES: dict[str, Any] = {
    "openai-chat": ChatParams,
    "openai-responses": ResponsesParams,
    "anthropic": AnthropicParams,
}
MODEL = "test-model"
SETTINGS = settings(
    deadline=None,
    max_examples=max(150, settings().max_examples),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- invariants of each wire format ------------------------------------------------------------
def chat_problems(body: dict[str, Any]) -> list[str]:
    """Call/answer problems of a Chat Completions body."""
    out: list[str] = []
    ids: set[str] = set()
    open_calls: set[str] = set()
    for i, message in enumerate(body["messages"]):
        role = message["role"]
        if role == "tool":
            if message["tool_call_id"] not in open_calls:
                out.append(f"message {i}: tool answers no call of the preceding assistant")
            open_calls.discard(message["tool_call_id"])
            if not isinstance(message["content"], str) or not message["content"]:
                out.append(f"message {i}: empty tool content")
            continue
        if open_calls:
            out.append(f"message {i}: calls {sorted(open_calls)} unanswered")
        open_calls = set()
        if role == "assistant":
            for call in message.get("tool_calls", []):
                if call["id"] in ids:
                    out.append(f"message {i}: call id {call['id']} repeats")
                ids.add(call["id"])
                open_calls.add(call["id"])
                if len(call["id"]) > 40:
                    out.append(f"message {i}: call id longer than 40")
            if message.get("content") is None and not message.get("tool_calls"):
                out.append(f"message {i}: assistant with neither content nor calls")
        if message.get("content") == "":
            out.append(f"message {i}: empty content")
    return out


def responses_problems(body: dict[str, Any]) -> list[str]:
    """Call/answer problems of a Responses body."""
    out: list[str] = []
    calls: dict[str, str] = {}  # call id -> the output type that answers it
    items = body["input"]
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            if item["call_id"] in calls:
                out.append(f"item {i}: call id repeats")
            calls[item["call_id"]] = f"{kind}_output"
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if item["call_id"] not in calls:
                out.append(f"item {i}: output for {item['call_id']} answers no prior call")
            elif calls[item["call_id"]] != kind:
                out.append(f"item {i}: a {kind} answers a {calls[item['call_id']]} call")
        elif kind == "reasoning":
            following = items[i + 1]["type"] if i + 1 < len(items) else ""
            if following not in ("message", "function_call", "custom_tool_call", "reasoning"):
                out.append(f"item {i}: reasoning not followed by an output item")
            if not item.get("id"):
                out.append(f"item {i}: reasoning without an id")
    return out


PROBLEMS = {
    "anthropic": anthropic_problems,
    # the local call/answer checks, and what the fake server (as the API) refuses
    "openai-chat": lambda body: chat_problems(body) + fakeserver.chat_problems(body),
    "openai-responses": lambda body: responses_problems(body) + fakeserver.responses_problems(body),
}


def blobs(ref: BlobRef) -> bytes:
    """A blob reader for generated prompts: the bytes are derived from the hash."""
    return bytes.fromhex(ref.hash)[:8]


def check_all_formats(prompt: Prompt) -> dict[str, bytes]:
    """Render ``prompt`` in every format and check validity and determinism."""
    out = {}
    for name in PROVIDERS:
        body = render_body(prompt, name, model=MODEL, max_tokens=1024, blobs=blobs)
        problems = PROBLEMS[name](body)
        assert not problems, f"{name}: {problems}\n{json.dumps(body)[:2000]}"
        check(body, SDK_TYPES[name])
        data = render(prompt, name, model=MODEL, max_tokens=1024, blobs=blobs)
        assert data == canonical(body)
        assert json.loads(data) == body
        assert render(prompt, name, model=MODEL, max_tokens=1024, blobs=blobs) == data
        out[name] = data
    return out


# -- generated sessions, packed at many budgets ------------------------------------------------
_words = st.sampled_from(("fix", "the", "parser", "ok", "see", "src/app.py", "error", "done"))


@st.composite
def local_sessions(draw: st.DrawFn) -> list[Any]:
    """A small session generator: sections, tools, user turns, notifications, exchanges
    with parallel calls answered in any order, some never (the packer then inserts
    placeholder results, or the calls stay pending at the end)."""
    items: list[Any] = []
    if draw(st.booleans()):
        items.append(SystemSectionSet(name="base", text="You are a careful engineer."))
    if draw(st.booleans()):
        items.append(
            ToolsSet(
                tools=(ToolSpec(name="Read", parameters='{"type":"object"}'), ToolSpec(name="Bash"))
            )
        )
    calls = 0
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(("user", "exchange", "exchange", "notification")))
        text = " ".join(draw(st.lists(_words, max_size=40)))
        if kind == "user":
            items.append(UserMessageAdded(text=text))
        elif kind == "notification":
            items.append(NotificationAdded(source="watcher", text=text or "changed"))
        else:
            made = []
            for _ in range(draw(st.integers(0, 3))):
                calls += 1
                made.append(
                    ToolCall(
                        id=f"call_{calls}",
                        name="Read",
                        arguments=draw(st.sampled_from(('{"path":"a"}', "{x"))),
                    )
                )
            parts: list[Any] = []
            if draw(st.booleans()):
                parts.append(ReasoningPart(text="hmm", opaque="sig", provider="anthropic"))
            parts.append(TextPart(text=text or "ok"))
            items.append(AssistantMessageAdded(parts=(*parts, *made)))
            for call in draw(st.permutations(made)):
                if draw(st.integers(0, 5)):
                    items.append(
                        ToolResultAdded(
                            call_id=call.id,
                            tool_name=call.name,
                            output=text * draw(st.integers(0, 30)),
                            is_error=draw(st.booleans()),
                        )
                    )
    return items


def _budgets(windows: list[int]) -> list[Policy]:
    return [
        Policy(
            context_window=w,
            output_reserve=w // 8,
            warning_buffer=None,
            warning_ratio=0.6,
            compact_buffer=None,
            compact_ratio=0.7,
            blocking_buffer=None,
            blocking_ratio=0.8,
            prune_protect_tokens=w // 10,
            prune_min_savings=0,
            truncate_bytes=max(64, w),
            cache_breakpoints=4,
        )
        for w in windows
    ]


def check_packings(log: turnlog.Log, session: str, budgets: list[Policy]) -> None:
    """Pack ``session`` at each budget and check every rendering of every pack."""
    for budget in budgets:
        try:
            packed = Packer(log).pack(session, policy=budget)
        except BudgetExceededError:
            continue
        assert not packed.prompt.problems(), packed.prompt.problems()
        check_all_formats(packed.prompt)


@SETTINGS
@given(
    items=local_sessions(),
    windows=st.lists(
        st.sampled_from((1_500, 2_500, 6_000, 20_000, 200_000)), min_size=1, max_size=3
    ),
)
def test_small_sessions_render_to_valid_bodies_in_every_format(
    items: list[Any], windows: list[int]
) -> None:
    log = turnlog.open(":memory:")
    log.append("s", items)
    check_packings(log, "s", _budgets(windows))


if testing is not None:

    @SETTINGS
    @given(
        items=testing.sessions(max_events=50),
        policy=testing.policies(max_window=64_000),
        windows=st.lists(st.sampled_from((2_500, 6_000, 20_000, 200_000)), max_size=2),
    )
    def test_packed_sessions_render_to_valid_bodies_in_every_format(
        items: list[Any], policy: Policy, windows: list[int]
    ) -> None:
        log = testing.memory_log()
        session = testing.build(log, "s", items)
        view = testing.project(log, session)
        for budget in [policy, *_budgets(windows)]:
            try:
                packed = pack(view, budget)
            except BudgetExceededError:
                continue
            assert not packed.prompt.problems()
            check_all_formats(packed.prompt)


# -- generated prompts with awkward shapes -----------------------------------------------------
_texts = st.sampled_from(
    ("", " ", "\n", "hello", "trailing  ", "ünïcødé ✓", "x" * 50, "line\nbreaks\n")
)
_ids = st.sampled_from(
    ("call_1", "toolu_01A", "functions.Read:0", "x" * 64, "id with spaces", "call-2", "ñ")
)


@st.composite
def _images(draw: st.DrawFn) -> ImagePart:
    media = draw(st.sampled_from(("image/png", "image/jpeg", "image/svg+xml")))
    kind = draw(st.sampled_from(("url", "blob", "none")))
    if kind == "url":
        return ImagePart(media_type=media, url="https://example.invalid/i.png")
    if kind == "blob":
        return ImagePart(media_type=media, blob=BlobRef(hash="ab" * 32, size=8, media_type=media))
    return ImagePart(media_type=media)


_reasoning = st.builds(
    ReasoningPart,
    text=_texts,
    opaque=st.sampled_from(("", "c2lnbmF0dXJl", "enc-123")),
    provider=st.sampled_from(("anthropic", "anthropic-redacted", "openai", "openai-chat", "")),
    id=st.sampled_from(("", "rs_1")),
)


@st.composite
def prompts(draw: st.DrawFn) -> Prompt:
    """Well-formed prompts (they pass `Prompt.problems`) with awkward shapes: starting
    with the assistant, consecutive same-role messages, empty and whitespace
    text, reasoning of every provider, odd call ids, images, many breakpoints."""
    counter = iter(range(10_000))
    messages: list[Message] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(("user", "user", "assistant", "exchange")))
        if kind == "user":
            parts: list[Any] = [TextPart(text=draw(_texts))]
            parts += draw(st.lists(_images(), max_size=2))
            messages.append(Message(role="user", parts=tuple(parts)))
            continue
        parts = draw(st.lists(_reasoning, max_size=2))
        parts += [TextPart(text=t) for t in draw(st.lists(_texts, max_size=2))]
        if draw(st.integers(0, 9)) == 0:
            parts.append(draw(_images()))
        calls = [
            ToolCall(
                id=f"{draw(_ids)}{next(counter)}",
                name="Read",
                arguments=draw(
                    st.sampled_from(
                        ('{"path":"a"}', "{}", "{not json", "[1]", "", "*** Begin Patch\n")
                    )
                ),
                freeform=draw(st.integers(0, 3)) == 0,
            )
            for _ in range(draw(st.integers(0, 3)) if kind == "exchange" else 0)
        ]
        parts += calls
        if not parts:
            parts = [TextPart(text="")]
        messages.append(Message(role="assistant", parts=tuple(parts)))
        order = draw(st.permutations(calls)) if calls else []
        for call in order:
            messages.append(
                Message(
                    role="tool",
                    parts=(TextPart(text=draw(_texts)),),
                    tool_call_id=call.id,
                    name=call.name,
                    is_error=draw(st.booleans()),
                )
            )
    tail = draw(st.booleans()) if messages else False
    if tail:
        # a final assistant message whose calls wait for their results
        messages.append(
            Message(
                role="assistant",
                parts=(
                    TextPart(text=draw(_texts)),
                    ToolCall(id=f"last{next(counter)}", name="Bash"),
                ),
            )
        )
    system = tuple(
        Section(name=n, text=draw(st.sampled_from(("You help.", " ", "Rules"))))
        for n in draw(st.lists(st.sampled_from(("base", "env", "mode")), unique=True, max_size=3))
    )
    if draw(st.booleans()):
        system += (Section(name="conversation_summary", text="## Goal\n- things"),)
    tools = tuple(
        ToolSpec(name=n, description="d", parameters=p)
        for n, p in draw(
            st.lists(
                st.tuples(
                    st.sampled_from(("Read", "Bash", "Edit")),
                    st.sampled_from(
                        (
                            "{}",
                            '{"type":"object","properties":{"a":{}}}',
                            '{"properties":{"a":{"type":"string"}}}',
                        )
                    ),
                ),
                unique_by=lambda t: t[0],
                max_size=3,
            )
        )
    )
    points = draw(
        st.lists(
            st.one_of(
                st.sampled_from(
                    (Breakpoint(at="system"), Breakpoint(at="tools"), Breakpoint(at="summary"))
                ),
                st.builds(
                    Breakpoint,
                    at=st.just("message"),
                    index=st.integers(-1, max(0, len(messages) - 1)),
                ),
            ),
            max_size=7,
        )
    )
    return Prompt(system=system, tools=tools, messages=tuple(messages), breakpoints=tuple(points))


@SETTINGS
@given(prompt=prompts())
def test_awkward_prompts_render_to_valid_bodies_in_every_format(prompt: Prompt) -> None:
    assume(not prompt.problems())
    check_all_formats(prompt)


# -- the SDK clients accept the bodies and send them unchanged ---------------------------------
@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


def send_with_sdk(server: FakeServer, name: str, body: dict[str, Any]) -> dict[str, object]:
    """Send ``body`` through the official client of ``name``; return what arrived."""
    before = len(server.requests)
    if name == "anthropic":
        client = anthropic.Anthropic(base_url=server.base_url(name), api_key="test", max_retries=0)
        client.messages.create(**body)
    else:
        oai = openai.OpenAI(base_url=server.base_url(name), api_key="test", max_retries=0)
        if name == "openai-chat":
            oai.chat.completions.create(**body)
        else:
            oai.responses.create(**body)
    received = server.requests[before:]
    assert len(received) == 1
    assert received[0].format == name
    return received[0].json()


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(prompt=prompts())
def test_sdk_clients_send_rendered_bodies_unchanged(server: FakeServer, prompt: Prompt) -> None:
    assume(not prompt.problems())
    for name in PROVIDERS:
        body = render_body(prompt, name, model=MODEL, max_tokens=512, blobs=blobs)
        assert send_with_sdk(server, name, body) == body


def sample_prompt() -> Prompt:
    """A packed prompt with every kind of content (via a real log and packer)."""
    log = turnlog.open(":memory:")
    log.append(
        "s",
        [
            SystemSectionSet(name="base", text="You are a careful engineer."),
            ToolsSet(
                tools=(
                    ToolSpec(
                        name="Read",
                        description="Read a file.",
                        parameters='{"type":"object","properties":{"path":{"type":"string"}}}',
                    ),
                    ToolSpec(name="Bash", description="Run a command."),
                )
            ),
            UserMessageAdded(
                text="Fix the bug.",
                images=(ImagePart(media_type="image/png", url="https://example.invalid/s.png"),),
            ),
            AssistantMessageAdded(
                parts=(
                    ReasoningPart(text="Look first.", opaque="sig-1", provider="anthropic"),
                    TextPart(text="Reading both files."),
                    ToolCall(id="toolu_1", name="Read", arguments='{"path":"a.py"}'),
                    ToolCall(id="toolu_2", name="Read", arguments='{"path":"b.py"}'),
                )
            ),
            ToolResultAdded(call_id="toolu_2", tool_name="Read", output="b = 2"),
            ToolResultAdded(call_id="toolu_1", tool_name="Read", output="", is_error=True),
            NotificationAdded(source="watcher", text="a.py changed"),
            UserMessageAdded(text="Also run the tests."),
        ],
    )
    return Packer(log).pack("s").prompt


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_sdk_client_sends_a_full_prompt_unchanged(server: FakeServer, name: str) -> None:
    body = render_body(sample_prompt(), name, model=MODEL, max_tokens=256)
    check(body, SDK_TYPES[name])
    assert send_with_sdk(server, name, body) == body


def test_sdk_check_catches_wire_shape_mistakes() -> None:
    body = render_body(sample_prompt(), "anthropic", model=MODEL, max_tokens=256)
    body["messages"][1]["content"][0]["signatur"] = "x"
    with pytest.raises(AssertionError, match="signatur"):
        check(body, AnthropicParams)
    responses = render_body(
        Prompt(
            system=(),
            tools=(),
            messages=(
                Message(role="user", parts=(TextPart(text="q"),)),
                Message(
                    role="assistant",
                    parts=(
                        ReasoningPart(opaque="e", provider="openai", id="rs_1"),
                        TextPart(text="a"),
                    ),
                ),
            ),
        ),
        "openai-responses",
        model=MODEL,
        max_tokens=5,
    )
    del responses["input"][1]["id"]  # the API requires the reasoning item's id
    with pytest.raises(AssertionError, match="'id'"):
        check(responses, ResponsesParams)
    chat = render_body(sample_prompt(), "openai-chat", model=MODEL, max_tokens=5)
    chat["tools"][0]["function"]["input_schema"] = {}
    with pytest.raises(AssertionError, match="input_schema"):
        check(chat, ChatParams)


# -- what each format does with each kind of content -------------------------------------------
def test_anthropic_puts_tool_results_first_and_merges_the_following_user_text() -> None:
    body = render_body(sample_prompt(), "anthropic", model=MODEL, max_tokens=100)
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]
    last = body["messages"][2]["content"]
    assert [b["type"] for b in last] == ["tool_result", "tool_result", "text", "text"]
    assert [b["tool_use_id"] for b in last[:2]] == ["toolu_2", "toolu_1"]
    assert last[1] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": EMPTY_TEXT,
        "is_error": True,
    }
    assert "a.py changed" in last[2]["text"]
    assistant = body["messages"][1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "Look first.", "signature": "sig-1"}
    assert assistant[2] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "Read",
        "input": {"path": "a.py"},
    }
    # rules 3: a cache breakpoint where the previous request ended (before the assistant)
    assert body["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "url", "url": "https://example.invalid/s.png"},
        "cache_control": {"type": "ephemeral"},
    }
    assert body["tools"][1]["input_schema"] == {"type": "object", "properties": {}}
    assert body["system"][0]["text"] == "You are a careful engineer."


def test_anthropic_cache_control_follows_the_breakpoints() -> None:
    prompt = Prompt(
        system=(
            Section(name="base", text="static"),
            Section(name="mode", text="more"),
            Section(name="conversation_summary", text="## Goal\n- x"),
        ),
        tools=(ToolSpec(name="Read"),),
        messages=(
            Message(role="user", parts=(TextPart(text="one"),)),
            Message(
                role="assistant", parts=(ReasoningPart(text="t", opaque="s", provider="anthropic"),)
            ),
            Message(role="user", parts=(TextPart(text="two"),)),
            Message(role="user", parts=(TextPart(text="three"),)),
        ),
        breakpoints=(
            Breakpoint(at="tools"),
            Breakpoint(at="system"),
            Breakpoint(at="summary"),
            Breakpoint(at="message", index=1),
            Breakpoint(at="message", index=2),
            Breakpoint(at="message", index=3),
        ),
    )
    body = render_body(prompt, "anthropic", model=MODEL, max_tokens=10)
    assert "cache_control" in body["tools"][0]
    assert ["cache_control" in b for b in body["system"]] == [False, True, True]
    # Message 1 holds only thinking, which cannot carry a marker: the marker goes to
    # its placeholder text. Tools, system, summary and message 1 use all four markers.
    marked = [b for m in body["messages"] for b in m["content"] if "cache_control" in b]
    assert len(marked) == 1
    assert marked[0] == {"type": "text", "text": EMPTY_TEXT, "cache_control": {"type": "ephemeral"}}
    assert anthropic_problems(body) == []


def test_anthropic_starts_with_a_user_turn_and_never_sends_empty_content() -> None:
    prompt = Prompt(
        system=(Section(name="base", text="  "),),
        tools=(),
        messages=(Message(role="assistant", parts=(TextPart(text="I was saying  "),)),),
    )
    body = render_body(prompt, "anthropic", model=MODEL, max_tokens=10)
    assert body["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": FIRST_TURN_TEXT}],
    }
    assert body["messages"][1]["content"] == [{"type": "text", "text": "I was saying"}]
    assert body["system"] == [{"type": "text", "text": EMPTY_TEXT}]
    empty = render_body(
        Prompt(system=(), tools=(), messages=()), "anthropic", model=MODEL, max_tokens=10
    )
    assert empty["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": EMPTY_TEXT}]}
    ]


def test_reasoning_goes_back_only_to_the_api_that_produced_it() -> None:
    parts = (
        ReasoningPart(text="a", opaque="sig", provider="anthropic"),
        ReasoningPart(opaque="redacted", provider="anthropic-redacted"),
        ReasoningPart(text="b", opaque="enc", provider="openai", id="rs_9"),
        ReasoningPart(text="c", provider="openai-chat"),
        TextPart(text="answer"),
    )
    prompt = Prompt(
        system=(),
        tools=(),
        messages=(
            Message(role="user", parts=(TextPart(text="q"),)),
            Message(role="assistant", parts=parts),
        ),
    )
    anthropic_body = render_body(prompt, "anthropic", model=MODEL, max_tokens=10)
    assert anthropic_body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "a", "signature": "sig"},
        {"type": "redacted_thinking", "data": "redacted"},
        {"type": "text", "text": "answer"},
    ]
    responses = render_body(prompt, "openai-responses", model=MODEL, max_tokens=10)
    assert responses["input"][1:] == [
        {
            "type": "reasoning",
            "id": "rs_9",
            "summary": [{"type": "summary_text", "text": "b"}],
            "encrypted_content": "enc",
        },
        {"type": "message", "role": "assistant", "content": "answer"},
    ]
    chat = render_body(prompt, "openai-chat", model=MODEL, max_tokens=10)
    assert chat["messages"][1] == {"role": "assistant", "content": "answer"}


def test_openai_formats_pair_calls_with_their_outputs() -> None:
    chat = render_body(sample_prompt(), "openai-chat", model=MODEL, max_tokens=100)
    assert chat["messages"][0] == {"role": "system", "content": "You are a careful engineer."}
    assistant = chat["messages"][2]
    assert assistant["tool_calls"][0] == {
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "Read", "arguments": '{"path":"a.py"}'},
    }
    assert [m["role"] for m in chat["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
    ]
    assert chat["messages"][1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://example.invalid/s.png"},
    }
    assert chat["max_completion_tokens"] == 100
    assert chat["tools"][0]["function"]["name"] == "Read"
    responses = render_body(sample_prompt(), "openai-responses", model=MODEL, max_tokens=100)
    assert responses["instructions"] == "You are a careful engineer."
    kinds = [i["type"] for i in responses["input"]]
    assert kinds == [
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
        "message",
    ]
    assert responses["input"][4] == {
        "type": "function_call_output",
        "call_id": "toolu_2",
        "output": "b = 2",
    }
    assert responses["tools"][0] == {
        "type": "function",
        "name": "Read",
        "description": "Read a file.",
        "strict": False,
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    assert responses["max_output_tokens"] == 100


def test_call_ids_a_provider_would_refuse_are_replaced_consistently() -> None:
    long_id = "x" * 64
    prompt = Prompt(
        system=(),
        tools=(),
        messages=(
            Message(role="user", parts=(TextPart(text="q"),)),
            Message(
                role="assistant",
                parts=(
                    ToolCall(id="functions.Read:0", name="Read"),
                    ToolCall(id=long_id, name="Read"),
                ),
            ),
            Message(role="tool", parts=(TextPart(text="1"),), tool_call_id="functions.Read:0"),
            Message(role="tool", parts=(TextPart(text="2"),), tool_call_id=long_id),
        ),
    )
    body = render_body(prompt, "anthropic", model=MODEL, max_tokens=10)
    uses = [b["id"] for b in body["messages"][1]["content"]]
    results = [b["tool_use_id"] for b in body["messages"][2]["content"]]
    assert uses == results
    assert uses[0].startswith("toolu_") and uses[1] == long_id
    chat = render_body(prompt, "openai-chat", model=MODEL, max_tokens=10)
    ids = [c["id"] for c in chat["messages"][1]["tool_calls"]]
    assert ids[0] == "functions.Read:0" and len(ids[1]) <= 40
    assert [m["tool_call_id"] for m in chat["messages"][2:]] == ids


def test_freeform_calls_render_natively_in_every_format() -> None:
    patch = "*** Begin Patch\n*** Update File: a.py\n-old\n+new\n*** End Patch"
    prompt = Prompt(
        system=(),
        tools=(),
        messages=(
            Message(role="user", parts=(TextPart(text="patch it"),)),
            Message(
                role="assistant",
                parts=(
                    ToolCall(id="c1", name="apply_patch", arguments=patch, freeform=True),
                    ToolCall(id="c2", name="Read", arguments='{"path":"a.py"}'),
                ),
            ),
            Message(
                role="tool", parts=(TextPart(text="Done!"),), tool_call_id="c1", name="apply_patch"
            ),
            Message(role="tool", parts=(TextPart(text="new"),), tool_call_id="c2", name="Read"),
        ),
    )
    bodies = {name: json.loads(data) for name, data in check_all_formats(prompt).items()}
    declared = msgspec.structs.replace(
        prompt,
        tools=(
            ToolSpec(name="apply_patch", description="Apply a patch.", freeform=True),
            ToolSpec(
                name="lark",
                freeform=True,
                parameters=json.dumps(
                    {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}
                ),
            ),
            ToolSpec(name="Read", parameters='{"type":"object"}'),
        ),
    )
    tools = {name: json.loads(data)["tools"] for name, data in check_all_formats(declared).items()}
    assert tools["openai-chat"][:2] == [
        {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch."}},
        {
            "type": "custom",
            "custom": {
                "name": "lark",
                "format": {
                    "type": "grammar",
                    "grammar": {"syntax": "lark", "definition": "start: /.+/"},
                },
            },
        },
    ]
    assert tools["openai-responses"][0] == {
        "type": "custom",
        "name": "apply_patch",
        "description": "Apply a patch.",
    }
    assert tools["anthropic"][0]["input_schema"] == {
        "type": "object",
        "properties": {"input": {"type": "string"}},
        "required": ["input"],
    }
    chat = bodies["openai-chat"]["messages"][1]["tool_calls"]
    assert chat[0] == {
        "id": "c1",
        "type": "custom",
        "custom": {"name": "apply_patch", "input": patch},
    }
    assert chat[1]["type"] == "function"
    items = bodies["openai-responses"]["input"]
    assert items[1] == {
        "type": "custom_tool_call",
        "call_id": "c1",
        "name": "apply_patch",
        "input": patch,
    }
    assert [i["type"] for i in items[2:]] == [
        "function_call",
        "custom_tool_call_output",
        "function_call_output",
    ]
    use = bodies["anthropic"]["messages"][1]["content"][0]
    assert use == {"type": "tool_use", "id": "c1", "name": "apply_patch", "input": {"input": patch}}


STRICT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "range": {
            "type": "object",
            "properties": {"start": {"type": "integer"}},
            "required": ["start"],
            "additionalProperties": False,
        },
    },
    "required": ["path", "range"],
    "additionalProperties": False,
}


def test_a_strict_tool_is_strict_in_every_format_and_other_tools_render_as_before() -> None:
    prompt = Prompt(
        system=(),
        tools=(
            ToolSpec(name="Read", parameters=json.dumps(STRICT_SCHEMA), strict=True),
            ToolSpec(name="Bash", parameters='{"type":"object"}'),
        ),
        messages=(Message(role="user", parts=(TextPart(text="q"),)),),
    )
    tools = {name: json.loads(data)["tools"] for name, data in check_all_formats(prompt).items()}
    chat, responses, messages = tools["openai-chat"], tools["openai-responses"], tools["anthropic"]
    assert chat[0]["function"]["strict"] is True and "strict" not in chat[1]["function"]
    assert responses[0]["strict"] is True and responses[1]["strict"] is False
    assert messages[0]["strict"] is True and "strict" not in messages[1]
    # An event without the field (any before it existed) is the same bytes as before.
    old = msgspec.msgpack.encode(ToolSpec(name="Bash", parameters='{"type":"object"}'))
    assert b"strict" not in old
    assert msgspec.msgpack.decode(old, type=ToolSpec).strict is False


@pytest.mark.parametrize(
    ("schema", "refused"),
    [
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, "all"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "additionalProperties": False,
            },
            "openai",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "array", "items": {"type": "object"}}},
                "required": ["a"],
                "additionalProperties": False,
            },
            "all",
        ),
    ],
)
def test_the_fake_server_refuses_a_strict_schema_as_the_providers_do(
    schema: dict[str, Any], refused: str
) -> None:
    prompt = Prompt(
        system=(),
        tools=(ToolSpec(name="Read", parameters=json.dumps(schema), strict=True),),
        messages=(Message(role="user", parts=(TextPart(text="q"),)),),
    )
    found = {
        name: problem(render_body(prompt, name, model=MODEL, max_tokens=1024, blobs=blobs))
        for name, problem in (
            ("openai-chat", fakeserver.chat_problems),
            ("openai-responses", fakeserver.responses_problems),
            ("anthropic", fakeserver.anthropic_problems),
        )
    }
    assert found["openai-chat"] == found["openai-responses"] != []
    assert all(
        p.startswith("Invalid schema for function 'Read': In context=")
        for p in found["openai-chat"]
    )
    assert bool(found["anthropic"]) == (refused == "all")
    with FakeServer([FakeReply(text="ok")] * 3) as server:
        for name, problems in found.items():
            reply = send(
                name,
                render(prompt, name, model=MODEL, max_tokens=1024, blobs=blobs),
                api_key="k",
                base_url=server.base_url(name),
            )
            if problems:
                assert reply.error is not None and reply.error.status == 400
                assert reply.error.message == problems[0]
            else:
                assert reply.error is None


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ("type", "properties", "required", "additionalProperties", "items", "anyOf", "a")
            ),
            inner | st.sampled_from(("object", "array", ["object", "null"])),
            max_size=5,
        )
    ),
    max_leaves=30,
)


@settings(deadline=None, max_examples=300)
@given(schema=_json_values, every=st.booleans())
def test_the_strict_schema_walker_takes_any_json_and_only_names_problems(
    schema: object, every: bool
) -> None:
    problems = providers._wire.strict_schema_problems("t", schema, every_required=every)
    assert all(p.startswith("Invalid schema for function 't': ") for p in problems)
    if not every:  # OpenAI's rules are a superset of what every provider refuses
        assert len(problems) <= len(
            providers._wire.strict_schema_problems("t", schema, every_required=True)
        )


def test_invalid_tool_arguments_reach_anthropic_as_an_object() -> None:
    prompt = Prompt(
        system=(),
        tools=(),
        messages=(
            Message(role="user", parts=(TextPart(text="q"),)),
            Message(role="assistant", parts=(ToolCall(id="c1", name="Bash", arguments="{bad"),)),
            Message(
                role="tool",
                parts=(TextPart(text="bad arguments"),),
                tool_call_id="c1",
                name="Bash",
                is_error=True,
            ),
        ),
    )
    body = render_body(prompt, "anthropic", model=MODEL, max_tokens=10)
    assert body["messages"][1]["content"][0]["input"] == {"_raw_arguments": "{bad"}


def test_blob_images_are_sent_as_base64_and_need_a_blob_reader() -> None:
    log = turnlog.open(":memory:")
    ref = log.put_blob(b"\x89PNG-bytes", "image/png")
    image = ImagePart(media_type="image/png", blob=ref)
    prompt = Prompt(
        system=(), tools=(), messages=(Message(role="user", parts=(TextPart(text="see"), image)),)
    )
    with pytest.raises(RenderError, match=r"blobs=log\.blob"):
        render(prompt, "anthropic", model=MODEL, max_tokens=10)
    data = base64.b64encode(b"\x89PNG-bytes").decode()
    body = render_body(prompt, "anthropic", model=MODEL, max_tokens=10, blobs=log.blob)
    assert body["messages"][0]["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": data,
    }
    chat = render_body(prompt, "openai-chat", model=MODEL, max_tokens=10, blobs=log.blob)
    assert chat["messages"][0]["content"][1]["image_url"]["url"] == (
        f"data:image/png;base64,{data}"
    )


def test_arguments_are_checked() -> None:
    prompt = sample_prompt()
    with pytest.raises(RenderError, match="unknown format"):
        render(prompt, "gemini", model=MODEL, max_tokens=10)
    with pytest.raises(RenderError, match="max_tokens"):
        render(prompt, "anthropic", model=MODEL, max_tokens=None)
    with pytest.raises(RenderError, match="model"):
        render(prompt, "openai-chat", model="", max_tokens=10)
    with pytest.raises(RenderError, match="replace a rendered field"):
        render(prompt, "openai-chat", model=MODEL, max_tokens=10, extra={"messages": []})
    body = render_body(
        prompt,
        "openai-chat",
        model=MODEL,
        max_tokens=None,
        extra={"stream": True, "temperature": 0},
    )
    assert body["stream"] is True and "max_completion_tokens" not in body
    broken = Prompt(
        system=(),
        tools=(),
        messages=(Message(role="tool", parts=(TextPart(text="x"),), tool_call_id="nobody"),),
    )
    with pytest.raises(RenderError, match="malformed"):
        render(broken, "openai-chat", model=MODEL, max_tokens=10)
    bad_schema = Prompt(system=(), tools=(ToolSpec(name="T", parameters="[1]"),), messages=())
    with pytest.raises(RenderError, match="JSON object"):
        render(bad_schema, "anthropic", model=MODEL, max_tokens=10)
    assert isinstance(RenderError("x"), turnlog.KernelError)


def test_rendering_is_deterministic_and_canonical() -> None:
    first = {name: render(sample_prompt(), name, model=MODEL, max_tokens=64) for name in PROVIDERS}
    again = {name: render(sample_prompt(), name, model=MODEL, max_tokens=64) for name in PROVIDERS}
    assert first == again
    for data in first.values():
        value = json.loads(data)
        assert (
            data
            == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        )


# -- record and replay -------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_a_recorded_rendering_replays_and_a_different_renderer_is_caught(name: str) -> None:
    log = turnlog.open(":memory:")
    log.append(
        "s", [SystemSectionSet(name="base", text="Be brief."), UserMessageAdded(text="hello")]
    )
    packer = Packer(log)
    replayer = Replayer(packer)
    render_a = renderer(name, model="model-a", max_tokens=100)
    recorded = replayer.record("s", format=name, render=render_a, model="model-a")
    assert recorded.rendered == render_a(recorded.packed.prompt)
    request = body_of(log.get("s", recorded.request_seq), RequestIssued)
    assert request.format == name and request.rendered_hash
    assert replayer.replay("s", recorded.request_seq, render=render_a).ok
    render_b = renderer(name, model="model-b", max_tokens=100)
    result = replayer.replay("s", recorded.request_seq, render=render_b)
    assert not result.ok
    assert f"the {name} rendering differs" in result.difference


# -- calls without recorded tools (sessions imported from transcripts) -------------------------
def _imported_session(log: turnlog.Log) -> None:
    """Calls and results but no ToolsSet, as an importer writes them; one tool name the
    Messages API would refuse as a definition name."""
    log.append(
        "s",
        [
            UserMessageAdded(text="fix it"),
            AssistantMessageAdded(
                parts=(
                    TextPart(text="looking"),
                    ToolCall(id="toolu_1", name="Read", arguments='{"path":"a.py"}'),
                    ToolCall(id="toolu_2", name="mcp.files/list", arguments="{}"),
                )
            ),
            ToolResultAdded(call_id="toolu_1", tool_name="Read", output="print(1)"),
            ToolResultAdded(call_id="toolu_2", tool_name="mcp.files/list", output="a.py"),
            AssistantMessageAdded(
                parts=(ToolCall(id="toolu_3", name="Read", arguments='{"path":"b.py"}'),)
            ),
            ToolResultAdded(call_id="toolu_3", tool_name="Read", output="print(2)"),
        ],
    )


def test_anthropic_derives_tool_definitions_for_calls_when_none_were_recorded() -> None:
    log = turnlog.open(":memory:")
    _imported_session(log)
    prompt = Packer(log).pack("s").prompt
    assert prompt.tools == ()
    body = render_body(prompt, "anthropic", model=MODEL, max_tokens=100)
    assert anthropic_problems(body) == []
    hashed = "tool_" + blake3.blake3(b"mcp.files/list").hexdigest()[:32]
    assert [t["name"] for t in body["tools"]] == ["Read", hashed]
    assert body["tools"][0]["input_schema"] == {
        "type": "object",
        "properties": {},
        "additionalProperties": True,
    }
    assert "derived from the calls" in body["tools"][0]["description"]
    uses = [b["name"] for m in body["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert uses == ["Read", hashed, "Read"]
    check(body, SDK_TYPES["anthropic"])
    # Render version 1 (what requests recorded before versions hold) keeps the old bytes,
    # which the API refuses.
    old = render_body(prompt, "anthropic", model=MODEL, max_tokens=100, version=1)
    assert "tools" not in old
    assert TOOLS_REQUIRED_MESSAGE in anthropic_problems(old)
    # The OpenAI formats take calls without definitions: nothing is derived for them.
    for name in ("openai-chat", "openai-responses"):
        assert "tools" not in render_body(prompt, name, model=MODEL, max_tokens=100)
    # A recorded ToolsSet is sent as it is, with no derived definition beside it.
    log.append("s", ToolsSet(tools=(ToolSpec(name="Read"),)))
    recorded = render_body(Packer(log).pack("s").prompt, "anthropic", model=MODEL, max_tokens=100)
    assert [t["name"] for t in recorded["tools"]] == ["Read"]


def test_the_fake_server_refuses_tool_blocks_without_tools_as_the_messages_api_does() -> None:
    log = turnlog.open(":memory:")
    _imported_session(log)
    prompt = Packer(log).pack("s").prompt
    with FakeServer([FakeReply(text="done")]) as server:
        refused = send(
            "anthropic",
            render(prompt, "anthropic", model=MODEL, max_tokens=100, version=1),
            api_key="k",
            base_url=server.base_url("anthropic"),
        )
        assert refused.error is not None and refused.error.status == 400
        assert refused.error.message == TOOLS_REQUIRED_MESSAGE
        assert json.loads(server.requests[-1].body)["messages"]  # recorded, then refused
        accepted = send(
            "anthropic",
            render(prompt, "anthropic", model=MODEL, max_tokens=100),
            api_key="k",
            base_url=server.base_url("anthropic"),
        )
        assert accepted.error is None and accepted.message is not None
        # the refusal used no scripted reply
        assert accepted.message.parts == (TextPart(text="done"),)


def test_a_request_records_its_render_version_and_replays_with_it() -> None:
    log = turnlog.open(":memory:")
    _imported_session(log)
    replayer = Replayer(Packer(log))
    new = replayer.record(
        "s",
        format="anthropic",
        model=MODEL,
        render=renderer("anthropic", model=MODEL, max_tokens=100),
        render_args=render_args(max_tokens=100),
    )
    request = body_of(log.get("s", new.request_seq), RequestIssued)
    assert json.loads(request.render_args) == {"max_tokens": 100, "version": RENDER_LATEST}
    assert anthropic_problems(json.loads(new.rendered)) == []
    assert replayer.replay("s", new.request_seq, render=renderer_for(request)).ok
    assert derived_tool_names(request, new.packed.prompt) == ("Read", "mcp.files/list")
    # A record without a version (all that turnlog 0.2.0 wrote) replays with version 1.
    old = replayer.record(
        "s",
        format="anthropic",
        model=MODEL,
        render=renderer("anthropic", model=MODEL, max_tokens=100, version=1),
        render_args='{"max_tokens":100}',
    )
    old_request = body_of(log.get("s", old.request_seq), RequestIssued)
    assert "tools" not in json.loads(old.rendered)
    assert replayer.replay("s", old.request_seq, render=renderer_for(old_request)).ok
    assert derived_tool_names(old_request, old.packed.prompt) == ()
    with pytest.raises(RenderError, match="version must be an int from 1 to"):
        renderer("anthropic", model=MODEL, max_tokens=100, version=RENDER_LATEST + 1)


CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
)
_TRANSCRIPTS = (
    sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name != "SOURCES.md")
    if CORPUS.is_dir()
    else []
)


@pytest.mark.skipif(not _TRANSCRIPTS, reason=f"no transcript corpus at {CORPUS}")
@pytest.mark.parametrize("path", _TRANSCRIPTS, ids=[p.name[:60] for p in _TRANSCRIPTS])
def test_every_corpus_transcript_renders_anthropic_bodies_the_api_accepts(path: Path) -> None:
    # Imported sessions record calls without a ToolsSet; every session of the file, at
    # every budget, must render to a body the Messages API accepts.
    log = turnlog.open(":memory:")
    summary = import_file(log, path, skip_bad=True)
    packer = Packer(log)
    for session in summary.sessions:
        for window in (8_000, 32_000, 128_000):
            policy = Policy(context_window=window, output_reserve=window // 8)
            try:
                prompt = packer.pack(session, policy=policy).prompt
            except BudgetExceededError:
                continue
            body = render_body(prompt, "anthropic", model=MODEL, max_tokens=policy.output_reserve)
            assert anthropic_problems(body) == [], (session, window)

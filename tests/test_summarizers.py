"""Model summarizers end to end against the local fake server (no other network)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
import turnlog
from turnlog import Compactor, Policy
from turnlog.adapters.providers import (
    ANTHROPIC_VERSION,
    AnthropicSummarizer,
    EmptySummaryError,
    OpenAISummarizer,
    ProviderError,
    ProviderTimeoutError,
    send,
)
from turnlog.adapters.providers.fakeserver import (
    FakeReply,
    FakeServer,
    http_error,
    malformed,
    overflow_error,
)
from turnlog.compaction import Summarizer, SummaryRequest
from turnlog.errors import DecodeError
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    CompactionFailed,
    SystemSectionSet,
    TextPart,
    ToolCall,
    UserMessageAdded,
)
from turnlog.packing import Message

SUMMARY = "## Goal\n- Fix the parser\n\n## Accomplished\n- Edited src/parser.py"


def request(level: int = 0) -> SummaryRequest:
    """A summary request over a short transcript (or two child summaries)."""
    if level:
        return SummaryRequest(
            session="s",
            first_pos=0,
            last_pos=9,
            level=1,
            max_tokens=300,
            children=("## Goal\n- one", "## Goal\n- two"),
            reason="rollup",
        )
    return SummaryRequest(
        session="s",
        first_pos=0,
        last_pos=3,
        level=0,
        max_tokens=256,
        messages=(
            Message(role="user", parts=(TextPart(text="Fix the parser."),)),
            Message(
                role="assistant",
                parts=(
                    TextPart(text="Reading it."),
                    ToolCall(id="c1", name="Read", arguments='{"file_path":"src/parser.py"}'),
                ),
            ),
            Message(
                role="tool",
                parts=(TextPart(text="def parse(): ..."),),
                tool_call_id="c1",
                name="Read",
            ),
        ),
    )


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


def openai_summarizer(server: FakeServer, **options: object) -> OpenAISummarizer:
    return OpenAISummarizer(
        "cheap-model",
        api_key="sk-test",
        base_url=server.base_url("openai-chat"),
        **options,  # type: ignore[arg-type]
    )  # type: ignore[arg-type]


def anthropic_summarizer(server: FakeServer, **options: object) -> AnthropicSummarizer:
    return AnthropicSummarizer(
        "claude-cheap",
        api_key="ak-test",
        base_url=server.base_url("anthropic"),
        **options,  # type: ignore[arg-type]
    )  # type: ignore[arg-type]


# -- success -----------------------------------------------------------------------------------
def test_openai_summarizer_sends_instructions_and_transcript(server: FakeServer) -> None:
    server.script(FakeReply(text=SUMMARY))
    summarizer = openai_summarizer(server)
    assert isinstance(summarizer, Summarizer)
    assert summarizer.id == "openai:cheap-model"
    req = request()
    summary = summarizer.summarize(req)
    assert (summary.text, summary.summarizer, summary.model, summary.prompt_hash) == (
        SUMMARY,
        "openai:cheap-model",
        "cheap-model",
        req.prompt_hash(),
    )
    [received] = server.requests
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == "Bearer sk-test"
    assert received.json() == {
        "model": "cheap-model",
        "max_tokens": 256,
        "messages": [
            {"role": "system", "content": req.instructions()},
            {"role": "user", "content": req.source_text()},
        ],
    }


def test_openai_summarizer_options(server: FakeServer) -> None:
    server.script(FakeReply(text=SUMMARY))
    summarizer = openai_summarizer(
        server, max_tokens_field="max_completion_tokens", temperature=0.0, headers={"x-team": "a"}
    )
    summarizer.summarize(request(level=1))
    [received] = server.requests
    body = received.json()
    assert body["max_completion_tokens"] == 300 and "max_tokens" not in body
    assert body["temperature"] == 0.0
    assert received.headers["x-team"] == "a"
    assert '<summary part="2">' in body["messages"][1]["content"]  # type: ignore[index]
    with pytest.raises(ValueError, match="max_tokens_field"):
        openai_summarizer(server, max_tokens_field="tokens")
    with pytest.raises(ValueError, match="timeout"):
        openai_summarizer(server, timeout=0)
    with pytest.raises(ValueError, match="model"):
        OpenAISummarizer("", api_key="k")


def test_anthropic_summarizer_sends_the_messages_wire_format(server: FakeServer) -> None:
    server.script(FakeReply(text=SUMMARY, reasoning="thinking first"))
    summarizer = anthropic_summarizer(server)
    assert summarizer.id == "anthropic:claude-cheap"
    req = request()
    summary = summarizer.summarize(req)
    assert (summary.text, summary.summarizer, summary.model, summary.prompt_hash) == (
        SUMMARY,
        "anthropic:claude-cheap",
        "claude-cheap",
        req.prompt_hash(),
    )
    [received] = server.requests
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == "ak-test"
    assert received.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert received.json() == {
        "model": "claude-cheap",
        "max_tokens": 256,
        "system": [{"type": "text", "text": req.instructions()}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": req.source_text()}]}],
    }


def test_summarizer_bodies_have_the_sdks_request_shapes() -> None:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from sdkcheck import check

    req = request()
    check(
        json.loads(OpenAISummarizer("m", api_key="k").body(req)), CompletionCreateParamsNonStreaming
    )
    check(
        json.loads(AnthropicSummarizer("m", api_key="k").body(req)), MessageCreateParamsNonStreaming
    )


# -- failures ----------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [openai_summarizer, anthropic_summarizer])
def test_http_errors_raise_provider_error(server: FakeServer, make: object) -> None:
    summarizer = make(server)  # type: ignore[operator]
    server.script(http_error(500, "upstream exploded"))
    with pytest.raises(ProviderError, match="HTTP 500") as caught:
        summarizer.summarize(request())
    assert caught.value.error.status == 500 and not caught.value.error.overflow
    assert isinstance(caught.value, turnlog.KernelError)
    server.script(overflow_error())
    with pytest.raises(ProviderError, match="context overflow") as caught:
        summarizer.summarize(request())
    assert caught.value.error.overflow and caught.value.error.status == 400


@pytest.mark.parametrize("make", [openai_summarizer, anthropic_summarizer])
def test_a_slow_endpoint_raises_a_timeout(server: FakeServer, make: object) -> None:
    summarizer = make(server, timeout=0.3)  # type: ignore[operator]
    server.script(FakeReply(text="late", delay=3.0))
    started = time.monotonic()
    with pytest.raises(ProviderTimeoutError) as caught:
        summarizer.summarize(request())
    assert time.monotonic() - started < 2.5
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.error.error_type == "timeout"


@pytest.mark.parametrize("make", [openai_summarizer, anthropic_summarizer])
def test_malformed_answers_raise_decode_error(server: FakeServer, make: object) -> None:
    summarizer = make(server)  # type: ignore[operator]
    server.script(malformed(b'{"id": "x", '))
    with pytest.raises(DecodeError):
        summarizer.summarize(request())
    server.script(malformed(b'{"unexpected": true}'))
    with pytest.raises(DecodeError):
        summarizer.summarize(request())
    server.script(FakeReply(text="   "))
    with pytest.raises(EmptySummaryError, match="no text"):
        summarizer.summarize(request())


@pytest.mark.parametrize("make", [openai_summarizer, anthropic_summarizer])
def test_a_summarizer_given_a_client_keeps_its_connection(make: object) -> None:
    with (
        FakeServer([FakeReply(text=SUMMARY)] * 3, keep_alive=True) as server,
        httpx.Client() as client,
    ):
        summarizer = make(server, client=client)  # type: ignore[operator]
        for _ in range(3):
            assert summarizer.summarize(request()).text == SUMMARY
        assert server.connections == 1 and len(server.requests) == 3


def test_an_unreachable_endpoint_raises_provider_error() -> None:
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    summarizer = OpenAISummarizer(
        "m", api_key="k", base_url=f"http://127.0.0.1:{port}/v1", timeout=2
    )
    with pytest.raises(ProviderError, match="cannot reach") as caught:
        summarizer.summarize(request())
    assert not isinstance(caught.value, TimeoutError)


def test_send_returns_http_errors_as_replies(server: FakeServer) -> None:
    server.script(overflow_error())
    body = b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}'
    reply = send(
        "anthropic", body, api_key="k", base_url=server.base_url("anthropic"), request_seq=4
    )
    assert reply.error is not None and reply.error.overflow and reply.error.request_seq == 4
    server.script(FakeReply(text="hi"))
    reply = send(
        "openai-responses",
        b'{"model":"m","input":"x","stream":true}',
        api_key="k",
        base_url=server.base_url("openai-responses"),
        request_seq=5,
    )
    assert reply.message is not None and reply.message.parts == (TextPart(text="hi"),)
    assert reply.response is not None and reply.response.request_seq == 5


# -- with the compactor ------------------------------------------------------------------------
def long_session(log: turnlog.Log) -> None:
    log.append("s", SystemSectionSet(name="base", text="You are a careful engineer."))
    for i in range(14):
        log.append(
            "s",
            [
                UserMessageAdded(text=f"Step {i}: please look at module_{i}.py and fix it. " * 6),
                AssistantMessageAdded(parts=(TextPart(text=f"Module {i} is fixed. " * 12),)),
            ],
        )


def test_the_compactor_commits_a_model_summary(server: FakeServer) -> None:
    log = turnlog.open(":memory:")
    long_session(log)
    server.script(*[FakeReply(text=SUMMARY)] * 10)
    compactor = Compactor(log, summarizer=openai_summarizer(server), timeout=10)
    policy = Policy(keep_recent_turns=1, keep_recent_messages=2, segment_target_tokens=100_000)
    outcome = compactor.compact("s", policy=policy, reason="manual")
    assert outcome.status == "committed", outcome
    commits = [e.body for e in log.read("s") if isinstance(e.body, CompactionCommitted)]
    assert commits and commits[0].summarizer == "openai:cheap-model"
    assert commits[0].model == "cheap-model" and commits[0].summary == SUMMARY
    received = server.requests[0].json()
    assert received["max_tokens"] == policy.summary_max_tokens


def test_the_compactor_records_a_failing_summarizer(server: FakeServer) -> None:
    log = turnlog.open(":memory:")
    long_session(log)
    server.script(overflow_error())
    compactor = Compactor(log, summarizer=anthropic_summarizer(server), timeout=10)
    outcome = compactor.compact(
        "s", policy=Policy(keep_recent_turns=1, keep_recent_messages=2), reason="manual"
    )
    assert outcome.status == "failed"
    failures = [e.body for e in log.read("s") if isinstance(e.body, CompactionFailed)]
    assert failures and failures[0].summarizer == "anthropic:claude-cheap"
    assert "context overflow" in failures[0].error


def test_a_model_summarizer_gets_a_large_output_in_parts_within_its_window(
    server: FakeServer,
) -> None:
    from turnlog.events import CompactionPartSummarized, ToolResultAdded
    from turnlog.packing import get_counter

    lines = [f"{i:06d} INFO processed row {i} of batch {i % 97} ok" for i in range(7_000)]
    lines[3_500] = "003500 ERROR row 3500: SIDEHILL checksum mismatch"
    output = "\n".join(lines)
    log = turnlog.open(":memory:")
    log.append("s", UserMessageAdded(text="import the ledger"))
    log.append(
        "s",
        AssistantMessageAdded(
            parts=(ToolCall(id="b0", name="Bash", arguments='{"command": "import"}'),)
        ),
    )
    log.append("s", ToolResultAdded(call_id="b0", tool_name="Bash", output=output, exit_code=1))
    for t in range(3):
        log.append("s", UserMessageAdded(text=f"next step {t}"))
        log.append("s", AssistantMessageAdded(parts=(TextPart(text=f"done {t}"),)))
    summarizer = openai_summarizer(server, window=16_000)
    assert summarizer.window == 16_000
    assert openai_summarizer(server).window == 32_000  # not in the model table
    policy = Policy(
        context_window=32_000,
        output_reserve=2_000,
        summary_max_tokens=500,
        keep_recent_turns=1,
        keep_recent_messages=2,
    )
    outcome = Compactor(log, summarizer=summarizer).compact("s", policy=policy)
    assert outcome.status == "committed", outcome
    counter = get_counter("cl100k_base")
    bodies = [r.json() for r in server.requests]
    assert len(bodies) == outcome.parts + 1 > 2
    texts: list[str] = []
    for body in bodies:
        messages = body["messages"]
        assert isinstance(messages, list)
        system, user = (str(m["content"]) for m in messages)
        assert counter.count(system) + counter.count(user) + int(str(body["max_tokens"])) <= 16_000
        texts.append(user)
    assert sum("SIDEHILL" in t for t in texts) == 1
    parts = []
    for event in log.read("s", kinds=["compaction_part"]):
        assert isinstance(event.body, CompactionPartSummarized)
        assert event.body.summarizer == summarizer.id
        parts.append(event.body)
    # the merge request reads the part summaries, as they are in the log
    merge = texts[-1]
    assert all(
        f'<summary part="{i + 1}">\n{p.summary}\n</summary>' in merge for i, p in enumerate(parts)
    )
    [committed] = [e.body for e in log.read("s", kinds=["compaction"])]
    assert isinstance(committed, CompactionCommitted)
    assert committed.tokens_before >= counter.count(output)
    with pytest.raises(ValueError, match="window"):
        openai_summarizer(server, window=10)

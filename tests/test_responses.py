"""Reply parsing: provider bodies, streams and errors -> turnlog events.

The recorded-shape fixtures below follow the providers' documented examples;
each is first validated with the official SDK's response model, so a fixture
that drifted from the real shape fails here rather than hiding a parser bug.
The fake server's answers are validated the same way, event by event.
"""

from __future__ import annotations

import copy
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import msgspec
import openai
import pydantic
import pytest
import turnlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnlog.adapters.providers import (
    OVERFLOW_PATTERNS,
    PROVIDERS,
    Reply,
    is_overflow,
    parse_error,
    parse_http,
    parse_response,
    parse_stream,
)
from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer, http_error, overflow_error
from turnlog.errors import DecodeError
from turnlog.events import (
    AssistantMessageAdded,
    Part,
    ProviderErrorReceived,
    ReasoningPart,
    ResponseReceived,
    TextPart,
    ToolCall,
    Usage,
)

# -- recorded-shape fixtures -------------------------------------------------------------------
CHAT_BODY: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Checking both cities.",
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_abc123",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{\n"location": "Boston, MA"\n}',
                        },
                    },
                    {
                        "id": "call_def456",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                    },
                ],
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 1117,
        "completion_tokens": 46,
        "total_tokens": 1163,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": "fp_fc9f1d7035",
}


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    body = {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }
    return "data: " + json.dumps(body) + "\n\n"


CHAT_STREAM = "".join(
    [
        _chunk({"role": "assistant", "content": "", "refusal": None}),
        _chunk({"content": "Checking "}),
        _chunk({"content": "both."}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_abc123",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"location"'}}]}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_def456",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "Paris"}'}}]}),
        _chunk({}, "tool_calls"),
        "data: "
        + json.dumps(
            {
                "id": "chatcmpl-123",
                "object": "chat.completion.chunk",
                "created": 1694268190,
                "model": "gpt-4o-mini",
                "choices": [],
                "usage": {
                    "prompt_tokens": 80,
                    "completion_tokens": 30,
                    "total_tokens": 110,
                    "prompt_tokens_details": {"cached_tokens": 64},
                    "completion_tokens_details": {"reasoning_tokens": 12},
                },
            }
        )
        + "\n\n",
        "data: [DONE]\n\n",
    ]
)

RESPONSES_BODY: dict[str, Any] = {
    "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
    "object": "response",
    "created_at": 1741476542,
    "status": "completed",
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "max_output_tokens": None,
    "model": "o4-mini-2025-04-16",
    "output": [
        {
            "type": "reasoning",
            "id": "rs_6820f383d7c08191846711c5df8233bc",
            "summary": [
                {"type": "summary_text", "text": "**Checking the weather**"},
                {"type": "summary_text", "text": "Paris first."},
            ],
            "encrypted_content": "gAAAAABoIPOEXlHhq3cPf0y5rW==",
        },
        {
            "type": "message",
            "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Looking it up.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_12345xyz",
            "call_id": "call_12345xyz",
            "name": "get_weather",
            "arguments": '{"location":"Paris, France"}',
            "status": "completed",
        },
    ],
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_p": 1.0,
    "truncation": "disabled",
    "usage": {
        "input_tokens": 81,
        "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 17},
        "output_tokens": 1035,
        "output_tokens_details": {"reasoning_tokens": 832},
        "total_tokens": 1116,
    },
    "user": None,
    "metadata": {},
}


def _sse(kind: str, **fields: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n"


def _responses_stream() -> str:
    final = copy.deepcopy(RESPONSES_BODY)
    started = {
        **copy.deepcopy(RESPONSES_BODY),
        "status": "in_progress",
        "output": [],
        "usage": None,
    }
    items = final["output"]
    events = [
        _sse("response.created", sequence_number=0, response=started),
        _sse("response.in_progress", sequence_number=1, response=started),
    ]
    for i, item in enumerate(items):
        events.append(
            _sse(
                "response.output_item.added", sequence_number=len(events), output_index=i, item=item
            )
        )
        events.append(
            _sse(
                "response.output_item.done", sequence_number=len(events), output_index=i, item=item
            )
        )
    events.append(_sse("response.completed", sequence_number=len(events), response=final))
    return "".join(events)


RESPONSES_STREAM = _responses_stream()

ANTHROPIC_BODY: dict[str, Any] = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {
            "type": "thinking",
            "thinking": "The user wants the weather.",
            "signature": "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/Uv",
        },
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"},
        {"type": "text", "text": "I'll check the weather."},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA", "unit": "celsius"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 472,
        "cache_creation_input_tokens": 1200,
        "cache_read_input_tokens": 3000,
        "output_tokens": 91,
    },
}

ANTHROPIC_STREAM = "".join(
    [
        _sse(
            "message_start",
            message={
                "id": "msg_014p7gG3wDgGV9EUtLvnow3U",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": "claude-sonnet-4-5-20250929",
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 472,
                    "output_tokens": 2,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 2048,
                },
            },
        ),
        _sse(
            "content_block_start",
            index=0,
            content_block={"type": "thinking", "thinking": "", "signature": ""},
        ),
        _sse(
            "content_block_delta",
            index=0,
            delta={"type": "thinking_delta", "thinking": "Let me solve this "},
        ),
        _sse(
            "content_block_delta",
            index=0,
            delta={"type": "thinking_delta", "thinking": "step by step."},
        ),
        _sse(
            "content_block_delta",
            index=0,
            delta={"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
        ),
        _sse("content_block_stop", index=0),
        _sse("ping"),
        _sse("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        _sse("content_block_delta", index=1, delta={"type": "text_delta", "text": "Okay, "}),
        _sse("content_block_delta", index=1, delta={"type": "text_delta", "text": "checking."}),
        _sse("content_block_stop", index=1),
        _sse(
            "content_block_start",
            index=2,
            content_block={
                "type": "tool_use",
                "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "name": "get_weather",
                "input": {},
            },
        ),
        _sse(
            "content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": ""}
        ),
        _sse(
            "content_block_delta",
            index=2,
            delta={"type": "input_json_delta", "partial_json": '{"location": "San Fra'},
        ),
        _sse(
            "content_block_delta",
            index=2,
            delta={"type": "input_json_delta", "partial_json": 'ncisco, CA"}'},
        ),
        _sse("content_block_stop", index=2),
        _sse(
            "content_block_start",
            index=3,
            content_block={"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {}},
        ),
        _sse("content_block_stop", index=3),
        _sse(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 89},
        ),
        _sse("message_stop"),
    ]
)


def _events(stream: str) -> list[dict[str, Any]]:
    out = []
    for block in stream.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


# -- the fixtures are real shapes --------------------------------------------------------------
STREAM_EVENT: dict[str, pydantic.TypeAdapter[Any]] = {
    "anthropic": pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent),
    "openai-responses": pydantic.TypeAdapter(openai.types.responses.ResponseStreamEvent),
}


def validate_body(name: str, body: dict[str, Any]) -> None:
    """Validate a complete reply with the official SDK's response model."""
    if name == "openai-chat":
        openai.types.chat.ChatCompletion.model_validate(body)
    elif name == "openai-responses":
        openai.types.responses.Response.model_validate(body)
    else:
        anthropic.types.Message.model_validate(body)


def validate_event(name: str, event: dict[str, Any]) -> None:
    """Validate one stream event with the official SDK's event model."""
    if name == "openai-chat":
        openai.types.chat.ChatCompletionChunk.model_validate(event)
    elif name == "anthropic" and event["type"] in ("ping", "error"):
        return  # the SDK reads these two outside its event union
    else:
        STREAM_EVENT[name].validate_python(event)


@pytest.mark.parametrize(
    ("name", "body", "stream"),
    [
        ("openai-chat", CHAT_BODY, CHAT_STREAM),
        ("openai-responses", RESPONSES_BODY, RESPONSES_STREAM),
        ("anthropic", ANTHROPIC_BODY, ANTHROPIC_STREAM),
    ],
)
def test_the_fixtures_have_the_sdks_shapes(name: str, body: dict[str, Any], stream: str) -> None:
    validate_body(name, body)
    for event in _events(stream):
        validate_event(name, event)


# -- complete bodies ---------------------------------------------------------------------------
def test_chat_body_becomes_a_message_with_parallel_calls_and_usage() -> None:
    reply = parse_response("openai-chat", json.dumps(CHAT_BODY).encode(), request_seq=7)
    assert reply.message == AssistantMessageAdded(
        parts=(
            TextPart(text="Checking both cities."),
            ToolCall(
                id="call_abc123", name="get_weather", arguments='{\n"location": "Boston, MA"\n}'
            ),
            ToolCall(id="call_def456", name="get_weather", arguments='{"location": "Paris"}'),
        ),
        model="gpt-4o-2024-08-06",
        response_id="chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    )
    assert reply.response == ResponseReceived(
        request_seq=7,
        usage=Usage(input_tokens=1117, output_tokens=46, cache_read_tokens=1024),
        stop_reason="tool_calls",
        model="gpt-4o-2024-08-06",
        response_id="chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    )
    assert reply.bodies() == (reply.message, reply.response)


def test_chat_reasoning_content_of_compatible_servers_is_kept() -> None:
    body = copy.deepcopy(CHAT_BODY)
    body["choices"][0]["message"].update(reasoning_content="Think.", tool_calls=None)
    body["usage"] = {"prompt_tokens": 10, "completion_tokens": 3, "prompt_cache_hit_tokens": 8}
    reply = parse_response("openai-chat", body)
    assert reply.message is not None
    assert reply.message.parts == (
        ReasoningPart(text="Think.", provider="openai-chat"),
        TextPart(text="Checking both cities."),
    )
    assert reply.response is not None and reply.response.usage.cache_read_tokens == 8


def test_responses_body_keeps_reasoning_id_and_encrypted_content() -> None:
    reply = parse_response("openai-responses", json.dumps(RESPONSES_BODY))
    assert reply.message is not None
    assert reply.message.parts == (
        ReasoningPart(
            text="**Checking the weather**\n\nParis first.",
            opaque="gAAAAABoIPOEXlHhq3cPf0y5rW==",
            provider="openai",
            id="rs_6820f383d7c08191846711c5df8233bc",
        ),
        TextPart(text="Looking it up."),
        ToolCall(id="call_12345xyz", name="get_weather", arguments='{"location":"Paris, France"}'),
    )
    assert reply.response is not None
    assert reply.response.usage == Usage(
        input_tokens=81,
        output_tokens=1035,
        cache_read_tokens=64,
        cache_write_tokens=17,
        reasoning_tokens=832,
    )
    assert reply.response.stop_reason == "completed"
    incomplete = {
        **RESPONSES_BODY,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    stopped = parse_response("openai-responses", incomplete).response
    assert stopped is not None and stopped.stop_reason == "max_output_tokens"


def test_anthropic_body_keeps_signatures_and_counts_the_cache_in_the_input() -> None:
    reply = parse_response("anthropic", ANTHROPIC_BODY)
    assert reply.message is not None
    assert reply.message.parts == (
        ReasoningPart(
            text="The user wants the weather.",
            provider="anthropic",
            opaque=ANTHROPIC_BODY["content"][0]["signature"],
        ),
        ReasoningPart(opaque=ANTHROPIC_BODY["content"][1]["data"], provider="anthropic-redacted"),
        TextPart(text="I'll check the weather."),
        ToolCall(
            id="toolu_01A09q90qw90lq917835lq9",
            name="get_weather",
            arguments='{"location":"San Francisco, CA","unit":"celsius"}',
        ),
    )
    assert reply.response is not None
    assert reply.response.usage == Usage(
        input_tokens=472 + 1200 + 3000,
        output_tokens=91,
        cache_read_tokens=3000,
        cache_write_tokens=1200,
    )
    assert reply.response.stop_reason == "tool_use"


def test_a_reply_without_content_has_no_message() -> None:
    body = {**ANTHROPIC_BODY, "content": [], "stop_reason": "max_tokens"}
    reply = parse_response("anthropic", body)
    assert reply.message is None and reply.response is not None
    assert reply.bodies() == (reply.response,)


# -- streams -----------------------------------------------------------------------------------
def test_chat_stream_accumulates_text_and_interleaved_calls() -> None:
    reply = parse_stream("openai-chat", CHAT_STREAM.encode())
    assert reply.message is not None
    assert reply.message.parts == (
        TextPart(text="Checking both."),
        ToolCall(id="call_abc123", name="get_weather", arguments='{"location": "Paris"}'),
        ToolCall(id="call_def456", name="get_time", arguments="{}"),
    )
    assert reply.response == ResponseReceived(
        usage=Usage(input_tokens=80, output_tokens=30, cache_read_tokens=64, reasoning_tokens=12),
        stop_reason="tool_calls",
        model="gpt-4o-mini",
        response_id="chatcmpl-123",
    )


def test_streams_may_be_given_as_lines_or_decoded_events() -> None:
    lines = [line for line in CHAT_STREAM.splitlines() if line]
    assert parse_stream("openai-chat", lines) == parse_stream("openai-chat", CHAT_STREAM)
    assert parse_stream("openai-chat", [x.encode() for x in lines]) == parse_stream(
        "openai-chat", CHAT_STREAM
    )
    events: list[Any] = _events(ANTHROPIC_STREAM)
    assert parse_stream("anthropic", events) == parse_stream("anthropic", ANTHROPIC_STREAM)
    crlf = ANTHROPIC_STREAM.replace("\n", "\r\n")
    assert parse_stream("anthropic", crlf) == parse_stream("anthropic", ANTHROPIC_STREAM)


def test_responses_stream_gives_the_completed_response() -> None:
    assert parse_stream("openai-responses", RESPONSES_STREAM) == parse_response(
        "openai-responses", RESPONSES_BODY
    )
    # a terminal event without output: the items of output_item.done are used
    emptied = RESPONSES_STREAM.replace('"output": [{"type": "reasoning"', '"output": [{"x": 1')
    assert emptied != RESPONSES_STREAM
    no_output = RESPONSES_STREAM.rsplit("event: response.completed", 1)[0] + _sse(
        "response.completed", sequence_number=99, response={**RESPONSES_BODY, "output": []}
    )
    assert parse_stream("openai-responses", no_output) == parse_response(
        "openai-responses", RESPONSES_BODY
    )


def test_anthropic_stream_joins_deltas_and_takes_the_final_usage() -> None:
    reply = parse_stream("anthropic", ANTHROPIC_STREAM)
    assert reply.message is not None
    assert reply.message.parts == (
        ReasoningPart(
            text="Let me solve this step by step.",
            opaque="EqQBCgIYAhIM1gbcDa9GJwZA",
            provider="anthropic",
        ),
        TextPart(text="Okay, checking."),
        ToolCall(
            id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            name="get_weather",
            arguments='{"location":"San Francisco, CA"}',
        ),
        ToolCall(id="toolu_02", name="get_time", arguments="{}"),
    )
    assert reply.response == ResponseReceived(
        usage=Usage(input_tokens=472 + 2048, output_tokens=89, cache_read_tokens=2048),
        stop_reason="tool_use",
        model="claude-sonnet-4-5-20250929",
        response_id="msg_014p7gG3wDgGV9EUtLvnow3U",
    )


@pytest.mark.parametrize(
    ("name", "stream", "cut"),
    [
        (
            "openai-chat",
            CHAT_STREAM,
            'data: {"id": "chatcmpl-123", "object": "chat.completion'
            '.chunk", "created": 1694268190, "model": "gpt-4o-mini"'
            ', "system_fingerprint": "fp_44709d6fcb", "choices": '
            '[{"index": 0, "delta": {}',
        ),
        ("openai-responses", RESPONSES_STREAM, "event: response.completed"),
        ("anthropic", ANTHROPIC_STREAM, "event: message_stop"),
    ],
)
def test_a_stream_cut_before_its_end_is_malformed(name: str, stream: str, cut: str) -> None:
    head = stream.split(cut, 1)[0]
    assert head != stream
    with pytest.raises(DecodeError, match="ended before"):
        parse_stream(name, head)


# -- errors and overflow -----------------------------------------------------------------------
OPENAI_OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages "
        "resulted in 130567 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
RESPONSES_OVERFLOW = {
    "error": {
        "message": "Your input exceeds the context window of this model. Please adjust your input "
        "and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
}
ANTHROPIC_OVERFLOW = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210364 tokens > 200000 maximum",
    },
    "request_id": "req_011CSHoEeqs5C35K",
}


@pytest.mark.parametrize(
    ("status", "body", "kind", "code"),
    [
        (400, OPENAI_OVERFLOW, "invalid_request_error", "context_length_exceeded"),
        (400, RESPONSES_OVERFLOW, "invalid_request_error", "context_length_exceeded"),
        (400, ANTHROPIC_OVERFLOW, "invalid_request_error", ""),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, "  # noqa: E501
                    "decrease input length or `max_tokens` and try again",
                },
            },
            "invalid_request_error",
            "",
        ),
        (
            413,
            {
                "type": "error",
                "error": {
                    "type": "request_too_large",
                    "message": "Request exceeds the maximum allowed number of bytes.",
                },
            },
            "request_too_large",
            "",
        ),
        (413, "<html><head><title>413 Request Entity Too Large</title></head></html>", "", ""),
    ],
)
def test_context_overflow_errors_are_recognised(
    status: int, body: Any, kind: str, code: str
) -> None:
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    error = parse_error(status, data, request_seq=3)
    assert error.overflow
    assert (error.status, error.error_type, error.code, error.request_seq) == (
        status,
        kind,
        code,
        3,
    )
    assert error.message
    reply = parse_http("anthropic", status, data, request_seq=3)
    assert reply.error == error and reply.bodies() == (error,)


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 8192 tokens",
        "error code: context_length_exceeded",
        "Input exceeds the context window of this model",
        "Please reduce the length of the messages or completion.",
        "Too many tokens in the request",
        "The request exceeds the token limit of this deployment",
        "prompt is too long: 5 tokens > 4 maximum",
    ],
)
def test_seed_overflow_patterns_are_recognised(message: str) -> None:
    assert any(p in message.lower() for p in OVERFLOW_PATTERNS)
    assert parse_error(400, {"error": {"message": message, "type": "x"}}).overflow
    assert is_overflow(status=500, message=message.upper())


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            429,
            {
                "error": {
                    "message": "Rate limit reached for gpt-4o on tokens per min (TPM): "
                    "Limit 30000, Used 29000, Requested 2000. Too many tokens.",
                    "type": "tokens",
                    "code": "rate_limit_exceeded",
                }
            },
        ),
        (
            429,
            {
                "type": "error",
                "error": {
                    "type": "rate_limit_error",
                    "message": "This request would exceed the token limit",
                },
            },
        ),
        (500, {"error": {"message": "The server had an error", "type": "server_error"}}),
        (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        (
            400,
            {
                "error": {
                    "message": "max_tokens is too large: 100000. This model supports at most "
                    "16384 completion tokens",
                    "type": "invalid_request_error",
                    "code": "invalid_value",
                }
            },
        ),
        (
            401,
            {
                "error": {
                    "message": "Incorrect API key provided",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        ),
    ],
)
def test_other_errors_are_not_overflow(status: int, body: dict[str, Any]) -> None:
    error = parse_error(status, json.dumps(body))
    assert not error.overflow
    assert error.status == status and error.message


def test_odd_error_bodies_are_kept_as_text() -> None:
    assert parse_error(502, b"\xff\xfe bad gateway").message.endswith("bad gateway")
    assert parse_error(500, None).message == ""
    assert parse_error(500, '{"error": "boom"}').message == "boom"
    assert parse_error(500, "[1, 2]").message == "[1,2]"
    assert parse_error(404, {"detail": "Not Found"}).message == "Not Found"
    long = parse_error(500, "x" * 10_000)
    assert len(long.message) == 2000
    surrogate = parse_error(400, '{"error": {"message": "\\ud800 context window", "code": 5}}')
    assert surrogate.overflow and surrogate.code == "5"
    turnlog.open(":memory:").append("s", surrogate)  # fits the event schema


def test_errors_inside_streams() -> None:
    overloaded = _sse("message_start", message=ANTHROPIC_BODY) + _sse(
        "error", error={"type": "overloaded_error", "message": "Overloaded"}
    )
    error = parse_stream("anthropic", overloaded).error
    assert error == ProviderErrorReceived(error_type="overloaded_error", message="Overloaded")
    failed = _sse("response.created", response=RESPONSES_BODY) + _sse(
        "response.failed",
        response={
            **RESPONSES_BODY,
            "status": "failed",
            "error": {"code": "server_error", "message": "Boom."},
        },
    )
    assert parse_stream("openai-responses", failed).error == ProviderErrorReceived(
        code="server_error", message="Boom."
    )
    event = _sse("error", code="context_length_exceeded", message="Too long.", param=None)
    error = parse_stream("openai-responses", event).error
    assert error is not None and error.overflow and error.code == "context_length_exceeded"
    chat = "data: " + json.dumps(OPENAI_OVERFLOW) + "\n\n"
    error = parse_stream("openai-chat", chat).error
    assert error is not None and error.overflow


def test_parse_http_dispatches_on_status_and_shape() -> None:
    assert parse_http("anthropic", 200, json.dumps(ANTHROPIC_BODY)) == parse_response(
        "anthropic", ANTHROPIC_BODY
    )
    assert parse_http("anthropic", 200, ANTHROPIC_STREAM.encode()) == parse_stream(
        "anthropic", ANTHROPIC_STREAM
    )
    assert parse_http("openai-chat", 400, json.dumps(OPENAI_OVERFLOW)).error is not None
    assert parse_response("openai-chat", OPENAI_OVERFLOW).error == parse_error(
        None, OPENAI_OVERFLOW
    )


# -- malformed input: DecodeError and nothing else ---------------------------------------------
@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("openai-chat", b"not json"),
        ("openai-chat", b"\xff"),
        ("openai-chat", b"[]"),
        ("openai-chat", {"id": "x", "choices": []}),
        ("openai-chat", {"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}),
        ("openai-chat", {"choices": [{"message": {"content": 5}}]}),
        ("openai-responses", {"id": "r"}),
        ("openai-responses", {"output": [{"type": "function_call", "name": "f"}]}),
        ("anthropic", {"type": "message", "content": "text"}),
        ("anthropic", {"type": "completion"}),
        ("anthropic", {"content": [{"type": "tool_use", "id": "", "name": "f", "input": {}}]}),
        ("anthropic", {"content": [], "usage": {"input_tokens": -1}}),
        ("anthropic", {"content": [], "id": "x" * 300}),
        ("anthropic", {"content": [{"type": "text", "text": "\ud800"}]}),
        ("gemini", {}),
    ],
)
def test_malformed_bodies_raise_decode_error(name: str, body: Any) -> None:
    with pytest.raises(DecodeError):
        parse_response(name, body)


def test_malformed_streams_raise_decode_error() -> None:
    for name in sorted(PROVIDERS):
        for stream in (
            "data: {not json}\n\n",
            "garbage line\n\n",
            b"\xff",
            5,
            {"a": 1},
            [5],
            "data: [1]\n\n",
        ):
            with pytest.raises(DecodeError):
                parse_stream(name, stream)  # type: ignore[arg-type]
    with pytest.raises(DecodeError, match="not started"):
        parse_stream(
            "anthropic",
            _sse("content_block_delta", index=4, delta={"type": "text_delta", "text": "x"}),
        )


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False),
        st.text(max_size=20),
        st.sampled_from(
            (
                "message",
                "text",
                "tool_use",
                "function_call",
                "error",
                "response.completed",
                "message_stop",
                "thinking",
                "reasoning",
                "[DONE]",
            )
        ),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(
                st.sampled_from(
                    (
                        "type",
                        "id",
                        "content",
                        "choices",
                        "message",
                        "output",
                        "usage",
                        "delta",
                        "index",
                        "text",
                        "input",
                        "error",
                        "tool_calls",
                        "function",
                        "arguments",
                        "name",
                        "call_id",
                        "summary",
                    )
                ),
                inner,
                max_size=5,
            ),
        ),
        max_leaves=20,
    )


FIXTURES = {
    "openai-chat": (CHAT_BODY, CHAT_STREAM),
    "openai-responses": (RESPONSES_BODY, RESPONSES_STREAM),
    "anthropic": (ANTHROPIC_BODY, ANTHROPIC_STREAM),
}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copied = copy.copy(value)
    copied[path[0]] = _replace(value[path[0]], path[1:], new)
    return copied


def _accepts_or_decode_error(fn: Any) -> None:
    try:
        reply = fn()
    except DecodeError:
        return
    assert isinstance(reply, Reply)
    log = turnlog.open(":memory:")
    log.append("s", list(reply.bodies()) or [ResponseReceived()])


FUZZ = settings(
    deadline=None,
    max_examples=max(200, settings().max_examples),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(name=st.sampled_from(sorted(PROVIDERS)), data=st.binary(max_size=200))
def test_arbitrary_bytes_parse_or_raise_decode_error(name: str, data: bytes) -> None:
    _accepts_or_decode_error(lambda: parse_response(name, data))
    _accepts_or_decode_error(lambda: parse_stream(name, data))
    _accepts_or_decode_error(lambda: parse_http(name, 200, data))
    assert isinstance(parse_error(500, data), ProviderErrorReceived)


@FUZZ
@given(name=st.sampled_from(sorted(PROVIDERS)), value=_json_values())
def test_arbitrary_json_parses_or_raises_decode_error(name: str, value: Any) -> None:
    _accepts_or_decode_error(lambda: parse_response(name, json.dumps(value)))
    _accepts_or_decode_error(lambda: parse_stream(name, f"data: {json.dumps(value)}\n\n"))
    error = parse_error(400, json.dumps(value))
    turnlog.open(":memory:").append("s", error)


@FUZZ
@given(name=st.sampled_from(sorted(PROVIDERS)), data=st.data(), new=_json_values())
def test_mutated_replies_parse_or_raise_decode_error(
    name: str, data: st.DataObject, new: Any
) -> None:
    body, stream = FIXTURES[name]
    path = data.draw(st.sampled_from(list(_paths(body))))
    mutated = _replace(body, path, new)
    _accepts_or_decode_error(lambda: parse_response(name, json.dumps(mutated)))
    events = _events(stream)
    index = data.draw(st.integers(0, len(events) - 1))
    event_path = data.draw(st.sampled_from(list(_paths(events[index]))))
    events[index] = _replace(events[index], event_path, new)
    _accepts_or_decode_error(lambda: parse_stream(name, [f"data: {json.dumps(e)}" for e in events]))


def test_parsing_is_deterministic() -> None:
    for name, (body, stream) in FIXTURES.items():
        assert parse_response(name, json.dumps(body)) == parse_response(name, json.dumps(body))
        assert parse_stream(name, stream) == parse_stream(name, stream)


# -- the fake server speaks the real shapes ----------------------------------------------------
REPLIES = [
    FakeReply(text="Hello there, this is a longer answer split into pieces."),
    FakeReply(
        text="Two calls.",
        reasoning="Need both files first.",
        tool_calls=(
            ToolCall(id="call_a1", name="Read", arguments='{"path":"a.py"}'),
            ToolCall(id="call_b2", name="Bash", arguments='{"command":"ls"}'),
        ),
        usage=Usage(
            input_tokens=900,
            output_tokens=40,
            cache_read_tokens=600,
            cache_write_tokens=100,
            reasoning_tokens=20,
        ),
    ),
    FakeReply(tool_calls=(ToolCall(id="call_c3", name="Glob"),)),
    FakeReply(text="cut", stop_reason="max_output_tokens"),
]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


def fetch(server: FakeServer, name: str, body: dict[str, Any]) -> tuple[int, bytes, str]:
    """POST ``body`` to the fake server's endpoint for ``name``: (status, body, type).

    An Anthropic body gets the fields the Messages API requires where it lacks them (the
    fake server refuses what the API refuses)."""
    path = {
        "openai-chat": "/v1/chat/completions",
        "openai-responses": "/v1/responses",
        "anthropic": "/v1/messages",
    }[name]
    if name == "anthropic":
        body = {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **body}
    request = urllib.request.Request(
        server.url + path,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read(), answer.headers["content-type"]
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read(), exc.headers["content-type"]


def _no_item_ids(parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """Parts with reasoning item ids blanked (the fake server numbers its answers)."""
    return tuple(
        msgspec.structs.replace(p, id="") if isinstance(p, ReasoningPart) else p for p in parts
    )


def _expected_parts(reply: FakeReply, name: str) -> tuple[Any, ...]:
    parts: list[Any] = []
    if reply.reasoning:
        parts.append(ReasoningPart)
    if reply.text:
        parts.append(TextPart(text=reply.text))
    parts += list(reply.tool_calls)
    return tuple(parts)


@pytest.mark.parametrize("reply", REPLIES, ids=range(len(REPLIES)))
@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_fake_server_answers_validate_with_the_sdks_and_parse_alike(
    server: FakeServer, name: str, reply: FakeReply
) -> None:
    request = {"model": "m", "max_tokens": 10, "stream_options": {"include_usage": True}}
    server.script(reply)
    status, body, kind = fetch(server, name, request)
    assert (status, kind) == (200, "application/json")
    validate_body(name, json.loads(body))
    whole = parse_response(name, body)
    server.script(reply)
    status, stream, kind = fetch(server, name, {**request, "stream": True})
    assert (status, kind) == (200, "text/event-stream")
    for event in _events(stream.decode()):
        validate_event(name, event)
    streamed = parse_stream(name, stream)
    assert whole.message is not None and streamed.message is not None
    assert _no_item_ids(whole.message.parts) == _no_item_ids(streamed.message.parts)
    expected = _expected_parts(reply, name)
    got = tuple(type(p) if isinstance(p, ReasoningPart) else p for p in whole.message.parts)
    assert got == expected
    assert whole.response is not None and streamed.response is not None
    assert whole.response.usage.output_tokens == streamed.response.usage.output_tokens
    if reply.usage is not None:
        assert whole.response.usage == streamed.response.usage
        reasoning = reply.usage.reasoning_tokens if name != "anthropic" else 0
        assert whole.response.usage == msgspec.structs.replace(
            reply.usage, reasoning_tokens=reasoning
        )


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_fake_server_errors_have_the_providers_shapes(server: FakeServer, name: str) -> None:
    server.script(overflow_error())
    status, body, _ = fetch(server, name, {"model": "m"})
    assert status == 400
    error = parse_http(name, status, body).error
    assert error is not None and error.overflow
    if name == "anthropic":
        assert json.loads(body)["type"] == "error"
    server.script(http_error(529 if name == "anthropic" else 503, "Overloaded"))
    status, body, _ = fetch(server, name, {"model": "m"})
    error = parse_http(name, status, body).error
    assert error is not None and not error.overflow and error.message == "Overloaded"
    server.script(overflow_error(in_stream=True))
    status, body, kind = fetch(server, name, {"model": "m", "stream": True})
    assert (status, kind) == (200, "text/event-stream")
    for event in _events(body.decode()):
        if name != "openai-chat":
            validate_event(name, event)
    error = parse_stream(name, body).error
    assert error is not None and error.overflow


def test_sdk_stream_accumulation_agrees_with_the_parser(server: FakeServer) -> None:
    reply = REPLIES[1]
    client = anthropic.Anthropic(base_url=server.base_url("anthropic"), api_key="k", max_retries=0)
    server.script(reply)
    with client.messages.stream(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "go"}]
    ) as stream:
        final = stream.get_final_message()
    server.script(reply)
    _, raw, _ = fetch(server, "anthropic", {"model": "m", "max_tokens": 50, "stream": True})
    parsed = parse_stream("anthropic", raw)
    assert parsed.message is not None
    sdk_parts: list[Part] = []
    for block in final.content:
        if block.type == "thinking":
            sdk_parts.append(
                ReasoningPart(text=block.thinking, opaque=block.signature, provider="anthropic")
            )
        elif block.type == "text":
            sdk_parts.append(TextPart(text=block.text))
        elif block.type == "tool_use":
            sdk_parts.append(
                ToolCall(
                    id=block.id,
                    name=block.name,
                    arguments=json.dumps(block.input, separators=(",", ":")),
                )
            )
    assert tuple(sdk_parts) == parsed.message.parts
    oai = openai.OpenAI(base_url=server.base_url("openai-chat"), api_key="k", max_retries=0)
    server.script(reply)
    with oai.chat.completions.stream(
        model="m", messages=[{"role": "user", "content": "go"}]
    ) as chat_stream:
        completion = chat_stream.get_final_completion()
    message = completion.choices[0].message
    server.script(reply)
    _, raw, _ = fetch(server, "openai-chat", {"model": "m", "stream": True})
    chat = parse_stream("openai-chat", raw).message
    assert chat is not None
    assert [p for p in chat.parts if isinstance(p, ToolCall)] == [
        ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
        for c in message.tool_calls or []
    ]
    assert message.content == "Two calls."


def test_a_reply_repeating_a_tool_call_id_is_a_decode_error() -> None:
    """Found by fuzzing: the log refuses such a message, so the parser must too."""
    import turnlog
    from turnlog.adapters.providers import parse_response

    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [
            {"type": "tool_use", "id": "toolu_02", "name": "a", "input": {}},
            {"type": "tool_use", "id": "toolu_02", "name": "b", "input": {}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    with pytest.raises(turnlog.errors.DecodeError, match="several tool calls with id 'toolu_02'"):
        parse_response("anthropic", body)


def test_freeform_calls_are_parsed_back_from_chat_and_responses_replies() -> None:
    patch = "*** Begin Patch\n*** Add File: x.py\n+print(1)\n*** End Patch"
    chat = copy.deepcopy(CHAT_BODY)
    chat["choices"][0]["message"]["tool_calls"] = [
        {"id": "call_p", "type": "custom", "custom": {"name": "apply_patch", "input": patch}}
    ]
    openai.types.chat.ChatCompletion.model_validate(chat)  # the SDK's own reply type
    reply = parse_response("openai-chat", chat)
    assert reply.message is not None
    assert reply.message.parts[-1] == ToolCall(
        id="call_p", name="apply_patch", arguments=patch, freeform=True
    )
    responses = copy.deepcopy(RESPONSES_BODY)
    responses["output"] = [
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "call_id": "call_q",
            "name": "apply_patch",
            "input": patch,
            "status": "completed",
        }
    ]
    openai.types.responses.Response.model_validate(responses)
    reply = parse_response("openai-responses", responses)
    assert reply.message is not None
    assert reply.message.parts == (
        ToolCall(id="call_q", name="apply_patch", arguments=patch, freeform=True),
    )


def test_a_streamed_chat_freeform_call_is_joined_and_kept_freeform() -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {
            "id": "cmpl-f",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "fake-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"

    stream = (
        chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_f",
                        "type": "custom",
                        "custom": {"name": "apply_patch", "input": "*** Begin"},
                    }
                ],
            }
        )
        + chunk({"tool_calls": [{"index": 0, "type": "custom", "custom": {"input": " Patch"}}]})
        + chunk({}, "tool_calls")
        + "data: [DONE]\n\n"
    )
    reply = parse_stream("openai-chat", stream)
    assert reply.message is not None
    assert reply.message.parts[-1] == ToolCall(
        id="call_f", name="apply_patch", arguments="*** Begin Patch", freeform=True
    )

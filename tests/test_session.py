"""The orchestrator facade: end to end against the fake server, idempotency, recovery,
threads and processes sharing one session."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pgserver
import pytest
import turnlog
import turnlog._log
import turnlog.adapters
from support import LogFactory, backend_params
from turnlog import Draft, Log, Packer, Policy, Replayer
from turnlog.adapters.providers import ProviderError, RenderError, parse_response, send
from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer, http_error, overflow_error
from turnlog.adapters.session import Answer, Request, Session
from turnlog.errors import AppendConflictError, IdempotencyError, InvalidEventError
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    NotificationAdded,
    ProviderErrorReceived,
    RequestIssued,
    ResponseReceived,
    SystemSectionSet,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)

FORMATS = ("openai-chat", "openai-responses", "anthropic")
POLICY = Policy(context_window=16_000, output_reserve=1_000)
READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
CALC = {"name": "calculate", "input_schema": {"type": "object"}}


def chat_body(
    text: str = "hi", *, tool_calls: list[dict[str, object]] | None = None, ident: str = "cmpl-1"
) -> dict[str, object]:
    """A Chat Completions reply body."""
    message: dict[str, object] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": ident,
        "object": "chat.completion",
        "created": 1,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23},
    }


def chat_stream(text: str) -> bytes:
    """The same reply as an SSE stream."""
    chunk = {
        "id": "cmpl-s",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake-model",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


@pytest.fixture
def log() -> Iterator[Log]:
    with turnlog.open(":memory:") as opened:
        yield opened


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    with FakeServer() as running:
        yield running


def make(log: Log, fmt: str = "openai-chat", **options: object) -> Session:
    return Session(
        log,
        "s1",
        model="fake-model",
        format=fmt,
        max_tokens=512,
        policy=POLICY,
        **options,  # type: ignore[arg-type]
    )  # type: ignore[arg-type]


def exchange(session: Session, server: FakeServer, *replies: FakeReply) -> tuple[Request, Answer]:
    """Prepare, send to the fake server (answering with ``replies``), record."""
    server.script(*replies)
    request = session.prepare()
    reply = send(
        session.format,
        request.body,
        api_key="test",
        base_url=server.base_url(session.format),
        request_seq=request.request_seq,
    )
    return request, session.record(reply)


# -- end to end ----------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_tool_call_loop_runs_end_to_end_in_every_format(fmt: str, stream: bool) -> None:
    log = turnlog.open(":memory:")
    session = make(log, fmt, stream=stream)
    session.system("base", "You are a careful agent.")
    session.tools([READ, CALC])
    session.user("What is in a.txt, and what is 6*7?")
    calls = (
        ToolCall(id="call_a", name="read_file", arguments='{"path": "a.txt"}'),
        ToolCall(id="call_b", name="calculate", arguments='{"expression": "6*7"}'),
    )
    with FakeServer(
        [
            FakeReply(text="Looking.", tool_calls=calls),
            FakeReply(text="a.txt says hello; 6*7 is 42."),
        ]
    ) as fake:
        first, answer = exchange(session, fake)
        assert [(c.id, c.name, json.loads(c.arguments)) for c in answer.tool_calls] == [
            (c.id, c.name, json.loads(c.arguments)) for c in calls
        ]  # (Anthropic re-spaces)
        assert answer.text == "Looking."
        assert not answer.done and answer.request_seq == first.request_seq
        assert [c.id for c in session.open_calls()] == ["call_a", "call_b"]
        session.tool_result("call_a", "hello")
        session.tool_result("call_b", "42")
        second, final = exchange(session, fake)
        received = fake.requests
    assert final.done and final.text == "a.txt says hello; 6*7 is 42."
    assert [r.body for r in received] == [first.body, second.body]  # sent as recorded
    assert (b'"stream":true' in first.body) is stream
    assert b"hello" in second.body and b"42" in second.body
    assert session.open_calls() == ()
    assert [
        e.body.tool_name
        for e in log.read("s1", kinds=["tool_result"])
        if isinstance(e.body, ToolResultAdded)
    ] == ["read_file", "calculate"]
    responses = [e.body for e in log.read("s1", kinds=["response"])]
    assert [r.request_seq for r in responses if isinstance(r, ResponseReceived)] == [
        first.request_seq,
        second.request_seq,
    ]
    assert all(isinstance(r, ResponseReceived) and r.usage.input_tokens > 0 for r in responses)
    for seq in session.requests():
        result = session.replay(seq)
        assert result.ok, result.difference
    assert log.verify("s1").ok


def test_record_takes_every_shape_of_answer(log: Log, server: FakeServer) -> None:
    session = make(log)
    session.user("hi")
    shapes: list[tuple[str, Callable[[], Answer]]] = [
        ("reply", lambda: session.record(parse_response("openai-chat", chat_body("a")))),
        ("bytes", lambda: session.record(json.dumps(chat_body("b")).encode())),
        ("text", lambda: session.record(json.dumps(chat_body("c")))),
        ("mapping", lambda: session.record(chat_body("d"))),
        ("sse bytes", lambda: session.record(chat_stream("e"))),
        ("sse blocks", lambda: session.record(chat_stream("f").decode().split("\n\n"))),
        ("sse flagged", lambda: session.record(chat_stream("g"), stream=True)),
    ]
    for expected, (name, record) in zip("abcdefg", shapes, strict=True):
        request = session.prepare()
        answer = record()
        assert answer.text == expected, name
        assert answer.request_seq == request.request_seq, name
    session.prepare()
    failed = session.record(b"<html>bad gateway</html>", status=502)
    assert failed.error is not None and failed.error.status == 502
    assert "bad gateway" in failed.error.message and not failed.overflow and not failed.done
    server.script(FakeReply(text="late", delay=2.0))
    request = session.prepare()
    with pytest.raises(ProviderError) as caught:
        send(
            "openai-chat",
            request.body,
            api_key="k",
            base_url=server.base_url("openai-chat"),
            timeout=0.2,
            request_seq=request.request_seq,
        )
    timed_out = session.record(caught.value)
    assert timed_out.error is not None and timed_out.error.error_type == "timeout"
    assert timed_out.request_seq == request.request_seq
    with pytest.raises(InvalidEventError, match="status"):
        session.record(chat_body("x"), status=200)


def test_tool_result_takes_the_name_from_the_open_call_and_refuses_others(log: Log) -> None:
    session = make(log)
    session.user("go")
    session.prepare()
    session.record(
        chat_body(
            "",
            tool_calls=[
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                }
            ],
        )
    )
    with pytest.raises(InvalidEventError, match="no call 'nope' is waiting") as caught:
        session.tool_result("nope", "x")
    assert "['c1']" in str(caught.value)
    done = session.tool_result("c1", "contents", is_error=True, exit_code=2, key="r1")
    stored = log.get("s1", done.last_seq).body
    assert stored == ToolResultAdded(
        call_id="c1", tool_name="read_file", output="contents", is_error=True, exit_code=2
    )
    with pytest.raises(InvalidEventError, match=f"already answered at s1#{done.last_seq}"):
        session.tool_result("c1", "again")
    retried = session.tool_result("c1", "contents", is_error=True, exit_code=2, key="r1")
    assert retried.duplicate and retried.last_seq == done.last_seq
    with pytest.raises(IdempotencyError):
        session.tool_result("c1", "other content", key="r1")


def ticking() -> Callable[[], int]:
    """A clock that moves on by a second at every reading."""
    now = iter(range(1_700_000_000_000_000, 2**62, 1_000_000))
    return lambda: next(now)


def test_keyed_retries_with_a_clock_return_what_was_stored(log: Log) -> None:
    session = make(log, clock=ticking())
    first = session.user("hi", key="k1")
    again = session.user("hi", key="k1")
    after_crash = make(log, clock=ticking()).user("hi", key="k1")
    assert not first.duplicate and again.duplicate and after_crash.duplicate
    assert again.head_hash == after_crash.head_hash == first.head_hash
    request = session.prepare(key="p1")
    assert session.prepare(key="p1").duplicate
    answer = session.record(chat_body("hello"), key="r1")
    retried = session.record(chat_body("hello"), key="r1")
    fresh = make(log, clock=ticking()).record(chat_body("hello"), key="r1")
    assert retried.duplicate and fresh.duplicate and not answer.duplicate
    assert (fresh.first_seq, fresh.last_seq) == (answer.first_seq, answer.last_seq)
    assert answer.request_seq == request.request_seq
    events = log.read("s1")
    assert [e.kind for e in events].count("user") == 1 and len(session.requests()) == 1
    assert events[first.last_seq].time == 1_700_000_000_000_000  # the stored time stays
    with pytest.raises(IdempotencyError):
        session.user("something else", key="k1")
    assert log.verify().ok


def test_a_response_keys_itself_by_its_id_and_request(log: Log) -> None:
    session = make(log)
    session.user("hi")
    session.prepare()
    first = session.record(chat_body("hello", ident="chatcmpl-9"))
    again = make(log).record(chat_body("hello", ident="chatcmpl-9"))  # after a crash
    assert again.duplicate and (again.first_seq, again.last_seq) == (
        first.first_seq,
        first.last_seq,
    )
    with pytest.raises(InvalidEventError, match="already answered"):
        session.record(chat_body("something else", ident="chatcmpl-9"))
    session.user("more")
    session.prepare()
    # A fake (or a test) reusing an id for another request is another response.
    later = session.record(chat_body("hello", ident="chatcmpl-9"))
    assert not later.duplicate and later.request_seq != first.request_seq
    keys = [e.key for e in log.read("s1") if e.kind in ("assistant", "response")]
    assert keys == [
        f"turnlog:response:{first.request_seq}:chatcmpl-9/0",
        f"turnlog:response:{first.request_seq}:chatcmpl-9/1",
        f"turnlog:response:{later.request_seq}:chatcmpl-9/0",
        f"turnlog:response:{later.request_seq}:chatcmpl-9/1",
    ]


def test_a_tool_result_keys_itself_by_its_call_and_where_the_call_was_made(log: Log) -> None:
    session = make(log)
    calls: list[dict[str, object]] = [
        {"id": "call_0", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    ]
    results = []
    for turn in range(2):  # the provider numbers its calls from call_0 every turn
        session.user(f"turn {turn}")
        session.prepare()
        made = session.record(chat_body("", tool_calls=calls, ident=f"c{turn}"))
        done = session.tool_result("call_0", f"contents {turn}")
        again = make(log).tool_result("call_0", f"contents {turn}")  # a retry
        assert not done.duplicate and again.duplicate and again.last_seq == done.last_seq
        assert log.get("s1", done.last_seq).key == f"turnlog:result:{made.first_seq}:call_0"
        results.append(done.last_seq)
    with pytest.raises(InvalidEventError, match="already answered"):
        session.tool_result("call_0", "different contents")
    assert [e.seq for e in log.read("s1", kinds=["tool_result"])] == results


def test_system_and_tools_append_only_what_changes(log: Log) -> None:
    session = make(log)
    assert session.system("base", "Be brief.") is not None
    assert session.system("base", "Be brief.") is None
    assert session.system("base", "Be brief.", position=5) is not None
    assert session.system("gone", "") is None  # removing what is not there
    specs: list[ToolSpec | dict[str, object]] = [
        ToolSpec(name="a"),
        {"name": "b", "parameters": '{"type":"object"}'},
    ]
    assert session.tools(specs) is not None
    assert session.tools(specs) is None
    tools = log.read("s1", kinds=["tools"])[-1].body
    assert isinstance(tools, ToolsSet)
    assert tools.tools == (ToolSpec(name="a"), ToolSpec(name="b", parameters='{"type":"object"}'))
    session.tools([READ])
    tools = log.read("s1", kinds=["tools"])[-1].body
    assert isinstance(tools, ToolsSet) and tools.tools[0].name == "read_file"
    assert json.loads(tools.tools[0].parameters)["properties"]["path"] == {"type": "string"}
    with pytest.raises(InvalidEventError, match="name must be a non-empty str"):
        session.tools([{"description": "nameless"}])
    kinds = [e.kind for e in log.read("s1")]
    assert kinds == ["system", "system", "tools", "tools"]


def test_a_request_takes_errors_then_one_response(log: Log) -> None:
    session = make(log)
    session.user("hi")
    request = session.prepare()
    error = session.record(
        b'{"error": {"message": "slow down", "type": "server_error"}}', status=500
    )
    assert error.error is not None and error.request_seq == request.request_seq
    answer = session.record(chat_body("ok"), key="answer-1")
    assert answer.text == "ok" and answer.last_seq == answer.first_seq + 1
    with pytest.raises(InvalidEventError, match="already answered"):
        session.record(chat_body("ok again"))
    again = session.record(chat_body("ok"), key="answer-1")
    assert again.duplicate and (again.first_seq, again.last_seq) == (
        answer.first_seq,
        answer.last_seq,
    )
    with pytest.raises(InvalidEventError, match="not a request record"):
        session.record(chat_body("x"), request_seq=0)


def test_a_keyed_record_retried_returns_the_stored_request(log: Log) -> None:
    # As an integration's packed_messages(key=...) does after a crash: the request was
    # recorded, and the head has moved since (the record itself, then a reply).
    log.append("s", UserMessageAdded(text="hi"))
    replayer = Replayer(Packer(log))
    render = turnlog.adapters.providers.renderer(
        "openai-chat", model="m", max_tokens=None, blobs=log.blob
    )
    first = replayer.record(
        "s", policy=POLICY, model="m", format="openai-chat", render=render, key="req-1"
    )
    log.append("s", NotificationAdded(source="other", text="meanwhile"))
    before = len(log.read("s"))
    again = replayer.record(
        "s", policy=POLICY, model="m", format="openai-chat", render=render, key="req-1"
    )
    assert again.duplicate and not first.duplicate and len(log.read("s")) == before
    assert (again.request_seq, again.rendered) == (first.request_seq, first.rendered)
    assert again.packed.prompt == first.packed.prompt
    log.append("s", Draft(body=NotificationAdded(source="x", text="y"), key="note-1"))
    with pytest.raises(IdempotencyError, match="NotificationAdded"):
        replayer.record("s", policy=POLICY, model="m", key="note-1")


def test_prepare_with_a_used_key_returns_the_stored_request(log: Log) -> None:
    session = make(log, "anthropic")
    session.user("hi")
    first = session.prepare(key="req-1")
    session.record(
        {
            "id": "m1",
            "type": "message",
            "role": "assistant",
            "model": "fake-model",
            "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 5, "output_tokens": 1},
        }
    )
    again = session.prepare(key="req-1")
    assert again.duplicate and not first.duplicate
    assert (again.request_seq, again.body) == (first.request_seq, first.body)
    assert again.packed.prompt == first.packed.prompt
    assert len(session.requests()) == 1


def test_request_json_is_a_fresh_copy_of_the_body(log: Log) -> None:
    session = make(log, "openai-responses", extra={"temperature": 0.5})
    session.user("hi")
    request = session.prepare()
    body = request.json()
    assert body["temperature"] == 0.5 and body["model"] == "fake-model"
    body["model"] = "changed"
    assert request.json()["model"] == "fake-model"


def test_the_clock_supplies_times_unless_a_call_gives_one(log: Log) -> None:
    session = make(log, clock=lambda: 1_700_000_000_000_000)
    session.user("one")
    session.user("two", time=5)
    session.prepare()
    assert [e.time for e in log.read("s1")] == [
        1_700_000_000_000_000,
        5,
        1_700_000_000_000_000,
        1_700_000_000_000_000,
    ]


def test_the_session_checks_its_arguments(log: Log) -> None:
    with pytest.raises(RenderError, match="unknown format"):
        Session(log, "s", model="m", format="gemini")
    with pytest.raises(RenderError, match="max_tokens"):
        Session(log, "s", model="m", format="anthropic")
    with pytest.raises(RenderError, match="model"):
        Session(log, "s", model="")
    with pytest.raises(InvalidEventError):
        Session(log, "", model="m")
    with pytest.raises(turnlog.errors.UnknownSessionError):
        Session(log, "empty", model="m").prepare()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_tokens": 0}, "max_tokens must be None or an int >= 1, found 0"),
        ({"max_tokens": "1024"}, "max_tokens must be"),
        ({"extra": {"model": "other"}}, "extra field 'model' would replace"),
        ({"extra": {"temperature": float("nan")}}, "cannot be encoded as JSON"),
        ({"extra": [("temperature", 0)]}, "extra must be None or a mapping"),
    ],
)
def test_bad_render_arguments_are_refused_by_the_constructor_not_by_prepare(
    log: Log, fmt: str, options: dict[str, object], match: str
) -> None:
    # Refused by prepare, they left the policy it had recorded before rendering.
    Session(log, "s1", model="gpt-4o", format=fmt).user("hi")
    head = log.head("s1")
    with pytest.raises(RenderError, match=match):
        Session(log, "s1", model="gpt-4o", format=fmt, policy=POLICY, **options)  # type: ignore[arg-type]
    assert log.head("s1") == head


def test_tools_sharing_a_name_are_refused_before_anything_is_appended(log: Log) -> None:
    # Every provider refuses such a request, which used to be recorded first.
    session = Session(log, "s1", model="gpt-4o")
    session.user("hi")
    head = log.head("s1")
    other = {"name": "read_file", "description": "another", "parameters": {"type": "object"}}
    with pytest.raises(InvalidEventError, match="tools 0 and 1 are both named 'read_file'"):
        session.tools([READ, other])
    assert log.head("s1") == head
    session.tools([READ])
    assert session.prepare().body


STRICT_READ = {
    "type": "function",
    "name": "read_file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_strict_tool_is_recorded_sent_strict_and_replayed(log: Log, fmt: str) -> None:
    session = Session(log, "s1", model="gpt-4o", format=fmt, policy=POLICY)
    session.tools([STRICT_READ, {**READ["function"], "name": "grep", "strict": None}])  # type: ignore[dict-item]
    tools = log.get("s1", 0).body
    assert isinstance(tools, ToolsSet)
    assert [t.strict for t in tools.tools] == [True, False]
    session.user("hi")
    request = session.prepare()
    body = json.loads(request.body)
    sent = [t.get("strict", t.get("function", {}).get("strict")) for t in body["tools"]]
    assert sent[0] is True and sent[1] in (None, False)
    assert session.replay(request.request_seq).ok


@pytest.mark.parametrize(
    ("tool", "match"),
    [
        (
            {**STRICT_READ, "parameters": {"type": "object", "properties": {}}},
            r"object at \(\) of its schema|In context=\(\), 'additionalProperties'",
        ),
        (
            {
                **STRICT_READ,
                "parameters": {
                    "type": "object",
                    "properties": {"opts": {"type": "object"}},
                    "additionalProperties": False,
                },
            },
            r"In context=\('properties', 'opts'\), 'additionalProperties'",
        ),
        ({**STRICT_READ, "strict": "yes"}, "strict must be a bool"),
        (ToolSpec(name="patch", freeform=True, strict=True), "freeform and strict"),
        # checked as rendered: "type" and "properties" added, and no additionalProperties
        ({"name": "noargs", "strict": True}, r"In context=\(\), 'additionalProperties'"),
        (
            {**STRICT_READ, "parameters": {"anyOf": [{"type": "string"}]}},
            r"In context=\(\), 'additionalProperties'",
        ),
        ({**STRICT_READ, "parameters": "[1]"}, "parameters must be a JSON object"),
        ({**STRICT_READ, "parameters": "[" * 5_000 + "]" * 5_000}, "not JSON"),
    ],
)
def test_a_strict_tool_no_provider_accepts_is_refused_before_anything_is_appended(
    log: Log, tool: object, match: str
) -> None:
    session = Session(log, "s1", model="gpt-4o", format="anthropic")
    session.user("hi")
    head = log.head("s1")
    with pytest.raises(InvalidEventError, match=match):
        session.tools([tool])  # type: ignore[list-item]
    assert log.head("s1") == head


def test_a_schema_too_deep_to_walk_is_a_problem_not_a_recursion_error() -> None:
    from turnlog.adapters.providers._wire import strict_schema_problems

    schema: dict[str, object] = {}
    for _ in range(5_000):
        schema = {
            "type": "object",
            "properties": {"a": schema},
            "required": ["a"],
            "additionalProperties": False,
        }
    assert strict_schema_problems("deep", schema, every_required=True) == [
        "Invalid schema for function 'deep': the schema is nested too deeply."
    ]


def test_a_strict_tool_with_an_optional_property_is_refused_for_openai_only(log: Log) -> None:
    optional = {
        **STRICT_READ,
        "parameters": {**STRICT_READ["parameters"], "required": []},  # type: ignore[dict-item]
    }
    for i, fmt in enumerate(("openai-chat", "openai-responses")):
        session = Session(log, f"o{i}", model="gpt-4o", format=fmt)
        with pytest.raises(InvalidEventError, match=r"Missing 'path'.*list every property"):
            session.tools([optional])
        assert log.head(f"o{i}") is None
    session = Session(log, "a", model="claude-sonnet-4-5", format="anthropic")
    assert session.tools([optional]) is not None
    session.user("hi")
    assert json.loads(session.prepare().body)["tools"][0]["strict"] is True


def test_arguments_of_the_wrong_type_get_a_turnlog_error_not_a_bare_one(log: Log) -> None:
    # Each raised TypeError or AttributeError from inside, at once or at a later call.
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="models must be None or a"):
        Session(log, "s1", model="gpt-4o", models={})  # type: ignore[arg-type]
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="clock must be None or a"):
        Session(log, "s1", model="gpt-4o", clock=5)  # type: ignore[arg-type]
    session = Session(log, "s1", model="gpt-4o")
    for tools in (None, {"name": "read_file"}, READ):
        with pytest.raises(InvalidEventError, match="tools must be a list of tool definitions"):
            session.tools(tools)  # type: ignore[arg-type]
    assert log.head("s1") is None
    session.user("hi")
    session.prepare()
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="status must be None or an int"):
        session.record(b"busy", status="503")  # type: ignore[arg-type]
    assert session.record(b"busy", status=503).error is not None


def test_the_facade_names_are_reexported() -> None:
    assert turnlog.adapters.__all__ == sorted(turnlog.adapters.__all__)
    for name in turnlog.adapters.__all__:
        assert getattr(turnlog.adapters, name) is getattr(turnlog.adapters.session, name)


# -- overflow recovery and compaction -----------------------------------------------------------
def grow(session: Session, server: FakeServer, turns: int) -> None:
    """Turns of a user message and two tool exchanges with 50-line outputs."""
    for turn in range(turns):
        session.user(f"task {turn}: look at the files")
        for step in range(2):
            call = ToolCall(id=f"c{turn}_{step}", name="read_file", arguments="{}")
            _, answer = exchange(
                session, server, FakeReply(text=f"step {step}", tool_calls=(call,))
            )
            session.tool_result(
                answer.tool_calls[0].id, "\n".join(f"line {i} of {call.id}" for i in range(50))
            )


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_overflow_error_is_recovered_by_the_next_prepare(fmt: str, server: FakeServer) -> None:
    log = turnlog.open(":memory:")
    session = make(log, fmt)
    grow(session, server, 4)
    overflowed, answer = exchange(session, server, overflow_error())
    assert answer.overflow and answer.error is not None and not answer.done
    recovery = session.prepare()
    assert recovery.recovery and recovery.compaction is not None
    assert (recovery.compaction.status, recovery.compaction.reason) == ("committed", "overflow")
    compactions = [e.body for e in log.read("s1", kinds=["compaction"])]
    assert len(compactions) == 1 and isinstance(compactions[0], CompactionCommitted)
    assert compactions[0].reason == "overflow"
    assert recovery.packed.tokens < overflowed.packed.tokens
    session.record(
        send(
            fmt,
            recovery.body,
            api_key="k",
            base_url=server.base_url(fmt),
            request_seq=recovery.request_seq,
        )
    )
    normal = session.prepare()
    assert not normal.recovery and normal.compaction is None
    assert all(session.replay(seq).ok for seq in session.requests())


def test_a_recorded_recovery_is_not_run_twice(log: Log, server: FakeServer) -> None:
    session = make(log)
    grow(session, server, 4)
    exchange(session, server, overflow_error())
    # A crash after the recovery was committed and before the request was recorded:
    assert session.compactor.recover("s1", policy=POLICY).status == "committed"
    request = session.prepare()
    assert request.recovery and request.compaction is None
    assert len(log.read("s1", kinds=["compaction"])) == 1


def test_automatic_compaction_runs_before_packing_when_due(log: Log, server: FakeServer) -> None:
    policy = Policy(
        context_window=6000,
        output_reserve=500,
        warning_buffer=2500,
        compact_buffer=1500,
        blocking_buffer=500,
        keep_recent_turns=2,
        keep_recent_messages=4,
        segment_target_tokens=800,
        segment_min_tokens=100,
        segment_min_messages=2,
    )
    session = Session(log, "s1", model="fake-model", policy=policy, auto_compact=True)
    session.user("start")
    compactions = []
    for step in range(10):
        if step % 3 == 0 and step:
            session.user(f"next task {step}")
        call = ToolCall(id=f"c{step}", name="read_file", arguments=json.dumps({"p": step}))
        request, _ = exchange(session, server, FakeReply(text=f"step {step}", tool_calls=(call,)))
        if request.compaction is not None:
            compactions.append(request.compaction)
        session.tool_result(call.id, "\n".join(f"line {i} of step {step} " * 3 for i in range(40)))
    assert compactions and all(c.status == "committed" for c in compactions)
    assert {c.reason for c in compactions} == {"threshold"}
    assert all(session.replay(seq).ok for seq in session.requests())
    manual = session.compact()
    assert manual.status in ("committed", "skipped")


# -- concurrency ----------------------------------------------------------------------------------
def run_threads(count: int, target: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_threads_sharing_one_session_append_everything(tmp_path: Path) -> None:
    with turnlog.open(tmp_path / "store", sync=False) as log:
        session = make(log)
        session.user("go")
        session.prepare()
        calls: list[dict[str, object]] = [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "read_file", "arguments": "{}"},
            }
            for i in range(8)
        ]
        session.record(chat_body("", tool_calls=calls))

        def work(i: int) -> None:
            for n in range(10):
                session.notify(f"worker {i}", f"note {n}")
            session.tool_result(f"c{i}", f"result {i}")

        assert run_threads(8, work) == []
        events = log.read("s1")
        assert sum(isinstance(e.body, NotificationAdded) for e in events) == 80
        assert sorted(e.body.call_id for e in events if isinstance(e.body, ToolResultAdded)) == [
            f"c{i}" for i in range(8)
        ]
        assert session.open_calls() == ()
        assert log.verify("s1").ok


def test_threads_with_their_own_session_objects_retry_on_conflicts(tmp_path: Path) -> None:
    with turnlog.open(tmp_path / "store", sync=False) as log:
        make(log).user("go")

        def work(i: int) -> None:
            session = make(log)  # its own lock and packer: its appends can conflict
            for n in range(10):
                session.user(f"{i}:{n}")
                session.notify(str(i), f"{n}")

        assert run_threads(6, work) == []
        texts = [e.body.text for e in log.read("s1") if isinstance(e.body, UserMessageAdded)]
        assert len(texts) == 61 and len(set(texts)) == 61
        for i in range(6):  # each writer's events stay in its order
            mine = [t for t in texts if t.startswith(f"{i}:")]
            assert mine == [f"{i}:{n}" for n in range(10)]
        assert log.verify("s1").ok


def test_racing_results_for_one_call_append_exactly_one(tmp_path: Path) -> None:
    with turnlog.open(tmp_path / "store", sync=False) as log:
        first = make(log)
        first.user("go")
        first.prepare()
        first.record(
            chat_body(
                "",
                tool_calls=[
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ],
            )
        )

        def answer(i: int) -> None:
            make(log).tool_result("c1", f"result {i}")

        errors = run_threads(6, answer)
        results = log.read("s1", kinds=["tool_result"])
        assert len(results) == 1 and len(errors) == 5
        assert all(
            isinstance(e, InvalidEventError) and "already answered" in str(e) for e in errors
        )


def test_a_session_gives_up_after_its_attempts(log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    session = make(log, attempts=2)
    session.user("go")
    real = log.append

    def append_after_someone_else(session_id: str, events: object, **kw: object) -> object:
        real(session_id, NotificationAdded(source="other", text="meanwhile"))
        return real(session_id, events, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(log, "append", append_after_someone_else)
    with pytest.raises(AppendConflictError, match="2 attempts") as info:
        session.system("base", "lost")
    monkeypatch.undo()
    head = log.head("s1")
    assert head is not None and (info.value.expected, info.value.actual) == (1, head.seq)
    assert not any(
        isinstance(e.body, SystemSectionSet) and e.body.text == "lost" for e in log.read("s1")
    )


def test_user_and_notify_have_no_precondition_to_conflict_with(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make(log, attempts=1)
    session.user("go")
    real = log.append

    def append_after_someone_else(session_id: str, events: object, **kw: object) -> object:
        real(session_id, NotificationAdded(source="other", text="meanwhile"))
        return real(session_id, events, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(log, "append", append_after_someone_else)
    session.user("lands")
    session.notify("me", "lands too")
    monkeypatch.undo()
    texts = [getattr(e.body, "text", "") for e in log.read("s1")]
    assert texts == ["go", "meanwhile", "lands", "meanwhile", "lands too"]


def test_prepare_repacks_when_another_writer_appends_during_the_pack(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make(log)
    session.user("first")
    real = Packer.pack
    appended: list[int] = []

    def pack_then_someone_appends(self: Packer, *args: object, **kw: object) -> object:
        packed = real(self, *args, **kw)  # type: ignore[arg-type]
        # another writer, after the projection was read (not in the trial of a new policy)
        if not appended and "policy" not in kw:
            appended.append(log.append("s1", UserMessageAdded(text="second")).last_seq)
        return packed

    monkeypatch.setattr(Packer, "pack", pack_then_someone_appends)
    request = session.prepare()
    monkeypatch.undo()
    record = log.get("s1", request.request_seq).body
    assert isinstance(record, RequestIssued) and record.head_seq == appended[0]
    assert b"second" in request.body
    assert session.replay(request.request_seq).ok


def test_prepare_backs_off_between_repacks(log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    session = make(log)
    session.user("first")
    real = Packer.pack
    slept: list[float] = []
    landed: list[int] = []

    def pack_then_someone_appends(self: Packer, *args: object, **kw: object) -> object:
        packed = real(self, *args, **kw)  # type: ignore[arg-type]
        # another writer lands during each of the first three packs that record (the
        # trial of a new policy, with policy=, records nothing)
        if len(landed) < 3 and "policy" not in kw:
            text = f"meanwhile {len(landed)}"
            landed.append(log.append("s1", NotificationAdded(source="other", text=text)).last_seq)
        return packed

    monkeypatch.setattr(Packer, "pack", pack_then_someone_appends)
    monkeypatch.setattr(turnlog._log, "sleep", slept.append)
    request = session.prepare()
    monkeypatch.undo()
    # Each re-pack waits first, up to 1, 2 and 4 ms (the first pack does not wait).
    assert len(slept) == 3 and all(0 < w <= 0.001 * 2**i for i, w in enumerate(slept))
    assert b"meanwhile 2" in request.body and session.replay(request.request_seq).ok


def test_prepare_refuses_when_another_writer_changes_the_policy_meanwhile(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make(log)
    session.user("first")
    session.prepare()
    real = Packer.pack
    other = Policy(context_window=20_000, output_reserve=1_000)

    def pack_then_someone_sets_a_policy(self: Packer, *args: object, **kw: object) -> object:
        packed = real(self, *args, **kw)  # type: ignore[arg-type]
        log.append("s1", turnlog.events.PolicySet(policy=other.resolved()))
        return packed

    monkeypatch.setattr(Packer, "pack", pack_then_someone_sets_a_policy)
    before = len(log.read("s1"))
    with pytest.raises(AppendConflictError, match="different policy"):
        session.prepare()
    monkeypatch.undo()
    assert [e.kind for e in log.read("s1", before)] == ["policy"]  # the other writer's only


CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import turnlog
    from turnlog.adapters import Session

    store, worker, rounds, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    while not go.exists():
        time.sleep(0.005)
    with turnlog.open(store, sync=False) as log:
        session = Session(log, "shared", model="fake-model", max_tokens=512)
        for i in range(rounds):
            session.user(f"{worker} says {i}")
            request = session.prepare()
            reply = {"id": f"{worker}-{i}", "object": "chat.completion", "created": 1,
                     "model": "fake-model", "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": f"{worker} answer {i}"}}],
                     "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}
            session.record(json.dumps(reply).encode(), request_seq=request.request_seq)
            session.notify(worker, f"round {i} done")
""")


def test_two_processes_share_one_lmdb_store(tmp_path: Path) -> None:
    store, go, rounds = tmp_path / "store", tmp_path / "go", 15
    with turnlog.open(store) as log:
        Session(log, "shared", model="fake-model").system("base", "One agent, two workers.")
        log.append("shared", turnlog.events.PolicySet(policy=POLICY))
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(store), name, str(rounds), str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("A", "B")
    ]
    go.touch()
    errors = [worker.communicate(timeout=120)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], errors
    with turnlog.open(store) as log:
        assert log.verify().ok
        events = log.read("shared")
        users = [e.body.text for e in events if isinstance(e.body, UserMessageAdded)]
        assert sorted(users) == sorted(f"{w} says {i}" for w in "AB" for i in range(rounds))
        requests = {e.seq for e in events if isinstance(e.body, RequestIssued)}
        answered = [
            e.body.request_seq
            for e in events
            if isinstance(e.body, ResponseReceived) and e.body.request_seq is not None
        ]
        assert len(requests) == 2 * rounds and sorted(answered) == sorted(requests)
        messages = [e for e in events if isinstance(e.body, AssistantMessageAdded)]
        assert len(messages) == 2 * rounds
        assert not any(isinstance(e.body, ProviderErrorReceived) for e in events)
        session = Session(log, "shared", model="fake-model", max_tokens=512)
        assert all(session.replay(seq).ok for seq in sorted(requests))
        assert sum(isinstance(e.body, SystemSectionSet) for e in events) == 1


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import turnlog
    from turnlog.adapters import Session

    store, worker, calls, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    with turnlog.open(store, **({} if "://" in store else {"sync": False})) as log:
        session = Session(log, "shared", model="fake-model")
        while not go.exists():
            time.sleep(0.005)
        for i in range(calls):
            session.user(f"{worker} says {i}")
            session.notify(worker, f"{worker} note {i}")
""")


@pytest.mark.parametrize("backend", [b for b in backend_params() if b != "memory"])
def test_two_processes_writing_one_session_never_conflict(backend: str, tmp_path: Path) -> None:
    # user() and notify() have no precondition: two writers racing on one session's
    # head have nothing to conflict with, however often they collide.
    logs = LogFactory(backend, tmp_path, sync=False)
    try:
        log = logs.open()
        location = (
            str(log.store.location)
            if backend == "lmdb"
            else pgserver.shared().url(schema=log.store.schema)  # type: ignore[attr-defined]
        )  # type: ignore[attr-defined]
        go, calls = tmp_path / "go", 300
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, location, name, str(calls), str(go)],
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in ("A", "B")
        ]
        go.touch()
        errors = [worker.communicate(timeout=300)[1] for worker in workers]
        assert [worker.returncode for worker in workers] == [0, 0], errors
        events = log.read("shared")
        assert len(events) == 4 * calls
        for worker in "AB":  # every call landed once, in each writer's own order
            said = [
                e.body.text
                for e in events
                if isinstance(e.body, UserMessageAdded) and e.body.text.startswith(worker)
            ]
            assert said == [f"{worker} says {i}" for i in range(calls)]
            noted = [
                e.body.text
                for e in events
                if isinstance(e.body, NotificationAdded) and e.body.source == worker
            ]
            assert noted == [f"{worker} note {i}" for i in range(calls)]
        assert log.verify().ok
    finally:
        logs.close_all()


def test_http_errors_other_than_overflow_are_recorded_as_errors(
    log: Log, server: FakeServer
) -> None:
    session = make(log)
    session.user("hi")
    _, answer = exchange(session, server, http_error(429, "rate limited"))
    assert answer.error is not None and answer.error.status == 429 and not answer.overflow
    request = session.prepare()
    assert not request.recovery


def test_official_sdk_clients_send_the_body_and_their_replies_are_recorded(
    server: FakeServer,
) -> None:
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    log = turnlog.open(":memory:")
    chat = make(log, "openai-chat")
    chat.user("hi")
    client = openai.OpenAI(base_url=server.base_url("openai-chat"), api_key="test", max_retries=0)
    server.script(FakeReply(text="Reading.", tool_calls=(ToolCall(id="c1", name="read_file"),)))
    request = chat.prepare()
    answer = chat.record(client.chat.completions.create(**request.json()))
    assert [c.id for c in answer.tool_calls] == ["c1"] and answer.response is not None
    assert answer.response.usage.input_tokens > 0
    messages = Session(log, "s2", model="fake-model", format="anthropic", max_tokens=256)
    messages.user("hi")
    server.script(FakeReply(text="Hello."))
    request = messages.prepare()
    reply = anthropic.Anthropic(
        base_url=server.base_url("anthropic"), api_key="test", max_retries=0
    ).messages.create(**request.json())
    assert messages.record(reply).text == "Hello."
    assert json.loads(server.requests[-1].body) == request.json()


def test_turnlog_replay_re_renders_a_streamed_request_from_its_record(tmp_path: Path) -> None:
    """The record carries the renderer's extra arguments, so `turnlog replay` (which knows
    nothing of the session object) re-renders the body and checks its hash."""
    from turnlog import Packer
    from turnlog.adapters.providers import renderer_for

    log = turnlog.open(tmp_path / "store")
    session = Session(log, "s", model="m", format="openai-chat", max_tokens=64, stream=True)
    session.user("hello")
    request = session.prepare()
    record = log.get("s", request.request_seq).body
    assert isinstance(record, turnlog.events.RequestIssued) and record.render_args
    render = renderer_for(record, blobs=log.blob)
    assert render is not None
    assert Replayer(Packer(log)).replay("s", request.request_seq, render=render).ok
    log.close()

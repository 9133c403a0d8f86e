"""The provider client (`send`, and `asend` on asyncio) against the fake server.

Both shells are run on every case: the same answer gives the same `Reply`, and
each failure the same error. HTTP error statuses come back as replies; what
gives no answer raises: a closed port, a server too slow, an answer that breaks
off part-way, a URL that is not http(s); a 2xx answer that does not parse (JSON
or SSE) is a `DecodeError`. A client passed in keeps its connections between
calls, and `asend` does its I/O on the event loop, with no worker thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import turnlog
from turnlog.adapters.providers import (
    ProviderError,
    ProviderTimeoutError,
    Reply,
    asend,
    parse_http,
    send,
)
from turnlog.adapters.providers.fakeserver import (
    FakeReply,
    FakeServer,
    http_error,
    malformed,
    overflow_error,
)
from turnlog.errors import DecodeError, InvalidArgumentError
from turnlog.events import TextPart, ToolCall

SHELLS = ["sync", "async"]
BODIES: dict[str, dict[str, object]] = {
    "openai-chat": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "openai-responses": {"model": "m", "input": "hi"},
    "anthropic": {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
}


def body(fmt: str = "openai-chat", *, stream: bool = False) -> bytes:
    return json.dumps({**BODIES[fmt], **({"stream": True} if stream else {})}).encode()


def call(shell: str, fmt: str, data: bytes, **options: Any) -> Reply:
    """`send` or `asend` (in a loop of its own) with the same arguments."""
    options.setdefault("api_key", "k")
    if shell == "sync":
        return send(fmt, data, **options)
    return asyncio.run(asend(fmt, data, **options))


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as running:
        yield running


def closed_port() -> int:
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- answers -----------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("fmt", sorted(BODIES))
def test_both_shells_parse_the_same_answer_alike(fmt: str, stream: bool) -> None:
    scripted = FakeReply(
        text="It is 42.",
        tool_calls=(ToolCall(id="call_1", name="calculate", arguments='{"expression": "6 * 7"}'),),
    )
    replies, received = [], []
    for shell in SHELLS:
        with FakeServer([scripted]) as server:  # each answer numbered 1
            replies.append(
                call(
                    shell,
                    fmt,
                    body(fmt, stream=stream),
                    base_url=server.base_url(fmt),
                    request_seq=7,
                )
            )
            received.extend(server.requests)
    assert replies[0] == replies[1]
    reply = replies[0]
    assert reply.message is not None and reply.message.parts[0] == TextPart(text="It is 42.")
    assert [p.name for p in reply.message.parts if isinstance(p, ToolCall)] == ["calculate"]
    assert reply.response is not None and reply.response.request_seq == 7
    assert [r.body for r in received] == [body(fmt, stream=stream)] * 2
    assert all(r.headers["content-type"] == "application/json" for r in received)


@pytest.mark.parametrize("shell", SHELLS)
def test_http_error_statuses_come_back_as_replies(server: FakeServer, shell: str) -> None:
    url = server.base_url("openai-chat")
    server.script(
        http_error(500, "upstream exploded"),
        overflow_error(),
        http_error(429, "slow down"),
        malformed(b"<html>bad gateway</html>", status=502, content_type="text/html"),
        http_error(503, "down for a moment", in_stream=False),
    )
    expected = [
        (500, False, "upstream exploded"),
        (400, True, ""),
        (429, False, "slow down"),
        (502, False, "bad gateway"),
        (503, False, "down for a moment"),
    ]
    for status, overflow, words in expected:
        reply = call(shell, "openai-chat", body(), base_url=url, request_seq=3)
        assert reply.error is not None and reply.message is None
        assert reply.error.status == status and reply.error.overflow is overflow
        assert words in reply.error.message and reply.error.request_seq == 3


# -- failures ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shell", SHELLS)
def test_a_closed_port_is_a_provider_error_saying_it_cannot_reach_it(shell: str) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(
        ProviderError,
        match=r"cannot reach http://127\.0\.0\.1:\d+/v1/chat/"
        r"completions: .*refused",
    ) as caught:
        call(shell, "openai-chat", body(), base_url=url, timeout=5, request_seq=2)
    assert not isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value, turnlog.KernelError)
    error = caught.value.error
    assert error.error_type == "connection" and error.status is None
    assert error.request_seq == 2 and error.message == str(caught.value)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_server_too_slow_is_a_timeout(server: FakeServer, shell: str) -> None:
    server.script(FakeReply(text="late", delay=3.0))
    url = server.base_url("anthropic")
    with pytest.raises(
        ProviderTimeoutError,
        match=r"no answer from http://.*/v1/messages "
        r"within 0\.3 s",
    ) as caught:
        call(shell, "anthropic", body("anthropic"), base_url=url, timeout=0.3, request_seq=5)
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.error.error_type == "timeout" and caught.value.error.request_seq == 5


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("shell", SHELLS)
def test_an_answer_that_breaks_off_is_a_provider_error(
    server: FakeServer, shell: str, stream: bool
) -> None:
    server.script(FakeReply(text="a long answer " * 20, cut=40))
    url = server.base_url("openai-chat")
    with pytest.raises(
        ProviderError,
        match=r"the answer from http://.*/chat/completions "
        r"broke off after 40 bytes of the body",
    ) as caught:
        call(shell, "openai-chat", body(stream=stream), base_url=url, timeout=5)
    assert not isinstance(caught.value, TimeoutError)
    assert caught.value.error.error_type == "connection"


@pytest.mark.parametrize("shell", SHELLS)
def test_an_error_status_whose_body_breaks_off_is_still_the_error(
    server: FakeServer, shell: str
) -> None:
    server.script(FakeReply(status=503, error_message="overloaded", cut=10))
    reply = call(shell, "openai-chat", body(), base_url=server.base_url("openai-chat"))
    assert reply.error is not None and reply.error.status == 503


MALFORMED = {
    "a JSON body cut short": malformed(b'{"id": "x", '),
    "a JSON body of another shape": malformed(b'{"unexpected": true}'),
    "HTML sent as a stream": malformed(b"<html>oops</html>", content_type="text/event-stream"),
    "an event that is not JSON": malformed(
        b"data: {not json\n\n", content_type="text/event-stream"
    ),
    "a stream that stops before its end": malformed(
        b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}\n\n',
        content_type="text/event-stream",
    ),
    "a stream that is not UTF-8": malformed(
        b"data: \xff\xfe\n\n", content_type="text/event-stream"
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
@pytest.mark.parametrize("shell", SHELLS)
def test_a_malformed_answer_is_a_decode_error_like_the_parsers(
    server: FakeServer, shell: str, case: str
) -> None:
    reply = MALFORMED[case]
    assert reply.raw is not None
    with pytest.raises(DecodeError) as parsed:
        parse_http("openai-chat", 200, reply.raw, stream=reply.content_type == "text/event-stream")
    server.script(reply)
    with pytest.raises(DecodeError) as caught:
        call(shell, "openai-chat", body(stream=True), base_url=server.base_url("openai-chat"))
    assert str(caught.value) == str(parsed.value)


@pytest.mark.parametrize("shell", SHELLS)
def test_a_url_that_is_not_http_is_a_provider_error(shell: str) -> None:
    for base_url in ("ftp://127.0.0.1/v1", "http://[::1/v1"):
        with pytest.raises(ProviderError, match="cannot reach") as caught:
            call(shell, "openai-chat", body(), base_url=base_url, timeout=5)
        assert caught.value.error.error_type == "connection"


@pytest.mark.parametrize("shell", SHELLS)
def test_a_key_or_header_http_cannot_carry_is_refused_unsent_and_unechoed(
    server: FakeServer, shell: str
) -> None:
    url = server.base_url("openai-chat")
    for key, headers in (
        ("sk-secret\nx-injected: 1", {}),
        ("sk-s\u00e9cret", {}),
        ("sk-ok", {"x-trace": "caf\u00e9-secret"}),
        ("sk-ok", {"x bad name": "v"}),
    ):
        with pytest.raises(InvalidArgumentError, match="an HTTP header cannot carry") as caught:
            call(shell, "openai-chat", body(), base_url=url, api_key=key, headers=headers)
        assert "secret" not in str(caught.value)
    assert server.requests == []


# -- connections -------------------------------------------------------------------------------
def test_a_client_passed_in_keeps_its_connection_between_calls() -> None:
    with FakeServer(keep_alive=True) as server:
        url = server.base_url("openai-chat")
        with httpx.Client() as client:
            for _ in range(3):
                assert (
                    send("openai-chat", body(), api_key="k", base_url=url, client=client).message
                    is not None
                )
            assert not client.is_closed
        assert server.connections == 1
        for _ in range(2):  # a client of each call's own: a connection each
            send("openai-chat", body(), api_key="k", base_url=url)
        assert server.connections == 3


def test_an_async_client_passed_in_keeps_its_connection_between_calls() -> None:
    with FakeServer(keep_alive=True) as server:
        url = server.base_url("openai-chat")

        async def main() -> None:
            async with httpx.AsyncClient() as client:
                for _ in range(3):
                    reply = await asend(
                        "openai-chat", body(), api_key="k", base_url=url, client=client
                    )
                    assert reply.message is not None
                assert not client.is_closed

        asyncio.run(main())
        assert server.connections == 1 and len(server.requests) == 3


class _NoThreads(concurrent.futures.ThreadPoolExecutor):
    """An executor that refuses work: a call that needs a worker thread fails."""

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        raise AssertionError(f"a worker thread was asked to run {fn!r}")


def test_asend_does_its_io_on_the_event_loop(server: FakeServer) -> None:
    server.script(*[FakeReply(text=f"answer {i}") for i in range(5)])
    url = server.base_url("openai-chat")

    async def main() -> list[Reply]:
        asyncio.get_running_loop().set_default_executor(_NoThreads())
        return await asyncio.gather(
            *[asend("openai-chat", body(), api_key="k", base_url=url) for _ in range(5)]
        )

    replies = asyncio.run(main())
    assert sorted(
        r.message.parts[0].text  # type: ignore[union-attr]
        for r in replies  # type: ignore[union-attr]
    ) == [f"answer {i}" for i in range(5)]


def test_twenty_requests_at_once_on_one_async_client_are_all_answered(server: FakeServer) -> None:
    url = server.base_url("openai-chat")

    async def main() -> list[Reply]:
        async with httpx.AsyncClient() as client:
            out: list[Reply] = []
            for _ in range(3):
                out += await asyncio.gather(
                    *[
                        asend("openai-chat", body(), api_key="k", base_url=url, client=client)
                        for _ in range(20)
                    ]
                )
            return out

    replies = asyncio.run(main())
    assert len(replies) == 60 and all(r.message is not None for r in replies)
    assert len(server.requests) == 60

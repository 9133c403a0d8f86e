"""A local fake model server speaking the three wire formats, for tests and demos.

Theory of operation
-------------------
`FakeServer` runs a stdlib ``ThreadingHTTPServer`` bound to 127.0.0.1 on an
ephemeral port, in a daemon thread, as a context manager. It answers

* ``POST /v1/chat/completions`` (OpenAI Chat Completions),
* ``POST /v1/responses`` (OpenAI Responses),
* ``POST /v1/messages`` (Anthropic Messages),

with a complete JSON body, or with an SSE stream (``event:``/``data:`` lines
as the real APIs send them) when the request says ``"stream": true``. Every
request is recorded (`FakeServer.requests`) before it is answered.

Replies are scripted with `FakeReply`: text, reasoning, parallel tool calls,
usage, an HTTP error (with the provider's error body; `overflow_error` gives
the real context-overflow body and status of each provider), an error inside
a stream, a delay (to test timeouts), raw bytes (to test malformed
answers) or a body cut short (an answer that breaks off). Scripted replies
are used in order; when none is left the ``responder`` (if any) is asked,
else the answer is ``"reply N"``. Ids, times and usage are derived from a
counter and the request's size, so a run is deterministic. Every answer
closes its connection, unless the server keeps connections alive
(``keep_alive=True``, to test a client's pooling against
`FakeServer.connections`).

A request the real API refuses is refused here too, with the real status and
error body, before any scripted reply is used: for Anthropic, every rule of
`anthropic_problems` (among them, that ``tool_use`` and ``tool_result``
blocks need ``tools``, and that a ``compaction`` block is the Messages API's
own: ``content`` a non-empty string or null, nothing else); for Responses,
`responses_problems` (a ``compaction`` input item is the Responses API's own:
``encrypted_content`` required, no other fields); for every format, a strict
function tool's schema (every object sets ``additionalProperties`` to false and,
for OpenAI, lists every property as required). Tests hold every rendered
Anthropic body to the same function. A scripted reply may carry a provider
compaction (``FakeReply.compaction``): a ``compaction`` output item (opaque
``encrypted_content``) or a ``compaction`` content block, first in the reply.

Only 127.0.0.1 is ever bound; a request loop against it stays on this machine.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import blake3
import msgspec
from turnlog.events import ToolCall, Usage

from ._registry import PROVIDERS
from ._wire import strict_schema_problems

__all__ = [
    "FakeReply",
    "FakeServer",
    "Received",
    "TOOLS_REQUIRED_MESSAGE",
    "anthropic_problems",
    "chat_problems",
    "http_error",
    "malformed",
    "overflow_error",
    "responses_problems",
]

_HOST = "127.0.0.1"
# The path of each provider's endpoint (its public base URL's path, then its own).
_PATHS = {urlsplit(p.endpoint()).path: name for name, p in PROVIDERS.items()}
_PIECE = 16  # characters per streamed delta
_EPOCH = 1_700_000_000

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


#: The Messages API's answer (HTTP 400, ``invalid_request_error``) to a request whose
#: messages hold ``tool_use`` or ``tool_result`` blocks and which defines no tools.
TOOLS_REQUIRED_MESSAGE = (
    "Requests which include `tool_use` or `tool_result` blocks must define tools."
)

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def anthropic_problems(body: object) -> list[str]:
    """What the Messages API refuses in a request ``body`` (empty when it accepts it).

    Each problem is one message, in the API's words where they are known (the first is
    what the fake server answers with, as HTTP 400 ``invalid_request_error``). Checked:
    ``model``, ``max_tokens`` and ``messages`` present; the first message from the user
    and roles alternating; no empty content and no empty or whitespace-only text;
    ``tool_use`` and ``tool_result`` blocks only with ``tools`` defined; tool names
    unique and matching ``[a-zA-Z0-9_-]{1,64}``; each ``tool_result`` first in its
    turn and answering a ``tool_use`` of the assistant turn just before, and each
    ``tool_use`` answered in the next turn; tool-use ids well formed and unique;
    thinking blocks only from the assistant and without ``cache_control``; a final
    assistant turn not ending in whitespace; at most four ``cache_control`` markers.
    """
    if not isinstance(body, dict):
        return ["the request body must be a JSON object"]
    out: list[str] = []
    for field in ("model", "max_tokens", "messages"):
        if field not in body:
            out.append(f"{field}: Field required")
    max_tokens = body.get("max_tokens")
    if "max_tokens" in body and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        out.append("max_tokens: Input should be greater than or equal to 1")
    messages = body.get("messages")
    if not isinstance(messages, list):
        return out + (["messages: Input should be a valid list"] if "messages" in body else [])
    system = body.get("system", [])
    tools = body.get("tools", [])
    system_blocks = system if isinstance(system, list) else []
    tool_defs = tools if isinstance(tools, list) else []
    markers = sum(isinstance(b, dict) and "cache_control" in b for b in system_blocks + tool_defs)
    for i, block in enumerate(system_blocks):
        if (
            isinstance(block, dict)
            and block.get("type") == "text"
            and not str(block.get("text", "")).strip()
        ):
            out.append(f"system.{i}.text: text content blocks must contain non-whitespace text")
    names = [t.get("name") for t in tool_defs if isinstance(t, dict)]
    for k, name in enumerate(names):
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            out.append(
                f"tools.{k}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
    if len(set(map(str, names))) != len(names):
        out.append("tools: Tool names must be unique.")
    for tool in tool_defs:
        if isinstance(tool, dict) and tool.get("strict") is True:
            out += strict_schema_problems(
                tool.get("name"), tool.get("input_schema"), every_required=False
            )
    if not messages:
        out.append("messages: at least one message is required")
    uses_tools = False
    ids: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            out.append(f"messages.{i}: Input should be a valid dictionary")
            continue
        role = message.get("role")
        if role not in ("user", "assistant"):
            out.append(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            continue
        if i == 0 and role != "user":
            out.append('messages: first message must use the "user" role')
        before = messages[i - 1] if i and isinstance(messages[i - 1], dict) else {}
        if i and before.get("role") == role:
            out.append(
                f'messages: roles must alternate between "user" and "assistant", '
                f'but found multiple "{role}" roles in a row'
            )
        content = message.get("content")
        if isinstance(content, str):  # the short form of one text block
            if not content.strip():
                out.append(f"messages.{i}: all messages must have non-empty content")
            content = []
        elif not isinstance(content, list) or not content:
            out.append(f"messages.{i}: all messages must have non-empty content")
            continue
        previous = before.get("content") if before.get("role") == "assistant" else None
        previous_uses = (
            {b.get("id") for b in previous if isinstance(b, dict) and b.get("type") == "tool_use"}
            if isinstance(previous, list)
            else set()
        )
        answered: set[object] = set()
        seen_other = False
        for j, block in enumerate(content):
            where = f"messages.{i}.content.{j}"
            if not isinstance(block, dict):
                out.append(f"{where}: Input should be a valid dictionary")
                continue
            markers += "cache_control" in block
            kind = block.get("type")
            if kind == "text" and not str(block.get("text", "")).strip():
                out.append(f"{where}.text: text content blocks must contain non-whitespace text")
            if kind in ("tool_use", "tool_result"):
                uses_tools = True
            if kind == "tool_result":
                use_id = block.get("tool_use_id")
                if role != "user":
                    out.append(f"{where}: tool_result blocks are only allowed in user messages")
                if seen_other:
                    out.append(
                        f"{where}: tool_result blocks must come before any other "
                        "content in a user message"
                    )
                if use_id not in previous_uses:
                    out.append(
                        f"{where}: unexpected `tool_use_id` found in `tool_result` "
                        f"blocks: {use_id}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message."
                    )
                answered.add(use_id)
                result = block.get("content")
                if isinstance(result, str) and not result.strip():
                    out.append(
                        f"{where}.content: text content blocks must contain non-whitespace text"
                    )
            else:
                seen_other = True
            if kind == "tool_use":
                use_id = block.get("id")
                if not isinstance(use_id, str) or not _TOOL_USE_ID.match(use_id):
                    out.append(
                        f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                    )
                elif use_id in ids:
                    out.append(f"{where}: `tool_use` ids must be unique")
                else:
                    ids.add(use_id)
                if not isinstance(block.get("input"), dict):
                    out.append(f"{where}.tool_use.input: Input should be a valid dictionary")
            if kind in ("tool_use", "thinking", "redacted_thinking") and role != "assistant":
                out.append(f"{where}: {kind} blocks are only allowed in assistant messages")
            if kind in ("thinking", "redacted_thinking") and "cache_control" in block:
                out.append(f"{where}.{kind}.cache_control: Extra inputs are not permitted")
            if kind == "compaction":
                out += _compaction_block_problems(block, where, role)
        missing = previous_uses - answered
        if missing and role == "user":
            out.append(
                f"messages.{i - 1}: `tool_use` ids were found without `tool_result` "
                f"blocks immediately after: {', '.join(sorted(map(str, missing)))}. "
                "Each `tool_use` block must have a corresponding `tool_result` block "
                "in the next message."
            )
        if role == "assistant" and i + 1 < len(messages):
            nxt = messages[i + 1] if isinstance(messages[i + 1], dict) else {}
            if (
                any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
                and nxt.get("role") != "user"
            ):
                out.append(
                    f"messages.{i}: `tool_use` blocks must be followed by a user "
                    "message with their `tool_result` blocks"
                )
    if uses_tools and not tool_defs:
        out.append(TOOLS_REQUIRED_MESSAGE)
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    tail = last.get("content") if last.get("role") == "assistant" else None
    if (
        isinstance(tail, list)
        and tail
        and isinstance(tail[-1], dict)
        and tail[-1].get("type") == "text"
    ):
        text = str(tail[-1].get("text", ""))
        if text != text.rstrip():
            out.append("messages: final assistant content cannot end with trailing whitespace")
    if markers > 4:
        out.append(f"A maximum of 4 blocks with cache_control may be provided. Found {markers}.")
    return out


def _compaction_block_problems(block: dict[str, Any], where: str, role: object) -> list[str]:
    """What the Messages API refuses in a ``compaction`` content block."""
    out: list[str] = []
    if role != "assistant":
        out.append(f"{where}: compaction blocks are only allowed in assistant messages")
    for key in sorted(set(block) - {"type", "content", "cache_control"}):
        out.append(f"{where}.compaction.{key}: Extra inputs are not permitted")
    if "content" not in block:
        out.append(f"{where}.compaction.content: Field required")
    elif block["content"] is not None and not isinstance(block["content"], str):
        out.append(f"{where}.compaction.content: Input should be a valid string")
    elif block["content"] == "":
        out.append(f"{where}.compaction.content: String should have at least 1 character")
    return out


#: The fields of a Responses ``compaction`` input item.
_COMPACTION_FIELDS = frozenset({"type", "id", "encrypted_content", "created_by"})


def chat_problems(body: object) -> list[str]:
    """What Chat Completions refuses in a request ``body`` (empty when it accepts it).

    Checked: the schema of a strict function tool (``function.strict``), as
    `responses_problems` checks it.
    """
    if not isinstance(body, dict):
        return ["the request body must be a JSON object"]
    out: list[str] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("strict") is True:
            out += strict_schema_problems(
                function.get("name"), function.get("parameters"), every_required=True
            )
    return out


def responses_problems(body: object) -> list[str]:
    """What the Responses API refuses in a request ``body`` (empty when it accepts it).

    Checked: a ``compaction`` input item has a string ``encrypted_content`` and no
    field the item does not define (an Anthropic compaction block, with its
    ``content``, is refused); the schema of a strict function tool sets
    ``additionalProperties`` to false and lists every property as required in each
    of its objects; in the API's words.
    """
    if not isinstance(body, dict):
        return ["the request body must be a JSON object"]
    out: list[str] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and tool.get("type") == "function" and tool.get("strict") is True:
            out += strict_schema_problems(
                tool.get("name"), tool.get("parameters"), every_required=True
            )
    items = body.get("input")
    if not isinstance(items, list):
        return out
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") != "compaction":
            continue
        for key in sorted(set(item) - _COMPACTION_FIELDS):
            out.append(f"Unknown parameter: 'input[{i}].{key}'.")
        if not isinstance(item.get("encrypted_content"), str):
            out.append(f"Missing required parameter: 'input[{i}].encrypted_content'.")
    return out


class FakeReply(msgspec.Struct, frozen=True, kw_only=True):
    """One scripted answer; rendered in the format of the endpoint it answers.

    Attributes:
        text: the assistant text.
        tool_calls: tool calls (several make parallel calls).
        reasoning: reasoning text (Anthropic thinking with a signature, a Responses
            reasoning item with encrypted content, Chat ``reasoning_content``).
        compaction: a provider compaction first in the reply, from this summary: a
            Responses ``compaction`` item (``encrypted_content`` derived from it, as
            opaque as the real one) or an Anthropic ``compaction`` block (the summary
            as its ``content``); Chat Completions has none and leaves it out.
        stop_reason: overrides the derived one (``finish_reason``, ``stop_reason``);
            ``length``, ``max_tokens`` or ``max_output_tokens`` give each API's own
            "cut at the output cap" (``length``, ``max_tokens``, an incomplete
            response).
        usage: reported usage (``input_tokens`` is the whole prompt, cached parts
            included); derived from the sizes when None.
        status: the HTTP status; 400 and above answer with an error body.
        error_type / error_code / error_message: the error body's fields (derived
            from the status when empty).
        overflow: answer with the provider's context-overflow error (HTTP 400).
        in_stream: deliver the error inside a 200 stream when the request streams.
        delay: seconds to wait before answering.
        raw: send these bytes as the body, as they are (with ``status``).
        content_type: the content type of ``raw``.
        model: the model reported (the request's when empty).
        cut: send only this many bytes of the body (the headers announce all of it),
            then close the connection: an answer that breaks off part-way.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    compaction: str = ""
    stop_reason: str = ""
    usage: Usage | None = None
    status: int = 200
    error_type: str = ""
    error_code: str = ""
    error_message: str = ""
    overflow: bool = False
    in_stream: bool = False
    delay: float = 0.0
    raw: bytes | None = None
    content_type: str = "application/json"
    model: str = ""
    cut: int | None = None


def overflow_error(*, in_stream: bool = False, delay: float = 0.0) -> FakeReply:
    """The provider's context-overflow error (HTTP 400, the real body of each API)."""
    return FakeReply(status=400, overflow=True, in_stream=in_stream, delay=delay)


def http_error(
    status: int, message: str = "", *, error_type: str = "", code: str = "", in_stream: bool = False
) -> FakeReply:
    """An HTTP error with the provider's error body."""
    return FakeReply(
        status=status,
        error_message=message,
        error_type=error_type,
        error_code=code,
        in_stream=in_stream,
    )


def malformed(
    body: bytes = b'{"id": "broken", ', *, status: int = 200, content_type: str = "application/json"
) -> FakeReply:
    """An answer whose body is ``body`` verbatim (not the provider's shape)."""
    return FakeReply(raw=body, status=status, content_type=content_type)


class Received(msgspec.Struct, frozen=True, kw_only=True):
    """A request the server received.

    Attributes:
        path: the request path.
        format: ``openai-chat``, ``openai-responses``, ``anthropic`` or "" (unknown path).
        headers: the request headers, names in lower case.
        body: the raw body.
    """

    path: str
    format: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        """The body decoded as a JSON object ({} when it is not one)."""
        try:
            value = json.loads(self.body)
        except (ValueError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}


Responder = Callable[[Received], FakeReply]


class FakeServer:
    """A fake model server on 127.0.0.1 (see the module docstring).

    Parameters:
        replies: scripted replies, used in order.
        responder: asked for a reply when the script is exhausted.
        keep_alive: keep each connection open for further requests (HTTP/1.1
            keep-alive, as the real APIs do); by default every answer closes its
            connection. `connections` counts the connections accepted.

    Example::

        with FakeServer([FakeReply(text="hello")]) as server:
            reply = send("anthropic", body, api_key="k", base_url=server.base_url("anthropic"))
    """

    def __init__(
        self,
        replies: Iterable[FakeReply] = (),
        *,
        responder: Responder | None = None,
        keep_alive: bool = False,
    ) -> None:
        self._script: list[FakeReply] = list(replies)
        self._responder = responder
        self.keep_alive = keep_alive
        self._connections = 0
        self._requests: list[Received] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._count = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> FakeServer:
        """Bind 127.0.0.1 on an ephemeral port and serve in a daemon thread."""
        if self._server is not None:
            return self
        owner = self

        class Handler(_Handler):
            server_owner = owner

        server = _Server((_HOST, 0), Handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            name="turnlog-fakeserver",
            kwargs={"poll_interval": 0.05},
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port (pending delays end at once)."""
        self._closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- addresses ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``.

        Raises:
            RuntimeError: the server is not running.
        """
        if self._server is None:
            raise RuntimeError("the fake server is not running; use it as a context manager")
        return f"http://{_HOST}:{self._server.server_address[1]}"

    def base_url(self, format: str) -> str:  # noqa: A002
        """The base URL an SDK or `client.send` takes for ``format`` (OpenAI's ends in /v1)."""
        return self.url + urlsplit(PROVIDERS[format].base_url).path

    # -- script ---------------------------------------------------------------------------
    def script(self, *replies: FakeReply) -> None:
        """Queue further replies."""
        with self._lock:
            self._script.extend(replies)

    @property
    def requests(self) -> list[Received]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def connections(self) -> int:
        """How many connections the server accepted so far."""
        with self._lock:
            return self._connections

    def _connected(self) -> None:
        with self._lock:
            self._connections += 1

    def _record(self, received: Received) -> int:
        with self._lock:
            self._requests.append(received)
            self._count += 1
            return self._count

    def _next(self, received: Received) -> tuple[int, FakeReply]:
        with self._lock:
            self._requests.append(received)
            self._count += 1
            n = self._count
            if self._script:
                return n, self._script.pop(0)
        if self._responder is not None:
            return n, self._responder(received)
        return n, FakeReply(text=f"reply {n}")

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._closing.wait(seconds)


class _Server(ThreadingHTTPServer):
    # The socketserver default of 5 pending connections resets some of 20 clients
    # connecting at once (an asyncio loop of concurrent sessions does).
    request_queue_size = 128


class _Handler(BaseHTTPRequestHandler):
    server_owner: FakeServer
    protocol_version = "HTTP/1.1"
    _cut: int | None = None

    def setup(self) -> None:
        """Count the connection; send each write at once (no Nagle delay between the
        headers and the body, which would wait for the client's delayed ACK)."""
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server_owner._connected()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Silent."""

    def do_POST(self) -> None:
        """Answer one model request."""
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        path = self.path.split("?", 1)[0]
        fmt = _PATHS.get(path, "")
        received = Received(
            path=path,
            format=fmt,
            body=body,
            headers={k.lower(): v for k, v in self.headers.items()},
        )
        refusal = _refusal(fmt, received)
        if refusal:
            # What the real API refuses uses no scripted reply.
            n = self.server_owner._record(received)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._send(
                    400,
                    _error_body(fmt, 400, "invalid_request_error", "", refusal, n),
                    "application/json",
                )
            return
        n, reply = self.server_owner._next(received)
        self._cut = reply.cut
        self.server_owner._wait(reply.delay)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer(fmt, n, reply, received)  # (the client may have given up)

    def do_GET(self) -> None:
        """Every GET is a 404 in the provider's shape."""
        self._send(
            404,
            _error_body(_NO_ROUTE, 404, "not_found_error", "", "no such path", 0),
            "application/json",
        )

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        cut, self._cut = self._cut, None
        keep = self.server_owner.keep_alive and cut is None
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        if not keep:
            self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data if cut is None else data[:cut])
        self.wfile.flush()
        self.close_connection = not keep

    def _answer(self, fmt: str, n: int, reply: FakeReply, received: Received) -> None:
        if reply.raw is not None:
            self._send(reply.status, reply.raw, reply.content_type)
            return
        if not fmt:
            self._send(
                404,
                _error_body(_NO_ROUTE, 404, "", "", f"no route {received.path}", n),
                "application/json",
            )
            return
        request = received.json()
        if not request:
            self._send(
                400,
                _error_body(fmt, 400, "", "", "the body is not a JSON object", n),
                "application/json",
            )
            return
        stream = request.get("stream") is True
        if reply.status >= 400 or reply.overflow:
            status, error_type, code, message = _error_fields(fmt, reply)
            if stream and reply.in_stream:
                self._send(
                    200,
                    _sse(_error_stream(fmt, n, request, error_type, code, message)),
                    "text/event-stream",
                )
            else:
                self._send(
                    status,
                    _error_body(fmt, status, error_type, code, message, n),
                    "application/json",
                )
            return
        model = reply.model or str(request.get("model") or "fake-model")
        usage = reply.usage or _usage(received.body, reply)
        speaker = _SPEAKERS[fmt]
        data = (
            _sse(speaker.stream(n, model, reply, usage, request))
            if stream
            else _dump(speaker.body(n, model, reply, usage))
        )
        self._send(200, data, "text/event-stream" if stream else "application/json")


# -- shared --------------------------------------------------------------------------------
def _refusal(fmt: str, received: Received) -> str:
    """The message of the 400 the real API answers ``received`` with ("" if it accepts it).

    Each format's `_Speaker.problems` checks its API's rules; a body that is not a JSON
    object is answered by `_Handler._answer` in every format.
    """
    request = received.json() if fmt else {}
    if not request:
        return ""
    problems = _SPEAKERS[fmt].problems(request)
    return problems[0] if problems else ""


def _dump(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _sse(events: Iterable[tuple[str | None, object]]) -> bytes:
    out: list[str] = []
    for name, data in events:
        text = (
            data
            if isinstance(data, str)
            else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        )
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode("utf-8")


def _pieces(text: str) -> Iterator[str]:
    for i in range(0, len(text), _PIECE):
        yield text[i : i + _PIECE]


def _digest(text: str) -> str:
    return blake3.blake3(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _usage(request: bytes, reply: FakeReply) -> Usage:
    produced = (
        len(reply.text)
        + len(reply.reasoning)
        + sum(len(c.name) + len(c.arguments) for c in reply.tool_calls)
    )
    return Usage(
        input_tokens=max(1, len(request) // 4),
        output_tokens=max(1, produced // 4),
        reasoning_tokens=len(reply.reasoning) // 4,
    )


def _tool_input(arguments: str) -> dict[str, object]:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


# -- errors --------------------------------------------------------------------------------
def _error_fields(fmt: str, reply: FakeReply) -> tuple[int, str, str, str]:
    speaker = _SPEAKERS[fmt]
    if reply.overflow:
        return 400, "invalid_request_error", speaker.overflow_code, speaker.overflow_message
    error_type = reply.error_type or speaker.error_types.get(
        reply.status, speaker.default_error_type
    )
    message = reply.error_message or f"fake error {reply.status}"
    return reply.status, error_type, reply.error_code, message


def _error_body(fmt: str, status: int, error_type: str, code: str, message: str, n: int) -> bytes:
    speaker = _SPEAKERS[fmt]
    error_type = error_type or speaker.error_types.get(status, speaker.default_error_type)
    return _dump(speaker.error(error_type, code, message, n))


def _error_stream(
    fmt: str, n: int, request: dict[str, object], error_type: str, code: str, message: str
) -> list[tuple[str | None, object]]:
    model = str(request.get("model") or "fake-model")
    return _SPEAKERS[fmt].error_stream(n, model, error_type, code, message)


def _openai_error(error_type: str, code: str, message: str, n: int) -> dict[str, object]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code or None}}


def _chat_error_stream(
    n: int, model: str, error_type: str, code: str, message: str
) -> list[tuple[str | None, object]]:
    return [(None, _openai_error(error_type, code, message, n))]


def _responses_error_stream(
    n: int, model: str, error_type: str, code: str, message: str
) -> list[tuple[str | None, object]]:
    # An ``error`` event, not ``response.failed``: the latter's codes are a fixed set
    # that has no context-length code.
    base = _responses_object(n, model, [], None, "in_progress")
    return [
        ("response.created", {"type": "response.created", "sequence_number": 0, "response": base}),
        (
            "error",
            {
                "type": "error",
                "sequence_number": 1,
                "code": code or error_type,
                "message": message,
                "param": None,
            },
        ),
    ]


def _anthropic_error(error_type: str, code: str, message: str, n: int) -> dict[str, object]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": f"req_fake{n}",
    }


def _anthropic_error_stream(
    n: int, model: str, error_type: str, code: str, message: str
) -> list[tuple[str | None, object]]:
    start = _anthropic_message(n, model, [], None, Usage(input_tokens=1))
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("error", {"type": "error", "error": {"type": error_type, "message": message}}),
    ]


# -- openai-chat ---------------------------------------------------------------------------
def _chat_usage(usage: Usage) -> dict[str, object]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "audio_tokens": 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": usage.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


_TRUNCATED = frozenset({"length", "max_tokens", "max_output_tokens"})


def _chat_stop(reply: FakeReply) -> str:
    if reply.stop_reason in _TRUNCATED:
        return "length"
    return reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")


def _chat_body(n: int, model: str, reply: FakeReply, usage: Usage) -> dict[str, object]:
    message: dict[str, object] = {
        "role": "assistant",
        "content": reply.text or None,
        "refusal": None,
    }
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return {
        "id": f"chatcmpl-fake{n}",
        "object": "chat.completion",
        "created": _EPOCH + n,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": _chat_stop(reply)}
        ],
        "usage": _chat_usage(usage),
    }


def _chat_stream(
    n: int, model: str, reply: FakeReply, usage: Usage, request: dict[str, object]
) -> list[tuple[str | None, object]]:
    include = request.get("stream_options")
    with_usage = isinstance(include, dict) and include.get("include_usage") is True

    def chunk(delta: dict[str, object], finish: str | None = None) -> tuple[None, object]:
        return (
            None,
            {
                "id": f"chatcmpl-fake{n}",
                "object": "chat.completion.chunk",
                "created": _EPOCH + n,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            },
        )

    events: list[tuple[str | None, object]] = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": p}) for p in _pieces(reply.reasoning)]
    events += [chunk({"content": p}) for p in _pieces(reply.text)]
    for i, call in enumerate(reply.tool_calls):
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
        )
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
            for p in _pieces(call.arguments)
        ]
    events.append(chunk({}, _chat_stop(reply)))
    if with_usage:
        events.append(
            (
                None,
                {
                    "id": f"chatcmpl-fake{n}",
                    "object": "chat.completion.chunk",
                    "created": _EPOCH + n,
                    "model": model,
                    "choices": [],
                    "usage": _chat_usage(usage),
                },
            )
        )
    events.append((None, "[DONE]"))
    return events


# -- openai-responses ----------------------------------------------------------------------
def _responses_usage(usage: Usage) -> dict[str, object]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def _responses_items(n: int, reply: FakeReply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.compaction:
        items.append(
            {
                "type": "compaction",
                "id": f"cmp_fake{n}",
                "encrypted_content": f"gAAAA{_digest(reply.compaction)}",
            }
        )
    if reply.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_fake{n}",
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
                "encrypted_content": f"enc-{_digest(reply.reasoning)}",
            }
        )
    if reply.text or not reply.tool_calls:
        items.append(
            {
                "type": "message",
                "id": f"msg_fake{n}",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
                ],
            }
        )
    for i, call in enumerate(reply.tool_calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_fake{n}_{i}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
        )
    return items


def _responses_object(
    n: int,
    model: str,
    output: list[dict[str, Any]],
    usage: Usage | None,
    status: str,
    incomplete: str = "",
) -> dict[str, object]:
    return {
        "id": f"resp_fake{n}",
        "object": "response",
        "created_at": _EPOCH + n,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": None,
        "metadata": {},
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "usage": _responses_usage(usage) if usage is not None else None,
    }


def _responses_body(n: int, model: str, reply: FakeReply, usage: Usage) -> dict[str, object]:
    incomplete = (
        "max_output_tokens"
        if reply.stop_reason in _TRUNCATED
        else reply.stop_reason
        if reply.stop_reason == "content_filter"
        else ""
    )
    return _responses_object(
        n,
        model,
        _responses_items(n, reply),
        usage,
        "incomplete" if incomplete else "completed",
        incomplete,
    )


def _responses_stream(
    n: int, model: str, reply: FakeReply, usage: Usage, request: dict[str, object]
) -> list[tuple[str | None, object]]:
    events: list[tuple[str | None, object]] = []

    def emit(kind: str, **fields: object) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **fields}))

    start = _responses_object(n, model, [], None, "in_progress")
    emit("response.created", response=start)
    emit("response.in_progress", response=start)
    items = _responses_items(n, reply)
    for index, item in enumerate(items):
        if item["type"] == "message":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            emit(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=empty,
            )
            for piece in _pieces(reply.text):
                emit(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            emit(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=reply.text,
                logprobs=[],
            )
            emit(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=item["content"][0],
            )
        elif item["type"] == "function_call":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for piece in _pieces(item["arguments"]):
                emit(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=piece,
                )
            emit(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=item["arguments"],
                name=item["name"],
            )
        else:
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "summary": []} if item["type"] == "reasoning" else item,
            )
        emit("response.output_item.done", output_index=index, item=item)
    final = _responses_body(n, model, reply, usage)
    emit(
        "response.incomplete" if final["status"] == "incomplete" else "response.completed",
        response=final,
    )
    return events


# -- anthropic -----------------------------------------------------------------------------
def _anthropic_usage(usage: Usage) -> dict[str, object]:
    fresh = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
    return {
        "input_tokens": fresh,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
    }


def _anthropic_blocks(reply: FakeReply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.compaction:
        blocks.append({"type": "compaction", "content": reply.compaction})
    if reply.reasoning:
        blocks.append(
            {
                "type": "thinking",
                "thinking": reply.reasoning,
                "signature": f"sig-{_digest(reply.reasoning)}",
            }
        )
    if reply.text or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": _tool_input(call.arguments),
            }
        )
    return blocks


def _anthropic_stop(reply: FakeReply) -> str:
    if reply.stop_reason in _TRUNCATED:
        return "max_tokens"
    return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")


def _anthropic_message(
    n: int, model: str, content: list[dict[str, Any]], stop: str | None, usage: Usage
) -> dict[str, object]:
    return {
        "id": f"msg_fake{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _anthropic_usage(usage),
    }


def _anthropic_body(n: int, model: str, reply: FakeReply, usage: Usage) -> dict[str, object]:
    return _anthropic_message(n, model, _anthropic_blocks(reply), _anthropic_stop(reply), usage)


def _anthropic_stream(
    n: int, model: str, reply: FakeReply, usage: Usage, request: dict[str, object]
) -> list[tuple[str | None, object]]:
    events: list[tuple[str | None, object]] = []

    def emit(kind: str, **fields: object) -> None:
        events.append((kind, {"type": kind, **fields}))

    start_usage = msgspec.structs.replace(usage, output_tokens=1)
    emit("message_start", message=_anthropic_message(n, model, [], None, start_usage))
    emit("ping")
    for index, block in enumerate(_anthropic_blocks(reply)):
        if block["type"] == "thinking":
            emit(
                "content_block_start",
                index=index,
                content_block={"type": "thinking", "thinking": "", "signature": ""},
            )
            for piece in _pieces(block["thinking"]):
                emit(
                    "content_block_delta",
                    index=index,
                    delta={"type": "thinking_delta", "thinking": piece},
                )
            emit(
                "content_block_delta",
                index=index,
                delta={"type": "signature_delta", "signature": block["signature"]},
            )
        elif block["type"] == "compaction":
            emit(
                "content_block_start",
                index=index,
                content_block={"type": "compaction", "content": ""},
            )
            emit(
                "content_block_delta",
                index=index,
                delta={"type": "compaction_delta", "content": block["content"]},
            )
        elif block["type"] == "text":
            emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for piece in _pieces(block["text"]):
                emit(
                    "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
                )
        else:
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            arguments = json.dumps(block["input"], ensure_ascii=False, separators=(",", ":"))
            for piece in _pieces(arguments):
                emit(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
        emit("content_block_stop", index=index)
    emit(
        "message_delta",
        delta={"stop_reason": _anthropic_stop(reply), "stop_sequence": None},
        usage={"output_tokens": usage.output_tokens},
    )
    emit("message_stop")
    return events


# -- the table -----------------------------------------------------------------------------
_Events = list[tuple[str | None, object]]


@dataclass(frozen=True)
class _Speaker:
    """How the fake server speaks one wire format (what the real API answers).

    Attributes:
        body: the reply body of a request without ``"stream": true``.
        stream: the server-sent events of a streamed reply.
        error: an error body (type, code, message, request number).
        error_stream: the events of an error met while streaming.
        error_types: the API's error type by HTTP status.
        default_error_type: the error type of any other status.
        overflow_code: the error code of a context overflow ("" if the API has none).
        overflow_message: the API's message for a context overflow.
        problems: why the API refuses a request body with a 400 (none: it accepts it).
    """

    body: Callable[[int, str, FakeReply, Usage], dict[str, object]]
    stream: Callable[[int, str, FakeReply, Usage, dict[str, object]], _Events]
    error: Callable[[str, str, str, int], dict[str, object]]
    error_stream: Callable[[int, str, str, str, str], _Events]
    error_types: Mapping[int, str]
    default_error_type: str
    overflow_code: str
    overflow_message: str
    problems: Callable[[object], list[str]] = lambda body: []


#: How the fake server speaks each wire format of the provider registry, by its name
#: (`PROVIDERS`): a new provider is one record here besides its module and registry line.
_SPEAKERS: Mapping[str, _Speaker] = {
    "openai-chat": _Speaker(
        body=_chat_body,
        stream=_chat_stream,
        error=_openai_error,
        error_stream=_chat_error_stream,
        error_types=_OPENAI_TYPES,
        default_error_type="server_error",
        overflow_code="context_length_exceeded",
        overflow_message=(
            "This model's maximum context length is 128000 tokens. However, your "
            "messages resulted in 131072 tokens. Please reduce the length of the "
            "messages."
        ),
        problems=chat_problems,
    ),
    "openai-responses": _Speaker(
        body=_responses_body,
        stream=_responses_stream,
        error=_openai_error,
        error_stream=_responses_error_stream,
        error_types=_OPENAI_TYPES,
        default_error_type="server_error",
        overflow_code="context_length_exceeded",
        overflow_message=(
            "Your input exceeds the context window of this model. Please adjust "
            "your input and try again."
        ),
        problems=responses_problems,
    ),
    "anthropic": _Speaker(
        body=_anthropic_body,
        stream=_anthropic_stream,
        error=_anthropic_error,
        error_stream=_anthropic_error_stream,
        error_types=_ANTHROPIC_TYPES,
        default_error_type="api_error",
        overflow_code="",
        overflow_message="prompt is too long: 210000 tokens > 200000 maximum",
        problems=anthropic_problems,
    ),
}

#: The shape of the 404 for a path no provider has (GET, or an unknown POST path).
_NO_ROUTE = "openai-chat"

"""An agent loop on turnlog: three tools, a scripted local model, every request replayed.

Run it with ``python -m turnlog.adapters.example_agent [--async] [--context-tools]
[STORE_DIR]`` (``--async``: the same loop on `AsyncSession`, awaited on an event
loop; ``--context-tools``: the session also registers turnlog's context tools,
and the scripted model reads a build log whose output reaches it truncated,
calls ``read_output`` for the middle and ``search_history`` for a word from it). Nothing
leaves this machine: the model is a `FakeServer` on 127.0.0.1 speaking the
OpenAI Chat Completions wire format, scripted to list a directory, then read a
file and compute a total in parallel calls, then answer. The loop itself is
what a real orchestrator runs against a real endpoint (change ``base_url``,
``api_key`` and ``model``).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import math
import operator
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import blake3
import httpx
import turnlog
from turnlog import Log, Policy
from turnlog.adapters import AsyncSession, Session
from turnlog.adapters.providers import asend, send
from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer
from turnlog.events import ToolCall
from turnlog.packing import CONTEXT_TOOLS

__all__ = [
    "BUILD_LOG",
    "SCRIPT",
    "TOOLS",
    "arun",
    "calculate",
    "context_script",
    "list_dir",
    "main",
    "read_file",
    "run",
    "run_tool",
]

TOOLS = [
    {
        "name": "list_dir",
        "description": "List the entries of a workspace directory.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a text file of the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "calculate",
        "description": "Evaluate arithmetic: numbers, + - * / ** and ( ).",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
]

#: What the scripted model answers, in order (a real model decides by itself).
SCRIPT = [
    FakeReply(
        text="Let me look at the workspace first.",
        tool_calls=(ToolCall(id="call_1", name="list_dir", arguments='{"path": "."}'),),
    ),
    FakeReply(
        text="Reading the notes and computing the total.",
        tool_calls=(
            ToolCall(id="call_2", name="read_file", arguments='{"path": "notes.txt"}'),
            ToolCall(id="call_3", name="calculate", arguments='{"expression": "3 * 19.5 + 12"}'),
        ),
    ),
    FakeReply(text="Invoice 2024-117 comes to 70.5: 3 hours at 19.50 plus a 12.00 fee."),
]

#: The workspace's build log for ``--context-tools``: 4,000 lines (about 150 KB), one
#: telling line in the middle that the truncated view the model first gets leaves out.
BUILD_LOG = "".join(
    f"[{n:05d}] "
    + (
        "error: SIDEHILL checksum mismatch in vendor/ledger.tar"
        if n == 2500
        else "compiling module ok, no warnings, cache warm"
    )
    + "\n"
    for n in range(1, 4001)
)


def context_script(build_log: str = BUILD_LOG) -> list[FakeReply]:
    """The scripted model of ``--context-tools``: read the log, read its middle back with
    ``read_output`` (by the blob ref the truncation notice names: the blake3 hash of the
    output, which a real model copies from the notice), then ``search_history``."""
    ref = blake3.blake3(build_log.encode()).hexdigest()
    return [
        FakeReply(
            text="Reading the build log.",
            tool_calls=(
                ToolCall(id="call_1", name="read_file", arguments='{"path": "build.log"}'),
            ),
        ),
        FakeReply(
            text="The log is truncated; reading its middle.",
            tool_calls=(
                ToolCall(
                    id="call_2",
                    name="read_output",
                    arguments=json.dumps({"ref": ref, "start_line": 2498, "line_count": 5}),
                ),
            ),
        ),
        FakeReply(
            text="Checking where else SIDEHILL came up.",
            tool_calls=(
                ToolCall(
                    id="call_3", name="search_history", arguments='{"query": "SIDEHILL checksum"}'
                ),
            ),
        ),
        FakeReply(
            text="The build failed at line 2500: a SIDEHILL checksum mismatch in vendor/ledger.tar."
        ),
    ]


_OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def _inside(root: Path, path: str) -> Path:
    target = (root / path).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ValueError(f"{path!r} is outside the workspace")
    return target


def list_dir(root: Path, path: str) -> str:
    """The entries of a workspace directory, one a line (directories end in /)."""
    entries = sorted(_inside(root, path).iterdir())
    return "\n".join(e.name + ("/" if e.is_dir() else "") for e in entries)


def read_file(root: Path, path: str) -> str:
    """The text of a workspace file."""
    return _inside(root, path).read_text(encoding="utf-8")


def calculate(expression: str) -> str:
    """Evaluate arithmetic without ``eval``: numbers, + - * / ** and parentheses.

    A model writes the expression, so it is bounded: at most 1,000 characters nested
    at most 50 deep, every value at most 1e300 in magnitude, and a power is checked
    before it is computed (``9**9**9`` is refused at once, not computed for hours).
    Anything else raises ValueError (or ZeroDivisionError) naming the problem.
    """
    if len(expression) > 1000:
        raise ValueError(f"expression of {len(expression)} characters; at most 1000")

    def checked(x: float) -> float:
        if not isinstance(x, (int, float)) or not abs(x) <= 10**300:
            raise ValueError("a result is not a real number of magnitude at most 1e300")
        return x

    def value(node: ast.AST, depth: int = 0) -> float:
        if depth > 50:
            raise ValueError("expression nested more than 50 deep")
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool)
        ):
            return checked(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left, depth + 1), value(node.right, depth + 1)
            if (
                isinstance(node.op, ast.Pow)
                and left
                and abs(left) != 1
                and right * math.log10(abs(left)) > 300
            ):
                raise ValueError(f"{left:.6g} ** {right:.6g} exceeds 1e300")
            return checked(_OPERATORS[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return checked(_OPERATORS[type(node.op)](value(node.operand, depth + 1)))
        raise ValueError(f"not arithmetic: {ast.unparse(node)[:80]!r}")

    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise ValueError(f"not arithmetic: {exc}") from None
    return str(value(tree.body))


_KIT = frozenset(spec.name for spec in CONTEXT_TOOLS)


def run_tool(root: Path, call: ToolCall) -> tuple[str, bool]:
    """Run one tool call: ``(output, failed)``; a failure is reported to the model."""
    try:
        args = json.loads(call.arguments)
        if call.name == "list_dir":
            return list_dir(root, args["path"]), False
        if call.name == "read_file":
            return read_file(root, args["path"]), False
        if call.name == "calculate":
            return calculate(args["expression"]), False
        return f"unknown tool {call.name!r}", True
    except (ValueError, KeyError, TypeError, OSError, ArithmeticError) as exc:
        return f"{type(exc).__name__}: {exc}", True


def run(
    log: Log,
    workspace: Path,
    base_url: str,
    question: str,
    *,
    echo: Callable[[str], object] = print,
    max_steps: int = 10,
    context_tools: bool = False,
) -> tuple[Session, str]:
    """Drive one session until the model answers: ``(session, final answer)``; with
    ``context_tools``, the session registers the kit and runs the model's calls of it."""
    session = Session(
        log,
        "example",
        model="fake-model",
        format="openai-chat",
        max_tokens=1024,
        policy=Policy(context_window=16_000, output_reserve=1024),
        clock=lambda: time.time_ns() // 1000,
    )
    session.system(
        "base",
        "You are a careful assistant. Look at the workspace with the "
        "tools before you answer, and show how you computed any number.",
    )
    session.tools([*TOOLS, *session.context_tools()] if context_tools else TOOLS)
    session.user(question)
    with httpx.Client() as client:  # one pool: the connection is kept between calls
        for _ in range(max_steps):
            request = session.prepare()  # overflow recovery, packing, the request record
            reply = send(
                session.format,
                request.body,
                api_key="offline",
                base_url=base_url,
                request_seq=request.request_seq,
                client=client,
            )
            answer = session.record(reply)
            echo(
                f"request #{request.request_seq}: {request.packed.tokens} tokens -> "
                f"{answer.text or answer.error!r}"
            )
            if answer.error is not None and not answer.overflow:
                raise RuntimeError(f"the model failed: {answer.error.message}")
            if answer.done:
                return session, answer.text
            for call in answer.tool_calls:
                if context_tools and call.name in _KIT:
                    output = session.call_context_tool(call).output  # appends the result
                else:
                    output, failed = run_tool(workspace, call)
                    session.tool_result(call.id, output, is_error=failed)
                echo(f"  {call.name}({call.arguments}) -> {output.splitlines()[0]!r}")
    raise RuntimeError(f"no answer after {max_steps} steps")


async def arun(
    log: Log,
    workspace: Path,
    base_url: str,
    question: str,
    *,
    echo: Callable[[str], object] = print,
    max_steps: int = 10,
    session_id: str = "example",
    context_tools: bool = False,
) -> tuple[AsyncSession, str]:
    """`run` on asyncio: the same loop, every log and HTTP call awaited."""
    session = AsyncSession(
        log,
        session_id,
        model="fake-model",
        format="openai-chat",
        max_tokens=1024,
        policy=Policy(context_window=16_000, output_reserve=1024),
        clock=lambda: time.time_ns() // 1000,
    )
    await session.system(
        "base",
        "You are a careful assistant. Look at the workspace with "
        "the tools before you answer, and show how you computed any number.",
    )
    await session.tools([*TOOLS, *session.context_tools()] if context_tools else TOOLS)
    await session.user(question)
    async with httpx.AsyncClient() as client:  # I/O on the loop, one pool
        for _ in range(max_steps):
            request = await session.prepare()
            reply = await asend(
                session.format,
                request.body,
                api_key="offline",
                base_url=base_url,
                request_seq=request.request_seq,
                client=client,
            )
            answer = await session.record(reply)
            echo(
                f"request #{request.request_seq}: {request.packed.tokens} tokens -> "
                f"{answer.text or answer.error!r}"
            )
            if answer.error is not None and not answer.overflow:
                raise RuntimeError(f"the model failed: {answer.error.message}")
            if answer.done:
                return session, answer.text
            for call in answer.tool_calls:
                if context_tools and call.name in _KIT:
                    output = (await session.call_context_tool(call)).output
                else:
                    output, failed = run_tool(workspace, call)
                    await session.tool_result(call.id, output, is_error=failed)
                echo(f"  {call.name}({call.arguments}) -> {output.splitlines()[0]!r}")
    raise RuntimeError(f"no answer after {max_steps} steps")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the example (in STORE_DIR, or a temporary store; with ``--async``, on
    `AsyncSession`). An unknown ``--flag`` is a usage error (exit 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m turnlog.adapters.example_agent",
        description="An agent loop on turnlog against a scripted local model; every request "
        "replayed and the session verified.",
    )
    parser.add_argument(
        "store",
        nargs="?",
        default=None,
        metavar="STORE_DIR",
        help="the store to write to (default: a temporary one; a path "
        "beginning with '-' goes after '--')",
    )
    parser.add_argument(
        "--async", dest="use_async", action="store_true", help="run the loop on AsyncSession"
    )
    parser.add_argument(
        "--context-tools",
        dest="context_tools",
        action="store_true",
        help="register turnlog's context tools; the scripted model reads a "
        "truncated build log back with read_output and search_history",
    )
    options = parser.parse_args(argv)  # an unknown --flag is a usage error, not a store name
    use_async = options.use_async
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        (workspace / "notes.txt").write_text(
            "Invoice 2024-117: 3 hours of review at 19.50 per hour, plus a 12.00 travel fee.\n"
        )
        (workspace / "src").mkdir()
        kit = options.context_tools
        if kit:
            (workspace / "build.log").write_text(BUILD_LOG, encoding="utf-8")
        script = context_script() if kit else SCRIPT
        with (
            turnlog.open(options.store or Path(tmp) / "store") as log,
            FakeServer(script, keep_alive=True) as server,
        ):
            question = (
                "Why did the build fail? The log is build.log."
                if kit
                else "What does invoice 2024-117 come to?"
            )
            before = log.head("example")  # a store used before holds earlier requests
            start = before.seq if before is not None else -1
            if use_async:
                done, final = asyncio.run(
                    arun(
                        log, workspace, server.base_url("openai-chat"), question, context_tools=kit
                    )
                )
                session = Session(log, done.id, model=done.model, max_tokens=1024)  # read back
            else:
                session, final = run(
                    log, workspace, server.base_url("openai-chat"), question, context_tools=kit
                )
            print(f"answer: {final}")
            results = [session.replay(seq) for seq in session.requests()]
            for result in results:
                print(f"replay #{result.request_seq}: {'ok' if result.ok else result.difference}")
            explained = session.explain()  # the last request, event by event
            for d in explained.decisions:
                rule = f"{d.rule}: {d.detail}" if d.detail else d.rule  # as `turnlog explain`
                print(f"  {d.seq:>3} {d.kind:<12} {d.decision:<19} {rule}")
            print(f"verify: {'ok' if log.verify(session.id).ok else 'FAILED'}")
            recorded = sum(1 for r in results if r.request_seq > start)
            received = len(server.requests)
            print(
                f"requests: {recorded} recorded, {received} received over "
                f"{server.connections} connection{'' if server.connections == 1 else 's'}"
            )
    return 0 if all(r.ok for r in results) and recorded == received else 1


if __name__ == "__main__":
    sys.exit(main())

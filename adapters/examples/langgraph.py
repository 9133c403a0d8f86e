"""A LangGraph agent on turnlog: checkpoints in the log, every model call packed and recorded.

Run it with ``python -m turnlog.adapters.examples.langgraph STORE`` (``pip install
'turnlog[langgraph]'``). A prebuilt ReAct agent (``create_react_agent``) with two
tools runs one thread against the local `FakeServer` (127.0.0.1, the OpenAI Chat
Completions wire format, scripted to call a tool, then two in parallel, then answer),
reached through langchain-openai's ``ChatOpenAI`` with ``base_url`` pointed at it.
`TurnlogSaver` keeps the graph's checkpoints in the store; `TurnlogModelHooks`
appends what the graph adds before each model call, packs the session, records the
request and hands the packed prompt to the model, then appends the reply. Afterwards
``turnlog --store STORE replay SESSION`` reproduces every recorded request; the
example prints the session, the number of recorded requests and the number of
requests the server received, which are equal.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import turnlog
from turnlog.events import RequestIssued, ToolCall

from ..providers.fakeserver import FakeReply, FakeServer

try:
    from langchain_core.messages import HumanMessage
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from ..integrations.langgraph import TurnlogModelHooks, TurnlogSaver
except ImportError as exc:  # run as a command without the extra: say which one
    if __name__ != "__main__":
        raise
    sys.exit(
        f"python -m turnlog.adapters.examples.langgraph: error: needs the langgraph extra "
        f"(missing {exc.name}): pip install 'turnlog[langgraph]'"
    )

__all__ = [
    "MODEL",
    "SCRIPT",
    "THREAD",
    "main",
    "run",
]

THREAD = "langgraph-invoice"
MODEL = "gpt-4o-mini"

#: What the scripted model answers, in order (a real model decides by itself).
SCRIPT = [
    FakeReply(
        text="Looking up the hours first.",
        tool_calls=(
            ToolCall(id="call_1", name="hours_worked", arguments='{"invoice": "2024-117"}'),
        ),
    ),
    FakeReply(
        text="Pricing the hours and adding the fee.",
        tool_calls=(
            ToolCall(id="call_2", name="multiply", arguments='{"a": 3, "b": 19.5}'),
            ToolCall(id="call_3", name="multiply", arguments='{"a": 12, "b": 1}'),
        ),
    ),
    FakeReply(text="Invoice 2024-117 comes to 70.50: 3 hours at 19.50 plus a 12.00 fee."),
]


@tool
def hours_worked(invoice: str) -> str:
    """The hours booked on an invoice."""
    return json.dumps({"invoice": invoice, "hours": 3, "rate": 19.5, "fee": 12})


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


def run(
    store: str | Path, *, question: str = "What does invoice 2024-117 come to?"
) -> dict[str, Any]:
    """Run the agent on ``store`` against a fresh fake server.

    Returns:
        ``session``, ``answer``, ``requests`` (how many were recorded) and
        ``request_seqs`` (where), ``received`` (how many the server received) and
        ``bodies`` (what it received, decoded).
    """
    from langgraph.prebuilt import create_react_agent

    log = turnlog.open(store)
    try:
        with FakeServer(SCRIPT) as server:
            saver = TurnlogSaver(log)
            hooks = TurnlogModelHooks(log, model=MODEL)
            model = ChatOpenAI(
                model=MODEL,
                base_url=server.base_url("openai-chat"),
                api_key="fake-key",  # type: ignore[arg-type]
                max_retries=0,
            )
            with warnings.catch_warnings():
                # create_react_agent is LangGraph's prebuilt agent; LangGraph 1.x marks it
                # as moved to langchain.agents, which this example does not depend on.
                warnings.simplefilter("ignore", DeprecationWarning)
                agent = create_react_agent(
                    model,
                    [hours_worked, multiply],
                    pre_model_hook=hooks.pre_model,
                    post_model_hook=hooks.post_model,
                    checkpointer=saver,
                )
            config: RunnableConfig = {"configurable": {"thread_id": THREAD}}
            result = agent.invoke({"messages": [HumanMessage(question)]}, config)
            bodies = [r.json() for r in server.requests]
        requests = [e.seq for e in log.read(THREAD) if isinstance(e.body, RequestIssued)]
        answer = result["messages"][-1].content
        return {
            "session": THREAD,
            "answer": answer,
            "requests": len(requests),
            "received": len(bodies),
            "request_seqs": requests,
            "bodies": bodies,
        }
    finally:
        log.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m turnlog.adapters.examples.langgraph [STORE]``."""
    parser = argparse.ArgumentParser(
        prog="python -m turnlog.adapters.examples.langgraph",
        description="A LangGraph agent on turnlog against a scripted local model.",
    )
    parser.add_argument(
        "store",
        nargs="?",
        default=None,
        metavar="STORE",
        help="the store to write to (default: a new temporary directory; a "
        "path beginning with '-' goes after '--')",
    )
    options = parser.parse_args(argv)  # an unknown --flag is a usage error, not a store name
    store = options.store or tempfile.mkdtemp(prefix="turnlog-langgraph-")
    out = run(store)
    print(f"answer: {out['answer']}")
    print(
        f"store: {store}  session: {out['session']}  recorded requests: {out['requests']}  "
        f"requests received: {out['received']}"
    )
    print(f"replay them: turnlog --store {store} replay {out['session']}")
    return 0 if out["requests"] == out["received"] else 1


if __name__ == "__main__":
    sys.exit(main())

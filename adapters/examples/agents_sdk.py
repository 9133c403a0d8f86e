"""An OpenAI Agents SDK agent on turnlog: every model call packed from the log and recorded.

Run it with ``python -m turnlog.adapters.examples.agents_sdk STORE`` (``pip install
'turnlog[openai-agents]'``). An ``Agent`` with one tool, run by ``Runner`` twice
(two user turns), against the local `FakeServer` (127.0.0.1, the Responses wire
format, scripted to call the tool, then answer, then answer again), reached through
``openai.AsyncOpenAI`` with ``base_url`` pointed at it. The agent's model is a
`TurnlogModel`: before each call it appends what the run added, packs the prompt
from the log, records the request, sends the rendered body and records the answer.
Afterwards ``turnlog --store STORE replay SESSION`` reproduces every recorded
request; the example prints the session, the number of recorded requests and the
number of requests the server received, which are equal.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from typing import Any

import turnlog
from turnlog import Packer, Policy, Replayer
from turnlog.events import ToolCall

from ..providers.fakeserver import FakeReply, FakeServer

try:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    from ..integrations.openai_agents import TurnlogModel
except ImportError as exc:  # run as a command without the extra: say which one
    if __name__ != "__main__":
        raise
    sys.exit(
        f"python -m turnlog.adapters.examples.agents_sdk: error: needs the openai-agents "
        f"extra (missing {exc.name}): pip install 'turnlog[openai-agents]'"
    )

__all__ = ["SCRIPT", "SESSION", "main", "run"]

#: The turnlog session the agent writes.
SESSION = "agents-sdk-example"

#: What the scripted model answers, in order.
SCRIPT = [
    FakeReply(
        text="Let me add them.",
        tool_calls=(ToolCall(id="call_1", name="add", arguments='{"a": 19, "b": 23}'),),
    ),
    FakeReply(text="19 + 23 = 42."),
    FakeReply(text="It was 42, computed with the add tool."),
]


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _run(store: str) -> dict[str, Any]:
    set_tracing_disabled(True)
    with turnlog.open(store) as log, FakeServer(SCRIPT) as server:
        client = AsyncOpenAI(
            base_url=server.base_url("openai-responses"), api_key="offline", max_retries=0
        )
        model = TurnlogModel(
            log,
            SESSION,
            model="fake-model",
            openai_client=client,
            policy=Policy(context_window=16_000, output_reserve=1024),
        )
        agent = Agent(
            name="adder", instructions="Add numbers with the tool.", tools=[add], model=model
        )
        config = RunConfig(tracing_disabled=True)
        first = await Runner.run(agent, "What is 19 + 23?", run_config=config)
        second = await Runner.run(agent, "What was the result?", run_config=config)
        await client.close()
        replayer = Replayer(Packer(log))
        requests = replayer.requests(SESSION)
        return {
            "answers": [first.final_output, second.final_output],
            "session": SESSION,
            "requests": len(requests),
            "received": len(server.requests),
            "replayed": all(replayer.replay(SESSION, seq).ok for seq in requests),
        }


def run(store: str) -> dict[str, Any]:
    """Run the agent on ``store``: its answers, the session, the recorded and received
    request counts, and whether every request replayed."""
    return asyncio.run(_run(store))


def main(argv: list[str] | None = None) -> int:
    """``python -m turnlog.adapters.examples.agents_sdk [STORE]``."""
    parser = argparse.ArgumentParser(
        prog="python -m turnlog.adapters.examples.agents_sdk",
        description="An OpenAI Agents SDK agent on turnlog against a scripted local model.",
    )
    parser.add_argument(
        "store",
        nargs="?",
        default=None,
        metavar="STORE",
        help="the store to write to (default: a new temporary directory)",
    )
    options = parser.parse_args(argv)
    store = options.store or tempfile.mkdtemp(prefix="turnlog-agents-sdk-")
    out = run(store)
    for answer in out["answers"]:
        print(f"answer: {answer}")
    print(
        f"store: {store}  session: {out['session']}  recorded requests: {out['requests']}  "
        f"requests received: {out['received']}"
    )
    print(f"replay them: turnlog --store {store} replay {out['session']}")
    return 0 if out["requests"] == out["received"] and out["replayed"] else 1


if __name__ == "__main__":
    sys.exit(main())

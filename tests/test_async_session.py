"""`AsyncSession`: the `Session` facade on asyncio, sharing its core.

Twenty sessions run concurrently on one event loop against the fake provider
server, each with a second writer on the same session that keeps moving the head
(so the conditional writes conflict and retry with `Retries` on the loop); no
event is lost, every request replays, and the requests recorded are the requests
the server received. Then the example agent's ``--async`` mode.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import turnlog
from turnlog import Log, Packer, Policy, Replayer
from turnlog.adapters import AsyncSession, Session, example_agent
from turnlog.adapters.providers import asend, renderer_for
from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer, Received
from turnlog.errors import InvalidEventError
from turnlog.events import (
    NotificationAdded,
    RequestIssued,
    ResponseReceived,
    ToolCall,
    ToolResultAdded,
)

SESSIONS = 20
NOTES = 3


def _respond(received: Received) -> FakeReply:
    """A model that calls the calculator once, then answers with its result."""
    messages = received.json().get("messages")
    assert isinstance(messages, list)
    results = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    if not results:
        return FakeReply(
            text="Computing.",
            tool_calls=(
                ToolCall(id="call_0", name="calculate", arguments='{"expression": "6 * 7"}'),
            ),
        )
    return FakeReply(text=f"The answer is {results[-1]['content']}.")


async def _agent(log: Log, sid: str, base_url: str) -> str:
    session = AsyncSession(
        log,
        sid,
        model="fake-model",
        max_tokens=256,
        policy=Policy(context_window=8_000, output_reserve=256),
    )
    await session.tools(example_agent.TOOLS)
    await session.user(f"What is 6 * 7? ({sid})")
    for _ in range(4):
        request = await session.prepare()
        reply = await asend(
            session.format,
            request.body,
            api_key="offline",
            base_url=base_url,
            request_seq=request.request_seq,
        )
        answer = await session.record(reply)
        if answer.done:
            return answer.text
        for call in answer.tool_calls:
            output = example_agent.calculate(json.loads(call.arguments)["expression"])
            await session.tool_result(call.id, output)
    raise AssertionError(f"{sid}: no answer")


async def _bystander(log: Log, sid: str) -> None:
    """A second writer on the same session: notifications that move the head."""
    other = AsyncSession(log, sid, model="fake-model", max_tokens=256)
    for i in range(NOTES):
        await asyncio.sleep(0)
        await other.notify("monitor", f"tick {i}")


def test_twenty_concurrent_sessions_lose_nothing_and_replay(log: Log) -> None:
    with FakeServer(responder=_respond) as server:
        base_url = server.base_url("openai-chat")

        async def main() -> list[str]:
            sids = [f"s{i:02d}" for i in range(SESSIONS)]
            runs = [_agent(log, sid, base_url) for sid in sids]
            others = [_bystander(log, sid) for sid in sids]
            done = await asyncio.gather(*runs, *others)
            return [d for d in done if d is not None]

        answers = asyncio.run(main())
        received = len(server.requests)
    assert answers == ["The answer is 42."] * SESSIONS
    replayer = Replayer(Packer(log))
    recorded = 0
    for i in range(SESSIONS):
        sid = f"s{i:02d}"
        events = list(log.read(sid))
        kinds = [type(e.body) for e in events]
        assert kinds.count(NotificationAdded) == NOTES
        assert kinds.count(ToolResultAdded) == 1
        assert kinds.count(ResponseReceived) == 2
        assert [e.seq for e in events] == list(range(len(events)))
        assert log.verify(sid).ok
        for seq in replayer.requests(sid):
            record = log.get(sid, seq).body
            assert isinstance(record, RequestIssued)
            render = renderer_for(record, blobs=log.blob)
            assert replayer.replay(sid, seq, render=render).ok
            recorded += 1
    assert recorded == received == 2 * SESSIONS


def test_the_async_shell_makes_the_sync_shells_decisions(log: Log) -> None:
    sync = Session(log, "a", model="fake-model", max_tokens=64)
    sync.user("hi")
    with pytest.raises(InvalidEventError) as sync_error:
        sync.tool_result("call_9", "x")

    async def main() -> None:
        session = AsyncSession(log, "a", model="fake-model", max_tokens=64)
        with pytest.raises(InvalidEventError) as async_error:
            await session.tool_result("call_9", "x")
        assert str(async_error.value) == str(sync_error.value)
        assert await session.system("base", "be brief") is not None
        assert await session.system("base", "be brief") is None  # in force: nothing
        first = await session.user("again", key="k1")
        again = await session.user("again", key="k1")
        assert again.duplicate and again.first_seq == first.first_seq
        assert await session.open_calls() == ()
        request = await session.prepare(key="p1")
        stored = await session.prepare(key="p1")
        assert stored.duplicate and stored.body == request.body
        assert (await session.replay(request.request_seq)).ok
        assert await session.requests() == [request.request_seq]
        head = await session.head()
        assert head is not None and head.seq == request.request_seq

    asyncio.run(main())


def test_the_example_runs_on_asyncsession(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    assert example_agent.main(["--async", str(store)]) == 0
    out = capsys.readouterr().out
    assert "answer: Invoice 2024-117 comes to 70.5" in out
    replays = [line for line in out.splitlines() if line.startswith("replay #")]
    assert len(replays) == 3 and all(line.endswith(": ok") for line in replays)
    assert "requests: 3 recorded, 3 received" in out
    script = str(Path(sys.executable).with_name("turnlog"))
    done = subprocess.run(
        [script, "--store", str(store), "replay", "example"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    with turnlog.open(store, readonly=True) as log:
        assert len(Replayer(Packer(log)).requests("example")) == len(example_agent.SCRIPT)

"""The Agents SDK's model calls in turnlog's request path (`TurnlogModel`) and its example."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest

pytest.importorskip("agents")

import turnlog
from agents import (
    Agent,
    Handoff,
    ModelSettings,
    RunConfig,
    Runner,
    Tool,
    WebSearchTool,
    function_tool,
    handoff,
    set_tracing_disabled,
    tool_namespace,
)
from agents.models.openai_responses import Converter
from agents.retry import ModelRetrySettings, retry_policies
from openai import AsyncOpenAI
from openai.types.shared import Reasoning
from turnlog import Packer, Replayer
from turnlog.adapters.examples import agents_sdk
from turnlog.adapters.integrations.openai_agents import TurnlogModel
from turnlog.adapters.providers import renderer_for
from turnlog.adapters.providers.fakeserver import (
    FakeReply,
    FakeServer,
    http_error,
    overflow_error,
)
from turnlog.errors import InvalidArgumentError, InvalidEventError
from turnlog.events import (
    ProviderErrorReceived,
    RequestIssued,
    ResponseReceived,
    ToolCall,
    UserMessageAdded,
)

set_tracing_disabled(True)


@pytest.mark.parametrize("streamed", [False, True])
def test_every_call_the_sdk_makes_is_packed_recorded_and_sent_as_rendered(
    tmp_path: Path, streamed: bool
) -> None:
    async def main() -> list[Any]:
        with turnlog.open(tmp_path / "store") as log, FakeServer(agents_sdk.SCRIPT) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            agent = Agent(name="adder", instructions="Add.", tools=[agents_sdk.add], model=model)
            config = RunConfig(tracing_disabled=True)
            outputs = []
            for question in ("What is 19 + 23?", "What was the result?"):
                if streamed:
                    result = Runner.run_streamed(agent, question, run_config=config)
                    async for _ in result.stream_events():
                        pass
                else:
                    result = await Runner.run(  # type: ignore[assignment]
                        agent, question, run_config=config
                    )
                outputs.append(result.final_output)
            await client.close()
            replayer = Replayer(Packer(log))
            seqs = replayer.requests("s")
            assert len(seqs) == len(server.requests) == 3
            for seq, received in zip(seqs, server.requests, strict=True):
                record = log.get("s", seq).body
                assert isinstance(record, RequestIssued)
                render = renderer_for(record, blobs=log.blob)
                assert render is not None
                assert replayer.replay("s", seq, render=render).ok
                # What the SDK sent is the body turnlog packed and rendered.
                body = render(replayer.repack("s", seq).prompt)
                assert json.loads(received.body) == json.loads(body)
            kinds = [type(e.body) for e in log.read("s")]
            assert kinds.count(ResponseReceived) == 3
            assert kinds.count(UserMessageAdded) == 2  # a run's later calls add no input twice
            # The second run's request holds the first run: the log is the memory.
            last = server.requests[-1].body.decode()
            assert "What is 19 + 23?" in last and "42" in last
            return outputs

    assert asyncio.run(main()) == ["19 + 23 = 42.", "It was 42, computed with the add tool."]


def test_a_new_run_as_long_as_the_last_call_appends_all_of_its_input(tmp_path: Path) -> None:
    # Taken for a continuation by its length alone, its items were left out.
    async def main() -> tuple[list[str], str]:
        script = [FakeReply(text="Hello."), FakeReply(text="Noted."), FakeReply(text="19 + 23")]
        with turnlog.open(tmp_path / "store") as log, FakeServer(script) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            agent = Agent(name="a", instructions="Be brief.", model=model)
            config = RunConfig(tracing_disabled=True)
            await Runner.run(agent, "hi", run_config=config)  # input and output: 2 items
            two: Any = [
                {"role": "user", "content": "my name is Ada"},
                {"role": "user", "content": "I live in Paris"},
            ]
            await Runner.run(agent, two, run_config=config)
            await Runner.run(agent, "What is 19 + 23?", run_config=config)
            await client.close()
            users = [e.body.text for e in log.read("s") if isinstance(e.body, UserMessageAdded)]
            return users, server.requests[1].body.decode()

    users, second = asyncio.run(main())
    assert users == ["hi", "my name is Ada", "I live in Paris", "What is 19 + 23?"]
    assert "my name is Ada" in second and "I live in Paris" in second


def _retrying(log: turnlog.Log, client: AsyncOpenAI, status: int) -> Agent[Any]:
    """An agent on a `TurnlogModel` of session "s" whose SDK retries once on ``status``."""
    model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
    retry = ModelRetrySettings(max_retries=1, policy=retry_policies.http_status([status]))
    return Agent(
        name="a", instructions="Be brief.", model=model, model_settings=ModelSettings(retry=retry)
    )


def test_a_retried_call_appends_its_input_once(tmp_path: Path) -> None:
    # The SDK's retry of a failed request appended the run's input a second time.
    async def main() -> tuple[list[str], str]:
        script = [http_error(500, "boom"), FakeReply(text="Hello.")]
        with turnlog.open(tmp_path / "store") as log, FakeServer(script) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            agent = _retrying(log, client, 500)
            result = await Runner.run(agent, "hi", run_config=RunConfig(tracing_disabled=True))
            assert result.final_output == "Hello."
            await client.close()
            users = [e.body.text for e in log.read("s") if isinstance(e.body, UserMessageAdded)]
            return users, server.requests[-1].body.decode()

    users, sent = asyncio.run(main())
    assert users == ["hi"]
    assert sent.count('"hi"') == 1


def test_the_example_replays_every_request_it_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert agents_sdk.main([str(store)]) == 0
    out = capsys.readouterr().out
    assert "recorded requests: 3  requests received: 3" in out
    script = str(Path(sys.executable).with_name("turnlog"))
    done = subprocess.run(
        [script, "--store", str(store), "replay", agents_sdk.SESSION],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 of 3 requests reproduced byte for byte" in done.stdout


@pytest.mark.parametrize(
    "item",
    [
        {"type": "item_reference", "id": "msg_1"},
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        },
    ],
)
def test_an_item_turnlog_cannot_pack_is_refused_naming_its_type(
    tmp_path: Path, item: dict[str, Any]
) -> None:
    async def main() -> None:
        with turnlog.open(tmp_path / "store") as log, FakeServer(agents_sdk.SCRIPT) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            agent = Agent(name="a", instructions="Add.", model=model)
            with pytest.raises(InvalidEventError, match=repr(item["type"])):
                await Runner.run(
                    agent,
                    [{"role": "user", "content": "hi"}, item],  # type: ignore[list-item]
                    run_config=RunConfig(tracing_disabled=True),
                )
            await client.close()
            assert server.requests == [] and log.head("s") is None

    asyncio.run(main())


def test_a_run_whose_input_holds_a_compaction_item_is_packed_recorded_and_replayed(
    tmp_path: Path,
) -> None:
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA+/=é opaque"}
    earlier: list[dict[str, Any]] = [
        {"role": "user", "content": "an old question"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "an old answer", "annotations": []}],
        },
    ]

    async def main() -> None:
        with turnlog.open(tmp_path / "store") as log, FakeServer(agents_sdk.SCRIPT) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            agent = Agent(name="adder", instructions="Add.", tools=[agents_sdk.add], model=model)
            run_input: list[Any] = [
                *earlier,
                compaction,
                {"role": "user", "content": "What is 19 + 23?"},
            ]
            result = await Runner.run(agent, run_input, run_config=RunConfig(tracing_disabled=True))
            await client.close()
            assert result.final_output == "19 + 23 = 42."
            replayer = Replayer(Packer(log))
            seqs = replayer.requests("s")
            assert len(seqs) == len(server.requests) == 2
            for seq, received in zip(seqs, server.requests, strict=True):
                record = log.get("s", seq).body
                assert isinstance(record, RequestIssued)
                render = renderer_for(record, blobs=log.blob)
                assert render is not None and replayer.replay("s", seq, render=render).ok
                sent = received.json()["input"]
                assert isinstance(sent, list) and sent[0] == compaction
                assert b"an old question" not in received.body  # replaced by the item
            # The log keeps what the item replaced.
            assert "an old question" in [
                e.body.text
                for e in log.read("s", kinds=["user"])
                if isinstance(e.body, UserMessageAdded)
            ]

    asyncio.run(main())


def test_a_reply_holding_a_compaction_is_recorded_as_sent_and_the_next_call_starts_with_it(
    tmp_path: Path,
) -> None:
    script = [
        FakeReply(
            text="Let me add them.",
            compaction="Summary: asked to add",
            tool_calls=(ToolCall(id="call_1", name="add", arguments='{"a": 19, "b": 23}'),),
        ),
        FakeReply(text="19 + 23 = 42."),
    ]

    async def main() -> None:
        with turnlog.open(tmp_path / "store") as log, FakeServer(script) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            agent = Agent(name="adder", instructions="Add.", tools=[agents_sdk.add], model=model)
            result = await Runner.run(
                agent, "What is 19 + 23?", run_config=RunConfig(tracing_disabled=True)
            )
            await client.close()
            assert result.final_output == "19 + 23 = 42."
            sent = server.requests[1].json()["input"]
            assert isinstance(sent, list)
            # The item as the server sent it (no field the SDK's model adds), first.
            assert sent[0] == {
                "type": "compaction",
                "id": "cmp_fake1",
                "encrypted_content": sent[0]["encrypted_content"],
            }
            assert b"What is 19 + 23?" not in server.requests[1].body
            replayer = Replayer(Packer(log))
            assert all(replayer.replay("s", seq).ok for seq in replayer.requests("s"))

    asyncio.run(main())


class _Sum(pydantic.BaseModel):
    total: int


def test_model_settings_output_schema_and_handoffs_reach_the_body_and_replay(
    tmp_path: Path,
) -> None:
    """The call's settings become the body's fields as the SDK's own Responses model
    sends them, recorded with the request (replay renders the same bytes); headers
    go to the client only; a handoff is a tool the model sees and calls."""
    script = [
        FakeReply(
            text="", tool_calls=(ToolCall(id="call_h", name="transfer_to_checker", arguments="{}"),)
        ),
        FakeReply(text='{"total": 42}'),
    ]
    settings = ModelSettings(
        temperature=0.25,
        top_p=0.5,
        tool_choice="auto",
        parallel_tool_calls=False,
        max_tokens=300,
        metadata={"run": "t1"},
        store=False,
        reasoning=Reasoning(effort="low"),
        top_logprobs=2,
        truncation="auto",
        extra_args={"service_tier": "flex"},
        extra_headers={"X-Turnlog-Test": "yes"},
    )

    async def main() -> tuple[Any, list[dict[str, Any]], list[dict[str, str]]]:
        with turnlog.open(tmp_path / "store") as log, FakeServer(script) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            checker = Agent(
                name="checker",
                instructions="Check the sum.",
                model=model,
                model_settings=settings,
                output_type=_Sum,
            )
            front = Agent(
                name="front",
                instructions="Hand off.",
                model=model,
                model_settings=settings,
                handoffs=[checker],
            )
            result = await Runner.run(
                front, "What is 19 + 23?", run_config=RunConfig(tracing_disabled=True)
            )
            await client.close()
            replayer = Replayer(Packer(log))
            for seq in replayer.requests("s"):
                record = log.get("s", seq).body
                assert isinstance(record, RequestIssued)
                render = renderer_for(record, blobs=log.blob)
                assert render is not None
                assert replayer.replay("s", seq, render=render).ok
            bodies = [json.loads(r.body) for r in server.requests]
            return result.final_output, bodies, [r.headers for r in server.requests]

    output, bodies, headers = asyncio.run(main())
    assert output == _Sum(total=42)
    first, second = bodies
    for body in bodies:
        assert body["temperature"] == 0.25 and body["top_p"] == 0.5
        assert body["tool_choice"] == "auto" and body["truncation"] == "auto"
        assert body["max_output_tokens"] == 300
        assert body["metadata"] == {"run": "t1"} and body["store"] is False
        assert body["reasoning"] == {"effort": "low"}
        assert body["top_logprobs"] == 2 and body["service_tier"] == "flex"
        assert body["include"] == ["message.output_text.logprobs"]
    assert [t["name"] for t in first["tools"]] == ["transfer_to_checker"]
    assert first["parallel_tool_calls"] is False
    assert "text" not in first
    assert second["text"]["format"]["type"] == "json_schema"
    assert second["text"]["format"]["schema"]["properties"]["total"]["type"] == "integer"
    assert all(h.get("x-turnlog-test") == "yes" for h in headers)
    assert all("x-turnlog-test" not in json.dumps(b).lower() for b in bodies)


def _refused(
    tmp_path: Path, agent: Callable[[TurnlogModel], Agent[Any]], **run: Any
) -> tuple[BaseException, int, int]:
    """Run ``agent`` (given the model) once, expecting it refused: the error, the
    requests the server received and the session's head seq (-1: nothing appended)."""

    async def main() -> tuple[BaseException, int, int]:
        with turnlog.open(tmp_path / "store") as log, FakeServer(agents_sdk.SCRIPT) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(
                log, "s", model="fake-model", openai_client=client, policy=turnlog.Policy()
            )
            with pytest.raises(Exception) as caught:
                await Runner.run(
                    agent(model), "hi", run_config=RunConfig(tracing_disabled=True), **run
                )
            await client.close()
            head = log.head("s")
            return caught.value, len(server.requests), -1 if head is None else head.seq

    return asyncio.run(main())


@pytest.mark.parametrize(
    "case",
    [
        "hosted tool",
        "max_tokens above the reserve",
        "a field turnlog renders",
        "previous_response_id",
        "conversation_id",
        "prompt",
    ],
)
def test_what_turnlog_cannot_send_as_asked_is_refused_before_anything_is_appended(
    tmp_path: Path, case: str
) -> None:
    def agent(model: TurnlogModel) -> Agent[Any]:
        if case == "hosted tool":
            return Agent(name="a", model=model, tools=[WebSearchTool()])
        if case == "a field turnlog renders":
            return Agent(
                name="a", model=model, model_settings=ModelSettings(extra_args={"input": []})
            )
        if case == "prompt":
            return Agent(name="a", model=model, prompt={"id": "pmpt_1", "version": "2"})
        if case.endswith("_id"):
            return Agent(name="a", model=model)
        reserve = turnlog.Policy().resolved().output_reserve
        return Agent(name="a", model=model, model_settings=ModelSettings(max_tokens=reserve + 1))

    server_state: dict[str, Any] = (
        {case: "resp_1" if case == "previous_response_id" else "conv_1"}
        if case.endswith("_id")
        else {}
    )
    error, sent, head = _refused(tmp_path, agent, **server_state)
    assert sent == 0 and head == -1
    if case == "hosted tool":
        assert isinstance(error, InvalidEventError)
        assert "WebSearchTool" in str(error)
    elif case == "a field turnlog renders":
        assert isinstance(error, InvalidArgumentError) and "'input'" in str(error)
    elif case in ("previous_response_id", "conversation_id", "prompt"):
        assert isinstance(error, InvalidArgumentError)
        assert f"was given {case}:" in str(error) and "nothing was appended" in str(error)
    else:
        assert isinstance(error, InvalidArgumentError)
        assert "output_reserve" in str(error) and "max_tokens" in str(error)


@function_tool(strict_mode=False)
def lookup(key: str, default: str = "") -> str:
    """Look a key up."""
    return default


def test_the_tools_are_those_the_sdks_own_model_sends_strict_ones_strict(tmp_path: Path) -> None:
    # Sent with "strict": false whatever the tool said, they let the provider take
    # arguments the schema refuses.
    checker = Agent(name="checker", instructions="Check.")
    tools: list[Tool] = [agents_sdk.add, lookup]
    handoffs: list[Agent[Any] | Handoff[Any, Any]] = [handoff(checker)]

    async def main() -> list[dict[str, Any]]:
        with turnlog.open(tmp_path / "store") as log, FakeServer(agents_sdk.SCRIPT) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            agent = Agent(name="a", model=model, tools=tools, handoffs=handoffs)
            await Runner.run(agent, "What is 19 + 23?", run_config=RunConfig(tracing_disabled=True))
            await client.close()
            replayer = Replayer(Packer(log))
            for seq in replayer.requests("s"):
                record = log.get("s", seq).body
                assert isinstance(record, RequestIssued)
                assert replayer.replay("s", seq, render=renderer_for(record)).ok
            return [json.loads(r.body) for r in server.requests]

    bodies = asyncio.run(main())
    sdk = Converter.convert_tools(tools, [h for h in handoffs if isinstance(h, Handoff)]).tools
    assert [t["strict"] for t in bodies[0]["tools"]] == [True, False, True]
    for body in bodies:
        assert body["tools"] == json.loads(json.dumps(sdk))


def _echo(text: str) -> str:
    """Echo the text."""
    return text


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: function_tool(_echo, defer_loading=True), "defer_loading"),
        (lambda: function_tool(_echo, allowed_callers=["direct"]), "allowed_callers"),
        (
            lambda: function_tool(_echo, output_json_schema={"type": "object", "properties": {}}),
            "output_json_schema",
        ),
        (
            lambda: tool_namespace(name="io", description="I/O.", tools=[function_tool(_echo)])[0],
            "a tool namespace",
        ),
    ],
)
def test_a_tool_field_turnlog_does_not_send_is_refused_not_dropped(
    tmp_path: Path, make: Callable[[], Tool], field: str
) -> None:
    # The SDK's own model sends each; turnlog's request would have left it out.
    error, sent, head = _refused(
        tmp_path, lambda model: Agent(name="a", model=model, tools=[make()])
    )
    assert sent == 0 and head == -1
    assert isinstance(error, InvalidEventError)
    assert f"'_echo' sets {field}," in str(error)


def test_a_strict_handoff_whose_schema_the_api_refuses_appends_nothing(tmp_path: Path) -> None:
    # Checked only when the tools were set, after the input and instructions were in.
    async def invoke(context: Any, arguments: str) -> Agent[Any]:
        return Agent(name="b")

    loose = Handoff(
        tool_name="transfer_to_b",
        tool_description="Hand off.",
        input_json_schema={"type": "object", "properties": {"why": {"type": "string"}}},
        on_invoke_handoff=invoke,
        agent_name="b",
    )

    error, sent, head = _refused(
        tmp_path, lambda model: Agent(name="a", instructions="Hi.", model=model, handoffs=[loose])
    )
    assert sent == 0 and head == -1
    assert isinstance(error, InvalidEventError)
    assert "'transfer_to_b' is strict" in str(error) and "additionalProperties" in str(error)


def test_a_streamed_run_continuing_a_stored_response_is_refused(tmp_path: Path) -> None:
    async def main() -> tuple[BaseException, int, int]:
        with turnlog.open(tmp_path / "store") as log, FakeServer(agents_sdk.SCRIPT) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            result = Runner.run_streamed(
                Agent(name="a", model=model),
                "hi",
                run_config=RunConfig(tracing_disabled=True),
                previous_response_id="resp_1",
            )
            with pytest.raises(InvalidArgumentError) as caught:
                async for _ in result.stream_events():
                    pass
            await client.close()
            head = log.head("s")
            return caught.value, len(server.requests), -1 if head is None else head.seq

    error, sent, head = asyncio.run(main())
    assert sent == 0 and head == -1
    assert "was given previous_response_id:" in str(error)


def test_a_provider_error_is_recorded_and_an_overflow_makes_the_next_call_recover(
    tmp_path: Path,
) -> None:
    """An error status is recorded as the provider's error before the SDK sees it;
    after a context overflow, the SDK's retry is packed as a recovery."""
    script = [overflow_error(), FakeReply(text="Recovered.")]

    async def main() -> tuple[str, list[type[Any]], list[bool], list[bool]]:
        with turnlog.open(tmp_path / "store") as log, FakeServer(script) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            agent = _retrying(log, client, 400)
            result = await Runner.run(agent, "hi", run_config=RunConfig(tracing_disabled=True))
            await client.close()
            kinds = [type(e.body) for e in log.read("s")]
            replayer = Replayer(Packer(log))
            replayed = []
            stages = []
            for seq in replayer.requests("s"):
                record = log.get("s", seq).body
                assert isinstance(record, RequestIssued)
                render = renderer_for(record, blobs=log.blob)
                replayed.append(replayer.replay("s", seq, render=render).ok)
                stages.append(replayer.repack("s", seq).recovery)
            return str(result.final_output), kinds, replayed, stages

    output, kinds, replayed, stages = asyncio.run(main())
    assert output == "Recovered."
    assert kinds.count(ProviderErrorReceived) == 1
    assert kinds.index(ProviderErrorReceived) < kinds.index(ResponseReceived)
    # (too short a session to compact: the recovery pack itself is the recovery)
    assert stages == [False, True]
    assert replayed == [True, True]


@function_tool
def web_search(query: str) -> str:
    """Search the project's own notes (a function tool, not the hosted one)."""
    return f"notes on {query}"


def test_a_field_newer_than_the_client_and_a_function_named_like_a_hosted_tool(
    tmp_path: Path,
) -> None:
    """``extra_body`` fields the client's ``create`` does not name still reach the body
    (through its own ``extra_body``), and ``tool_choice`` naming a function tool that
    shares a hosted tool's name chooses the function, as the SDK's own model does."""
    settings = ModelSettings(tool_choice="web_search", extra_body={"some_new_field": 1})

    async def main() -> tuple[dict[str, Any], bool]:
        with turnlog.open(tmp_path / "store") as log, FakeServer([FakeReply(text="ok")]) as server:
            client = AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="k", max_retries=0
            )
            model = TurnlogModel(log, "s", model="fake-model", openai_client=client)
            agent = Agent(name="a", model=model, tools=[web_search], model_settings=settings)
            await Runner.run(agent, "hi", run_config=RunConfig(tracing_disabled=True))
            await client.close()
            replayer = Replayer(Packer(log))
            (seq,) = replayer.requests("s")
            record = log.get("s", seq).body
            assert isinstance(record, RequestIssued)
            render = renderer_for(record, blobs=log.blob)
            assert render is not None
            same = json.loads(render(replayer.repack("s", seq).prompt)) == json.loads(
                server.requests[0].body
            )
            return json.loads(server.requests[0].body), same

    body, same = asyncio.run(main())
    assert body["some_new_field"] == 1
    assert body["tool_choice"] == {"type": "function", "name": "web_search"}
    assert same

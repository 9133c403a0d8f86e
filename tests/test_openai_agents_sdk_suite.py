"""The OpenAI Agents SDK's own session tests, run against `TurnlogSession`.

Source: ``tests/memory/test_session.py`` of ``openai/openai-agents-python`` (the
SDK's tests for its ``SQLiteSession``), with every test kept and
``SQLiteSession(session_id, db_path)`` replaced by ``TurnlogSession(log,
session_id)`` on an LMDB store in the same temporary directory. Adaptations:

1. The SDK's test helpers ``tests.fake_model.FakeModel`` and
   ``tests.test_responses.get_text_message`` are not shipped in its package: the
   model is the SDK's ``OpenAIResponsesModel`` against turnlog's local fake
   server (`ServedModel`); ``model.set_next_output([get_text_message(t)])``
   scripts the reply ``t`` and ``model.last_turn_args["input"]`` is the
   ``input`` of the last request the server received.
2. ``pytest.mark.asyncio`` tests run their body with ``asyncio.run`` (the suite
   runs without pytest-asyncio).
3. ``test_sqlite_session_close_closes_worker_thread_connections`` reads
   SQLite's connection set: here ``close()`` is checked by what it promises
   instead (a closed session refuses ``add_items`` and ``get_items``).
4. ``test_sqlite_session_file_lock_is_shared_across_instances`` reads
   SQLite's process-wide file-lock table: kept is what that lock is for (two
   sessions on one store, written concurrently, each reads back its own items).
5. The default-settings tests construct with no store path
   (``SQLiteSession("id")`` is in memory): here an in-memory log.
6. Added: a dict as ``session_settings`` is normalized and an unknown key
   raises ``TypeError`` (the SDK's ``SessionSettings`` coercion).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

import turnlog
from agents import Agent, RunConfig, Runner, TResponseInputItem, set_tracing_disabled
from agents.memory import SessionABC, SessionSettings
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI
from turnlog import Log
from turnlog.adapters.integrations.openai_agents import TurnlogSession
from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer

set_tracing_disabled(True)

_LOGS: list[Log] = []


def SQLiteSession(
    session_id: str, db_path: Path | None = None, session_settings: SessionSettings | None = None
) -> TurnlogSession:
    """The SDK tests' constructor, on a turnlog store next to where the db would be."""
    log = turnlog.open(db_path.with_suffix(".store") if db_path is not None else ":memory:")
    _LOGS.append(log)
    return TurnlogSession(log, session_id, session_settings=session_settings)


@pytest.fixture(autouse=True)
def _close_logs() -> Iterator[None]:
    yield
    while _LOGS:
        _LOGS.pop().close()


class ServedModel(OpenAIResponsesModel):
    """The SDK's ``OpenAIResponsesModel`` against the fake server, with FakeModel's API."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        super().__init__(
            model="fake-model",
            openai_client=AsyncOpenAI(
                base_url=server.base_url("openai-responses"), api_key="test", max_retries=0
            ),
        )

    def set_next_output(self, texts: list[str]) -> None:
        self.server.script(*(FakeReply(text=t) for t in texts))

    @property
    def last_turn_args(self) -> dict[str, Any]:
        return {"input": self.server.requests[-1].json()["input"]}


_SERVERS: list[FakeServer] = []


def FakeModel() -> ServedModel:
    server = FakeServer().start()
    _SERVERS.append(server)
    return ServedModel(server)


@pytest.fixture(autouse=True)
def _close_servers() -> Iterator[None]:
    yield
    while _SERVERS:
        _SERVERS.pop().close()


def get_text_message(text: str) -> str:
    return text


def run(body: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """``pytest.mark.asyncio``: run the test's body on a fresh event loop."""

    @functools.wraps(body)
    def test(*args: Any, **kwargs: Any) -> None:
        asyncio.run(body(*args, **kwargs))

    return test


def _run_sync_wrapper(agent: Agent[Any], input_data: Any, **kwargs: Any) -> Any:
    """Wrapper for run_sync that properly sets up an event loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, input_data, **kwargs)
    finally:
        loop.close()


async def run_agent_async(
    runner_method: str, agent: Agent[Any], input_data: Any, **kwargs: Any
) -> Any:
    """Helper function to run agent with different methods."""
    if runner_method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    if runner_method == "run_sync":
        return await asyncio.to_thread(_run_sync_wrapper, agent, input_data, **kwargs)
    if runner_method == "run_streamed":
        result = Runner.run_streamed(agent, input_data, **kwargs)
        async for _event in result.stream_events():
            pass
        return result
    raise ValueError(f"Unknown runner method: {runner_method}")


METHODS = ["run", "run_sync", "run_streamed"]


def test_turnlog_session_is_an_sdk_session() -> None:
    assert isinstance(SQLiteSession("abc"), SessionABC)


@pytest.mark.parametrize("runner_method", METHODS)
@run
async def test_session_memory_basic_functionality_parametrized(runner_method: str) -> None:
    """Test basic session memory functionality across all runner methods."""
    with tempfile.TemporaryDirectory() as temp_dir:
        db_path = Path(temp_dir) / "test_memory.db"
        session = SQLiteSession("test_session_123", db_path)
        model = FakeModel()
        agent = Agent(name="test", model=model)
        model.set_next_output([get_text_message("San Francisco")])
        result1 = await run_agent_async(
            runner_method, agent, "What city is the Golden Gate Bridge in?", session=session
        )
        assert result1.final_output == "San Francisco"
        model.set_next_output([get_text_message("California")])
        result2 = await run_agent_async(
            runner_method, agent, "What state is it in?", session=session
        )
        assert result2.final_output == "California"
        last_input = model.last_turn_args["input"]
        assert len(last_input) > 1
        session.close()


@pytest.mark.parametrize("runner_method", METHODS)
@run
async def test_session_memory_with_explicit_instance_parametrized(runner_method: str) -> None:
    """Test session memory with an explicit session instance across all runner methods."""
    with tempfile.TemporaryDirectory() as temp_dir:
        db_path = Path(temp_dir) / "test_memory.db"
        session = SQLiteSession("test_session_456", db_path)
        model = FakeModel()
        agent = Agent(name="test", model=model)
        model.set_next_output([get_text_message("Hello")])
        result1 = await run_agent_async(runner_method, agent, "Hi there", session=session)
        assert result1.final_output == "Hello"
        model.set_next_output([get_text_message("I remember you said hi")])
        result2 = await run_agent_async(
            runner_method, agent, "Do you remember what I said?", session=session
        )
        assert result2.final_output == "I remember you said hi"
        session.close()


@pytest.mark.parametrize("runner_method", METHODS)
@run
async def test_session_memory_disabled_parametrized(runner_method: str) -> None:
    """Test that session memory is disabled when session=None across all runner methods."""
    model = FakeModel()
    agent = Agent(name="test", model=model)
    model.set_next_output([get_text_message("Hello")])
    result1 = await run_agent_async(runner_method, agent, "Hi there")
    assert result1.final_output == "Hello"
    model.set_next_output([get_text_message("I don't remember")])
    result2 = await run_agent_async(runner_method, agent, "Do you remember what I said?")
    assert result2.final_output == "I don't remember"
    last_input = model.last_turn_args["input"]
    assert len(last_input) == 1


@pytest.mark.parametrize("runner_method", METHODS)
@run
async def test_session_memory_different_sessions_parametrized(runner_method: str) -> None:
    """Test that different session IDs maintain separate conversation histories."""
    with tempfile.TemporaryDirectory() as temp_dir:
        db_path = Path(temp_dir) / "test_memory.db"
        model = FakeModel()
        agent = Agent(name="test", model=model)
        session_1 = SQLiteSession("session_1", db_path)
        model.set_next_output([get_text_message("I like cats")])
        result1 = await run_agent_async(runner_method, agent, "I like cats", session=session_1)
        assert result1.final_output == "I like cats"
        session_2 = SQLiteSession("session_2", Path(temp_dir) / "test_memory2.db")
        model.set_next_output([get_text_message("I like dogs")])
        result2 = await run_agent_async(runner_method, agent, "I like dogs", session=session_2)
        assert result2.final_output == "I like dogs"
        model.set_next_output([get_text_message("Yes, you mentioned cats")])
        result3 = await run_agent_async(
            runner_method, agent, "What did I say I like?", session=session_1
        )
        assert result3.final_output == "Yes, you mentioned cats"
        session_1.close()
        session_2.close()


@run
async def test_sqlite_session_memory_direct() -> None:
    """Test the session class directly."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession("direct_test", Path(temp_dir) / "test_direct.db")
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
        ]
        await session.add_items(items)
        retrieved = await session.get_items()
        assert len(retrieved) == 2
        assert retrieved[0].get("role") == "user"
        assert retrieved[0].get("content") == "Hello"
        assert retrieved[1].get("role") == "assistant"
        assert retrieved[1].get("content") == "Hi there!"
        await session.clear_session()
        assert len(await session.get_items()) == 0
        session.close()


@run
async def test_session_close_refuses_further_use() -> None:
    """Adaptation 3: what close() promises, instead of SQLite's connection set."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession("worker_thread_close", Path(temp_dir) / "close.db")
        await session.add_items([{"role": "user", "content": "Hello"}])
        session.close()
        with pytest.raises(RuntimeError, match="closed"):
            await session.add_items([{"role": "user", "content": "again"}])
        with pytest.raises(RuntimeError, match="closed"):
            await session.get_items()


@run
async def test_sqlite_session_memory_pop_item() -> None:
    """Test pop_item functionality."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession("pop_test", Path(temp_dir) / "test_pop.db")
        assert await session.pop_item() is None
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there!"},
            {"role": "user", "content": "How are you?"},
        ]
        await session.add_items(items)
        assert len(await session.get_items()) == 3
        popped = await session.pop_item()
        assert popped is not None
        assert popped.get("role") == "user"
        assert popped.get("content") == "How are you?"
        retrieved_after_pop = await session.get_items()
        assert len(retrieved_after_pop) == 2
        assert retrieved_after_pop[-1].get("content") == "Hi there!"
        popped2 = await session.pop_item()
        assert popped2 is not None
        assert popped2.get("role") == "assistant"
        assert popped2.get("content") == "Hi there!"
        popped3 = await session.pop_item()
        assert popped3 is not None
        assert popped3.get("role") == "user"
        assert popped3.get("content") == "Hello"
        assert await session.pop_item() is None
        assert len(await session.get_items()) == 0
        session.close()


@run
async def test_session_memory_pop_different_sessions() -> None:
    """Test that pop_item only affects the specified session."""
    with tempfile.TemporaryDirectory() as temp_dir:
        log = turnlog.open(Path(temp_dir) / "test_pop_sessions.store")
        _LOGS.append(log)
        session_1 = TurnlogSession(log, "session_1")
        session_2 = TurnlogSession(log, "session_2")
        await session_1.add_items([{"role": "user", "content": "Session 1 message"}])
        await session_2.add_items(
            [
                {"role": "user", "content": "Session 2 message 1"},
                {"role": "user", "content": "Session 2 message 2"},
            ]
        )
        popped = await session_2.pop_item()
        assert popped is not None
        assert popped.get("content") == "Session 2 message 2"
        session_1_items = await session_1.get_items()
        assert len(session_1_items) == 1
        assert session_1_items[0].get("content") == "Session 1 message"
        session_2_items = await session_2.get_items()
        assert len(session_2_items) == 1
        assert session_2_items[0].get("content") == "Session 2 message 1"
        session_1.close()
        session_2.close()


@run
async def test_sqlite_session_get_items_with_limit() -> None:
    """Test get_items with limit parameter."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession("count_test", Path(temp_dir) / "test_count.db")
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "Message 1"},
            {"role": "assistant", "content": "Response 1"},
            {"role": "user", "content": "Message 2"},
            {"role": "assistant", "content": "Response 2"},
            {"role": "user", "content": "Message 3"},
            {"role": "assistant", "content": "Response 3"},
        ]
        await session.add_items(items)
        all_items = await session.get_items()
        assert len(all_items) == 6
        assert all_items[0].get("content") == "Message 1"
        assert all_items[-1].get("content") == "Response 3"
        latest_2 = await session.get_items(limit=2)
        assert [i.get("content") for i in latest_2] == ["Message 3", "Response 3"]
        latest_4 = await session.get_items(limit=4)
        assert [i.get("content") for i in latest_4] == [
            "Message 2",
            "Response 2",
            "Message 3",
            "Response 3",
        ]
        latest_10 = await session.get_items(limit=10)
        assert len(latest_10) == 6
        assert len(await session.get_items(limit=0)) == 0
        session.close()


@pytest.mark.parametrize("runner_method", METHODS)
@run
async def test_session_memory_appends_list_input_by_default(runner_method: str) -> None:
    """Test that list inputs are appended to session history when no callback is provided."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession(
            "test_validation_parametrized", Path(temp_dir) / "test_validation.db"
        )
        model = FakeModel()
        agent = Agent(name="test", model=model)
        initial_history: list[TResponseInputItem] = [
            {"role": "user", "content": "Earlier message"},
            {"role": "assistant", "content": "Saved reply"},
        ]
        await session.add_items(initial_history)
        list_input = [{"role": "user", "content": "Test message"}]
        model.set_next_output([get_text_message("This should run")])
        await run_agent_async(runner_method, agent, list_input, session=session)
        assert model.last_turn_args["input"] == initial_history + list_input
        session.close()


@pytest.mark.parametrize("runner_method", METHODS)
@run
async def test_session_callback_prepared_input(runner_method: str) -> None:
    """Test if the user passes a list of items and want to append them."""
    with tempfile.TemporaryDirectory() as temp_dir:
        model = FakeModel()
        agent = Agent(name="test", model=model)
        session = SQLiteSession("session_1", Path(temp_dir) / "test_memory.db")
        initial_history: list[TResponseInputItem] = [
            {"role": "user", "content": "Hello there."},
            {"role": "assistant", "content": "Hi, I'm here to assist you."},
        ]
        try:
            await session.add_items(initial_history)

            def filter_assistant_messages(history: list[Any], new_input: list[Any]) -> list[Any]:
                return [item for item in history if item["role"] == "user"] + new_input

            new_turn_input = [{"role": "user", "content": "What your name?"}]
            model.set_next_output([get_text_message("I'm gpt-4o")])
            await run_agent_async(
                runner_method,
                agent,
                new_turn_input,
                session=session,
                run_config=RunConfig(session_input_callback=filter_assistant_messages),
            )
            expected_model_input = [initial_history[0], new_turn_input[0]]
            assert len(model.last_turn_args["input"]) == 2
            assert model.last_turn_args["input"] == expected_model_input
        finally:
            session.close()


@run
async def test_sqlite_session_unicode_content() -> None:
    """Test that session correctly stores and retrieves unicode/non-ASCII content."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession("unicode_test", Path(temp_dir) / "test_unicode.db")
        await session.add_items(
            [
                {"role": "user", "content": "こんにちは"},
                {"role": "assistant", "content": "😊👍"},
                {"role": "user", "content": "Привет"},
            ]
        )
        retrieved = await session.get_items()
        assert [i.get("content") for i in retrieved] == ["こんにちは", "😊👍", "Привет"]
        session.close()


@run
async def test_sqlite_session_special_characters_and_sql_injection() -> None:
    """Test that session safely stores and retrieves items with special characters."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession("special_chars_test", Path(temp_dir) / "test_special.db")
        items: list[TResponseInputItem] = [
            {"role": "user", "content": "O'Reilly"},
            {"role": "assistant", "content": "DROP TABLE sessions;"},
            {"role": "user", "content": ('"SELECT * FROM users WHERE name = "admin";"')},
            {"role": "assistant", "content": "Robert'); DROP TABLE students;--"},
            {"role": "user", "content": "Normal message"},
        ]
        await session.add_items(items)
        retrieved = await session.get_items()
        assert [i.get("content") for i in retrieved] == [i.get("content") for i in items]
        session.close()


@run
async def test_sqlite_session_concurrent_access() -> None:
    """Test concurrent access to the same session to verify data integrity."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession("concurrent_test", Path(temp_dir) / "test_concurrent.db")
        items: list[TResponseInputItem] = [
            {"role": "user", "content": f"Message {i}"} for i in range(10)
        ]

        def add_item(item: TResponseInputItem) -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            loop.run_until_complete(session.add_items([item]))
            loop.close()

        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as executor:
            list(executor.map(add_item, items))
        retrieved = await session.get_items()
        contents = {c for item in retrieved for c in [item.get("content")] if isinstance(c, str)}
        assert contents == {f"Message {i}" for i in range(10)}
        session.close()


@run
async def test_sessions_on_one_store_written_concurrently() -> None:
    """Adaptation 4: two sessions on one store, written at once, each reads its own."""
    with tempfile.TemporaryDirectory() as temp_dir:
        log = turnlog.open(Path(temp_dir) / "shared.store")
        _LOGS.append(log)
        session_1 = TurnlogSession(log, "session_1")
        session_2 = TurnlogSession(log, "session_2")
        await asyncio.gather(
            session_1.add_items([{"role": "user", "content": "session_1"}]),
            session_2.add_items([{"role": "user", "content": "session_2"}]),
        )
        assert [i.get("content") for i in await session_1.get_items()] == ["session_1"]
        assert [i.get("content") for i in await session_2.get_items()] == ["session_2"]
        session_1.close()
        session_2.close()


@run
async def test_session_add_items_exception_propagates_in_streamed() -> None:
    """Exceptions from session.add_items propagate in run_streamed (no hang)."""
    session = SQLiteSession("test_exception_session")

    async def _failing_add_items(_items: Any, *, wrapper: Any | None = None) -> None:
        del wrapper
        raise RuntimeError("Simulated session.add_items failure")

    session.add_items = _failing_add_items  # type: ignore[method-assign,assignment]
    model = FakeModel()
    agent = Agent(name="test", model=model)
    model.set_next_output([get_text_message("This should not be reached")])
    result = Runner.run_streamed(agent, "Hello", session=session)

    async def consume_stream() -> None:
        async for _event in result.stream_events():
            pass

    with pytest.raises(RuntimeError, match=r"Simulated session\.add_items failure"):
        await asyncio.wait_for(consume_stream(), timeout=30.0)
    session.close()


@run
async def test_session_settings_default() -> None:
    """Test that session_settings defaults to empty SessionSettings."""
    session = SQLiteSession("default_settings_test")
    assert isinstance(session.session_settings, SessionSettings)
    assert session.session_settings.limit is None
    session.close()


@run
async def test_session_settings_constructor() -> None:
    """Test passing session_settings via constructor."""
    session = SQLiteSession("constructor_settings_test", session_settings=SessionSettings(limit=5))
    assert session.session_settings is not None
    assert session.session_settings.limit == 5
    session.close()


def test_session_settings_dict_is_normalized_and_unknown_keys_refused() -> None:
    """Adaptation 6: the SDK's coercion of settings given as a dict."""
    with turnlog.open(":memory:") as log:
        session = TurnlogSession(log, "d", session_settings={"limit": 3})
        assert session.session_settings == SessionSettings(limit=3)
        with pytest.raises(TypeError, match="limt"):
            TurnlogSession(log, "d", session_settings={"limt": 3})


@run
async def test_get_items_uses_session_settings_limit() -> None:
    """Test that get_items uses session_settings.limit as default."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession(
            "uses_settings_limit_test",
            Path(temp_dir) / "limit.db",
            session_settings=SessionSettings(limit=3),
        )
        await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(5)])
        retrieved = await session.get_items()
        assert [i.get("content") for i in retrieved] == ["Message 2", "Message 3", "Message 4"]
        session.close()


@run
async def test_get_items_explicit_limit_overrides_session_settings() -> None:
    """Test that explicit limit parameter overrides session_settings."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession(
            "explicit_override_test",
            Path(temp_dir) / "override.db",
            session_settings=SessionSettings(limit=5),
        )
        await session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)])
        retrieved = await session.get_items(limit=2)
        assert [i.get("content") for i in retrieved] == ["Message 8", "Message 9"]
        session.close()


@run
async def test_session_settings_resolve() -> None:
    """Test SessionSettings.resolve() method."""
    base = SessionSettings(limit=100)
    final = base.resolve(SessionSettings(limit=50))
    assert final.limit == 50
    assert base.limit == 100
    assert base.resolve(None).limit == 100


@run
async def test_runner_with_session_settings_override() -> None:
    """Test that RunConfig can override session's default settings."""
    with tempfile.TemporaryDirectory() as temp_dir:
        session = SQLiteSession(
            "runner_override_test",
            Path(temp_dir) / "runner.db",
            session_settings=SessionSettings(limit=100),
        )
        await session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
        model = FakeModel()
        agent = Agent(name="test", model=model)
        model.set_next_output([get_text_message("Got it")])
        await Runner.run(
            agent,
            "New question",
            session=session,
            run_config=RunConfig(session_settings=SessionSettings(limit=2)),
        )
        last_input = model.last_turn_args["input"]
        history_items = [item for item in last_input if item.get("content") != "New question"]
        assert len(history_items) == 2
        session.close()

"""The integrations' delete and clear can erase (docs/erasure.md): with
``erase_reason`` set, LangGraph's ``delete_thread``, the Agents SDK's
``clear_session`` and LangChain's ``clear`` leave none of the content in the store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import turnlog
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from turnlog.adapters.integrations.langchain import TurnlogChatMessageHistory
from turnlog.adapters.integrations.langgraph import TurnlogSaver
from turnlog.adapters.integrations.openai_agents import TurnlogSession

SECRET = "INTEGRATION-SECRET-77"


def _raw(tmp_path: Path) -> bytes:
    return (tmp_path / "store" / "data.mdb").read_bytes()


def test_langchain_clear_erases_when_asked(tmp_path: Path) -> None:
    with turnlog.open(str(tmp_path / "store")) as log:
        history = TurnlogChatMessageHistory(log, "chat")
        history.add_messages([HumanMessage(content=f"hi {SECRET}"), AIMessage(content="ok")])
        history.clear()
        assert SECRET.encode() in _raw(tmp_path)  # hidden only, by default
        history.erase_reason = "user deleted the chat"
        history.clear()
        assert history.messages == []
        assert SECRET.encode() not in _raw(tmp_path)
        assert log.verify().ok


def test_agents_sdk_clear_session_erases_when_asked(tmp_path: Path) -> None:
    with turnlog.open(str(tmp_path / "store")) as log:
        session = TurnlogSession(log, "agent")
        session.erase_reason = "retention"
        asyncio.run(session.add_items([{"role": "user", "content": f"hi {SECRET}"}]))
        asyncio.run(session.clear_session())
        assert asyncio.run(session.get_items()) == []
        assert SECRET.encode() not in _raw(tmp_path)
        assert log.verify().ok


def test_langgraph_delete_thread_erases_when_asked(tmp_path: Path) -> None:
    with turnlog.open(str(tmp_path / "store")) as log:
        saver = TurnlogSaver(log)
        saver.erase_reason = "thread deleted"
        config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": f"hi {SECRET}"}
        checkpoint["channel_versions"] = {"messages": 1}
        saver.put(config, checkpoint, {"source": "input", "step": 0}, {"messages": 1})
        assert SECRET.encode() in _raw(tmp_path)
        saver.delete_thread("t")
        assert saver.get_tuple(config) is None
        assert SECRET.encode() not in _raw(tmp_path)
        assert log.verify().ok

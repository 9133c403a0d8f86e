"""The context tools: specs in every provider format, each tool run through the session
(its result appended like any tool's and replayed), notices that name the tool only once
the kit is recorded in force, and the asyncio twin."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import turnlog
from turnlog import Log, Policy
from turnlog.adapters.session import AsyncSession, Session
from turnlog.errors import InvalidEventError
from turnlog.events import ToolResultAdded
from turnlog.memories import MemoryManager
from turnlog.packing import CONTEXT_TOOLS
from turnlog.tools.cli import main as cli_main

FORMATS = ("openai-chat", "openai-responses", "anthropic")
POLICY = Policy(
    context_window=64_000, output_reserve=1_000, truncate_lines=40, truncate_bytes=4_000
)
MINE = {
    "name": "run",
    "description": "Run a command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
BIG = "\n".join(
    f"line {n:04d} " + ("ZANZIBAR" if n == 2000 else "filler text here") for n in range(1, 4001)
)


def chat_body(calls: list[tuple[str, str, dict[str, object]]], ident: str) -> dict[str, object]:
    """A Chat Completions reply making ``calls`` (id, name, arguments)."""
    message: dict[str, object] = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ],
    }
    return {
        "id": ident,
        "object": "chat.completion",
        "created": 1,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23},
    }


@pytest.fixture
def log() -> Iterator[Log]:
    with turnlog.open(":memory:") as opened:
        yield opened


def make(log: Log, *, kit: bool = True) -> Session:
    session = Session(log, "s1", model="fake-model", max_tokens=512, policy=POLICY)
    session.tools([MINE, *session.context_tools()] if kit else [MINE])
    session.user("run the build")
    session.prepare()
    session.record(chat_body([("c0", "run", {"cmd": "make"})], "cmpl-0"))
    session.tool_result("c0", BIG)
    return session


def big_ref(session: Session) -> tuple[int, str]:
    """The seq of the big output's result and its blob hash."""
    for event in session.log.lineage("s1"):
        if isinstance(event.body, ToolResultAdded) and event.body.blob is not None:
            return event.seq, event.body.blob.hash
    raise AssertionError("no blob-stored output")


def call(session: Session, ident: str, name: str, args: dict[str, object]) -> str:
    session.prepare()
    answer = session.record(chat_body([(ident, name, args)], f"cmpl-{ident}"))
    result = session.call_context_tool(answer.tool_calls[0])
    stored = session.log.get("s1", result.seq).body
    assert isinstance(stored, ToolResultAdded) and stored.output == result.output
    assert stored.tool_name == name and stored.is_error == result.is_error
    return result.output


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_specs_render_in_every_format(log: Log, fmt: str) -> None:
    session = Session(log, "s1", model="fake-model", format=fmt, max_tokens=64, policy=POLICY)
    session.tools(session.context_tools())
    session.user("hi")
    body = session.prepare().json()
    tools = body["tools"]
    assert isinstance(tools, list) and len(tools) == len(CONTEXT_TOOLS)
    text = json.dumps(tools)
    for spec in CONTEXT_TOOLS:
        assert f'"{spec.name}"' in text and json.dumps(spec.description) in text


def notice_of(session: Session) -> str:
    packed = session.explain()
    text = "\n".join(m.text for m in packed.prompt.messages if "truncated" in m.text)
    assert "truncated" in text
    return text


def test_the_notice_names_the_tool_only_when_the_kit_is_in_force(log: Log) -> None:
    session = make(log)
    session.prepare()
    notice = notice_of(session)
    assert f'read_output tool, ref "{big_ref(session)[1]}"' in notice
    assert "turnlog blob" not in notice
    with turnlog.open(":memory:") as other:
        plain = make(other, kit=False)
        plain.prepare()
        assert "`turnlog blob" in notice_of(plain)
        assert "read_output" not in notice_of(plain)


def test_read_output_reads_ranges_lines_and_grep_of_the_whole_output(log: Log) -> None:
    session = make(log)
    ref = big_ref(session)[1]
    middle = call(session, "c1", "read_output", {"ref": ref, "start_line": 1999, "line_count": 3})
    assert "line 2000 ZANZIBAR" in middle and "line 1998" not in middle
    grep = call(session, "c2", "read_output", {"ref": ref, "grep": "zanzibar"})
    assert "2000: line 2000 ZANZIBAR" in grep
    at = BIG.index("ZANZIBAR")
    chars = call(session, "c3", "read_output", {"ref": ref, "offset": at, "length": 8})
    assert chars.endswith("\nZANZIBAR")
    capped = call(session, "c4", "read_output", {"ref": ref, "offset": 0, "length": 10**6})
    assert len(capped.encode()) < POLICY.truncate_bytes + 200 and "cut at" in capped
    bad = call(session, "c5", "read_output", {"ref": "0" * 64})
    assert bad.startswith("error: no output stored as blob")
    for seq in session.requests():
        assert session.replay(seq).ok


def test_search_history_finds_a_word_in_the_middle_of_a_blob(log: Log) -> None:
    session = make(log)
    found = call(session, "c1", "search_history", {"query": "ZANZIBAR"})
    assert f"[s1#{big_ref(session)[0]}, character " in found and "ZANZIBAR" in found
    assert len(found) <= POLICY.recall_max_chars


def test_memory_tools_save_search_and_forget(log: Log) -> None:
    session = make(log)
    saved = call(
        session,
        "c1",
        "memory_save",
        {"title": "build", "content": "use make -j2", "type": "decision"},
    )
    memory_id = saved.removeprefix("saved memory ")
    assert MemoryManager(log).book().get(memory_id) is not None
    assert memory_id in call(session, "c2", "memory_search", {"query": "make"})
    assert call(session, "c3", "memory_forget", {"id": memory_id}) == f"forgot memory {memory_id}"
    assert call(session, "c4", "memory_search", {"query": "make"}) == "no memory matches"
    assert call(
        session, "c5", "memory_save", {"title": "x", "content": "y", "type": "odd"}
    ).startswith("error: type must be")


def test_expand_summary_shows_what_a_summary_replaced(log: Log) -> None:
    session = make(log)
    for turn in range(4):
        session.user(f"next step {turn}")
        session.prepare()
        session.record(
            {
                "id": f"cmpl-t{turn}",
                "object": "chat.completion",
                "created": 1,
                "model": "fake-model",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"done {turn}"},
                    }
                ],
            }
        )
    outcome = session.compact()
    assert outcome.status == "committed" and outcome.seqs
    shown = call(session, "c1", "expand_summary", {"id": outcome.seqs[0]})
    assert "run the build" in shown
    missing = call(session, "c2", "expand_summary", {"id": 1})
    assert missing.startswith("error: no summary #1")
    # The id as the command and explanations print it (a string) is taken too.
    seq = outcome.seqs[0]
    for number, given in enumerate((str(seq), f"#{seq}", f"s1#{seq}", f"compaction #{seq}")):
        assert call(session, f"c{3 + number}", "expand_summary", {"id": given}) == shown
    wrong = call(session, "c9", "expand_summary", {"id": "the first one"})
    assert wrong.startswith("error: id must be a summary's number"), wrong
    assert call(session, "c10", "expand_summary", {"id": f"other#{seq}"}).startswith(
        f"error: no summary #{seq}"
    )


def test_an_inline_output_is_read_by_its_event_ref(log: Log) -> None:
    session = Session(log, "s1", model="fake-model", max_tokens=512, policy=POLICY)
    session.tools(session.context_tools())
    session.user("go")
    session.prepare()
    session.record(chat_body([("c0", "read_output", {"ref": "x"})], "cmpl-0"))
    done = session.tool_result(
        "c0", "\n".join(f"row {n} MIDDLE" if n == 50 else f"row {n}" for n in range(100))
    )
    session.prepare()
    assert f'read_output tool, ref "s1#{done.last_seq}"' in notice_of(session)
    got = call(session, "c1", "read_output", {"ref": f"s1#{done.last_seq}", "grep": "middle"})
    assert "51: row 50 MIDDLE" in got


def test_a_call_that_is_not_open_is_refused(log: Log) -> None:
    session = make(log)
    from turnlog.events import ToolCall

    with pytest.raises(InvalidEventError, match="no call 'zz' is waiting"):
        session.call_context_tool(ToolCall(id="zz", name="read_output", arguments="{}"))


def test_a_keyed_retry_returns_the_stored_result_without_running_the_tool_again(
    log: Log,
) -> None:
    session = make(log)
    session.prepare()
    save: dict[str, object] = {"title": "build", "content": "use make -j2"}
    answer = session.record(chat_body([("c1", "memory_save", save)], "cmpl-c1"))
    first = session.call_context_tool(answer.tool_calls[0], key="save-1")
    head = log.head("s1")
    again = session.call_context_tool(answer.tool_calls[0], key="save-1")
    assert again.duplicate and (again.output, again.seq) == (first.output, first.seq)
    assert log.head("s1") == head
    assert len(MemoryManager(log).memories()) == 1  # saved once

    async def retry() -> bool:
        twin = AsyncSession(log, "s1", model="fake-model", max_tokens=512, policy=POLICY)
        result = await twin.call_context_tool(answer.tool_calls[0], key="save-1")
        return result.duplicate and result.output == first.output

    assert asyncio.run(retry())
    assert len(MemoryManager(log).memories()) == 1


def test_a_call_that_is_not_open_runs_nothing_even_with_a_key(log: Log) -> None:
    session = make(log)
    from turnlog.events import ToolCall

    save = ToolCall(id="zz", name="memory_save", arguments='{"title": "a", "content": "b"}')
    with pytest.raises(InvalidEventError, match="no call 'zz' is waiting"):
        session.call_context_tool(save, key="k-zz")
    assert log.head("memories") is None  # nothing was saved


def test_sessions_must_be_a_list_of_ids(log: Log) -> None:
    # A str was searched as its characters' sessions; an int raised a bare TypeError.
    session = make(log)
    session.prepare()
    answer = session.record(chat_body([("c1", "search_history", {"query": "x"})], "cmpl-c1"))
    head = log.head("s1")
    with pytest.raises(turnlog.errors.InvalidArgumentError, match=r"sessions=\['other'\]"):
        session.call_context_tool(answer.tool_calls[0], sessions="other")
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="each of sessions must be"):
        session.call_context_tool(answer.tool_calls[0], sessions=[5])  # type: ignore[list-item]
    assert log.head("s1") == head
    assert not session.call_context_tool(answer.tool_calls[0], sessions=("s1",)).is_error


def test_the_async_session_runs_the_kit_through_the_shared_core(log: Log) -> None:
    make(log)

    async def run() -> str:
        session = AsyncSession(log, "s1", model="fake-model", max_tokens=512, policy=POLICY)
        assert session.context_tools() == CONTEXT_TOOLS
        await session.prepare()
        answer = await session.record(
            chat_body([("a1", "search_history", {"query": "zanzibar"})], "cmpl-a1")
        )
        result = await session.call_context_tool(answer.tool_calls[0])
        return result.output

    assert "ZANZIBAR" in asyncio.run(run())


def test_turnlog_recall_finds_a_word_in_the_middle_of_a_300_kb_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [f"row {n:06d} nothing to see here, all fine" for n in range(1, 8001)]
    lines[4000] = "row 004001 the QUILLWORT gauge failed"
    output = "\n".join(lines)
    assert len(output.encode()) > 300_000
    with turnlog.open(tmp_path / "store") as log:
        session = Session(log, "s1", model="fake-model", max_tokens=512, policy=POLICY)
        session.user("scan")
        session.prepare()
        session.record(chat_body([("c0", "run", {"cmd": "scan"})], "cmpl-0"))
        done = session.tool_result("c0", output)
        stored = log.get("s1", done.last_seq).body
        assert isinstance(stored, ToolResultAdded) and "QUILLWORT" not in stored.output
    assert cli_main(["--store", str(tmp_path / "store"), "recall", "quillwort"]) == 0
    out = capsys.readouterr().out
    assert f"s1#{done.last_seq}" in out
    assert cli_main(["--store", str(tmp_path / "store"), "recall", "quillwort", "--json"]) == 0
    [hit] = json.loads(capsys.readouterr().out)["hits"]
    assert "QUILLWORT gauge failed" in hit["text"]  # the snippet is around it
    # the hit says where in the output it is, and read_output fetches around it there
    where = output.index("QUILLWORT")
    assert hit["offset"] <= where < hit["offset"] + len(hit["text"])
    assert output[hit["offset"] :].startswith(hit["text"].removeprefix("...").split("...")[0])
    with turnlog.open(tmp_path / "store") as log:
        session = Session(log, "s1", model="fake-model", max_tokens=512, policy=POLICY)
        session.tools(session.context_tools())
        found = call(session, "c1", "search_history", {"query": "quillwort"})
        assert f"[s1#{done.last_seq}, character {hit['offset']}]" in found
        around = call(
            session,
            "c2",
            "read_output",
            {"ref": f"s1#{done.last_seq}", "offset": hit["offset"], "length": 300},
        )
        assert "QUILLWORT gauge failed" in around


def test_bad_calls_get_error_results_saying_what_was_expected(log: Log) -> None:
    session = make(log)
    assert call(session, "c1", "read_output", {"ref": "s1#999"}).startswith(
        "error: no event 's1#999' in this conversation"
    )
    session.prepare()
    answer = session.record(
        {
            "id": "cmpl-bad",
            "object": "chat.completion",
            "created": 1,
            "model": "fake-model",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "b1",
                                "type": "function",
                                "function": {"name": "read_output", "arguments": "not json"},
                            },
                            {
                                "id": "b2",
                                "type": "function",
                                "function": {"name": "read_output", "arguments": "[1]"},
                            },
                        ],
                    },
                }
            ],
        }
    )
    first, second = (session.call_context_tool(c) for c in answer.tool_calls)
    assert first.is_error and first.output.startswith("error: the arguments must be a JSON")
    assert second.is_error and "found [1]" in second.output

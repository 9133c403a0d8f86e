"""Transcript importers and exporters (``turnlog.adapters.importers``).

Every file of the shared corpus (``../shared/corpus``, skipped when absent) is
imported into an LMDB store: the chain verifies, a second import appends
nothing (the store is byte for byte unchanged), and import → export → import
gives the same events (payloads, keys, times and meta). Small fixtures written
here cover what the corpus lacks: Aider histories, OpenAI message and item
lists, Claude Code dead branches, images, split lines and subagent files.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import blake3
import msgspec
import pytest
import turnlog
from hypothesis import given, settings
from hypothesis import strategies as st
from support import GOLDEN_VERSIONS, dump
from turnlog import Log, Packer, Policy, Replayer
from turnlog.adapters.importers import (
    ALIASES,
    FORMATS,
    ImportSummary,
    Progress,
    detect,
    export_session,
    format_name,
    import_file,
    import_path,
)
from turnlog.adapters.providers import PROVIDERS, RenderError, render, renderer_for
from turnlog.errors import ImportFormatError
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    Event,
    NativePart,
    NotificationAdded,
    ProviderErrorReceived,
    ReasoningPart,
    ResponseReceived,
    SessionForked,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolsSet,
    UserMessageAdded,
)

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS") or Path(__file__).parents[1] / ".." / "shared" / "corpus"
)
FILES = (
    sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name != "SOURCES.md")
    if CORPUS.is_dir()
    else []
)
FOLDER_FORMAT = {
    "claude_code_jsonl": "claude_code",
    "codex_rollout_jsonl": "codex",
    "mini_swe_agent_traj_json": "mini_swe_agent",
    "swe_agent_traj": "swe_agent",
    "openhands_events": "openhands",
}
# The one corpus file with damaged lines (raw newlines, cut redactions).
DAMAGED = "3af9b1a7-6512-4883-ad18-320658ced099.jsonl"
COMPACTED = CORPUS / "claude_code_jsonl/M-Thisness__M-Claude/Archives" / DAMAGED
VSLA = (
    CORPUS
    / "claude_code_jsonl/Durban-Designer__vsla/docs/history/raw_sessions"
    / "-home-kenth56-vsla/0a725fb5-6378-432a-9e84-9f3f49d4043d.jsonl"
)
ROLLOUT = next((p for p in FILES if "MoonLadder" in str(p)), Path("missing"))
PARALLEL = (
    CORPUS
    / "claude_code_jsonl/M-Thisness__M-Claude/Archives"
    / "f225835b-3612-4093-903f-bd4538fb7cb9.jsonl"
)

needs_corpus = pytest.mark.skipif(not FILES, reason="shared corpus not present")
_CANON = msgspec.msgpack.Encoder(order="deterministic")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Log]:
    """An LMDB log in a temporary directory."""
    log = turnlog.open(tmp_path / "store", sync=False)
    yield log
    log.close()


def _fresh() -> Log:
    return turnlog.open(":memory:")


def _ident(path: Path) -> str:
    return str(path.relative_to(CORPUS)) if FILES else path.name


def _same_events(
    a: Log, sessions_a: tuple[str, ...], b: Log, sessions_b: tuple[str, ...]
) -> list[str]:
    """Differences between two imports (payloads, keys, times, meta without the source name)."""
    problems: list[str] = []
    if len(sessions_a) != len(sessions_b):
        return [f"{len(sessions_a)} sessions vs {len(sessions_b)}"]
    for x, y in zip(sessions_a, sessions_b, strict=True):
        ea, eb = a.read(x), b.read(y)
        if len(ea) != len(eb):
            problems.append(f"{x}: {len(ea)} events vs {len(eb)}")
            continue
        for u, v in zip(ea, eb, strict=True):
            if _CANON.encode(u.body) != _CANON.encode(v.body):
                problems.append(f"{x}#{u.seq}: payload differs: {u.body!r:.200} / {v.body!r:.200}")
            elif (u.key, u.time) != (v.key, v.time):
                problems.append(f"{x}#{u.seq}: key/time {u.key} {u.time} / {v.key} {v.time}")
            elif _CANON.encode(_meta(u)) != _CANON.encode(_meta(v)):
                problems.append(f"{x}#{u.seq}: meta differs")
    return problems


def _meta(event: Event) -> dict[str, Any]:
    meta = dict(event.meta)
    meta.pop("import", None)  # names the source file
    return meta


def _round_trip(
    log: Log, summary: ImportSummary, name: str, tmp_path: Path, *, skip_bad: bool = False
) -> tuple[Log, ImportSummary, bytes]:
    data = b"".join(export_session(log, root, summary.format) for root in summary.roots)
    copy = tmp_path / "export" / name
    copy.parent.mkdir(exist_ok=True)
    copy.write_bytes(data)
    again = _fresh()
    return again, import_file(again, copy, format=summary.format, skip_bad=skip_bad), data


# -- the corpus --------------------------------------------------------------------------
@needs_corpus
@pytest.mark.parametrize("path", FILES, ids=_ident)
def test_corpus_file_imports_verifies_and_a_reimport_appends_nothing(
    store: Log, path: Path
) -> None:
    damaged = path.name == DAMAGED
    summary = import_file(store, path, skip_bad=damaged)
    assert store.verify().ok
    assert summary.appended == summary.events
    assert bool(summary.skipped) == damaged
    counted = sum(len(store.read(s)) for s in summary.sessions)
    assert counted == summary.events
    assert summary.tool_calls == sum(
        isinstance(p, ToolCall)
        for s in summary.sessions
        for e in store.read(s)
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
    )
    before = dump(store)
    again = import_file(store, path, skip_bad=damaged)
    assert again.appended == 0
    assert again.events == summary.events
    assert dump(store) == before


@needs_corpus
@pytest.mark.parametrize("path", FILES, ids=_ident)
def test_corpus_file_round_trips_to_the_same_events(store: Log, path: Path, tmp_path: Path) -> None:
    damaged = path.name == DAMAGED
    summary = import_file(store, path, skip_bad=damaged)
    again, second, _ = _round_trip(store, summary, path.name, tmp_path, skip_bad=damaged)
    assert bool(second.sessions) == bool(summary.sessions)
    assert _same_events(store, summary.sessions, again, second.sessions) == []
    assert len(second.skipped) == len(summary.skipped)


@needs_corpus
@pytest.mark.parametrize("path", FILES, ids=_ident)
def test_detect_reads_the_format_from_the_content(path: Path) -> None:
    folder = path.relative_to(CORPUS).parts[0]
    expected = FOLDER_FORMAT[folder]
    if path.name == "output.jsonl":
        expected = "openhands_output"
    assert detect(path) == expected
    if path.stat().st_size:
        assert detect(path.read_bytes()) == expected  # no name needed


@needs_corpus
def test_a_corpus_directory_imports_in_one_call_and_again_appends_nothing(store: Log) -> None:
    seen: list[Progress] = []
    summary = import_path(store, CORPUS, skip_bad=True, progress=seen.append)
    assert summary.format == "mixed"
    assert len(summary.sources) == len(FILES)
    assert store.verify().ok
    assert seen and seen[-1].files_total == seen[-1].files_done == len(FILES)
    assert all(p.events_done <= p.events_total for p in seen)
    again = import_path(store, CORPUS, skip_bad=True)
    assert again.appended == 0 and again.events == summary.events


# -- Claude Code ---------------------------------------------------------------------------
@needs_corpus
def test_claude_compaction_covers_everything_before_the_boundary(store: Log) -> None:
    summary = import_file(store, COMPACTED, skip_bad=True)
    sid = summary.sessions[0]
    events = store.read(sid)
    [compaction] = [e for e in events if isinstance(e.body, CompactionCommitted)]
    body = compaction.body
    assert isinstance(body, CompactionCommitted)
    assert (body.reason, body.summarizer) == ("imported", "claude-code")
    assert (body.first_seq, body.last_seq) == (0, compaction.seq - 1)
    assert body.summary.startswith("This session is being continued from a previous")
    assert body.tokens_before == 155554  # compactMetadata.preTokens
    hashes = b"".join(e.hash for e in events[: compaction.seq])
    assert body.covered_digest == blake3.blake3(hashes).hexdigest()
    assert compaction.meta["boundary"]["record"]["subtype"] == "compact_boundary"
    assert not any(
        isinstance(e.body, UserMessageAdded)
        and e.body.text.startswith("This session is being continued")
        for e in events
    )
    # Packing shows what the original summary replaced (summary_gate 0: at any pressure;
    # above the gate, rules 2 shows the originals when they fit).
    packed = Packer(store).pack(
        sid, policy=Policy(context_window=200_000, output_reserve=8_000, summary_gate=0.0)
    )
    rules = {
        d.rule for d in packed.decisions if d.pos < compaction.seq and d.decision == "summarized"
    }
    assert rules == {"summaries.compaction"}
    summarized = sum(d.decision == "summarized" for d in packed.decisions)
    assert summarized > 200
    [section] = [s for s in packed.prompt.system if s.name == "conversation_summary"]
    assert body.summary in section.text


@needs_corpus
def test_claude_damaged_lines_fail_the_file_unless_skipped(store: Log) -> None:
    before = dump(store)
    with pytest.raises(ImportFormatError, match=rf"{DAMAGED}: line 4: not valid JSON"):
        import_file(store, COMPACTED)
    assert dump(store) == before
    summary = import_file(store, COMPACTED, skip_bad=True)
    assert [s.where for s in summary.skipped][:3] == ["line 4", "line 8", "line 20"]
    assert len(summary.skipped) == 35
    assert all(s.source == str(COMPACTED) for s in summary.skipped)


@needs_corpus
def test_claude_1_0_compaction_and_inline_sidechain(store: Log) -> None:
    summary = import_file(store, VSLA)
    main, child = summary.sessions
    assert summary.roots == (main,)
    events = store.read(main)
    [compaction] = [e for e in events if isinstance(e.body, CompactionCommitted)]
    assert compaction.body.last_seq == compaction.seq - 1  # type: ignore[union-attr]
    first = store.get(child, 0)
    link = first.meta["parent"]
    assert link["session"] == main and link["inline"] and link["kind"] == "sidechain"
    calls = {
        p.id: p
        for e in events
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, ToolCall)
    }
    assert calls[link["call_id"]].name == "Task"
    assert isinstance(first.body, UserMessageAdded)
    assert json.loads(calls[link["call_id"]].arguments)["prompt"] == first.body.text
    # The first record's time, converted from its ISO-8601 timestamp.
    assert events[0].time == 1752983480360000  # 2025-07-20T03:51:20.360Z


@needs_corpus
def test_claude_records_of_one_response_merge_and_parallel_results_stay(store: Log) -> None:
    summary = import_file(store, PARALLEL)
    events = store.read(summary.sessions[0])
    first = next(e for e in events if isinstance(e.body, AssistantMessageAdded))
    body = first.body
    assert isinstance(body, AssistantMessageAdded)
    assert [type(p).__name__ for p in body.parts] == [
        "ReasoningPart",
        "TextPart",
        "ToolCall",
        "ToolCall",
        "ToolCall",
        "ToolCall",
    ]
    assert isinstance(body.parts[0], ReasoningPart) and body.parts[0].opaque  # the signature
    assert len(first.meta["records"]) == 6
    ids = [e.body.response_id for e in events if isinstance(e.body, AssistantMessageAdded)]
    assert len(ids) == len(set(ids))
    usage = events[first.seq + 1]
    assert isinstance(usage.body, ResponseReceived) and usage.meta == {"derived": True}
    assert usage.body.usage.cache_read_tokens or usage.body.usage.cache_write_tokens
    results = [e for e in events if isinstance(e.body, ToolResultAdded)]
    calls = [
        p
        for e in events
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, ToolCall)
    ]
    assert sorted(r.body.call_id for r in results) == sorted(c.id for c in calls)  # type: ignore[union-attr]
    # The structured copy of each output stays in meta and is not a second result.
    assert all("toolUseResult" in r.meta["raw"] for r in results)
    assert all(r.body.tool_name for r in results)  # type: ignore[union-attr]


def _claude(
    uuid: str,
    parent: str | None,
    kind: str,
    content: Any,
    *,
    ts: int,
    msg_id: str = "",
    **extra: Any,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/w",
        "sessionId": "s-1",
        "version": "2.1.5",
        "type": kind,
        "uuid": uuid,
        "timestamp": f"2026-01-01T00:00:{ts:02d}.000Z",
    }
    if kind == "user":
        record["message"] = {"role": "user", "content": content}
    else:
        record["message"] = {
            "id": msg_id or f"msg_{uuid}",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": content,
            "stop_reason": None,
            "usage": {
                "input_tokens": 3,
                "output_tokens": 5,
                "cache_read_input_tokens": 7,
                "cache_creation_input_tokens": 11,
            },
        }
    record.update(extra)
    return record


def _write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_claude_dead_branch_becomes_a_fork_and_exports_back(store: Log, tmp_path: Path) -> None:
    records = [
        _claude("u1", None, "user", "first question", ts=1),
        _claude("a1", "u1", "assistant", [{"type": "text", "text": "first answer"}], ts=2),
        _claude("u2", "a1", "user", "a question I then edited", ts=3),
        _claude(
            "a2", "u2", "assistant", [{"type": "text", "text": "answer on the old branch"}], ts=4
        ),
        {"type": "file-history-snapshot", "messageId": "u3", "snapshot": {}},
        _claude("u3", "a1", "user", "the edited question", ts=5),
        _claude(
            "a3", "u3", "assistant", [{"type": "text", "text": "answer on the new branch"}], ts=6
        ),
    ]
    path = _write_jsonl(tmp_path / "s-1.jsonl", records)
    summary = import_file(store, path)
    main, fork = summary.sessions
    assert summary.roots == (main,)
    texts = [e.body.text for e in store.read(main) if isinstance(e.body, UserMessageAdded)]
    assert texts == ["first question", "the edited question"]
    forked = store.read(fork)
    assert isinstance(forked[0].body, SessionForked)
    assert forked[0].body.from_session == main
    assert isinstance(store.get(main, forked[0].body.from_seq).body, AssistantMessageAdded)
    lineage = store.lineage(fork)
    said = [e.body.text for e in lineage if isinstance(e.body, UserMessageAdded)]
    assert said == ["first question", "a question I then edited"]
    assert store.verify().ok
    exported = export_session(store, main, "claude_code")
    assert [json.loads(line) for line in exported.splitlines()] == records
    again, second, _ = _round_trip(store, summary, path.name, tmp_path)
    assert _same_events(store, summary.sessions, again, second.sessions) == []


def test_claude_record_split_over_lines_is_joined(store: Log, tmp_path: Path) -> None:
    good = json.dumps(_claude("u1", None, "user", "line one\nline two", ts=1))
    split = good.replace("\\n", "\n")  # a raw newline inside the string
    assert split.count("\n") == 1
    path = _write_jsonl(
        tmp_path / "s-1.jsonl",
        [split, _claude("a1", "u1", "assistant", [{"type": "text", "text": "ok"}], ts=2)],
    )
    summary = import_file(store, path)
    assert summary.skipped == ()
    first = store.read(summary.sessions[0])[0]
    assert isinstance(first.body, UserMessageAdded) and first.body.text == "line one\nline two"


def test_claude_images_are_stored_as_blobs_and_exported_back(store: Log, tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3
    data = base64.b64encode(png).decode()
    records = [
        _claude(
            "u1",
            None,
            "user",
            [
                {"type": "text", "text": "look"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": data},
                },
            ],
            ts=1,
        ),
        _claude("a1", "u1", "assistant", [{"type": "text", "text": "a gradient"}], ts=2),
    ]
    path = _write_jsonl(tmp_path / "s-1.jsonl", records)
    summary = import_file(store, path)
    assert summary.blobs == 1
    image_event = store.read(summary.sessions[0])[1]
    assert isinstance(image_event.body, UserMessageAdded)
    ref = image_event.body.images[0].blob
    assert ref is not None and store.blob(ref) == png
    assert data not in json.dumps(image_event.meta)
    exported = export_session(store, summary.sessions[0], "claude_code")
    assert [json.loads(line) for line in exported.splitlines()] == records


def test_claude_compaction_block_is_kept_byte_for_byte_and_sent_back_to_anthropic(
    store: Log, tmp_path: Path
) -> None:
    block = {"type": "compaction", "content": "Summary: the user asked for a gradient. é"}
    records = [
        _claude("u1", None, "user", [{"type": "text", "text": "an old question"}], ts=1),
        _claude("a1", "u1", "assistant", [{"type": "text", "text": "an old answer"}], ts=2),
        _claude("u2", "a1", "user", [{"type": "text", "text": "go on"}], ts=3),
        _claude("a2", "u2", "assistant", [block], ts=4, msg_id="msg_c"),
        _claude(
            "a3", "a2", "assistant", [{"type": "text", "text": "continuing"}], ts=4, msg_id="msg_c"
        ),
        _claude("u3", "a3", "user", [{"type": "text", "text": "a new question"}], ts=5),
    ]
    path = _write_jsonl(tmp_path / "s-1.jsonl", records)
    session = import_file(store, path).sessions[0]
    parts = [
        p
        for e in store.read(session)
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, NativePart)
    ]
    assert parts == [
        NativePart(
            format="anthropic",
            item_type="compaction",
            data=msgspec.json.encode(block).decode(),
            text=block["content"],
        )
    ]
    exported = export_session(store, session, "claude_code")
    assert [json.loads(line) for line in exported.splitlines()] == records
    body = json.loads(
        render(Packer(store).pack(session).prompt, "anthropic", model="m", max_tokens=100)
    )
    assert body["messages"][1]["content"][0] == block
    assert "an old question" not in json.dumps(body) and "a new question" in json.dumps(body)
    with pytest.raises(RenderError, match="anthropic 'compaction' item"):
        render(Packer(store).pack(session).prompt, "openai-responses", model="m", max_tokens=100)


def test_claude_api_errors_meta_records_and_summaries(store: Log, tmp_path: Path) -> None:
    records = [
        {"type": "summary", "summary": "A title", "leafUuid": "elsewhere"},
        _claude(
            "u1",
            None,
            "user",
            "<local-command-caveat>Caveat</local-command-caveat>",
            ts=1,
            isMeta=True,
        ),
        _claude("u2", "u1", "user", "hello", ts=2),
        {
            **_claude("e1", "u2", "user", "", ts=3),
            "type": "system",
            "subtype": "api_error",
            "level": "error",
            "error": {
                "status": 529,
                "error": {
                    "type": "error",
                    "error": {"type": "overloaded_error", "message": "Overloaded"},
                },
            },
            "retryInMs": 512.5,
        },
        {
            **_claude("t1", "e1", "user", "", ts=4),
            "type": "system",
            "subtype": "turn_duration",
            "durationMs": 1200,
        },
    ]
    for record in records[3:]:
        record.pop("message")
    path = _write_jsonl(tmp_path / "s-1.jsonl", records)
    summary = import_file(store, path)
    events = store.read(summary.sessions[0])
    assert [e.kind for e in events] == ["notification", "user", "provider_error"]
    assert isinstance(events[0].body, NotificationAdded)
    assert events[0].body.source == "claude-code/meta"
    assert events[0].meta["before"][0]["record"]["type"] == "summary"
    error = events[2].body
    assert isinstance(error, ProviderErrorReceived)
    assert (error.status, error.error_type, error.message) == (
        529,
        "overloaded_error",
        "Overloaded",
    )
    assert events[2].meta["after"][0]["record"]["subtype"] == "turn_duration"
    exported = export_session(store, summary.sessions[0], "claude_code")
    assert [json.loads(line) for line in exported.splitlines()] == records


def test_a_summary_only_file_keeps_its_records_on_a_carrier(store: Log, tmp_path: Path) -> None:
    records = [{"type": "summary", "summary": "A title", "leafUuid": "x"}]
    summary = import_file(store, _write_jsonl(tmp_path / "t.jsonl", records))
    [event] = store.read(summary.sessions[0])
    assert isinstance(event.body, SystemSectionSet) and event.body.text == ""
    assert event.meta["carrier"] is True
    exported = export_session(store, summary.sessions[0], "claude_code")
    assert [json.loads(line) for line in exported.splitlines()] == records


@pytest.mark.parametrize("layout", ["flat", "subagents"])
def test_claude_subagent_files_link_to_the_spawning_call(
    store: Log, tmp_path: Path, layout: str
) -> None:
    task = {
        "type": "tool_use",
        "id": "toolu_task",
        "name": "Task",
        "input": {"description": "look", "prompt": "Find the bug"},
    }
    main = [
        _claude("u1", None, "user", "please delegate", ts=1),
        _claude("a1", "u1", "assistant", [task], ts=2),
        _claude(
            "r1",
            "a1",
            "user",
            [{"type": "tool_result", "tool_use_id": "toolu_task", "content": "found it"}],
            ts=9,
            toolUseResult={"agentId": "abc1234", "status": "completed"},
        ),
    ]
    agent = [
        _claude("x1", None, "user", "Find the bug", ts=3, isSidechain=True, agentId="abc1234"),
        _claude(
            "x2",
            "x1",
            "assistant",
            [{"type": "text", "text": "found it"}],
            ts=4,
            isSidechain=True,
            agentId="abc1234",
        ),
    ]
    root = tmp_path / "project"
    folder = root / "s-1" / "subagents" if layout == "subagents" else root
    folder.mkdir(parents=True)
    _write_jsonl(root / "s-1.jsonl", main)
    _write_jsonl(folder / "agent-abc1234.jsonl", agent)
    summary = import_path(store, root)
    assert summary.sessions == ("s-1", "s-1/agent-abc1234")
    link = store.get("s-1/agent-abc1234", 0).meta["parent"]
    assert link == {
        "session": "s-1",
        "kind": "subagent",
        "agent_id": "abc1234",
        "call_id": "toolu_task",
    }
    # A subagent file alone still names its parent session.
    alone = _fresh()
    lone = import_file(alone, folder / "agent-abc1234.jsonl")
    assert alone.get(lone.sessions[0], 0).meta["parent"]["session"] == "s-1"


# -- malformed input ---------------------------------------------------------------------
def test_truncated_json_line_names_file_and_line_and_writes_nothing(
    store: Log, tmp_path: Path
) -> None:
    good = _claude("u1", None, "user", "hi", ts=1)
    path = _write_jsonl(
        tmp_path / "s-1.jsonl", [good, json.dumps(_claude("u2", "u1", "user", "there", ts=2))[:40]]
    )
    before = dump(store)
    with pytest.raises(ImportFormatError, match=r"s-1\.jsonl: line 2: not valid JSON"):
        import_file(store, path)
    assert dump(store) == before
    summary = import_file(store, path, skip_bad=True)
    assert [(s.where, s.field) for s in summary.skipped] == [("line 2", "")]
    assert summary.events == 1


@pytest.mark.parametrize(
    ("fmt", "content", "where", "field"),
    [
        ("claude", [_claude("u1", None, "user", 5, ts=1)], "line 1", "message.content"),
        (
            "claude",
            [
                _claude(
                    "a1",
                    None,
                    "assistant",
                    [{"type": "tool_use", "id": 7, "name": "Bash", "input": {}}],
                    ts=1,
                )
            ],
            "line 1",
            r"message.content\[0\].id",
        ),
        (
            "codex",
            [
                {
                    "timestamp": "2025-01-01T00:00:00Z",
                    "type": "response_item",
                    "payload": "not an object",
                }
            ],
            "line 1",
            "payload",
        ),
        (
            "codex",
            [{"timestamp": "yesterday", "type": "event_msg", "payload": {}}],
            "line 1",
            "timestamp",
        ),
    ],
)
def test_wrong_field_type_names_file_line_and_field(
    store: Log, tmp_path: Path, fmt: str, content: list[Any], where: str, field: str
) -> None:
    name = "rollout-x.jsonl" if fmt == "codex" else "s-1.jsonl"
    path = _write_jsonl(tmp_path / name, content)
    before = dump(store)
    with pytest.raises(ImportFormatError, match=rf"{name}: {where}: field {field}: expected"):
        import_file(store, path, format="codex" if fmt == "codex" else "claude_code")
    assert dump(store) == before


def test_a_message_of_the_wrong_type_in_a_document_is_named(store: Log, tmp_path: Path) -> None:
    doc = {
        "trajectory_format": "mini-swe-agent-1",
        "instance_id": "x",
        "info": {},
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
            "oops",
        ],
    }
    path = tmp_path / "x.traj.json"
    path.write_text(json.dumps(doc))
    before = dump(store)
    with pytest.raises(
        ImportFormatError,
        match=r"x\.traj\.json: messages\[3\]: expected a "
        r"message object, found string",
    ):
        import_file(store, path)
    assert dump(store) == before
    summary = import_file(store, path, skip_bad=True)
    assert summary.events == 3 and summary.skipped[0].where == "messages[3]"


def test_a_kernel_rejection_names_the_source_record(store: Log, tmp_path: Path) -> None:
    call = {"type": "tool_use", "id": "x" * 300, "name": "Bash", "input": {}}
    path = _write_jsonl(
        tmp_path / "s-1.jsonl",
        [_claude("u1", None, "user", "hi", ts=1), _claude("a1", "u1", "assistant", [call], ts=2)],
    )
    before = dump(store)
    with pytest.raises(ImportFormatError, match=r"s-1\.jsonl: line 2: .*256"):
        import_file(store, path)
    assert dump(store) == before


@pytest.mark.parametrize(
    "content", [b'{"hello": "world"}', b"just some text\n", b"[1, 2, 3]", b"\x00\x01\x02"]
)
def test_unknown_format_is_refused(store: Log, tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "thing.json"
    path.write_bytes(content)
    before = dump(store)
    with pytest.raises(ImportFormatError, match=r"thing\.json: not a transcript of a known"):
        import_file(store, path)
    with pytest.raises(ImportFormatError, match="unknown format 'nope'"):
        import_file(store, path, format="nope")
    assert dump(store) == before


def test_a_directory_lists_files_that_are_not_transcripts(store: Log, tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text('{"name": "x"}')
    (tmp_path / "README.md").write_text("# Readme\n")
    _write_jsonl(tmp_path / "s-1.jsonl", [_claude("u1", None, "user", "hi", ts=1)])
    summary = import_path(store, tmp_path)
    assert summary.sessions == ("s-1",)
    assert [(Path(s.source).name, s.reason) for s in summary.skipped] == [
        ("package.json", "not a transcript of a known format")
    ]


# -- Codex -------------------------------------------------------------------------------------
@needs_corpus
def test_codex_injected_context_reasoning_exit_codes_and_usage(store: Log) -> None:
    summary = import_file(store, ROLLOUT)
    events = store.read(summary.sessions[0])
    assert summary.sessions[0] == "019a802a-aab1-7c31-9831-d2510c7a74a2"
    sources = [e.body.source for e in events if isinstance(e.body, NotificationAdded)]
    assert sources == ["codex/agents_md", "codex/environment_context"]
    reasoning = [
        p
        for e in events
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, ReasoningPart)
    ]
    assert reasoning and all(p.opaque.startswith("gAAAAA") for p in reasoning)
    results = [e.body for e in events if isinstance(e.body, ToolResultAdded)]
    assert results[1].exit_code == 127 and results[1].tool_name == "shell"
    usage = [e.body for e in events if isinstance(e.body, ResponseReceived)]
    assert usage[0].usage.input_tokens == 5233 and usage[0].usage.cache_read_tokens == 3072
    assert usage[0].model == "gpt-5.1-codex"
    # event_msg repeats of the messages are kept in meta, not as events.
    texts = [e.body.text for e in events if isinstance(e.body, UserMessageAdded)]
    assert len(texts) == 1


def test_codex_compaction_and_error_lines(store: Log, tmp_path: Path) -> None:
    def line(ts: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": f"2025-11-14T02:21:{ts:02d}.000Z", "type": kind, "payload": payload}

    records = [
        line(
            1,
            "session_meta",
            {
                "id": "0199-x",
                "cwd": "/w",
                "cli_version": "0.80.0",
                "base_instructions": {"text": "You are Codex."},
            },
        ),
        line(
            2,
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "build it"}],
            },
        ),
        line(
            3,
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Built."}],
            },
        ),
        line(4, "event_msg", {"type": "error", "message": "stream disconnected"}),
        line(5, "compacted", {"message": "The user asked for a build; it was built."}),
        line(
            6,
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "thanks"}],
            },
        ),
    ]
    path = _write_jsonl(tmp_path / "rollout-2025-11-14T02-21-01-0199-x.jsonl", records)
    summary = import_file(store, path)
    events = store.read("0199-x")
    assert [e.kind for e in events] == [
        "system",
        "user",
        "assistant",
        "provider_error",
        "compaction",
        "user",
    ]
    section = events[0].body
    assert isinstance(section, SystemSectionSet) and section.text == "You are Codex."
    compaction = events[4].body
    assert isinstance(compaction, CompactionCommitted)
    assert (compaction.first_seq, compaction.last_seq, compaction.summarizer) == (0, 3, "codex")
    exported = export_session(store, "0199-x", "codex")
    assert [json.loads(x) for x in exported.splitlines()] == records
    assert import_file(store, path).appended == 0 and summary.appended == 6


# -- OpenAI message and item lists ---------------------------------------------------------
CHAT = {
    "model": "gpt-x",
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "read",
                "description": "Read a file",
                "parameters": {"type": "object"},
            },
        }
    ],
    "messages": [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in a.py?"},
                {"type": "image_url", "image_url": {"url": "https://x/i.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
        {"role": "assistant", "content": "It prints hi.", "reasoning_content": "Easy."},
    ],
}

RESPONSES = {
    "model": "gpt-y",
    "instructions": "You are terse.",
    "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls?"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "List files."}],
            "encrypted_content": "enc-opaque",
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_9",
            "name": "shell",
            "arguments": '{"cmd": "ls"}',
        },
        {"type": "function_call_output", "call_id": "call_9", "output": "a.py\nb.py"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Two files.", "annotations": []}],
        },
    ],
}


@pytest.mark.parametrize(
    ("name", "doc"),
    [
        ("chat.json", CHAT),
        ("chat-list.json", CHAT["messages"]),
        ("responses.json", RESPONSES),
        ("items.json", RESPONSES["input"]),
    ],
)
def test_openai_lists_import_and_round_trip(
    store: Log, tmp_path: Path, name: str, doc: Any
) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    summary = import_file(store, path)
    expected = "openai-responses" if name in ("responses.json", "items.json") else "openai-chat"
    assert summary.format == expected
    events = store.read(summary.sessions[0])
    calls = [
        p
        for e in events
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, ToolCall)
    ]
    results = [e.body for e in events if isinstance(e.body, ToolResultAdded)]
    assert len(calls) == 1 and results[0].call_id == calls[0].id
    assert results[0].tool_name == calls[0].name
    if isinstance(doc, dict):
        assert any(isinstance(e.body, ToolsSet) for e in events)
        assert any(isinstance(e.body, SystemSectionSet) and e.body.text for e in events)
    if expected == "openai-responses":
        reasoning = [
            p
            for e in events
            if isinstance(e.body, AssistantMessageAdded)
            for p in e.body.parts
            if isinstance(p, ReasoningPart)
        ]
        assert reasoning[0].opaque == "enc-opaque" and reasoning[0].text == "List files."
    exported = export_session(store, summary.sessions[0], summary.format)
    assert json.loads(exported) == doc
    again, second, _ = _round_trip(store, summary, name, tmp_path)
    assert _same_events(store, summary.sessions, again, second.sessions) == []


# -- Aider -------------------------------------------------------------------------------------
# Aider ends every line of user input and console output with two spaces (a
# markdown line break); "|" marks them here.
AIDER = """
# aider chat started at 2024-05-01 10:00:00

> /usr/local/bin/aider --model gpt-4o|
> Aider v0.50.1|
> Main model: gpt-4o with diff edit format|
> Added hello.py to the chat.|

#### add a greeting function to hello.py|
#### and call it from main|

Here is the change:

hello.py
```python
<<<<<<< SEARCH
=======
def greet(name):
    return f"Hello, {name}!"
>>>>>>> REPLACE
```

> Tokens: 1.2k sent, 120 received. Cost: $0.01 message, $0.01 session.|
> Applied edit to hello.py|

#### /run python hello.py|
> Add command output to the chat? (Y)es/(N)o [Yes]: y|

# aider chat started at 2024-05-02 09:30:15

> Aider v0.50.1|

#### what does greet return?|

It returns a greeting string.

""".replace("|\n", "  \n")


def test_aider_history_imports_as_sessions_and_exports_byte_for_byte(
    store: Log, tmp_path: Path
) -> None:
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(AIDER)
    assert detect(path) == "aider"
    summary = import_file(store, path)
    assert summary.sessions == ("aider-2024-05-01T10-00-00", "aider-2024-05-02T09-30-15")
    first = store.read(summary.sessions[0])
    kinds = [e.kind for e in first]
    assert kinds == [
        "notification",
        "user",
        "assistant",
        "notification",
        "response",
        "user",
        "notification",
    ]
    user = first[1].body
    assert isinstance(user, UserMessageAdded)
    assert user.text == "add a greeting function to hello.py\nand call it from main"
    reply = first[2].body
    assert isinstance(reply, AssistantMessageAdded) and isinstance(reply.parts[0], TextPart)
    assert (
        reply.parts[0].text.startswith("Here is the change:")
        and "REPLACE\n```" in reply.parts[0].text
    )
    usage = first[4].body
    assert isinstance(usage, ResponseReceived)
    assert (usage.usage.input_tokens, usage.usage.output_tokens) == (1200, 120)
    assert all(e.time == 1714557600000000 for e in first)  # the header's time
    assert not any("raw_text" in e.meta for e in first)  # aider's own layout: nothing kept
    exported = b"".join(export_session(store, s, "aider") for s in summary.roots)
    assert exported.decode() == AIDER
    again = import_file(store, path)
    assert again.appended == 0
    other, second, _ = _round_trip(store, summary, path.name, tmp_path)
    assert _same_events(store, summary.sessions, other, second.sessions) == []


def test_aider_text_in_another_layout_comes_back_exactly(store: Log, tmp_path: Path) -> None:
    text = "# aider chat started at 2024-05-01 10:00:00\n#### hi\n\n\nhello there\n> done"
    path = tmp_path / "history.md"
    path.write_text(text)
    summary = import_file(store, path, format="aider")
    assert [e.kind for e in store.read(summary.sessions[0])] == [
        "user",
        "assistant",
        "notification",
    ]
    assert export_session(store, summary.sessions[0], "aider").decode() == text


# -- export of sessions built in turnlog ----------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_native_session_exports_to_a_file_that_imports_again(tmp_path: Path, fmt: str) -> None:
    log = _fresh()
    log.append(
        "native",
        [
            turnlog.Draft(body=UserMessageAdded(text="fix the test"), time=1_000_000),
            turnlog.Draft(
                body=AssistantMessageAdded(
                    parts=(
                        TextPart(text="Reading it."),
                        ToolCall(id="c1", name="read", arguments='{"path": "t.py"}'),
                    )
                ),
                time=2_000_000,
            ),
            turnlog.Draft(
                body=ToolResultAdded(call_id="c1", tool_name="read", output="assert 1"),
                time=3_000_000,
            ),
            turnlog.Draft(
                body=AssistantMessageAdded(parts=(TextPart(text="It passes."),)), time=4_000_000
            ),
        ],
    )
    data = export_session(log, "native", fmt)
    suffix = {
        "claude_code": ".jsonl",
        "codex": ".jsonl",
        "openhands_output": ".jsonl",
        "aider": ".md",
    }.get(fmt, ".json")
    path = tmp_path / f"rollout-native{suffix}" if fmt == "codex" else tmp_path / f"n{suffix}"
    path.write_bytes(data)
    assert detect(path) == fmt
    again = _fresh()
    summary = import_file(again, path)
    texts = [
        e.body.text
        for s in summary.sessions
        for e in again.read(s)
        if isinstance(e.body, UserMessageAdded)
    ]
    assert texts == ["fix the test"]
    replies = [
        p.text
        for s in summary.sessions
        for e in again.read(s)
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, TextPart)
    ]
    # Aider cannot separate two replies in a row: they come back as one.
    assert replies[-1].endswith("It passes.")
    if fmt not in ("aider", "mini_swe_agent") and fmt != "swe_agent":
        outputs = [
            e.body.output
            for s in summary.sessions
            for e in again.read(s)
            if isinstance(e.body, ToolResultAdded)
        ]
        assert outputs == ["assert 1"]


def test_export_refuses_an_unknown_format(store: Log) -> None:
    store.append("s", UserMessageAdded(text="x"))
    with pytest.raises(ImportFormatError, match="unknown format"):
        export_session(store, "s", "rtf")


def test_a_caller_named_session_prefixes_the_others(store: Log, tmp_path: Path) -> None:
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(AIDER)
    summary = import_file(store, path, session="mine")
    assert summary.sessions == ("mine/aider-2024-05-01T10-00-00", "mine/aider-2024-05-02T09-30-15")
    single = tmp_path / "chat.json"
    single.write_text(json.dumps(CHAT))
    assert import_file(store, single, session="chat").sessions == ("chat",)


# -- robustness ------------------------------------------------------------------------------
_SEEDS: dict[str, bytes] = {
    "claude_code": b"".join(
        json.dumps(r).encode() + b"\n"
        for r in [
            _claude("u1", None, "user", "hi", ts=1),
            _claude(
                "a1",
                "u1",
                "assistant",
                [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}],
                ts=2,
            ),
            _claude(
                "r1",
                "a1",
                "user",
                [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}],
                ts=3,
            ),
        ]
    ),
    "codex": b"".join(
        json.dumps(r).encode() + b"\n"
        for r in [
            {"timestamp": "2025-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "x"}},
            {
                "timestamp": "2025-01-01T00:00:01Z",
                "type": "response_item",
                "payload": {
                    "type": "function_call",
                    "name": "shell",
                    "arguments": "{}",
                    "call_id": "c",
                },
            },
            {
                "timestamp": "2025-01-01T00:00:02Z",
                "type": "response_item",
                "payload": {"type": "function_call_output", "call_id": "c", "output": "ok"},
            },
        ]
    ),
    "openai-chat": json.dumps(CHAT).encode(),
    "openai-responses": json.dumps(RESPONSES).encode(),
    "mini_swe_agent": json.dumps(
        {"trajectory_format": "mini-swe-agent-1", "info": {}, "messages": CHAT["messages"]}
    ).encode(),
    "swe_agent": json.dumps({"history": CHAT["messages"], "trajectory": []}).encode(),
    "openhands": json.dumps(
        [
            {"id": 0, "source": "user", "action": "message", "args": {"content": "x"}},
            {"id": 1, "source": "agent", "action": "run", "args": {"command": "ls"}},
            {
                "id": 2,
                "source": "agent",
                "observation": "run",
                "cause": 1,
                "content": "a",
                "extras": {"exit_code": 0},
            },
        ]
    ).encode(),
    "openhands_output": json.dumps(
        {
            "instruction": "x",
            "history": [
                {"action": "message", "content": "x"},
                {"action": "run", "command": "ls"},
                {"observation": "run", "content": "a", "exit_code": 0},
            ],
        }
    ).encode()
    + b"\n",
    "aider": AIDER.encode(),
}


def _native_seed() -> bytes:
    """A turnlog export of a fork with its lineage and a blob."""
    log = _fresh()
    log.append(
        "base",
        [
            UserMessageAdded(text="hi"),
            ToolResultAdded(call_id="c", tool_name="t", output="x" * 70_000),
        ],
    )
    log.fork("base", 1, "fork")
    log.append("fork", turnlog.Draft(body=UserMessageAdded(text="more"), key="k"))
    return b"".join(turnlog.log.export_events(log, "fork"))


_SEEDS["turnlog"] = _native_seed()


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_mangled_input_is_imported_or_refused_and_nothing_else(
    fmt: str, data: st.DataObject, tmp_path_factory: Any
) -> None:
    seed = _SEEDS[fmt]
    cut = data.draw(st.integers(0, len(seed)))
    junk = data.draw(st.binary(max_size=24))
    at = data.draw(st.integers(0, len(seed)))
    mangled = data.draw(
        st.sampled_from(
            [seed[:cut], seed[:at] + junk + seed[at:], junk, seed.replace(b'"', b"'", 1)]
        )
    )
    skip_bad = data.draw(st.booleans())
    path = tmp_path_factory.mktemp("mangled") / ("rollout-m.jsonl" if fmt == "codex" else "m.jsonl")
    path.write_bytes(mangled)
    log = _fresh()
    before = dump(log)
    try:
        summary = import_file(log, path, format=fmt, skip_bad=skip_bad)
    except ImportFormatError:
        assert dump(log) == before
        return
    assert log.verify().ok
    assert import_file(log, path, format=fmt, skip_bad=skip_bad).appended == 0
    for root in summary.roots:
        export_session(log, root, fmt)


def test_a_file_changed_since_its_import_is_refused_with_advice(store: Log, tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "s-1.jsonl", [_claude("u1", None, "user", "hi", ts=1)])
    import_file(store, path)
    _write_jsonl(
        path,
        [
            _claude("u1", None, "user", "hi, edited", ts=1),
            _claude("a1", "u1", "assistant", [{"type": "text", "text": "yo"}], ts=2),
        ],
    )
    before = dump(store)
    with pytest.raises(ImportFormatError, match=r"holds an earlier import .* \(session=\.\.\.\)"):
        import_file(store, path)
    assert dump(store) == before
    assert import_file(store, path, session="s-1-again").appended == 3


@needs_corpus
def test_codex_apply_patch_calls_import_as_freeform_and_render_natively(store: Log) -> None:
    from turnlog.adapters.providers import render_body

    summary = import_file(store, ROLLOUT, skip_bad=True)
    sid = summary.sessions[0]
    calls = [
        p
        for e in store.read(sid)
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
        if isinstance(p, ToolCall) and p.name == "apply_patch"
    ]
    assert calls and all(c.freeform and c.arguments.startswith("*** Begin Patch") for c in calls)
    packed = Packer(store).pack(sid, policy=Policy(context_window=400_000, output_reserve=8_000))
    chat: dict[str, Any] = render_body(packed.prompt, "openai-chat", model="m", max_tokens=100)
    custom = [c for m in chat["messages"] for c in m.get("tool_calls", ()) if c["type"] == "custom"]
    assert custom and custom[0]["custom"]["input"].startswith("*** Begin Patch")
    responses: dict[str, Any] = render_body(
        packed.prompt, "openai-responses", model="m", max_tokens=100
    )
    kinds = [i["type"] for i in responses["input"]]
    assert "custom_tool_call" in kinds and "custom_tool_call_output" in kinds


def test_custom_tool_declarations_import_as_freeform_tools(tmp_path: Path, store: Log) -> None:
    doc = {
        "instructions": "Be brief.",
        "tools": [
            {
                "type": "custom",
                "name": "apply_patch",
                "description": "Apply a patch.",
                "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
            },
            {"type": "function", "name": "Read", "parameters": {"type": "object"}},
        ],
        "input": [
            {"type": "message", "role": "user", "content": "patch it"},
            {
                "type": "custom_tool_call",
                "call_id": "c1",
                "name": "apply_patch",
                "input": "*** Begin Patch",
            },
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"},
        ],
    }
    path = tmp_path / "items.json"
    path.write_text(json.dumps(doc))
    summary = import_file(store, path)
    [tools] = [e.body for e in store.read(summary.sessions[0]) if isinstance(e.body, ToolsSet)]
    assert tools.tools[0].freeform and not tools.tools[1].freeform
    assert json.loads(tools.tools[0].parameters)["syntax"] == "lark"
    call = next(
        p
        for e in store.read(summary.sessions[0])
        if isinstance(e.body, AssistantMessageAdded)
        for p in e.body.parts
    )
    assert call == ToolCall(id="c1", name="apply_patch", arguments="*** Begin Patch", freeform=True)


@pytest.mark.parametrize("version", GOLDEN_VERSIONS)
def test_every_golden_session_exports_and_imports_back_to_its_hashes(
    tmp_path: Path, version: str
) -> None:
    import shutil

    golden = tmp_path / "golden"
    shutil.copytree(Path(__file__).parent / "golden" / version / "store", golden)
    with turnlog.open(golden, readonly=True) as source:
        for head in source.sessions():
            path = tmp_path / f"{len(list(tmp_path.iterdir()))}.jsonl"
            path.write_bytes(export_session(source, head.session, "turnlog"))
            assert detect(path) == "turnlog"
            again = _fresh()
            summary = import_file(again, path)
            assert summary.roots == (head.session,)
            assert [e.hash for e in again.read(head.session)] == [
                e.hash for e in source.read(head.session)
            ]
            assert again.verify(head.session).ok
            assert import_file(again, path).appended == 0


# -- one spelling of each wire-format name -------------------------------------------------
#: Imports written by 0.2.0, when the OpenAI formats were spelt ``openai_chat`` and
#: ``openai_responses``: the transcripts and each session's complete turnlog export (its
#: events byte for byte, with a request recorded in the provider's format; the Responses
#: item that maps to no event makes a carrier section named after the format).
OLD_IMPORTS = Path(__file__).parent / "fixtures" / "openai_imports_v0.2.0"
OLD_SESSIONS = {
    "chat-79d2e125": ("chat.json", "openai_chat", "openai-chat"),
    "responses-c226b426": ("responses.json", "openai_responses", "openai-responses"),
    "reference-aca52ef7": ("reference.json", "openai_responses", "openai-responses"),
}


def test_a_wire_format_an_importer_shares_with_a_provider_has_the_providers_name() -> None:
    shared = {name for name in FORMATS if name.replace("_", "-") in PROVIDERS}
    assert shared == {"openai-chat", "openai-responses"}
    assert ALIASES == {"openai_chat": "openai-chat", "openai_responses": "openai-responses"}
    assert format_name("openai_chat") == "openai-chat" == format_name("openai-chat")
    with pytest.raises(ImportFormatError, match="unknown format 'openai'"):
        format_name("openai")


def test_imports_of_the_old_spelling_read_replay_and_import_again_as_retries(
    tmp_path: Path,
) -> None:
    with turnlog.open(tmp_path / "store", sync=False) as log:
        for session in OLD_SESSIONS:
            import_file(log, OLD_IMPORTS / f"{session}.turnlog.jsonl")
        assert log.verify().ok
        replayer = Replayer(Packer(log))
        for session, (source, old, new) in OLD_SESSIONS.items():
            meta = log.get(session, 0).meta["import"]
            assert meta == {"format": old, "source": source}  # the bytes of their day
            assert format_name(meta["format"]) == new
            results = list(
                replayer.replay_all(
                    session, render=lambda request: renderer_for(request, blobs=log.blob)
                )
            )
            assert all(r.ok for r in results)
            assert results or session.startswith("reference")
            for spelling in (None, old, new):
                again = import_file(log, OLD_IMPORTS / source, format=spelling)
                assert again.format == new and again.sessions == (session,)
                assert again.appended == 0  # a retry of the old import, in either spelling
            assert export_session(log, session, old) == export_session(log, session, new)
        carrier = log.get("reference-aca52ef7", 0).body
        assert isinstance(carrier, SystemSectionSet) and carrier.name == "openai_responses.records"
        assert log.verify().ok
    with turnlog.open(tmp_path / "new", sync=False) as log:
        for source, _, new in OLD_SESSIONS.values():
            summary = import_file(log, OLD_IMPORTS / source)
            first = log.get(summary.sessions[0], 0)
            assert first.meta["import"]["format"] == new
            if source == "reference.json":
                assert isinstance(first.body, SystemSectionSet)
                assert first.body.name == "openai-responses.records"


def test_the_cli_import_accepts_both_spellings_and_prints_the_new_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from turnlog.tools.cli import main

    store = str(tmp_path / "store")
    for spelling in ("openai_chat", "openai-chat"):
        assert (
            main(
                [
                    "--store",
                    store,
                    "import",
                    str(OLD_IMPORTS / "chat.json"),
                    "--format",
                    spelling,
                    "--json",
                ]
            )
            == 0
        )
        first = json.loads(capsys.readouterr().out.splitlines()[0])
        assert first["format"] == "openai-chat"


GOLDEN = sorted(
    p for p in (Path(__file__).parent / "golden").iterdir() if (p / "store" / "data.mdb").is_file()
)


@pytest.mark.skipif(not FILES, reason="the corpus is not present")
@pytest.mark.parametrize("folder", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_imports_read_import_again_as_retries_and_replay(
    folder: Path, tmp_path: Path
) -> None:
    import shutil

    copy = tmp_path / "store"
    shutil.copytree(folder / "store", copy)
    manifest = json.loads((folder / "manifest.json").read_text())
    with turnlog.open(copy, sync=False) as log:
        named: dict[str, str] = {}
        for head in log.sessions():
            meta = log.get(head.session, 0).meta.get("import")
            if isinstance(meta, dict):
                named[head.session] = format_name(meta["format"])
        assert named and set(named.values()) <= set(FORMATS)
        for transcript in manifest["transcripts"]:
            assert import_file(log, CORPUS / transcript, skip_bad=True).appended == 0
        replayer = Replayer(Packer(log))
        erased = manifest.get("erased", {}).get("session")  # (since 0.3.0)
        for session in named:
            assert all(
                r.ok or (session == erased and r.erased_by is not None)
                for r in replayer.replay_all(
                    session, render=lambda request: renderer_for(request, blobs=log.blob)
                )
            )


def _loose(function: object) -> Any:
    """``function`` untyped, to call it with the mistakes a user makes."""
    return function


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda log, f: _loose(import_file)(f, log), "log must be a turnlog Log"),
        (lambda log, f: _loose(import_path)(f, log), "import_path(turnlog.open(store), path)"),
        (lambda log, f: _loose(import_file)(str(f.parent), f), "open one and pass it"),
        (lambda log, f: _loose(import_file)(log, 5), "path must be a str or os.PathLike"),
        (lambda log, f: _loose(import_file)(log), "missing its required argument 'path'"),
        (lambda log, f: _loose(import_path)(log, f, skip=True), "did you mean 'skip_bad'"),
        (lambda log, f: _loose(detect)(5), "source must be a path, or the file's bytes"),
    ],
)
def test_an_import_given_its_arguments_wrong_says_how_to_call_it(
    tmp_path: Path, call: Any, says: str
) -> None:
    """The log and the path the other way round (or a store's path for the log) failed
    with "expected str, bytes or os.PathLike object, not Log" or "'str' object has no
    attribute 'validate'"."""
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text(
        '{"type": "user", "sessionId": "s1", "uuid": "u1", "message": {"role": "user", '
        '"content": "hello"}}\n'
    )
    with turnlog.open(tmp_path / "store") as log:
        with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
            call(log, transcript)
        assert says in str(raised.value)
        assert log.sessions() == []

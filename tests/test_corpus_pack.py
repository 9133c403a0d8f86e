"""Real transcripts pack at 8k, 32k and 128k windows with every invariant holding.

The transcripts are the shared corpus (``../shared/corpus`` beside the repository;
see its SOURCES.md). The small loader below turns each format into turnlog payloads
just well enough to pack them; the real importers live in adapters and come later.
The test is skipped when the corpus folder is absent.
"""

from __future__ import annotations

import ast
import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from turnlog import Policy
from turnlog.events import (
    AssistantMessageAdded,
    Event,
    Part,
    ReasoningPart,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.packing import Projection, get_counter
from turnlog.testing import Compact, SessionItem, build, check_all, memory_log

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS") or Path(__file__).parents[1] / ".." / "shared" / "corpus"
).resolve()

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no transcript corpus at {CORPUS}")


# -- a minimal loader ---------------------------------------------------------------------------
class _Session:
    """Collects payloads; assistant messages stay open for merging until closed."""

    def __init__(self) -> None:
        self.items: list[SessionItem | list[Part]] = []
        self.names: dict[str, str] = {}  # call id -> tool name
        self.open_id: str | None = None  # id of the assistant message being merged
        self.by_id: dict[str, list[Part]] = {}

    def assistant(self, parts: list[Part], message_id: str | None = None) -> None:
        for part in parts:
            if isinstance(part, ToolCall):
                self.names[part.id] = part.name
        if message_id is not None and message_id in self.by_id:
            self.by_id[message_id].extend(parts)
            return
        if message_id is None and self.items and isinstance(self.items[-1], list):
            self.items[-1].extend(parts)  # consecutive assistant-side items: one message
            return
        merged = list(parts)
        self.items.append(merged)
        if message_id is not None:
            self.by_id[message_id] = merged

    def add(self, item: SessionItem) -> None:
        self.items.append(item)

    def result(
        self, call_id: str, output: str, *, is_error: bool = False, exit_code: int | None = None
    ) -> None:
        self.add(
            ToolResultAdded(
                call_id=call_id or "unknown",
                tool_name=self.names.get(call_id, "unknown"),
                output=output,
                is_error=is_error,
                exit_code=exit_code,
            )
        )

    def done(self) -> list[SessionItem]:
        out: list[SessionItem] = []
        for item in self.items:
            if isinstance(item, list):
                if item:
                    out.append(AssistantMessageAdded(parts=tuple(item)))
            else:
                out.append(item)
        return out


def _text(content: Any) -> str:
    """Text of a content field: a string or a list of blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    pieces.append(block["text"])
                elif block.get("type") == "image":
                    pieces.append("[image]")
            elif isinstance(block, str):
                pieces.append(block)
        return "\n".join(pieces)
    return "" if content is None else json.dumps(content, sort_keys=True, default=str)


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a record broken across lines in the source: skip it
        if isinstance(record, dict):
            yield record


def load_claude_code(path: Path) -> list[SessionItem]:
    session = _Session()
    for record in _json_lines(path):
        message = record.get("message")
        if record.get("type") not in ("user", "assistant") or not isinstance(message, dict):
            continue
        content = message.get("content")
        if record["type"] == "assistant":
            parts: list[Part] = []
            for block in content if isinstance(content, list) else [content]:
                if isinstance(block, str) and block:
                    parts.append(TextPart(text=block))
                elif not isinstance(block, dict):
                    continue
                elif block.get("type") == "text" and block.get("text"):
                    parts.append(TextPart(text=block["text"]))
                elif block.get("type") == "thinking":
                    parts.append(
                        ReasoningPart(
                            text=block.get("thinking", ""),
                            opaque=block.get("signature", ""),
                            provider="anthropic",
                        )
                    )
                elif block.get("type") == "tool_use":
                    parts.append(
                        ToolCall(
                            id=block["id"],
                            name=block.get("name", "tool"),
                            arguments=json.dumps(block.get("input", {})),
                        )
                    )
            if parts:
                session.assistant(parts, message.get("id"))
            continue
        if record.get("isCompactSummary"):
            before = len(session.done())
            if before:
                session.add(Compact(first=0, last=before - 1, summary=_text(content)))
            continue
        if isinstance(content, list):
            texts = []
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    session.result(
                        block.get("tool_use_id", ""),
                        _text(block.get("content")),
                        is_error=bool(block.get("is_error")),
                    )
                else:
                    texts.append(_text([block]))
            if any(texts):
                session.add(UserMessageAdded(text="\n".join(t for t in texts if t)))
        else:
            session.add(UserMessageAdded(text=_text(content)))
    return session.done()


def load_codex(path: Path) -> list[SessionItem]:
    session = _Session()
    sections = 0
    for record in _json_lines(path):
        payload = record.get("payload")
        if not isinstance(payload, dict):
            continue
        if record.get("type") == "session_meta" and payload.get("instructions"):
            session.add(SystemSectionSet(name="instructions", text=payload["instructions"]))
        if record.get("type") != "response_item":
            continue
        kind = payload.get("type")
        if kind == "message":
            role = payload.get("role")
            text = _text(payload.get("content"))
            if role == "assistant":
                session.assistant([TextPart(text=text or "(empty)")])
            elif role in ("system", "developer"):
                sections += 1
                session.add(SystemSectionSet(name=f"{role}-{sections}", text=text or "-"))
            else:
                session.add(UserMessageAdded(text=text))
        elif kind == "reasoning":
            summary = _text(payload.get("summary"))
            opaque = payload.get("encrypted_content") or ""
            if summary or opaque:
                session.assistant([ReasoningPart(text=summary, opaque=opaque, provider="openai")])
        elif kind in ("function_call", "custom_tool_call"):
            arguments = payload.get("arguments")
            if kind == "custom_tool_call":
                arguments = json.dumps({"input": payload.get("input", "")})
            session.assistant(
                [
                    ToolCall(
                        id=payload.get("call_id") or "call",
                        name=payload.get("name", "tool"),
                        arguments=arguments if isinstance(arguments, str) else "{}",
                    )
                ]
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = payload.get("output")
            exit_code = None
            if isinstance(output, str) and output.startswith("{"):
                try:
                    decoded = json.loads(output)
                except ValueError:
                    decoded = None
                if isinstance(decoded, dict) and "output" in decoded:
                    output = decoded["output"]
                    meta = decoded.get("metadata")
                    if isinstance(meta, dict) and isinstance(meta.get("exit_code"), int):
                        exit_code = meta["exit_code"]
            session.result(payload.get("call_id", ""), _text(output), exit_code=exit_code)
    return session.done()


def load_mini_swe_agent(path: Path) -> list[SessionItem]:
    data = json.loads(path.read_text(encoding="utf-8"))
    session = _Session()
    for i, message in enumerate(data.get("messages", [])):
        role, text = message.get("role"), _text(message.get("content"))
        if role == "system":
            session.add(SystemSectionSet(name=f"system-{i}", text=text or "-"))
        elif role == "assistant":
            session.add(AssistantMessageAdded(parts=(TextPart(text=text or "(empty)"),)))
        else:
            session.add(UserMessageAdded(text=text))
    return session.done()


def load_swe_agent(path: Path) -> list[SessionItem]:
    data = json.loads(path.read_text(encoding="utf-8"))
    session = _Session()
    for i, message in enumerate(data.get("history", [])):
        role, text = message.get("role"), _text(message.get("content"))
        if role == "system":
            session.add(SystemSectionSet(name=f"system-{i}", text=text or "-"))
        elif role == "assistant":
            parts: list[Part] = [TextPart(text=text)] if text else []
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                parts.append(
                    ToolCall(
                        id=call.get("id") or f"call-{i}",
                        name=function.get("name", "tool"),
                        arguments=function.get("arguments") or "{}",
                    )
                )
            session.add(AssistantMessageAdded(parts=tuple(parts or [TextPart(text="(empty)")])))
            for part in parts:
                if isinstance(part, ToolCall):
                    session.names[part.id] = part.name
        elif role == "tool":
            ids = message.get("tool_call_ids") or [message.get("tool_call_id", "")]
            if isinstance(ids, str):  # stored as the repr of a list in some files
                ids = ast.literal_eval(ids) if ids.startswith("[") else [ids]
            session.result(str(ids[0]) if ids else "", text)
        else:
            session.add(UserMessageAdded(text=text))
    return session.done()


def _openhands_events(path: Path) -> Iterator[list[dict[str, Any]]]:
    if path.suffix == ".jsonl":
        for record in _json_lines(path):
            yield [e for e in record.get("history", []) if isinstance(e, dict)]
    else:
        yield [e for e in json.loads(path.read_text(encoding="utf-8")) if isinstance(e, dict)]


def load_openhands(path: Path) -> list[SessionItem]:
    session = _Session()
    for n, events in enumerate(_openhands_events(path)):
        last_action = ""
        for i, event in enumerate(events):
            ident = f"oh{n}-{event.get('id', i)}"
            args: dict[str, Any] = (
                event["args"]
                if isinstance(event.get("args"), dict)
                else {k: v for k, v in event.items() if k not in ("action", "observation")}
            )
            action, observation = event.get("action"), event.get("observation")
            if action == "message":
                text = args.get("content") or event.get("message") or ""
                by_user = event.get("source", "user" if i == 0 else "agent") == "user"
                if by_user:
                    session.add(UserMessageAdded(text=str(text)))
                else:
                    session.add(AssistantMessageAdded(parts=(TextPart(text=str(text)),)))
            elif action:
                thought = str(args.get("thought") or event.get("message") or "")
                clean = {
                    k: v for k, v in args.items() if k not in ("thought", "tool_call_metadata")
                }
                parts: list[Part] = [TextPart(text=thought)] if thought else []
                if action in ("finish", "think", "reject"):
                    parts = parts or [TextPart(text=action)]
                else:
                    parts.append(
                        ToolCall(
                            id=ident, name=str(action), arguments=json.dumps(clean, default=str)
                        )
                    )
                    session.names[ident] = str(action)
                    last_action = ident
                session.add(AssistantMessageAdded(parts=tuple(parts)))
            elif observation:
                cause = event.get("cause")
                call_id = f"oh{n}-{cause}" if cause is not None else last_action
                extras: dict[str, Any] = (
                    event["extras"] if isinstance(event.get("extras"), dict) else {}
                )
                code = extras.get("exit_code", event.get("exit_code"))
                session.result(
                    call_id,
                    str(event.get("content", "")),
                    is_error=observation == "error",
                    exit_code=int(code)
                    if isinstance(code, (int, str)) and str(code).lstrip("-").isdigit()
                    else None,
                )
    return session.done()


LOADERS = {
    "claude_code_jsonl": ("*.jsonl", load_claude_code),
    "codex_rollout_jsonl": ("*.jsonl", load_codex),
    "mini_swe_agent_traj_json": ("*.traj.json", load_mini_swe_agent),
    "swe_agent_traj": ("*.traj", load_swe_agent),
    "openhands_events": ("*.json*", load_openhands),
}


def transcripts() -> list[tuple[str, Path]]:
    if not CORPUS.is_dir():
        return []
    found = []
    for folder, (pattern, _) in LOADERS.items():
        for path in sorted((CORPUS / folder).rglob(pattern)):
            found.append((folder, path))
    return found


@functools.cache
def lineage(folder: str, path: Path) -> tuple[Event, ...]:
    """The transcript appended to a memory log, as its lineage (loaded once per file)."""
    items = LOADERS[folder][1](path)
    if not items:
        return ()
    log = memory_log()
    session = build(log, "corpus", items)
    return tuple(log.lineage(session))


def policies_for(window: int) -> list[Policy]:
    """The defaults scaled to the window, and a ratio policy under which every stage fires."""
    reserve = window // 8
    usable = window - reserve
    scaled = Policy(
        context_window=window,
        output_reserve=reserve,
        warning_buffer=usable * 15 // 100,
        compact_buffer=usable * 75 // 1000,
        blocking_buffer=usable * 2 // 100,
        prune_protect_tokens=usable // 4,
        prune_min_savings=usable // 8,
        truncate_bytes=min(50_000, usable * 2),
    )
    eager = Policy(
        context_window=window,
        output_reserve=reserve,
        warning_buffer=None,
        warning_ratio=0.5,
        compact_buffer=None,
        compact_ratio=0.7,
        blocking_buffer=None,
        blocking_ratio=0.9,
        prune_protect_turns=1,
        prune_protect_tokens=usable // 20,
        prune_min_savings=0,
        truncate_lines=400,
        truncate_bytes=min(50_000, usable),
        cache_breakpoints=2,
    )
    return [scaled, eager]


CASES = transcripts()


def test_the_corpus_has_every_format() -> None:
    assert {folder for folder, _ in CASES} == set(LOADERS)


@pytest.mark.parametrize("window", [8_000, 32_000, 128_000])
@pytest.mark.parametrize(("folder", "path"), CASES, ids=[f"{f}/{p.name[:40]}" for f, p in CASES])
def test_a_real_transcript_packs_with_every_invariant(folder: str, path: Path, window: int) -> None:
    events = lineage(folder, path)
    counter = get_counter("cl100k_base")

    def view() -> Projection:
        projection = Projection(counter)
        projection.extend(events)
        return projection

    for policy in policies_for(window):
        check_all(view, policy)

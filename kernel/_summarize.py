"""Summarizers: old events in, a structured summary out.

Theory of operation
-------------------
A `Summarizer` gets a `SummaryRequest` (the model-visible history of a span,
already rendered as neutral messages, or, for a rollup, the child summaries)
and returns a `Summary`. The kernel ships `ExtractiveSummarizer`, which works
offline with no model: it fills the structured sections of a compaction
summary (Goal, Key Decisions, Accomplished, In Progress, Relevant Files,
Errors) from the events themselves, deterministically. Clients that call a
model live in ``turnlog.adapters``; they implement the same protocol.

``prompt_hash`` names the exact instructions and input the summarizer used, so
a compaction event's provenance says which prompt produced it.

Summaries never feed back into new level-0 summaries as source text: a level-0
request carries events only (``CompactionCommitted`` is never an item); a
rollup carries child summaries explicitly, marked as such.
"""

from __future__ import annotations

import json
import re
from typing import Protocol, runtime_checkable

import blake3
import msgspec

from ._events import ToolCall
from ._prompt import Message
from ._tokens import TokenCounter

__all__ = ["ExtractiveSummarizer", "Summarizer", "Summary", "SummaryRequest"]

#: The instructions given to model summarizers (and hashed into provenance).
SUMMARY_INSTRUCTIONS = """\
You are compacting the history of a coding-agent session. Summarize the transcript
below; do not answer questions in it or continue the work. Write these sections:

## Goal
## Key Decisions
## Accomplished
## In Progress
## Relevant Files

Be specific: file paths, commands and their exit codes, errors, decisions and their
reasons. Stay under {max_tokens} tokens."""

_ROLLUP_INSTRUCTIONS = """\
Merge the following summaries of consecutive parts of one session into one summary
with the same sections, oldest first, keeping specific paths, commands and decisions.
Stay under {max_tokens} tokens."""


class SummaryRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What to summarize.

    Attributes:
        session: the session.
        first_pos / last_pos: the lineage positions covered.
        level: 0 for events, >= 1 for a rollup of summaries.
        messages: for level 0, the span as neutral messages.
        children: for a rollup, the child summaries' texts, oldest first.
        max_tokens: the cap the summary must respect.
        reason: why (threshold, overflow, manual, schedule, rollup).
    """

    session: str
    first_pos: int
    last_pos: int
    level: int
    max_tokens: int
    messages: tuple[Message, ...] = ()
    children: tuple[str, ...] = ()
    reason: str = "threshold"

    def instructions(self) -> str:
        """The instruction text for a model summarizer."""
        template = SUMMARY_INSTRUCTIONS if self.level == 0 else _ROLLUP_INSTRUCTIONS
        return template.format(max_tokens=self.max_tokens)

    def source_text(self) -> str:
        """The input text (transcript or child summaries) a model summarizer gets."""
        if self.level == 0:
            return render_transcript(self.messages)
        return "\n\n".join(f"<summary part=\"{i + 1}\">\n{text}\n</summary>"
                           for i, text in enumerate(self.children))

    def prompt_hash(self) -> str:
        """blake3 of instructions + input: the provenance of the summary."""
        return blake3.blake3((self.instructions() + "\x00" + self.source_text()).encode(
            "utf-8", "surrogatepass")).hexdigest()


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    """A summarizer's answer."""

    text: str
    summarizer: str
    model: str = ""
    prompt_hash: str = ""


@runtime_checkable
class Summarizer(Protocol):
    """Turns a `SummaryRequest` into a `Summary` (may raise on failure)."""

    @property
    def id(self) -> str:
        """A stable name, e.g. ``extractive`` or ``openai:gpt-4o-mini``."""
        ...

    def summarize(self, request: SummaryRequest) -> Summary:
        """Summarize, or raise any exception to record a failure."""
        ...


def render_transcript(messages: tuple[Message, ...] | list[Message]) -> str:
    """A plain-text transcript of neutral messages (the input of model summarizers)."""
    lines: list[str] = []
    for message in messages:
        if message.role == "tool":
            status = " (error)" if message.is_error else ""
            lines.append(f"[tool result {message.name}{status}]\n{message.text}")
            continue
        text = message.text
        calls = [f"[call {c.name} {c.arguments}]" for c in message.tool_calls]
        lines.append(f"[{message.role}]\n" + "\n".join(filter(None, [text, *calls])))
    return "\n\n".join(lines)


_DECISION = re.compile(r"\b(based on|i'll use|i will use|the issue is|the problem is|decided|"
                       r"instead of|root cause|so the fix|we should|let's use)\b", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_FILE_KEYS = ("file_path", "path", "filename", "notebook_path")
_EDIT_TOOLS = {"Edit", "MultiEdit", "Write", "file_edit", "file_write", "edit", "write_file",
               "str_replace_editor", "apply_patch", "create", "NotebookEdit"}
_READ_TOOLS = {"Read", "read_file", "file_read", "view", "open", "cat"}
_SHELL_TOOLS = {"Bash", "bash", "shell", "shell_command", "run", "execute_bash", "exec"}
_SECTIONS = ("Goal", "Key Decisions", "Accomplished", "In Progress", "Relevant Files", "Errors")


class ExtractiveSummarizer:
    """Builds the structured summary from the events themselves; offline, deterministic.

    Parameters:
        counter: measures the summary against ``max_tokens``.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter

    @property
    def id(self) -> str:
        return "extractive"

    def summarize(self, request: SummaryRequest) -> Summary:
        if request.level > 0:
            sections = _merge_children(request.children)
        else:
            sections = _extract(request.messages)
        text = _render(sections, request.max_tokens, self._counter)
        return Summary(text=text, summarizer=self.id, prompt_hash=request.prompt_hash())


def _extract(messages: tuple[Message, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {name: [] for name in _SECTIONS}
    calls: dict[str, ToolCall] = {}
    users = [m.text.strip() for m in messages if m.role == "user" and m.text.strip()]
    if users:
        out["Goal"].append(_clip(users[0], 400))
        for later in users[1:]:
            out["Goal"].append("Then: " + _clip(later, 200))
    read: list[str] = []
    edited: list[str] = []
    last_assistant = ""
    for message in messages:
        if message.role == "assistant":
            for tool_call in message.tool_calls:
                calls[tool_call.id] = tool_call
            if message.text.strip():
                last_assistant = message.text.strip()
            for sentence in _SENTENCE.split(message.text):
                if _DECISION.search(sentence):
                    out["Key Decisions"].append(_clip(sentence.strip(), 240))
        elif message.role == "tool":
            call = calls.get(message.tool_call_id)
            args = _args(call.arguments) if call else {}
            path = next((str(args[k]) for k in _FILE_KEYS if isinstance(args.get(k), str)), "")
            name = message.name or (call.name if call else "tool")
            if name in _EDIT_TOOLS and path:
                if not message.is_error:
                    edited.append(path)
                    out["Accomplished"].append(f"Edited {path}")
            elif name in _READ_TOOLS and path:
                read.append(path)
            elif name in _SHELL_TOOLS:
                command = str(args.get("command") or args.get("cmd") or "")
                code = _exit_code(message.text)
                status = "failed" if message.is_error or (code not in (None, 0)) else "ran"
                suffix = f" (exit {code})" if code is not None else ""
                line = f"{status.capitalize()}: `{_clip(command, 160)}`{suffix}"
                (out["Errors"] if status == "failed" else out["Accomplished"]).append(line)
            if message.is_error and name not in _SHELL_TOOLS:
                out["Errors"].append(f"{name} {path or ''} failed: "
                                     f"{_clip(message.text.strip(), 160)}".replace("  ", " "))
    if last_assistant:
        out["In Progress"].append(_clip(last_assistant, 300))
    if users:
        out["In Progress"].append("Latest request: " + _clip(users[-1], 200))
    for path in _unique(edited + read):
        out["Relevant Files"].append(f"{path} ({'edited' if path in edited else 'read'})")
    return {k: _unique(v) for k, v in out.items()}


def _merge_children(children: tuple[str, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {name: [] for name in _SECTIONS}
    for text in children:
        current = ""
        for line in text.splitlines():
            if line.startswith("## "):
                current = line[3:].strip()
                continue
            item = line.removeprefix("- ").strip()
            if current in out and item:
                out[current].append(item)
    return {k: _unique(v) for k, v in out.items()}


def _render(sections: dict[str, list[str]], max_tokens: int, counter: TokenCounter) -> str:
    # Drop the oldest items of the longest sections until the cap holds;
    # "In Progress" keeps its latest lines, other sections keep their first.
    keep = {name: list(items) for name, items in sections.items()}

    def text() -> str:
        parts = []
        for name in _SECTIONS:
            items = keep[name]
            if not items:
                continue
            parts.append(f"## {name}\n" + "\n".join(f"- {item}" for item in items))
        return "\n\n".join(parts) or "## Goal\n- (no model-visible content in this span)"

    rendered = text()
    while counter.count(rendered) > max_tokens:
        longest = max(_SECTIONS, key=lambda n: (len(keep[n]), -_SECTIONS.index(n)))
        if not keep[longest]:
            break
        if longest == "In Progress":
            keep[longest].pop(0)
        else:
            keep[longest].pop()
        rendered = text()
    while counter.count(rendered) > max_tokens and len(rendered) > 16:
        rendered = rendered[: int(len(rendered) * 0.9)]
    return rendered


def _args(arguments: str) -> dict[str, object]:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


_EXIT = re.compile(r"(?:exit code|exit status|returncode|Exit code:?)\D{0,3}(-?\d+)",
                   re.IGNORECASE)


def _exit_code(text: str) -> int | None:
    match = _EXIT.search(text[-2000:]) or _EXIT.search(text[:2000])
    return int(match.group(1)) if match else None


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


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

Full content: a level-0 request carries the whole text of every covered event,
a blob-stored output's blob included, never the preview packing shows. A
summarizer may say how much it reads at once (``window``: tokens of its
instructions, input and answer together); a span whose transcript is larger is
summarized in parts (`split_transcript`: consecutive pieces of the transcript,
a large output cut at line ends, each within the window), and the parts'
summaries are merged by a request of the same shape as a rollup's (``children``
set, ``level`` still 0: it summarizes events). Cuts depend on the text and
the token counter only, so the same span is cut the same way every time.

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

from ._events import Part, TextPart, ToolCall
from ._prompt import Message
from ._tokens import TokenCounter
from ._validation import check_integer

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

_PART_NOTE = """

The transcript below is part {part} of {parts} of the history being compacted (a
long output may begin or end mid-way); summarize this part only."""

#: Share of a summarizer's window a request may fill by the compactor's count: the
#: summary model's tokenizer may count the same text differently.
WINDOW_SHARE = 0.85


class SummaryRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What to summarize.

    Attributes:
        session: the session.
        first_pos / last_pos: the lineage positions covered.
        level: 0 for events, >= 1 for a rollup of summaries.
        messages: for level 0, the span as neutral messages.
        children: for a rollup, the child summaries' texts, oldest first; at
            level 0, the summaries of a span's parts, which this request merges.
        max_tokens: the cap the summary must respect.
        reason: why (threshold, overflow, manual, schedule, rollup).
        part / parts: for one part of a span summarized in parts, its number (from
            1) and how many there are; 0 otherwise.
    """

    session: str
    first_pos: int
    last_pos: int
    level: int
    max_tokens: int
    messages: tuple[Message, ...] = ()
    children: tuple[str, ...] = ()
    reason: str = "threshold"
    part: int = 0
    parts: int = 0

    @property
    def merges(self) -> bool:
        """True when the input is summaries (a rollup, or the merge of a span's parts)."""
        return self.level > 0 or bool(self.children)

    def instructions(self) -> str:
        """The instruction text for a model summarizer."""
        if self.merges:
            return _ROLLUP_INSTRUCTIONS.format(max_tokens=self.max_tokens)
        text = SUMMARY_INSTRUCTIONS.format(max_tokens=self.max_tokens)
        if self.parts:
            text += _PART_NOTE.format(part=self.part, parts=self.parts)
        return text

    def source_text(self) -> str:
        """The input text (transcript or child summaries) a model summarizer gets."""
        if not self.merges:
            return render_transcript(self.messages)
        return "\n\n".join(
            f'<summary part="{i + 1}">\n{text}\n</summary>' for i, text in enumerate(self.children)
        )

    def prompt_hash(self) -> str:
        """blake3 of instructions + input: the provenance of the summary."""
        return blake3.blake3(
            (self.instructions() + "\x00" + self.source_text()).encode("utf-8", "surrogatepass")
        ).hexdigest()


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


def window_of(summarizer: object) -> int | None:
    """The tokens a summarizer reads at once (its optional ``window``), or None.

    A summarizer without a ``window`` attribute (or with None) takes any span in
    one request.
    """
    window = getattr(summarizer, "window", None)
    if window is None or isinstance(window, bool) or not isinstance(window, int):
        return None
    return window if window > 0 else None


class Piece(msgspec.Struct, frozen=True, kw_only=True):
    """A stretch of a transcript: message ``index`` of the span, characters
    ``start`` to ``end`` of its text, as a message of that text alone."""

    index: int
    start: int
    end: int
    message: Message


def split_transcript(
    messages: tuple[Message, ...] | list[Message], budget: int, counter: TokenCounter
) -> list[list[Piece]]:
    """Cut a span's messages into parts whose transcripts are at most ``budget``
    tokens, in order; a message larger than that is cut into pieces at line ends
    (at a character when a line alone is too large). Deterministic: the cuts depend
    on the texts and ``counter`` only.

    Raises:
        ValueError: ``budget`` is too small to hold a message's framing.
    """
    parts: list[list[Piece]] = []
    current: list[Piece] = []
    used = 0
    for index, message in enumerate(messages):
        whole = counter.count(render_transcript([message])) + 1
        if whole <= budget:
            pieces = [Piece(index=index, start=0, end=len(message.text), message=message)]
            costs = [whole]
        else:
            pieces, costs = _cut_message(index, message, budget, counter)
        for piece, cost in zip(pieces, costs, strict=True):
            if current and used + cost > budget:
                parts.append(current)
                current, used = [], 0
            current.append(piece)
            used += cost
    if current:
        parts.append(current)
    return parts


def _cut_message(
    index: int,
    message: Message,
    budget: int,
    counter: TokenCounter,
) -> tuple[list[Piece], list[int]]:
    """A message too large for one part, as pieces of its text (tool calls and other
    parts go with the last piece), with each piece's token count."""
    text = message.text
    others = tuple(p for p in message.parts if not isinstance(p, TextPart))

    def piece(start: int, end: int, last: bool) -> Message:
        parts: tuple[Part, ...] = (TextPart(text=text[start:end]),)
        return msgspec.structs.replace(message, parts=parts + (others if last else ()))

    frame = counter.count(render_transcript([piece(0, 0, True)])) + 1
    room = budget - frame
    if room < 16:
        raise ValueError(
            f"a part of {budget} tokens cannot hold a message's framing ({frame} tokens)"
        )
    total = max(1, counter.count(text))
    step = max(1, len(text) * room // total)  # characters per part at the text's density
    pieces: list[Piece] = []
    costs: list[int] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + step)
        while True:
            if end < len(text):
                newline = text.rfind("\n", start, end)
                cut = newline + 1 if newline >= start + (end - start) // 2 else end
            else:
                cut = end
            cost = counter.count(render_transcript([piece(start, cut, cut >= len(text))])) + 1
            if cost <= budget or cut - start <= 1:
                break
            end = start + max(1, (cut - start) * 9 // 10)
        pieces.append(
            Piece(index=index, start=start, end=cut, message=piece(start, cut, cut >= len(text)))
        )
        costs.append(cost)
        start = cut
    if not pieces:  # no text at all: the framing alone fits (checked above)
        pieces.append(Piece(index=index, start=0, end=0, message=message))
        costs.append(frame)
    return pieces, costs


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


_DECISION = re.compile(
    r"\b(based on|i'll use|i will use|the issue is|the problem is|decided|"
    r"instead of|root cause|so the fix|we should|let's use)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_FILE_KEYS = ("file_path", "path", "filename", "notebook_path")
_EDIT_TOOLS = {
    "Edit",
    "MultiEdit",
    "Write",
    "file_edit",
    "file_write",
    "edit",
    "write_file",
    "str_replace_editor",
    "apply_patch",
    "create",
    "NotebookEdit",
}
_READ_TOOLS = {"Read", "read_file", "file_read", "view", "open", "cat"}
_SHELL_TOOLS = {"Bash", "bash", "shell", "shell_command", "run", "execute_bash", "exec"}
_SECTIONS = ("Goal", "Key Decisions", "Accomplished", "In Progress", "Relevant Files", "Errors")


class ExtractiveSummarizer:
    """Builds the structured summary from the events themselves; offline, deterministic.

    It reads every output whole: a failed command's exit code and the error lines
    of an output (``Traceback``, ``...Error:``, ``FAILED``, ``error:``) are found
    wherever they are in it, not only in the head and tail a preview keeps.

    Parameters:
        counter: measures the summary against ``max_tokens``.
        window: when set, the tokens it reads at once: a larger span is summarized
            in parts and merged, as with a model summarizer (None: any span at once).
    """

    def __init__(self, counter: TokenCounter, *, window: int | None = None) -> None:
        check_integer(
            window,
            "window",
            min_value=256,
            optional=True,
            hint="tokens the summarizer reads at once",
        )
        self._counter = counter
        self.window = window

    @property
    def id(self) -> str:
        return "extractive"

    def summarize(self, request: SummaryRequest) -> Summary:
        if request.merges:
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
                if status == "failed":
                    out["Errors"] += [_clip(found, 200) for found in _error_lines(message.text)]
            if message.is_error and name not in _SHELL_TOOLS:
                out["Errors"].append(
                    f"{name} {path or ''} failed: {_clip(message.text.strip(), 160)}".replace(
                        "  ", " "
                    )
                )
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


_EXIT = re.compile(r"(?:exit code|exit status|returncode|Exit code:?)\D{0,3}(-?\d+)", re.IGNORECASE)


def _exit_code(text: str) -> int | None:
    match = _EXIT.search(text[-2000:]) or _EXIT.search(text[:2000])
    return int(match.group(1)) if match else None


_ERROR_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b:|\bFAILED\b|\berror:")


def _error_lines(text: str, limit: int = 3) -> list[str]:
    """The first error lines of a failed command's whole output: the exception line
    that ends a Python traceback, and lines naming an error or a failure."""
    found: list[str] = []
    traceback = False
    for line in text.split("\n"):
        if line.startswith("Traceback (most recent call last)"):
            traceback = True
        elif traceback:
            if line.strip() and not line[0].isspace():
                found.append(line.strip())
                traceback = False
        elif _ERROR_LINE.search(line):
            found.append(line.strip())
        if len(found) >= 4 * limit:
            break
    return _unique(found)[:limit]


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

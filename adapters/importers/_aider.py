"""Aider chat histories (``.aider.chat.history.md``).

Theory of operation
-------------------
Aider appends to one markdown file for every session it runs in a project; a
session starts with ``# aider chat started at YYYY-MM-DD HH:MM:SS``. In a
session, lines starting ``#### `` are the user's input (one message per run
of such lines), lines starting ``> `` are aider's console output (banner,
added files, token and cost reports, applied edits, questions), and the text
between is the model's reply, edit blocks included. Aider writes every line
of user input and console output with two trailing spaces (markdown line
breaks); they are not part of the text.

Each session becomes one turnlog session (``aider-<start time>``): user input
as ``UserMessageAdded``, replies as ``AssistantMessageAdded`` (text only; the
format has no structured tool calls or reasoning), console output as
``NotificationAdded`` (source ``aider/console``: aider does not send it to the
model, but it is kept where it happened) and a ``Tokens: ... sent, ...
received`` report as a derived ``ResponseReceived``. The session header is the
only timestamp (local time, read as UTC); every event of the session carries
it.

Export writes what aider writes (blank lines included). When the text of a
block in the file differs from that rendering (extra blank lines, a line
without the two spaces), the block's exact text is kept in ``meta`` and used
on export, so files come back byte for byte.
"""

from __future__ import annotations

import re

from turnlog.events import (
    AssistantMessageAdded,
    Body,
    Event,
    NotificationAdded,
    ResponseReceived,
    SystemSectionSet,
    TextPart,
    Usage,
    UserMessageAdded,
)

from ._plan import (
    BadRecord,
    Entry,
    ExportSession,
    Format,
    Obj,
    Parsed,
    Plan,
    RecordSink,
    format_time,
    parse_time,
    session_slug,
)

__all__ = ["FORMAT", "NAME", "export", "parse", "sniff"]

NAME = "aider"
_HEADER = "# aider chat started at "
_TOKENS = re.compile(
    r"Tokens: ([\d.]+)(k?) sent(?:, ([\d.]+)(k?) cache write)?(?:, ([\d.]+)(k?) cache hit)?"
    r", ([\d.]+)(k?) received"
)
# Blank lines aider writes after / before each kind of block.
_TRAILING = {"header": 1, "user": 0, "console": 0, "assistant": 1}
_LEADING = {"header": 1, "user": 1, "console": 0, "assistant": 1}


def sniff(data: bytes) -> bool:
    """True when ``data`` looks like an Aider chat history."""
    head = data[:65536].decode("utf-8", errors="replace")
    return head.lstrip().startswith(_HEADER.strip()) or f"\n{_HEADER}" in head


def _kind(line: str) -> str:
    if line.startswith(_HEADER):
        return "header"
    if line.startswith("#### ") or line == "####":
        return "user"
    if line.startswith("> ") or line == ">":
        return "console"
    return "blank" if not line.strip() else "assistant"


def _strip(line: str, prefix: str) -> str:
    text = line[len(prefix) :] if line.startswith(prefix) else line.lstrip(prefix.strip())
    return text[:-2] if text.endswith("  ") else text


class _Block:
    def __init__(self, kind: str, start: int) -> None:
        self.kind = kind
        self.start = start  # index of the first content line
        self.end = start  # index after the last content line
        self.region = ""  # the exact text the block occupies


def _blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        kind = _kind(lines[i])
        if kind == "blank":
            i += 1
            continue
        block = _Block(kind, i)
        i += 1
        if kind in ("user", "console"):
            while i < len(lines) and _kind(lines[i]) == kind:
                i += 1
            block.end = i
        elif kind == "assistant":
            last = i
            while i < len(lines) and _kind(lines[i]) in ("assistant", "blank"):
                if _kind(lines[i]) == "assistant":
                    last = i + 1
                i += 1
            block.end = max(last, block.start + 1)
            i = block.end
        else:
            block.end = i
        blocks.append(block)
    return blocks


def _text(block: _Block, lines: list[str]) -> str:
    content = lines[block.start : block.end]
    if block.kind == "user":
        text = "\n".join(_strip(line, "#### ") for line in content)
        return "" if text == "<blank>" else text
    if block.kind == "console":
        return "\n".join(_strip(line, "> ") for line in content)
    return "\n".join(content)


def _render(kind: str, text: str, previous: str | None) -> str:
    """What aider writes for a block after a block of kind ``previous``."""
    blanks = (_TRAILING[previous] if previous else 0) + _LEADING[kind]
    if kind == "user":
        body = "".join(f"#### {line}  \n" for line in (text or "<blank>").split("\n"))
    elif kind == "console":
        body = "".join(f"> {line}  \n" for line in text.split("\n"))
    elif kind == "header":
        body = f"{_HEADER}{text}\n"
    else:
        body = text + "\n"
    return "\n" * blanks + body


def _tokens(text: str) -> Usage | None:
    found = _TOKENS.search(text)
    if found is None:
        return None
    g = found.groups()

    def count(value: str | None, k: str | None) -> int:
        if not value:
            return 0
        try:
            return min(round(float(value) * (1000 if k else 1)), 2**62)
        except ValueError:
            return 0

    return Usage(
        input_tokens=count(g[0], g[1]),
        cache_write_tokens=count(g[2], g[3]),
        cache_read_tokens=count(g[4], g[5]),
        output_tokens=count(g[6], g[7]),
    )


def parse(data: bytes, source: str, skip_bad: bool) -> Parsed:
    """Map a chat history to one plan per session.

    Raises:
        BadRecord: the file is not UTF-8 text.
    """
    del source, skip_bad  # a text file has no records that could be left out
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRecord(f"byte {exc.start}", "", "not UTF-8 text") from None
    lines = text.split("\n")
    final_newline = lines[-1] == ""
    if final_newline:
        lines.pop()
    parsed = Parsed(format=NAME, plans=[])
    starts = [i for i, line in enumerate(lines) if line.startswith(_HEADER)]
    bounds = ([0] if not starts or starts[0] > 0 else []) + starts + [len(lines)]
    names: set[str] = set()
    for n in range(len(bounds) - 1):
        first, stop = bounds[n], bounds[n + 1]
        # Aider writes a blank line before each header: it belongs to that header.
        if n + 2 < len(bounds) and stop > first and not lines[stop - 1].strip():
            stop -= 1
        if first > 0 and lines[first].startswith(_HEADER) and not lines[first - 1].strip():
            first -= 1
        plan = _session(lines[first:stop], first, names)
        if plan.entries:
            parsed.plans.append(plan)
    if parsed.plans and not final_newline:
        parsed.plans[-1].entries[-1].meta["no_final_newline"] = True
    return parsed


def _started(text: str, time: int | None) -> str:
    """The header's time as aider writes it (the file's own text when unreadable)."""
    return format_time(time, naive=True, places=0).replace("T", " ") if time is not None else text


def _session(lines: list[str], offset: int, names: set[str]) -> Plan:
    blocks = _blocks(lines)
    header = blocks[0] if blocks and blocks[0].kind == "header" else None
    stamp = lines[header.start][len(_HEADER) :].strip() if header else ""
    where = f"line {offset + (header.start if header else 0) + 1}"
    try:
        time = parse_time(stamp.replace(" ", "T"), where, "header") if stamp else None
    except BadRecord:
        time = None
    name = "aider-" + session_slug(
        stamp.replace(" ", "T").replace(":", "-") if stamp else "session"
    )
    while name in names:
        name += "+"
    names.add(name)
    plan = Plan(natural=name, suffix=name)
    sink = RecordSink(NAME)
    first_meta: Obj = {}
    previous: str | None = None
    cursor = 0
    if header is not None:
        head_text = "\n".join(lines[: header.end]) + "\n"
        if head_text != _render("header", _started(stamp, time), None):
            first_meta["header_text"] = head_text
        cursor = header.end
        previous = "header"
    elif blocks and blocks[0].start > 0:
        first_meta["preamble"] = "\n".join(lines[: blocks[0].start]) + "\n"
        cursor = blocks[0].start
    for block in blocks:
        if block is header:
            continue
        region = "\n".join(lines[cursor : block.end]) + "\n"
        cursor = block.end
        text = _text(block, lines)
        key = f"ad:{block.start - (header.start if header else 0)}"
        at = f"line {offset + block.start + 1}"
        body: Body
        if block.kind == "user":
            body = UserMessageAdded(text=text)
        elif block.kind == "console":
            body = NotificationAdded(source="aider/console", text=text)
        else:
            body = AssistantMessageAdded(parts=(TextPart(text=text),))
        meta: Obj = {**first_meta} if not plan.entries else {}
        if region != _render(block.kind, text, previous):
            meta["raw_text"] = region
        plan.entries.append(Entry(body, key, time, sink.attach(meta), at))
        usage = _tokens(text) if block.kind == "console" else None
        if usage is not None:
            plan.entries.append(
                Entry(ResponseReceived(usage=usage), f"{key}:usage", time, {"derived": True}, at)
            )
        previous = block.kind
    tail = "\n".join(lines[cursor:]) + "\n" if cursor < len(lines) else ""
    if plan.entries:
        if tail != "\n" * _TRAILING.get(previous or "", 0):
            plan.entries[-1].meta["tail_text"] = tail
    elif header is not None:
        plan.entries.append(
            Entry(
                SystemSectionSet(name="aider.records", text=""),
                "ad:empty",
                time,
                {"carrier": True, **first_meta, "tail_text": tail},
                where,
            )
        )
    return plan


def export(view: ExportSession) -> bytes:
    """The session as aider writes it."""
    events = [e for e in view.events if not e.meta.get("derived")]
    first = events[0].meta if events else {}
    out: list[str] = []
    previous: str | None = None
    if "preamble" in first:
        out.append(first["preamble"])
    elif "header_text" in first:
        out.append(first["header_text"])
        previous = "header"
    elif events:
        out.append(_render("header", _started("", events[0].time), None))
        previous = "header"
    for event in events:
        kind = _kind_of(event)
        if kind is None:
            continue
        raw = event.meta.get("raw_text")
        out.append(raw if isinstance(raw, str) else _render(kind, _body_text(event), previous))
        previous = kind
    last = events[-1].meta if events else {}
    tail = last.get("tail_text")
    out.append(tail if isinstance(tail, str) else "\n" * _TRAILING.get(previous or "", 0))
    text = "".join(out)
    if last.get("no_final_newline") and text.endswith("\n"):
        text = text[:-1]
    return text.encode()


def _kind_of(event: Event) -> str | None:
    body = event.body
    if isinstance(body, UserMessageAdded):
        return "user"
    if isinstance(body, NotificationAdded):
        return "console"
    if isinstance(body, AssistantMessageAdded):
        return "assistant"
    return None


def _body_text(event: Event) -> str:
    body = event.body
    if isinstance(body, (UserMessageAdded, NotificationAdded)):
        return body.text
    if isinstance(body, AssistantMessageAdded):
        return "\n".join(p.text for p in body.parts if isinstance(p, TextPart))
    return ""


#: This module's transcript format, as the registry (`_transcripts._REGISTRY`) lists it.
FORMAT = Format(NAME, parse, export)

"""One-line summaries of events, for listings (``turnlog log``).

Every payload kind has a short, human-oriented summary: the head of a user
message, the tool calls of an assistant message with the head of their
arguments, a tool result's tool, status, size and blob ref, and so on. Kinds
without a dedicated summary fall back to the head of their JSON form, so a
kind added later still lists sensibly.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import turnlog
from turnlog.events import (
    AssistantMessageAdded,
    BlobRef,
    CompactionCommitted,
    CompactionFailed,
    CompactionPartSummarized,
    ContentErased,
    EventErased,
    EventsPinned,
    MemoryChanged,
    NativePart,
    NotificationAdded,
    PolicySet,
    ProviderErrorReceived,
    ReasoningPart,
    RecallAdded,
    RequestIssued,
    ResponseReceived,
    SessionForked,
    SessionRewound,
    StateSaved,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolsSet,
    UserMessageAdded,
    event_to_json,
)
from turnlog.memories import Memory

__all__ = ["expiry", "format_size", "format_time", "head", "loads_json", "summarize"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def head(text: str, width: int = 60) -> str:
    """The first non-blank line of ``text``, whitespace collapsed, cut to ``width``."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    more = len(line) > width or len([ln for ln in text.splitlines() if ln.strip()]) > 1
    if len(line) > width:
        line = line[: width - 1]
    return line + "…" if more else line


def format_size(size: int) -> str:
    """A byte count as ``812 B``, ``12.3 KB`` or ``4.1 MB`` (powers of 1024)."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def format_time(time: int | None, *, precise: bool = False) -> str:
    """An event time (microseconds since the epoch) as UTC ``YYYY-MM-DD HH:MM:SS``.

    ``precise`` adds the microseconds. Times outside the calendar range are
    shown as the raw integer; a missing time as ``-``.
    """
    if time is None:
        return "-"
    try:
        moment = _EPOCH + timedelta(microseconds=time)
    except OverflowError:
        return str(time)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f" if precise else "%Y-%m-%d %H:%M:%S")


def expiry(memory: Memory, position: int) -> str:
    """When ``memory`` lapses: after a position of its memory session (``(lapsed)``
    once ``position``, the session's head, is past it) and/or at a time (UTC; whether
    that time has come is the caller's clock's to say, which the log does not know);
    ``""`` for never."""
    parts = []
    if memory.expires_seq is not None:
        lapsed = " (lapsed)" if memory.expired(position, None) else ""
        parts.append(f"after #{memory.expires_seq}{lapsed}")
    if memory.expires_time is not None:
        parts.append(format_time(memory.expires_time))
    return ", ".join(parts)


def loads_json(text: str) -> object:
    """``text`` parsed as JSON, or None when it is not JSON or nests too deeply to
    parse (tool-call arguments are model output: any text at all)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _blob(ref: BlobRef | None) -> str:
    return f" blob {ref.hash[:12]}" if ref is not None else ""


def _call(call: ToolCall) -> str:
    args = loads_json(call.arguments)
    if args is None:
        args = call.arguments
    if isinstance(args, dict):
        # The first argument that says something (OpenHands puts action_risk: null first).
        first = next((v for v in args.values() if v is not None), "")
        try:
            shown = first if isinstance(first, str) else json.dumps(first)
        except RecursionError:
            shown = call.arguments
    else:
        shown = str(args)
    if shown.startswith("/") and shown.count("/") > 2:
        shown = "…/" + "/".join(shown.rsplit("/", 2)[-2:])  # keep paths short
    return f"{call.name}({head(shown, 32)})"


def _n(count: int, word: str) -> str:
    """``1 blob``, ``2 blobs``."""
    return f"{count:,} {word if count == 1 else word + 's'}"


def summarize(event: turnlog.events.Event, width: int = 60) -> str:
    """A one-line summary of ``event`` (without its seq, kind or time)."""
    body = event.body
    if isinstance(body, UserMessageAdded):
        extra = f" [{_n(len(body.images), 'image')}]" if body.images else ""
        return f"{head(body.text, width)}{extra}{_blob(body.blob)}"
    if isinstance(body, AssistantMessageAdded):
        texts = [p.text for p in body.parts if isinstance(p, TextPart) and p.text.strip()]
        calls = [p for p in body.parts if isinstance(p, ToolCall)]
        thinking = any(isinstance(p, ReasoningPart) for p in body.parts)
        native = [f"({p.format} {p.item_type}) " for p in body.parts if isinstance(p, NativePart)]
        text = head(texts[0], width // 2 if calls else width) if texts else ""
        out = ("".join(native) + ("(thinking) " if thinking else "") + text).rstrip()
        if calls:
            out += (" -> " if out else "-> ") + ", ".join(_call(c) for c in calls)
        return out
    if isinstance(body, ToolResultAdded):
        size = body.blob.size if body.blob is not None else len(body.output.encode())
        status = "error" if body.is_error else "ok"
        if body.exit_code is not None:
            status += f" exit {body.exit_code}"
        return (
            f"{body.tool_name} {status} {format_size(size)}{_blob(body.blob)}  "
            f"{head(body.output, width // 2)}"
        )
    if isinstance(body, NotificationAdded):
        return f"[{body.source}] {head(body.text, width)}{_blob(body.blob)}"
    if isinstance(body, SystemSectionSet):
        if not body.text:
            return f"{body.name}: removed"
        return f"{body.name} @{body.position} ({len(body.text)} chars): {head(body.text, width)}"
    if isinstance(body, ToolsSet):
        return f"{_n(len(body.tools), 'tool')}: {', '.join(t.name for t in body.tools)}"
    if isinstance(body, MemoryChanged):
        return f"{body.op} {body.memory_id}: {head(body.title or body.content, width)}"
    if isinstance(body, RecallAdded):
        return f"{_n(len(body.hits), 'hit')} for {head(body.query, width)!r}"
    if isinstance(body, CompactionCommitted):
        return (
            f"seq {body.first_seq}..{body.last_seq} level {body.level} ({body.reason}) "
            f"{body.tokens_before}->{body.tokens_after} tokens: {head(body.summary, width)}"
        )
    if isinstance(body, CompactionPartSummarized):
        merged = (
            f"merges {len(body.children)} parts"
            if body.level
            else (f"seq {body.first_seq}:{body.first_offset}..{body.last_seq}:{body.last_offset}")
        )
        return (
            f"part {body.part}/{body.parts} level {body.level} {merged} "
            f"{body.tokens_before}->{body.tokens_after} tokens: {head(body.summary, width)}"
        )
    if isinstance(body, CompactionFailed):
        return f"({body.reason}) {head(body.error, width)}"
    if isinstance(body, RequestIssued):
        return (
            f"packed from seq {body.head_seq}, {body.tokens} tokens, {body.format}"
            f"{' ' + body.model if body.model else ''}, prompt {body.prompt_hash[:12]}"
        )
    if isinstance(body, ResponseReceived):
        usage = body.usage
        request = f"request {body.request_seq}: " if body.request_seq is not None else ""
        return (
            f"{request}in {usage.input_tokens} out {usage.output_tokens} cache "
            f"{usage.cache_read_tokens}r/{usage.cache_write_tokens}w {body.stop_reason}"
        ).rstrip()
    if isinstance(body, ProviderErrorReceived):
        status = f"{body.status} " if body.status is not None else ""
        flag = " [overflow]" if body.overflow else ""
        return f"{status}{body.code or body.error_type} {head(body.message, width)}{flag}"
    if isinstance(body, PolicySet):
        return (
            f"policy {body.policy.hash[:12]} window {body.policy.context_window} "
            f"tokenizer {body.policy.tokenizer}"
        )
    if isinstance(body, SessionForked):
        return f"from {body.from_session}#{body.from_seq} ({body.from_hash[:12]})"
    if isinstance(body, SessionRewound):
        return f"to seq {body.to_seq}{': ' + body.reason if body.reason else ''}"
    if isinstance(body, EventsPinned):
        return f"{'pin' if body.pinned else 'unpin'} seq {', '.join(map(str, body.seqs))}"
    if isinstance(body, StateSaved):
        size = sum(ref.size for ref in body.blobs)
        blobs = f", {_n(len(body.blobs), 'blob')} {size} B" if body.blobs else ""
        return head(f"{body.source}{blobs} {body.data}", width)
    if isinstance(body, EventErased):
        return f"{body.kind} erased by #{body.by}"
    if isinstance(body, ContentErased):
        seqs = ", ".join(map(str, body.seqs[:8])) + (", …" if len(body.seqs) > 8 else "")
        blobs = f" and {_n(len(body.blobs), 'blob')}" if body.blobs else ""
        return head(f"{_n(len(body.seqs), 'event')} erased ({seqs}){blobs}: {body.reason}", width)
    raw = json.loads(event_to_json(event))["body"]
    raw.pop("type", None)
    return head(json.dumps(raw, ensure_ascii=False), width)

"""The context tools: what a model calls to read what packing cut.

`Session.context_tools` returns the kit's specs (`turnlog.packing`'s
``CONTEXT_TOOLS``: ``read_output``, ``search_history``, ``expand_summary``,
``memory_save``, ``memory_search``, ``memory_forget``); register them with the
session's tools (``session.tools([*mine, *session.context_tools()])``) and hand
the model's calls of them to `Session.call_context_tool`, which runs the call
here and appends its ``ToolResultAdded`` like any other tool's: the input is in
the log before it can reach the model, and replay covers it.

Every result is text within the policy's truncation limits (``truncate_bytes``
and ``truncate_lines``; search results also within ``recall_max_chars``), so
reading a large output back takes as many calls as the model needs and never
more context than a truncated output would. A bad call (unknown ref, invalid
arguments) gets an error result saying what was expected and what was found,
marked ``is_error``, so the model can correct itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping

from turnlog import Log, Policy
from turnlog.events import (
    AssistantMessageAdded,
    CompactionCommitted,
    Event,
    NotificationAdded,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.memories import MemoryManager, Recaller
from turnlog.packing import CONTEXT_TOOLS

__all__ = ["CONTEXT_TOOL_NAMES", "ContextToolError", "run_context_tool"]

#: The names of the kit's tools.
CONTEXT_TOOL_NAMES = frozenset(spec.name for spec in CONTEXT_TOOLS)


class ContextToolError(Exception):
    """A call the tool cannot run; its message becomes the error result."""


def _full_text(log: Log, event: Event) -> str:
    """The whole text of an event: its blob when it has one."""
    body = event.body
    blob = getattr(body, "blob", None)
    if blob is not None:
        return log.blob(blob).decode("utf-8", "surrogatepass")
    if isinstance(body, ToolResultAdded):
        return body.output
    if isinstance(body, (UserMessageAdded, NotificationAdded)):
        return body.text
    if isinstance(body, AssistantMessageAdded):
        return "\n".join(p.text for p in body.parts if isinstance(p, TextPart) and p.text)
    if isinstance(body, CompactionCommitted):
        return body.summary
    return ""


def _cap(text: str, policy: Policy) -> str:
    """``text`` within the policy's truncation limits, saying where it stopped."""
    lines = text.split("\n")
    cut = False
    if len(lines) > policy.truncate_lines:
        text, cut = "\n".join(lines[: policy.truncate_lines]), True
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > policy.truncate_bytes:
        text, cut = data[: policy.truncate_bytes].decode("utf-8", "ignore"), True
    if cut:
        text += (
            f"\n[... result cut at {len(text)} characters by the truncation limits; "
            "ask for a later range ...]"
        )
    return text


def _int(args: Mapping[str, object], name: str, default: int | None) -> int | None:
    value = args.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ContextToolError(f"{name} must be a non-negative integer; found {value!r}")
    return value


def _str(args: Mapping[str, object], name: str, *, required: bool = True) -> str:
    value = args.get(name, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise ContextToolError(f"{name} must be a non-empty string; found {value!r}")
    return value


def _events(log: Log, session: str) -> list[Event]:
    head = log.head(session)
    return [] if head is None else list(log.lineage(session, head.seq + 1))


def _find(log: Log, session: str, ref: str) -> Event:
    ref = ref.strip()
    events = _events(log, session)
    if "#" in ref:
        name, _, seq = ref.rpartition("#")
        for event in events:
            if event.session == name and str(event.seq) == seq:
                return event
        raise ContextToolError(
            f"no event {ref!r} in this conversation; pass the ref a "
            "truncation notice names (a blob hash or SESSION#SEQ)"
        )
    for event in events:
        blob = getattr(event.body, "blob", None)
        if blob is not None and blob.hash == ref.lower():
            return event
    raise ContextToolError(
        f"no output stored as blob {ref!r} in this conversation; pass the "
        "ref a truncation notice names (a blob hash or SESSION#SEQ)"
    )


def read_output(log: Log, session: str, args: Mapping[str, object], policy: Policy) -> str:
    """A range of the whole text behind a notice's ref: by characters, lines or grep."""
    ref = _str(args, "ref")
    text = _full_text(log, _find(log, session, ref))
    grep = args.get("grep")
    if grep:
        if not isinstance(grep, str):
            raise ContextToolError(f"grep must be a string; found {grep!r}")
        needle = grep.lower()
        hits = [
            f"{n}: {line}" for n, line in enumerate(text.split("\n"), 1) if needle in line.lower()
        ]
        head = (
            f"1 line of {ref} contains {grep!r}"
            if len(hits) == 1
            else f"{len(hits)} lines of {ref} contain {grep!r}"
        )
        return _cap("\n".join([head, *hits]), policy)
    start = _int(args, "start_line", None)
    if start is not None or "line_count" in args:
        lines = text.split("\n")
        first = max(1, start or 1)
        count = _int(args, "line_count", policy.truncate_lines) or 0
        chosen = lines[first - 1 : first - 1 + count]
        head = f"lines {first}-{first + len(chosen) - 1} of {len(lines)} in {ref}:"
        return _cap("\n".join([head, *chosen]), policy)
    offset = _int(args, "offset", 0) or 0
    length = _int(args, "length", policy.truncate_bytes)
    part = text[offset : offset + (length or 0)]
    head = f"characters {offset}-{offset + len(part)} of {len(text)} in {ref}:\n"
    return _cap(head + part, policy)


def search_history(
    log: Log,
    session: str,
    args: Mapping[str, object],
    policy: Policy,
    sessions: Iterable[str] | None,
) -> str:
    """Recall over this session (and ``sessions``, when the orchestrator allows others)."""
    query = _str(args, "query")
    k = _int(args, "k", 5) or 5
    names = [session, *(s for s in (sessions or ()) if s != session)]
    hits = Recaller(log).search(query, sessions=names, k=min(k, 20))
    if not hits:
        return f"no passage matches {query!r}"
    out: list[str] = []
    used = 0
    for hit in hits:
        where = f", character {hit.offset}" if hit.offset else ""
        entry = f"[{hit.session}#{hit.seq}{where}] {hit.text}"
        if used + len(entry) > policy.recall_max_chars and out:
            break
        out.append(entry[: policy.recall_max_chars])
        used += len(entry)
    return _cap("\n\n".join(out), policy)


def expand_summary(log: Log, session: str, args: Mapping[str, object], policy: Policy) -> str:
    """The events a summary (a ``CompactionCommitted`` by its seq) replaced.

    The id is the summary's seq as a number, or as the command and explanations print
    it: ``"12"``, ``"#12"``, ``"compaction #12"`` or ``"SESSION#12"``."""
    owner, seq = _summary_id(args.get("id"), session)
    events = _events(log, session)
    summary = next(
        (
            e
            for e in events
            if e.seq == seq and e.session == owner and isinstance(e.body, CompactionCommitted)
        ),
        None,
    )
    if summary is None:
        raise ContextToolError(
            f"no summary #{seq} in this conversation; pass the number "
            "after # in a summary's heading"
        )
    session = owner
    body = summary.body
    assert isinstance(body, CompactionCommitted)
    out = [f"summary #{seq} replaced events {body.first_seq}-{body.last_seq}:"]
    for event in events:
        if body.first_seq <= event.seq <= body.last_seq and event.session == session:
            text = _full_text(log, event)
            if text:
                out.append(f"[{event.session}#{event.seq} {event.kind}] {text}")
    return _cap("\n\n".join(out), policy)


def _summary_id(value: object, session: str) -> tuple[str, int]:
    """(session, seq) of an ``expand_summary`` id: a number, or a string holding one as
    ``12``, ``#12``, ``compaction #12`` or ``SESSION#12``."""
    if isinstance(value, str):
        name, _, number = value.strip().rpartition("#")
        name = name.strip()
        if name.lower() in ("summary", "compaction"):
            name = ""
        if number.isascii() and number.isdigit():
            return name or session, int(number)
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return session, value
    raise ContextToolError(
        f"id must be a summary's number (12, or as printed: '#12', 'SESSION#12'); found {value!r}"
    )


def _memory(
    manager: MemoryManager, name: str, args: Mapping[str, object], session: str, time: int | None
) -> str:
    if name == "memory_save":
        kind = args.get("type", "project")
        retention = args.get("retention", "durable")
        if kind not in ("project", "user", "decision"):
            raise ContextToolError(f"type must be project, user or decision; found {kind!r}")
        if retention not in ("priority", "durable", "working"):
            raise ContextToolError(
                f"retention must be priority, durable or working; found {retention!r}"
            )
        changed = manager.save(
            _str(args, "title"),
            _str(args, "content"),
            memory_type=kind,
            retention=retention,
            source_session=session,
            reason="tool",
            time=time,
        )
        return f"saved memory {changed.memory_id}"
    if name == "memory_search":
        terms = [t for t in _str(args, "query").lower().split() if t]
        found = [
            m
            for m in manager.memories(now=time)
            if any(t in f"{m.title}\n{m.content}".lower() for t in terms)
        ]
        if not found:
            return "no memory matches"
        return "\n".join(
            f"[{m.memory_id}] ({m.memory_type}, {m.retention}) {m.title}: {m.content}"
            for m in found
        )
    memory_id = _str(args, "id")
    if manager.book().get(memory_id) is None:
        raise ContextToolError(f"no memory {memory_id!r}; memory_search shows the ids")
    manager.forget(memory_id, reason=_str(args, "reason", required=False), time=time)
    return f"forgot memory {memory_id}"


def run_context_tool(
    log: Log,
    session: str,
    call: ToolCall,
    policy: Policy,
    *,
    memories: Callable[[], MemoryManager],
    sessions: Iterable[str] | None,
    time: int | None,
) -> tuple[str, bool]:
    """Run one call of the kit: (output, is_error)."""
    try:
        if call.name not in CONTEXT_TOOL_NAMES:
            raise ContextToolError(
                f"{call.name!r} is not a context tool (expected one of "
                f"{', '.join(sorted(CONTEXT_TOOL_NAMES))})"
            )
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError as exc:
            raise ContextToolError(f"the arguments must be a JSON object ({exc})") from exc
        if not isinstance(args, dict):
            raise ContextToolError(f"the arguments must be a JSON object; found {args!r}")
        if call.name == "read_output":
            return read_output(log, session, args, policy), False
        if call.name == "search_history":
            return search_history(log, session, args, policy, sessions), False
        if call.name == "expand_summary":
            return expand_summary(log, session, args, policy), False
        return _cap(_memory(memories(), call.name, args, session, time), policy), False
    except ContextToolError as exc:
        return f"error: {exc}", True

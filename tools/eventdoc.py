"""Generate the field tables of docs/events.md from the event Struct definitions.

The tables give, for the envelope, every payload kind and every nested
struct, each field in definition order (the order of the canonical encoding)
with its type, its default and what it means. Types and defaults are read
from the classes; meanings come from `MEANINGS` below, so a field added to
``events.py`` shows up with an empty meaning until it is described here.

    python -m turnlog.tools.eventdoc --write docs/events.md   # regenerate
    python -m turnlog.tools.eventdoc --check docs/events.md   # exit 1 if stale

The generated part sits between the ``<!-- fields:begin -->`` and
``<!-- fields:end -->`` markers; the rest of the document is hand-written.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path

from turnlog import Policy, events
from turnlog.events import EVENT_KINDS as KINDS

__all__ = ["BEGIN", "END", "MEANINGS", "main", "render_tables", "replace_tables", "factory_fields"]

BEGIN = "<!-- fields:begin -->"
END = "<!-- fields:end -->"

#: ``Class.field`` -> what the field means.
MEANINGS: dict[str, str] = {
    # envelope
    "Event.session": (
        "Session (stream) id: 1 to 256 characters, no control characters; an "
        "append takes at most 256 UTF-8 bytes (see *Limits*)."
    ),
    "Event.seq": "Position in the session, dense from 0.",
    "Event.body": "The payload: a map whose first key is `type` (the kind's tag).",
    "Event.time": "Caller-supplied time, microseconds since the Unix epoch (UTC). Data, never "
    "read from a clock by turnlog.",
    "Event.key": (
        "Idempotency key, unique within the session: 1 to 256 characters and at "
        "most 254 UTF-8 bytes (see *Limits*)."
    ),
    "Event.causation": "Id of what caused this event, e.g. the key of the assistant message "
    "a tool result answers.",
    "Event.meta": "Free-form JSON-like metadata (str keys, at most 32 levels deep); "
    "importers keep unknown source fields here.",
    "Event.prev": "Hash of the previous event. Not part of the canonical bytes (always "
    "empty there); stored in the record header.",
    "Event.hash": "blake3 of `prev` followed by the canonical bytes. Not part of the "
    "canonical bytes; stored in the record header.",
    # nested structs
    "BlobRef.hash": "blake3 hex digest of the blob's bytes.",
    "BlobRef.size": "The blob's length in bytes.",
    "BlobRef.media_type": "Media type of the blob.",
    "TextPart.text": "The text.",
    "ReasoningPart.text": "Readable reasoning text.",
    "ReasoningPart.opaque": "Provider-encrypted reasoning or signature, sent back verbatim.",
    "ReasoningPart.provider": "Provider the opaque content belongs to.",
    "ReasoningPart.id": "Provider's id of the reasoning item, when it must be sent back with it.",
    "ToolCall.id": "The call id the tool result answers.",
    "ToolCall.name": "Tool name.",
    "ToolSpec.freeform": "True for a freeform (custom) tool, which takes raw text: "
    "`parameters` is then its input format (`{}`: any text). Added "
    "after 0.1.0; absent (false) in older events.",
    "ToolSpec.strict": "True when the provider holds the call's arguments to the schema "
    "(OpenAI strict function calling, Anthropic strict tool use); the schema must then "
    "be strict (every object sets `additionalProperties` to false). Added after 0.3.0; "
    "absent (false) in older events, which render as before.",
    "ToolCall.freeform": "True for a freeform (custom) tool call, whose `arguments` is the "
    "raw text input rather than JSON (OpenAI custom tools, such as Codex's "
    "`apply_patch`); rendered per provider (docs/providers.md). Added after "
    "0.1.0; absent (false) in older events.",
    "ToolCall.arguments": "Arguments as the JSON text the model produced (kept as text: it "
    "may be invalid JSON).",
    "ImagePart.media_type": "Media type of the image, e.g. `image/png`.",
    "NativePart.format": "The wire format that owns the item (`openai-responses`, "
    "`anthropic`); only that format renders it.",
    "NativePart.item_type": "The item's type in that format (`compaction`).",
    "NativePart.data": "The item's JSON text exactly as the provider produced it, opaque "
    "content (`encrypted_content`) included; sent back unchanged.",
    "NativePart.text": "Its readable content when the provider gives one (an Anthropic "
    "compaction's summary), for display only.",
    "ImagePart.blob": "The image bytes, stored as a blob.",
    "ImagePart.url": "Where the image is, when it is referenced rather than stored.",
    "ToolSpec.name": "Tool name the model calls it by.",
    "ToolSpec.description": "Description shown to the model.",
    "ToolSpec.parameters": "JSON Schema of the arguments, as JSON text.",
    "RecallHit.session": "Session the hit comes from.",
    "RecallHit.seq": "Seq of the event the hit comes from.",
    "RecallHit.text": "Text that goes into the prompt.",
    "RecallHit.score": "The searcher's score, as text (exact, no float rounding).",
    "RecallHit.offset": "Character offset in the event's whole text (its blob's) where "
    "`text` starts; a large output is searched in chunks.",
    "Usage.input_tokens": "Prompt tokens billed.",
    "Usage.output_tokens": "Completion tokens billed.",
    "Usage.cache_read_tokens": "Prompt tokens read from the provider's cache.",
    "Usage.cache_write_tokens": "Prompt tokens written to the provider's cache.",
    "Usage.reasoning_tokens": "Reasoning tokens (included in output tokens by most providers).",
    # payloads
    "UserMessageAdded.text": "The message (a preview when `blob` is set).",
    "UserMessageAdded.images": "Attached images.",
    "UserMessageAdded.blob": "The whole text when it exceeded the log's blob threshold.",
    "UserMessageAdded.name": "Name of the speaker, for multi-user sessions.",
    "AssistantMessageAdded.parts": "Text, reasoning, tool calls, images and provider items "
    "(`NativePart`), in order; several tool calls make "
    "parallel calls.",
    "AssistantMessageAdded.model": "Model that produced the message.",
    "AssistantMessageAdded.response_id": "Provider's id of the response.",
    "ToolResultAdded.call_id": "Id of the `tool_call` part this answers.",
    "ToolResultAdded.tool_name": "Name of the tool that ran.",
    "ToolResultAdded.output": "The output (a head/tail preview when `blob` is set).",
    "ToolResultAdded.blob": "The whole output when it exceeded the log's blob threshold.",
    "ToolResultAdded.is_error": "The tool reported an error.",
    "ToolResultAdded.exit_code": "Exit status of a command.",
    "NotificationAdded.source": "Who tells: `file-watcher`, `background-job`, `ci`...",
    "NotificationAdded.text": "The notice (a preview when `blob` is set).",
    "NotificationAdded.blob": "The whole text when it exceeded the log's blob threshold.",
    "SystemSectionSet.name": "Section name; a later event with the same name replaces it.",
    "SystemSectionSet.text": "Section text; empty removes the section.",
    "SystemSectionSet.position": "Sort key: sections are packed by position, then name.",
    "ToolsSet.tools": "The complete set of tools offered from here on.",
    "MemoryChanged.op": "`save` creates, `update` replaces fields, `forget` removes, "
    "`pin`/`unpin` protect from consolidation.",
    "MemoryChanged.memory_id": "The memory's id.",
    "MemoryChanged.memory_type": "What the memory is about.",
    "MemoryChanged.retention": "How long it is kept: `priority` always, `durable` until "
    "forgotten, `working` briefly.",
    "MemoryChanged.title": "Short title.",
    "MemoryChanged.content": "The memory text.",
    "MemoryChanged.expires_seq": "The memory lapses after this seq.",
    "MemoryChanged.expires_time": "The memory lapses after this time (microseconds).",
    "MemoryChanged.source_seqs": "Seqs of the events the memory was derived from.",
    "MemoryChanged.source_session": "Session of `source_seqs` when it is another session.",
    "MemoryChanged.reason": "Why the operation happened.",
    "RecallAdded.query": "The search query.",
    "RecallAdded.hits": "The results that may reach the prompt.",
    "RecallAdded.searcher": "Which searcher produced them.",
    "CompactionCommitted.first_seq": "First seq of the summarized span (inclusive, in the "
    "session's lineage).",
    "CompactionCommitted.last_seq": "Last seq of the span (inclusive).",
    "CompactionCommitted.covered_digest": "blake3 over the concatenated 32-byte hashes of "
    "the covered events.",
    "CompactionCommitted.summary": "The summary that replaces the span in prompts.",
    "CompactionCommitted.level": "0 summarizes events; higher levels roll up summaries.",
    "CompactionCommitted.children": "Seqs of the compaction events a roll-up covers.",
    "CompactionCommitted.summarizer": "Summarizer that wrote the summary.",
    "CompactionCommitted.model": "Model the summarizer used.",
    "CompactionCommitted.prompt_hash": "blake3 of the summarization prompt.",
    "CompactionCommitted.reason": "What triggered the compaction.",
    "CompactionCommitted.tokens_before": "Tokens of what the summary covers (level 0: the "
    "whole text of the span, blob-stored outputs "
    "included; a roll-up: its children's summaries).",
    "CompactionCommitted.tokens_after": "Tokens of the summary.",
    "CompactionCommitted.costs": "The cost estimate that justified it, as one line of text.",
    "CompactionCommitted.parts": "Seqs of the part summaries it merges (a span larger than "
    "the summarizer's window).",
    "CompactionPartSummarized.first_seq": "Position where the part's text starts (in the "
    "session's lineage).",
    "CompactionPartSummarized.last_seq": "Position where it ends.",
    "CompactionPartSummarized.summary": "The part's summary, which a merge reads.",
    "CompactionPartSummarized.part": "Its number among the parts of its level (from 1).",
    "CompactionPartSummarized.parts": "How many parts its level has.",
    "CompactionPartSummarized.first_offset": "Character of `first_seq`'s text where the part "
    "starts.",
    "CompactionPartSummarized.last_offset": "Character of `last_seq`'s text where it ends "
    "(exclusive).",
    "CompactionPartSummarized.level": "0 summarizes transcript; higher levels merge the "
    "parts in `children`.",
    "CompactionPartSummarized.children": "Seqs of the parts a merge part merges.",
    "CompactionPartSummarized.summarizer": "Summarizer that wrote it.",
    "CompactionPartSummarized.model": "Model the summarizer used.",
    "CompactionPartSummarized.prompt_hash": "blake3 of the part's summarization prompt.",
    "CompactionPartSummarized.tokens_before": "Tokens of the part's source text.",
    "CompactionPartSummarized.tokens_after": "Tokens of its summary.",
    "CompactionFailed.error": "What went wrong.",
    "CompactionFailed.reason": "What triggered the attempt.",
    "CompactionFailed.summarizer": "Summarizer that failed.",
    "CompactionFailed.first_seq": "First seq of the attempted span.",
    "CompactionFailed.last_seq": "Last seq of the attempted span.",
    "RequestIssued.head_seq": "Seq of the last event the prompt was packed from.",
    "RequestIssued.head_hash": "Hash of that event.",
    "RequestIssued.policy_hash": "Hash of the policy used (`Policy.hash`).",
    "RequestIssued.tokenizer": "Id of the token counter (encoding, calibration).",
    "RequestIssued.prompt_hash": "blake3 of the packed prompt; replay must reproduce it.",
    "RequestIssued.tokens": "Tokens of the packed prompt.",
    "RequestIssued.format": "Renderer the prompt was rendered with.",
    "RequestIssued.model": "Model the request was sent to.",
    "RequestIssued.calibration": "Calibration ratio of the token counter, if any.",
    "RequestIssued.recovery": "Packed by the recovery path after an overflow error.",
    "RequestIssued.stages": "Comma-separated names of a custom packing pipeline (empty: the "
    "built-in one).",
    "RequestIssued.digests": "8-byte xxh3 digests of each prompt part, in prompt order, so a "
    "failed replay names the first part that differs.",
    "RequestIssued.rendered_hash": "blake3 of the rendered provider request body.",
    "RequestIssued.render_args": "The renderer's parameters besides format and model, as "
    "the adapter wrote them (canonical JSON for the built-in "
    "renderers: max_tokens, extra, and the render version, "
    "1 when absent), so replay can render again.",
    "ResponseReceived.request_seq": "Seq of the request this answers.",
    "ResponseReceived.usage": "Token usage as the provider reported it.",
    "ResponseReceived.stop_reason": "Provider's stop reason.",
    "ResponseReceived.model": "Model that answered.",
    "ResponseReceived.response_id": "Provider's id of the response.",
    "ProviderErrorReceived.request_seq": "Seq of the failed request.",
    "ProviderErrorReceived.status": "HTTP status.",
    "ProviderErrorReceived.code": "Provider's error code.",
    "ProviderErrorReceived.error_type": "Provider's error type.",
    "ProviderErrorReceived.message": "Provider's message.",
    "ProviderErrorReceived.overflow": "A context-length error: triggers the recovery path.",
    "PolicySet.policy": "The policy in force from here on.",
    "SessionForked.from_session": "Session this one continues.",
    "SessionForked.from_seq": "Last event of the source that belongs to this session's history.",
    "SessionForked.from_hash": "Hash of that event; also this event's `prev`.",
    "SessionRewound.to_seq": "Events after this seq (up to the rewind) leave the history "
    "view; -1 rewinds everything.",
    "SessionRewound.reason": "Why.",
    "EventsPinned.seqs": "Seqs of earlier events.",
    "EventsPinned.pinned": "True pins (never pruned, trimmed or summarized away); false unpins.",
    "StateSaved.source": "The framework and the item (`langgraph.checkpoint`, "
    "`langgraph.writes`, `langgraph.hidden`).",
    "StateSaved.data": "The item described as JSON text (ids, versions, which blob holds "
    "which value).",
    "StateSaved.blobs": "The item's values, content-addressed (a value two states share is "
    "stored once); checked by `verify`.",
    "ContentErased.seqs": "The erased events of this session, ascending.",
    "ContentErased.hashes": "Their stored hashes (hex), in the same order: what `verify` "
    "accepts for each stub.",
    "ContentErased.reason": "Why (caller data).",
    "ContentErased.blobs": "Blobs deleted with them (no other event referred to them).",
    "EventErased.kind": "Tag of the erased payload.",
    "EventErased.by": "Seq of the `erasure` event that lists this one.",
    "EventErased.call_ids": "Tool-call ids of an erased assistant message, or the call id of "
    "an erased tool result (pairing, not content).",
    "EventErased.tool_names": "Their tool names, in the same order.",
}

_NESTED = (
    "BlobRef",
    "TextPart",
    "ReasoningPart",
    "ToolCall",
    "ImagePart",
    "NativePart",
    "ToolSpec",
    "RecallHit",
    "Usage",
)


def _meta_text(meta: object) -> str:
    parts = []
    ge, le = getattr(meta, "ge", None), getattr(meta, "le", None)
    if ge is not None or le is not None:

        def bound(v: int | None) -> str:
            if v is None:
                return ""
            for base in (62, 63, 40, 31):
                if v == 2**base:
                    return f"2^{base}"
                if v == 2**base - 1:
                    return f"2^{base}-1"
                if v == -(2**base):
                    return f"-2^{base}"
            return str(v)

        parts.append(f"{bound(ge)}..{bound(le)}")
    lo, hi = getattr(meta, "min_length", None), getattr(meta, "max_length", None)
    if lo is not None or hi is not None:
        parts.append(f"{lo or 0}..{hi} chars" if hi is not None else f">= {lo} chars")
    pattern = getattr(meta, "pattern", None)
    if pattern == "^[0-9a-f]{64}$":
        parts.append("64 lowercase hex digits")
    elif pattern == "^([0-9a-f]{64})?$":
        parts.append('"" or 64 lowercase hex digits')
    elif pattern:
        parts.append(f"matches `{pattern}`")
    return ", ".join(parts)


def _type_text(tp: object) -> str:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = _type_text(args[0])
        extra = ", ".join(t for t in (_meta_text(m) for m in args[1:]) if t)
        return f"{inner} ({extra})" if extra else inner
    if origin in (typing.Union, types.UnionType):
        names = [_type_text(a) for a in args if a is not type(None)]
        parts = [n for n in names]
        if set(names) == {"TextPart", "ReasoningPart", "ToolCall", "ImagePart", "NativePart"}:
            parts = ["Part"]
        elif set(names) == {cls.__name__ for cls in KINDS.values()}:
            parts = ["payload (one of the kinds below)"]
        if type(None) in args:
            parts.append("null")
        return " \\| ".join(parts)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin is tuple:
        return f"array of {_type_text(args[0])}"
    if origin is dict:
        return "map"
    if tp is typing.Any:
        return "any"
    if isinstance(tp, type):
        return {
            "str": "str",
            "int": "int",
            "bool": "bool",
            "float": "float64",
            "bytes": "bytes (bin)",
        }.get(tp.__name__, tp.__name__)
    return str(tp)


def _default_text(default: object) -> str:
    factory = getattr(default, "factory", None)
    if factory is not None:
        return {dict: "{}", list: "[]"}.get(factory, "built-in table")
    if default is None:
        return "null"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, (int, float, str)):
        return json.dumps(default)
    if isinstance(default, tuple) and not default:
        return "[]"
    if isinstance(default, bytes):
        return '""' if not default else repr(default)
    fields = getattr(type(default), "__struct_fields__", None)
    if fields is not None:
        return f"{type(default).__name__} (empty map)"
    return repr(default)


_MISSING = object()


def _fields(cls: type) -> list[tuple[str, object, object]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    names: tuple[str, ...] = cls.__struct_fields__  # type: ignore[attr-defined]
    defaults: tuple[object, ...] = cls.__struct_defaults__  # type: ignore[attr-defined]
    padded = (_MISSING,) * (len(names) - len(defaults)) + defaults
    return [(name, hints[name], default) for name, default in zip(names, padded, strict=True)]


def _is_literal(tp: object) -> bool:
    if typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return typing.get_origin(tp) is typing.Literal


def factory_fields() -> list[str]:
    """``Class.field`` of the fields built by a default factory: always written."""
    out = []
    for cls in [*_all_classes(), Policy]:
        for name, _, default in _fields(cls):
            if hasattr(default, "factory"):
                out.append(f"{cls.__name__}.{name}")
    return out


def _all_classes() -> list[type]:
    return [events.Event, *(getattr(events, n) for n in _NESTED), *KINDS.values()]


def _entries(cls: type) -> int:
    tag = cls.__struct_config__.tag  # type: ignore[attr-defined]
    return len(cls.__struct_fields__) + (1 if tag is not None else 0)  # type: ignore[attr-defined]


def _table(cls: type, *, meanings: bool = True) -> list[str]:
    if meanings:
        rows = ["| # | field | type | default | meaning |", "|---|---|---|---|---|"]
    else:
        rows = ["| # | field | type | default |", "|---|---|---|---|"]
    for i, (name, tp, default) in enumerate(_fields(cls), 1):
        shown = "required" if default is _MISSING else f"`{_default_text(default)}`"
        row = f"| {i} | `{name}` | {_type_text(tp)} | {shown} |"
        if meanings:
            row += f" {MEANINGS.get(f'{cls.__name__}.{name}', '')} |"
        rows.append(row)
    return rows


def _summary(cls: type) -> str:
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.split())


def render_tables() -> str:
    """The generated Markdown: envelope, payload kinds, nested structs, policy."""
    out: list[str] = []
    out += [
        "### Event",
        "",
        f"The envelope. {_entries(events.Event)} declared fields; `prev` and `hash` are "
        "never part of the canonical bytes.",
        "",
        *_table(events.Event),
        "",
    ]
    out += ["## Payload kinds", ""]
    for tag, cls in KINDS.items():
        out += [
            f"### `{tag}`: {cls.__name__}",
            "",
            _summary(cls),
            "",
            f"Tag `{tag}`; {_entries(cls)} declared entries (fields + tag).",
            "",
            *_table(cls),
            "",
        ]
    out += [
        "## Nested structs",
        "",
        "Parts of an assistant message are tagged like payloads; the other nested "
        "structs are untagged maps.",
        "",
    ]
    for name in _NESTED:
        cls = getattr(events, name)
        tag = cls.__struct_config__.tag
        title = f"### `{tag}`: {name}" if tag else f"### {name}"
        note = (
            f"Tag `{tag}`; {_entries(cls)} declared entries."
            if tag
            else f"Untagged; {_entries(cls)} declared fields."
        )
        out += [title, "", _summary(cls), "", note, "", *_table(cls), ""]
    out += [
        "### Policy",
        "",
        f"The value of `PolicySet.policy`: {_entries(Policy)} declared fields, so its "
        "map header is always map16. Fields equal to their defaults are omitted, except "
        f"{', '.join(f'`{f}`' for f in factory_fields())}, which are always written. "
        "What each field does is described in [packing.md](packing.md).",
        "",
        *_table(Policy, meanings=False),
        "",
    ]
    return "\n".join(out)


def replace_tables(document: str) -> str:
    """``document`` with the text between the markers replaced by `render_tables`."""
    start = document.index(BEGIN) + len(BEGIN)
    end = document.index(END)
    return document[:start] + "\n" + render_tables() + "\n" + document[end:]


def main(argv: Sequence[str] | None = None) -> int:
    """Regenerate (``--write``) or check (``--check``) the tables of a document."""
    parser = argparse.ArgumentParser(prog="python -m turnlog.tools.eventdoc")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="PATH")
    mode.add_argument("--check", metavar="PATH")
    args = parser.parse_args(argv)
    path = Path(args.write or args.check)
    text = path.read_text(encoding="utf-8")
    updated = replace_tables(text)
    if args.write:
        path.write_text(updated, encoding="utf-8")
        return 0
    if updated != text:
        print(
            f"{path} is out of date; run python -m turnlog.tools.eventdoc --write {path}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

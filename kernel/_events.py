"""The event model: an envelope around one payload of a tagged union.

Theory of operation
-------------------
Every input that can reach a model is one of the payload kinds below, wrapped
in an `Event` envelope and appended to a session's hash chain. Payloads are
frozen msgspec Structs tagged by a short ``type`` string. Tags and field names
are permanent: stored events are never rewritten, so a field may only be added
(with a default that keeps the old meaning) and never renamed or removed.
Fields equal to their default are omitted from the canonical encoding, which
is what keeps the hash of an old event stable when a later version adds a
field.

Payloads are facts, named in the past tense: a user message was added, a
compaction was committed, a request was issued. The library never fills in
a field from the outside world: times, ids and token counts are arguments.

The envelope's ``prev`` and ``hash`` are not part of the canonical bytes;
they are the chain (see ``chain``): ``hash = blake3(prev || canonical)``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from ._policy import Policy

__all__ = [
    "AssistantMessageAdded",
    "BlobRef",
    "Body",
    "CompactionCommitted",
    "CompactionFailed",
    "CompactionPartSummarized",
    "ContentErased",
    "EVENT_KINDS",
    "Event",
    "EventErased",
    "EventsPinned",
    "ImagePart",
    "MemoryChanged",
    "NativePart",
    "NotificationAdded",
    "Part",
    "PolicySet",
    "ProviderErrorReceived",
    "ReasoningPart",
    "RecallAdded",
    "RecallHit",
    "RequestIssued",
    "ResponseReceived",
    "SessionForked",
    "SessionRewound",
    "StateSaved",
    "SystemSectionSet",
    "TextPart",
    "ToolCall",
    "ToolResultAdded",
    "ToolSpec",
    "ToolsSet",
    "Usage",
    "UserMessageAdded",
]

# -- constrained scalar types -------------------------------------------------
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
OptId = Annotated[str, msgspec.Meta(max_length=256)]
Name = Annotated[str, msgspec.Meta(max_length=1024)]
Seq = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Hex = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
OptHex = Annotated[str, msgspec.Meta(pattern="^([0-9a-f]{64})?$")]


# gc=False: events are frozen trees of strings, numbers, tuples and JSON-like meta;
# decoded or validated, they hold no reference cycle, so the garbage collector need
# not track them (a process holding millions pays for each in every full collection
# otherwise). A caller who makes a cycle through an event's meta dict leaks it.
class _Payload(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="type",
    kw_only=True,
):
    """Base of every payload kind (not public)."""


class _Part(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    tag_field="type",
    kw_only=True,
):
    """Base of the content parts of a message (not public)."""


class BlobRef(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    kw_only=True,
):
    """A reference to content stored beside the log, addressed by its hash.

    Attributes:
        hash: blake3 hex digest of the blob's bytes.
        size: the blob's length in bytes.
        media_type: e.g. ``text/plain; charset=utf-8`` or ``image/png``.
    """

    hash: Hex
    size: Count
    media_type: Name = "text/plain; charset=utf-8"


# -- message parts ---------------------------------------------------------------
class TextPart(_Part, tag="text", frozen=True):
    """Plain text of an assistant message."""

    text: str


class ReasoningPart(_Part, tag="reasoning", frozen=True):
    """Reasoning/thinking output. ``opaque`` holds provider-encrypted content or a
    signature that must be sent back verbatim; ``text`` is the readable part;
    ``id`` is the provider's id of the reasoning item when it must be sent back
    with it (OpenAI Responses ``rs_...``)."""

    text: str = ""
    opaque: str = ""
    provider: Name = ""
    id: OptId = ""


class ToolCall(_Part, tag="tool_call", frozen=True):
    """A tool call made by the model. ``arguments`` is the JSON text as the model
    produced it (kept as text: models sometimes produce invalid JSON).

    A *freeform* call (``freeform=True``; OpenAI's custom tools, such as Codex's
    ``apply_patch``) takes raw text rather than JSON: ``arguments`` is that text,
    and each provider format renders the call in its own shape for freeform input
    (see docs/providers.md)."""

    id: Id
    name: Name
    arguments: str = "{}"
    freeform: bool = False


class ImagePart(_Part, tag="image", frozen=True):
    """An image, stored as a blob (or referenced by URL)."""

    media_type: Name
    blob: BlobRef | None = None
    url: str = ""


class NativePart(_Part, tag="native", frozen=True):
    """A provider's own item, kept byte for byte: a Responses ``compaction`` item
    (with its ``encrypted_content``) or an Anthropic ``compaction`` block.

    ``data`` is the item's JSON text exactly as the provider (or the framework
    that handed it over) produced it, opaque content included; ``format`` names
    the wire format that owns it (``openai-responses``, ``anthropic``) and
    ``item_type`` its type there. It renders back unchanged to that format only;
    any other format refuses it (`RenderError` naming the item type). ``text``
    is its readable content when the provider gives one (Anthropic's summary),
    for display only.

    An item of type ``compaction`` replaces what came before it: packing sends
    nothing of the conversation before the message holding it (the events stay
    in the log; see docs/packing.md)."""

    format: Name
    item_type: Name
    data: str
    text: str = ""


Part = TextPart | ReasoningPart | ToolCall | ImagePart | NativePart


# -- payload kinds ------------------------------------------------------------------
class UserMessageAdded(_Payload, tag="user", frozen=True):
    """A user (human) turn. Starts a new turn for packing purposes."""

    text: str
    images: tuple[ImagePart, ...] = ()
    blob: BlobRef | None = None
    name: Name = ""


class AssistantMessageAdded(_Payload, tag="assistant", frozen=True):
    """A model reply: text, reasoning and tool calls (several per message)."""

    parts: tuple[Part, ...]
    model: Name = ""
    response_id: OptId = ""


class ToolResultAdded(_Payload, tag="tool_result", frozen=True):
    """The result of one tool call. When the output is larger than the log's
    blob threshold, ``output`` is a head/tail preview and ``blob`` holds the
    whole output."""

    call_id: Id
    tool_name: Name
    output: str
    blob: BlobRef | None = None
    is_error: bool = False
    exit_code: Int64 | None = None


class NotificationAdded(_Payload, tag="notification", frozen=True):
    """Something the runtime tells the model between turns (a file changed, a
    background job finished, a child agent reported)."""

    source: Name
    text: str
    blob: BlobRef | None = None


class SystemSectionSet(_Payload, tag="system", frozen=True):
    """Sets (or, with empty ``text``, removes) one named section of the system
    prompt. Sections are packed ordered by ``position`` then ``name``."""

    name: Id
    text: str
    position: Int64 = 0


class ToolSpec(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    kw_only=True,
):
    """A tool the model may call. ``parameters`` is the JSON Schema as text.

    A *freeform* tool (``freeform=True``; OpenAI's custom tools) takes raw text:
    ``parameters`` is then its input format as JSON text, as the Responses API
    writes it (``{"type": "grammar", "syntax": "lark", "definition": ...}``), ``{}``
    for unconstrained text.

    A *strict* tool (``strict=True``) asks the provider to hold the call's arguments
    to the schema (OpenAI's strict function calling, Anthropic's strict tool use); the
    schema must then be one the provider accepts as strict: every object sets
    ``additionalProperties`` to false (and, for OpenAI, lists every property as
    required). A freeform tool is never strict."""

    name: Id
    description: str = ""
    parameters: str = "{}"
    freeform: bool = False
    strict: bool = False


class ToolsSet(_Payload, tag="tools", frozen=True):
    """Declares the full set of tools offered to the model from here on."""

    tools: tuple[ToolSpec, ...]


class MemoryChanged(_Payload, tag="memory", frozen=True):
    """One memory operation. ``save`` creates, ``update`` replaces fields,
    ``forget`` removes, ``pin``/``unpin`` protect from consolidation."""

    op: Literal["save", "update", "forget", "pin", "unpin"]
    memory_id: Id
    memory_type: Literal["project", "user", "decision", ""] = ""
    retention: Literal["priority", "durable", "working", ""] = ""
    title: str = ""
    content: str = ""
    expires_seq: Seq | None = None
    expires_time: Int64 | None = None
    source_seqs: tuple[Seq, ...] = ()
    source_session: OptId = ""
    reason: Name = ""


class RecallHit(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    kw_only=True,
):
    """One recall result: the text that goes into the prompt and where it came from.

    ``offset`` is the character offset in the event's whole text (its blob's, for
    a blob-stored output) where ``text`` starts, when that is not 0: a large
    output is searched in chunks, and ``read_output`` fetches around a hit from
    there."""

    session: Id
    seq: Seq
    text: str
    score: str = ""
    offset: Count = 0


class RecallAdded(_Payload, tag="recall", frozen=True):
    """Search results committed to the log so that they may reach a prompt."""

    query: str
    hits: tuple[RecallHit, ...]
    searcher: Name = ""


class CompactionCommitted(_Payload, tag="compaction", frozen=True):
    """A summary that replaces a span of the session's history in prompts.

    The span is ``first_seq..last_seq`` (inclusive, positions in the session's
    lineage); ``covered_digest`` is blake3 over the concatenated 32-byte hashes
    of the covered events, so the provenance can be checked against the log.
    ``level`` 0 summarizes events; higher levels roll up the summaries listed
    in ``children`` (seqs of earlier compaction events). A span too large for
    the summarizer's window is summarized in parts first: ``parts`` lists the
    `CompactionPartSummarized` events whose summaries this one merges.
    ``tokens_before`` counts what the summary covers (for a level-0 summary the
    whole text of the covered events, blob-stored outputs included).
    """

    first_seq: Seq
    last_seq: Seq
    covered_digest: Hex
    summary: str
    level: Annotated[int, msgspec.Meta(ge=0, le=16)] = 0
    children: tuple[Seq, ...] = ()
    summarizer: Name = ""
    model: Name = ""
    prompt_hash: OptHex = ""
    reason: Literal["threshold", "overflow", "manual", "schedule", "imported", "rollup"] = (
        "threshold"
    )
    tokens_before: Count = 0
    tokens_after: Count = 0
    costs: str = ""
    parts: tuple[Seq, ...] = ()


class CompactionPartSummarized(_Payload, tag="compaction_part", frozen=True):
    """The summary of one part of a span too large for the summarizer's window,
    recorded before it is merged (the summaries a merge reads are inputs like any
    other: they are in the log before they reach a model).

    A level-0 part summarizes a stretch of the span's transcript: from character
    ``first_offset`` of the text of position ``first_seq`` to character
    ``last_offset`` (exclusive) of the text of position ``last_seq`` (positions in
    the session's lineage, as a compaction's). A part of level 1 or more merges
    the parts listed in ``children`` (seqs of earlier part events), when their
    summaries together are still too large for one merge. The
    `CompactionCommitted` that merges the last level lists them in ``parts``.
    ``tokens_before`` counts the part's source text, ``tokens_after`` its summary.
    """

    first_seq: Seq
    last_seq: Seq
    summary: str
    part: Annotated[int, msgspec.Meta(ge=1, le=2**31)]
    parts: Annotated[int, msgspec.Meta(ge=1, le=2**31)]
    first_offset: Count = 0
    last_offset: Count = 0
    level: Annotated[int, msgspec.Meta(ge=0, le=16)] = 0
    children: tuple[Seq, ...] = ()
    summarizer: Name = ""
    model: Name = ""
    prompt_hash: OptHex = ""
    tokens_before: Count = 0
    tokens_after: Count = 0


class CompactionFailed(_Payload, tag="compaction_failed", frozen=True):
    """A compaction attempt that did not produce a usable summary."""

    error: str
    reason: Literal["threshold", "overflow", "manual", "schedule", "rollup"] = "threshold"
    summarizer: Name = ""
    first_seq: Seq | None = None
    last_seq: Seq | None = None


class RequestIssued(_Payload, tag="request", frozen=True):
    """A prompt that was handed to a provider, recorded before it was sent.

    The prompt is a pure function of the log up to ``head_seq`` (whose hash is
    ``head_hash``), the policy named by ``policy_hash`` and the tokenizer, so
    ``replay`` can rebuild it and compare ``prompt_hash``. ``stages`` names a
    custom packing pipeline (comma-separated stage names; empty for the
    built-in one), which replay must be given again. ``digests`` holds 8-byte
    xxh3 digests of each system section, the tool schemas and each message,
    in prompt order, so a failed replay can name the first part that differs.
    ``rendered_hash`` is the blake3 of the provider request body when the prompt
    was rendered (``format`` names the renderer; ``model`` and ``render_args``, an
    opaque string the renderer wrote, its parameters); replay re-renders to check it.
    """

    head_seq: Seq
    head_hash: Hex
    policy_hash: Hex
    tokenizer: Name
    prompt_hash: Hex
    tokens: Count
    format: Name = "neutral"
    model: Name = ""
    calibration: str = ""
    recovery: bool = False
    stages: Name = ""
    digests: bytes = b""
    rendered_hash: OptHex = ""
    render_args: str = ""


class Usage(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    kw_only=True,
):
    """Token usage as the provider reported it."""

    input_tokens: Count = 0
    output_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0
    reasoning_tokens: Count = 0


class ResponseReceived(_Payload, tag="response", frozen=True):
    """The provider's reply to a recorded request (the content itself is an
    ``AssistantMessageAdded`` event)."""

    request_seq: Seq | None = None
    usage: Usage = Usage()
    stop_reason: Name = ""
    model: Name = ""
    response_id: OptId = ""


class ProviderErrorReceived(_Payload, tag="provider_error", frozen=True):
    """A provider refused or failed a request. ``overflow`` marks a
    context-length error, which triggers the deterministic recovery path."""

    request_seq: Seq | None = None
    status: Int64 | None = None
    code: Name = ""
    error_type: Name = ""
    message: str = ""
    overflow: bool = False


class PolicySet(_Payload, tag="policy", frozen=True):
    """The policy in force for this session from here on."""

    policy: Policy


class SessionForked(_Payload, tag="fork", frozen=True):
    """First event of a session that continues another session's history after
    event ``from_seq`` (whose hash is ``from_hash``), by reference."""

    from_session: Id
    from_seq: Seq
    from_hash: Hex


class SessionRewound(_Payload, tag="rewind", frozen=True):
    """Events after ``to_seq`` (a lineage position; up to this event) leave the
    session's history view: the view becomes what it was right after ``to_seq``.
    They stay in the log. Summaries committed after ``to_seq`` leave the view
    with them; memories (kept in their own session) whose sources were rewound
    are forgotten by ``forget`` events (``MemoryManager.repair``)."""

    to_seq: Int64
    reason: Name = ""


class EventsPinned(_Payload, tag="pin", frozen=True):
    """Pins (or unpins) events: pinned events are never pruned, trimmed or
    summarized away."""

    seqs: tuple[Seq, ...]
    pinned: bool = True


class StateSaved(_Payload, tag="state", frozen=True):
    """An orchestrator's own state, kept in the session beside the conversation and
    never packed into a prompt: a framework's checkpoint, a pending write, a marker
    that hides earlier ones. ``source`` names the framework and the item
    (``langgraph.checkpoint``); ``data`` describes it as JSON text; ``blobs`` hold its
    values, content-addressed, so a value two states share is stored once, and
    ``verify`` checks each one like any other blob."""

    source: Name
    data: str = ""
    blobs: tuple[BlobRef, ...] = ()


class ContentErased(_Payload, tag="erasure", frozen=True):
    """The content of earlier events of the session was erased (`Log.erase`).

    ``seqs`` are the erased events (ascending) and ``hashes`` their hashes (hex,
    in the same order): each erased event keeps its stored hash, which the chain
    still binds, while its content is replaced by an `EventErased` stub naming
    this event. `Log.verify` accepts a stub exactly when the erasure event that
    it names lists its seq with its hash. ``blobs`` are the blobs deleted with
    them (referenced by no other event). ``reason`` is caller data, like every
    field. Never appended directly: only `Log.erase` writes it, in the same
    transaction as the stubs."""

    seqs: tuple[Seq, ...]
    hashes: tuple[Hex, ...]
    reason: str
    blobs: tuple[Hex, ...] = ()


class EventErased(_Payload, tag="erased", frozen=True):
    """What is left of an event whose content was erased: the stub stored in its
    place (its stored hash is the original one). ``kind`` is the erased payload's
    tag, ``by`` the seq of the `ContentErased` event that erased it; ``call_ids`` and
    ``tool_names`` keep a message's tool-call pairing (ids and tool names, not
    content), so that packing can show a placeholder in its place. Never appended
    directly."""

    kind: Name
    by: Seq
    call_ids: tuple[Id, ...] = ()
    tool_names: tuple[Name, ...] = ()


Body = (
    UserMessageAdded
    | AssistantMessageAdded
    | ToolResultAdded
    | NotificationAdded
    | SystemSectionSet
    | ToolsSet
    | MemoryChanged
    | RecallAdded
    | CompactionCommitted
    | CompactionPartSummarized
    | CompactionFailed
    | RequestIssued
    | ResponseReceived
    | ProviderErrorReceived
    | PolicySet
    | SessionForked
    | SessionRewound
    | EventsPinned
    | StateSaved
    | ContentErased
    | EventErased
)

#: tag -> payload class, for every payload kind.
KINDS: dict[str, type[Any]] = {cls.__struct_config__.tag: cls for cls in Body.__args__}
#: The public name of `KINDS`.
EVENT_KINDS = KINDS


class Event(
    msgspec.Struct,
    frozen=True,
    gc=False,
    omit_defaults=True,
    forbid_unknown_fields=True,
    kw_only=True,
):
    """One entry of a session's log.

    Attributes:
        session: the session (stream) id.
        seq: position in the session, dense from 0.
        body: the payload.
        time: caller-supplied time (microseconds since the Unix epoch, UTC);
            stored as data, never read from a clock by turnlog.
        key: optional idempotency key, unique within the session.
        causation: optional id of what caused this event (e.g. the request a
            tool result answers).
        meta: free-form metadata (importers keep unknown source fields here).
        prev: hash of the previous event (32 zero bytes for seq 0 of a new
            session, the source event's hash for a fork). Not in the canonical bytes.
        hash: ``blake3(prev || canonical bytes)``. Not in the canonical bytes.
    """

    session: Id
    seq: Seq
    body: Body
    time: Int64 | None = None
    key: OptId | None = None
    causation: OptId | None = None
    meta: dict[str, Any] = {}
    prev: bytes = b""
    hash: bytes = b""

    @property
    def kind(self) -> str:
        """The payload's tag (``user``, ``tool_result``...)."""
        return self.body.__struct_config__.tag  # type: ignore[return-value]

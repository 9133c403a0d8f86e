"""The events: the payload kinds a log records, their parts, and their JSON form.

Every input that can reach a model is one of these payloads, appended to a
session's hash chain inside an `Event` envelope (see the event reference in
``docs/events.md``). ``event_to_json`` and ``event_from_json`` are the stable
JSON form of one event; ``covered_digest`` is the digest a `CompactionCommitted`
records over the hashes of the events it covers.

    >>> import turnlog
    >>> from turnlog.events import UserMessageAdded
    >>> log = turnlog.open(":memory:")
    >>> log.append("s1", UserMessageAdded(text="hello")).last_seq
    0
"""

from __future__ import annotations

from ._chain import covered_digest
from ._codec import event_from_json, event_to_json
from ._events import (
    EVENT_KINDS,
    AssistantMessageAdded,
    BlobRef,
    Body,
    CompactionCommitted,
    CompactionFailed,
    CompactionPartSummarized,
    ContentErased,
    Event,
    EventErased,
    EventsPinned,
    ImagePart,
    MemoryChanged,
    NativePart,
    NotificationAdded,
    Part,
    PolicySet,
    ProviderErrorReceived,
    ReasoningPart,
    RecallAdded,
    RecallHit,
    RequestIssued,
    ResponseReceived,
    SessionForked,
    SessionRewound,
    StateSaved,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    Usage,
    UserMessageAdded,
)

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
    "covered_digest",
    "event_from_json",
    "event_to_json",
]

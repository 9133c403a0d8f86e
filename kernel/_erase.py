"""Erasure: the content of chosen events leaves the store, the chain still verifies.

Theory of operation
-------------------
An erased event keeps its place and its stored hash; only its canonical bytes
are replaced, by those of an `EventErased` stub at the same position (the
payload's tag, the seq of the erasure event, and the ids and tool names that
pair tool calls with their results). The next event's ``prev`` and the head
still bind the original hash. The erasure itself is a `ContentErased` event,
chained like any other and appended in the same write transaction: it lists the
erased seqs with their original hashes and the blobs deleted with them (those no
other event of any session refers to), and the caller's reason. `Log.verify`
accepts a record whose hash does not match its bytes exactly when those bytes
are a canonical stub at its position whose erasure event lists that seq with
that hash; every other record is checked as before. docs/erasure.md is the
specification.

Erasing what is erased already changes nothing (no new event); events that
hold no content (the erasure events, a fork's first event, policies, rewinds
and pins) are kept when a whole session is erased. A compaction whose covered
range holds an erased event is erased with it (its summary may quote it).

Nothing here does I/O beyond the write transaction it is given.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ._chain import GENESIS, link, pack_record, record_event, record_hash
from ._codec import encode_event, may_hold_blob_refs
from ._errors import InvalidArgumentError, UnknownEventError, UnknownSessionError
from ._events import (
    AssistantMessageAdded,
    Body,
    CompactionCommitted,
    CompactionPartSummarized,
    ContentErased,
    Event,
    EventErased,
    EventsPinned,
    NotificationAdded,
    PolicySet,
    SessionForked,
    SessionRewound,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from ._store import ReadTxn, WriteTxn
from ._verify import referenced_blobs

__all__ = ["Erased", "PLACEHOLDER"]

# Kept when a whole session is erased: they hold no caller content, and the chain
# (a fork's link) or the meaning of later events (policy, rewinds, pins) needs them.
_KEPT = (ContentErased, EventErased, SessionForked, PolicySet, SessionRewound, EventsPinned)
# Never erased, even when named: the erasure record and a fork's link.
_REFUSED = (ContentErased, SessionForked)


_COMPACTION_TAG = msgspec.msgpack.encode("compaction")  # in every compaction's bytes
_PART_TAG = msgspec.msgpack.encode("compaction_part")  # and in every part summary's


class Erased(msgspec.Struct, frozen=True):
    """What `Log.erase` did.

    Attributes:
        session: the session.
        seq: the erasure event appended, or None when nothing was left to erase.
        seqs: the events erased by this call (ascending).
        blobs: the blobs deleted with them (hex hashes).
        already: the events named that an earlier erasure had erased.
    """

    session: str
    seq: int | None
    seqs: tuple[int, ...]
    blobs: tuple[str, ...] = ()
    already: tuple[int, ...] = ()


def stub_for(event: Event, by: int) -> bytes:
    """The canonical bytes of the stub stored in place of ``event`` (see module doc)."""
    body = event.body
    call_ids: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    if isinstance(body, AssistantMessageAdded):
        calls = [p for p in body.parts if isinstance(p, ToolCall)]
        call_ids = tuple(c.id for c in calls)
        names = tuple(c.name for c in calls)
    elif isinstance(body, ToolResultAdded):
        call_ids, names = (body.call_id,), (body.tool_name,)
    stub = EventErased(kind=event.kind, by=by, call_ids=call_ids, tool_names=names)
    return encode_event(Event(session=event.session, seq=event.seq, body=stub, time=event.time,
                              key=event.key))[1]


def _targets(txn: ReadTxn, session: str, head: int, seqs: Iterable[int] | None,
             ) -> tuple[list[int], list[int], dict[int, Event]]:
    """The seqs to erase now, those erased before, and the events to erase by seq."""
    explicit = seqs is not None
    wanted = sorted(set(seqs)) if seqs is not None else list(range(head + 1))
    new: list[int] = []
    already: list[int] = []
    events: dict[int, Event] = {}
    for seq in wanted:
        record = txn.get(session, seq)
        if record is None:
            raise UnknownEventError(f"session {session!r} has no event at seq {seq}")
        event = record_event(record)
        body = event.body
        if isinstance(body, EventErased):
            already.append(seq)
            continue
        if isinstance(body, _REFUSED if explicit else _KEPT):
            if explicit:
                raise InvalidArgumentError(
                    f"{session}#{seq} is a {type(body).__name__}, which holds no content and "
                    "is never erased; name the events whose content must go")
            continue
        new.append(seq)
        events[seq] = event
    return new, already, events


def _lineage_base(txn: ReadTxn, session: str) -> int:
    base = 0
    record = txn.get(session, 0)
    seen = 0
    while record is not None and seen < 10_000:
        body = record_event(record).body
        if not isinstance(body, SessionForked):
            break
        base += body.from_seq + 1
        record = txn.get(body.from_session, 0)
        seen += 1
    return base


def _covering_summaries(txn: ReadTxn, session: str, head: int, erased: set[int],
                        events: dict[int, Event]) -> None:
    """Add to ``events`` (and ``erased``) the compactions and part summaries of the
    session whose range covers an erased event: their summaries may quote it."""
    base = _lineage_base(txn, session)
    positions = sorted(base + seq for seq in erased)
    if not positions:
        return
    for seq, record in txn.scan(session, max(positions[0] - base, 0), head + 1):
        if seq in erased or (_COMPACTION_TAG not in record and _PART_TAG not in record):
            continue
        event = record_event(record)
        body = event.body
        if isinstance(body, (CompactionCommitted, CompactionPartSummarized)) and any(
                body.first_seq <= pos <= body.last_seq for pos in positions):
            erased.add(seq)
            events[seq] = event
            positions = sorted({*positions, base + seq})


def _orphaned_blobs(txn: ReadTxn, session: str, events: dict[int, Event]) -> list[str]:
    """The blobs the erased events refer to that no other event refers to."""
    candidates: set[str] = set()
    for event in events.values():
        candidates.update(referenced_blobs(event.body))
    if not candidates:
        return []
    for name, _, _ in list(txn.sessions()):
        for seq, record in txn.scan(name, 0, None):
            if (name == session and seq in events) or not may_hold_blob_refs(record):
                continue
            candidates.difference_update(referenced_blobs(record_event(record).body))
            if not candidates:
                return []
    return sorted(candidates)


def erase_txn(txn: WriteTxn, session: str, seqs: Iterable[int] | None, reason: str,
              time: int | None) -> Erased:
    """Erase inside one write transaction (see `Log.erase`)."""
    head = txn.head(session)
    if head is None:
        raise UnknownSessionError(f"no session {session!r} to erase; list sessions with "
                                  "`turnlog sessions` (Python: `Log.sessions()`)")
    head_seq, head_hash = head
    new, already, events = _targets(txn, session, head_seq, seqs)
    if not new:
        return Erased(session, None, (), (), tuple(already))
    erased = set(new)
    _covering_summaries(txn, session, head_seq, erased, events)
    order = sorted(erased)
    blobs = _orphaned_blobs(txn, session, events)
    by = head_seq + 1
    hashes = []
    for seq in order:
        hashes.append(events[seq].hash.hex())
    body: Body = ContentErased(seqs=tuple(order), hashes=tuple(hashes), reason=reason,
                               blobs=tuple(blobs))
    canonical = encode_event(Event(session=session, seq=by, body=body, time=time))[1]
    digest = link(head_hash if head_seq >= 0 else GENESIS, canonical)
    # The erasure event first, then the stubs: one transaction either way.
    txn.put_event(session, by, pack_record(head_hash, digest, canonical))
    txn.set_head(session, by, digest)
    for seq in order:
        event = events[seq]
        record = txn.get(session, seq)
        assert record is not None
        txn.replace_event(session, seq, pack_record(event.prev, record_hash(record),
                                                    stub_for(event, by)))
    for blob in blobs:
        txn.delete_blob(blob)
    return Erased(session, by, tuple(order), tuple(blobs), tuple(already))


#: The text packing shows in place of erased content.
PLACEHOLDER = "[erased]"


def placeholder(event: Event) -> Event:
    """What packing folds in place of an erased event: for a message, the same kind
    of message saying `PLACEHOLDER` (an assistant message keeps its tool calls,
    with no arguments, and a tool result its call id, so pairs stay pairs); any
    other stub unchanged (packing ignores it)."""
    body = event.body
    if not isinstance(body, EventErased):
        return event
    new: Body | None = None
    if body.kind == "user":
        new = UserMessageAdded(text=PLACEHOLDER)
    elif body.kind == "notification":
        new = NotificationAdded(source="erased", text=PLACEHOLDER)
    elif body.kind == "assistant":
        calls = tuple(ToolCall(id=i, name=n) for i, n in zip(body.call_ids, body.tool_names,
                                                               strict=False))
        new = AssistantMessageAdded(parts=(TextPart(text=PLACEHOLDER), *calls))
    elif body.kind == "tool_result" and body.call_ids:
        new = ToolResultAdded(call_id=body.call_ids[0],
                              tool_name=body.tool_names[0] if body.tool_names else "erased",
                              output=PLACEHOLDER)
    if new is None:
        return event
    return msgspec.structs.replace(event, body=new)

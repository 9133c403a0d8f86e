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

import re
from collections.abc import Iterable

import msgspec

from ._chain import GENESIS, link, pack_record, record_event, record_hash
from ._codec import encode_event, may_hold_blob_refs
from ._errors import InvalidArgumentError, UnknownEventError, UnknownSessionError
from ._events import (
    AssistantMessageAdded,
    BlobRef,
    Body,
    CompactionCommitted,
    CompactionPartSummarized,
    ContentErased,
    Event,
    EventErased,
    EventsPinned,
    MemoryChanged,
    NotificationAdded,
    PolicySet,
    ReasoningPart,
    RecallAdded,
    SessionForked,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from ._store import ReadTxn, WriteTxn
from ._tokens import CACHE_NAMESPACE as COUNTS_NAMESPACE
from ._tokens import empty_chunks
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
        followed: the erasures made in other sessions, in the same transaction, of
            events derived from these (a memory saved from them, a recall that hit
            them, a system section or summary quoting them): one per session.
    """

    session: str
    seq: int | None
    seqs: tuple[int, ...]
    blobs: tuple[str, ...] = ()
    already: tuple[int, ...] = ()
    followed: tuple[Erased, ...] = ()


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
    return encode_event(
        Event(session=event.session, seq=event.seq, body=stub, time=event.time, key=event.key)
    )[1]


def _targets(
    txn: ReadTxn,
    session: str,
    head: int,
    seqs: Iterable[int] | None,
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
                    "is never erased; name the events whose content must go"
                )
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


def _covering_summaries(
    txn: ReadTxn, session: str, head: int, erased: set[int], events: dict[int, Event]
) -> None:
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
            body.first_seq <= pos <= body.last_seq for pos in positions
        ):
            erased.add(seq)
            events[seq] = event
            positions = sorted({*positions, base + seq})


def _orphaned_blobs(txn: ReadTxn, plan: dict[str, dict[int, Event]]) -> list[str]:
    """The blobs the erased events refer to that no other event refers to."""
    candidates: set[str] = set()
    for events in plan.values():
        for event in events.values():
            candidates.update(referenced_blobs(event.body))
    if not candidates:
        return []
    for name, _, _ in list(txn.sessions()):
        erased = plan.get(name, {})
        for seq, record in txn.scan(name, 0, None):
            if seq in erased or not may_hold_blob_refs(record):
                continue
            candidates.difference_update(referenced_blobs(record_event(record).body))
            if not candidates:
                return []
    return sorted(candidates)


# -- following derived text ------------------------------------------------------------------
# An event derived from erased content may carry its text: a memory saved from a message
# or a summary, a recall that hit it, the memory block or a "working memory" section that
# quotes them, a summary of a summary. Such events are found by the provenance they
# record (a memory's source session and seqs, a recall hit's session and seq: in any
# session) or by a verbatim quote (QUOTE_WINDOW characters of an erased text, or the
# whole of a shorter one of QUOTE_MIN or more), and erased in the same transaction.
# Where a quote is looked for: compactions and recalls of the same session, and system
# sections and memories of every session (the memory block and a new session's
# "working memory" quote other sessions). What is quoted: the erased messages, tool
# outputs, notifications, memories, recalls and summaries, never an erased system
# section (sessions share their system prompt; that is configuration, not derivation).
# A message, a tool output or a notification is a primary record, even when it repeats
# the same words, and is erased only when named.

#: Characters of erased text whose verbatim appearance makes a derived event a quote.
QUOTE_WINDOW = 40
#: An erased text shorter than the window is looked for whole from this length on.
QUOTE_MIN = 16
_STRIDE = QUOTE_WINDOW // 2
# The encoded tags of the derived kinds: a record holding none of them is skipped
# undecoded (one search per record).
_DERIVED_TAGS = re.compile(
    b"|".join(
        re.escape(msgspec.msgpack.encode(tag))
        for tag in ("system", "memory", "recall", "compaction")
    )
)
_BLOB_TEXT_LIMIT = 8 * 2**20  # of a blob's text searched for quotes


def _texts(txn: ReadTxn, body: Body) -> list[str]:
    """The texts of a payload that a derived event could quote."""
    if isinstance(body, UserMessageAdded | NotificationAdded):
        texts = [body.text]
    elif isinstance(body, AssistantMessageAdded):
        texts = [p.text for p in body.parts if isinstance(p, TextPart | ReasoningPart)]
        texts += [p.arguments for p in body.parts if isinstance(p, ToolCall)]
    elif isinstance(body, ToolResultAdded):
        texts = [body.output]
    elif isinstance(body, MemoryChanged):
        texts = [body.title, body.content]
    elif isinstance(body, RecallAdded):
        texts = [body.query, *(hit.text for hit in body.hits)]
    elif isinstance(body, CompactionCommitted):
        texts = [body.summary]
    else:
        texts = []
    blob = getattr(body, "blob", None)
    if isinstance(blob, BlobRef) and blob.media_type.startswith("text/"):
        data = txn.blob(blob.hash)
        if data is not None:
            texts.append(data[:_BLOB_TEXT_LIMIT].decode("utf-8", "ignore"))
    return [t for t in texts if len(t.strip()) >= QUOTE_MIN]


def _needles(texts: Iterable[str]) -> set[str]:
    """What a quote of one of ``texts`` holds at least one of: its windows of
    QUOTE_WINDOW characters every _STRIDE characters (a quote of QUOTE_WINDOW +
    _STRIDE - 1 characters or more holds one), or the whole of a shorter text."""
    found: set[str] = set()
    for whole in texts:
        text = whole.strip()
        if len(text) <= QUOTE_WINDOW:
            found.add(text)
            continue
        found.update(
            text[i : i + QUOTE_WINDOW] for i in range(0, len(text) - QUOTE_WINDOW + 1, _STRIDE)
        )
        found.add(text[-QUOTE_WINDOW:])
    return found


def _quotes(text: str, needles: set[str], short: list[str]) -> bool:
    """Whether ``text`` holds a needle (``short``: the needles shorter than the window,
    looked for with ``in``)."""
    if any(needle in text for needle in short):
        return True
    return any(text[i : i + QUOTE_WINDOW] in needles for i in range(len(text) - QUOTE_WINDOW + 1))


def _derived_text(body: Body) -> str:
    if isinstance(body, SystemSectionSet):
        return body.text
    if isinstance(body, MemoryChanged):
        return body.title + "\n" + body.content
    if isinstance(body, RecallAdded):
        return body.query + "\n" + "\n".join(hit.text for hit in body.hits)
    if isinstance(body, CompactionCommitted):
        return body.summary
    return ""


def _derived_from(event: Event, plan: dict[str, dict[int, Event]]) -> bool:
    """Whether ``event`` records that it was derived from an event of ``plan``."""
    body = event.body
    if isinstance(body, MemoryChanged):
        if body.source_session and any(
            seq in plan.get(body.source_session, ()) for seq in body.source_seqs
        ):
            return True
        # Another change of a memory whose content is erased: the same memory.
        return bool(body.title or body.content) and any(
            isinstance(other.body, MemoryChanged) and other.body.memory_id == body.memory_id
            for other in plan.get(event.session, {}).values()
        )
    if isinstance(body, RecallAdded):
        return any(hit.seq in plan.get(hit.session, ()) for hit in body.hits)
    return False


class _Needles:
    """The needles of one session's erased texts, and of every session's."""

    def __init__(self) -> None:
        self.own: dict[str, tuple[set[str], list[str]]] = {}
        self.every: tuple[set[str], list[str]] = (set(), [])

    def add(self, txn: ReadTxn, events: Iterable[Event]) -> None:
        by_session: dict[str, list[str]] = {}
        for event in events:
            by_session.setdefault(event.session, []).extend(_texts(txn, event.body))
        fresh: set[str] = set()
        for name, texts in by_session.items():
            needles = _needles(texts)
            own = self.own.setdefault(name, (set(), []))
            own[0].update(needles)
            fresh |= needles
        self.own = {
            name: (needles, sorted(n for n in needles if len(n) < QUOTE_WINDOW))
            for name, (needles, _) in self.own.items()
        }
        every = self.every[0] | fresh
        self.every = (every, sorted(n for n in every if len(n) < QUOTE_WINDOW))

    def quoted_in(self, event: Event, text: str) -> bool:
        everywhere = isinstance(event.body, SystemSectionSet | MemoryChanged)
        needles, short = self.every if everywhere else self.own.get(event.session, (set(), []))
        return bool(needles) and _quotes(text, needles, short)


def _follow(txn: ReadTxn, plan: dict[str, dict[int, Event]]) -> None:
    """Add to ``plan`` every event derived from an event in it (see above), and the
    compactions covering those, until nothing more is found."""
    candidates: list[tuple[Event, str]] = []
    for name, _, _ in list(txn.sessions()):
        for seq, record in txn.scan(name, 0, None):
            if seq in plan.get(name, ()) or _DERIVED_TAGS.search(record) is None:
                continue
            event = record_event(record)
            text = _derived_text(event.body)
            if text or isinstance(event.body, MemoryChanged | RecallAdded):
                candidates.append((event, text))
    needles = _Needles()
    fresh = [event for events in plan.values() for event in events.values()]
    while fresh:  # each round follows one step of derivation; candidates only shrink
        needles.add(txn, fresh)
        found = [
            event
            for event, text in candidates
            if event.seq not in plan.get(event.session, ())
            and (_derived_from(event, plan) or needles.quoted_in(event, text))
        ]
        for event in found:
            plan.setdefault(event.session, {})[event.seq] = event
        fresh = list(found)
        for name in sorted({event.session for event in found}):
            head = txn.head(name)
            assert head is not None
            before = set(plan[name])
            _covering_summaries(txn, name, head[0], set(before), plan[name])
            fresh += [plan[name][seq] for seq in sorted(set(plan[name]) - before)]


def _write_erasure(
    txn: WriteTxn,
    session: str,
    events: dict[int, Event],
    blobs: list[str],
    reason: str,
    time: int | None,
) -> Erased:
    """Append the erasure event of ``events`` to ``session`` and put the stubs in place."""
    head = txn.head(session)
    assert head is not None
    head_seq, head_hash = head
    order = sorted(events)
    by = head_seq + 1
    body: Body = ContentErased(
        seqs=tuple(order),
        hashes=tuple(events[seq].hash.hex() for seq in order),
        reason=reason,
        blobs=tuple(blobs),
    )
    canonical = encode_event(Event(session=session, seq=by, body=body, time=time))[1]
    digest = link(head_hash if head_seq >= 0 else GENESIS, canonical)
    # The erasure event first, then the stubs: one transaction either way.
    txn.put_event(session, by, pack_record(head_hash, digest, canonical))
    txn.set_head(session, by, digest)
    for seq in order:
        event = events[seq]
        record = txn.get(session, seq)
        assert record is not None
        txn.replace_event(
            session, seq, pack_record(event.prev, record_hash(record), stub_for(event, by))
        )
    for blob in blobs:
        txn.delete_blob(blob)
    return Erased(session, by, tuple(order), tuple(blobs))


def erase_txn(
    txn: WriteTxn, session: str, seqs: Iterable[int] | None, reason: str, time: int | None
) -> Erased:
    """Erase inside one write transaction (see `Log.erase`)."""
    head = txn.head(session)
    if head is None:
        raise UnknownSessionError(
            f"no session {session!r} to erase; list sessions with "
            "`turnlog sessions` (Python: `Log.sessions()`)"
        )
    head_seq = head[0]
    new, already, events = _targets(txn, session, head_seq, seqs)
    if not new:
        return Erased(session, None, (), (), tuple(already))
    erased = set(new)
    _covering_summaries(txn, session, head_seq, erased, events)
    plan: dict[str, dict[int, Event]] = {session: events}
    _follow(txn, plan)
    blobs = _orphaned_blobs(txn, plan)
    # Each blob is listed by the erasure of the first session (the named one first)
    # whose erased events refer to it.
    order = [session, *sorted(name for name in plan if name != session)]
    listed: dict[str, list[str]] = {name: [] for name in order}
    left = set(blobs)
    for name in order:
        for event in plan[name].values():
            for blob in referenced_blobs(event.body):
                if blob in left:
                    left.discard(blob)
                    listed[name].append(blob)
    done = [
        _write_erasure(txn, name, plan[name], sorted(listed[name]), reason, time) for name in order
    ]
    # The persisted token counts are keyed by a digest of each counted text: a digest of
    # erased text would confirm a guess of it. They are derived data: emptied, and
    # counted again as sessions are packed.
    for key, value in empty_chunks(lambda key: txn.cached(COUNTS_NAMESPACE, key)):
        txn.put_cached(COUNTS_NAMESPACE, key, value)
    first = done[0]
    return Erased(session, first.seq, first.seqs, first.blobs, tuple(already), tuple(done[1:]))


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
        calls = tuple(
            ToolCall(id=i, name=n) for i, n in zip(body.call_ids, body.tool_names, strict=False)
        )
        new = AssistantMessageAdded(parts=(TextPart(text=PLACEHOLDER), *calls))
    elif body.kind == "tool_result" and body.call_ids:
        new = ToolResultAdded(
            call_id=body.call_ids[0],
            tool_name=body.tool_names[0] if body.tool_names else "erased",
            output=PLACEHOLDER,
        )
    if new is None:
        return event
    return msgspec.structs.replace(event, body=new)

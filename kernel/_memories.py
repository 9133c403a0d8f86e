"""Memories: a fold of ``MemoryChanged`` events, and the frozen memory block.

Theory of operation
-------------------
Memories live in their own session of the log (``"memories"`` by default), as
``MemoryChanged`` events: ``save`` creates a memory, ``update`` replaces the
fields it sets, ``forget`` removes it (with a reason), ``pin``/``unpin``
protect it from consolidation. `MemoryBook` folds those events, in lineage
order, into the set of live memories; it is a pure function of the events
(no clock, no randomness, no dependence on the order of other sessions).

A memory reaches a prompt in exactly one way: `MemoryManager.refresh`
renders the live memories into a block of text and appends it to an agent
session as ``SystemSectionSet(name="memories", position=1000)``. The packer
then sends whatever section is in force, unchanged, on every turn: the block
is *frozen* between refreshes, so the provider's prompt-cache prefix stays
stable, and every change the model sees is an event of the agent session.
A refresh appends only at a point the policy names (``memory_refresh``:
``session_start``, ``compaction``, ``every_turn``, ``manual``) and only when
the rendered text differs from the block in force; an empty block removes
the section (``text=""``).

Rules of the fold (a log may hold any valid event, so the fold is total):

* ``save`` of an id that is live replaces that memory (pin cleared); the
  manager refuses it (use ``update``). A save after a ``forget`` starts anew.
* ``update`` sets the fields it carries (non-empty strings, non-None expiry,
  non-empty provenance) and keeps the others. ``update``, ``forget``,
  ``pin`` and ``unpin`` of an id that is not live change nothing.
* A save without a type is a ``project`` memory; without a retention class
  it is ``durable`` (the default of user-created memories).
* A memory *lapses after* lineage position ``expires_seq`` of the memory
  session (once the session's head position is past it), and after time
  ``expires_time`` (once the caller-supplied ``now``, in microseconds, is
  past it). A
  pinned memory never expires: pinning protects from every automatic removal.
  Expired memories are not rendered; `MemoryManager.consolidate` records
  their removal as ``forget`` events (reason ``expired``).
* A ``SessionRewound`` in the memory session itself is honoured like the
  projection does: the book becomes what it was right after ``to_seq``.

Render order (deterministic): section (Priority Context for every
``priority`` memory, then the ``durable`` ones by type: Project Knowledge,
User Preferences, Key Decisions, then Working Memory for every ``working``
one), then pinned first, then save position. Caps, applied in this order:
``memory_working_max`` keeps the most recent working memories (pinned
first), ``memory_max_count`` keeps the first memories in render order (so
priority memories count first), ``memory_max_chars`` drops whole entries
from the end until the block fits; no entry is ever cut.

Consolidation and repairs are events, never deletions: consolidation appends
``forget`` events for expired memories and for the working memories that
came from compaction summaries beyond the ``memory_summary_keep`` most
recent unpinned ones; `MemoryManager.repair` appends ``forget`` events
(reason ``source rewound``) for memories whose provenance lies in a range of
an agent session that a ``SessionRewound`` took out of its view.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

import msgspec

from ._errors import (
    Hint,
    InvalidArgumentError,
    UnknownSessionError,
)
from ._events import (
    CompactionCommitted,
    Event,
    MemoryChanged,
    SessionRewound,
    SystemSectionSet,
)
from ._log import NEW_SESSION, Appended, Draft, Head, Log, check_log
from ._otel import set_attributes as otel_attributes
from ._otel import span as otel_span
from ._policy import REFRESH_POINTS, Policy, check_policy
from ._projection import Projection
from ._validation import check_text, invalid, refuse_unknown_options

__all__ = ["MEMORY_SECTION", "Memory", "MemoryBook", "MemoryManager"]

#: Name of the system section that carries the memory block.
MEMORY_SECTION = "memories"
#: Its position: after the static sections (which use small positions).
MEMORY_SECTION_POSITION = 1000
#: Memory types and retention classes, as ``MemoryChanged`` spells them.
MEMORY_TYPES: tuple[str, ...] = ("project", "user", "decision")
RETENTIONS: tuple[str, ...] = ("priority", "durable", "working")
#: Section titles of the block, in render order.
SECTION_TITLES: tuple[str, ...] = (
    "Priority Context",
    "Project Knowledge",
    "User Preferences",
    "Key Decisions",
    "Working Memory",
)
#: The ``reason`` of a save that stores a compaction summary as a working memory.
SUMMARY_REASON = "compaction"
#: Default lifetime of a summary memory: 14 days, in microseconds.
SUMMARY_TTL = 14 * 24 * 3600 * 1_000_000

_HEADER = "# Memories"
_TYPE_SECTION = {"project": 1, "user": 2, "decision": 3}
_DATED_SECTIONS = (1, 3)  # Project Knowledge and Key Decisions show the date
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

MemoryType = Literal["project", "user", "decision"]
Retention = Literal["priority", "durable", "working"]
Point = Literal["session_start", "compaction", "every_turn", "manual"]


class Memory(msgspec.Struct, frozen=True, kw_only=True):
    """One live memory, as the fold of its events left it.

    Attributes:
        memory_id: the id.
        memory_type: ``project``, ``user`` or ``decision``.
        retention: ``priority``, ``durable`` or ``working``.
        title: short label.
        content: the knowledge itself.
        pinned: protected from consolidation and expiry.
        saved_pos: lineage position (in the memory session) of its save.
        changed_pos: position of its latest save or update.
        changed_time: event time of that save or update (microseconds), if any.
        expires_seq: it lapses once the memory session's head is past this position.
        expires_time: it lapses once the caller's time is past this (microseconds).
        source_session: the session it was derived from, if known.
        source_seqs: the seqs of that session it was derived from.
        origin: the ``reason`` of its save (``compaction`` for a summary).
    """

    memory_id: str
    memory_type: str
    retention: str
    title: str
    content: str
    pinned: bool = False
    saved_pos: int
    changed_pos: int
    changed_time: int | None = None
    expires_seq: int | None = None
    expires_time: int | None = None
    source_session: str = ""
    source_seqs: tuple[int, ...] = ()
    origin: str = ""

    @property
    def section(self) -> int:
        """Index into `SECTION_TITLES` of the section this memory renders in."""
        if self.retention == "priority":
            return 0
        if self.retention == "working":
            return 4
        return _TYPE_SECTION.get(self.memory_type, 1)

    @property
    def is_summary(self) -> bool:
        """True for a working memory saved from a compaction summary."""
        return self.retention == "working" and self.origin == SUMMARY_REASON

    def expired(self, head: int, now: int | None) -> bool:
        """Whether the memory has expired.

        Parameters:
            head: the memory session's head position.
            now: the caller's current time in microseconds (None: time-based
                expiry is not evaluated).
        """
        if self.pinned:
            return False
        if self.expires_seq is not None and head > self.expires_seq:
            return True
        return self.expires_time is not None and now is not None and now > self.expires_time


class Forgotten(msgspec.Struct, frozen=True, kw_only=True):
    """A memory that a ``forget`` event removed: its last state, why, and where."""

    memory: Memory
    reason: str
    pos: int


class Changed(msgspec.Struct, frozen=True):
    """The result of one memory operation: the memory's id and where its event landed."""

    memory_id: str
    appended: Appended


class Consolidated(msgspec.Struct, frozen=True):
    """What `MemoryManager.consolidate` did.

    Attributes:
        forgotten: ``(memory_id, reason)`` of each memory forgotten, in event order.
        appended: where the ``forget`` events landed (None when nothing was due).
    """

    forgotten: tuple[tuple[str, str], ...]
    appended: Appended | None


class Repaired(msgspec.Struct, frozen=True):
    """What `MemoryManager.repair` did.

    Attributes:
        session: the agent session examined.
        rewound_seqs: how many of its own seqs are out of its view.
        forgotten: ids of the memories forgotten (reason ``source rewound``).
        appended: where the ``forget`` events landed (None when nothing was due).
    """

    session: str
    rewound_seqs: int
    forgotten: tuple[str, ...]
    appended: Appended | None


def _sort_key(memory: Memory) -> tuple[int, bool, int, str]:
    return (memory.section, not memory.pinned, memory.saved_pos, memory.memory_id)


class MemoryBook:
    """The live memories: a pure fold of a memory session's events.

    Feed it the memory session's lineage in order with `apply`/`extend`, or
    build one with `from_events`. Events of other kinds are counted as
    positions and otherwise ignored (a rewind excepted, see the module docs).
    """

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._rewinds: dict[int, frozenset[int]] = {}
        self._reset(frozenset())

    def _reset(self, rewound: frozenset[int]) -> None:
        self._rewound = rewound
        self._live: dict[str, Memory] = {}
        self._forgotten: dict[str, Forgotten] = {}

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> MemoryBook:
        """A book folded from ``events`` (a memory session's lineage, oldest first)."""
        book = cls()
        book.extend(events)
        return book

    @property
    def head(self) -> int:
        """Position of the last event applied (-1 when none)."""
        return len(self._events) - 1

    def extend(self, events: Iterable[Event]) -> None:
        """Apply events in lineage order."""
        for event in events:
            self.apply(event)

    def apply(self, event: Event) -> None:
        """Apply the next event of the memory session's lineage."""
        pos = len(self._events)
        self._events.append(event)
        body = event.body
        if isinstance(body, SessionRewound):
            if pos not in self._rewinds:
                self._rewind(pos, body)
            return
        if pos in self._rewound or not isinstance(body, MemoryChanged):
            return
        self._change(pos, event.time, body)

    def _rewind(self, pos: int, body: SessionRewound) -> None:
        # Same rule as the projection: the state right after to_seq, minus since.
        base: frozenset[int] = frozenset()
        for at in sorted(self._rewinds):
            if at <= body.to_seq:
                base = self._rewinds[at]
        self._rewinds[pos] = base | frozenset(range(body.to_seq + 1, pos))
        events = self._events
        self._events = []
        self._reset(self._rewinds[pos])
        for event in events:
            self.apply(event)

    def _change(self, pos: int, time: int | None, body: MemoryChanged) -> None:
        mid = body.memory_id
        if body.op == "save":
            self._forgotten.pop(mid, None)
            self._live[mid] = Memory(
                memory_id=mid,
                memory_type=body.memory_type or "project",
                retention=body.retention or "durable",
                title=body.title,
                content=body.content,
                saved_pos=pos,
                changed_pos=pos,
                changed_time=time,
                expires_seq=body.expires_seq,
                expires_time=body.expires_time,
                source_session=body.source_session,
                source_seqs=body.source_seqs,
                origin=body.reason,
            )
            return
        memory = self._live.get(mid)
        if memory is None:
            return
        if body.op == "forget":
            del self._live[mid]
            self._forgotten[mid] = Forgotten(memory=memory, reason=body.reason, pos=pos)
        elif body.op in ("pin", "unpin"):
            self._live[mid] = msgspec.structs.replace(memory, pinned=body.op == "pin")
        else:  # update
            self._live[mid] = msgspec.structs.replace(
                memory,
                memory_type=body.memory_type or memory.memory_type,
                retention=body.retention or memory.retention,
                title=body.title or memory.title,
                content=body.content or memory.content,
                expires_seq=body.expires_seq
                if body.expires_seq is not None
                else memory.expires_seq,
                expires_time=body.expires_time
                if body.expires_time is not None
                else memory.expires_time,
                source_session=body.source_session or memory.source_session,
                source_seqs=body.source_seqs or memory.source_seqs,
                changed_pos=pos,
                changed_time=time,
            )

    # -- queries -----------------------------------------------------------------
    def get(self, memory_id: str) -> Memory | None:
        """The live memory with this id (expired or not), or None."""
        return self._live.get(memory_id)

    def forgotten(self) -> list[Forgotten]:
        """Memories removed by ``forget`` events (and not saved again), by position."""
        return sorted(self._forgotten.values(), key=lambda f: (f.pos, f.memory.memory_id))

    def memories(self, *, now: int | None = None, include_expired: bool = False) -> list[Memory]:
        """Live memories in render order.

        Parameters:
            now: current time in microseconds for time-based expiry (None: not
                evaluated).
            include_expired: also list expired memories.
        """
        head = self.head
        found = [m for m in self._live.values() if include_expired or not m.expired(head, now)]
        return sorted(found, key=_sort_key)

    def expired(self, *, now: int | None = None) -> list[Memory]:
        """Live memories that have expired, in render order."""
        head = self.head
        return sorted((m for m in self._live.values() if m.expired(head, now)), key=_sort_key)

    def select(self, policy: Policy, *, now: int | None = None) -> list[Memory]:
        """The memories the block shows under ``policy``, in render order (see the
        module docs for the caps)."""
        live = self.memories(now=now)
        working = sorted(
            (m for m in live if m.section == 4),
            key=lambda m: (not m.pinned, -m.saved_pos, m.memory_id),
        )
        dropped = {m.memory_id for m in working[policy.memory_working_max :]}
        chosen = [m for m in live if m.memory_id not in dropped][: policy.memory_max_count]
        return _fit_chars(chosen, policy.memory_max_chars)

    def render(self, policy: Policy, *, now: int | None = None) -> str:
        """The memory block under ``policy`` (``""`` when no memory is shown)."""
        return render_block(self.select(policy, now=now))


def _date(time: int | None) -> str:
    if time is None:
        return ""
    try:
        return (_EPOCH + timedelta(microseconds=time)).date().isoformat()
    except OverflowError:
        return ""


def _entry(memory: Memory) -> str:
    text = f"{memory.title}: {memory.content}" if memory.title else memory.content
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()] or [""]
    date = _date(memory.changed_time) if memory.section in _DATED_SECTIONS else ""
    if date:
        lines[-1] = f"{lines[-1]} ({date})"
    # Continuation lines are indented so that the entry stays one list item.
    return "\n".join([f"- {lines[0]}", *(f"  {line}" for line in lines[1:])])


def _fit_chars(chosen: list[Memory], max_chars: int) -> list[Memory]:
    # The block of a prefix grows with each entry, so the longest prefix that
    # fits is what "drop whole entries from the end" leaves.
    length = len(_HEADER)
    section = -1
    for count, memory in enumerate(chosen):
        if memory.section != section:
            section = memory.section
            length += len("\n\n## ") + len(SECTION_TITLES[section])
        length += 1 + len(_entry(memory))
        if length > max_chars:
            return chosen[:count]
    return chosen


def render_block(memories: Sequence[Memory]) -> str:
    """Render memories (already selected and ordered) as the memory block.

    Returns ``""`` for no memories, else ``# Memories`` followed by one
    ``## Title`` section per non-empty section, one ``- title: content``
    entry per memory (dated in Project Knowledge and Key Decisions when the
    memory's event carries a time).
    """
    if not memories:
        return ""
    out = [_HEADER]
    section = -1
    for memory in memories:
        if memory.section != section:
            section = memory.section
            out.append(f"\n## {SECTION_TITLES[section]}")
        out.append(_entry(memory))
    return "\n".join(out)


# Builds the events of one operation from the current book (raises to refuse).
_Builder = Callable[[MemoryBook], tuple[str, list[MemoryChanged]]]
# Picks ``(memory_id, reason)`` of the memories to forget from the current book.
_Picker = Callable[[MemoryBook], list[tuple[str, str]]]


class _NoCount:
    """A token counter that counts nothing: the manager's projections only need
    sections and rewinds, never token counts."""

    @property
    def id(self) -> str:
        return "none"

    def count(self, text: str) -> int:
        del text
        return 0


_CACHED_SESSIONS = 64  # agent-session projections kept (least recently used dropped)


class MemoryManager:
    """Reads and changes memories through the log, and puts the block into sessions.

    Every change is an appended ``MemoryChanged`` event in ``memory_session``;
    the block reaches an agent session only through `refresh`. Thread-safe;
    keep one per log and memory session (it caches its fold).

    Parameters:
        log: the log.
        memory_session: the session that holds the memory events.
    """

    @refuse_unknown_options("MemoryManager()", usage="MemoryManager(turnlog.open(path))")
    def __init__(self, log: Log, memory_session: str = "memories") -> None:
        check_log(log, "MemoryManager")
        check_text(memory_session, "memory_session", what="a non-empty session id")
        self.log = log
        self.memory_session = memory_session
        self._book: MemoryBook | None = None
        self._seen = NEW_SESSION  # own seq of the memory session the book has reached
        self._views: dict[str, tuple[Projection, int]] = {}
        self._lock = threading.RLock()
        self._erasures = log._erasures

    # -- reading -------------------------------------------------------------------
    def book(self) -> MemoryBook:
        """The memory book, brought up to date with the log."""
        with self._lock:
            self._forget_erased()
            head = self.log.head(self.memory_session)
            if self._book is None:
                self._book = MemoryBook()
                if head is not None:
                    self._book.extend(self.log.lineage(self.memory_session, head.seq + 1))
                    self._seen = head.seq
            elif head is not None and head.seq > self._seen:
                self._book.extend(self.log.read(self.memory_session, self._seen + 1, head.seq + 1))
                self._seen = head.seq
            return self._book

    def _forget_erased(self) -> None:
        """Drop the book and the views when content was erased since they were folded
        (they hold the old text)."""
        if self.log._erasures != self._erasures:
            self._book = None
            self._seen = NEW_SESSION
            self._views.clear()
            self._erasures = self.log._erasures

    def memories(self, *, now: int | None = None, include_expired: bool = False) -> list[Memory]:
        """Live memories in render order (see `MemoryBook.memories`)."""
        return self.book().memories(now=now, include_expired=include_expired)

    def render(self, policy: Policy, *, now: int | None = None) -> str:
        """The memory block under ``policy`` at time ``now`` (``""`` when empty).

        Parameters:
            policy: supplies ``memory_max_count``, ``memory_working_max`` and
                ``memory_max_chars``.
            now: current time in microseconds for time-based expiry (None: not
                evaluated).
        """
        return self.book().render(policy, now=now)

    # -- operations ------------------------------------------------------------------
    def save(
        self,
        title: str,
        content: str,
        *,
        memory_type: MemoryType = "project",
        retention: Retention = "durable",
        memory_id: str | None = None,
        pinned: bool = False,
        expires_seq: int | None = None,
        expires_time: int | None = None,
        source_session: str = "",
        source_seqs: Sequence[int] = (),
        reason: str = "",
        time: int | None = None,
    ) -> Changed:
        """Save a new memory (appends ``save``, and ``pin`` when ``pinned``).

        Parameters:
            title: short label shown before the content.
            content: the knowledge (non-empty).
            memory_type: ``project``, ``user`` or ``decision``.
            retention: ``priority``, ``durable`` or ``working``.
            memory_id: the id; None derives ``m<position>`` from where the
                save lands.
            pinned: pin it in the same batch.
            expires_seq: it lapses once the memory session's head position is
                past this.
            expires_time: it lapses once the caller's time (microseconds) is
                past this.
            source_session, source_seqs: provenance (the session and seqs it
                was derived from); `repair` uses it.
            reason: why it was saved (``compaction`` marks a summary memory).
            time: the event time (microseconds).

        Returns:
            The id and where the events landed.

        Raises:
            InvalidEventError: a bad type or class, empty content, or an id
                that names a live memory (use `update`).
        """
        if memory_type not in MEMORY_TYPES:
            raise InvalidArgumentError(
                f"memory_type must be one of {list(MEMORY_TYPES)}, found {memory_type!r}"
            )
        if retention not in RETENTIONS:
            raise InvalidArgumentError(
                f"retention must be one of {list(RETENTIONS)}, found {retention!r}"
            )
        if not isinstance(content, str) or not content.strip():
            invalid(
                "content",
                "a str with more than white space (a memory needs non-empty content)",
                content,
                with_type=not isinstance(content, str),
            )
        seqs = tuple(source_seqs)

        def build(book: MemoryBook) -> tuple[str, list[MemoryChanged]]:
            mid = memory_id if memory_id is not None else f"m{book.head + 1}"
            if book.get(mid) is not None:
                raise InvalidArgumentError(
                    f"memory {mid!r} already exists; change it with update or forget it first"
                )
            body = MemoryChanged(
                op="save",
                memory_id=mid,
                memory_type=memory_type,
                retention=retention,
                title=title,
                content=content,
                expires_seq=expires_seq,
                expires_time=expires_time,
                source_session=source_session,
                source_seqs=seqs,
                reason=reason,
            )
            pin = [MemoryChanged(op="pin", memory_id=mid)] if pinned else []
            return mid, [body, *pin]

        return self._change(build, time)

    def save_summary(
        self,
        agent_session: str,
        compaction_seq: int,
        *,
        ttl: int | None = SUMMARY_TTL,
        time: int | None = None,
    ) -> Changed:
        """Keep a committed compaction summary as a working memory.

        Parameters:
            agent_session: the session holding the ``CompactionCommitted`` event.
            compaction_seq: its seq.
            ttl: lifetime in microseconds from ``time`` (None: no expiry).
            time: the event time; defaults to the compaction event's recorded time.
                With neither, the memory gets no time-based expiry.

        Raises:
            InvalidEventError: the event is not a ``CompactionCommitted``.
            UnknownSessionError: no such event.
        """
        event = self.log.get(agent_session, compaction_seq)
        if not isinstance(event.body, CompactionCommitted):
            raise InvalidArgumentError(
                f"{agent_session}#{compaction_seq} is a {event.kind!r} event, not a compaction"
            )
        base = time if time is not None else event.time
        expires = base + ttl if base is not None and ttl is not None else None
        return self.save(
            "Previous session summary",
            event.body.summary,
            memory_type="project",
            retention="working",
            expires_time=expires,
            source_session=agent_session,
            source_seqs=(compaction_seq,),
            reason=SUMMARY_REASON,
            time=time,
        )

    def update(
        self,
        memory_id: str,
        *,
        title: str = "",
        content: str = "",
        memory_type: MemoryType | None = None,
        retention: Retention | None = None,
        expires_seq: int | None = None,
        expires_time: int | None = None,
        source_session: str = "",
        source_seqs: Sequence[int] = (),
        reason: str = "",
        time: int | None = None,
    ) -> Changed:
        """Change fields of a live memory (fields left at their default are kept).

        Parameters:
            memory_id: the live memory to change.
            title, content, memory_type, retention, expires_seq, expires_time,
                source_session, source_seqs: new values (see `save`); an empty
                string, None or ``()`` keeps the current value.
            reason: why (recorded in the event).
            time: the event time (microseconds).

        Returns:
            The id and where the ``update`` event landed.

        Raises:
            InvalidEventError: no live memory with that id, nothing to change,
                or a bad type or class.
        """
        if memory_type is not None and memory_type not in MEMORY_TYPES:
            raise InvalidArgumentError(
                f"memory_type must be one of {list(MEMORY_TYPES)}, found {memory_type!r}"
            )
        if retention is not None and retention not in RETENTIONS:
            raise InvalidArgumentError(
                f"retention must be one of {list(RETENTIONS)}, found {retention!r}"
            )
        body = MemoryChanged(
            op="update",
            memory_id=memory_id,
            memory_type=memory_type or "",
            retention=retention or "",
            title=title,
            content=content,
            expires_seq=expires_seq,
            expires_time=expires_time,
            source_session=source_session,
            source_seqs=tuple(source_seqs),
            reason=reason,
        )
        if body == MemoryChanged(op="update", memory_id=memory_id, reason=reason):
            raise InvalidArgumentError(
                f"update of memory {memory_id!r} changes nothing; give a field to change"
            )
        return self._op(body, time)

    def forget(self, memory_id: str, *, reason: str = "", time: int | None = None) -> Changed:
        """Forget a live memory (appends ``forget``; the log keeps its history).

        Parameters:
            memory_id: the live memory to forget.
            reason: why (recorded in the event; `Forgotten.reason` in the book).
            time: the event time (microseconds).

        Returns:
            The id and where the ``forget`` event landed.

        Raises:
            InvalidEventError: no live memory with that id.
        """
        return self._op(MemoryChanged(op="forget", memory_id=memory_id, reason=reason), time)

    def pin(self, memory_id: str, *, time: int | None = None) -> Changed:
        """Pin a live memory: never expired, never consolidated.

        Parameters:
            memory_id: the live memory to pin.
            time: the event time (microseconds).

        Returns:
            The id and where the ``pin`` event landed.

        Raises:
            InvalidEventError: no live memory with that id.
        """
        return self._op(MemoryChanged(op="pin", memory_id=memory_id), time)

    def unpin(self, memory_id: str, *, time: int | None = None) -> Changed:
        """Unpin a live memory.

        Parameters:
            memory_id: the live memory to unpin.
            time: the event time (microseconds).

        Returns:
            The id and where the ``unpin`` event landed.

        Raises:
            InvalidEventError: no live memory with that id.
        """
        return self._op(MemoryChanged(op="unpin", memory_id=memory_id), time)

    def _op(self, body: MemoryChanged, time: int | None) -> Changed:
        def build(book: MemoryBook) -> tuple[str, list[MemoryChanged]]:
            if book.get(body.memory_id) is None:
                raise InvalidArgumentError(
                    f"no live memory {body.memory_id!r} in session {self.memory_session!r}",
                    hint=Hint(
                        cli="list memories with `turnlog memories`",
                        python="list memories with `turnlog memories` "
                        "(Python: `MemoryManager.memories()`)",
                    ),
                )
            return body.memory_id, [body]

        return self._change(build, time)

    def _change(self, build: _Builder, time: int | None) -> Changed:
        """Validate against the current book and append, by `Log.update` (it redoes
        both when another writer moved the memory session's head)."""
        made: list[str] = []

        def decide(head: Head | None) -> list[Draft]:
            with self._lock:  # the book read after ``head``: at it or later
                mid, bodies = build(self.book())
            made[:] = [mid]
            return [Draft(body=b, time=time) for b in bodies]

        with otel_span("turnlog.memory", {"turnlog.session": self.memory_session}) as current:
            appended = self.log.update(self.memory_session, decide)
            assert appended is not None
            body = self.log.get(self.memory_session, appended.last_seq).body
            otel_attributes(
                current,
                {"turnlog.memory.id": made[0], "turnlog.memory.op": getattr(body, "op", "")},
            )
        return Changed(made[0], appended)

    def _forget_all(
        self,
        pick: _Picker,
        time: int | None,
    ) -> tuple[tuple[tuple[str, str], ...], Appended | None]:
        due: list[tuple[str, str]] = []

        def decide(head: Head | None) -> list[Draft]:
            with self._lock:
                due[:] = pick(self.book())
            return [
                Draft(body=MemoryChanged(op="forget", memory_id=mid, reason=why), time=time)
                for mid, why in due
            ]

        with otel_span(
            "turnlog.memory",
            {"turnlog.session": self.memory_session, "turnlog.memory.op": "forget"},
        ) as current:
            appended = self.log.update(self.memory_session, decide)
            otel_attributes(
                current, {"turnlog.memory.count": len(due) if appended is not None else 0}
            )
        return (tuple(due), appended) if appended is not None else ((), None)

    # -- consolidation -------------------------------------------------------------------
    def consolidate(
        self, *, now: int | None = None, policy: Policy | None = None, time: int | None = None
    ) -> Consolidated:
        """Forget expired memories and old summary memories, as events.

        Appends one ``forget`` per memory due (in one batch): reason
        ``expired`` for each expired memory, reason ``consolidation`` for each
        unpinned summary memory (see `Memory.is_summary`) older than the
        ``policy.memory_summary_keep`` most recent unpinned ones. Pinned
        memories are never touched.

        Parameters:
            now: current time in microseconds for time-based expiry (None: only
                position-based expiry is evaluated).
            policy: supplies ``memory_summary_keep`` (defaults when None).
            time: the event time of the ``forget`` events (defaults to ``now``).

        Returns:
            The memories forgotten with their reasons, and where the events landed.
        """
        check_policy(policy)
        keep = (policy or Policy()).memory_summary_keep

        def pick(book: MemoryBook) -> list[tuple[str, str]]:
            expired = book.expired(now=now)
            due = [(m.memory_id, "expired") for m in sorted(expired, key=lambda m: m.saved_pos)]
            gone = {m.memory_id for m in expired}
            summaries = sorted(
                (
                    m
                    for m in book.memories(now=now)
                    if m.is_summary and not m.pinned and m.memory_id not in gone
                ),
                key=lambda m: (-m.saved_pos, m.memory_id),
            )
            old = sorted(summaries[keep:], key=lambda m: m.saved_pos)
            due += [(m.memory_id, "consolidation") for m in old]
            return due

        forgotten, appended = self._forget_all(pick, now if time is None else time)
        return Consolidated(forgotten, appended)

    # -- agent sessions ------------------------------------------------------------------
    def _view(self, session: str) -> tuple[Projection | None, int]:
        """The agent session's projection (sections and rewinds), brought up to date,
        and the session's own head seq (`NEW_SESSION` when it does not exist)."""
        self._forget_erased()
        head = self.log.head(session)
        if head is None:
            self._views.pop(session, None)
            return None, NEW_SESSION
        cached = self._views.get(session)
        if cached is None or cached[1] > head.seq:
            view = Projection(_NoCount())
            view.extend(self.log.lineage(session, head.seq + 1))
        else:
            view, seen = cached
            if head.seq > seen:
                view.extend(self.log.read(session, seen + 1, head.seq + 1))
        self._views.pop(session, None)
        self._views[session] = (view, head.seq)  # most recently used last
        while len(self._views) > _CACHED_SESSIONS:
            del self._views[next(iter(self._views))]
        return view, head.seq

    def block_in_force(self, agent_session: str) -> str:
        """The memory block currently in force in an agent session.

        Parameters:
            agent_session: the session (it need not exist yet).

        Returns:
            The text of its ``memories`` section, ``""`` when none is in force.
        """
        with self._lock:
            view, _ = self._view(agent_session)
            if view is None:
                return ""
            found = view.sections.get(MEMORY_SECTION)
            return "" if found is None else found[0]

    def refresh(
        self, agent_session: str, *, policy: Policy, now: int | None = None, point: Point = "manual"
    ) -> Appended | None:
        """Put the current memory block into an agent session, if due.

        Appends ``SystemSectionSet(name="memories", text=block,
        position=MEMORY_SECTION_POSITION)`` to ``agent_session`` only when
        ``point`` is one of ``policy.memory_refresh`` and the rendered block
        differs from the block in force there (an empty block removes the
        section with ``text=""``; nothing is appended when there is none).

        Parameters:
            agent_session: the session whose prompts get the block.
            policy: the caps and the refresh points.
            now: current time in microseconds: time-based expiry and the event time.
            point: ``session_start``, ``compaction``, ``every_turn`` or ``manual``.

        Returns:
            Where the section event landed, or None when nothing was appended.

        Raises:
            InvalidEventError: an unknown point.
        """
        if point not in REFRESH_POINTS:
            raise InvalidArgumentError(
                f"refresh point must be one of {list(REFRESH_POINTS)}, found {point!r}"
            )
        if point not in policy.memory_refresh:
            return None

        def decide(head: Head | None) -> Draft | None:
            with self._lock:  # the view read after ``head``: at it or later
                block = self.render(policy, now=now)
                view, _ = self._view(agent_session)
            found = view.sections.get(MEMORY_SECTION) if view is not None else None
            if found is None:
                if not block:
                    return None
            elif found[0] == block and found[1] == MEMORY_SECTION_POSITION:
                return None
            return Draft(
                body=SystemSectionSet(
                    name=MEMORY_SECTION, text=block, position=MEMORY_SECTION_POSITION
                ),
                time=now,
            )

        with otel_span(
            "turnlog.memory",
            {
                "turnlog.session": agent_session,
                "turnlog.memory.op": "refresh",
                "turnlog.memory.point": point,
            },
        ) as current:
            appended = self.log.update(agent_session, decide)
            otel_attributes(current, {"turnlog.memory.changed": appended is not None})
        return appended

    def repair(self, agent_session: str, *, time: int | None = None) -> Repaired:
        """Forget memories derived from events a rewind took out of a session's view.

        A memory is due when its ``source_session`` is ``agent_session`` and
        one of its ``source_seqs`` is an event of that session that is out of
        the session's view (a ``SessionRewound`` covered it). One ``forget``
        event (reason ``source rewound``) per memory, in one batch. Repairs
        are forward-only: a later rewind that brings events back does not
        bring the memories back.

        Parameters:
            agent_session: the session that was rewound.
            time: the event time of the ``forget`` events.

        Returns:
            How many of the session's seqs are out of its view, the memories
            forgotten, and where the events landed.

        Raises:
            UnknownSessionError: no such session.
        """
        with self._lock:
            view, _ = self._view(agent_session)
            if view is None:
                raise UnknownSessionError(
                    f"no session {agent_session!r} to repair; list "
                    "sessions with `turnlog sessions` (Python: "
                    "`Log.sessions()`)"
                )
            rewound = frozenset(
                view.events[pos].seq
                for pos in view.rewound
                if view.events[pos].session == agent_session
            )

            def pick(book: MemoryBook) -> list[tuple[str, str]]:
                hit = [
                    m
                    for m in book.memories(include_expired=True)
                    if m.source_session == agent_session
                    and any(seq in rewound for seq in m.source_seqs)
                ]
                return [
                    (m.memory_id, "source rewound") for m in sorted(hit, key=lambda m: m.saved_pos)
                ]

            forgotten, appended = self._forget_all(pick, time)
        return Repaired(agent_session, len(rewound), tuple(mid for mid, _ in forgotten), appended)

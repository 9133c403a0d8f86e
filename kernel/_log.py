"""The log: append-only, hash-chained sessions over any `Store`.

Theory of operation
-------------------
``append`` is the only way in. It validates every event *before* touching
the store (types, ranges, UTF-8, sizes, structural rules), moves oversized
text to blobs, then in one write transaction:

1. resolves idempotency: if every event of the batch carries a key that is
   already stored, at consecutive positions and with identical content, the
   original positions are returned and nothing is written; if only some keys
   are known, or a known key holds different content, `IdempotencyError`;
2. checks optimistic concurrency: ``expected_seq`` (the seq of the head the
   caller last saw, -1 for "the session must not exist") must equal the
   head, else `AppendConflictError`;
3. assigns dense seqs, links each event to its predecessor's hash, writes
   events, blobs, keys and the new head.

Any failure aborts the transaction: a failed append leaves the store byte for
byte as it was. Nothing is ever rewritten or deleted; forks and rewinds are
events (``SessionForked`` is the first event of a fork, chained to the source
event's hash).
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from time import monotonic, sleep
from typing import Any

import blake3
import msgspec

from ._chain import (
    GENESIS,
    Checkpoint,
    chain_records,
    link,
    record_canonical,
    record_event,
    record_hash,
    records_events,
    sign_checkpoint,
)
from ._codec import (
    BLOB_FIELDS,
    MAX_BATCH_BYTES,
    MAX_KEY_BYTES,
    MAX_SESSION_BYTES,
    check_id_bytes,
    decode_event,
    encode_canonical,
    encode_event,
    extract_blobs,
    seq_offset,
    validate_body,
    validate_meta,
    validate_session_id,
    with_seq,
)
from ._erase import Erased, erase_txn
from ._errors import (
    SESSIONS_HINT,
    VERIFY_HINT,
    AppendConflictError,
    BlobNotFoundError,
    DecodeError,
    EventTooLargeError,
    Hint,
    HistoryMismatchError,
    IdempotencyError,
    InvalidArgumentError,
    InvalidEventError,
    StoreCorruptError,
    StoreUnavailableError,
    UnknownSessionError,
)
from ._events import (
    KINDS,
    BlobRef,
    Body,
    CompactionCommitted,
    CompactionPartSummarized,
    Event,
    EventsPinned,
    ImagePart,
    SessionForked,
    SessionRewound,
    UserMessageAdded,
)
from ._otel import set_attributes as otel_attributes
from ._otel import span as otel_span
from ._store import ReadTxn, Store, WriteTxn, hide_credentials
from ._tokens import forget_unsaved
from ._validation import (
    check_integer,
    check_number,
    check_text,
    check_type,
    invalid,
    refuse_unknown_options,
)
from ._verify import Problem, VerifyReport, fsck

__all__ = [
    "Appended",
    "Draft",
    "Head",
    "Log",
    "NEW_SESSION",
    "Problem",
    "Retries",
    "Snapshot",
    "VerifyReport",
    "backoff",
]

#: ``expected_seq`` meaning "the session must not exist yet".
NEW_SESSION = -1

_FOLLOW_CHUNK = 1000  # events read per snapshot while following
_FOLLOW_SLICE = 60.0  # seconds of one wait when following without a timeout
_FOLLOW_RETRY_MAX = 1.0  # the longest pause between reconnection attempts (seconds)
#: Seconds `Log.follow` waits out an unreachable store by default before raising.
FOLLOW_OUTAGE = 60.0


#: Tries of a conditional append (`Log.update`, `Retries`) before it gives up.
DEFAULT_ATTEMPTS = 8


def _delay(attempt: int, draw: Callable[[], float]) -> float:
    """Seconds to wait before try ``attempt`` (0, 1, 2...): none before the first,
    then a random time up to 1 ms, doubled per try, at most 50 ms."""
    return 0.0 if attempt <= 0 else draw() * min(0.05, 0.001 * 2 ** (attempt - 1))


def backoff(attempt: int) -> None:
    """Sleep before retry ``attempt`` (1, 2...) of an append that conflicted: a
    random time up to 1 ms, doubled per attempt (at most 50 ms), so writers that
    keep colliding spread out. Attempt 0 (the first try) does not sleep.
    `Retries` is the same schedule without the sleep."""
    if attempt > 0:
        sleep(_delay(attempt, random.random))


class Retries:
    """What to do between the tries of a conditional append, without doing it.

    "Read the head, decide, append with ``expected_seq``, retry on a conflict"
    is one rule with one implementation: this object holds its bookkeeping
    (the try count, the backoff schedule, the last conflict, the final error)
    and does no I/O, so a synchronous loop (`Log.update`) and an asynchronous
    one drive the same decisions and differ only in how they wait and read.
    An async caller (with an async store or the sync one in a thread)::

        retries = Retries(session, attempts=8)
        while True:
            delay = retries.next()          # the final AppendConflictError when spent
            if delay:
                await asyncio.sleep(delay)
            head = await read_head(session)
            events = decide(head)           # None or [] when nothing is to be appended
            if not events:
                return None
            try:
                return await append(session, events, expected_seq=retries.expect(head))
            except AppendConflictError as exc:
                retries.conflict(exc)

    An append whose idempotency keys are all stored returns the stored positions
    (``duplicate=True``) before ``expected_seq`` is checked, so a retried keyed
    write comes back as a duplicate however far the head has moved.

    Parameters:
        session: the session written to (named in the final error).
        attempts: tries in all, the first included (at least 1).
        draw: a random number in [0, 1) for the jitter of each wait.

    Raises:
        InvalidArgumentError: ``attempts`` is not an int >= 1.
    """

    __slots__ = ("_draw", "attempts", "expected", "last", "session", "tries")

    def __init__(
        self,
        session: str,
        *,
        attempts: int = DEFAULT_ATTEMPTS,
        draw: Callable[[], float] = random.random,
    ) -> None:
        check_integer(attempts, "attempts", min_value=1)
        self.session = session
        self.attempts = attempts
        self._draw = draw
        #: Tries started so far.
        self.tries = 0
        #: The head seq the latest try expected (`NEW_SESSION` before the first).
        self.expected = NEW_SESSION
        #: The latest conflict (None while there was none).
        self.last: AppendConflictError | None = None

    def next(self) -> float:
        """Start a try: returns the seconds to wait before it (0.0 for the first).

        Raises:
            AppendConflictError: every try conflicted; the error names the head seq
                the last try expected and the one it found.
        """
        if self.tries >= self.attempts:
            raise self.error()
        self.tries += 1
        return _delay(self.tries - 1, self._draw)

    def expect(self, head: Head | None) -> int:
        """The ``expected_seq`` of a try decided at ``head`` (remembered for the error)."""
        self.expected = head.seq if head is not None else NEW_SESSION
        return self.expected

    def conflict(self, exc: AppendConflictError) -> None:
        """Record that the current try conflicted (the next `next` decides what follows)."""
        self.last = exc

    def error(self) -> AppendConflictError:
        """The error a write that ran out of tries raises (nothing of it was written)."""
        last = self.last
        expected = last.expected if last is not None else self.expected
        actual = last.actual if last is not None else self.expected
        return AppendConflictError(
            f"session {self.session!r} kept moving: {self.tries} "
            f"attempt{'s' if self.tries != 1 else ''} conflicted with "
            f"other writers (the last expected the head at seq {expected} and found it at "
            f"{actual}); nothing was written. Retry later or with more attempts",
            session=self.session,
            expected=expected,
            actual=actual,
        )


class _Payload(msgspec.Struct, frozen=True):
    body: Body


class _DraftMeta(msgspec.StructMeta):
    """Turns msgspec's bare ``TypeError`` for the arguments of ``Draft(...)`` (the body
    left out, a second positional argument, an unknown option) into an
    `InvalidArgumentError` naming it and showing the call. Only a failed call pays for
    more than the one frame; decoding does not pass through here."""

    def __call__(cls, *args: Any, **fields: Any) -> Any:
        try:
            return super().__call__(*args, **fields)
        except TypeError:
            pass
        options = [name for name in cls.__struct_fields__ if name != "body"]
        usage = f"Draft(body, {', '.join(f'{name}=...' for name in options)})"
        for key in fields:
            if key not in cls.__struct_fields__:
                close = difflib.get_close_matches(key, options, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise InvalidArgumentError(
                    f"Draft() has no option {key!r}; {hint}its options are "
                    f"{', '.join(options)}: {usage}"
                )
        if len(args) > 1:
            raise InvalidArgumentError(
                f"Draft() takes 1 positional argument (body, the event to append), found "
                f"{len(args)}; give the options by name: {usage}"
            )
        if args and "body" in fields:
            raise InvalidArgumentError(
                f"Draft() got its body both by position and by name; give it once: {usage}"
            )
        if not args and "body" not in fields:
            raise InvalidArgumentError(
                "Draft() is missing its required argument 'body' (the event to append, "
                f"e.g. UserMessageAdded(text=...)); call it as {usage}"
            )
        return super().__call__(*args, **fields)  # any other TypeError, as it was


class Draft(_Payload, metaclass=_DraftMeta, frozen=True, kw_only=True):
    """An event to append, with its envelope options: ``Draft(body, time=..., key=...)``
    (the body by position or by name, the options by name).

    Pass bare payloads to `Log.append` when no option is needed.
    """

    time: int | None = None
    key: str | None = None
    causation: str | None = None
    meta: dict[str, Any] = {}


class Appended(msgspec.Struct, frozen=True):
    """Where a batch landed.

    Attributes:
        session: the session.
        first_seq: seq of the batch's first event.
        last_seq: seq of its last event (the new head).
        head_hash: hash of the last event.
        duplicate: True when this was a retry of a stored batch (nothing written).
    """

    session: str
    first_seq: int
    last_seq: int
    head_hash: bytes
    duplicate: bool = False


class Head(msgspec.Struct, frozen=True):
    """A session and its last event."""

    session: str
    seq: int
    hash: bytes


_LONG_SESSION = (
    "use a shorter id. A session stored under a longer id (possible before "
    "the limit) still reads and verifies; Log.fork continues it under a shorter one"
)


#: The largest seq (and time): the stores keep both as signed 64-bit integers.
_MAX_SEQ = 2**63 - 1


def _check_key(key: object) -> None:
    """A checkpoint key: None or non-empty bytes."""
    if key is not None and (not isinstance(key, bytes) or not key):
        invalid("the checkpoint key", "None or non-empty bytes", key, with_type=True)


def _is_seq(value: object) -> bool:
    """True for an int (not a bool) usable as a position: ``0 <= value < 2**63``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


# An event ready to be written: its validated payload, idempotency key, and
# canonical bytes as if at seq 0 (`with_seq` moves them to the real seq).
_Prepared = tuple[Body, "str | None", bytes]


class _Batch:
    """A validated batch: its events, the blobs to write, and whether any event has
    an idempotency key or must be checked against its position (most have neither)."""

    __slots__ = ("blobs", "events", "keyed", "positional")

    def __init__(
        self,
        events: list[_Prepared],
        blobs: list[tuple[str, bytes]],
        *,
        keyed: bool,
        positional: bool,
    ) -> None:
        self.events = events
        self.blobs = blobs
        self.keyed = keyed
        self.positional = positional


#: Session ids an append has checked are remembered (with their `seq_offset`) up to
#: this many per log, so that appending to a known session checks nothing again.
_KNOWN_SESSIONS = 4096

_PAYLOAD_TYPES = tuple(KINDS.values())
# Only `Log.erase` writes these kinds (the stub in place of an erased event and the
# erasure event that lists the stubs): an append of one is refused.
_ERASURE_KINDS = (KINDS["erasure"], KINDS["erased"])
_PAYLOAD_SET = frozenset(_PAYLOAD_TYPES) - frozenset(_ERASURE_KINDS)
# Kinds whose fields must be checked against the position they land at.
_POSITIONAL = frozenset(
    (SessionForked, SessionRewound, EventsPinned, CompactionCommitted, CompactionPartSummarized)
)
# What `append` takes as one event rather than a sequence of them.
_ONE_EVENT: tuple[type[Any], ...] = (Draft, *_PAYLOAD_TYPES)


def _where(session: str, index: int) -> str:
    return f"event {index} of the batch for {session!r}"


class Snapshot:
    """A consistent read view of the log; see `Log.snapshot`."""

    def __init__(self, txn: ReadTxn) -> None:
        self._txn = txn

    def head(self, session: str) -> Head | None:
        """The session's last event, or None if the session does not exist."""
        validate_session_id(session)
        found = self._txn.head(session)
        return None if found is None else Head(session, found[0], found[1])

    def sessions(self) -> list[Head]:
        """Every session with its head, ordered by session id."""
        return [Head(s, seq, h) for s, seq, h in self._txn.sessions()]

    def find_key(self, session: str, key: str) -> int | None:
        """The seq of the session's event stored under idempotency ``key`` (None if none)."""
        validate_session_id(session)
        check_text(key, "key")
        return self._txn.idempotency(session, key)

    def read(
        self,
        session: str,
        start: int = 0,
        stop: int | None = None,
        *,
        kinds: Iterable[str] | None = None,
    ) -> list[Event]:
        """Events of ``session`` with ``start <= seq < stop``, optionally of some kinds only.

        Raises:
            UnknownSessionError: the session does not exist.
            InvalidEventError: a bad range or an unknown kind.
        """
        if kinds is not None:
            return list(self.iter(session, start, stop, kinds=kinds))
        self._check_read(session, start, stop, None)
        try:
            # One comprehension over the records: no generator per event in between.
            return records_events(self._txn.records(session, start, stop))
        except DecodeError:
            # Read again, lazily, to name the first unreadable event.
            return list(self.iter(session, start, stop))

    def iter(
        self,
        session: str,
        start: int = 0,
        stop: int | None = None,
        *,
        kinds: Iterable[str] | None = None,
    ) -> Iterator[Event]:
        """Like `read`, lazily."""
        wanted = self._check_read(session, start, stop, kinds)
        for seq, record in self._txn.scan(session, start, stop):
            try:
                event = record_event(record)
            except DecodeError as exc:
                raise StoreCorruptError(
                    f"event {session}#{seq} is unreadable ({exc}); run "
                    f"`turnlog verify {session}` (Python: "
                    f"`Log.verify({session!r})`)"
                ) from exc
            if wanted is None or event.kind in wanted:
                yield event

    def _check_read(
        self, session: str, start: int, stop: int | None, kinds: Iterable[str] | None
    ) -> frozenset[str] | None:
        """Check the arguments of a read and that the session exists; the kinds wanted."""
        validate_session_id(session)
        check_integer(start, "start", min_value=0, max_value=_MAX_SEQ)
        check_integer(stop, "stop", min_value=0, max_value=_MAX_SEQ, optional=True)
        wanted: frozenset[str] | None = None
        if kinds is not None:
            try:
                wanted = None if isinstance(kinds, str) else frozenset(kinds)
            except TypeError:
                wanted = None
            if wanted is None or not all(isinstance(k, str) for k in wanted):
                invalid(
                    "kinds", "a collection of kind names such as ['user', 'tool_result']", kinds
                )
            unknown = wanted - KINDS.keys()
            if unknown:
                invalid("kinds", f"kind names out of {sorted(KINDS)}", sorted(unknown))
        if self._txn.head(session) is None:
            raise UnknownSessionError(f"no session {session!r} in this log", hint=SESSIONS_HINT)
        return wanted

    def get(self, session: str, seq: int) -> Event:
        """The event at ``(session, seq)``.

        Raises:
            UnknownSessionError: no such session or seq.
        """
        validate_session_id(session)
        check_integer(seq, "seq", min_value=0, max_value=_MAX_SEQ)
        record = self._txn.get(session, seq)
        if record is None:
            raise UnknownSessionError(
                f"no event {session}#{seq}",
                hint=Hint(
                    cli=f"see `turnlog log {session}`",
                    python=f"see `turnlog log {session}` (Python: `Log.read({session!r})`)",
                ),
            )
        try:
            return record_event(record)
        except DecodeError as exc:
            raise StoreCorruptError(f"event {session}#{seq} is unreadable ({exc})") from exc

    def lineage(self, session: str, stop: int | None = None) -> list[Event]:
        """The session's history including what it forked from, oldest first.

        For a fork, the source session's events up to the fork point come
        first (recursively), then the fork's own events (its ``SessionForked``
        included). ``stop`` bounds the fork's own seqs (exclusive).
        """
        own = self.read(session, 0, stop)
        if own and isinstance(own[0].body, SessionForked):
            fork = own[0].body
            return self.lineage(fork.from_session, fork.from_seq + 1) + own
        return own

    def blob(self, digest: str) -> bytes:
        """The blob with this hex hash.

        Raises:
            BlobNotFoundError: no such blob.
        """
        check_type(digest, str, "blob hash", what="a hex str or a BlobRef")
        data = self._txn.blob(digest.lower())
        if data is None:
            raise BlobNotFoundError(f"no blob {digest!r} in this log")
        return data

    def cached(self, namespace: str, key: bytes) -> bytes | None:
        """A value of the derived cache (token counts), if present."""
        return self._txn.cached(namespace, key)


def check_log(value: object, call: str) -> None:
    """``value`` is a `Log`, the first argument of ``call`` (``"Packer"``...); else an
    `InvalidArgumentError` saying what to pass (a path, a store or a session handed in
    where the log goes failed later with an ``AttributeError``)."""
    if isinstance(value, Log):
        return
    if isinstance(value, Store):
        hint = (
            f"a store is not a log: pass {call}(turnlog.Log(store)), or open the log "
            f"with {call}(turnlog.open(path))"
        )
    else:
        try:
            owner = isinstance(getattr(value, "log", None), Log)  # a Session, a Packer...
        except Exception:
            owner = False
        if owner:
            kind = type(value).__name__
            name = "session" if kind.endswith("Session") else kind.lower()
            hint = f"pass the log it works on: {call}({name}.log)"
        else:
            hint = f"open the log and pass it: {call}(turnlog.open(path))"
    invalid("log", "a turnlog Log", value, hint=hint, with_type=True)


class Log:
    """Append-only, hash-chained sessions of events. Open one with `turnlog.open`.

    Parameters:
        store: the backend.
        blob_threshold: text payloads above this many UTF-8 bytes are stored
            as blobs; the event keeps a ref and a head/tail preview.
        preview_chars: characters of head (and a quarter of that of tail)
            kept in a blob's preview.
        max_event_bytes: the largest canonical event accepted (after blob
            extraction).
    """

    @refuse_unknown_options("Log()", usage='turnlog.open("./agent-store") (or Log(store))')
    def __init__(
        self,
        store: Store,
        *,
        blob_threshold: int = 64 * 1024,
        preview_chars: int = 16 * 1024,
        max_event_bytes: int = 8 * 2**20,
    ) -> None:
        check_type(store, Store, "store", what="a turnlog Store")
        for name, value in (
            ("blob_threshold", blob_threshold),
            ("preview_chars", preview_chars),
            ("max_event_bytes", max_event_bytes),
        ):
            check_integer(value, name, min_value=1024)
        if preview_chars + preview_chars // 4 >= blob_threshold:
            invalid(
                "preview_chars",
                "small enough to leave the preview (preview_chars * 1.25) "
                f"below blob_threshold ({blob_threshold})",
                preview_chars,
            )
        self.store = store
        self.blob_threshold = blob_threshold
        self.preview_head = preview_chars
        self.preview_tail = preview_chars // 4
        self.max_event_bytes = max_event_bytes
        # Session ids appended to -> their seq_offset (see _KNOWN_SESSIONS).
        self._known: dict[str, int] = {}
        # Erasures this object made: the packers and replayers of this process compare
        # it with the count they last saw and drop their caches (which hold the text
        # of events read before) when it moved.
        self._erasures = 0

    # -- lifecycle ---------------------------------------------------------------
    def close(self) -> None:
        """Close the underlying store."""
        self.store.close()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<turnlog.Log {self.store.name} {hide_credentials(self.store.location)!r}>"

    # -- reading -----------------------------------------------------------------
    @contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """A consistent view: every read through it sees the same log state."""
        with self.store.read() as txn:
            yield Snapshot(txn)

    @contextmanager
    def _read_ahead(self, session: str, seq: int, start: int) -> Iterator[Snapshot]:
        """A snapshot for reads of ``session``'s head, its event ``seq`` and its events
        from ``start`` up to ``seq`` (see `Store.read_ahead`: a read of anything else
        may raise `ReadAheadMiss`)."""
        with self.store.read_ahead(session, seq, start) as txn:
            yield Snapshot(txn)

    def head(self, session: str) -> Head | None:
        """The session's last event (None if the session does not exist)."""
        validate_session_id(session)
        with self.snapshot() as snap:
            return snap.head(session)

    def sessions(self) -> list[Head]:
        """Every session with its head, ordered by session id."""
        with self.snapshot() as snap:
            return snap.sessions()

    def read(
        self,
        session: str,
        start: int = 0,
        stop: int | None = None,
        *,
        kinds: Iterable[str] | None = None,
    ) -> list[Event]:
        """Events of a session by range (``start <= seq < stop``) and kind.

        Tail a session by reading from the seq after the last one you saw.

        Raises:
            UnknownSessionError: the session does not exist.
        """
        with self.snapshot() as snap:
            return snap.read(session, start, stop, kinds=kinds)

    def get(self, session: str, seq: int) -> Event:
        """One event."""
        with self.snapshot() as snap:
            return snap.get(session, seq)

    def lineage(self, session: str, stop: int | None = None) -> list[Event]:
        """The session's history including the sessions it forked from."""
        with self.snapshot() as snap:
            return snap.lineage(session, stop)

    def blob(self, digest: str | BlobRef) -> bytes:
        """Read a blob back by hash or ref.

        Raises:
            BlobNotFoundError: no such blob.
        """
        if isinstance(digest, BlobRef):
            digest = digest.hash
        with self.snapshot() as snap:
            return snap.blob(digest)

    def follow(
        self,
        session: str,
        after_seq: int = NEW_SESSION,
        *,
        after_hash: bytes | str | None = None,
        timeout: float | None = None,
        limit: int | None = None,
        outage: float = FOLLOW_OUTAGE,
    ) -> Iterator[Event]:
        """Yield the session's events after ``after_seq`` as they are appended.

        Events already stored come first, then each new one as soon as the store
        reports it: PostgreSQL wakes the follower with LISTEN/NOTIFY, the embedded
        stores poll the head every 20 ms (`Store.listen`). A session that does not
        exist yet is waited for.

        A store that cannot be reached (a server restart, a failover, a dropped
        connection) is waited out: the follower reconnects, listens again and
        re-reads from the last event it yielded, so nothing is missed or
        repeated; only a store unreachable for ``outage`` seconds raises.

        Each event read must continue the last one yielded (its ``prev`` is that
        event's hash), and ``after_hash`` checks where a follow resumes: a store
        whose head is behind ``after_seq`` (a lagging replica, a store restored
        from a backup) is waited for when ``after_hash`` is given and refused
        without it, since the events that will fill the gap could not be told
        from the ones the caller saw. Nothing is ever skipped silently.

        Closing the generator (or its end) releases what it waits with (the
        PostgreSQL LISTEN connection).

        Parameters:
            session: the session to follow.
            after_seq: the last seq already seen (-1: from the start).
            after_hash: the hash of the event at ``after_seq`` (bytes or hex), checked
                against the store before anything is yielded.
            timeout: stop after this many seconds without a new event (None:
                follow until the caller stops iterating).
            limit: stop after this many events.
            outage: seconds the store may stay unreachable before
                `StoreUnavailableError` is raised (default 60).

        Raises:
            InvalidArgumentError: a bad session id, seq, hash, timeout, limit or outage.
            HistoryMismatchError: the store's head is behind ``after_seq`` and no
                ``after_hash`` was given, or the store holds another event there
                (or after the last event yielded).
            StoreUnavailableError: the store stayed unreachable for ``outage`` seconds.
        """
        validate_session_id(session)
        check_integer(after_seq, "after_seq", min_value=NEW_SESSION, max_value=_MAX_SEQ - 1)
        check_number(timeout, "timeout", min_value=0, optional=True)
        check_number(outage, "outage", min_value=0)
        check_integer(limit, "limit", min_value=1, max_value=_MAX_SEQ, optional=True)
        digest = None if after_hash is None else _hash_argument(after_hash)
        if digest is not None and after_seq < 0:
            raise InvalidArgumentError(
                "after_hash is the hash of the event at after_seq; give after_seq >= 0 with it"
            )
        return self._follow(session, after_seq, digest, timeout, limit, float(outage))

    def _follow(
        self,
        session: str,
        last: int,
        last_hash: bytes | None,
        timeout: float | None,
        limit: int | None,
        outage: float,
    ) -> Iterator[Event]:
        left = limit
        check = last_hash is not None  # the event at `last` must have `last_hash`
        idle_until = None if timeout is None else monotonic() + timeout
        down_since: float | None = None
        failures = 0
        with self.store.listen() as wait:
            while True:
                try:
                    events = self._follow_read(session, last, last_hash, check)
                    check = False
                    if not events:
                        span = (
                            _FOLLOW_SLICE
                            if idle_until is None
                            else max(0.0, idle_until - monotonic())
                        )
                        if not wait(session, last, span) and idle_until is not None:
                            return
                        down_since = None
                        continue
                except StoreUnavailableError:
                    # Waited out (module docstring of follow): reconnect and re-read from
                    # `last`; after it, the store may be another server, so check again.
                    now = monotonic()
                    down_since = now if down_since is None else down_since
                    if now - down_since >= outage:
                        raise
                    if idle_until is not None and now >= idle_until:
                        return
                    failures += 1
                    check = last_hash is not None
                    sleep(min(_FOLLOW_RETRY_MAX, 0.05 * 2 ** min(failures, 5)))
                    continue
                down_since = None
                failures = 0
                for event in events:
                    yield event
                    last, last_hash = event.seq, event.hash
                    if left is not None:
                        left -= 1
                        if left == 0:
                            return
                if idle_until is not None:
                    idle_until = monotonic() + (timeout or 0.0)

    def _follow_read(
        self, session: str, last: int, last_hash: bytes | None, check: bool
    ) -> list[Event]:
        """The next events after ``last`` (none when there are none yet, or while the
        store is behind ``last`` and ``last_hash`` can check what fills the gap)."""
        with self.snapshot() as snap:
            head = snap.head(session)
            head_seq = -1 if head is None else head.seq
            if head_seq < last:
                if last_hash is None:
                    raise HistoryMismatchError(
                        f"session {session!r} ends at seq {head_seq} in "
                        f"{hide_credentials(self.store.location) or self.store.name}, behind "
                        f"seq {last} that "
                        "follow resumes after: the store was restored from an older backup or "
                        "is a replica behind. Pass after_hash (the hash of the event at "
                        "after_seq) to wait for it and check the events that fill the gap, or "
                        "follow from an earlier seq",
                        session=session,
                        seq=last,
                        head=head_seq,
                    )
                return []
            if check and last_hash is not None and last >= 0:
                found = snap.get(session, last).hash
                if found != last_hash:
                    raise _diverged(self.store, session, last, head_seq, found, last_hash)
            if head_seq == last:
                return []
            events = snap.read(session, last + 1, min(head_seq + 1, last + 1 + _FOLLOW_CHUNK))
            if last_hash is not None and events and events[0].prev != last_hash:
                raise _diverged(self.store, session, last, head_seq, events[0].prev, last_hash)
            return events

    # -- writing -----------------------------------------------------------------
    def put_blob(self, data: bytes, media_type: str = "application/octet-stream") -> BlobRef:
        """Store bytes (e.g. an image) and return a ref to put in an event."""
        check_type(data, (bytes, bytearray, memoryview), "blob data", what="bytes")
        data = bytes(data)
        if len(data) > MAX_BATCH_BYTES:
            raise EventTooLargeError(
                f"a blob holds at most {MAX_BATCH_BYTES} bytes on every "
                f"backend, found {len(data)}; split the data"
            )
        ref = BlobRef(hash=blake3.blake3(data).hexdigest(), size=len(data), media_type=media_type)
        validate_body(
            UserMessageAdded(text="", images=(ImagePart(media_type="x", blob=ref),)),
            where="blob ref",
        )
        self.store.write(lambda txn: txn.put_blob(ref.hash, data))
        return ref

    def append(
        self,
        session: str,
        events: Sequence[Body | Draft] | Body | Draft,
        *,
        expected_seq: int | None = None,
    ) -> Appended:
        """Append one event or a batch atomically.

        Parameters:
            session: the session id (created by its first append).
            events: payloads, or `Draft`s carrying envelope options.
            expected_seq: the head seq the caller expects (`NEW_SESSION` = -1
                for a session that must not exist yet); None skips the check.

        Returns:
            `Appended` with the positions (the original ones for a retry).

        Raises:
            InvalidEventError: a malformed event (the message names it).
            AppendConflictError: the head is not at ``expected_seq``.
            IdempotencyError: the batch reuses keys inconsistently.
            StoreError: the store failed. In every case nothing was written.
        """
        offset = self._session_offset(session)
        check_integer(
            expected_seq, "expected_seq", min_value=NEW_SESSION, max_value=_MAX_SEQ, optional=True
        )
        batch = self._prepare(session, events)
        return self.store.write(
            lambda txn: self._append_txn(txn, session, offset, batch, expected_seq)
        )

    def validate(self, session: str, events: Sequence[Body | Draft] | Body | Draft) -> int:
        """Check a batch exactly as `append` would, without writing anything.

        Returns:
            How many blobs appending it would store (large text moved out of events).

        Raises:
            InvalidEventError: what `append` would raise for the batch itself (the
                session's state, idempotency keys and ``expected_seq`` are not checked).
        """
        self._session_offset(session)
        return len(self._prepare(session, events).blobs)

    def _session_offset(self, session: str) -> int:
        """Check a session id an append names (once per log: see `_KNOWN_SESSIONS`) and
        return its `seq_offset`.

        Raises:
            InvalidEventError: the id is not a valid session id, or is too long.
        """
        known = self._known
        offset = known.get(session) if type(session) is str else None
        if offset is None:
            validate_session_id(session)
            check_id_bytes("session id", session, MAX_SESSION_BYTES, _LONG_SESSION)
            offset = seq_offset(session)
            if type(session) is str:
                if len(known) >= _KNOWN_SESSIONS:
                    known.clear()
                known[session] = offset
        return offset

    def update(
        self,
        session: str,
        decide: Callable[[Head | None], Sequence[Body | Draft] | Body | Draft | None],
        *,
        attempts: int = DEFAULT_ATTEMPTS,
    ) -> Appended | None:
        """Append what ``decide`` makes of the session's head, atomically with respect to
        that head: read the head, decide, append with ``expected_seq``, and when another
        writer appended in between, wait (`Retries`) and do it all again.

        ``decide(head)`` gets the session's head (None for a session that does not
        exist yet) and returns the events to append, or None (or nothing) when there is
        nothing to append. Whatever it reads besides (the events, a projection) it must
        read after it was called: that state is then at ``head`` or later, and the
        append lands only if nothing came after ``head``, so the events were decided
        on exactly what precedes them. ``decide`` may raise (a precondition that no
        longer holds): the error goes to the caller and nothing is written. It runs
        once per try, so it must not write.

        An append whose idempotency keys are all stored is a retry of a write that
        landed: its stored positions come back (``duplicate=True``) whatever the head.
        A ``decide`` whose precondition the first write used up (a tool call it
        answered) checks `find_key` first and, when the key is stored, returns the
        same events without the check. An append that needs no precondition has
        nothing to conflict with: call `append` without ``expected_seq`` instead.

        Parameters:
            session: the session written to.
            decide: the events for a head (see above).
            attempts: tries in all before the final `AppendConflictError`.

        Returns:
            Where the events landed, or None when ``decide`` returned nothing.

        Raises:
            AppendConflictError: every try conflicted; ``actual`` is the head the last
                one found. Nothing was written.
            Whatever ``append`` and ``decide`` raise (nothing was written).
        """
        self._session_offset(session)
        if not callable(decide):
            invalid("decide", "callable (a function of the head)", decide, with_type=True)
        retries = Retries(session, attempts=attempts)
        while True:
            delay = retries.next()
            if delay:
                sleep(delay)
            head = self.head(session)
            events = decide(head)
            if events is None or (isinstance(events, Sequence) and not events):
                return None
            try:
                return self.append(session, events, expected_seq=retries.expect(head))
            except AppendConflictError as exc:
                retries.conflict(exc)

    def find_key(self, session: str, key: str) -> int | None:
        """The seq of the session's event stored under idempotency ``key`` (None if none)."""
        with self.snapshot() as snap:
            return snap.find_key(session, key)

    def fork(
        self,
        source: str,
        at_seq: int,
        new_session: str,
        *,
        time: int | None = None,
        key: str | None = None,
    ) -> Appended:
        """Start ``new_session`` as a continuation of ``source`` after event ``at_seq``.

        Raises:
            UnknownSessionError: no such source event.
            AppendConflictError: ``new_session`` exists already.
        """
        validate_session_id(source)
        event = self.get(source, at_seq)
        body = SessionForked(from_session=source, from_seq=at_seq, from_hash=event.hash.hex())
        return self.append(
            new_session, [Draft(body=body, time=time, key=key)], expected_seq=NEW_SESSION
        )

    def _prepare(self, session: str, events: Sequence[Body | Draft] | Body | Draft) -> _Batch:
        """Validate a batch and encode it: the prepared events and the blobs to write."""
        if isinstance(events, _ONE_EVENT):
            events = [events]
        elif not isinstance(events, Sequence) or isinstance(events, (str, bytes)):
            invalid(
                "events",
                "a payload, a Draft or a sequence of them",
                events,
                with_type=True,
                error=InvalidEventError,
            )
        if not events:
            raise InvalidEventError("an append needs at least one event")
        if len(events) > 100_000:
            raise InvalidEventError(f"a batch holds at most 100000 events, found {len(events)}")
        prepared: list[_Prepared] = []
        blobs: list[tuple[str, bytes]] = []
        keys: set[str] = set()
        size = 0  # bytes of the records (and below, of the blobs)
        no_meta: dict[str, Any] = {}
        positional = False
        # Text shorter than a quarter of the threshold in characters is shorter than
        # the threshold in UTF-8 bytes: only longer text goes to `extract_blobs`.
        quarter, blob_fields = self.blob_threshold // 4, BLOB_FIELDS
        for i, item in enumerate(events):
            # The schema checks types and ranges of the whole event in `encode_event`;
            # only on failure do the field-by-field checks run, to name the field (and
            # messages name the event only then: building them is not free).
            if isinstance(item, Draft):
                body: Any = item.body
                time, key, causation, meta = item.time, item.key, item.causation, item.meta
                if key == "" or causation == "" or type(meta) is not dict or meta:
                    self._check_envelope(item, session, i)  # what the schema cannot say
            else:
                body, time, key, causation, meta = item, None, None, None, no_meta
            if type(body) not in _PAYLOAD_SET:
                if not isinstance(body, _PAYLOAD_TYPES):
                    validate_body(body, where=_where(session, i))  # raises, naming the kinds
                if isinstance(body, _ERASURE_KINDS):
                    raise InvalidEventError(
                        f"{_where(session, i)}: {type(body).__name__} is "
                        "written only by an erasure; call Log.erase("
                        "session, seqs, reason=...) instead"
                    )
            try:
                event, data = encode_event(
                    Event(
                        session=session,
                        seq=0,
                        body=body,
                        time=time,
                        key=key,
                        causation=causation,
                        meta=meta,
                    )
                )
            except InvalidEventError as exc:
                where = _where(session, i)
                if isinstance(item, Draft):
                    self._check_envelope(item, session, i)
                validate_body(body, where=where)  # names the offending payload field
                raise InvalidEventError(f"{where}: {exc}") from exc.__cause__
            if key is not None:
                if len(key) * 4 > MAX_KEY_BYTES:
                    check_id_bytes(
                        f"{_where(session, i)}: the idempotency key",
                        key,
                        MAX_KEY_BYTES,
                        "use a shorter key (e.g. a hash of this one)",
                    )
                if key in keys:
                    raise InvalidEventError(
                        f"{_where(session, i)}: idempotency key {key!r} appears twice in the batch"
                    )
                if "\x00" in key:
                    raise InvalidEventError(
                        f"{_where(session, i)}: idempotency key {key!r} holds a NUL "
                        "character, which no backend takes (PostgreSQL text cannot hold it); "
                        "use a key without NUL"
                    )
                keys.add(key)
            # The decoded payload is of a kind exactly, never a subclass.
            body = event.body
            kind = type(body)
            field = blob_fields[kind]
            if field and len(getattr(body, field)) > quarter:
                body, found = extract_blobs(
                    body,
                    threshold=self.blob_threshold,
                    preview_head=self.preview_head,
                    preview_tail=self.preview_tail,
                )
                if found:
                    blobs.extend(found)
                    data = encode_canonical(msgspec.structs.replace(event, body=body))
            if kind in _POSITIONAL:
                positional = True
                if i != 0 and kind is SessionForked:
                    raise InvalidEventError(
                        f"{_where(session, i)}: SessionForked can only "
                        "start a session; use Log.fork"
                    )
            if len(data) > self.max_event_bytes:
                raise EventTooLargeError(
                    f"{_where(session, i)} is {len(data)} bytes after moving large text to "
                    f"blobs; the limit is {self.max_event_bytes}. Put bulky data in a blob "
                    "(Log.put_blob) or split it"
                )
            prepared.append((body, key, data))
            size += len(data)
        if blobs:
            size += sum(len(blob) for _, blob in blobs)
        if size > MAX_BATCH_BYTES:
            raise EventTooLargeError(
                f"a batch stores at most {MAX_BATCH_BYTES} bytes on every backend (its "
                f"events and the blobs it moves out of them), found {size} in "
                f"{len(prepared)} events for {session!r}; split it into smaller appends"
            )
        return _Batch(prepared, blobs, keyed=bool(keys), positional=positional)

    def _check_envelope(self, draft: Draft, session: str, index: int) -> None:
        time = draft.time
        if time is not None and not (type(time) is int and -(2**63) <= time < 2**63):
            check_integer(
                time,
                f"{_where(session, index)}: time",
                min_value=-(2**63),
                max_value=_MAX_SEQ,
                hint="microseconds since the epoch, or None",
                error=InvalidEventError,
            )
        for name, value in (("key", draft.key), ("causation", draft.causation)):
            if value is None:
                continue
            check_text(
                value, f"{_where(session, index)}: {name}", max_chars=256, error=InvalidEventError
            )
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                raise InvalidEventError(
                    f"{_where(session, index)}: {name} is not valid UTF-8"
                ) from exc
        if type(draft.meta) is not dict or draft.meta:
            validate_meta(draft.meta, where=_where(session, index), max_bytes=self.max_event_bytes)

    def _append_txn(
        self, txn: WriteTxn, session: str, offset: int, batch: _Batch, expected_seq: int | None
    ) -> Appended:
        head = txn.head(session)
        head_seq = head[0] if head is not None else NEW_SESSION
        events = batch.events
        if batch.keyed:
            retry = self._idempotent_retry(txn, session, events, offset)
            if retry is not None:
                return retry
        if expected_seq is not None and expected_seq != head_seq:
            raise AppendConflictError(
                f"session {session!r} head is at seq {head_seq}, the append expected "
                f"{expected_seq}; re-read the session from seq {expected_seq + 1}, then retry "
                f"with expected_seq={head_seq}",
                session=session,
                expected=expected_seq,
                actual=head_seq,
            )
        prev = head[1] if head is not None else GENESIS
        first = head_seq + 1
        if batch.positional:
            base: int | None = None  # lineage position of this session's seq 0
            for seq, (body, _, _) in enumerate(events, first):
                if type(body) not in _POSITIONAL:
                    continue
                if isinstance(body, SessionForked):
                    if seq != 0:
                        raise InvalidEventError(
                            f"SessionForked must be the first event of a "
                            f"session; {session!r} already has events"
                        )
                    prev = self._fork_source(txn, body)
                if base is None:
                    base = self._lineage_base(txn, session, events[0][0] if first == 0 else None)
                self._check_references(body, session, seq, base + seq)
        records, prev = chain_records(prev, [data for _, _, data in events], offset, first)
        if batch.keyed:
            for seq, (_, key, _) in enumerate(events, first):
                if key is not None:
                    txn.put_idempotency(session, key, seq)
        txn.put_events(session, first, records)
        for digest_hex, blob in batch.blobs:
            if txn.blob(digest_hex) is None:
                txn.put_blob(digest_hex, blob)
        last = first + len(records) - 1
        txn.set_head(session, last, prev)
        return Appended(session, first, last, prev)

    @staticmethod
    def _fork_source(txn: ReadTxn, body: SessionForked) -> bytes:
        record = txn.get(body.from_session, body.from_seq)
        if record is None:
            raise UnknownSessionError(f"cannot fork: no event {body.from_session}#{body.from_seq}")
        source = record_event(record)
        if source.hash.hex() != body.from_hash:
            raise InvalidEventError(
                f"cannot fork: {body.from_session}#{body.from_seq} has hash "
                f"{source.hash.hex()[:16]}, the fork names "
                f"{body.from_hash[:16]}"
            )
        return source.hash

    @staticmethod
    def _lineage_base(txn: ReadTxn, session: str, first: Body | None) -> int:
        """Lineage position of the session's seq 0: 0, or for a fork the length of
        the history it continues (``first`` is seq 0's payload when it is in the
        batch being appended)."""
        base = 0
        body: Body | None = first
        if body is None:
            record = txn.get(session, 0)
            body = record_event(record).body if record is not None else None
        for _ in range(10_000):  # forks of forks; a cycle cannot be stored
            if not isinstance(body, SessionForked):
                return base
            base += body.from_seq + 1
            record = txn.get(body.from_session, 0)
            body = record_event(record).body if record is not None else None
        raise StoreCorruptError(f"the fork chain of {session!r} does not end", hint=VERIFY_HINT)

    @staticmethod
    def _check_references(body: Body, session: str, seq: int, pos: int) -> None:
        # Rewinds, pins and compactions name lineage positions, which equal
        # seqs except in a fork (where the forked-from history comes first).
        if isinstance(body, SessionRewound) and not -1 <= body.to_seq < pos:
            raise InvalidEventError(
                f"SessionRewound.to_seq must be between -1 and {pos - 1} "
                f"(positions before the rewind itself), found {body.to_seq}"
            )
        if isinstance(body, EventsPinned) and any(s >= pos for s in body.seqs):
            raise InvalidEventError(
                f"EventsPinned may only pin earlier events (position < "
                f"{pos}), found {sorted(s for s in body.seqs if s >= pos)}"
            )
        if isinstance(body, CompactionCommitted):
            if body.first_seq > body.last_seq:
                raise InvalidEventError(
                    f"compaction covers first_seq {body.first_seq} > last_seq {body.last_seq}"
                )
            if body.last_seq >= pos:
                raise InvalidEventError(
                    f"compaction at {session}#{seq} (position {pos}) covers "
                    f"position {body.last_seq}, which is not earlier than "
                    "itself"
                )
        if isinstance(body, CompactionPartSummarized):
            if (body.first_seq, body.first_offset) > (body.last_seq, body.last_offset):
                raise InvalidEventError(
                    f"part summary starts at position {body.first_seq} character "
                    f"{body.first_offset}, after where it ends (position {body.last_seq} "
                    f"character {body.last_offset})"
                )
            if body.last_seq >= pos:
                raise InvalidEventError(
                    f"part summary at {session}#{seq} (position {pos}) "
                    f"covers position {body.last_seq}, which is not earlier "
                    "than itself"
                )
            if body.part > body.parts:
                raise InvalidEventError(
                    f"part summary is part {body.part} of {body.parts}; part must be at most parts"
                )

    def _idempotent_retry(
        self, txn: ReadTxn, session: str, batch: list[_Prepared], offset: int
    ) -> Appended | None:
        found = [txn.idempotency(session, key) if key is not None else None for _, key, _ in batch]
        known = sum(f is not None for f in found)
        if known == 0:
            return None
        if known != len(batch):
            raise IdempotencyError(
                f"{known} of the {len(batch)} events of this batch for {session!r} have "
                "idempotency keys that are already stored and the others do not; a retried "
                "batch must repeat every event with the same keys. Nothing was written"
            )
        first = found[0]
        assert first is not None
        if found != list(range(first, first + len(batch))):
            raise IdempotencyError(
                f"the keys of this batch are stored at seqs {found} of {session!r}, not as one "
                "batch; do not mix keys of different batches. Nothing was written"
            )
        digest = b""
        for (_, key, data), seq in zip(batch, found, strict=True):
            assert seq is not None
            record = txn.get(session, seq)
            if record is None:
                raise StoreCorruptError(
                    f"idempotency key {key!r} points at missing "
                    f"event {session}#{seq}; run `turnlog verify` (Python: "
                    "`Log.verify()`)"
                )
            # Same content iff same canonical bytes at that seq, but for the time: a
            # retry stamped later (a clock) is the same write. The stored event, its
            # time and its hash stay as they are.
            ours, stored = with_seq(data, offset, seq), record_canonical(record)
            # An erased event keeps the original's hash: a retry of the original (a
            # transcript imported again) is the same write, and its content stays erased.
            if (
                ours != stored
                and not _same_but_time(ours, stored)
                and link(bytes(record[:32]), ours) != record_hash(record)
            ):
                raise IdempotencyError(
                    f"idempotency key {key!r} was used at {session}#{seq} for different "
                    "content; use a new key for a new event. Nothing was written"
                )
            digest = record_hash(record)
        return Appended(session, first, first + len(batch) - 1, digest, duplicate=True)

    # -- erasure ---------------------------------------------------------------------
    def erase(
        self,
        session: str,
        seqs: Iterable[int] | None = None,
        *,
        reason: str,
        time: int | None = None,
        scrub: bool = True,
    ) -> Erased:
        """Erase the content of events (every event of the session when ``seqs`` is
        None), keeping the chain verifiable; see docs/erasure.md.

        Each erased event keeps its position and stored hash; its content is
        replaced by an `EventErased` stub, and a `ContentErased` event appended in
        the same transaction lists the erased seqs with their hashes, the blobs
        deleted with them (those no other event refers to) and ``reason``. A
        compaction whose range covers an erased event is erased with it. Then the
        store is scrubbed (`Store.scrub`): no copy of the erased bytes is left in its
        files. Erasing erased events again appends nothing (and scrubs again: a rerun
        completes an erasure that was killed before its scrub).

        Parameters:
            session: the session.
            seqs: the events to erase; None for all that hold content (the
                session's erasure events, a fork's first event, policies, rewinds
                and pins are kept).
            reason: why (caller data, stored in the erasure event).
            time: the erasure event's time (caller data, microseconds since the
                epoch), like every event's.
            scrub: scrub the store's files afterwards (leave False only to erase
                several sessions and call ``store.scrub()`` once).

        Returns:
            `Erased`: the erasure event's seq (None when nothing was left to
            erase), the seqs and blobs erased.

        Raises:
            UnknownSessionError: no such session (nothing was done).
            UnknownEventError: a seq past the session's head (nothing was done).
            InvalidArgumentError: a malformed argument, or a seq naming an event
                that is never erased (an erasure event, a fork's first event).
            StoreError: the store cannot erase or scrub (a scrub refused because
                another process has an LMDB store open leaves the erasure
                committed; run it again once the store is closed there).
        """
        validate_session_id(session)
        check_text(reason, "reason")
        check_integer(time, "time", min_value=-(2**63), max_value=2**63 - 1, optional=True)
        wanted: list[int] | None = None
        if seqs is not None:
            if isinstance(seqs, (str, bytes)) or not isinstance(seqs, Iterable):
                invalid("seqs", "an iterable of seqs or None", seqs, with_type=True)
            wanted = list(seqs)
            for seq in wanted:
                check_integer(seq, "seq", min_value=0, max_value=_MAX_SEQ)
        # The span carries counts and seqs only: never the reason (it may name the
        # data subject) nor anything of the erased content.
        with otel_span(
            "turnlog.erasure", {"turnlog.session": session, "turnlog.erasure.scrub": scrub}
        ) as current:
            result = self.store.write(lambda txn: erase_txn(txn, session, wanted, reason, time))
            otel_attributes(
                current,
                {
                    "turnlog.erasure.seq": -1 if result.seq is None else result.seq,
                    "turnlog.erasure.events": len(result.seqs),
                    "turnlog.erasure.blobs": len(result.blobs),
                    "turnlog.erasure.already": len(result.already),
                },
            )
            if result.seq is not None:
                self._erasures += 1
                forget_unsaved()  # counts of erased text never to be saved
            if scrub:
                self.store.scrub()
        return result

    def erase_older_than(
        self,
        cutoff: int,
        *,
        reason: str,
        sessions: Iterable[str] | None = None,
        time: int | None = None,
    ) -> list[Erased]:
        """Retention: erase every event whose ``time`` is below ``cutoff`` (microseconds
        since the Unix epoch, UTC). Event times are caller data: the cutoff is compared
        with the times the events were appended with, never with a clock of turnlog's;
        events appended without a time are kept. Each session is erased in a
        transaction of its own (a kill in between leaves the sessions done erased; a
        rerun does the rest), then the store is scrubbed once.

        Parameters:
            cutoff: erase events with ``time < cutoff``.
            reason: stored in each erasure event.
            sessions: the sessions to apply it to (all when None).
            time: the erasure events' time.

        Returns:
            One `Erased` per session where something was erased.
        """
        check_integer(cutoff, "cutoff", min_value=-(2**63), max_value=2**63 - 1)
        check_text(reason, "reason")
        names = [h.session for h in self.sessions()] if sessions is None else list(sessions)
        done: list[Erased] = []
        for name in names:
            with self.snapshot() as snap:
                old = [
                    e.seq
                    for e in snap.iter(name)
                    if e.time is not None
                    and e.time < cutoff
                    and not isinstance(e.body, (*_ERASURE_KINDS, SessionForked))
                ]
            if old:
                result = self.erase(name, old, reason=reason, time=time, scrub=False)
                if result.seq is not None:
                    done.append(result)
        self.store.scrub()
        return done

    # -- integrity -----------------------------------------------------------------
    def verify(
        self,
        session: str | None = None,
        *,
        checkpoint: Checkpoint | None = None,
        key: bytes | None = None,
        strict: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> VerifyReport:
        """Check the hash chain of one session (or all), every referenced blob,
        and optionally that the log extends a checkpoint.

        A fork is checked with its lineage: the events of the session it was
        forked from up to the fork point (recursively for a fork of a fork),
        which its prompts hold and its hashes chain to.

        Every record's position, link and hash are checked from its bytes; the
        records that reference blobs (and each session's first) are decoded to
        find them. Any changed byte breaks the chain, so this finds any damage
        or edit that did not recompute every hash after it. ``strict`` also
        decodes every record against the schema and proves it canonical
        (re-encoding gives back its bytes): bytes that hash right but are not
        what turnlog writes. The events are streamed: memory does not grow with
        the store.

        Parameters:
            strict: also prove every record decodes and is canonical (slower).
            progress: called with the number of events checked so far, every
                10,000 events and once at the end.

        The checks themselves are ``_verify.fsck``, over one read snapshot.

        Returns a `VerifyReport` naming the first bad event; never raises for
        a damaged store (a store that cannot be read at all raises
        `StoreCorruptError`).

        Raises:
            VerificationError: a signed checkpoint whose MAC does not match.
        """
        check_type(strict, bool, "strict")
        if progress is not None and not callable(progress):
            invalid("progress", "callable or None", progress, with_type=True)
        _check_key(key)
        if checkpoint is not None:
            if (
                not isinstance(checkpoint, Checkpoint)
                or not _is_seq(checkpoint.seq)
                or not isinstance(checkpoint.hash, str)
                or len(checkpoint.hash) != 64
                or not isinstance(checkpoint.mac, str)
            ):
                invalid(
                    "checkpoint",
                    "a Checkpoint (as returned by Log.checkpoint) with an int "
                    "seq and a 64-digit hex hash",
                    checkpoint,
                    with_type=True,
                )
            validate_session_id(checkpoint.session)
            checkpoint.check_mac(key)
            session = checkpoint.session if session is None else session
            if session != checkpoint.session:
                raise InvalidArgumentError(
                    f"the checkpoint is for session {checkpoint.session!r}, not {session!r}"
                )
        if session is not None:
            validate_session_id(session)
        return fsck(self.store, session, checkpoint=checkpoint, strict=strict, progress=progress)

    def checkpoint(self, session: str, *, key: bytes | None = None) -> Checkpoint:
        """A record of the session's current head to keep outside the log.

        Parameters:
            key: sign it with HMAC-SHA256 under this key.
        """
        head = self.head(session)
        if head is None:
            raise UnknownSessionError(f"no session {session!r} to checkpoint", hint=SESSIONS_HINT)
        cp = Checkpoint(session=session, seq=head.seq, hash=head.hash.hex())
        if key is not None:
            _check_key(key)
            cp = sign_checkpoint(cp, key)
        return cp


def _same_but_time(ours: bytes, stored: bytes) -> bool:
    """True when two canonical events differ in their ``time`` only."""
    try:
        theirs = decode_event(stored)
    except DecodeError:
        return False  # not ours to judge here: verify names a damaged record
    return encode_canonical(msgspec.structs.replace(decode_event(ours), time=theirs.time)) == stored


def _hash_argument(value: object) -> bytes:
    """An event hash given as 32 bytes or 64 hex digits."""
    if isinstance(value, str):
        try:
            digest = bytes.fromhex(value)
        except ValueError:
            digest = b""
    elif isinstance(value, (bytes, bytearray)):
        digest = bytes(value)
    else:
        digest = b""
    if len(digest) != 32:
        raise InvalidArgumentError(
            f"after_hash must be an event hash (32 bytes or 64 hex digits), found {value!r:.80}"
        )
    return digest


def _diverged(
    store: Store, session: str, seq: int, head: int, found: bytes, expected: bytes
) -> HistoryMismatchError:
    return HistoryMismatchError(
        f"{session}#{seq} in {hide_credentials(store.location) or store.name} has hash "
        f"{found.hex()[:16]}, "
        f"not {expected.hex()[:16]} as the follower saw: the store holds another history "
        "(restored from an older backup and written since, or another server). Nothing was "
        "skipped; run `turnlog verify` on it and re-read the session from an earlier seq",
        session=session,
        seq=seq,
        head=head,
    )

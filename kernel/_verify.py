"""Verify: an fsck of the log over one read snapshot of a store.

Theory of operation
-------------------
`fsck` checks what `Log.verify` promises, reading one `ReadTxn` and writing
nothing. Under the events it first asks the store whether its files are sound
(`Store.check_structure`: what the store's library would crash on rather than
report). Then, session by session, every record's position, prev link and hash
are checked from its bytes (``_chain.link_checker``, with ``check_record`` naming
what is wrong on any doubt); the records that may reference blobs (and each
session's first) are decoded to find their refs, and every referenced blob is
read back and hashed once. ``strict`` decodes every record against the schema
and proves it canonical. A fork is checked with its lineage: the source
sessions up to the fork point, recursively, since its prompts hold those events
and its hashes chain to them. A verify of the whole log also hashes the blobs no
event references, and reports damaged persisted token counts as warnings
(derived data, rebuilt where it is read, so it never fails the verify).

The first problem found ends the check and is reported with its position; a
damaged store is an answer (`VerifyReport` with ``ok`` False), never an
exception. The records are streamed: memory does not grow with the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import blake3
import msgspec

from ._canonical import normalize
from ._chain import GENESIS, Checkpoint, check_record, link_checker, record_event, record_hash
from ._codec import decode_event, encode_canonical, may_hold_blob_refs, position_prefix
from ._errors import DecodeError, UnknownSessionError
from ._events import (
    KINDS,
    BlobRef,
    Body,
    ContentErased,
    Event,
    EventErased,
    ImagePart,
    SessionForked,
)
from ._store import ReadTxn, Store
from ._tokens import CACHE_NAMESPACE as COUNTS_NAMESPACE
from ._tokens import check_count_cache

__all__ = ["Problem", "VerifyReport"]


class _Key(msgspec.Struct):
    """An event's key alone: decoding skips the rest of the event."""

    key: str | None = None


_KEY_DECODER = msgspec.msgpack.Decoder(_Key)
_KEY_FIELD = msgspec.msgpack.encode("key")  # a record without these bytes has no key
_KEY_BATCH = 512  # keys looked up in the index at once
_REINDEX = (
    "a retry with that key would be taken for a new event, or another event for "
    "a duplicate. Restore the store from a backup, or copy it (`turnlog copy`) into a "
    "new store, which rebuilds the index from the events"
)

_ERASED_TAG = msgspec.msgpack.encode("erased")  # in every stub's bytes
_ERASURE_TAG = msgspec.msgpack.encode("erasure")  # in every erasure event's bytes


def _stub_body(record: bytes) -> EventErased | None:
    """The stub payload a stored record holds, or None (not a stub)."""
    if _ERASED_TAG not in record:
        return None
    try:
        body = decode_event(bytes(record[64:])).body
    except DecodeError:
        return None
    return body if isinstance(body, EventErased) else None


#: The store mark of a copy that has not finished (`turnlog.log.copy_log`): its value
#: is JSON naming the source (``from``) and the sessions copied (None: all).
COPY_MARK = "copy"


class Problem(msgspec.Struct, frozen=True):
    """The first thing `verify` found wrong."""

    session: str
    seq: int | None
    reason: str
    blob: str | None = None

    def __str__(self) -> str:
        where = f"{self.session}#{self.seq}" if self.seq is not None else self.session
        if self.blob:
            where += f" (blob {self.blob[:16]})"
        return f"{where}: {self.reason}"


class VerifyReport(msgspec.Struct, frozen=True):
    """Result of `Log.verify`.

    Attributes:
        ok: True when everything checked is intact.
        problem: the first bad event or blob (None when ok).
        sessions: sessions checked.
        events: events checked.
        blobs: blobs checked.
        warnings: what is wrong with derived data (the persisted token counts, which
            are checked where they are read and rebuilt): reported by a verify of
            the whole log, without making it fail.
        erased: ``(session, seq, by)`` of every erased event checked: its content
            was erased by the erasure event at ``(session, by)``, which lists it
            with its hash (see docs/erasure.md). Not a problem.
    """

    ok: bool
    problem: Problem | None
    sessions: int
    events: int
    blobs: int
    warnings: tuple[str, ...] = ()
    erased: tuple[tuple[str, int, int], ...] = ()


# Payload kind -> its fields that may hold blob refs.
_REF_FIELDS: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(f for f in ("blob", "blobs", "images", "parts") if f in cls.__struct_fields__)
    for cls in KINDS.values()
}


def fsck(
    store: Store,
    session: str | None = None,
    *,
    checkpoint: Checkpoint | None = None,
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Check one session (or every one) of ``store``; see `Log.verify`, which checks
    the arguments (and a checkpoint's MAC) and calls this.

    Parameters:
        store: the store to check (read only).
        session: the session to check with its lineage; every session when None.
        checkpoint: also check that the log still extends it (its session is
            ``session``).
        strict: also prove every record decodes and is canonical.
        progress: called with the number of events checked so far, every 10,000
            events and once at the end.

    Returns the report naming the first problem.

    Raises:
        UnknownSessionError: ``session`` is not in the store (and no checkpoint says
            it was).
        StoreCorruptError: the store cannot be read at all.
    """
    damage = store.check_structure()
    if damage is not None:
        return VerifyReport(
            False,
            Problem("", None, f"the {store.name} store's files are damaged: {damage}"),
            0,
            0,
            0,
        )
    with store.read() as txn:
        return _Fsck(txn, strict, _Progress(progress)).run(session, checkpoint)


class _Fsck:
    """One verify over one snapshot: what it checked so far."""

    def __init__(self, txn: ReadTxn, strict: bool, done: _Progress) -> None:
        self.txn = txn
        self.strict = strict
        self.done = done
        self.checked_blobs: set[str] = set()
        self.events = 0
        self.blobs = 0
        self.erased: list[tuple[str, int, int]] = []
        self.erasures: dict[tuple[str, int], dict[int, str]] = {}

    def run(self, session: str | None, checkpoint: Checkpoint | None) -> VerifyReport:
        txn = self.txn
        copying = txn.mark(COPY_MARK)
        if copying is not None:
            # Whatever it holds may verify: it is still not the store it is a copy of.
            return self.report(Problem("", None, describe_copy_mark(copying)), 0)
        heads = list(txn.sessions())
        if session is not None:
            heads = [h for h in heads if h[0] == session]
            if not heads:
                if checkpoint is not None:
                    return VerifyReport(
                        False,
                        Problem(
                            session,
                            checkpoint.seq,
                            "the session is gone: the log was truncated or "
                            "replaced since the checkpoint",
                        ),
                        0,
                        0,
                        0,
                    )
                raise UnknownSessionError(
                    f"no session {session!r} to verify; list sessions "
                    "with `turnlog sessions` (Python: "
                    "`Log.sessions()`)"
                )
        for name, head_seq, head_hash in heads:
            problem = self.session(name, head_seq, head_hash)
            if problem is not None:
                return self.report(problem, len(heads))
        nsessions = len(heads)
        if session is not None:
            # A fork's history (its prompts, its head hash) includes its source's
            # events up to the fork point, recursively: check those too.
            problem, nsources = self.lineage(session)
            nsessions += nsources
            if problem is not None:
                return self.report(problem, nsessions)
        if checkpoint is not None:
            problem = self.checkpoint(checkpoint)
            if problem is not None:
                return self.report(problem, nsessions)
        self.done.report()
        warnings: tuple[str, ...] = ()
        if session is None:
            for digest, data in txn.blobs():
                if digest in self.checked_blobs:
                    continue
                self.blobs += 1
                if blake3.blake3(data).hexdigest() != digest:
                    return self.report(
                        Problem(
                            "",
                            None,
                            "blob content does not match its hash (no event references it)",
                            digest,
                        ),
                        len(heads),
                    )
            warnings = tuple(check_count_cache(lambda key: txn.cached(COUNTS_NAMESPACE, key)))
        return VerifyReport(
            True, None, nsessions, self.events, self.blobs, warnings, tuple(self.erased)
        )

    def report(self, problem: Problem, sessions: int) -> VerifyReport:
        return VerifyReport(
            False, problem, sessions, self.events, self.blobs, erased=tuple(self.erased)
        )

    def erasure(self, session: str, by: int) -> dict[int, str] | str:
        """The seqs (with their hashes, hex) the erasure event at ``by`` lists, or
        what is wrong with it."""
        key = (session, by)
        found = self.erasures.get(key)
        if found is not None:
            return found
        record = self.txn.get(session, by)
        if record is None:
            return f"the stub names erasure event #{by}, which does not exist"
        try:
            body = record_event(record).body
        except DecodeError:
            return f"the stub names erasure event #{by}, which does not decode"
        if not isinstance(body, ContentErased) or len(body.seqs) != len(body.hashes):
            return f"the stub names #{by}, which is not a well-formed erasure event"
        listed = dict(zip(body.seqs, body.hashes, strict=True))
        self.erasures[key] = listed
        return listed

    def stub(
        self,
        session: str,
        seq: int,
        prev: bytes,
        record: bytes,
    ) -> tuple[bool, str | None]:
        """Whether ``record`` is an erased event's stub, and what is wrong with it
        (None: it is exactly what the erasure it names wrote)."""
        if _ERASED_TAG not in record or len(record) <= 64:
            return False, None
        canonical = bytes(record[64:])
        try:
            event = decode_event(canonical)
        except DecodeError:
            return False, None
        body = event.body
        if not isinstance(body, EventErased):
            return False, None
        normalize(event)
        if encode_canonical(event) != canonical:
            return True, "the erased event's stub is not canonical"
        if event.session != session or event.seq != seq:
            return True, (
                f"the stub claims position {event.session!r}#{event.seq} but is "
                f"stored at {session!r}#{seq}"
            )
        expected_prev = prev if seq else GENESIS
        if record[:32] != expected_prev:
            return True, (
                f"prev hash {record[:32].hex()[:16]} of the erased event does not "
                f"match the previous event's hash {expected_prev.hex()[:16]}"
            )
        if body.by <= seq:
            return True, f"the stub names erasure event #{body.by}, which is not later"
        listed = self.erasure(session, body.by)
        if isinstance(listed, str):
            return True, listed
        digest = record_hash(record).hex()
        if listed.get(seq) != digest:
            return True, (
                f"the stored hash {digest[:16]} of the erased event is not the one "
                f"erasure event #{body.by} lists for it"
            )
        self.erased.append((session, seq, body.by))
        return True, None

    def erasure_listed(self, session: str, seq: int, record: bytes) -> str | None:
        """What is wrong with an erasure event's list: every seq it lists must hold
        the stub that names it (else the content it says is gone is still there)."""
        try:
            body = record_event(record).body
        except DecodeError:
            return None  # the chain checks report it
        if not isinstance(body, ContentErased):
            return None
        if len(body.seqs) != len(body.hashes):
            return "the erasure event lists a different number of seqs and hashes"
        for erased in body.seqs:
            stored = self.txn.get(session, erased) if erased < seq else None
            stub = None if stored is None else _stub_body(stored)
            if stub is None or stub.by != seq:
                return (
                    f"the erasure event lists #{erased}, whose content is still stored "
                    "(or is not an earlier event)"
                )
        return None

    def lineage(self, session: str) -> tuple[Problem | None, int]:
        """Check the events a (verified) fork continues: each source session up to
        its fork point, recursively. Returns the problem and the sessions checked."""
        txn = self.txn
        sources = 0
        fork, seen = session, {session}
        while True:
            record = txn.get(session, 0)
            body = record_event(record).body if record is not None else None
            if not isinstance(body, SessionForked):
                return None, sources
            source, stop = body.from_session, body.from_seq + 1
            if source in seen:
                return Problem(session, 0, f"the fork chain loops back to {source!r}"), sources
            seen.add(source)
            sources += 1
            problem = self.session(source, stop - 1, None, stop=stop)
            if problem is not None:
                return (
                    Problem(
                        problem.session,
                        problem.seq,
                        f"{problem.reason} (in the history {fork!r} was forked from)",
                        problem.blob,
                    ),
                    sources,
                )
            session = source

    def session(
        self,
        session: str,
        head_seq: int,
        head_hash: bytes | None,
        *,
        stop: int | None = None,
        index: bool = True,
    ) -> Problem | None:
        """Check a session's events (those below ``stop`` only, when given: then
        ``head_hash`` is not known and the events must reach ``head_seq``), and
        with ``index`` its idempotency index."""
        txn, strict = self.txn, self.strict
        prev = GENESIS
        expected_seq = 0
        linked = link_checker(position_prefix(session))
        step = self.done.step if self.done.wanted else None
        blob_key = may_hold_blob_refs
        keys = _Keys(txn, session) if stop is None and index else None
        for seq, record in txn.scan(session, 0, stop, every=True):
            if seq != expected_seq:
                return Problem(session, expected_seq, f"event is missing (seqs jump to {seq})")
            self.events += 1
            if step is not None:
                step()
            event: Event | None = None
            is_stub = False
            doubt = strict or seq == 0 or not linked(record, seq, prev)
            if doubt:
                # An erased event's stub: its stored hash is the original event's,
                # which the erasure event that the stub names must list.
                is_stub, reason = self.stub(session, seq, prev, record)
                if reason is not None:
                    return Problem(session, seq, reason)
            if doubt and not is_stub:
                # In full, and on any doubt: check_record names what is wrong. Seq
                # 0's prev is the genesis or a fork's source: first() checks the link.
                event, reason = check_record(
                    record, session=session, seq=seq, prev=prev if seq else None
                )
                if reason is not None or event is None:
                    return Problem(session, seq, reason or "unreadable")
                if seq == 0:
                    reason = self.first(event)
                    if reason is not None:
                        return Problem(session, 0, reason)
            if not is_stub and _ERASURE_TAG in record:
                reason = self.erasure_listed(session, seq, record)
                if reason is not None:
                    return Problem(session, seq, reason)
            if not is_stub and blob_key(record):
                if event is None:
                    try:
                        event = record_event(record)
                    except DecodeError:
                        reason = check_record(record, session=session, seq=seq, prev=prev)[1]
                        return Problem(session, seq, reason or "unreadable")
                for ref in _blob_refs(event.body):
                    self.blobs += 1
                    reason = self.blob(ref)
                    if reason is not None:
                        return Problem(session, seq, reason, ref.hash)
            if keys is not None and _KEY_FIELD in record:
                key = _event_key(record)
                if key is not None:
                    problem = keys.add(key, seq)
                    if problem is not None:
                        return problem
            prev = record[32:64]
            expected_seq += 1
        if stop is not None:
            if expected_seq != stop:
                return Problem(
                    session,
                    expected_seq,
                    f"event is missing (the events end at seq {expected_seq - 1})",
                )
            return None
        if expected_seq != head_seq + 1:
            return Problem(
                session,
                expected_seq,
                f"the head says seq {head_seq} but the events end at seq {expected_seq - 1}",
            )
        if prev != head_hash:
            return Problem(session, head_seq, "the head hash does not match the last event")
        return None if keys is None else keys.finish()

    def first(self, event: Event) -> str | None:
        """What is wrong with a session's first event's link (None: nothing)."""
        if isinstance(event.body, SessionForked):
            source = self.txn.get(event.body.from_session, event.body.from_seq)
            if source is None:
                return f"fork source {event.body.from_session}#{event.body.from_seq} is missing"
            if (
                record_hash(source).hex() != event.body.from_hash
                or event.prev.hex() != event.body.from_hash
            ):
                return "fork does not link to its source event's hash"
            return None
        if event.prev != GENESIS:
            return "first event of the session does not start from the genesis hash"
        return None

    def blob(self, ref: BlobRef) -> str | None:
        """What is wrong with a referenced blob (None: nothing, or checked before)."""
        checked = self.checked_blobs
        if ref.hash in checked:
            return None
        data = self.txn.blob(ref.hash)
        if data is None:
            return "references a blob that is missing"
        if len(data) != ref.size:
            return f"blob has {len(data)} bytes, the ref says {ref.size}"
        if blake3.blake3(data).hexdigest() != ref.hash:
            return "blob content does not match its hash"
        checked.add(ref.hash)
        return None

    def checkpoint(self, checkpoint: Checkpoint) -> Problem | None:
        """What shows the log no longer extends ``checkpoint`` (None: it does)."""
        head = self.txn.head(checkpoint.session)
        if head is None or head[0] < checkpoint.seq:
            return Problem(
                checkpoint.session,
                checkpoint.seq,
                f"the log ends at seq {head[0] if head else -1}, before the "
                "checkpoint: it was truncated",
            )
        record = self.txn.get(checkpoint.session, checkpoint.seq)
        if record is None or record_hash(record).hex() != checkpoint.hash:
            return Problem(
                checkpoint.session,
                checkpoint.seq,
                "the event's hash differs from the checkpoint: the log was rewritten",
            )
        return None


def _event_key(record: bytes) -> str | None:
    """The key of the event a stored record holds (None: none, or unreadable, which
    the chain checks report)."""
    try:
        return _KEY_DECODER.decode(memoryview(record)[64:]).key
    except msgspec.DecodeError:
        return None


class _Keys:
    """The check of a session's idempotency index against its keyed events: each
    event's key must be indexed at its seq (looked up in batches), and the index
    must hold no other key."""

    def __init__(self, txn: ReadTxn, session: str) -> None:
        self.txn = txn
        self.session = session
        self.pending: list[tuple[str, int]] = []
        self.keyed = 0

    def add(self, key: str, seq: int) -> Problem | None:
        self.keyed += 1
        self.pending.append((key, seq))
        return self.flush() if len(self.pending) >= _KEY_BATCH else None

    def flush(self) -> Problem | None:
        pending, self.pending = self.pending, []
        if not pending:
            return None
        found = self.txn.idempotency_seqs(self.session, [key for key, _ in pending])
        for (key, seq), indexed in zip(pending, found, strict=True):
            if indexed is None:
                return Problem(
                    self.session,
                    seq,
                    f"the idempotency index has no entry for "
                    f"the event's key {key!r} (deleted or changed behind turnlog's "
                    f"back): {_REINDEX}",
                )
            if indexed != seq:
                return Problem(
                    self.session,
                    seq,
                    f"the idempotency index maps the event's "
                    f"key {key!r} to seq {indexed} (changed behind turnlog's "
                    f"back): {_REINDEX}",
                )
        return None

    def finish(self) -> Problem | None:
        problem = self.flush()
        if problem is not None:
            return problem
        entries = self.txn.idempotency_keys(self.session)
        if entries is None or sum(1 for _ in entries) == self.keyed:
            return None
        # More entries than keyed events (each of which is indexed at its seq): name
        # the first entry whose event does not hold its key.
        for key, seq in self.txn.idempotency_keys(self.session) or ():
            record = self.txn.get(self.session, seq)
            held = None if record is None else _event_key(record)
            if held != key:
                what = (
                    "no event"
                    if record is None
                    else "an event without a key"
                    if held is None
                    else f"an event keyed {held!r}"
                )
                return Problem(
                    self.session,
                    seq,
                    f"the idempotency index holds the key "
                    f"{key!r} at seq {seq}, where the session has {what} (added or "
                    f"changed behind turnlog's back): {_REINDEX}",
                )
        return None


def describe_copy_mark(mark: str) -> str:
    """What the ``copy`` mark of a store says, as a sentence."""
    try:
        found = msgspec.json.decode(mark)
    except msgspec.DecodeError:
        found = {}
    source = found.get("from") if isinstance(found, dict) else None
    sessions = found.get("sessions") if isinstance(found, dict) else None
    what = (
        "the sessions " + ", ".join(repr(s) for s in sessions) + " of "
        if isinstance(sessions, list) and sessions
        else ""
    )
    return (
        f"the store is an unfinished copy of {what}{source or 'another store'}: the copy "
        "stopped before it finished. Run the same `turnlog copy` again to finish it "
        "(Python: turnlog.log.copy_log); it resumes where it stopped"
    )


def fsck_session(
    txn: ReadTxn, session: str, head_seq: int, head_hash: bytes, checked_blobs: set[str]
) -> Problem | None:
    """Check one session of a snapshot as `Log.verify` does (its events, rows past
    its head, its fork link, the blobs it refers to), but not its idempotency
    index, which a copy rebuilds from the events: what `copy_log` checks before
    copying it. ``checked_blobs`` holds the blobs hashed already and gains those
    this check hashes."""
    fsck = _Fsck(txn, False, _Progress(None))
    fsck.checked_blobs = checked_blobs
    return fsck.session(session, head_seq, head_hash, index=False)


def referenced_blobs(body: Body) -> list[str]:
    """The hashes of the blobs an event's payload refers to."""
    return [ref.hash for ref in _blob_refs(body)]


class _Progress:
    """Counts the events a verify checked and reports every 10,000 (and at the end)."""

    __slots__ = ("_call", "events", "wanted")

    def __init__(self, call: Callable[[int], None] | None) -> None:
        self._call = call
        self.events = 0
        self.wanted = call is not None

    def step(self) -> None:
        self.events += 1
        if self._call is not None and self.events % 10_000 == 0:
            self._call(self.events)

    def report(self) -> None:
        if self._call is not None:
            self._call(self.events)


def _blob_refs(body: Body) -> list[BlobRef]:
    refs: list[BlobRef] = []
    for name in _REF_FIELDS.get(type(body), ("blob", "images", "parts")):
        value = getattr(body, name, None)
        if isinstance(value, BlobRef):
            refs.append(value)
        elif isinstance(value, tuple):  # blobs, images, or parts of which images hold blobs
            for part in value:
                if type(part) is BlobRef:
                    refs.append(part)
                elif type(part) is ImagePart and part.blob is not None:
                    refs.append(part.blob)
    return refs

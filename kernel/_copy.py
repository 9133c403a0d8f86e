"""Copying a log, or some of its sessions, from one store to another (LMDB,
PostgreSQL, memory).

Theory of operation
-------------------
A copy moves stored bytes, never events: every record is written to the
target exactly as the source holds it, so every hash, every chain link and
every recorded request stays what it was, and `Log.verify` and replay pass on
the copy as on the source. What is copied, from one snapshot of the source:

1. every blob, each hashed on the way (first, so that no event of the target
   ever refers to a blob it lacks); a copy of some sessions takes only the
   blobs their events refer to, each before the events that refer to it;
2. every derived-cache entry (the Packer's token counts), when the source can
   list them (a copy of some sessions goes without: they are rebuilt on use);
3. each session up to its head, sources of forks before the forks (a fork's
   history continues its source's: `copy_log` with ``sessions`` takes the
   lineage along). Before anything of a session is written, the session is
   verified in the source as `Log.verify` would (every link and hash, rows past
   the head, the blobs it refers to): a damaged source is refused with
   `StoreCorruptError`, never laundered into a target that verifies. Then it is
   written in chunks of whole records; each chunk's write checks that the
   target's head is where the copy left it (another writer of the target is an
   `AppendConflictError`, nothing of the chunk written), moves the head to its
   last record and stores the idempotency key of each record (the event carries
   it), so a retry of an old batch against the copy is still recognised as a
   duplicate.

Until the copy has finished, the target carries the store mark ``copy``
(`ReadTxn.mark`), written before anything else and removed by the copy's last
write: `Log.verify` fails on a marked store and ``turnlog sessions`` says so,
so a copy killed half way never passes for a whole one. Running the copy again
resumes it: a session the target holds is continued when its events are a
prefix of the source's (same hash at the target's head), skipped when whole,
and refused when it holds other events. The same rule lets a copy of some
sessions bring a shard up to date.

`export_events` writes one session as JSON lines that `import_events` (and
``turnlog import``) read back: each event as `event_to_json` writes it, the
sessions a fork continues first, and before the first event that refers to a
blob, the blob as a line ``{"blob": hash, "data": base64}``. An import
rebuilds each record from its line (its canonical bytes re-encoded, its
``prev`` and ``hash`` as exported), verifies them all as `Log.verify` would (a
changed line breaks its hash) and copies them in as above: every hash is the
exported one, and importing the same file again writes nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Iterator

import blake3
import msgspec

from ._canonical import normalize
from ._chain import record_event, record_hash
from ._codec import (
    encode_canonical,
    event_from_json,
    event_to_json,
    may_hold_blob_refs,
    validate_session_id,
)
from ._errors import (
    AppendConflictError,
    DecodeError,
    Hint,
    ImportFormatError,
    InvalidArgumentError,
    StoreCorruptError,
    StoreError,
    UnknownSessionError,
)
from ._events import SessionForked
from ._log import Log
from ._memstore import MemoryStore
from ._store import ReadTxn, WriteTxn, hide_credentials
from ._validation import check_type, invalid
from ._verify import COPY_MARK, describe_copy_mark, fsck_session, referenced_blobs

__all__ = ["Copied", "copy_log", "export_events", "import_events", "unfinished_copy"]

_CHUNK_RECORDS = 1000
_CHUNK_BYTES = 8 * 2**20


class Copied(msgspec.Struct, frozen=True):
    """What `copy_log` wrote.

    Attributes:
        sessions: sessions copied (whole in the target now, including those a
            resumed copy found whole already).
        events: records written.
        blobs: blobs written (those the target lacked).
        cached: derived-cache entries copied (0 when the source cannot list them,
            and for a copy of some sessions).
    """

    sessions: int
    events: int
    blobs: int
    cached: int


def copy_log(
    source: Log,
    target: Log,
    *,
    sessions: Iterable[str] | None = None,
    progress: Callable[[Copied], None] | None = None,
) -> Copied:
    """Copy every session (or the given ones with their lineage), the blobs they
    refer to and the cached token counts of ``source`` into ``target``, byte for
    byte (every hash preserved).

    Parameters:
        source: the log to copy (it may be opened read-only).
        target: the log to copy into. A session it holds already must be a prefix
            of the source's (a copy stopped half way, or a shard behind): it is
            continued.
        sessions: copy only these sessions, each with the sessions its history
            continues (the sources of a fork, recursively), sources first.
        progress: called with the counts so far after each session.

    Returns:
        `Copied`, the counts written.

    Raises:
        InvalidArgumentError: the target holds a session of the source with other
            events, or source and target are the same store.
        UnknownSessionError: a session of ``sessions`` is not in the source.
        StoreCorruptError: the source fails verification for a session to copy
            (nothing of that session was written).
        AppendConflictError: another writer wrote a copied session of the target
            during the copy.
        StoreError: either store failed. In every case but success the target
            keeps its ``copy`` mark (see the module docstring): run the copy again
            to finish it.
    """
    check_type(source, Log, "source", what="a turnlog Log (turnlog.open(...))")
    check_type(target, Log, "target", what="a turnlog Log (turnlog.open(...))")
    if source.store is target.store:
        raise InvalidArgumentError("source and target are the same store")
    if progress is not None and not callable(progress):
        raise InvalidArgumentError(
            f"progress must be callable or None, found {type(progress).__name__}"
        )
    wanted = None if sessions is None else _session_list(sessions)
    return _Copy(source, target, progress).run(wanted)


def unfinished_copy(log: Log) -> str | None:
    """Why ``log`` is not a whole store yet: it is the target of a copy that has
    not finished (`copy_log` stopped or killed half way), or None.

    Returns a sentence naming the source and what to run, or None.
    """
    with log.store.read() as txn:
        mark = txn.mark(COPY_MARK)
    return None if mark is None else describe_copy_mark(mark)


def _session_list(sessions: Iterable[str]) -> list[str]:
    if isinstance(sessions, str):
        invalid("sessions", "a list of session ids", sessions, with_type=True)
    found = list(sessions)
    for session in found:
        validate_session_id(session)
    if not found:
        raise InvalidArgumentError(
            "sessions is empty; give at least one session id, or None to copy every session"
        )
    return found


def export_events(log: Log, session: str) -> Iterator[bytes]:
    """One session as JSON lines (each ending in a newline) that `import_events`
    reads back into any store with every hash unchanged: its lineage's events
    first, each blob before the first event that refers to it (module docstring).

    Raises:
        UnknownSessionError: no such session.
        StoreCorruptError: a fork's source session is missing.
    """
    validate_session_id(session)
    sent: set[str] = set()
    with log.snapshot() as snap, log.store.read() as txn:
        heads: dict[str, tuple[int, bytes]] = {}
        where = hide_credentials(log.store.location) or log.store.name
        for name in _lineage(txn, [session], heads, where):
            for event in snap.iter(name, 0, heads[name][0] + 1):
                for digest in referenced_blobs(event.body):
                    if digest in sent:
                        continue
                    data = txn.blob(digest)
                    if data is None:
                        raise StoreCorruptError(
                            f"{name}#{event.seq} refers to blob "
                            f"{digest[:16]}, which is missing; run "
                            "`turnlog verify`"
                        )
                    sent.add(digest)
                    yield (
                        _BLOB_LINE.encode({"blob": digest, "data": base64.b64encode(data).decode()})
                        + b"\n"
                    )
                yield event_to_json(event) + b"\n"


def import_events(
    target: Log,
    lines: Iterable[bytes | str],
    *,
    origin: str = "the export",
) -> Copied:
    """Read what `export_events` wrote back into ``target``, every hash unchanged.

    The lines are checked whole before anything is written: each must be an
    exported event or blob, each session's events dense from seq 0, every record
    rebuilt from its line must verify (a changed line breaks its hash). Then the
    sessions are copied in as `copy_log` copies them: a session the target holds
    as a prefix is continued, a whole one left alone (importing a file twice
    writes nothing), one with other events refused.

    Parameters:
        target: the log to import into.
        lines: the export's lines.
        origin: the file's name, for messages.

    Returns:
        `Copied`, the counts written.

    Raises:
        ImportFormatError: a line is not an exported event or blob, the events are
            not dense, or they do not verify; nothing was written.
        InvalidArgumentError: the target holds a session of the export with other
            events; nothing was written.
    """
    staging = Log(MemoryStore())
    records: dict[str, list[bytes]] = {}
    keys: dict[str, list[tuple[str, int]]] = {}
    blobs: dict[str, bytes] = {}
    for number, line in enumerate(lines, 1):
        text = line.encode() if isinstance(line, str) else line
        if not text.strip():
            continue
        where = f"{origin}: line {number}"
        try:
            raw = msgspec.json.decode(text)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            raise ImportFormatError(
                f"{where} is not JSON; a turnlog export holds one JSON "
                "object a line (`turnlog export SESSION`)"
            ) from None
        if isinstance(raw, dict) and set(raw) == {"blob", "data"}:
            digest, data = raw["blob"], _blob_data(raw["data"], where)
            if not isinstance(digest, str) or blake3.blake3(data).hexdigest() != digest:
                raise ImportFormatError(
                    f"{where}: the blob's data does not match its hash "
                    f"{str(digest)[:16]}; the file was changed"
                )
            blobs[digest] = data
            continue
        try:
            event = event_from_json(text)
        except DecodeError as exc:
            raise ImportFormatError(f"{where}: not an exported event or blob ({exc})") from None
        held = records.setdefault(event.session, [])
        if event.seq != len(held):
            raise ImportFormatError(
                f"{where}: expected {event.session}#{len(held)}, found "
                f"seq {event.seq}; the file was cut or reordered"
            )
        prev, digest = event.prev, event.hash
        bare = msgspec.structs.replace(event)
        msgspec.structs.force_setattr(bare, "prev", b"")
        msgspec.structs.force_setattr(bare, "hash", b"")
        normalize(bare)
        held.append(prev + digest + encode_canonical(bare))
        if event.key is not None:
            keys.setdefault(event.session, []).append((event.key, event.seq))
    if not records:
        raise ImportFormatError(f"{origin}: no exported event in the file")

    def stage(txn: WriteTxn) -> None:
        for digest, data in blobs.items():
            txn.put_blob(digest, data)
        for session, held in records.items():
            txn.put_events(session, 0, held)
            for key, seq in keys.get(session, ()):
                txn.put_idempotency(session, key, seq)
            txn.set_head(session, len(held) - 1, record_hash(held[-1]))

    staging.store.write(stage)
    report = staging.verify()
    problem = report.problem
    if problem is not None and (
        (problem.blob is not None and problem.blob not in blobs)
        or (problem.reason.startswith("fork source ") and problem.reason.endswith(" is missing"))
    ):
        # What an export without --complete leaves out: the blobs, a fork's source.
        needs = "the blobs its events refer to" if problem.blob else "the session it continues"
        raise ImportFormatError(
            f"{origin}: {problem}: the file does not hold {needs}, as an export "
            "made without --complete does not. Nothing was imported",
            hint=Hint(
                cli="export the session again with `turnlog export SESSION --complete` "
                "and import that file",
                python="export the session with `turnlog.log.export_events(log, session)` "
                "and import those lines",
            ),
        )
    if not report.ok:
        raise ImportFormatError(
            f"{origin}: the exported events do not verify at "
            f"{report.problem}; the file was changed or is not whole. "
            "Nothing was imported"
        )
    copy = _Copy(staging, target, None)
    copy.origin = origin
    return copy.run(list(records))


_BLOB_LINE = msgspec.json.Encoder(order="deterministic")


def _set_mark(txn: WriteTxn, value: str | None) -> None:
    # A backend that keeps no marks (a third-party store written before them) is
    # copied into as before: without the mark.
    if type(txn).set_mark is not WriteTxn.set_mark:
        txn.set_mark(COPY_MARK, value)


def _blob_data(value: object, where: str) -> bytes:
    try:
        if isinstance(value, str):
            return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        pass
    raise ImportFormatError(f"{where}: a blob's data must be base64 text")


def _lineage(
    txn: ReadTxn, wanted: list[str], heads: dict[str, tuple[int, bytes]], where: str
) -> list[str]:
    """``wanted`` with the sessions their histories continue, sources first; fills
    ``heads`` with each one's head."""
    order: list[str] = []
    for session in wanted:
        chain: list[str] = []
        name: str | None = session
        while name is not None and name not in heads:
            head = txn.head(name)
            if head is None:
                if name == session:
                    raise UnknownSessionError(
                        f"no session {session!r} in {where}; list its "
                        "sessions with `turnlog sessions`"
                    )
                raise StoreCorruptError(
                    f"{where} lacks session {name!r}, which {chain[-1]!r} "
                    "was forked from; run `turnlog verify` on it"
                )
            heads[name] = head
            chain.append(name)
            first = txn.get(name, 0)
            body = record_event(first).body if first is not None else None
            name = body.from_session if isinstance(body, SessionForked) else None
        order.extend(reversed(chain))
    return order


class _Copy:
    """One copy run: the counts so far."""

    def __init__(self, source: Log, target: Log, progress: Callable[[Copied], None] | None) -> None:
        self.source = source
        self.target = target
        self.progress = progress
        self.where = hide_credentials(target.store.location) or target.store.name
        self.origin = hide_credentials(source.store.location) or source.store.name
        self.sessions = self.events = self.blobs = self.cached = 0
        self.have: set[str] = set()  # blobs hashed in the source and present in the target
        self.checked: set[str] = set()  # blobs verified in the source

    def counts(self) -> Copied:
        return Copied(self.sessions, self.events, self.blobs, self.cached)

    def run(self, wanted: list[str] | None) -> Copied:
        with self.source.store.read() as txn:
            heads = (
                {name: (seq, digest) for name, seq, digest in txn.sessions()}
                if wanted is None
                else {}
            )
            order = (
                list(heads)
                if wanted is None
                else _lineage(txn, wanted, heads, f"the source {self.origin}")
            )
            starts = self.preflight(txn, order, heads)
            mark = json.dumps({"from": self.origin, "sessions": wanted}, ensure_ascii=False)
            self.target.store.write(lambda t: _set_mark(t, mark))
            if wanted is None:
                self.copy_blobs(txn)
                self.copy_cache(txn)
            for session in order:
                self.copy_session(txn, session, heads[session], starts[session])
                self.sessions += 1
                if self.progress is not None:
                    self.progress(self.counts())
        self.target.store.write(lambda t: _set_mark(t, None))
        return self.counts()

    def preflight(
        self, txn: ReadTxn, order: list[str], heads: dict[str, tuple[int, bytes]]
    ) -> dict[str, int]:
        """The first seq to copy of each session: 0, or past what the target holds
        of it already (a prefix of the source's); anything else is refused before
        anything is written."""
        starts: dict[str, int] = {}
        with self.target.store.read() as there:
            for session in order:
                held = there.head(session)
                if held is None:
                    starts[session] = 0
                    continue
                seq, digest = held
                record = txn.get(session, seq) if seq <= heads[session][0] else None
                if record is None or record_hash(record) != digest:
                    raise InvalidArgumentError(
                        f"the target {self.where} already holds session {session!r} with other "
                        f"events (its seq {seq} is not the source's); copy into a store "
                        "without it"
                    )
                starts[session] = seq + 1
        return starts

    def copy_blobs(self, txn: ReadTxn) -> None:
        chunk: list[tuple[str, bytes]] = []
        size = 0
        for digest, data in txn.blobs():
            if blake3.blake3(data).hexdigest() != digest:
                raise StoreCorruptError(
                    f"blob {digest[:16]} of the source does not match its hash; run `turnlog "
                    "verify` on the source and restore it from a backup before copying"
                )
            self.have.add(digest)
            self.checked.add(digest)
            chunk.append((digest, data))
            size += len(data)
            if size >= _CHUNK_BYTES or len(chunk) >= _CHUNK_RECORDS:
                self.write_blobs(chunk)
                chunk, size = [], 0
        self.write_blobs(chunk)

    def copy_cache(self, txn: ReadTxn) -> None:
        try:
            entries = list(txn.cache_items())
        except StoreError:
            return  # a backend that cannot list its cache: rebuilt on use
        for start in range(0, len(entries), _CHUNK_RECORDS):
            part = entries[start : start + _CHUNK_RECORDS]

            def put(t: WriteTxn, part: list[tuple[str, bytes, bytes]] = part) -> None:
                for namespace, key, value in part:
                    t.put_cached(namespace, key, value)

            self.target.store.write(put)
        self.cached += len(entries)

    def copy_session(self, txn: ReadTxn, session: str, head: tuple[int, bytes], first: int) -> None:
        head_seq, head_hash = head
        problem = fsck_session(txn, session, head_seq, head_hash, self.checked)
        if problem is not None:
            raise StoreCorruptError(
                f"the source {self.origin} fails verification at {problem}; nothing of "
                f"{session!r} was copied. Run `turnlog verify` on the source and restore it "
                "from a backup before copying"
            )
        records: list[bytes] = []
        size = 0
        for seq, record in txn.scan(session, first, head_seq + 1):
            if seq != first + len(records):
                raise StoreCorruptError(
                    f"the source lacks {session}#{first + len(records)} "
                    "(it changed during the copy?); run `turnlog verify` "
                    "on it"
                )
            records.append(bytes(record))
            size += len(record)
            if size >= _CHUNK_BYTES or len(records) >= _CHUNK_RECORDS:
                self.write_records(txn, session, first, records)
                first += len(records)
                records, size = [], 0
        self.write_records(txn, session, first, records)

    def write_blobs(self, chunk: list[tuple[str, bytes]]) -> None:
        if not chunk:
            return

        def put(t: WriteTxn) -> int:
            added = 0
            for digest, data in chunk:
                if not t.has_blob(digest):
                    t.put_blob(digest, data)
                    added += 1
            return added

        self.blobs += self.target.store.write(put)

    def write_records(self, txn: ReadTxn, session: str, first: int, records: list[bytes]) -> None:
        if not records:
            return
        # The blobs these events refer to go first (a copy of some sessions only).
        chunk: list[tuple[str, bytes]] = []
        size = 0
        for record in records:
            if not may_hold_blob_refs(record):
                continue
            for digest in referenced_blobs(record_event(record).body):
                if digest in self.have:
                    continue
                data = txn.blob(digest)
                if data is None:  # verified a moment ago in this snapshot
                    raise StoreCorruptError(
                        f"the source lost blob {digest[:16]} during the "
                        "copy; run `turnlog verify` on it"
                    )
                self.have.add(digest)
                chunk.append((digest, data))
                size += len(data)
                if size >= _CHUNK_BYTES:
                    self.write_blobs(chunk)
                    chunk, size = [], 0
        self.write_blobs(chunk)
        keys = [(record_event(r).key, seq) for seq, r in enumerate(records, first)]
        expected = first - 1
        where = self.where

        def put(t: WriteTxn) -> None:
            held = t.head(session)
            if (-1 if held is None else held[0]) != expected:
                actual = -1 if held is None else held[0]
                raise AppendConflictError(
                    f"session {session!r} of the target {where} was written by another writer "
                    f"during the copy (its head is at seq {actual}, the copy left it at "
                    f"{expected}); nothing of this part was written. Copy into a store nobody "
                    "writes to meanwhile",
                    session=session,
                    expected=expected,
                    actual=actual,
                )
            t.put_events(session, first, records)
            for key, seq in keys:
                if key is not None:
                    t.put_idempotency(session, key, seq)
            t.set_head(session, first + len(records) - 1, record_hash(records[-1]))

        self.target.store.write(put)
        self.events += len(records)

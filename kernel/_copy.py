"""Copying a whole log from one store to another (LMDB, PostgreSQL, memory).

Theory of operation
-------------------
A copy moves stored bytes, never events: every record is written to the
target exactly as the source holds it, so every hash, every chain link and
every recorded request stays what it was, and `Log.verify` and replay pass on
the copy as on the source. What is copied, from one snapshot of the source:

1. every blob (first, so that no event of the target ever refers to a blob
   it lacks);
2. every derived-cache entry (the Packer's token counts), when the source can
   list them;
3. every session up to its head, in chunks of whole records; each chunk's
   write also moves the target's head to its last record, and stores the
   idempotency key of each record (the event carries it), so a retry of an
   old batch against the copy is still recognised as a duplicate.

A copy stopped half way leaves whole, verifiable prefixes of sessions; running
it again refuses, naming the session that exists already: copy into an empty
store (or one holding none of the source's sessions).
"""

from __future__ import annotations

import msgspec

from ._chain import record_event, record_hash
from ._errors import InvalidArgumentError, StoreError
from ._log import Log
from ._store import WriteTxn

__all__ = ["Copied", "copy_log"]

_CHUNK_RECORDS = 1000
_CHUNK_BYTES = 8 * 2**20


class Copied(msgspec.Struct, frozen=True):
    """What `copy` wrote.

    Attributes:
        sessions: sessions copied.
        events: records copied.
        blobs: blobs copied (those the target lacked).
        cached: derived-cache entries copied (0 when the source cannot list them).
    """

    sessions: int
    events: int
    blobs: int
    cached: int


def copy_log(source: Log, target: Log) -> Copied:
    """Copy every session, blob and cached token count of ``source`` into ``target``,
    byte for byte (every hash preserved).

    Parameters:
        source: the log to copy (it may be opened read-only).
        target: the log to copy into; it must hold none of the source's sessions.

    Returns:
        `Copied`, the counts written.

    Raises:
        InvalidArgumentError: the target already holds a session of the source,
            or source and target are the same log.
        StoreError: either store failed; sessions copied so far are whole and
            verify (see the module docstring).
    """
    if not isinstance(source, Log) or not isinstance(target, Log):
        raise InvalidArgumentError("copy takes two turnlog Logs (turnlog.open(...))")
    if source.store is target.store:
        raise InvalidArgumentError("source and target are the same store")
    tstore = target.store
    with source.store.read() as txn:
        heads = list(txn.sessions())
        with tstore.read() as there:
            for session, _, _ in heads:
                if there.head(session) is not None:
                    raise InvalidArgumentError(
                        f"the target {tstore.location or tstore.name} already holds session "
                        f"{session!r}; copy into an empty store")
        blobs = 0
        chunk: list[tuple[str, bytes]] = []
        size = 0
        for digest, data in txn.blobs():
            chunk.append((digest, data))
            size += len(data)
            if size >= _CHUNK_BYTES or len(chunk) >= _CHUNK_RECORDS:
                blobs += _write_blobs(target, chunk)
                chunk, size = [], 0
        blobs += _write_blobs(target, chunk)
        try:
            entries = list(txn.cache_items())
        except StoreError:
            entries = []  # a backend that cannot list its cache: rebuilt on use
        for start in range(0, len(entries), _CHUNK_RECORDS):
            part = entries[start:start + _CHUNK_RECORDS]
            _write_cached(target, part)
        events = 0
        for session, head_seq, _ in heads:
            records: list[bytes] = []
            size = 0
            first = 0
            for seq, record in txn.scan(session, 0, head_seq + 1):
                if seq != first + len(records):
                    raise StoreError(f"the source lacks {session}#{first + len(records)}; run "
                                     "`turnlog verify` on it before copying")
                records.append(bytes(record))
                size += len(record)
                if size >= _CHUNK_BYTES or len(records) >= _CHUNK_RECORDS:
                    _write_records(target, session, first, records)
                    first += len(records)
                    events += len(records)
                    records, size = [], 0
            _write_records(target, session, first, records)
            events += len(records)
    return Copied(sessions=len(heads), events=events, blobs=blobs, cached=len(entries))


def _write_blobs(target: Log, chunk: list[tuple[str, bytes]]) -> int:
    if not chunk:
        return 0

    def put(txn: WriteTxn) -> int:
        added = 0
        for digest, data in chunk:
            if txn.blob(digest) is None:
                txn.put_blob(digest, data)
                added += 1
        return added

    return target.store.write(put)


def _write_cached(target: Log, part: list[tuple[str, bytes, bytes]]) -> None:
    def put(txn: WriteTxn) -> None:
        for namespace, key, value in part:
            txn.put_cached(namespace, key, value)

    target.store.write(put)


def _write_records(target: Log, session: str, first: int, records: list[bytes]) -> None:
    if not records:
        return
    keys = [(record_event(r).key, seq) for seq, r in enumerate(records, first)]

    def put(txn: WriteTxn) -> None:
        txn.put_events(session, first, records)
        for key, seq in keys:
            if key is not None:
                txn.put_idempotency(session, key, seq)
        txn.set_head(session, first + len(records) - 1, record_hash(records[-1]))

    target.store.write(put)

"""An in-memory backend for tests and ephemeral logs.

Theory of operation
-------------------
Records of a session live in an append-only list, so every prefix of it is
immutable once written. A snapshot is a copy of the heads map taken under the
lock: reads through it are bounded by those heads and never see a later (or
half-applied) write. A write buffers its puts and applies them under the lock
only after ``fn`` returned, so a failing ``fn`` leaves nothing behind.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ._errors import ForkedProcessError, StoreError
from ._store import ReadTxn, Store, WriteTxn

__all__ = ["MemoryStore"]

T = TypeVar("T")


class _MemoryRead(ReadTxn):
    def __init__(self, store: MemoryStore, heads: dict[str, tuple[int, bytes]]) -> None:
        self._store = store
        self._heads = heads

    def head(self, session: str) -> tuple[int, bytes] | None:
        return self._heads.get(session)

    def get(self, session: str, seq: int) -> bytes | None:
        head = self._heads.get(session)
        records = self._store._events.get(session, [])
        if head is None or not 0 <= seq <= head[0] or seq >= len(records):
            return None
        return records[seq]

    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        head = self._heads.get(session)
        if head is None:
            return
        records = self._store._events.get(session, [])
        end = len(records) if every else head[0] + 1
        if stop is not None:
            end = min(stop, end)
        for seq in range(max(start, 0), min(end, len(records))):  # a bad head must not raise
            yield seq, records[seq]

    def sessions(self) -> Iterator[tuple[str, int, bytes]]:
        for session in sorted(self._heads):
            seq, digest = self._heads[session]
            yield session, seq, digest

    def blob(self, digest: str) -> bytes | None:
        return self._store._blobs.get(digest)

    def blobs(self) -> Iterator[tuple[str, bytes]]:
        for digest in sorted(self._store._blobs):
            yield digest, self._store._blobs[digest]

    def idempotency(self, session: str, key: str) -> int | None:
        return self._store._idem.get((session, key))

    def idempotency_keys(self, session: str) -> Iterator[tuple[str, int]]:
        with self._store._lock:
            found = sorted((k, seq) for (s, k), seq in self._store._idem.items() if s == session)
        return iter(found)

    def cached(self, namespace: str, key: bytes) -> bytes | None:
        return self._store._cache.get((namespace, key))

    def cache_items(self) -> Iterator[tuple[str, bytes, bytes]]:
        with self._store._lock:
            found = sorted((n, k, v) for (n, k), v in self._store._cache.items())
        yield from found

    def mark(self, name: str) -> str | None:
        return self._store._marks.get(name)


class _MemoryWrite(_MemoryRead, WriteTxn):
    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, dict(store._heads))
        self.events: list[tuple[str, int, bytes]] = []
        self.idem: dict[tuple[str, str], int] = {}
        self.new_blobs: dict[str, bytes] = {}
        self.cache: dict[tuple[str, bytes], bytes] = {}
        self._pending: dict[tuple[str, int], bytes] = {}
        self.marks: dict[str, str | None] = {}
        self.replaced: dict[tuple[str, int], bytes] = {}
        self.deleted: set[str] = set()

    def get(self, session: str, seq: int) -> bytes | None:
        replaced = self.replaced.get((session, seq))
        if replaced is not None:
            return replaced
        pending = self._pending.get((session, seq))
        return pending if pending is not None else super().get(session, seq)

    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        # Within a write, records are only ever added up to the new head.
        head = self._heads.get(session)
        if head is None:
            return
        end = head[0] + 1 if stop is None else min(stop, head[0] + 1)
        for seq in range(max(start, 0), end):
            record = self.get(session, seq)
            if record is not None:
                yield seq, record

    def blob(self, digest: str) -> bytes | None:
        if digest in self.deleted:
            return None
        found = self.new_blobs.get(digest)
        return found if found is not None else super().blob(digest)

    def idempotency(self, session: str, key: str) -> int | None:
        found = self.idem.get((session, key))
        return found if found is not None else super().idempotency(session, key)

    def put_event(self, session: str, seq: int, record: bytes) -> None:
        self.events.append((session, seq, record))
        self._pending[(session, seq)] = record

    def set_head(self, session: str, seq: int, digest: bytes) -> None:
        self._heads[session] = (seq, digest)

    def put_idempotency(self, session: str, key: str, seq: int) -> None:
        self.idem[(session, key)] = seq

    def put_blob(self, digest: str, data: bytes) -> None:
        self.new_blobs[digest] = data
        self.deleted.discard(digest)

    def replace_event(self, session: str, seq: int, record: bytes) -> None:
        self.replaced[(session, seq)] = record

    def delete_blob(self, digest: str) -> None:
        self.new_blobs.pop(digest, None)
        self.deleted.add(digest)

    def put_cached(self, namespace: str, key: bytes, value: bytes) -> None:
        self.cache[(namespace, key)] = value

    def mark(self, name: str) -> str | None:
        return self.marks[name] if name in self.marks else super().mark(name)

    def set_mark(self, name: str, value: str | None) -> None:
        self.marks[name] = value


class MemoryStore(Store):
    """Keeps everything in process memory; gone when the object is."""

    name = "memory"

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._events: dict[str, list[bytes]] = {}
        self._heads: dict[str, tuple[int, bytes]] = {}
        self._idem: dict[tuple[str, str], int] = {}
        self._blobs: dict[str, bytes] = {}
        self._cache: dict[tuple[str, bytes], bytes] = {}
        self._marks: dict[str, str] = {}
        self._closed = False
        self._pid = os.getpid()

    def _check(self) -> None:
        if self._closed:
            raise StoreError("the in-memory store is closed; open a new one")
        if os.getpid() != self._pid:
            raise ForkedProcessError(
                "this in-memory store belongs to the parent process; "
                "a child after fork() must create its own"
            )

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        self._check()
        with self._lock:
            heads = dict(self._heads)
        yield _MemoryRead(self, heads)

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        self._check()
        with self._lock:
            txn = _MemoryWrite(self)
            result = fn(txn)
            for session, seq, record in txn.events:
                records = self._events.setdefault(session, [])
                if seq != len(records):
                    raise StoreError(f"internal: out-of-order write at {session!r}#{seq}")
                records.append(record)
            self._idem.update(txn.idem)
            for (session, seq), record in txn.replaced.items():
                self._events[session][seq] = record
            for digest in txn.deleted:
                self._blobs.pop(digest, None)
            self._blobs.update(txn.new_blobs)
            self._cache.update(txn.cache)
            for name, value in txn.marks.items():
                if value is None:
                    self._marks.pop(name, None)
                else:
                    self._marks[name] = value
            self._heads = txn._heads
            return result

    def close(self) -> None:
        self._closed = True

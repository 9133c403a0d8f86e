"""The embedded default backend: LMDB on local disk.

Theory of operation
-------------------
One LMDB environment (a directory holding ``data.mdb`` and ``lock.mdb``)
with named databases:

* ``events``: ``session utf-8 || 0x00 || seq (u64 big-endian)`` -> record
* ``heads``: ``session`` -> ``seq (u64 BE) || hash``
* ``idem``: ``session || 0x00 || key`` -> ``seq (u64 BE)``
* ``blobs``: ``hash (32 bytes)`` -> bytes
* ``cache``: ``namespace || 0x00 || key`` -> bytes (derived, droppable)
* ``meta``: ``format`` -> the store format version; ``mark:NAME`` -> a store
  mark (``mark:copy``: an unfinished copy, see `turnlog.log.copy_log`)

LMDB gives what the log needs: MVCC snapshots (readers never block and never
see half a transaction), one writer at a time across processes (a robust
mutex, freed when a writer dies, even by SIGKILL), and durable commits
(fsync) by default. The map is a size limit, not an allocation: it starts
small and doubles when a write hits ``MapFullError`` (the whole write is
retried). When another process grew it, our handle sees ``MapResizedError``
and adopts the new size before retrying. Changing the map size replaces the
memory map under every transaction of the process (LMDB requires that none is
open), so threads sharing a handle hold a map lock: every transaction is begun
and ended under it shared, and growing or adopting a size takes it exclusively,
waiting for the other threads' transactions to end (new ones wait meanwhile,
except in a thread that already holds one). A write that fails is ended
without LMDB's abort where it can be (see `LMDBStore._end_failed`). A handle
is bound to the process that opened it; LMDB forbids using it after
``fork()``, so that is refused with a clear error instead of corrupting the
lock table.

Every ``lmdb.Error`` is converted to a `StoreError` subclass at this boundary.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar, cast

import lmdb
import msgspec

from ._errors import (
    VERIFY_HINT,
    ForkedProcessError,
    Hint,
    StoreCorruptError,
    StoreError,
    StoreFormatError,
    StoreFullError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from ._store import ReadTxn, Store, WriteTxn, hide_credentials
from ._validation import refuse_unknown_options

__all__ = ["LMDBStore"]

T = TypeVar("T")

#: The on-disk format this version reads and writes.
FORMAT = b"turnlog-lmdb/1"

_U64 = struct.Struct(">Q")
_INITIAL_MAP = 64 * 2**20
_MAX_MAP = 2**40
_DBS = (b"events", b"heads", b"idem", b"blobs", b"cache", b"meta")


# -- the file under LMDB ------------------------------------------------------------------
# LMDB trusts data.mdb: it maps the file and follows page numbers without bounds
# checks, so a truncated file is a SIGBUS and a damaged page can fail one of its
# assertions (SIGABRT), either of which kills the process before any error can be
# raised. The checks below read the file themselves, never through LMDB (the meta
# pages with a plain read, then the pages of a read-only mapping of the file's size,
# each page number checked against it first), and refuse what would crash: at
# open, the meta page, the file size and the main database (a page or two); in
# `LMDBStore.check_structure` (run by `Log.verify`), every page of every database.
# Layouts are LMDB's on a 64-bit little-endian build.
#
# MDB_meta after the 16-byte page header: magic, version, (address, map size), the
# free database's md_pad holding the page size, ..., the main database's MDB_db
# (48 bytes from offset 72 of the meta), the last page in use, the transaction id.
_META = struct.Struct("<II16xI44x48sQQ")
_MAGIC = 0xBEEFC0DE
_NO_PAGE = 2**64 - 1
_PAGE_SIZES = (4096, 512, 1024, 2048, 8192, 16384, 32768, 65536)
_HEADER = struct.Struct("<QHHHH")  # pgno, pad, flags, lower, upper (overflow: pages)
_PAGES = struct.Struct("<I")  # mp_pages of an overflow page, at offset 12
_NODE = struct.Struct("<HHHH")  # size (lo, hi) or child page (lo, hi, flags), flags, key size
_DB = struct.Struct("<IHHQQQQQ")  # pad, flags, depth, branch, leaf, overflow, entries, root
_BRANCH, _LEAF, _OVERFLOW = 0x01, 0x02, 0x04
_KIND = _BRANCH | _LEAF | _OVERFLOW | 0x08 | 0x20 | 0x40
_BIGDATA, _SUBDATA, _DUPDATA = 0x01, 0x02, 0x04


class _Damage(Exception):
    """A structural problem of data.mdb (internal; becomes a message)."""


class _Meta(msgspec.Struct, frozen=True):
    page_size: int
    txnid: int
    last: int
    main: tuple[int, int, int, int, int, int, int, int]  # an MDB_db record


def _read_metas(fd: int) -> list[_Meta]:
    """The valid meta pages of the file (none for an empty file)."""
    head = os.pread(fd, 2 * 65536, 0)
    for page_size in _PAGE_SIZES:
        metas = []
        for offset in (0, page_size):
            if offset + 16 + _META.size > len(head):
                continue
            magic, version, psize, main, last, txnid = _META.unpack_from(head, offset + 16)
            if magic == _MAGIC and version == 1 and psize == page_size:
                metas.append(_Meta(page_size, txnid, last, _DB.unpack(main)))
        if metas:
            return metas
    return []


class _Walker:
    """Reads pages with pread and checks the B-trees hanging off one meta page."""

    def __init__(self, fd: int, meta: _Meta, size: int) -> None:
        # Pages are sliced out of a private read-only mapping of the file's current
        # size (a copy each; a pread per page costs four times as much): nothing
        # past that size is touched, every page number is checked against the meta
        # page's last page, and the file was checked to hold that many pages.
        self.map = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        self.psize = meta.page_size
        self.last = meta.last
        self.size = size
        # One bit per page (not a set of ints): an eighth of a byte per page walked,
        # so checking a store of many GiB stays in a few MiB.
        self.seen = bytearray((meta.last >> 3) + 1)
        self.overflow_pages = 0

    def page(self, pgno: int, what: str) -> tuple[bytes, tuple[int, int, int, int, int]]:
        """The page and its header (pgno, pad, flags, lower, upper)."""
        if not 2 <= pgno <= self.last:
            raise _Damage(f"{what} points at page {pgno}, outside pages 2..{self.last}")
        seen, byte, bit = self.seen, pgno >> 3, 1 << (pgno & 7)
        if seen[byte] & bit:
            raise _Damage(
                f"{what} points at page {pgno}, which is reached twice (a loop or a shared page)"
            )
        seen[byte] |= bit
        psize = self.psize
        data = self.map[pgno * psize : (pgno + 1) * psize]
        if len(data) < psize:
            raise _Damage(f"page {pgno} lies past the end of the file (truncated)")
        header = _HEADER.unpack_from(data)
        if header[0] != pgno:
            raise _Damage(f"page {pgno} holds the header of page {header[0]}")
        return data, header

    def tree(
        self,
        db: tuple[int, ...],
        name: str,
        *,
        main: bool = False,
    ) -> list[tuple[bytes, tuple[int, ...]]]:
        """Check one database; return the sub-database records it holds (main only)."""
        _, _, depth, branches, leaf_pages, overflows, entries, root = db
        if root == _NO_PAGE:
            if entries or depth:
                raise _Damage(f"database {name} has no root page but claims {entries} entries")
            return []
        if not 1 <= depth <= 64:
            raise _Damage(f"database {name} claims a depth of {depth}")
        subs: list[tuple[bytes, tuple[int, ...]]] = []
        leaves = 0
        counts = {_BRANCH: 0, _LEAF: 0, _OVERFLOW: 0}
        self.overflow_pages = 0
        stack = [(root, 1, f"database {name}")]
        psize, page = self.psize, self.page
        limit = psize - _NODE.size
        while stack:
            pgno, level, what = stack.pop()
            data, (_, _, flags, lower, upper) = page(pgno, what)
            kind = _BRANCH if level < depth else _LEAF
            if flags & _KIND != kind:
                raise _Damage(
                    f"page {pgno} of database {name} has flags {flags:#x}, expected a "
                    f"{'branch' if kind == _BRANCH else 'leaf'} page at depth {level}"
                )
            if not (16 <= lower <= upper <= psize and lower % 2 == 0):
                raise _Damage(f"page {pgno} of database {name} has bounds {lower}..{upper}")
            counts[kind] += 1
            # The page as native 16-bit words (LMDB's own byte order): the node offsets
            # from byte 16, each node's header (size or child page, flags, key size).
            words = memoryview(data).cast("H")
            for i, off in enumerate(words[8 : lower >> 1]):
                if off & 1 or not upper <= off <= limit:
                    raise _Damage(
                        f"page {pgno} of database {name}: node {i} at offset {off} "
                        f"lies outside {upper}..{self.psize}"
                    )
                w = off >> 1
                lo, hi, nflags, ksize = words[w], words[w + 1], words[w + 2], words[w + 3]
                body = off + 8 + ksize
                if kind == _BRANCH:
                    if body > psize:
                        raise _Damage(f"page {pgno} of database {name}: key {i} runs past the page")
                    stack.append(
                        (lo | hi << 16 | nflags << 32, level + 1, f"page {pgno} of database {name}")
                    )
                    continue
                leaves += 1
                if not nflags:  # the common case: a value stored in the node
                    if body + (lo | hi << 16) > psize:
                        raise _Damage(
                            f"page {pgno} of database {name}: node {i} runs past the page"
                        )
                    continue
                size = lo | hi << 16
                if nflags & ~(_BIGDATA | _SUBDATA) or nflags & _DUPDATA:
                    raise _Damage(f"page {pgno} of database {name}: node {i} has flags {nflags:#x}")
                if nflags & _BIGDATA:
                    if body + 8 > self.psize:
                        raise _Damage(
                            f"page {pgno} of database {name}: node {i} runs past the page"
                        )
                    self.overflow(
                        struct.unpack_from("<Q", data, body)[0],
                        size,
                        f"page {pgno} of database {name}",
                    )
                elif body + size > self.psize:
                    raise _Damage(f"page {pgno} of database {name}: value {i} runs past the page")
                elif nflags & _SUBDATA:
                    if not main or size != _DB.size:
                        raise _Damage(
                            f"page {pgno} of database {name}: a sub-database record of {size} bytes"
                        )
                    subs.append((data[off + _NODE.size : body], _DB.unpack_from(data, body)))
        if leaves != entries:
            raise _Damage(f"database {name} holds {leaves} entries but claims {entries}")
        found = (counts[_BRANCH], counts[_LEAF], self.overflow_pages)
        if found != (branches, leaf_pages, overflows):
            raise _Damage(
                f"database {name} has {found[0]} branch, {found[1]} leaf and "
                f"{found[2]} overflow pages but claims {branches}, {leaf_pages} and "
                f"{overflows}"
            )
        return subs

    def overflow(self, pgno: int, size: int, what: str) -> None:
        pages = -(-(size + 16) // self.psize)
        if not 2 <= pgno <= self.last - pages + 1:
            raise _Damage(
                f"{what} points at {pages} overflow pages from page {pgno}, outside "
                f"pages 2..{self.last}"
            )
        data, (_, _, flags, _, _) = self.page(pgno, what)
        if flags & _KIND != _OVERFLOW or _PAGES.unpack_from(data, 12)[0] != pages:
            raise _Damage(
                f"overflow page {pgno} has flags {flags:#x} and "
                f"{_PAGES.unpack_from(data, 12)[0]} pages, expected {pages}"
            )
        self.overflow_pages += pages
        if (pgno + pages) * self.psize > self.size:
            raise _Damage(
                f"overflow pages {pgno}..{pgno + pages - 1} lie past the end of the "
                "file (truncated)"
            )


def _check_file(
    path: Path, *, txnid: int | None = None, deep: bool | Collection[bytes] = False
) -> str | None:
    """The first structural problem of ``data.mdb``, or None.

    Checks the newest valid meta page (or the one of transaction ``txnid``), that
    the file holds every page it names, and the main database's pages; with
    ``deep``, every page of every named database too (or of the databases
    ``deep`` names).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # LMDB reports what it cannot open
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return None  # a new store: LMDB initializes the file
        metas = _read_metas(fd)
        if not metas:
            return (
                "no valid LMDB meta page: the file is not a store, or its first pages are damaged"
            )
        chosen = [m for m in metas if m.txnid == txnid] if txnid is not None else metas
        if not chosen:
            return None  # a writer moved on since the snapshot: nothing to compare with
        meta = max(chosen, key=lambda m: m.txnid)
        needed = (meta.last + 1) * meta.page_size
        if size < needed:
            return (
                f"the file is {size} bytes but its last page ends at byte {needed}: it was "
                "truncated"
            )
        walker = _Walker(fd, meta, size)
        try:
            subs = walker.tree(meta.main, "(main)", main=True)
            for name, db in subs:
                if deep is True or (deep and name in deep):
                    walker.tree(db, name.decode(errors="replace"))
        except _Damage as exc:
            return str(exc)
        finally:
            walker.map.close()
        return None
    finally:
        os.close(fd)


def _check_data_file(path: Path) -> None:
    """Refuse, before LMDB maps it, a data.mdb whose meta page, size or main database
    would crash the process (see above).

    Raises:
        StoreCorruptError: naming the problem.
    """
    problem = None
    for _ in range(3):  # a writer in another process may be replacing pages meanwhile
        problem = _check_file(path)
        if problem is None:
            return
    raise StoreCorruptError(
        f"{str(path)!r}: {problem}; restore the store from a copy (LMDB cannot open it safely)"
    )


def _disk_full(location: str) -> bool:
    """True when the file system holding ``location`` has (almost) no space left."""
    try:
        st = os.statvfs(location)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20


class _MapLock:
    """Shared for transactions, exclusive for changing the map size (see above).

    Reentrant for readers: a thread that holds it shared (a snapshot open) may
    begin more transactions even while another thread waits to change the map,
    which then waits for them too. A thread that changes the map while holding
    it shared waits only for the other threads (its own transactions end: LMDB
    cannot keep them across the change).
    """

    def __init__(self) -> None:
        # Taken directly (not through the Condition's Python-level __enter__) where no
        # wait is needed: every transaction passes here twice.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._shared = 0  # transactions open, all threads
        self._waiting = 0  # threads waiting to change the map
        self._changing = False
        self._mine = threading.local()
        #: Map changes so far (a transaction begun before one has ended).
        self.changes = 0

    def acquire_shared(self) -> None:
        mine = self._mine
        held = getattr(mine, "held", 0)
        with self._lock:
            while self._changing or (self._waiting and not held):
                self._cond.wait()
            self._shared += 1
        mine.held = held + 1

    def release_shared(self) -> None:
        self._mine.held -= 1
        with self._lock:
            self._shared -= 1
            if self._waiting:
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        held = getattr(self._mine, "held", 0)
        with self._cond:
            self._waiting += 1
            try:
                while self._changing or self._shared > held:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._changing = True
        try:
            yield
        finally:
            with self._cond:
                self.changes += 1
                self._changing = False
                self._cond.notify_all()


def _reader_pids(table: str) -> set[int]:
    """The pids in LMDB's reader table (``Environment.readers()``)."""
    pids = set()
    for line in table.splitlines()[1:]:
        field = line.split()[:1]
        if field and field[0].isdigit():
            pids.add(int(field[0]))
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _event_key(session: str, seq: int) -> bytes:
    return session.encode() + b"\x00" + _U64.pack(seq)


class _LMDBRead(ReadTxn):
    def __init__(
        self, txn: lmdb.Transaction, dbs: dict[bytes, lmdb._Database], data_file: Path
    ) -> None:
        self._txn = txn
        self._dbs = dbs
        self._data_file = data_file

    def head(self, session: str) -> tuple[int, bytes] | None:
        value = self._txn.get(session.encode(), db=self._dbs[b"heads"])
        if value is None:
            return None
        if len(value) != 40:
            raise StoreCorruptError(
                f"head entry of session {session!r} is {len(value)} bytes, expected 40",
                hint=VERIFY_HINT,
            )
        return _U64.unpack_from(value)[0], bytes(value[8:])

    def get(self, session: str, seq: int) -> bytes | None:
        value = self._txn.get(_event_key(session, seq), db=self._dbs[b"events"])
        return None if value is None else bytes(value)

    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        if every:  # what verify needs: every key, past the head too (it checked pages first)
            return self._cursor_scan(session, start, stop)
        return self._scan_to_head(session, start, stop)

    def _last(self, session: str, stop: int | None) -> int:
        """The last seq to read: the head's, or below ``stop`` (-1: none)."""
        head = self.head(session)
        last = -1 if head is None else head[0]
        return last if stop is None else min(last, stop - 1)

    def _scan_to_head(
        self,
        session: str,
        start: int,
        stop: int | None,
    ) -> Iterator[tuple[int, bytes]]:
        # Events are fetched key by key up to the head: an exact lookup that meets
        # a damaged page gets MDB_CORRUPTED (StoreCorruptError), where a cursor
        # moving to the next page fails an LMDB assertion on it and aborts the
        # process. Only a session with a gap below its head is walked with a
        # cursor from the gap on, as before.
        last = self._last(session, stop)
        get, db, pack = self._txn.get, self._dbs[b"events"], _U64.pack
        prefix = session.encode() + b"\x00"
        seq = max(start, 0)
        while seq <= last:
            value = get(prefix + pack(seq), db=db)
            if value is None:
                yield from self._cursor_scan(session, seq, last + 1)
                return
            yield seq, cast(bytes, value)  # begun with buffers=False: bytes
            seq += 1

    def records(self, session: str, start: int, stop: int | None) -> list[bytes]:
        # `scan` without a generator step per event: the same exact lookups, in
        # one comprehension; a gap below the head (damage) goes the slow way.
        last = self._last(session, stop)
        get, db, pack = self._txn.get, self._dbs[b"events"], _U64.pack
        prefix = session.encode() + b"\x00"
        found = [get(prefix + pack(seq), db=db) for seq in range(max(start, 0), last + 1)]
        if None in found:
            return super().records(session, start, stop)
        return cast(list[bytes], found)  # begun with buffers=False: bytes

    def _cursor_scan(
        self,
        session: str,
        start: int,
        stop: int | None,
    ) -> Iterator[tuple[int, bytes]]:
        name = session.encode()
        prefix = name + b"\x00"
        size = len(prefix) + 8
        # The session's keys sort below ``end``; no other session's keys lie between
        # ``prefix`` and ``name || 0x01``, as session ids hold no control characters.
        end = prefix + _U64.pack(stop) if stop is not None and stop < 2**64 else name + b"\x01"
        cursor = self._txn.cursor(db=self._dbs[b"events"])
        if not cursor.set_range(prefix + _U64.pack(max(start, 0))):
            return
        unpack = _U64.unpack_from
        # Transactions are begun with buffers=False: keys and values are bytes.
        for key, value in cast(Iterator[tuple[bytes, bytes]], iter(cursor)):
            if key >= end or len(key) != size:
                return
            yield unpack(key, size - 8)[0], value

    def sessions(self) -> Iterator[tuple[str, int, bytes]]:
        # Listing walks the heads table with a cursor, which aborts the process on
        # a damaged page (see `scan`); the table is small (an entry per session),
        # so its pages are checked with plain reads first.
        problem = _check_file(self._data_file, txnid=self._txn.id(), deep=(b"heads",))
        if problem is not None:
            raise StoreCorruptError(
                f"{str(self._data_file)!r}: {problem}; run `turnlog "
                "verify` and restore the store from a copy"
            )
        for key, value in self._txn.cursor(db=self._dbs[b"heads"]):
            yield bytes(key).decode(), _U64.unpack_from(value)[0], bytes(value[8:])

    def blob(self, digest: str) -> bytes | None:
        try:
            key = bytes.fromhex(digest)
        except ValueError:
            return None
        value = self._txn.get(key, db=self._dbs[b"blobs"])
        return None if value is None else bytes(value)

    def blobs(self) -> Iterator[tuple[str, bytes]]:
        for key, value in self._txn.cursor(db=self._dbs[b"blobs"]):
            yield bytes(key).hex(), bytes(value)

    def idempotency(self, session: str, key: str) -> int | None:
        value = self._txn.get(session.encode() + b"\x00" + key.encode(), db=self._dbs[b"idem"])
        return None if value is None else int(_U64.unpack_from(value)[0])

    def idempotency_seqs(self, session: str, keys: Sequence[str]) -> list[int | None]:
        get, db, unpack = self._txn.get, self._dbs[b"idem"], _U64.unpack_from
        prefix = session.encode() + b"\x00"
        return [
            None if (value := get(prefix + key.encode(), db=db)) is None else int(unpack(value)[0])
            for key in keys
        ]

    def idempotency_keys(self, session: str) -> Iterator[tuple[str, int]]:
        prefix = session.encode() + b"\x00"
        cursor = self._txn.cursor(db=self._dbs[b"idem"])
        if not cursor.set_range(prefix):
            return
        for key, value in cast(Iterator[tuple[bytes, bytes]], cursor):
            if not key.startswith(prefix):
                return
            yield (
                key[len(prefix) :].decode(errors="surrogateescape"),
                int(_U64.unpack_from(value)[0]),
            )

    def cached(self, namespace: str, key: bytes) -> bytes | None:
        value = self._txn.get(namespace.encode() + b"\x00" + key, db=self._dbs[b"cache"])
        return None if value is None else bytes(value)

    def cache_items(self) -> Iterator[tuple[str, bytes, bytes]]:
        cursor = self._txn.cursor(db=self._dbs[b"cache"])
        for key, value in cast(Iterator[tuple[bytes, bytes]], iter(cursor)):
            namespace, _, name = key.partition(b"\x00")
            yield namespace.decode(errors="replace"), name, value

    def mark(self, name: str) -> str | None:
        value = self._txn.get(b"mark:" + name.encode(), db=self._dbs[b"meta"])
        return None if value is None else bytes(value).decode("utf-8", "replace")


class _LMDBWrite(_LMDBRead, WriteTxn):
    #: Whether anything was put (then a failed write must be aborted, not committed);
    #: a class default, so that beginning a write runs no constructor of its own.
    wrote = False

    def put_event(self, session: str, seq: int, record: bytes) -> None:
        self.put_events(session, seq, (record,))

    def put_events(self, session: str, first_seq: int, records: Sequence[bytes]) -> None:
        if not records:
            return
        self.wrote = True
        prefix = session.encode() + b"\x00"
        db = self._dbs[b"events"]
        # Keys past the last one of the database are appended: LMDB then fills pages
        # instead of splitting them in half, and a batch writes a third fewer pages.
        # That is the common case (the session written last). LMDB refuses to append
        # a key that is not past the last one (MDB_KEYEXIST, nothing written), and
        # such keys are inserted instead. The keys of a batch rise, so the appends
        # succeed all or none unless the session has events beyond its head.
        if len(records) == 1:
            key, record = prefix + _U64.pack(first_seq), records[0]
            put = self._txn.put
            if put(key, record, db=db, append=True) or put(key, record, db=db, overwrite=False):
                return
        else:
            pack = _U64.pack
            items = [(prefix + pack(seq), record) for seq, record in enumerate(records, first_seq)]
            cursor = self._txn.cursor(db=db)
            added = cursor.putmulti(items, overwrite=False, append=True)[1]
            if added == 0:
                added = cursor.putmulti(items, overwrite=False)[1]
            if added == len(items):
                return
        raise StoreCorruptError(
            f"session {session!r} has events beyond its head (from seq "
            f"{first_seq}); run `turnlog verify {session}` (Python: "
            f"`Log.verify({session!r})`)"
        )

    def set_head(self, session: str, seq: int, digest: bytes) -> None:
        self.wrote = True
        self._txn.put(session.encode(), _U64.pack(seq) + digest, db=self._dbs[b"heads"])

    def put_idempotency(self, session: str, key: str, seq: int) -> None:
        self.wrote = True
        self._txn.put(
            session.encode() + b"\x00" + key.encode(), _U64.pack(seq), db=self._dbs[b"idem"]
        )

    def put_blob(self, digest: str, data: bytes) -> None:
        self.wrote = True
        self._txn.put(bytes.fromhex(digest), data, db=self._dbs[b"blobs"], overwrite=False)

    def replace_event(self, session: str, seq: int, record: bytes) -> None:
        self.wrote = True
        self._txn.put(_event_key(session, seq), record, db=self._dbs[b"events"])

    def delete_blob(self, digest: str) -> None:
        self.wrote = True
        self._txn.delete(bytes.fromhex(digest), db=self._dbs[b"blobs"])

    def put_cached(self, namespace: str, key: bytes, value: bytes) -> None:
        self.wrote = True
        self._txn.put(namespace.encode() + b"\x00" + key, value, db=self._dbs[b"cache"])

    def set_mark(self, name: str, value: str | None) -> None:
        self.wrote = True
        if value is None:
            self._txn.delete(b"mark:" + name.encode(), db=self._dbs[b"meta"])
        else:
            self._txn.put(b"mark:" + name.encode(), value.encode(), db=self._dbs[b"meta"])


class LMDBStore(Store):
    """A store in an LMDB environment directory.

    Parameters:
        path: the directory (created unless ``readonly`` or not ``create``).
        readonly: open for reading only; writes raise `StoreReadOnlyError`.
        create: create the store when there is none at ``path``; when False (or
            ``readonly``) a missing store raises `StoreNotFoundError`.
        map_size: initial map size in bytes (grows on demand).
        max_map_size: the map never grows beyond this.
        sync: fsync every commit (durable appends). Turning it off trades
            durability of the last commits on power loss for speed; a crash
            of the process alone loses nothing either way.
    """

    name = "lmdb"

    @refuse_unknown_options("LMDBStore()", usage='LMDBStore("./agent-store")')
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        map_size: int = _INITIAL_MAP,
        max_map_size: int = _MAX_MAP,
        sync: bool = True,
        create: bool = True,
    ) -> None:
        self.location = str(path)
        self.readonly = readonly
        self._max_map = max_map_size
        self._sync = sync
        self._pid = os.getpid()
        self._write_lock = threading.Lock()
        self._map = _MapLock()
        directory = Path(path)
        self._data_file = directory / "data.mdb"
        if (readonly or not create) and not self._data_file.exists():
            how = "for writing" if readonly else "with create=True"
            raise StoreNotFoundError(
                f"no turnlog store at {self.location!r} (no data.mdb); "
                f"check the path or create the store by opening it {how}"
            )
        if directory.exists() and not directory.is_dir():
            raise StoreError(
                f"cannot open the store at {self.location!r}: it is a file, and a store is a "
                "directory (holding data.mdb and lock.mdb); name a directory (created when "
                "missing), ':memory:' or a postgresql:// URL"
            )
        _check_data_file(self._data_file)
        try:
            if not readonly:
                directory.mkdir(parents=True, exist_ok=True)
            self._env = lmdb.open(
                self.location,
                map_size=max(map_size, 1 << 20),
                max_dbs=len(_DBS),
                readonly=readonly,
                lock=True,
                sync=sync,
                metasync=sync,
                max_readers=512,
                subdir=True,
                readahead=False,
                create=not readonly,
            )
        except lmdb.DiskError as exc:
            raise StoreFullError(f"cannot create the store at {self.location!r}: {exc}") from exc
        except lmdb.InvalidError as exc:
            raise StoreCorruptError(f"{self.location!r} is not a valid LMDB store: {exc}") from exc
        except (lmdb.Error, OSError) as exc:
            text = str(exc)
            if not readonly and (
                "Read-only file system" in text
                or "Permission denied" in text
                or isinstance(exc, lmdb.ReadonlyError)
            ):
                raise StoreReadOnlyError(
                    f"cannot open the store at {self.location!r} for writing ({text}); open it "
                    "read-only (turnlog.open(path, readonly=True)) to read, replay and "
                    "verify it"
                ) from exc
            raise StoreError(f"cannot open the store at {self.location!r}: {exc}") from exc
        try:
            self._dbs = self._open_dbs()
            self._check_format()
        except BaseException:
            self._env.close()
            raise

    # -- setup -----------------------------------------------------------------
    def _open_dbs(self) -> dict[bytes, lmdb._Database]:
        try:
            # py-lmdb aborts a read-only transaction even on commit, which would close
            # handles opened inside it; without a txn it keeps them open.
            return {name: self._env.open_db(name, create=not self.readonly) for name in _DBS}
        except lmdb.NotFoundError as exc:
            raise StoreFormatError(
                f"{self.location!r} is an LMDB environment but not a turnlog "
                "store (its databases are missing)"
            ) from exc
        except lmdb.MapResizedError:
            self._env.set_mapsize(0)
            return self._open_dbs()
        except lmdb.Error as exc:
            raise StoreCorruptError(f"cannot read the store at {self.location!r}: {exc}") from exc

    def _check_format(self) -> None:
        with self._guard():
            with self._env.begin(db=self._dbs[b"meta"]) as txn:
                found = txn.get(b"format")
            if found is None:
                with self._env.begin(db=self._dbs[b"events"]) as txn:
                    empty = txn.stat(self._dbs[b"events"])["entries"] == 0
                if not empty:
                    raise StoreFormatError(
                        f"{self.location!r} has events but no format marker; "
                        "it was not written by turnlog"
                    )
                if not self.readonly:
                    self.write(lambda t: t._txn.put(b"format", FORMAT, db=self._dbs[b"meta"]))  # type: ignore[attr-defined]
                return
        if bytes(found) != FORMAT:
            raise StoreFormatError(
                f"store {self.location!r} has format {bytes(found).decode(errors='replace')!r}; "
                f"this turnlog reads {FORMAT.decode()!r}",
                hint=Hint(
                    cli="open it with the turnlog version that wrote it, or export it there "
                    "(`turnlog export`) and import it here",
                    python="open it with the turnlog version that wrote it, or export it "
                    "there (`turnlog export`; Python: `event_to_json`) and import "
                    "it here",
                ),
            )

    # -- guards ------------------------------------------------------------------
    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise ForkedProcessError(
                f"this handle on {self.location!r} was opened in process {self._pid} and is used "
                f"in child {os.getpid()} after fork(); LMDB forbids that, and the inherited "
                "handle keeps the child from opening the path again. Start workers with the "
                "'spawn' start method (multiprocessing.get_context('spawn')) or a subprocess, "
                "or open the log only after fork(), in the process that uses it"
            )

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except (lmdb.Error, OSError) as exc:
            raise self._store_error(exc) from exc

    def _store_error(self, exc: lmdb.Error | OSError) -> StoreError:
        """The `StoreError` that an LMDB or OS error of this store becomes."""
        if isinstance(exc, lmdb.MapFullError):
            return StoreFullError(
                f"the store's map is full at {self._env.info()['map_size']} "
                f"bytes (limit {self._max_map}); nothing was written: open "
                "it with a larger limit, Log(LMDBStore(path, "
                "max_map_size=...))"
            )
        if isinstance(exc, lmdb.DiskError):
            return StoreFullError(
                f"the disk under {self.location!r} is full: {exc}; free space "
                "and retry: nothing was written"
            )
        if isinstance(exc, lmdb.ReadonlyError):
            return StoreReadOnlyError(f"store {self.location!r} is read-only")
        if isinstance(exc, lmdb.CorruptedError):
            return StoreCorruptError(
                f"store {self.location!r} is corrupted: {exc}",
                hint=Hint(
                    cli="run `turnlog verify` on a copy",
                    python="run `turnlog verify` (Python: `Log.verify()`) on a copy",
                ),
            )
        if isinstance(exc, lmdb.Error):
            if "closed" in str(exc).lower() or "deleted" in str(exc).lower():
                return StoreError(f"the store {self.location!r} is closed")
            if _disk_full(self.location):
                # A write that ran out of space is a short write, which LMDB reports
                # as EIO, not ENOSPC: the free space tells the two apart.
                return StoreFullError(
                    f"the disk under {self.location!r} is full ({exc}); free "
                    "space and retry: nothing was written"
                )
            if (
                isinstance(exc, lmdb.InvalidError)
                or "MDB_PAGE_NOTFOUND" in str(exc)
                or "MDB_BAD" in str(exc)
            ):
                return StoreCorruptError(f"store {self.location!r} is corrupted: {exc}")
            return StoreError(f"store {self.location!r} failed: {exc}")
        if exc.errno == errno.ENOSPC:
            return StoreFullError(
                f"the disk under {self.location!r} is full; free space "
                "and retry: nothing was written"
            )
        return StoreError(f"store {self.location!r} failed: {exc}")

    # -- Store -------------------------------------------------------------------
    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        self._check_process()
        with self._guard():
            txn = self._begin(write=False)
        changes = self._map.changes
        try:
            yield _LMDBRead(txn, self._dbs, self._data_file)
        except lmdb.Error as exc:
            if self._map.changes != changes and "closed" in str(exc).lower():
                raise StoreError(
                    f"a write of this thread grew the map of {self.location!r} while this "
                    "snapshot was open, which ended it; take a new snapshot after "
                    "writing"
                ) from exc
            # Only LMDB's own errors are the store's; the caller's pass through.
            with self._guard():
                raise
        finally:
            txn.abort()
            self._map.release_shared()

    def _begin(self, *, write: bool) -> lmdb.Transaction:
        """Begin a transaction holding the map lock shared: release it (`_MapLock.
        release_shared`) once the transaction has ended."""
        while True:
            self._map.acquire_shared()
            try:
                return self._env.begin(write=write, buffers=False)
            except lmdb.MapResizedError:
                self._map.release_shared()
            except BaseException:
                self._map.release_shared()
                raise
            # Another process grew the map: adopt its size and try again.
            with self._map.exclusive():
                self._env.set_mapsize(0)

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        if os.getpid() != self._pid:
            self._check_process()
        if self.readonly:
            raise StoreReadOnlyError(
                f"store {self.location!r} was opened read-only; open it for writing to append"
            )
        # Errors are converted as `_guard` does, without a context manager per write:
        # this is the fixed cost of every append.
        with self._write_lock:
            try:
                while True:
                    txn = self._begin(write=True)
                    handle = _LMDBWrite(txn, self._dbs, self._data_file)
                    try:
                        result = fn(handle)
                        txn.commit()
                    except lmdb.MapFullError:
                        self._end_failed(txn, handle)
                        self._grow()  # and write it all again
                        continue
                    except BaseException:
                        self._end_failed(txn, handle)
                        raise
                    self._map.release_shared()
                    return result
            except (lmdb.Error, OSError) as exc:
                raise self._store_error(exc) from exc

    def _end_failed(self, txn: lmdb.Transaction, handle: _LMDBWrite) -> None:
        """End a write transaction that failed, writing nothing, and release the map lock.

        A write that failed before putting anything (a refused append) is ended
        by committing nothing, which LMDB does without touching the disk.
        Aborting a live write transaction would wait until no other thread of
        the process is inside an LMDB call, and threads reading in tight loops
        can keep one in flight for good; so a write that put something is
        aborted holding the map lock exclusively, with the other threads'
        transactions ended and new ones parked.
        """
        try:
            if not handle.wrote:
                txn.commit()
            else:
                with self._map.exclusive():
                    txn.abort()
        finally:
            txn.abort()  # a no-op once the transaction has ended
            self._map.release_shared()

    def _grow(self) -> None:
        with self._map.exclusive():
            current = int(self._env.info()["map_size"])
            if current >= self._max_map:
                raise lmdb.MapFullError("map size limit reached")
            self._env.set_mapsize(min(current * 2, self._max_map))

    def check_structure(self) -> str | None:
        """The first structural problem of data.mdb, or None (see `Store.check_structure`).

        Walks every page of every database with its own reads, inside a read
        transaction so that no writer reuses the pages walked.
        """
        self._check_process()
        with self._guard():
            txn = self._begin(write=False)
        try:
            return _check_file(self._data_file, txnid=txn.id(), deep=True)
        finally:
            txn.abort()
            self._map.release_shared()

    def scrub(self) -> None:
        """Rewrite data.mdb without its free pages (see `Store.scrub`).

        LMDB frees the pages a write replaced but keeps their bytes until a later
        write reuses them. A compacting copy (``mdb_env_copy2`` with
        ``MDB_CP_COMPACT``) writes only the pages in use; it replaces data.mdb
        (an atomic rename) while this handle holds the write lock and the map lock
        exclusively, and the environment is reopened on it. A kill before the
        rename leaves the old file (a rerun of the erasure scrubs it); after it, the
        new one. Another process with the store open would keep writing to the old
        file, so the scrub refuses while the reader table names another live process.

        Raises:
            StoreError: another process has the store open, or the copy failed.
        """
        self._check_process()
        if self.readonly:
            raise StoreReadOnlyError(
                f"store {self.location!r} was opened read-only; open it for writing to erase"
            )
        directory = Path(self.location)
        tmp = directory / "scrub.tmp"
        with self._write_lock, self._map.exclusive(), self._guard():
            others = _reader_pids(self._env.readers()) - {os.getpid()}
            live = sorted(pid for pid in others if _alive(pid))
            if live:
                raise StoreError(
                    f"cannot scrub the store at {hide_credentials(self.location)!r}"
                    f": process {live[0]} has it open; close the store in every "
                    "other process and run the erasure again (it completes it)"
                )
            if tmp.exists():
                for leftover in tmp.iterdir():
                    leftover.unlink()
            else:
                tmp.mkdir()
            self._env.copy(str(tmp), compact=True)
            size = int(self._env.info()["map_size"])
            self._env.close()
            try:
                os.replace(tmp / "data.mdb", self._data_file)
                fd = os.open(directory, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            finally:
                self._env = lmdb.open(
                    self.location,
                    map_size=size,
                    max_dbs=len(_DBS),
                    lock=True,
                    sync=self._sync,
                    metasync=self._sync,
                    max_readers=512,
                    subdir=True,
                    readahead=False,
                )
                self._dbs = self._open_dbs()
                for leftover in tmp.iterdir():
                    leftover.unlink()
                tmp.rmdir()

    def close(self) -> None:
        if os.getpid() == self._pid:
            self._env.close()

    def sync(self) -> None:
        """Force a flush to disk (only needed when opened with ``sync=False``)."""
        self._check_process()
        with self._guard():
            self._env.sync(True)

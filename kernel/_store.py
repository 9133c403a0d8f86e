"""The storage interface every log backend implements.

Theory of operation
-------------------
A backend stores opaque records and knows nothing about events, hashes or
policies: `Log` (in ``log``) owns validation, hashing, idempotency and
concurrency rules and runs them inside one backend transaction, so each rule
is written once and every backend passes the same conformance suite.

* ``read()`` yields a `ReadTxn`: a consistent snapshot. A reader never sees
  half of a write, and never blocks a writer.
* ``write(fn)`` runs ``fn`` with a `WriteTxn` and commits atomically; nothing
  of it is visible, or durable, unless ``fn`` returns. Writers are serialized
  (across processes, for backends that allow several). A backend may run
  ``fn`` more than once (e.g. after growing its map), so ``fn`` must only act
  through the transaction.

Keys: a session id is a str without NUL; seqs are dense from 0. The backend
keeps, per session, a head ``(seq, hash)``; per ``(session, key)`` an
idempotency entry (which `Log.verify` checks against the keyed events, through
``idempotency_seqs`` and, where the backend can list them, ``idempotency_keys``);
per blob hash the blob bytes; and a small derived cache (token counts) that may
be dropped at any time.

Subclassing `Store`, `ReadTxn` and `WriteTxn` is the one supported way to add
a backend.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

from ._errors import StoreError

__all__ = ["ReadTxn", "Store", "WriteTxn", "hide_credentials"]

T = TypeVar("T")


class ReadAheadMiss(Exception):
    """A `Store.read_ahead` transaction was asked for what it did not fetch."""


class ReadTxn(ABC):
    """A consistent, read-only view of a store."""

    @abstractmethod
    def head(self, session: str) -> tuple[int, bytes] | None:
        """``(seq, hash)`` of the session's last event, or None if it has none."""

    @abstractmethod
    def get(self, session: str, seq: int) -> bytes | None:
        """The stored record at ``(session, seq)``."""

    @abstractmethod
    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        """``(seq, record)`` for ``start <= seq < stop`` (to the head when stop is None).

        With ``every``, every record stored for the session in that range, also
        past the head (what `Log.verify` must see in a damaged store).
        """

    def records(self, session: str, start: int, stop: int | None) -> list[bytes]:
        """The records `scan` yields, without their seqs, as one list (what `Log.read`
        decodes). A backend may override it with a faster bulk fetch."""
        return [record for _, record in self.scan(session, start, stop)]

    @abstractmethod
    def sessions(self) -> Iterator[tuple[str, int, bytes]]:
        """``(session, head seq, head hash)`` for every session, ordered by session id."""

    @abstractmethod
    def blob(self, digest: str) -> bytes | None:
        """The blob with this hex hash."""

    def has_blob(self, digest: str) -> bool:
        """Whether the blob with this hex hash is stored (without reading it, where
        the backend can)."""
        return self.blob(digest) is not None

    @abstractmethod
    def blobs(self) -> Iterator[tuple[str, bytes]]:
        """Every ``(hex hash, bytes)`` blob, ordered by hash."""

    @abstractmethod
    def idempotency(self, session: str, key: str) -> int | None:
        """The seq stored under an idempotency key of a session."""

    def idempotency_seqs(self, session: str, keys: Sequence[str]) -> list[int | None]:
        """`idempotency` of each of ``keys``, in order (what `Log.verify` checks a
        session's keyed events against). A server backend looks them up at once."""
        return [self.idempotency(session, key) for key in keys]

    def idempotency_keys(self, session: str) -> Iterator[tuple[str, int]] | None:
        """Every ``(key, seq)`` of a session's idempotency index, ordered by key, or
        None for a backend that cannot list it (`Log.verify` then checks only that
        each keyed event is indexed at its seq)."""
        return None

    @abstractmethod
    def cached(self, namespace: str, key: bytes) -> bytes | None:
        """A derived-cache value (e.g. a token count)."""

    def cache_items(self) -> Iterator[tuple[str, bytes, bytes]]:
        """Every ``(namespace, key, value)`` of the derived cache, ordered by
        namespace and key: what a copy of the store carries over. A backend that
        cannot list its cache raises `StoreError` (a copy then goes without it;
        the cache is rebuilt on use)."""
        raise StoreError(f"{type(self).__name__} cannot list its cache")

    def mark(self, name: str) -> str | None:
        """A store-wide mark (e.g. ``copy``: the store is an unfinished copy), or None.

        Marks are kept beside the store's format version, never in a session;
        a backend without them has none.
        """
        return None


class WriteTxn(ReadTxn):
    """A read view plus buffered writes, committed atomically."""

    @abstractmethod
    def put_event(self, session: str, seq: int, record: bytes) -> None:
        """Store a record at ``(session, seq)``; seqs are written in order."""

    def put_events(self, session: str, first_seq: int, records: Sequence[bytes]) -> None:
        """Store consecutive records from ``(session, first_seq)`` on.

        One `put_event` per record unless the backend writes a batch faster.
        """
        for seq, record in enumerate(records, first_seq):
            self.put_event(session, seq, record)

    @abstractmethod
    def set_head(self, session: str, seq: int, digest: bytes) -> None:
        """Set the session head."""

    @abstractmethod
    def put_idempotency(self, session: str, key: str, seq: int) -> None:
        """Remember that ``key`` was appended at ``seq``."""

    @abstractmethod
    def put_blob(self, digest: str, data: bytes) -> None:
        """Store a blob (a no-op when present)."""

    @abstractmethod
    def put_cached(self, namespace: str, key: bytes, value: bytes) -> None:
        """Store a derived-cache value."""

    def replace_event(self, session: str, seq: int, record: bytes) -> None:
        """Replace the stored record at ``(session, seq)`` (which exists): what an
        erasure writes in place of an erased event, and nothing else.

        Raises:
            StoreError: the backend cannot erase.
        """
        raise StoreError(f"{type(self).__name__} cannot erase events")

    def delete_blob(self, digest: str) -> None:
        """Delete a blob (a no-op when absent): what an erasure does with the blobs
        only erased events referred to.

        Raises:
            StoreError: the backend cannot erase.
        """
        raise StoreError(f"{type(self).__name__} cannot erase blobs")

    def set_mark(self, name: str, value: str | None) -> None:
        """Set a store-wide mark (see `ReadTxn.mark`), or remove it (None).

        Raises:
            StoreError: the backend keeps no marks.
        """
        raise StoreError(f"{type(self).__name__} keeps no store marks")


class Store(ABC):
    """A log backend. See the module docstring for the contract."""

    #: A short name ("lmdb", "memory") used in messages.
    name: str = "store"
    #: Where the store lives ("" for in-memory stores).
    location: str = ""
    readonly: bool = False

    @abstractmethod
    def read(self) -> AbstractContextManager[ReadTxn]:
        """A read transaction (snapshot)."""

    def read_ahead(self, session: str, seq: int, start: int) -> AbstractContextManager[ReadTxn]:
        """A read transaction like `read`, for a reader that will want the session's
        head, its event ``seq`` and its events from ``start`` up to ``seq``: a store
        whose reads cost round trips may fetch them all at once, end the transaction,
        and raise `ReadAheadMiss` for a read of anything else (the reader then reads
        again through `read`). This default is `read`."""
        return self.read()

    @abstractmethod
    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run ``fn`` in a write transaction and commit; return its result.

        Raises:
            StoreReadOnlyError: the store was opened read-only.
            StoreFullError: the store cannot grow.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the store; further use raises `StoreError`."""

    def wait(self, session: str, after_seq: int, timeout: float) -> bool:
        """Block until the session's head seq is above ``after_seq`` (True) or
        ``timeout`` seconds have passed (False); what `Log.follow` waits with.

        The default polls the head every 20 ms, which suits an embedded store
        (a read is a few microseconds); a server backend overrides it to wake
        on a notification instead.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            with self.read() as txn:
                head = txn.head(session)
            if head is not None and head[0] > after_seq:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.02))

    def listen(self) -> AbstractContextManager[Callable[[str, int, float], bool]]:
        """A `wait` for one follower, for as long as the context lasts: what
        `Log.follow` waits with. A server backend holds a connection of its own
        for it and releases it when the context ends; the default is `wait`."""
        return nullcontext(self.wait)

    def scrub(self) -> None:
        """Leave no copy of deleted or replaced data in the store's files (after an
        erasure): free pages, dead rows, logs. The default has none to remove (an
        in-memory store keeps no old copies)."""
        return None

    def check_structure(self) -> str | None:
        """The first problem of the store's own structure (below the events), or None.

        `Log.verify` calls it before reading anything, so that a backend whose
        library would crash on damaged files (LMDB maps them and trusts every page)
        can report the damage instead. The default has nothing to check.
        """
        return None


# libpq's secret parameters, in a URL's query or a "key=value" connection string.
_SECRET_PARAMS = frozenset({"password", "sslpassword"})
_CONNINFO_SECRET = re.compile(
    r"(?<![\w.])(?:ssl)?password\s*=\s*(?:'(?:[^'\\]|\\.)*'?|\S*)\s*", re.IGNORECASE
)


def hide_credentials(location: str) -> str:
    """A store location as it may be shown: without the passwords it carries.

    Everything turnlog prints about a store (messages, reprs, ``--json``, the
    command's hints) goes through this one function. A URL loses the password
    of its user info (``postgresql://agent:pw@db/x`` becomes
    ``postgresql://agent@db/x``) and its ``password`` and ``sslpassword``
    query parameters; a ``key=value`` connection string loses those
    parameters. A directory path is returned unchanged.

    Parameters:
        location: a store directory, a URL or a libpq connection string.

    Returns:
        The location without credentials (unchanged when it has none).
    """
    scheme, sep, rest = location.partition("://")
    if not sep or not scheme or not scheme.replace("+", "").isalnum():
        return _CONNINFO_SECRET.sub("", location).rstrip() if "=" in location else location
    # The user info ends at the last "@" before the path: like libpq, a "/" ends the
    # authority; an "@" or "?" inside a password are hidden with it.
    slash = rest.find("/")
    authority = rest if slash < 0 else rest[:slash]
    at = authority.rfind("@")
    if at >= 0:
        user = authority[:at].partition(":")[0]
        rest = f"{user}@{rest[at + 1 :]}" if user else rest[at + 1 :]
    head, qsep, query = rest.partition("?")
    if qsep:
        kept = [
            part
            for part in query.split("&")
            if part.partition("=")[0].strip().lower() not in _SECRET_PARAMS
        ]
        rest = f"{head}?{'&'.join(kept)}" if kept else head
    return f"{scheme}://{rest}"

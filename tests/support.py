"""Helpers shared by the log test modules: opening backends, dumping a store, strategies.

A *dump* is everything a backend holds, read two ways: through the `Store`
interface (sessions, records, blobs) and through the backend's own state (all
LMDB databases plus the bytes of ``data.mdb``; the in-memory dicts), so a
test can say "the store is byte for byte unchanged" and mean it.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pgserver
import psycopg
import pytest
import turnlog
from hypothesis import strategies as st
from turnlog import Draft, Log
from turnlog.events import (
    AssistantMessageAdded,
    Event,
    NotificationAdded,
    TextPart,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.log import Problem, VerifyReport
from turnlog.memories import MemoryManager
from turnlog.stores import LMDBStore, MemoryStore, PostgresStore

T = TypeVar("T")

__all__ = [
    "BACKENDS",
    "GENESIS_HASH",
    "LogFactory",
    "backend_params",
    "bodies",
    "body_of",
    "dump",
    "head_seq",
    "keyed_batch",
    "problem_of",
    "recompute_hash",
    "safe_text",
    "texts",
]

#: Every backend the conformance suite runs against. A new backend adds one name here
#: and one branch in `LogFactory.open`. PostgreSQL runs on a server the test run
#: starts itself (pgserver.py); its tests skip, saying how to install one, when the
#: server binaries are missing.
BACKENDS = ("lmdb", "memory", "postgres")

#: The golden stores under tests/golden (one per release, oldest first).
GOLDEN_VERSIONS = sorted(
    (p.name for p in (Path(__file__).parent / "golden").glob("v*") if (p / "store").is_dir()),
    key=lambda name: tuple(int(part) for part in name[1:].split(".")),
)

_SCHEMAS = itertools.count()


def backend_params() -> list[Any]:
    """`BACKENDS` as pytest params, the PostgreSQL one skipped without a server."""
    return [
        pytest.param(
            name, marks=pytest.mark.skipif(not pgserver.available(), reason=pgserver.SKIP_REASON)
        )
        if name == "postgres"
        else name
        for name in BACKENDS
    ]


GENESIS_HASH = bytes(32)

_CANONICAL = msgspec.msgpack.Encoder(order="deterministic")


class LogFactory:
    """Opens logs of one backend in fresh locations and closes them all at the end.

    For LMDB every log gets its own directory under ``root``; `reopen` closes a
    handle and opens the same directory again, as a restarted process would.
    For memory, `reopen` returns the same log (there is nothing to reopen). For
    PostgreSQL every log gets its own schema on the shared test server, dropped by
    `close_all`.
    """

    def __init__(self, backend: str, root: Path, *, sync: bool = True) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}")
        self.backend = backend
        self.root = root
        self.sync = sync
        self._count = 0
        self._open: list[Log] = []
        self._schemas: list[str] = []

    def open(self, **options: Any) -> Log:
        """A new, empty log of this backend."""
        if self.backend == "memory":
            log = turnlog.open(":memory:", **options)
        elif self.backend == "postgres":
            schema = f"t{os.getpid()}_{next(_SCHEMAS)}"
            self._schemas.append(schema)
            log = turnlog.open(pgserver.shared().url(schema=schema), **options)
        else:
            self._count += 1
            path = self.root / f"store{self._count}"
            log = turnlog.open(path, sync=self.sync, **options)
        self._open.append(log)
        return log

    def reopen(self, log: Log, **options: Any) -> Log:
        """Close ``log`` and open its store again (LMDB); the same log for memory."""
        if self.backend == "memory":
            return log
        location = log.store.location
        if isinstance(log.store, PostgresStore):
            location = pgserver.shared().url(schema=log.store.schema)
        log.close()
        self._open = [other for other in self._open if other is not log]
        fresh = turnlog.open(location, sync=self.sync, **options)
        self._open.append(fresh)
        return fresh

    def close_all(self) -> None:
        """Close every log this factory opened (errors ignored: a test may have closed it)."""
        for log in self._open:
            with contextlib.suppress(turnlog.KernelError):
                log.close()
        self._open.clear()
        if self._schemas:
            drop_schemas(self._schemas)
            self._schemas.clear()


def drop_schemas(schemas: list[str]) -> None:
    """Drop test schemas from the shared PostgreSQL server."""
    with psycopg.connect(pgserver.shared().url(), autocommit=True) as conn:
        for schema in schemas:
            conn.execute(
                psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    psycopg.sql.Identifier(schema)
                )
            )


def temp_factory(
    backend: str,
    *,
    sync: bool = False,
) -> tuple[LogFactory, tempfile.TemporaryDirectory[str]]:
    """A `LogFactory` in its own temporary directory (for hypothesis machines, which
    cannot use function-scoped pytest fixtures). The caller cleans up both."""
    tmp = tempfile.TemporaryDirectory(prefix="turnlog-test-")
    return LogFactory(backend, Path(tmp.name), sync=sync), tmp


def dump(log: Log) -> dict[str, Any]:
    """Everything the log's store holds, as comparable plain data."""
    store = log.store
    out: dict[str, Any] = {}
    with store.read() as txn:
        heads = list(txn.sessions())
        out["sessions"] = heads
        out["events"] = {
            name: [(seq, bytes(rec)) for seq, rec in txn.scan(name, 0, None, every=True)]
            for name, _, _ in heads
        }
        out["blobs"] = list(txn.blobs())
    if isinstance(store, LMDBStore):
        out["raw"] = _lmdb_raw(store)
        data = Path(store.location) / "data.mdb"
        out["data.mdb"] = hashlib.sha256(data.read_bytes()).hexdigest()
    elif isinstance(store, MemoryStore):
        out["raw"] = _memory_raw(store)
    elif isinstance(store, PostgresStore):
        out["raw"] = _postgres_raw(store)
    return out


def _postgres_raw(store: PostgresStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every turnlog table of ``store``'s schema, in key order."""
    tables = {
        "meta": "key",
        "events": "session, seq",
        "heads": "session",
        "idem": "session, key",
        "blobs": "hash",
        "cache": "namespace, key",
    }
    raw: dict[str, list[tuple[Any, ...]]] = {}
    with psycopg.connect(pgserver.shared().url(), autocommit=True) as conn:
        for table, order in tables.items():
            query = psycopg.sql.SQL("SELECT * FROM {}.{} ORDER BY " + order).format(
                psycopg.sql.Identifier(store.schema), psycopg.sql.Identifier(table)
            )
            raw[table] = conn.execute(query).fetchall()
    return raw


def _lmdb_raw(store: LMDBStore) -> dict[bytes, list[tuple[bytes, bytes]]]:
    """Every key and value of every named LMDB database of ``store``."""
    env = store._env
    raw: dict[bytes, list[tuple[bytes, bytes]]] = {}
    with env.begin(buffers=False) as txn:
        for name, db in store._dbs.items():
            raw[name] = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    return raw


def _memory_raw(store: MemoryStore) -> dict[str, Any]:
    """Copies of the in-memory store's tables."""
    return {
        "events": {k: list(v) for k, v in store._events.items()},
        "heads": dict(store._heads),
        "idem": dict(store._idem),
        "blobs": dict(store._blobs),
        "cache": dict(store._cache),
    }


def recompute_hash(event: Event) -> bytes:
    """``blake3(prev || canonical)`` computed here, independently of turnlog._chain."""
    import blake3

    bare = msgspec.structs.replace(event, prev=b"", hash=b"")
    return blake3.blake3(event.prev + _CANONICAL.encode(bare)).digest()


def keyed_batch(prefix: str, n: int, *, time: int | None = None) -> list[Draft]:
    """``n`` user messages with idempotency keys ``prefix-0 .. prefix-(n-1)``."""
    return [
        Draft(body=UserMessageAdded(text=f"{prefix} message {i}"), key=f"{prefix}-{i}", time=time)
        for i in range(n)
    ]


def iter_all(log: Log) -> Iterator[Event]:
    """Every event of every session, in session order."""
    with log.snapshot() as snap:
        for head in snap.sessions():
            yield from snap.iter(head.session)


#: Text without lone surrogates (valid UTF-8 once encoded).
safe_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


def bodies(*, big: bool = True) -> st.SearchStrategy[Any]:
    """Payloads the log must store as given (blob-sized text when ``big``)."""
    text = safe_text
    if big:
        # Now and then one that crosses the default blob threshold (64 KiB).
        text = st.one_of(
            safe_text, safe_text.filter(bool).map(lambda s: s * (70_000 // len(s) + 1))
        )
    return st.one_of(
        st.builds(UserMessageAdded, text=text),
        st.builds(
            ToolResultAdded,
            call_id=st.just("call-1"),
            tool_name=st.just("bash"),
            output=text,
            is_error=st.booleans(),
        ),
        st.builds(NotificationAdded, source=st.just("watcher"), text=safe_text),
        st.builds(
            AssistantMessageAdded,
            parts=st.lists(st.builds(TextPart, text=safe_text), min_size=1, max_size=3).map(tuple),
        ),
    )


# -- typed access (the tests are type-checked: these narrow what an assertion reads) ----
def body_of(event: Event, kind: type[T]) -> T:
    """``event``'s payload, which must be a ``kind``."""
    body = event.body
    assert isinstance(body, kind), f"{event.session}#{event.seq} is a {event.kind!r} event"
    return body


def texts(events: Iterable[Event]) -> list[str]:
    """The ``text`` of each event's payload (user messages, notifications, sections)."""
    found = []
    for event in events:
        text = getattr(event.body, "text", None)
        assert isinstance(text, str), f"{event.session}#{event.seq} has no text"
        found.append(text)
    return found


def head_seq(log: Log, session: str) -> int:
    """The seq of ``session``'s head, which must exist."""
    head = log.head(session)
    assert head is not None, f"no session {session!r}"
    return head.seq


def problem_of(report: VerifyReport) -> Problem:
    """The problem a failed verification names."""
    assert report.problem is not None, report
    return report.problem


def lapsing_memories(path: Path) -> None:
    """A store at ``path`` with session ``chat`` and, in ``chat-memories``, a memory of
    each kind of lapse: m0 past its position (``expires_seq`` 1), m1 not yet (5), m2 at
    a time, m3 never."""
    with turnlog.open(path) as log:
        log.append("chat", UserMessageAdded(text="hello"))
        memories = MemoryManager(log, memory_session="chat-memories")
        memories.save("Old", "lapses soon", expires_seq=1)
        memories.save("Later", "lapses later", expires_seq=5)
        memories.save("Timed", "lapses at a time", expires_time=1_710_234_116_650_016)
        memories.save("Kept", "never lapses")

"""The server backend: PostgreSQL, shared by many processes on many hosts.

Theory of operation
-------------------
Six tables in one schema (``turnlog`` unless the URL says ``schema=...``):

* ``events (session, seq) -> record``: the records, byte for byte those of LMDB;
* ``heads (session) -> (seq, hash)``: one row per session;
* ``idem (session, key) -> seq``;
* ``blobs (hash) -> data``: content-addressed, inserted ``ON CONFLICT DO NOTHING``;
* ``cache (namespace, key) -> value``: derived, droppable;
* ``meta (key) -> value``: ``schema`` holds the schema version, `SCHEMA`;
  ``functions`` the version of the one function, `FUNCTIONS`: ``refuse()``.

Text keys use the "C" collation, so sessions list in code point order, as on
LMDB, whatever the database's locale.

A read is one ``REPEATABLE READ READ ONLY`` transaction on a pooled
connection: a snapshot that never sees half a batch and never blocks a writer.
`PostgresStore.read_ahead` sends such a transaction whole, ``BEGIN`` to
``COMMIT``, as one pipeline (a replay's reads: one round trip). A read ends
with ``COMMIT`` (it wrote nothing): after a ``ROLLBACK`` psycopg forgets the
statements it prepared on the connection. Rows come in binary (a record's bytes as
stored; as text, ``bytea`` is hex, twice the size, encoded by the server and
decoded by the client). A read of a whole range (`ReadTxn.records`, what
`Log.read` decodes) pages by runs of seqs up to the head and sends each page's
query before it awaits the rows of the page before, in one pipeline.
A write is one ``READ COMMITTED`` transaction. It reads the session head with
``SELECT ... FOR UPDATE``, so writers of one session queue on that row lock
(and then see the head the previous writer left) while writers of other
sessions never wait for each other. A session's first writers have no row to
lock: they race, and the primary keys of ``heads``, ``events`` and ``idem``
make all but one fail with a unique violation. Such a transaction (and one
the server aborted as a serialization failure or deadlock) is known to have
written nothing, so ``fn`` runs again from the start in a new transaction,
where `Log` sees the new head: an ``expected_seq`` conflict, an idempotent
retry, or an append after it. Conflicts are thus detected by the database and
never lost.

Writes are buffered in the transaction object and sent at the end in one
pipeline with the ``COMMIT``, reads inside the transaction see them (as in the
in-memory store). A head read is moved with a plain ``UPDATE`` (its row is
locked already), a head found missing is created with a plain ``INSERT``.

A store remembers the head each of its writes left; the next write of that
session is given it without a read, and idempotency keys are taken as new, so
that an append of one event is one round trip. The pipeline then starts with
the statement that moves the head assumed: ``UPDATE heads SET seq, hash WHERE
session, seq and hash are the ones assumed``, which calls ``refuse()`` (a
serialization failure: nothing was written, ``fn`` runs again with everything
read) when it matched no row. The update takes the row lock itself: a writer
that holds it is waited for, and the row it left is checked again (READ
COMMITTED), so no separate lock is taken or written to the WAL. A key taken as
new is checked by the primary key of ``idem`` when it is inserted: a unique
violation, which likewise runs ``fn`` again with reads (a head assumed and left
where it was, or a key assumed but not written, is locked and checked by the
statement ``expect``). ``fn`` runs again with reads too when it raised on an
assumed head (an ``expected_seq`` conflict might be a retry of stored keys), so
a keyed retry is recognised before ``expected_seq`` is checked, as on every
backend. A flush request precedes the ``COMMIT``: the answers to everything
before it leave the server before the ``COMMIT`` runs, so a connection lost
before the last of them arrived committed nothing and the write runs again on
another connection; a server error answering a statement before the ``COMMIT``
(a terminated backend's FATAL, a timeout, a unique violation) likewise. An append
of one session to the head assumed (its events and keys, nothing else) is one
statement between ``BEGIN`` and ``COMMIT`` ("append"): the head's update is a
``WITH`` part that the main query reads, so it runs first and refuses before
anything is inserted; the inserts are the other parts (from plain values for one
event, "append_one": arrays cost psycopg's adaptation and the server's unnest). One
round trip, one WAL flush. A write's statements are queued, not sent one by one
(`_queue`): the pipeline's end writes them to the server at once and reads every
answer. An append of one event goes on libpq's pipeline directly
(`_PostgresWrite._commit_wire`), without psycopg's pipeline object (about 100 µs of
Python, as much as the server's work for the append): its statement, prepared on
each connection's first use, runs alone in an implicit transaction that the sync
after it commits, with no ``BEGIN`` or ``COMMIT``; the flush request between them
still sends its answer first. A store opened
for writing creates the function, also in a schema an older turnlog created
(which still reads and writes it: the tables are unchanged); without the
privilege, every write reads first.

After the commit, a ``NOTIFY`` on the schema's channel names each session
written, which wakes followers (`PostgresStore.wait`), and only while somebody
follows. A follower's connection ``LISTEN``s, then holds the channel's advisory
lock shared for as long as it follows, and only then reads the head. The
notification's statement tries to take that lock exclusively: when it gets it,
nobody follows and nothing is sent (its transaction takes no xid: no commit
record, nothing queued, no notify lock), and a follower that asks for the lock
meanwhile waits until that transaction ends, after the append's commit, so its
read of the head finds the append. A committing ``NOTIFY`` holds a database-wide
lock until its commit record is on disk, so the statement runs in a transaction
of its own, after the append's, with ``synchronous_commit`` off (the append's
``COMMIT AND CHAIN`` begins it, or for one event the append's sync ends the
append's implicit transaction and a second sync the notification's; when it
notifies, it writes a commit record of 34 bytes that nobody waits to flush):
inside the append's transaction, or waiting for its own flush, it would serialize
every writer behind one fsync at a time. A failure of that second transaction
(the lock past ``lock_timeout``, a full notification queue, the connection lost
after the append's commit) never fails the committed append: the notification is
dropped.
A follower that misses a notification still re-reads the head every second.
Opening the store checks that NOTIFY works in a transaction it rolls back,
which takes no lock.

Failures map onto `StoreError` subclasses at this boundary, each message one
line: a lost connection, a server shutting down, a statement or lock timeout
is `StoreUnavailableError`, which says whether the batch may have been
committed (only when the connection failed during ``COMMIT``); a full disk is
`StoreFullError`. A server that refuses the first connection for good (no
such database or role, failed authentication) is a `StoreError` at once with
the server's reason; one that cannot be reached is retried for
``pool_timeout``. The password of the URL never appears in a message or a
repr: `location` is the URL without it (`hide_credentials`), and psycopg's
log records get a handler of their own so that they reach stderr only
through an application's logging configuration.

The backend relies on: transactions with ``READ COMMITTED`` and ``REPEATABLE
READ``, ``SELECT ... FOR UPDATE``, primary keys, ``INSERT ... ON CONFLICT``,
``unnest`` of arrays, ``UPDATE`` and ``INSERT`` in ``WITH`` parts, ``bytea`` and
the "C" collation; ``LISTEN``/``NOTIFY``, advisory locks and ``COMMIT AND CHAIN``
only for waking followers (without them followers poll).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, LiteralString, TypeVar

import blake3

from ._errors import (
    ForkedProcessError,
    InvalidArgumentError,
    InvalidEventError,
    StoreCorruptError,
    StoreError,
    StoreFormatError,
    StoreFullError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from ._store import ReadAheadMiss, ReadTxn, Store, WriteTxn, hide_credentials
from ._validation import (
    check_integer,
    check_number,
    check_type,
    invalid,
    refuse_unknown_options,
)

try:
    import psycopg
    import psycopg_pool
    from psycopg import errors as pg_errors
    from psycopg import generators, pq, sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg.pq import TransactionStatus
except ImportError:  # the optional extra is not installed: PostgresStore says so
    _HAVE_PSYCOPG = False
    _QUEUE_STEPS = False
    _WIRE = False
else:
    _HAVE_PSYCOPG = True
    # The steps of psycopg's Cursor.execute that `_queue` runs without the send and
    # read at its end (psycopg 3.2 and later have them); otherwise each statement
    # goes through execute.
    _QUEUE_STEPS = all(
        hasattr(psycopg.Cursor, name)
        for name in ("_start_query", "_convert_query", "_maybe_prepare_gen")
    )
    # A one-event append goes to libpq's pipeline directly (`_exchange`): libpq has
    # pipeline mode from 14, but this is tested with the libpq psycopg's binary package
    # brings (18); before 17, psycopg's pipeline object serves. psycopg 3.1 and later
    # have these generators.
    _WIRE = pq.version() >= 170000 and all(
        hasattr(generators, name) for name in ("send", "fetch_many")
    )
    # psycopg_pool logs every failed connection attempt as a warning; where the
    # application configured no logging, Python would print those on stderr
    # (logging.lastResort) above turnlog's own one-line error. With a handler of
    # their own they stay out of that output and still reach the handlers of an
    # application that configures logging.
    logging.getLogger("psycopg").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from typing import TypeAlias

    from psycopg import Connection, Cursor
    from psycopg.abc import PQGen
    from psycopg.pq.abc import PGconn, PGresult
    from psycopg.rows import TupleRow

    # A statement queued in a write's pipeline, by `_queue` or `_command`.
    _Answer: TypeAlias = "Cursor[TupleRow] | _Command"

__all__ = ["PostgresStore"]

T = TypeVar("T")

#: The schema version this turnlog reads and writes.
SCHEMA = "turnlog-postgres/1"

# At most 55 characters: the NOTIFY channel, "turnlog." and the schema, is an
# identifier of at most 63 bytes.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,54}\Z")
_PAGE = 1000  # rows fetched per query when scanning a session
_BLOB_BYTES = 8 * 2**20  # blob bytes fetched per query when listing blobs (or one larger blob)
_RETRIES = 64  # write attempts lost to a racing writer before giving up
_RECHECK = 1.0  # a follower re-reads the head at least this often (seconds)
_SEEN = 4096  # sessions whose last written head a store remembers
_SECRET_KEYS = ("password", "sslpassword")
# A REPEATABLE READ transaction takes its snapshot at its first query, not at BEGIN:
# the snapshot must be the state when `read` was entered, so a query follows at once
# (in the same round trip).
_BEGIN_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT 1"
_BEGIN_READ = b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
# A read ends with COMMIT, not ROLLBACK: the same for a read-only transaction (it
# wrote nothing, it writes no WAL), but psycopg forgets every statement it prepared
# on a connection when it sees a ROLLBACK succeed (and deallocates them on the
# server), so the next read would parse and plan each statement again.
_END_READ = b"COMMIT"

# The notifications after a write, one for each session written, in a transaction
# of its own that does not wait for the disk (see the module docstring): the
# setting holds until that transaction ends. They are sent only when somebody
# follows: each follower's connection holds the channel's advisory lock shared
# (`_Listener`), and the transaction tries to take it exclusively. Taken, nobody
# follows and nothing is sent (a transaction without an xid: no commit record, no
# notification queue, no notify lock); a follower that asks for the lock meanwhile
# waits until this transaction ends, and reads the head only then.
_NOTIFY = (
    b"SELECT set_config('synchronous_commit', 'off', true), pg_notify(%s, s) "
    b"FROM unnest(%s::text[]) AS s WHERE NOT pg_try_advisory_xact_lock(%s)"
)

_NOTIFY_ONE = (
    b"SELECT set_config('synchronous_commit', 'off', true), pg_notify(%s, %s) "
    b"WHERE NOT pg_try_advisory_xact_lock(%s)"
)

# What a follower's connection holds while it LISTENs (see `_NOTIFY`).
_FOLLOW = b"SELECT pg_advisory_lock_shared(%s)"


@functools.cache
def follow_key(channel: str) -> int:
    """The advisory lock key of a channel's followers: 64 bits of its blake3 hash."""
    digest = blake3.blake3(b"turnlog.follow\x00" + channel.encode()).digest(8)
    return int.from_bytes(digest, "big", signed=True)


def _queue(
    conn: Connection[TupleRow],
    query: bytes,
    params: tuple[object, ...] | None = None,
    *,
    prepare: bool = False,
) -> Cursor[TupleRow]:
    """``conn.execute(query, params, prepare=prepare)`` in a pipeline, queued only.

    psycopg's ``execute`` in a pipeline sends what is queued and reads what has
    arrived at every statement (a write to the socket, a poll, the server woken
    for each); a write's statements are queued with psycopg's own steps instead
    (its adaptation of the parameters, its cache of prepared statements, the
    cursor the answer is given to), and the pipeline's end sends them at once.
    The connections are in autocommit, so nothing is sent before the statement.
    """
    cursor = conn.cursor()
    if _QUEUE_STEPS:
        # (generators that, in a pipeline, only queue: run to their end, never waiting)
        for _ in cursor._start_query(query):
            raise StoreError("psycopg sent a statement while turnlog queued one")
        pgq = cursor._convert_query(query, params)
        for _ in cursor._maybe_prepare_gen(pgq, prepare=prepare):
            raise StoreError("psycopg sent a statement while turnlog queued one")
        cursor._last_query = query
        return cursor
    return cursor.execute(query, params, prepare=prepare)  # pragma: no cover


class _Command:
    """The answer to a statement without parameters queued by `_command`: what a
    cursor keeps of it (`pgresult`, `statusmessage`), without a cursor."""

    __slots__ = ("_encoding", "pgresult")

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self.pgresult: PGresult | None = None

    @property
    def statusmessage(self) -> str | None:
        status = None if self.pgresult is None else self.pgresult.command_status
        return status.decode() if status else None

    # What psycopg's pipeline calls on a cursor with the answer to its statement.
    def _check_results(self, results: list[PGresult]) -> None:
        for result in results:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                raise psycopg.errors.error_from_result(result, encoding=self._encoding)
            if result.status == pq.ExecStatus.PIPELINE_ABORTED:
                raise pg_errors.PipelineAborted("pipeline aborted")

    def _set_results(self, results: list[PGresult]) -> None:
        self.pgresult = results[-1] if results else None


def _command(conn: Connection[TupleRow], query: bytes) -> _Answer:
    """A statement without parameters (``BEGIN``, ``COMMIT``) queued in a pipeline as
    psycopg queues its own, without the cursor, the adaptation and the preparation
    `_queue` goes through; its answer is kept all the same."""
    pipeline = conn._pipeline
    if not _QUEUE_STEPS or pipeline is None:
        return _queue(conn, query)  # pragma: no cover
    answer = _Command(conn.info.encoding)
    pipeline.command_queue.append(functools.partial(conn.pgconn.send_query_params, query, None))
    pipeline.result_queue.append((answer, None))  # type: ignore[arg-type]
    return answer


# The appends that go on the wire (`_PostgresWrite._commit_wire`), each prepared on a
# connection as "turnlog_" and its name (the notification's statement: "turnlog_notify").
_WIRED = ("append_one", "append_one_keyed")
_INT8 = struct.Struct(">q").pack
if _HAVE_PSYCOPG:
    _SYNC = pq.ExecStatus.PIPELINE_SYNC
    _FAILED = pq.ExecStatus.FATAL_ERROR
    _ABORTED = pq.ExecStatus.PIPELINE_ABORTED
_OIDS = {int: 20, bytes: 17, str: 25}  # int8, bytea, text: a parameter's type, by value


def _numbered(query: bytes) -> bytes:
    """A query's ``%s`` placeholders as ``$1``, ``$2``...: what libpq prepares."""
    first, *rest = query.split(b"%s")
    return first + b"".join(b"$%d" % n + part for n, part in enumerate(rest, 1))


def _pair_answers(
    steps: list[str], answers: list[list[PGresult]]
) -> list[tuple[str, list[PGresult]]]:
    """Each step of `_exchange` with its answer, as far as they came: a statement's
    results, or for a sync the error that answered it (its commit failed) or else
    its own result."""
    paired: list[tuple[str, list[PGresult]]] = []
    found = iter(answers)
    for step in steps:
        results = next(found, None)
        if results is None:
            break
        if step == "sync" and results[0].status != _SYNC:
            # (an error before the sync's own result: the implicit transaction's
            # commit failed; the sync's result follows)
            next(found, None)
        paired.append((step, results))
    return paired


def _wire_value(value: object, encoding: str) -> bytes:
    """A parameter in PostgreSQL's binary format (its type: `_OIDS`)."""
    if isinstance(value, int):
        return _INT8(value)
    if isinstance(value, str):
        return value.encode(encoding)
    if isinstance(value, bytes):
        return value
    raise TypeError(f"no binary format for {type(value).__name__}")  # pragma: no cover


def _talk(pgconn: PGconn, syncs: int, answers: list[list[PGresult]]) -> PQGen[None]:
    """What `_exchange` waits on, once: send what libpq holds, then read the answers up
    to the ``syncs``-th sync into ``answers``."""
    yield from generators.send(pgconn)
    while syncs:
        results = yield from generators.fetch_many(pgconn)
        if not results:  # pragma: no cover (libpq ends each answer, a sync's too)
            raise psycopg.OperationalError("the server's answers ended before the sync")
        answers.append(results)
        syncs -= results[0].status == _SYNC


def _exchange(
    conn: Connection[TupleRow],
    steps: Sequence[tuple[str, Callable[[], object]]],
    answers: list[list[PGresult]],
) -> None:
    """Queue ``steps`` (a name, for the reader, and a libpq call) in libpq's pipeline mode,
    send them without waiting between them (libpq writes each sync's part as it is
    queued) and read the answers up to the last sync, appending each
    statement's results (a sync's alone) to ``answers`` as they arrive, so that a
    caller whose connection failed midway knows which ones came back.

    psycopg's pipeline object costs about 100 µs of Python per exchange, as much as
    the server's whole work for an append: this drives libpq with psycopg's own
    generators (its waits: interrupts cancel the statement) and nothing else.
    """
    pgconn = conn.pgconn
    syncs = sum(name == "sync" for name, _ in steps)
    pgconn.enter_pipeline_mode()
    try:
        for _, step in steps:
            step()
        conn.wait(_talk(pgconn, syncs, answers))
    finally:
        try:
            pgconn.exit_pipeline_mode()
        except psycopg.Error:
            if pgconn.status != pq.ConnStatus.BAD:
                conn.close()  # answers left unread: unusable (the pool replaces it)


_DDL = [
    "CREATE SCHEMA IF NOT EXISTS {s}",
    'CREATE TABLE IF NOT EXISTS {s}.meta (key text COLLATE "C" PRIMARY KEY, value text NOT NULL)',
    'CREATE TABLE IF NOT EXISTS {s}.events (session text COLLATE "C" NOT NULL, '
    "seq bigint NOT NULL, record bytea NOT NULL, PRIMARY KEY (session, seq))",
    'CREATE TABLE IF NOT EXISTS {s}.heads (session text COLLATE "C" PRIMARY KEY, '
    "seq bigint NOT NULL, hash bytea NOT NULL)",
    'CREATE TABLE IF NOT EXISTS {s}.idem (session text COLLATE "C" NOT NULL, '
    'key text COLLATE "C" NOT NULL, seq bigint NOT NULL, PRIMARY KEY (session, key))',
    "CREATE TABLE IF NOT EXISTS {s}.blobs (hash bytea PRIMARY KEY, data bytea NOT NULL)",
    'CREATE TABLE IF NOT EXISTS {s}.cache (namespace text COLLATE "C" NOT NULL, '
    "key bytea NOT NULL, value bytea NOT NULL, PRIMARY KEY (namespace, key))",
]

#: The version of the server-side function below, kept under ``functions`` in ``meta``.
#: The tables are those of `SCHEMA`: a store that has the function is still read and
#: written by a turnlog without it.
FUNCTIONS = "turnlog-postgres-functions/1"

# What a one-round-trip write (`_PostgresWrite.commit`) calls when the server finds
# that a head it assumed moved or a key it assumed new is stored: a serialization
# failure, so that the write runs again with reads. Called only then: the checks are
# the plain statements "advance" and "expect" below (cheaper than a PL/pgSQL loop).
_REFUSE = """CREATE OR REPLACE FUNCTION {s}.refuse() RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
        MESSAGE = 'turnlog: a head or an idempotency key assumed by this write changed';
END
$fn$"""

_QUERIES = {
    "format": "SELECT value FROM {s}.meta WHERE key = 'schema'",
    "set_format": "INSERT INTO {s}.meta (key, value) VALUES ('schema', %s) "
    "ON CONFLICT (key) DO NOTHING",
    "functions": "SELECT value FROM {s}.meta WHERE key = 'functions'",
    "set_functions": "INSERT INTO {s}.meta (key, value) VALUES ('functions', %s) "
    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
    "lock_functions": "SELECT pg_advisory_xact_lock(hashtext('turnlog.functions.' || %s))",
    # Locks the row of each head assumed (sessions sorted: no deadlock between two
    # such writers) and refuses unless every one is still the head assumed (a NULL
    # seq: no row) and no key assumed new is stored. The CTE is read to its end
    # unless a mismatch is found (which refuses anyway): every row gets locked.
    "expect": "WITH a AS (SELECT * FROM unnest(%s::text[], %s::bigint[], %s::bytea[]) "
    "AS a(session, seq, hash)), "
    "l AS MATERIALIZED (SELECT h.session, h.seq, h.hash FROM {s}.heads h "
    "WHERE h.session = ANY(%s::text[]) ORDER BY h.session FOR UPDATE) "
    "SELECT {s}.refuse() WHERE EXISTS (SELECT 1 FROM a LEFT JOIN l "
    "ON l.session = a.session WHERE CASE WHEN a.seq IS NULL "
    "THEN l.session IS NOT NULL ELSE l.session IS NULL OR l.seq <> a.seq "
    "OR l.hash <> a.hash END) OR EXISTS (SELECT 1 FROM {s}.idem d, "
    "unnest(%s::text[], %s::text[]) AS k(session, key) "
    "WHERE d.session = k.session AND d.key = k.key)",
    "any_event": "SELECT 1 FROM {s}.events LIMIT 1",
    "head": "SELECT seq, hash FROM {s}.heads WHERE session = %s",
    "head_lock": "SELECT seq, hash FROM {s}.heads WHERE session = %s FOR UPDATE",
    "get": "SELECT record FROM {s}.events WHERE session = %s AND seq = %s",
    "scan": "SELECT seq, record FROM {s}.events WHERE session = %s AND seq >= %s "
    "AND seq < %s ORDER BY seq LIMIT %s",
    "sessions": "SELECT session, seq, hash FROM {s}.heads WHERE session > %s "
    "ORDER BY session LIMIT %s",
    "blob": "SELECT data FROM {s}.blobs WHERE hash = %s",
    "has_blob": "SELECT 1 FROM {s}.blobs WHERE hash = %s",
    "blob_sizes": "SELECT hash, octet_length(data) FROM {s}.blobs WHERE hash > %s "
    "ORDER BY hash LIMIT %s",
    "blobs_in": "SELECT hash, data FROM {s}.blobs WHERE hash = ANY(%s) ORDER BY hash",
    "mark": "SELECT value FROM {s}.meta WHERE key = %s",
    "set_mark": "INSERT INTO {s}.meta (key, value) VALUES (%s, %s) "
    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
    "del_mark": "DELETE FROM {s}.meta WHERE key = %s",
    "idem": "SELECT seq FROM {s}.idem WHERE session = %s AND key = %s",
    "idem_many": "SELECT key, seq FROM {s}.idem WHERE session = %s AND key = ANY(%s)",
    "idem_keys": "SELECT key, seq FROM {s}.idem WHERE session = %s AND key > %s "
    "ORDER BY key LIMIT %s",
    "cached": "SELECT value FROM {s}.cache WHERE namespace = %s AND key = %s",
    "cache_items": "SELECT namespace, key, value FROM {s}.cache ORDER BY namespace, key",
    "put_events": "INSERT INTO {s}.events (session, seq, record) "
    "SELECT %s, unnest(%s::bigint[]), unnest(%s::bytea[])",
    # Moves a head this write assumed: the update takes the row lock (waiting for a
    # writer that holds it, then looking at the row that writer left) and refuses
    # unless it found the row still at the head assumed. No lock of its own is
    # written beside the new row version, and no other statement reads the row.
    "advance": "WITH u AS (UPDATE {s}.heads SET seq = %s, hash = %s "
    "WHERE session = %s AND seq = %s AND hash = %s RETURNING 1) "
    "SELECT {s}.refuse() WHERE NOT EXISTS (SELECT 1 FROM u)",
    # An append of one session to the head assumed, as one statement: the head moved
    # as "advance" does (the update runs first, as the main query's condition reads
    # it, and refuses before anything is inserted), then the events (and the keys)
    # inserted by the statement's other parts.
    "append": "WITH u AS (UPDATE {s}.heads SET seq = %s, hash = %s "
    "WHERE session = %s AND seq = %s AND hash = %s RETURNING 1), "
    "e AS (INSERT INTO {s}.events (session, seq, record) "
    "SELECT %s, unnest(%s::bigint[]), unnest(%s::bytea[])) "
    "SELECT {s}.refuse() WHERE NOT EXISTS (SELECT 1 FROM u)",
    "append_one": "WITH u AS (UPDATE {s}.heads SET seq = %s, hash = %s "
    "WHERE session = %s AND seq = %s AND hash = %s RETURNING 1), "
    "e AS (INSERT INTO {s}.events (session, seq, record) VALUES (%s, %s, %s)) "
    "SELECT {s}.refuse() WHERE NOT EXISTS (SELECT 1 FROM u)",
    "append_one_keyed": "WITH u AS (UPDATE {s}.heads SET seq = %s, hash = %s "
    "WHERE session = %s AND seq = %s AND hash = %s RETURNING 1), "
    "e AS (INSERT INTO {s}.events (session, seq, record) VALUES (%s, %s, %s)), "
    "i AS (INSERT INTO {s}.idem (session, key, seq) VALUES (%s, %s, %s)) "
    "SELECT {s}.refuse() WHERE NOT EXISTS (SELECT 1 FROM u)",
    "append_keyed": "WITH u AS (UPDATE {s}.heads SET seq = %s, hash = %s "
    "WHERE session = %s AND seq = %s AND hash = %s RETURNING 1), "
    "e AS (INSERT INTO {s}.events (session, seq, record) "
    "SELECT %s, unnest(%s::bigint[]), unnest(%s::bytea[])), "
    "i AS (INSERT INTO {s}.idem (session, key, seq) "
    "SELECT %s, unnest(%s::text[]), unnest(%s::bigint[])) "
    "SELECT {s}.refuse() WHERE NOT EXISTS (SELECT 1 FROM u)",
    # Moves a head this write read (and locked), or creates one it found missing (a
    # racing creator's row fails it with a unique violation: the write runs again).
    "update_head": "UPDATE {s}.heads SET seq = %s, hash = %s WHERE session = %s",
    "insert_head": "INSERT INTO {s}.heads (session, seq, hash) VALUES (%s, %s, %s)",
    "put_idem": "INSERT INTO {s}.idem (session, key, seq) "
    "SELECT %s, unnest(%s::text[]), unnest(%s::bigint[])",
    "replace_event": "UPDATE {s}.events SET record = %s WHERE session = %s AND seq = %s",
    "del_blob": "DELETE FROM {s}.blobs WHERE hash = %s",
    "vacuum": "VACUUM (FULL) {s}.events, {s}.blobs",
    "put_blob": "INSERT INTO {s}.blobs (hash, data) VALUES (%s, %s) ON CONFLICT (hash) DO NOTHING",
    "put_cached": "INSERT INTO {s}.cache (namespace, key, value) VALUES (%s, %s, %s) "
    "ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value",
}


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


class _PostgresRead(ReadTxn):
    def __init__(self, store: PostgresStore, conn: Connection[TupleRow]) -> None:
        self._store = store
        self._conn = conn
        self._q = store._q
        # Heads read in this transaction (the bound of an ordinary scan).
        self._heads: dict[str, tuple[int, bytes] | None] = {}

    def _rows(self, query: str, params: tuple[object, ...] = ()) -> list[TupleRow]:
        return self._conn.execute(self._q[query], params, prepare=True, binary=True).fetchall()

    def _one(self, query: str, params: tuple[object, ...]) -> TupleRow | None:
        rows = self._rows(query, params)
        return rows[0] if rows else None

    def head(self, session: str) -> tuple[int, bytes] | None:
        if session in self._heads:
            return self._heads[session]
        row = self._one("head", (session,))
        head = None if row is None else (int(row[0]), bytes(row[1]))
        self._heads[session] = head
        return head

    def get(self, session: str, seq: int) -> bytes | None:
        if not 0 <= seq < 2**63:
            return None
        if type(self) is _PostgresRead and session not in self._heads:
            # The session's head comes in the same round trip: a read of its events
            # (which needs it) then costs one round trip less (replay: a request, then
            # the events its view lacks).
            with self._conn.pipeline():
                heads = self._conn.execute(self._q["head"], (session,), prepare=True, binary=True)
                found = self._conn.execute(
                    self._q["get"], (session, seq), prepare=True, binary=True
                )
            head = heads.fetchone()
            self._heads[session] = None if head is None else (int(head[0]), bytes(head[1]))
            row = found.fetchone()
        else:
            row = self._one("get", (session, seq))
        return None if row is None else bytes(row[0])

    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        seq = max(start, 0)
        first: list[TupleRow] | None = None
        if type(self) is _PostgresRead and session not in self._heads:
            # The head and the first page in one round trip; rows past the head (which
            # only a damaged store holds) are dropped below, unless ``every``.
            bound = min(stop, 2**63 - 1) if stop is not None else 2**63 - 1
            with self._conn.pipeline():
                heads = self._conn.execute(self._q["head"], (session,), prepare=True, binary=True)
                page = self._conn.execute(
                    self._q["scan"], (session, seq, bound, _PAGE), prepare=True, binary=True
                )
            row = heads.fetchone()
            self._heads[session] = None if row is None else (int(row[0]), bytes(row[1]))
            first = page.fetchall()
        head = self.head(session)
        if head is None:
            return
        end = 2**63 - 1 if every else head[0] + 1
        if stop is not None:
            end = min(stop, end)
        while seq < end:
            if first is not None:
                # Ordered by seq: what is dropped is the page's tail, so when anything
                # is, the page held every row below ``end``.
                rows, first = [row for row in first if int(row[0]) < end], None
            else:
                rows = self._rows("scan", (session, seq, end, _PAGE))
            for found, record in rows:
                yield int(found), bytes(record)
            if len(rows) < _PAGE:
                return
            seq = int(rows[-1][0]) + 1

    def records(self, session: str, start: int, stop: int | None) -> list[bytes]:
        if type(self) is not _PostgresRead:  # (a write's own rows overlay the stored ones)
            return super().records(session, start, stop)
        # The records `scan` yields, fetched ahead: once the head is known, the pages
        # are the runs of _PAGE seqs from the first page's end to the head (each holds
        # at most _PAGE rows: (session, seq) is the primary key), and each page's
        # query is sent before the previous page's rows are awaited, so the server
        # reads the next page while the client takes in this one.
        conn, query = self._conn, self._q["scan"]
        seq = max(start, 0)
        out: list[bytes] = []
        with conn.pipeline():
            if session not in self._heads:
                bound = min(stop, 2**63 - 1) if stop is not None else 2**63 - 1
                heads = conn.execute(self._q["head"], (session,), prepare=True, binary=True)
                first = conn.execute(query, (session, seq, bound, _PAGE), prepare=True, binary=True)
                row = heads.fetchone()
                self._heads[session] = None if row is None else (int(row[0]), bytes(row[1]))
                head = self._heads[session]
                if head is None:
                    return out
                end = head[0] + 1 if stop is None else min(stop, head[0] + 1)
                rows = first.fetchall()
                # As `scan`: rows past the head (a damaged store's) are left out.
                out.extend([record for found, record in rows if found < end])
                if len(rows) < _PAGE:
                    return out
                seq = int(rows[-1][0]) + 1
            else:
                head = self._heads[session]
                if head is None:
                    return out
                end = head[0] + 1 if stop is None else min(stop, head[0] + 1)
            waiting: Cursor[TupleRow] | None = None
            for low in range(seq, end, _PAGE):
                sent = conn.execute(
                    query, (session, low, min(low + _PAGE, end), _PAGE), prepare=True, binary=True
                )
                if waiting is not None:
                    out.extend([record for _, record in waiting.fetchall()])
                waiting = sent
            if waiting is not None:
                out.extend([record for _, record in waiting.fetchall()])
        return out

    def sessions(self) -> Iterator[tuple[str, int, bytes]]:
        after = ""
        while True:
            rows = self._rows("sessions", (after, _PAGE))
            for session, seq, digest in rows:
                yield str(session), int(seq), bytes(digest)
            if len(rows) < _PAGE:
                return
            after = str(rows[-1][0])

    def blob(self, digest: str) -> bytes | None:
        try:
            key = bytes.fromhex(digest)
        except ValueError:
            return None
        row = self._one("blob", (key,))
        return None if row is None else bytes(row[0])

    def has_blob(self, digest: str) -> bool:
        try:
            key = bytes.fromhex(digest)
        except ValueError:
            return False
        return self._one("has_blob", (key,)) is not None

    def blobs(self) -> Iterator[tuple[str, bytes]]:
        # Paged by bytes, not rows: the sizes first (octet_length reads no blob), then
        # the blobs of each run of at most _BLOB_BYTES (or one larger blob), so what
        # is held at once does not grow with the blobs' size (verify, copy).
        after = b""
        while True:
            sizes = self._rows("blob_sizes", (after, _PAGE))
            run: list[bytes] = []
            total = 0
            for digest, size in sizes:
                if run and total + int(size) > _BLOB_BYTES:
                    yield from self._blob_run(run)
                    run, total = [], 0
                run.append(bytes(digest))
                total += int(size)
            yield from self._blob_run(run)
            if len(sizes) < _PAGE:
                return
            after = bytes(sizes[-1][0])

    def _blob_run(self, digests: list[bytes]) -> Iterator[tuple[str, bytes]]:
        if not digests:
            return
        rows = self._rows("blobs_in", (digests,))
        rows.reverse()
        while rows:  # each blob released as soon as it is yielded
            digest, data = rows.pop()
            yield bytes(digest).hex(), bytes(data)

    def mark(self, name: str) -> str | None:
        row = self._one("mark", ("mark:" + name,))
        return None if row is None else str(row[0])

    def idempotency(self, session: str, key: str) -> int | None:
        if "\x00" in key:  # text cannot hold it: no such key is stored
            return None
        row = self._one("idem", (session, key))
        return None if row is None else int(row[0])

    def idempotency_seqs(self, session: str, keys: Sequence[str]) -> list[int | None]:
        stored = [key for key in keys if "\x00" not in key]
        found = {str(k): int(seq) for k, seq in self._rows("idem_many", (session, stored))}
        return [found.get(key) for key in keys]

    def idempotency_keys(self, session: str) -> Iterator[tuple[str, int]]:
        after = ""
        while True:
            rows = self._rows("idem_keys", (session, after, _PAGE))
            for key, seq in rows:
                yield str(key), int(seq)
            if len(rows) < _PAGE:
                return
            after = str(rows[-1][0])

    def cached(self, namespace: str, key: bytes) -> bytes | None:
        row = self._one("cached", (namespace, key))
        return None if row is None else bytes(row[0])

    def cache_items(self) -> Iterator[tuple[str, bytes, bytes]]:
        # Token counts: small rows, fetched at once.
        for namespace, key, value in self._rows("cache_items"):
            yield str(namespace), bytes(key), bytes(value)


class _PostgresReadAhead(ReadTxn):
    """What `PostgresStore.read_ahead` fetched in its one transaction, already ended:
    the session's head, its event ``seq`` and its events from ``start`` (up to ``seq``,
    or to the last row of a full page). A read of anything else raises `ReadAheadMiss`."""

    def __init__(
        self,
        session: str,
        seq: int,
        start: int,
        head: tuple[int, bytes] | None,
        found: bytes | None,
        rows: list[tuple[int, bytes]],
    ) -> None:
        self._session = session
        self._seq = seq
        self._found = found
        self._head = head
        self._start = start
        self._rows = dict(rows)
        # The rows hold every event below this seq from ``start`` (a full page: up to
        # its last row only).
        self._covered = seq if len(rows) < _PAGE else rows[-1][0] + 1

    def _covers(self, session: str, start: int, stop: int) -> None:
        if session != self._session or start < self._start or stop > self._covered:
            raise ReadAheadMiss(session, start, stop)

    def head(self, session: str) -> tuple[int, bytes] | None:
        self._covers(session, self._start, self._start)
        return self._head

    def get(self, session: str, seq: int) -> bytes | None:
        if not 0 <= seq < 2**63:
            return None
        if session == self._session and seq == self._seq:
            return self._found
        self._covers(session, seq, seq + 1)
        return self._rows.get(seq)

    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        # As `_PostgresRead.scan`: to the head, unless ``every``.
        self._covers(session, self._start, self._start)
        if self._head is None:
            return iter(())
        seq = max(start, 0)
        end = 2**63 - 1 if every else self._head[0] + 1
        if stop is not None:
            end = min(stop, end)
        if end <= seq:
            return iter(())
        self._covers(session, seq, end)
        return iter([(s, self._rows[s]) for s in range(seq, end) if s in self._rows])

    def _miss(self) -> ReadAheadMiss:
        return ReadAheadMiss(self._session)

    def sessions(self) -> Iterator[tuple[str, int, bytes]]:
        raise self._miss()

    def blob(self, digest: str) -> bytes | None:
        raise self._miss()

    def blobs(self) -> Iterator[tuple[str, bytes]]:
        raise self._miss()

    def idempotency(self, session: str, key: str) -> int | None:
        raise self._miss()

    def cached(self, namespace: str, key: bytes) -> bytes | None:
        raise self._miss()


class _PostgresWrite(_PostgresRead, WriteTxn):
    """A write transaction; with ``assume``, a head this store saw last (and an
    idempotency key) is assumed rather than read, and `commit` has the server check
    the assumptions in the round trip that commits (see `PostgresStore.write`)."""

    def __init__(
        self, store: PostgresStore, conn: Connection[TupleRow], *, assume: bool = False
    ) -> None:
        super().__init__(store, conn)
        self._assume = assume
        # What was assumed, not read: heads (None: no row) and keys taken as new.
        self.assumed: dict[str, tuple[int, bytes] | None] = {}
        self.assumed_keys: list[tuple[str, str]] = []
        self._events: dict[str, list[tuple[int, bytes]]] = {}
        self._pending: dict[tuple[str, int], bytes] = {}
        self._new_heads: dict[str, tuple[int, bytes]] = {}
        self._idem: dict[tuple[str, str], int] = {}
        self._blobs: dict[str, bytes] = {}
        self._cache: dict[tuple[str, bytes], bytes] = {}
        self._marks: dict[str, str | None] = {}
        self._replaced: dict[tuple[str, int], bytes] = {}
        self._deleted: set[str] = set()
        self.begun = False
        self.wired = False  # committed on libpq's pipeline (`_commit_wire`)
        self.committing = False
        self._flushed: int | None = None  # index in `sent` of the last answer flushed
        self._commit_at = 0  # index in `sent` of the COMMIT

    def _rows(self, query: str, params: tuple[object, ...] = ()) -> list[TupleRow]:
        if self.begun:
            return super()._rows(query, params)
        # BEGIN travels with the transaction's first query: one round trip.
        self.begun = True
        with self._conn.pipeline():
            self._conn.execute(b"BEGIN", prepare=False)
            cursor = self._conn.execute(self._q[query], params, prepare=True, binary=True)
        return cursor.fetchall()

    def head(self, session: str) -> tuple[int, bytes] | None:
        if session in self._new_heads:
            return self._new_heads[session]
        if session in self._heads:
            return self._heads[session]
        if self._assume:
            seen = self._store._seen.get(session)
            if seen is not None:
                self.assumed[session] = seen
                self._heads[session] = seen
                return seen
        # The row lock queues the writers of one session (see the module docstring).
        row = self._one("head_lock", (session,))
        head = None if row is None else (int(row[0]), bytes(row[1]))
        self._heads[session] = head
        return head

    def get(self, session: str, seq: int) -> bytes | None:
        pending = self._replaced.get((session, seq)) or self._pending.get((session, seq))
        return pending if pending is not None else super().get(session, seq)

    def scan(
        self,
        session: str,
        start: int,
        stop: int | None,
        *,
        every: bool = False,
    ) -> Iterator[tuple[int, bytes]]:
        head = self.head(session)
        if head is None:
            return
        end = head[0] + 1 if stop is None else min(stop, head[0] + 1)
        stored = self._heads.get(session)
        stored_end = -1 if stored is None else stored[0] + 1
        replaced = self._replaced
        for seq, record in super().scan(session, start, min(end, stored_end)):
            yield seq, replaced.get((session, seq), record)
        for seq in range(max(start, stored_end, 0), end):
            pending = self._pending.get((session, seq))
            if pending is not None:
                yield seq, pending

    def blob(self, digest: str) -> bytes | None:
        if digest in self._deleted:
            return None
        found = self._blobs.get(digest)
        return found if found is not None else super().blob(digest)

    def has_blob(self, digest: str) -> bool:
        if digest in self._deleted:
            return False
        return digest in self._blobs or super().has_blob(digest)

    def replace_event(self, session: str, seq: int, record: bytes) -> None:
        self._replaced[(session, seq)] = record

    def delete_blob(self, digest: str) -> None:
        self._blobs.pop(digest, None)
        self._deleted.add(digest)

    def idempotency(self, session: str, key: str) -> int | None:
        found = self._idem.get((session, key))
        if found is not None:
            return found
        if self._assume and "\x00" not in key:
            # Assumed new, as most keys are: `commit` has the server check it.
            self.assumed_keys.append((session, key))
            return None
        return super().idempotency(session, key)

    def cached(self, namespace: str, key: bytes) -> bytes | None:
        found = self._cache.get((namespace, key))
        return found if found is not None else super().cached(namespace, key)

    def put_event(self, session: str, seq: int, record: bytes) -> None:
        self.put_events(session, seq, (record,))

    def put_events(self, session: str, first_seq: int, records: Sequence[bytes]) -> None:
        rows = self._events.setdefault(session, [])
        for seq, record in enumerate(records, first_seq):
            rows.append((seq, record))
            self._pending[(session, seq)] = record

    def set_head(self, session: str, seq: int, digest: bytes) -> None:
        if session not in self._heads:
            self.head(session)  # lock the row (or learn there is none) before moving it
        self._new_heads[session] = (seq, digest)

    def put_idempotency(self, session: str, key: str, seq: int) -> None:
        if "\x00" in key:  # (an append refuses such keys; a copy may bring one)
            raise InvalidEventError(
                f"{session}#{seq}: idempotency key {key!r} holds a NUL character, which "
                f"PostgreSQL text cannot hold; nothing was written. A store written before "
                "turnlog refused such keys keeps them readable where it is (LMDB)"
            )
        self._idem[(session, key)] = seq

    def put_blob(self, digest: str, data: bytes) -> None:
        self._blobs[digest] = data

    def put_cached(self, namespace: str, key: bytes, value: bytes) -> None:
        self._cache[(namespace, key)] = value

    def mark(self, name: str) -> str | None:
        return self._marks[name] if name in self._marks else super().mark(name)

    def set_mark(self, name: str, value: str | None) -> None:
        self._marks[name] = value

    def commit(self, channel: str | None) -> None:
        """Send every buffered write, the COMMIT and (with a ``channel``) the
        notifications, in one pipeline: one round trip (an append of one event:
        `_commit_wire`).

        Once the COMMIT succeeded, nothing that follows it can fail the write: a
        notification that fails (the notify lock past ``lock_timeout``, a full
        notification queue, the connection lost after the COMMIT) is dropped,
        and followers find the batch when they re-read the head.
        """
        wire = self._wire_append()
        if wire is not None:
            self._commit_wire(*wire, channel)
            return
        sent: list[_Answer] = []  # the statements sent, the COMMIT last
        try:
            self._send(channel, sent)
        except psycopg.Error as exc:
            if self.committing and not self._may_have_committed(sent, exc):
                self.committing = False
            at = self._commit_at
            if not self.committing or len(sent) <= at or sent[at].statusmessage != "COMMIT":
                raise
            # (the notification's statements after the failed one were skipped)
            PostgresStore._rollback(self._conn, failed=True)

    def _wire_append(self) -> tuple[str, tuple[object, ...]] | None:
        """The statement of an append of one event to the head assumed, when it can go
        on the wire alone (`_commit_wire`), or None."""
        if not _WIRE or self.begun:
            return None
        append = self._one_append()
        if append is None or append[0] not in _WIRED:
            return None
        return append

    def _commit_wire(self, name: str, params: tuple[object, ...], channel: str | None) -> None:
        """Commit an append of one event as one statement in an implicit transaction,
        on libpq's pipeline (`_exchange`): the statement, a flush request, a sync (the
        commit) and, with a ``channel``, the notification's statement and a sync (its
        own transaction, after the append's). One round trip, no ``BEGIN`` or
        ``COMMIT`` statement.

        The flush request sends the statement's answer before the sync commits: a
        connection lost before the answer arrived committed nothing, and a server
        error answering the statement wrote nothing; one lost after the answer, or an
        error answering the sync, may have committed (`committing` stays set). Each
        connection prepares the statements once; one that lost them (psycopg's
        ``rollback()`` deallocates every statement of its connection) has their
        execution refused, and the next exchange prepares them again.
        """
        conn = self._conn
        self.wired = True
        prepared = self._store._prepared(conn)
        statements = [(name, params)]
        if channel is not None:
            key = follow_key(channel)
            statements.append(("notify", (channel, next(iter(self._new_heads)), key)))
        for _ in range(2):
            steps = self._wire_steps(conn, statements, prepared)
            answers: list[list[PGresult]] = []
            failure: psycopg.Error | None = None
            self.committing = True
            try:
                _exchange(conn, steps, answers)
            except psycopg.Error as exc:
                failure = exc
            outcome = self._wire_outcome(steps, answers, prepared)
            if outcome == "committed":
                return
            if failure is not None:
                raise failure
            if outcome == "lost":  # pragma: no cover (_exchange reads up to the last sync)
                raise StoreError(f"{self._store.location}: the server's answers ended early")
        raise StoreError(  # pragma: no cover (the second exchange prepares what it uses)
            f"{self._store.location}: a prepared statement of turnlog vanished twice in a row"
        )

    def _wire_steps(
        self,
        conn: Connection[TupleRow],
        statements: list[tuple[str, tuple[object, ...]]],
        prepared: set[str],
    ) -> list[tuple[str, Callable[[], object]]]:
        """The libpq calls of `_commit_wire`: each statement (prepared first if this
        connection has not prepared it), a flush request after the append, a sync after
        each statement."""
        pgconn = conn.pgconn
        encoding = conn.info.encoding  # (UTF-8: the store's connections ask for it)
        steps: list[tuple[str, Callable[[], object]]] = []
        for name, params in statements:
            wire_name = b"turnlog_" + name.encode()
            if name not in prepared:
                query = _NOTIFY_ONE if name == "notify" else self._q[name]
                oids = [_OIDS[type(value)] for value in params]
                steps.append(
                    (
                        "prepare " + name,
                        functools.partial(pgconn.send_prepare, wire_name, _numbered(query), oids),
                    )
                )
            values = [_wire_value(value, encoding) for value in params]
            formats = [1] * len(values)
            steps.append(
                (name, functools.partial(pgconn.send_query_prepared, wire_name, values, formats))
            )
            if name != "notify":
                steps.append(("flush", pgconn.send_flush_request))
            steps.append(("sync", pgconn.pipeline_sync))
        return steps

    def _wire_outcome(
        self,
        steps: list[tuple[str, Callable[[], object]]],
        answers: list[list[PGresult]],
        prepared: set[str],
    ) -> str:
        """Read the answers of `_commit_wire`'s exchange: "committed"; "again" when it
        must be sent again (a statement to prepare again); "lost" when the connection
        failed first (``committing`` cleared unless the append's answer came). A server
        error that failed the append is raised (``committing`` cleared unless it
        answered the commit)."""
        paired = _pair_answers([step for step, _ in steps if step != "flush"], answers)
        answered = committed = again = False  # the append's statement answered; its sync
        failed: psycopg.Error | None = None  # what failed the append
        for step, results in paired:
            first = results[0]
            status = first.status
            if status == _SYNC:
                committed = committed or answered
                continue
            name = step.removeprefix("prepare ")
            if status != _FAILED:
                if status == _ABORTED:
                    continue
                if step != name:
                    prepared.add(name)
                elif name != "notify":
                    answered = True
                continue
            # What the connection prepared, from every answer: the notification's part
            # runs even after a failed append (a notification for nothing: followers
            # read the head again).
            sqlstate = first.error_field(pq.DiagnosticField.SQLSTATE)
            if step != name and sqlstate == b"42P05":  # (prepared on an earlier use)
                prepared.add(name)
            elif sqlstate == b"26000":  # (deallocated: psycopg's rollback() drops them all)
                prepared.discard(name)
            if committed or again or failed is not None:
                # After the append's commit: a failed notification is dropped (its
                # statement, or its commit: the notify lock past lock_timeout).
                continue
            error = psycopg.errors.error_from_result(first, encoding=self._conn.info.encoding)
            if step == "sync":
                # The commit failed, or ran and the connection failed after it (a
                # terminated backend's wait for a synchronous standby, after a local
                # commit): `committing` stays set. (libpq's own error: the connection.)
                failed = error if error.sqlstate else psycopg.OperationalError(str(error))
                continue
            self.committing = False  # the statement failed: nothing was committed
            if sqlstate in (b"26000", b"42P05"):  # (prepared again, or found)
                again = True
            else:
                failed = error
        if failed is not None:
            raise failed
        if again:
            return "again"
        if committed:
            return "committed"
        if not answered:
            # The statement's answer never came: the flush request has the server send
            # it before the sync commits, so nothing was committed (unless it left the
            # server and was lost on the way, which no client can tell).
            self.committing = False
        return "lost"

    def _may_have_committed(self, sent: list[_Answer], exc: psycopg.Error) -> bool:
        """Whether a pipeline that failed may have run its COMMIT (``sent[_commit_at]``,
        sent or being sent). The server answers the statements in order and, after an error,
        skips the rest of the pipeline: the first statement without an answer is the
        one that failed or was never reached. It failed before the COMMIT when the
        server said so (an error with a SQLSTATE: a terminated backend's FATAL, a
        timeout, a full disk). When the connection was lost without a word, the answer
        to the statement before the COMMIT says it: the server sends it (a flush
        request follows it) before it runs the COMMIT."""
        answered = 0
        for cursor in sent:
            if cursor.pgresult is None:
                break
            answered += 1
        if answered >= self._commit_at:
            return True  # the COMMIT failed, or ran and its answer was lost
        if exc.sqlstate is not None:
            return False
        return self._flushed is not None and answered > self._flushed

    def _send(self, channel: str | None, sent: list[_Answer]) -> None:
        # Every statement is queued, and the pipeline's end sends them all in one
        # write, then awaits the answers (see `_queue`).
        try:
            self._queue_all(channel, sent)
        except pg_errors.PipelineAborted as exc:
            # The pipeline's end reads the answers in two steps: when the first step
            # read the failed statement's answer (and raised its error), the second
            # raises for the statements the server skipped after it. The statement's
            # own error is the one that says what happened.
            failed = exc.__context__
            if isinstance(failed, psycopg.Error) and not isinstance(
                failed, pg_errors.PipelineAborted
            ):
                raise failed from None
            raise

    def _queue_all(self, channel: str | None, sent: list[_Answer]) -> None:
        q = self._q
        conn = self._conn

        def run(query: str, params: tuple[object, ...]) -> None:
            # Prepared from the first use: psycopg then forgets a statement whose
            # preparation an aborted pipeline skipped (one prepared only after some
            # unprepared uses would be taken as prepared: "does not exist" later).
            sent.append(_queue(conn, q[query], params, prepare=True))

        with conn.pipeline() as pipeline:
            if not self.begun:
                self.begun = True
                sent.append(_command(conn, b"BEGIN"))
            append = self._one_append()
            if append is not None:
                run(*append)
            else:
                self._send_each(run)
            # The answers to everything before the COMMIT leave the server before
            # the COMMIT runs: a connection lost before the last of them arrived
            # committed nothing.
            pipeline.command_queue.append(conn.pgconn.send_flush_request)
            self._flushed = len(sent) - 1
            self.committing = True
            self._commit_at = len(sent)
            if channel is None or not self._new_heads:
                sent.append(_command(conn, b"COMMIT"))
                return
            # After the COMMIT, in a transaction of their own (AND CHAIN begins it)
            # that does not wait for the disk (module docstring). Its COMMIT is a
            # statement of its own: the notify lock is taken when a transaction that
            # notified commits, and a failure there (lock_timeout) is the answer to a
            # statement, where psycopg expects it, not to the pipeline's sync.
            sent.append(_command(conn, b"COMMIT AND CHAIN"))
            key = follow_key(channel)
            if len(self._new_heads) == 1:
                session = next(iter(self._new_heads))
                _queue(conn, _NOTIFY_ONE, (channel, session, key), prepare=True)
            else:
                _queue(conn, _NOTIFY, (channel, list(self._new_heads), key), prepare=True)
            _command(conn, b"COMMIT")

    def _one_append(self) -> tuple[str, tuple[object, ...]] | None:
        """The one statement of an append of one session to the head assumed (events
        and keys, nothing else), or None."""
        if len(self.assumed) != 1 or len(self._new_heads) != 1 or len(self._events) != 1:
            return None
        if self._replaced or self._deleted or self._blobs or self._cache or self._marks:
            return None
        session, assumed = next(iter(self.assumed.items()))
        moved = self._new_heads.get(session)
        rows = self._events.get(session)
        if assumed is None or moved is None or rows is None:
            return None
        if any(s != session for s, _ in self._idem) or any(
            k not in self._idem for k in self.assumed_keys
        ):
            return None
        if len(rows) == 1 and len(self._idem) <= 1:
            # One event (and its key): plain values, not arrays, which psycopg adapts
            # and the server unnests at a cost of their own.
            one = (*moved, session, *assumed, session, *rows[0])
            if not self._idem:
                return "append_one", one
            (((_, key), seq),) = self._idem.items()
            return "append_one_keyed", (*one, session, key, seq)
        params = (
            *moved,
            session,
            *assumed,
            session,
            [s for s, _ in rows],
            [r for _, r in rows],
        )
        if not self._idem:
            return "append", params
        keys = [key for _, key in self._idem]
        return "append_keyed", (*params, session, keys, list(self._idem.values()))

    def _send_each(self, run: Callable[[str, tuple[object, ...]], None]) -> None:
        """Queue the statements of any other write, one for each table and session."""
        if self.assumed or self.assumed_keys:
            # A head assumed and moved is moved by the statement that checks it
            # ("advance"); a key assumed new and written is checked by the primary
            # key of idem (a unique violation: the write runs again with reads).
            # Anything else assumed (a head left where it was, a key not written)
            # is locked and checked by "expect".
            kept = []
            for session in sorted(self.assumed):
                assumed = self.assumed[session]
                moved = self._new_heads.get(session)
                if assumed is None or moved is None:
                    kept.append(session)
                else:
                    run("advance", (*moved, session, *assumed))
            unwritten = [k for k in self.assumed_keys if k not in self._idem]
            if kept or unwritten:
                heads = [self.assumed[session] for session in kept]
                run(
                    "expect",
                    (
                        kept,
                        [None if h is None else h[0] for h in heads],
                        [None if h is None else h[1] for h in heads],
                        kept,
                        [session for session, _ in unwritten],
                        [key for _, key in unwritten],
                    ),
                )
        for session, rows in self._events.items():
            run("put_events", (session, [s for s, _ in rows], [r for _, r in rows]))
        for (session, seq), record in self._replaced.items():
            run("replace_event", (record, session, seq))
        for hex_hash in sorted(self._deleted):
            run("del_blob", (bytes.fromhex(hex_hash),))
        by_session: dict[str, tuple[list[str], list[int]]] = {}
        for (session, key), seq in self._idem.items():
            keys, seqs = by_session.setdefault(session, ([], []))
            keys.append(key)
            seqs.append(seq)
        for session, (keys, seqs) in by_session.items():
            run("put_idem", (session, keys, seqs))
        for hex_hash, data in self._blobs.items():
            run("put_blob", (bytes.fromhex(hex_hash), data))
        for (namespace, cache_key), value in self._cache.items():
            run("put_cached", (namespace, cache_key, value))
        for session, (head_seq, head_hash) in self._new_heads.items():
            if session in self.assumed and self.assumed[session] is not None:
                continue  # moved by "advance"
            if self._heads.get(session) is None:
                run("insert_head", (session, head_seq, head_hash))
            else:
                run("update_head", (head_seq, head_hash, session))
        for name, mark in self._marks.items():
            if mark is None:
                run("del_mark", ("mark:" + name,))
            else:
                run("set_mark", ("mark:" + name, mark))

    def written(self) -> list[str]:
        """The sessions whose head this transaction moved."""
        return list(self._new_heads)


class PostgresStore(Store):
    """A store in a PostgreSQL database, shared by any number of processes and hosts.

    Parameters:
        url: a libpq URL, ``postgresql://user:password@host:port/dbname?...``
            (any libpq parameter: ``sslmode``, ``connect_timeout``,
            ``options=-c statement_timeout=5000``...). Two parameters are
            turnlog's own and removed before connecting: ``schema`` (default
            ``turnlog``), ``pool_size`` and ``pool_timeout``.
        readonly: refuse writes (and do not create the schema).
        create: create the tables when the schema has none; when False (or
            ``readonly``) a missing store raises `StoreNotFoundError`.
        schema: the PostgreSQL schema holding the tables (overrides the URL's).
        pool_size: the most connections this store opens (default 8).
        pool_timeout: seconds to wait for a free connection (or for the server
            to accept one) before `StoreUnavailableError` (default 30).
        notify: wake followers with NOTIFY after each write (see `wait`).

    Raises:
        StoreError: psycopg is not installed (``pip install 'turnlog[postgres]'``).
        StoreUnavailableError: the server cannot be reached.
        StoreFormatError: the schema was written by another turnlog version.
        InvalidArgumentError: a malformed URL or option.
    """

    name = "postgres"

    @refuse_unknown_options(
        "PostgresStore()", usage='PostgresStore("postgresql://user@host:port/dbname")'
    )
    def __init__(
        self,
        url: str,
        *,
        readonly: bool = False,
        schema: str | None = None,
        pool_size: int | None = None,
        pool_timeout: float | None = None,
        notify: bool = True,
        create: bool = True,
    ) -> None:
        if not _HAVE_PSYCOPG:
            raise StoreError(
                "the PostgreSQL backend needs psycopg 3 and psycopg_pool: "
                "pip install 'turnlog[postgres]'"
            )
        check_type(url, str, "url", what="a str (postgresql://user@host:port/dbname?...)")
        url, own = _own_params(url)
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            # libpq's other messages quote the URL (its password too): only the name of
            # an unknown parameter is repeated.
            unknown = re.match(r'invalid URI query parameter: "([^"]*)"', str(exc))
            raise InvalidArgumentError(
                f"the PostgreSQL URL has an unknown parameter {unknown.group(1)!r}: the "
                "query takes libpq's connection parameters (sslmode, connect_timeout, "
                "application_name...) and turnlog's schema, pool_size and pool_timeout"
                if unknown
                else "the PostgreSQL URL is malformed; expected "
                "postgresql://user@host:port/dbname?..."
            ) from None
        self._secrets = [str(params[k]) for k in _SECRET_KEYS if params.get(k)]
        url_schema = own.get("schema")
        url_pool = own.get("pool_size")
        schema = schema if schema is not None else str(url_schema or "turnlog")
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
            invalid(
                "schema",
                "a lowercase identifier (letters, digits, _; at most 55, so that "
                "the notification channel 'turnlog.SCHEMA' fits PostgreSQL's 63 bytes)",
                schema,
                with_type=not isinstance(schema, str),
            )
        if pool_size is None:
            try:
                pool_size = int(str(url_pool)) if url_pool is not None else 8
            except ValueError:
                raise InvalidArgumentError(
                    f"pool_size in the URL must be an integer, found {url_pool!r}"
                ) from None
        check_integer(pool_size, "pool_size", min_value=1, max_value=1000)
        if pool_timeout is None:
            try:
                pool_timeout = float(own.get("pool_timeout", "30"))
            except ValueError:
                raise InvalidArgumentError(
                    f"pool_timeout in the URL must be a number of "
                    f"seconds, found {own['pool_timeout']!r}"
                ) from None
        check_number(
            pool_timeout,
            "pool_timeout",
            min_value=0,
            exclusive_min=True,
            max_value=3600,
            hint="a number of seconds",
        )
        self.schema = schema
        self.readonly = readonly
        self.create = create
        self.notify = notify
        self.location = hide_credentials(self._public_url(params, schema))
        self._params = params
        # Text travels as UTF-8 whatever the URL or PGCLIENTENCODING asks: with another
        # client encoding psycopg hands back bytes (SQL_ASCII) or the server refuses
        # characters its encoding lacks, where turnlog's ids and keys are any Unicode.
        self._conninfo = make_conninfo("", **{**params, "client_encoding": "UTF8"})
        self._channel = f"turnlog.{schema}"
        self._pid = os.getpid()
        self._closed = False
        self._timeout = float(pool_timeout)
        # The LISTENing connections of the followers now waiting (see `listen`).
        self._listeners: set[Connection[TupleRow]] = set()
        self._listeners_lock = threading.Lock()
        # The head each session had after this store's last write of it (at most
        # _SEEN sessions): a write assumes it instead of reading it (see `write`).
        self._seen: dict[str, tuple[int, bytes]] = {}
        self._assume = False  # the server has the function that checks assumptions
        # The statements each connection prepared for `_PostgresWrite._commit_wire`.
        self._wired: weakref.WeakKeyDictionary[Connection[TupleRow], set[str]] = (
            weakref.WeakKeyDictionary()
        )
        self._wired_lock = threading.Lock()
        self._q = {
            name: sql.SQL(text).format(s=sql.Identifier(schema)).as_bytes(None)
            for name, text in _QUERIES.items()
        }
        self._pool = psycopg_pool.ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=pool_size,
            open=False,
            kwargs={"autocommit": True},
            timeout=self._timeout,
            name="turnlog",
            reconnect_timeout=self._timeout,
        )
        try:
            with self._guard("open the store"):
                # The pool connects in the background while a connection of our own
                # learns at once whether the server refuses us for good.
                self._pool.open(wait=False)
                with self._connect_first() as conn:
                    self._check_format(conn)
        except BaseException:
            self._pool.close()
            raise

    @staticmethod
    def _public_url(params: Mapping[str, object], schema: str) -> str:
        """The URL without secrets, for messages and reprs."""
        user = params.get("user")
        host = params.get("host") or ""
        port = params.get("port")
        where = f"{user}@" if user else ""
        where += str(host) if "/" not in str(host) else f"[{host}]"
        if port:
            where += f":{port}"
        db = params.get("dbname") or ""
        return f"postgresql://{where}/{db}?schema={schema}"

    def __repr__(self) -> str:
        return f"<PostgresStore {self.location!r}>"

    # -- setup ---------------------------------------------------------------------
    def _connect(self, timeout: float) -> Connection[TupleRow]:
        """A connection outside the pool (its connect_timeout the URL's, else
        ``timeout``)."""
        if "connect_timeout" in self._params:
            return psycopg.Connection.connect(self._conninfo, autocommit=True)
        return psycopg.Connection.connect(
            self._conninfo, autocommit=True, connect_timeout=max(2, math.ceil(timeout))
        )

    def _connect_first(self) -> Connection[TupleRow]:
        """The first connection: a refusal for good (no such database or role, a
        failed authentication) fails at once with the server's reason; a server
        that is down or busy is retried until ``pool_timeout``."""
        deadline = time.monotonic() + self._timeout
        pause = 0.05
        while True:
            try:
                return self._connect(deadline - time.monotonic())
            except psycopg.OperationalError as exc:
                reason = self._say(str(exc)) or type(exc).__name__
                if _refused(reason):
                    raise StoreError(
                        f"cannot open the store: the server of {self.location} refused the "
                        f"connection ({_server_words(reason)}); check the user, the password "
                        "and the database name of the URL, or the server's pg_hba.conf: "
                        "retrying will not help. Nothing was written"
                    ) from None
                if _nobody_listens(reason):
                    raise StoreUnavailableError(
                        f"cannot open the store: nothing accepts connections at "
                        f"{self.location} ({reason}); check that the server is running and "
                        "the host and port (or socket directory) of the URL. Nothing was "
                        "written"
                    ) from None
                if time.monotonic() + pause >= deadline:
                    raise StoreUnavailableError(
                        f"cannot open the store: no connection to {self.location} within "
                        f"{self._timeout:g} s ({reason}); check that the server is up and "
                        "reachable (pool_timeout=SECONDS in the URL waits longer). Nothing "
                        "was written"
                    ) from None
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _check_format(self, conn: Connection[TupleRow]) -> None:
        try:
            row = conn.execute(self._q["format"]).fetchone()
        except pg_errors.UndefinedTable:
            row = None
            if self.readonly or not self.create:
                how = "for writing" if self.readonly else "with create=True"
                raise StoreNotFoundError(
                    f"no turnlog store at {self.location} (schema "
                    f"{self.schema!r} has no turnlog tables); check the "
                    f"URL or create the store by opening it {how}"
                ) from None
            self._create(conn)
            row = conn.execute(self._q["format"]).fetchone()
        if row is None:
            if conn.execute(self._q["any_event"]).fetchone() is not None:
                raise StoreFormatError(
                    f"{self.location} has events but no schema version; "
                    "it was not written by turnlog"
                )
            if self.readonly:
                return
            conn.execute(self._q["set_format"], (SCHEMA,))
            row = conn.execute(self._q["format"]).fetchone()
        if self.notify and not self.readonly:  # (a replica refuses NOTIFY)
            try:
                # Rolled back: nothing is queued, and the database-wide lock a
                # committing NOTIFY takes (which lock_timeout could fail) is not asked for.
                with conn.transaction(force_rollback=True):
                    conn.execute("SELECT pg_notify(%s, '')", (self._channel,))
                # An append's COMMIT AND CHAIN begins the notification's transaction
                # (PostgreSQL 12 and later): tried on an empty one.
                conn.execute("BEGIN")
                try:
                    conn.execute("COMMIT AND CHAIN")
                finally:
                    conn.execute("ROLLBACK")
            except (
                pg_errors.FeatureNotSupported,
                pg_errors.UndefinedFunction,
                pg_errors.SyntaxError,
            ):
                self.notify = False  # a database without NOTIFY: followers poll
        found = str(row[0]) if row is not None else SCHEMA
        if found != SCHEMA:
            raise StoreFormatError(
                f"store {self.location} has schema {found!r}; this turnlog reads {SCHEMA!r}. "
                "Open it with the turnlog version that wrote it, or copy it there into an "
                "empty store (`turnlog copy`) that this version can read; schemas are never "
                "upgraded implicitly"
            )
        if not self.readonly:
            self._install_functions(conn)

    def _install_functions(self, conn: Connection[TupleRow]) -> None:
        """Create (or bring to `FUNCTIONS`) the function a one-round-trip write calls;
        on a store of an older turnlog too: the tables stay as they are. Without the
        privilege to create it, every write reads what it needs first."""
        row = conn.execute(self._q["functions"]).fetchone()
        if row is not None and str(row[0]) == FUNCTIONS:
            self._assume = True
            return
        try:
            with conn.transaction():
                # One creator at a time: concurrent CREATE OR REPLACE of one function
                # fails ("tuple concurrently updated").
                conn.execute(self._q["lock_functions"], (self.schema,))
                conn.execute(sql.SQL(_REFUSE).format(s=sql.Identifier(self.schema)))
                conn.execute(self._q["set_functions"], (FUNCTIONS,))
        except (psycopg.ProgrammingError, psycopg.NotSupportedError, psycopg.InternalError):
            # No privilege to create it, a replica, a database without PL/pgSQL or
            # advisory locks: every write reads first, as before.
            return
        self._assume = True

    def _create(self, conn: Connection[TupleRow]) -> None:
        encoding = conn.execute("SHOW server_encoding").fetchone()
        if encoding is None or str(encoding[0]).upper() not in ("UTF8", "UTF-8"):
            raise StoreError(
                f"the database of {self.location} has encoding "
                f"{encoding[0] if encoding else '?'}; turnlog needs UTF8 "
                "(createdb -E UTF8)"
            )
        for attempt in range(5):
            try:
                with conn.transaction():
                    for statement in _DDL:
                        conn.execute(sql.SQL(statement).format(s=sql.Identifier(self.schema)))
                    conn.execute(self._q["set_format"], (SCHEMA,))
                return
            except (
                pg_errors.UniqueViolation,
                pg_errors.DuplicateObject,
                pg_errors.DuplicateTable,
                pg_errors.DuplicateSchema,
            ):
                # Another process created the same tables at the same moment.
                time.sleep(0.01 * (attempt + 1))
        raise StoreError(f"could not create the turnlog tables in {self.location}; retry")

    # -- guards ----------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise StoreError(f"the store {self.location} is closed; open it again")
        if os.getpid() != self._pid:
            raise ForkedProcessError(
                f"this handle on {self.location} was opened in process {self._pid} and is used "
                f"in child {os.getpid()} after fork(); its connections belong to the parent. "
                "Open the log again in the child (turnlog.open(url))"
            )

    def _say(self, text: str) -> str:
        """A server's or libpq's message as one line, without the password."""
        return _one_line(redact(text, self._secrets))

    @contextmanager
    def _guard(
        self,
        doing: str,
        *,
        committing: Callable[[], bool] | None = None,
    ) -> Iterator[None]:
        """Convert psycopg's errors to turnlog's (see the module docstring)."""
        try:
            yield
        except psycopg_pool.PoolTimeout:
            raise self._pool_timeout(doing) from None
        except pg_errors.QueryCanceled as exc:
            raise StoreUnavailableError(
                f"cannot {doing}: a statement on {self.location} ran past its timeout "
                f"({self._say(str(exc).strip())}); nothing was written. Retry, or raise "
                "statement_timeout (options=-c statement_timeout=MS in the URL)"
            ) from None
        except pg_errors.LockNotAvailable as exc:
            # Raised by a statement before the COMMIT (the pipeline skips the COMMIT);
            # the notification after it never fails a write (_PostgresWrite.commit).
            raise StoreUnavailableError(
                f"cannot {doing}: a statement on {self.location} waited past lock_timeout "
                f"({self._say(str(exc).strip())}); nothing was written. Retry, or raise "
                "lock_timeout (options=-c lock_timeout=MS in the URL)"
            ) from None
        except pg_errors.DiskFull as exc:
            raise StoreFullError(
                f"cannot {doing}: the database server's disk is full "
                f"({self._say(str(exc).strip())}); nothing was written. Free space on the "
                "server and retry"
            ) from None
        except pg_errors.ReadOnlySqlTransaction as exc:
            raise StoreReadOnlyError(
                f"cannot {doing}: {self.location} accepts no writes (a read replica or a "
                f"read-only server: {self._say(str(exc).strip())}); point writers at the "
                "primary"
            ) from None
        except pg_errors.InsufficientPrivilege as exc:
            raise StoreError(
                f"cannot {doing}: permission denied on {self.location} "
                f"({self._say(str(exc).strip())}); grant the user access to "
                f"schema {self.schema!r}"
            ) from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            maybe = committing is not None and committing()
            outcome = (
                "the batch may or may not have been committed: retry it with the same "
                "idempotency keys (it applies once) or re-read the session head "
                "before appending again"
                if maybe
                else "nothing was written"
            )
            raise StoreUnavailableError(
                f"cannot {doing}: the connection to {self.location} failed "
                f"({self._say(str(exc).strip()) or type(exc).__name__}); {outcome}. Check "
                "that the server is up, then retry"
            ) from None
        except pg_errors.DataCorrupted as exc:
            raise StoreCorruptError(
                f"{self.location} reports corrupt data "
                f"({self._say(str(exc).strip())}); run `turnlog verify` "
                "and restore the database from a backup"
            ) from None
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot {doing}: {self.location} failed ({self._say(str(exc).strip())})"
            ) from None

    def _pool_timeout(self, doing: str) -> StoreError:
        """The error for a pool that gave no connection in time: one connection of
        our own says whether the server refuses, cannot be reached, or is fine (and
        every connection of the pool was busy)."""
        try:
            self._connect(min(self._timeout, 5.0)).close()
        except psycopg.OperationalError as exc:
            reason = self._say(str(exc)) or type(exc).__name__
            if _refused(reason):
                return StoreError(
                    f"cannot {doing}: the server of {self.location} refuses the connection "
                    f"({_server_words(reason)}); check the user, the password and the "
                    "database name of the URL, or the server's pg_hba.conf. Nothing was "
                    "written"
                )
            return StoreUnavailableError(
                f"cannot {doing}: no connection to {self.location} within {self._timeout:g} s "
                f"({reason}); check that the server is up and reachable, then retry. Nothing "
                "was written"
            )
        return StoreUnavailableError(
            f"cannot {doing}: every connection to {self.location} stayed busy for "
            f"{self._timeout:g} s (pool_size {self._pool.max_size}); raise pool_size, or "
            "close snapshots sooner. Nothing was written"
        )

    @contextmanager
    def _connection(
        self,
        begin: LiteralString | None = None,
    ) -> Iterator[Connection[TupleRow]]:
        """A pooled connection, in a transaction begun with ``begin`` (if given).

        A connection the server dropped while it sat in the pool (a restart, an
        idle timeout) fails on its first statement, before anything was sent
        that could have written: it is discarded and another one taken.
        """
        attempts = self._pool.max_size + 1
        for attempt in range(attempts):
            with self._pool.connection() as conn:
                if begin is None:  # the caller begins (and retries) itself
                    yield conn
                    return
                try:
                    conn.execute(begin)
                except psycopg.OperationalError:
                    if attempt + 1 == attempts or not conn.broken:
                        raise
                    continue
                yield conn
                return

    def scrub(self) -> None:
        """Leave no dead copy of erased rows (see `Store.scrub`): ``VACUUM (FULL)`` of the
        events and blobs tables rewrites them (and their TOAST tables) without dead
        tuples; ``pg_switch_wal()`` closes the WAL segment that holds the old rows (and
        the erasure's full-page images of them), and ``CHECKPOINT`` moves the redo point
        past it, so that the server removes every segment written before the erasure.
        Removes, on a server with ``wal_recycle = off``; with the default (on) it renames
        them for reuse and their old bytes stay until they are overwritten
        (docs/erasure.md, "The WAL"). VACUUM FULL holds an exclusive lock on each table
        while it runs (writers and readers wait). ``pg_switch_wal()`` needs a superuser
        or EXECUTE granted on it, CHECKPOINT a superuser or the ``pg_checkpoint`` role;
        without them the rows are rewritten and the old WAL goes once the server has
        filled its segment and checkpointed on its own."""
        self._check()
        if self.readonly:
            raise StoreReadOnlyError(
                f"store {self.location} was opened read-only; open it for writing to erase"
            )
        with self._guard("write"), self._connection() as conn:
            conn.execute(self._q["vacuum"])
            # Without the privileges, the server's own switch and checkpoint do it
            # (documented). Each statement commits on its own (autocommit).
            with suppress(psycopg.errors.InsufficientPrivilege):
                conn.execute(b"SELECT pg_switch_wal()")
            with suppress(psycopg.errors.InsufficientPrivilege):
                conn.execute(b"CHECKPOINT")

    # -- Store -------------------------------------------------------------------------
    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        self._check()
        with self._guard("read"), self._connection(_BEGIN_SNAPSHOT) as conn:
            try:
                yield _PostgresRead(self, conn)
            finally:
                if not conn.closed:
                    conn.execute("COMMIT")  # (see _END_READ)

    @contextmanager
    def read_ahead(self, session: str, seq: int, start: int) -> Iterator[ReadTxn]:
        """One round trip (see `Store.read_ahead`): ``BEGIN ... REPEATABLE READ READ
        ONLY``, the head, the event ``seq``, the first page of the events from ``start``
        up to ``seq`` and ``COMMIT`` go as one pipeline, so they are read in one
        snapshot, taken when this is entered."""
        if not 0 <= start <= seq < 2**63:
            with self.read() as txn:
                yield txn
            return
        self._check()
        with self._guard("read"):
            fetched = self._fetch_ahead(session, seq, start)
        yield fetched

    def _fetch_ahead(self, session: str, seq: int, start: int) -> _PostgresReadAhead:
        q = self._q
        attempts = self._pool.max_size + 1
        for attempt in range(attempts):
            with self._pool.connection() as conn:
                try:
                    with conn.pipeline():
                        conn.execute(_BEGIN_READ, prepare=False)
                        # Prepared from the first use (see `_PostgresWrite._send`).
                        heads = conn.execute(q["head"], (session,), prepare=True, binary=True)
                        found = conn.execute(q["get"], (session, seq), prepare=True, binary=True)
                        page = conn.execute(
                            q["scan"], (session, start, seq, _PAGE), prepare=True, binary=True
                        )
                        conn.execute(_END_READ, prepare=False)
                    head = heads.fetchone()
                    record = found.fetchone()
                    rows = page.fetchall()
                except psycopg.Error as exc:
                    # Rolled back as a failed write is (its cache of prepared statements
                    # kept true); a connection found dropped is replaced (reads only:
                    # nothing to lose by reading again).
                    self._rollback(conn, failed=True)
                    if (
                        isinstance(exc, psycopg.OperationalError)
                        and conn.broken
                        and attempt + 1 < attempts
                    ):
                        continue
                    raise
                return _PostgresReadAhead(
                    session,
                    seq,
                    start,
                    None if head is None else (int(head[0]), bytes(head[1])),
                    None if record is None else bytes(record[0]),
                    [(int(s), bytes(r)) for s, r in rows],
                )
        raise AssertionError("unreachable")  # pragma: no cover

    def write(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run ``fn`` in a write transaction and commit it (see the module docstring).

        A session this store wrote last has its head remembered; ``fn`` is given that
        head (and each idempotency key it asks about is taken as new) without a read,
        and the commit's round trip has the server check both (the head's update
        matches the head assumed; idem's primary key refuses a stored key): a one-event
        append is one round trip and one commit. When the
        server finds the head moved or a key stored, nothing was written and ``fn``
        runs again with everything read; so it does when ``fn`` raised (an
        ``expected_seq`` conflict, an idempotent retry with another head) after it
        was given an assumed head: what it decides is only ever decided on the head
        the server holds.
        """
        self._check()
        if self.readonly:
            raise StoreReadOnlyError(
                f"store {self.location} was opened read-only; open it for writing to append"
            )
        state: list[_PostgresWrite] = []  # the guard asks whether COMMIT was sent
        assume = self._assume
        for attempt in range(_RETRIES):
            with (
                self._guard("write", committing=lambda: bool(state) and state[-1].committing),
                self._connection() as conn,
            ):
                txn = _PostgresWrite(self, conn, assume=assume)
                state.append(txn)
                try:
                    result = fn(txn)
                    txn.commit(self._channel if self.notify else None)
                except (
                    pg_errors.UniqueViolation,
                    pg_errors.SerializationFailure,
                    pg_errors.DeadlockDetected,
                ) as exc:
                    # Nothing of this transaction was written: run fn again, where the
                    # Log sees what the other writer did (module docstring).
                    if not txn.wired:  # (a wired one left its connection idle)
                        self._rollback(conn, failed=True)
                    if txn.assumed or txn.assumed_keys:
                        # (a key assumed new and found stored: a retry, which the
                        # next attempt reads and recognises)
                        self._forget(txn)
                        assume = False
                    elif isinstance(exc, pg_errors.UniqueViolation):
                        self._check_race(conn, txn, exc)
                    state.clear()
                    _pause(attempt)
                    continue
                except psycopg.OperationalError:
                    self._forget(txn)
                    if txn.committing or not conn.broken or attempt >= self._pool.max_size:
                        raise
                    # A connection the server dropped while it sat in the pool fails on
                    # its first round trip, before anything could be written: take another.
                    state.clear()
                    continue
                except Exception as exc:
                    if (txn.assumed or txn.assumed_keys) and not txn.committing:
                        # Decided on an assumed head: decide again on the stored one.
                        if txn.begun:
                            self._rollback(conn, failed=isinstance(exc, psycopg.Error))
                        self._forget(txn)
                        assume = False
                        state.clear()
                        continue
                    if txn.begun and not txn.committing:
                        self._rollback(conn, failed=isinstance(exc, psycopg.Error))
                    raise
                except BaseException as exc:
                    if txn.begun and not txn.committing:
                        self._rollback(conn, failed=isinstance(exc, psycopg.Error))
                    raise
                self._remember(txn)
                return result
        raise StoreError(
            f"a write to {self.location} lost {_RETRIES} races in a row with "
            "other writers of the same session; nothing was written, retry"
        )

    def _prepared(self, conn: Connection[TupleRow]) -> set[str]:
        """The statements of `_PostgresWrite._commit_wire` that ``conn`` prepared."""
        with self._wired_lock:
            return self._wired.setdefault(conn, set())

    def _remember(self, txn: _PostgresWrite) -> None:
        """Keep the heads a committed write left (see `write`)."""
        seen = self._seen
        if len(seen) + len(txn._new_heads) > _SEEN:
            seen.clear()
        seen.update(txn._new_heads)

    def _forget(self, txn: _PostgresWrite) -> None:
        """Drop the heads a failed write assumed or moved: the next write reads them."""
        for session in (*txn.assumed, *txn._new_heads):
            self._seen.pop(session, None)

    @staticmethod
    def _rollback(conn: Connection[TupleRow], *, failed: bool = False) -> None:
        """End a write's transaction; ``failed``: a statement of it failed on the server.

        After a failed statement this goes through psycopg's ``rollback()``, never a
        ROLLBACK statement. In a pipeline the server skips every statement queued after
        the failed one, and one that psycopg chose to prepare there (its sixth execution
        on the connection) is then never prepared, while psycopg's cache counts it as
        prepared from the moment it was queued: its next execution on that connection
        fails with 'prepared statement "_pg3_N" does not exist'. A ROLLBACK statement
        leaves that cache as it is; ``rollback()`` clears it and deallocates the
        connection's statements on the server, so both agree again. Where no transaction
        is left to roll back (the COMMIT itself failed), nothing would clear the cache:
        the connection is closed, and the pool replaces it.
        """
        if conn.closed:
            return
        with suppress(psycopg.Error):  # the pool discards a broken connection
            if not failed:
                conn.execute("ROLLBACK")
            elif conn.info.transaction_status == TransactionStatus.IDLE:
                conn.close()
            else:
                conn.rollback()

    def _check_race(self, conn: Connection[TupleRow], txn: _PostgresWrite, exc: Exception) -> None:
        """After a unique violation: a racing writer moved a head we read (retry), or
        the store holds rows past a head (corrupt; retrying would never succeed)."""
        for session, seen in txn._heads.items():
            row = conn.execute(self._q["head"], (session,)).fetchone()
            if (None if row is None else (int(row[0]), bytes(row[1]))) != seen:
                return
        raise StoreCorruptError(
            f"{self.location}: a write collided with rows no head accounts for "
            f"({self._say(str(exc).strip())}); session rows exist beyond their head. Run "
            "`turnlog verify` and restore the database from a backup"
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._listeners_lock:
            listeners = list(self._listeners)
            self._listeners.clear()
        if os.getpid() == self._pid:
            for conn in listeners:
                conn.close()
            self._pool.close()

    # -- following --------------------------------------------------------------------
    def wait(self, session: str, after_seq: int, timeout: float) -> bool:
        """Block until the session's head is past ``after_seq`` (True) or ``timeout``
        seconds pass (False); one `listen` for one wait."""
        with self.listen() as wait:
            return wait(session, after_seq, timeout)

    @contextmanager
    def listen(self) -> Iterator[Callable[[str, int, float], bool]]:
        """A `wait` for one follower (`Log.follow`), on a connection of its own.

        The connection (outside the pool) LISTENs on the schema's channel, so a
        wait wakes when a writer commits rather than polling; it still re-reads
        the head every second, in case a notification was lost (a writer dying
        between commit and NOTIFY). A connection the server dropped is replaced
        on the next wait (LISTEN again, then re-read the head: nothing is
        missed). When the context ends the connection UNLISTENs and closes: a
        LISTENing connection nobody reads would block its backend and hold the
        cluster-wide notification queue.
        """
        self._check()
        listener = _Listener(self)
        try:
            yield listener.wait
        finally:
            listener.close()

    def _head_now(self, session: str) -> int | None:
        with self.read() as txn:
            head = txn.head(session)
        return None if head is None else head[0]


class _Listener:
    """The LISTENing connection of one follower (see `PostgresStore.listen`)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._conn: Connection[TupleRow] | None = None
        self._polling = False  # the server refuses LISTEN (a replica): re-read each second

    def wait(self, session: str, after_seq: int, timeout: float) -> bool:
        store = self._store
        store._check()
        deadline = time.monotonic() + max(timeout, 0.0)
        with store._guard("follow the session"):
            conn = self._connect()
            while True:
                head = store._head_now(session)
                if head is not None and head > after_seq:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if conn is None:
                    time.sleep(min(left, _RECHECK))
                    continue
                for note in conn.notifies(timeout=min(left, _RECHECK)):
                    if note.payload == session:
                        break

    def _connect(self) -> Connection[TupleRow] | None:
        if self._polling:
            return None
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._release()
        store = self._store
        conn = psycopg.Connection.connect(
            store._conninfo, autocommit=True, connect_timeout=max(1, int(store._timeout))
        )
        with store._listeners_lock:
            store._listeners.add(conn)
        self._conn = conn
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(store._channel)))
            # Writers notify only while somebody holds this (see `_NOTIFY`); taken
            # after the LISTEN and before `wait` reads the head. A writer holds it for
            # the moment its notification's transaction lasts: waited for at most
            # pool_timeout (a transaction stuck there is an outage, as a server that
            # does not answer), and the lock, session-wide, outlives the transaction.
            with conn.transaction():
                conn.execute(
                    "SELECT set_config('lock_timeout', %s, true)",
                    (str(max(1, int(store._timeout * 1000))),),
                )
                conn.execute(_FOLLOW, (follow_key(store._channel),))
        except (
            pg_errors.FeatureNotSupported,
            pg_errors.ReadOnlySqlTransaction,
            pg_errors.ObjectNotInPrerequisiteState,
        ):
            self._polling = True
            self._release()
            return None
        except BaseException:
            # (a connection that LISTENs without the lock would never be notified:
            # the next wait starts again on a new one)
            self._release()
            raise
        return conn

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with self._store._listeners_lock:
            self._store._listeners.discard(conn)
        if not conn.closed and not conn.broken:
            with suppress(psycopg.Error):
                conn.execute("UNLISTEN *")
        conn.close()

    def close(self) -> None:
        if os.getpid() == self._store._pid:
            self._release()


# What a server (or libpq) says when it refuses a connection for good: retrying
# cannot help. A server whose messages are translated (lc_messages) is not
# recognised, and is waited for up to pool_timeout as a server that is down.
_REFUSALS = (
    "does not exist",
    "authentication failed",
    "no pg_hba.conf entry",
    "not permitted to log in",
    "permission denied for database",
    "no password supplied",
    "not currently accepting connections",
    "does not allow connections",
    "but ssl was required",
    "server does not support ssl",
)


#: libpq's words when no server listens where the URL points (a port nothing listens on,
#: a socket file that does not exist): refused at once, where a server that is starting
#: up or busy is waited for up to ``pool_timeout``.
_NOBODY = ("connection refused", "no such file or directory")


def _nobody_listens(reason: str) -> bool:
    """True for a connection refused outright: nothing listens at the address."""
    lowered = reason.lower()
    return any(words in lowered for words in _NOBODY)


def _refused(reason: str) -> bool:
    """True for a connection refused for good (see `_REFUSALS`)."""
    lowered = reason.lower()
    return any(words in lowered for words in _REFUSALS)


def _server_words(reason: str) -> str:
    """The server's own words in libpq's report of a refused connection."""
    return reason.rpartition("FATAL:")[2].strip() or reason


def _one_line(text: str) -> str:
    """A multi-line message (libpq's continuation lines) as one line."""
    return "; ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def _own_params(url: str) -> tuple[str, dict[str, str]]:
    """Split turnlog's own query parameters (``schema``, ``pool_size``,
    ``pool_timeout``) off a URL."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, {}
    kept, own = [], {}
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name in ("schema", "pool_size", "pool_timeout"):
            own[name] = value  # identifiers and integers: nothing to unquote
        elif part:
            kept.append(part)
    return (f"{base}?{'&'.join(kept)}" if kept else base), own


def _pause(attempt: int) -> None:
    """A short, growing pause before running a write again after a lost race."""
    if attempt:
        time.sleep(min(0.0005 * 2 ** min(attempt, 6), 0.03))

"""One-event durable appends on PostgreSQL, alternated round by round in one run.

    python -m tests.bench.bench_postgres_single [EVENTS [ROUNDS]] [--variants] [--fsync-off]
    # default 100 15

Each round makes EVENTS keyed one-event appends, each committed durably, with
every system on one durable server, in an order that alternates from round to
round (forward, then reversed):

* turnlog as the store makes them (the head its last write left assumed, the
  key taken as new, both checked by the server in the round trip that commits);
* a raw psycopg insert of the same records (one round trip per append);
* eventsourcing's recorder (needs ``eventsourcing[postgres]``);
* with ``--variants`` also turnlog with every head and key read first, turnlog
  with ``notify=False``, turnlog without idempotency keys, and eventsourcing's
  application recorder (the one whose readers follow a notification log: it
  locks its table and sends a NOTIFY in every append's transaction).

With ``--fsync-off`` the server does not wait for the disk (nothing is durable):
what is left is the work of the client and the server per append.

Each system appends to a new session (stream) per round. Prints, per system, the
median rate and the median WAL bytes per append (``pg_current_wal_lsn()`` before
and after the round's appends, read on a connection of its own outside the timed
part; full-page images after a checkpoint included), and for turnlog the median
of the per-round paired ratios of its rate to the raw insert's and to the
peer's: the two systems of a pair ran within seconds of each other, so the
disk's swings over the run cancel in each ratio.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable

import msgspec
import psycopg
import turnlog
from turnlog.stores import PostgresStore

from tests import pgserver
from tests.bench.bench_log import make_events, stored_records
from tests.bench.bench_postgres import es_append, es_recorder, raw_append

TURNLOG = "turnlog"
RAW = "raw psycopg insert"
PEER = "eventsourcing"


def turnlog_single(
    url: str, drafts: list[turnlog.Draft], *, notify: bool = True, assume: bool = True
) -> float:
    store = PostgresStore(url, notify=notify)
    store._assume = store._assume and assume  # False: every write reads first
    log = turnlog.Log(store)
    session = uuid.uuid4().hex
    try:
        start = time.perf_counter()
        for draft in drafts:
            log.append(session, draft)
        return time.perf_counter() - start
    finally:
        log.close()


def main(argv: list[str]) -> None:
    variants = "--variants" in argv
    args = [a for a in argv if not a.startswith("--")]
    count = int(args[0]) if args else 100
    rounds = int(args[1]) if len(args) > 1 else 15
    durable = "--fsync-off" not in argv
    server = pgserver.Server(durable=durable)
    started = time.monotonic()
    load = os.getloadavg()[0]
    try:
        es_recorder(server).datastore.close()
        drafts = [
            msgspec.structs.replace(d, key=f"k{i}") for i, d in enumerate(make_events(8, count))
        ]
        unkeyed = [msgspec.structs.replace(d, key=None) for d in drafts]
        records = stored_records(drafts)
        url = server.url(schema="single")
        runs: dict[str, Callable[[], float]] = {
            TURNLOG: lambda: turnlog_single(url, drafts),
            RAW: lambda: raw_append(server, records, 1),
            PEER: lambda: es_append(server, records, 1)[0],
        }
        if variants:
            runs["turnlog, reads first"] = lambda: turnlog_single(url, drafts, assume=False)
            runs["turnlog, notify=False"] = lambda: turnlog_single(url, drafts, notify=False)
            runs["turnlog, no keys"] = lambda: turnlog_single(url, unkeyed)
            runs["eventsourcing, application"] = lambda: es_append(
                server, records, 1, application=True
            )[0]
        times: dict[str, list[float]] = {name: [] for name in runs}
        wal: dict[str, list[float]] = {name: [] for name in runs}
        with psycopg.connect(server.url(), autocommit=True) as admin:

            def lsn() -> str:
                row = admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()
                assert row is not None
                return str(row[0])

            def wal_bytes(before: str, after: str) -> int:
                row = admin.execute(
                    "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (after, before)
                ).fetchone()
                assert row is not None
                return int(row[0])

            for turn in range(rounds):
                order = list(runs) if turn % 2 == 0 else list(reversed(runs))
                for name in order:
                    before = lsn()
                    times[name].append(runs[name]())
                    wal[name].append(wal_bytes(before, lsn()) / count)
        took = time.monotonic() - started
        print(
            f"{count} one-event {'durable ' if durable else ''}appends x {rounds} rounds"
            f"{'' if durable else ' (fsync off)'}; load average (1 min) "
            f"{load:.2f} before, {os.getloadavg()[0]:.2f} after; {took:.0f} s"
        )
        for name in runs:
            line = (
                f"{name:24s} {count / statistics.median(times[name]):7.0f} events/s  "
                f"{statistics.median(wal[name]):6.0f} WAL bytes/append"
            )
            if name.startswith(TURNLOG) or name.endswith("application"):
                raw = [r / t for r, t in zip(times[RAW], times[name], strict=True)]
                peer = [p / t for p, t in zip(times[PEER], times[name], strict=True)]
                q_raw = statistics.quantiles(raw, n=4) if rounds > 1 else raw * 3
                q_peer = statistics.quantiles(peer, n=4) if rounds > 1 else peer * 3
                line += (
                    f"  x raw {statistics.median(raw):.2f} "
                    f"(quartiles {q_raw[0]:.2f}-{q_raw[2]:.2f})"
                    f"  x peer {statistics.median(peer):.2f} "
                    f"(quartiles {q_peer[0]:.2f}-{q_peer[2]:.2f})"
                )
            print(line)
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])

"""One-event durable appends on PostgreSQL, alternated round by round in one run.

    python -m tests.bench.bench_postgres_single [EVENTS [ROUNDS]] [--variants] [--fsync-off]
    python -m tests.bench.bench_postgres_single EVENTS --cpu [--fsync-off]
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

With ``--cpu``, turnlog alone makes EVENTS keyed one-event appends (after 200 that
warm its connection) and prints the CPU time of this thread per append (waits for
the server left out) inside ``Log.append``, ``PostgresStore.write`` (its connection,
its transaction object, the log's work on it, the commit) and the commit (the
statements sent and their answers read), and the wall time per append.

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


def cpu_split(url: str, drafts: list[turnlog.Draft]) -> dict[str, float]:
    """CPU time of this thread per append (µs) inside each layer of a keyed one-event
    append, and the wall time per append (see the module docstring)."""
    from turnlog import _postgres

    spent: dict[str, float] = {}
    layers = [
        (turnlog.Log, "append", "Log.append"),
        (_postgres.PostgresStore, "write", "PostgresStore.write"),
        (_postgres._PostgresWrite, "commit", "the commit"),
    ]
    originals = [(cls, name, getattr(cls, name)) for cls, name, _ in layers]

    def timed(function: Callable[..., object], label: str) -> Callable[..., object]:
        def run(*args: object, **kwargs: object) -> object:
            start = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - start

        return run

    for cls, name, label in layers:
        setattr(cls, name, timed(getattr(cls, name), label))
    try:
        log = turnlog.Log(PostgresStore(url))
        warm, measured = drafts[:200], drafts[200:]
        for draft in warm:
            log.append("warm", draft)
        spent.clear()
        start = time.perf_counter()
        for draft in measured:
            log.append("measured", draft)
        wall = time.perf_counter() - start
        log.close()
    finally:
        for cls, name, function in originals:
            setattr(cls, name, function)
    out = {label: 1e6 * spent[label] / len(measured) for _, _, label in layers}
    out["wall"] = 1e6 * wall / len(measured)
    return out


def main(argv: list[str]) -> None:
    variants = "--variants" in argv
    args = [a for a in argv if not a.startswith("--")]
    count = int(args[0]) if args else 100
    rounds = int(args[1]) if len(args) > 1 else 15
    durable = "--fsync-off" not in argv
    server = pgserver.Server(durable=durable)
    if "--cpu" in argv:
        try:
            drafts = [
                msgspec.structs.replace(d, key=f"k{i}")
                for i, d in enumerate(make_events(8, count + 200))
            ]
            load = os.getloadavg()[0]
            split = cpu_split(server.url(schema="cpu"), drafts)
            print(
                f"{count} keyed one-event {'durable ' if durable else ''}appends; load "
                f"average (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after"
            )
            for label, micros in split.items():
                kind = "wall time" if label == "wall" else "CPU"
                print(f"{label:20s} {micros:7.1f} µs {kind} per append")
        finally:
            server.stop()
        return
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

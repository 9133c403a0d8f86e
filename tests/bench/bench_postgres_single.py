"""One-event durable appends on PostgreSQL, alternated in one run.

    python -m tests.bench.bench_postgres_single [EVENTS [ROUNDS]]   # default 150 3

Keyed one-event appends as the store makes them (one round trip: the head the
last write left is assumed, the key taken as new, both checked by the server in
the round trip that commits), with every head and key read first (three round
trips, as before), with ``notify=False``, beside a raw psycopg insert (one
round trip) and eventsourcing's recorder (needs ``eventsourcing[postgres]``) on
one durable server; prints medians and the ratios to the raw insert and to the
peer.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from collections.abc import Callable

import msgspec
import turnlog
from turnlog.stores import PostgresStore

from tests import pgserver
from tests.bench.bench_log import make_events, stored_records
from tests.bench.bench_postgres import es_append, es_recorder, raw_append


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
    count = int(argv[0]) if argv else 150
    rounds = int(argv[1]) if len(argv) > 1 else 3
    server = pgserver.Server(durable=True)
    try:
        es_recorder(server).datastore.close()
        drafts = [
            msgspec.structs.replace(d, key=f"k{i}") for i, d in enumerate(make_events(8, count))
        ]
        records = stored_records(drafts)
        url = server.url(schema="single")
        runs: dict[str, Callable[[], float]] = {
            "turnlog, one round trip": lambda: turnlog_single(url, drafts),
            "turnlog, reads first": lambda: turnlog_single(url, drafts, assume=False),
            "turnlog, notify=False": lambda: turnlog_single(url, drafts, notify=False),
            "raw psycopg insert": lambda: raw_append(server, records, 1),
            "eventsourcing": lambda: es_append(server, records, 1)[0],
        }
        res: dict[str, list[float]] = {}
        for _ in range(rounds):
            for name, run in runs.items():
                res.setdefault(name, []).append(run())
        med = {name: statistics.median(times) for name, times in res.items()}
        for name, seconds in med.items():
            print(
                f"{name:24s} {count / seconds:8.0f} events/s  "
                f"x raw {med['raw psycopg insert'] / seconds:.2f}  "
                f"x peer {med['eventsourcing'] / seconds:.2f}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main(sys.argv[1:])

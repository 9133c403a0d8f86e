"""What leaving no erased byte in PostgreSQL's WAL costs.

Run from the repository root:

    python -m tests.bench.bench_erase_wal

For each ``wal_recycle`` setting (on, the server's default; off, what docs/erasure.md
asks for), a durable server (fsync on, full-page writes on) gets a session of 2,000
user messages, then ten erasures of one event each; each erasure is timed in its three
parts: the erasure transaction, ``VACUUM (FULL)`` of the store's tables, and the WAL
step (``pg_switch_wal()`` then ``CHECKPOINT``). Medians are printed, with the size of
pg_wal afterwards. Not collected by pytest; CI never runs it.
"""

from __future__ import annotations

import os
import statistics
import time

import psycopg
import turnlog
from turnlog.events import UserMessageAdded

from tests import pgserver


def _run(recycle: str) -> tuple[float, float, float, int]:
    server = pgserver.Server(durable=True, settings={"wal_recycle": recycle})
    try:
        url = server.url(schema="bench")
        txn, vacuum, wal = [], [], []
        with turnlog.open(url) as log, psycopg.connect(server.url(), autocommit=True) as conn:
            for start in range(0, 2000, 100):
                log.append(
                    "s",
                    [
                        UserMessageAdded(text=f"message {i} " + "x" * 200)
                        for i in range(start, start + 100)
                    ],
                )
            for seq in range(10):
                begin = time.perf_counter()
                log.erase("s", [seq], reason="bench", scrub=False)
                middle = time.perf_counter()
                conn.execute("VACUUM (FULL) bench.events, bench.blobs")
                after = time.perf_counter()
                conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
                end = time.perf_counter()
                txn.append(middle - begin)
                vacuum.append(after - middle)
                wal.append(end - after)
        size = sum(p.stat().st_size for p in (server.data / "pg_wal").glob("0*"))
        return (statistics.median(txn), statistics.median(vacuum), statistics.median(wal), size)
    finally:
        server.stop()


def main() -> None:
    """Print the table."""
    print(f"load {os.getloadavg()[0]:.2f}")
    print(
        "| wal_recycle | erasure transaction | VACUUM (FULL) | pg_switch_wal + CHECKPOINT "
        "| pg_wal after |\n| --- | --- | --- | --- | --- |"
    )
    for recycle in ("on", "off"):
        txn, vacuum, wal, size = _run(recycle)
        print(
            f"| {recycle} | {txn * 1000:.1f} ms | {vacuum * 1000:.1f} ms | "
            f"{wal * 1000:.1f} ms | {size / 2**20:.0f} MiB |"
        )


if __name__ == "__main__":
    main()

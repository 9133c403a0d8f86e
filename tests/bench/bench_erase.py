"""Erasure: what it costs append and verify, and what an erase costs.

    python -m tests.bench.bench_erase [EVENTS]

Appends EVENTS user messages (200 bytes) to one LMDB store in batches of 100, verifies
it, erases 1% of the events (one erase call of 1% of them), verifies again, and
times one erase of a single event (its transaction plus the compacting copy that
scrubs data.mdb). Prints one line per figure.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import turnlog
from turnlog.events import UserMessageAdded


def main(events: int = 50_000) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = str(Path(root) / "store")
        with turnlog.open(store, sync=False) as log:
            batch = [UserMessageAdded(text="x" * 190 + f"{i:010d}") for i in range(100)]
            start = time.perf_counter()
            for _ in range(events // 100):
                log.append("s", batch)
            took = time.perf_counter() - start
            print(f"append: {events / took:,.0f} events/s ({events:,} events, batches of 100)")
            start = time.perf_counter()
            assert log.verify().ok
            took = time.perf_counter() - start
            print(f"verify, nothing erased: {events / took:,.0f} events/s")
            erased = list(range(0, events, 100))
            start = time.perf_counter()
            log.erase("s", erased, reason="bench")
            took = time.perf_counter() - start
            print(f"erase of {len(erased):,} events (1%), with the scrub: {took * 1000:,.0f} ms")
            start = time.perf_counter()
            report = log.verify()
            took = time.perf_counter() - start
            assert report.ok and len(report.erased) == len(erased)
            print(f"verify, 1% erased: {events / took:,.0f} events/s")
            size = (Path(store) / "data.mdb").stat().st_size
            start = time.perf_counter()
            log.erase("s", [1], reason="bench", scrub=False)
            txn = time.perf_counter() - start
            start = time.perf_counter()
            log.store.scrub()
            scrub = time.perf_counter() - start
            print(
                f"erase of one event: transaction {txn * 1000:,.1f} ms, scrub (compacting "
                f"copy of {size / 2**20:,.1f} MiB) {scrub * 1000:,.0f} ms"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)

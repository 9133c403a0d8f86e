"""Replay of recorded requests on PostgreSQL beside LMDB, alternated in one run.

    python -m tests.bench.bench_postgres_replay [ROUNDS]   # default 3

Every recorded request of the 0.1.0 golden store (113), replayed through one
`Replayer` per round from LMDB and from a copy of it in PostgreSQL (a server on
this machine, Unix socket); prints each round and the median rates. The first
round of each store also loads the token-count cache.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import turnlog

from tests import pgserver
from tests.bench.bench_postgres import GOLDEN, tl_replay


def main(argv: list[str]) -> None:
    rounds = int(argv[0]) if argv else 3
    server = pgserver.Server()
    tmp = Path(tempfile.mkdtemp())
    try:
        golden = tmp / "golden"
        shutil.copytree(GOLDEN, golden)
        url = server.url(schema="golden")
        with turnlog.open(golden, readonly=True) as source, turnlog.open(url) as target:
            turnlog.log.copy_log(source, target)
        rates: dict[str, list[float]] = {"PostgreSQL": [], "LMDB": []}
        for _ in range(rounds):
            for name, where in (("PostgreSQL", url), ("LMDB", str(golden))):
                seconds, count = tl_replay(where)
                rates[name].append(count / seconds)
                print(f"{name:10s} {count / seconds:8.0f} requests/s")
        pg, lm = (statistics.median(rates[n]) for n in ("PostgreSQL", "LMDB"))
        print(f"median: PostgreSQL {pg:.0f}/s, LMDB {lm:.0f}/s, LMDB / PostgreSQL {lm / pg:.2f}")
    finally:
        server.stop()
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main(sys.argv[1:])

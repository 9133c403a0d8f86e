"""Append paths, CPU only and durable, beside raw LMDB; optionally against another checkout.

Run from the repository root:

    python -m tests.bench.bench_append                    # this checkout, 3 rounds
    python -m tests.bench.bench_append --against ../old   # alternate with another checkout

Measures, in microseconds per event (per call for one-event appends):

* batched: 20,000 events (``bench_log.make_events``) appended in batches of 100
  with ``sync=False`` (the CPU cost of the whole append path: validation,
  encoding, hash chain, LMDB puts and commits without fsync) and ``sync=True``;
* one-event: 3,000 appends of one event with ``sync=False`` (the fixed cost of a
  call) and 300 with ``sync=True`` (each committed and fsynced);
* raw LMDB writing the same stored records the same way (one put per record,
  one transaction per batch), the floor of each.

Each round runs in a fresh process; with ``--against`` the rounds alternate
between the two checkouts (each imported from its own ``kernel/``) in the same
run, so a change of load hits both alike. Medians are printed with every
round's figure, and the load average before and after. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BATCHED, DURABLE, FAST = 20_000, 300, 3_000


def measure() -> dict[str, float]:
    """One round in this process: every figure, in microseconds per event."""
    import lmdb
    import turnlog

    from tests.bench.bench_log import BATCH, SESSION, make_events, stored_records

    drafts = make_events(20240601, BATCHED)
    durable = make_events(20240602, DURABLE)
    fast = make_events(20240603, FAST)
    records = {
        "batched": stored_records(drafts),
        "durable": stored_records(durable),
        "fast": stored_records(fast),
    }  # also warms every code path up
    gc.collect()
    gc.freeze()
    root = tempfile.mkdtemp(prefix="turnlog-bench-append-")
    out: dict[str, float] = {}
    try:

        def turnlog_run(name: str, events: list[turnlog.Draft], batch: int, sync: bool) -> None:
            path = os.path.join(root, name)
            log = turnlog.Log(turnlog.stores.LMDBStore(path, sync=sync))
            start = time.perf_counter()
            if batch == 1:
                for event in events:
                    log.append(SESSION, event)
            else:
                for i in range(0, len(events), batch):
                    log.append(SESSION, events[i : i + batch])
            out[name] = (time.perf_counter() - start) / len(events) * 1e6
            log.close()

        def raw_run(name: str, stored: list[bytes], batch: int, sync: bool) -> None:
            env = lmdb.open(
                os.path.join(root, name),
                map_size=1 << 30,
                max_dbs=2,
                sync=sync,
                metasync=sync,
                readahead=False,
            )
            db = env.open_db(b"events")
            key, prefix = struct.Struct(">Q").pack, SESSION.encode() + b"\x00"
            start = time.perf_counter()
            for i in range(0, len(stored), batch):
                with env.begin(write=True, db=db) as txn:
                    for j, record in enumerate(stored[i : i + batch], i):
                        txn.put(prefix + key(j), record, append=True)
            out[name] = (time.perf_counter() - start) / len(stored) * 1e6
            env.close()

        turnlog_run("batched, sync off", drafts, BATCH, False)
        turnlog_run("batched, sync on", drafts, BATCH, True)
        turnlog_run("one-event, sync off", fast, 1, False)
        turnlog_run("one-event, sync on", durable, 1, True)
        raw_run("raw LMDB batched, sync off", records["batched"], BATCH, False)
        raw_run("raw LMDB batched, sync on", records["batched"], BATCH, True)
        raw_run("raw LMDB one-event, sync off", records["fast"], 1, False)
        raw_run("raw LMDB one-event, sync on", records["durable"], 1, True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def _round(checkout: Path) -> dict[str, float]:
    """One round in a fresh process importing turnlog from ``checkout``'s kernel/."""
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-kernel-") as tmp:
        os.symlink(checkout / "kernel", Path(tmp) / "turnlog")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, str(ROOT)]))
        done = subprocess.run(
            [sys.executable, "-m", "tests.bench.bench_append", "--one"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(f"a round failed for {checkout}:\n{done.stderr}")
        figures: dict[str, float] = json.loads(done.stdout)
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout to alternate with")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure()))
        return
    sides = {"this": ROOT}
    if args.against is not None:
        sides = {"against": args.against.resolve(), "this": ROOT}
    load = (
        Path("/proc/loadavg").read_text().split()[:3]
        if os.path.exists("/proc/loadavg")
        else ["?"] * 3
    )
    runs: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    for n in range(args.rounds):
        order = list(sides) if n % 2 == 0 else list(sides)[::-1]
        for side in order:
            for name, value in _round(sides[side]).items():
                runs[side].setdefault(name, []).append(value)
    after = (
        Path("/proc/loadavg").read_text().split()[:3]
        if os.path.exists("/proc/loadavg")
        else ["?"] * 3
    )
    print(
        f"load average {' '.join(load)} before, {' '.join(after)} after; median of "
        f"{args.rounds} rounds, us per event [each round]"
    )
    for name in runs["this"]:
        for i, side in enumerate(sides):
            values = runs[side][name]
            print(
                f"  {name if i == 0 else '':30} {side:8} {statistics.median(values):8.2f}  "
                f"[{', '.join(f'{v:.2f}' for v in values)}]"
            )


if __name__ == "__main__":
    main()

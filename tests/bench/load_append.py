"""Load: several processes append to one session of one store, with optimistic concurrency.

Run from the repository root:

    python -m tests.bench.load_append                       # 4 processes, 20 s
    python -m tests.bench.load_append --procs 8 --seconds 60

Each worker process opens the store itself and, until the deadline, appends
one-event batches (keyed ``w<worker>-<n>``) to the same session with
``expected_seq`` set to the head it just read; on `AppendConflictError` it
counts the conflict, re-reads the head and retries the same batch. After every
fourth of those it appends a two-event batch to a session of its own (also with
``expected_seq``: no other writer, so it must never conflict). Afterwards the
parent checks that every acknowledged batch is in its session exactly once,
that nothing else is, that seqs are dense and every chain verifies, and that
every attempt either landed or was reported as a conflict. It prints
throughput and retry figures (``--json`` for a machine-readable line).

tests/test_load.py runs it briefly on every test run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import turnlog
from turnlog import Draft
from turnlog.errors import AppendConflictError
from turnlog.events import UserMessageAdded

SESSION = "shared"


def worker(path: str, wid: int, start_at: float, seconds: float, sync: bool, out: Any) -> None:
    """Append until the deadline; put a summary on ``out``."""
    log = turnlog.open(path, sync=sync)
    acked: list[tuple[int, int]] = []  # (n, seq)
    own: list[tuple[int, int]] = []  # (n, first seq) in the worker's own session
    retries: list[int] = []
    conflicts = attempts = 0
    errors: list[str] = []
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    n = 0
    try:
        while time.time() < deadline:
            draft = Draft(
                body=UserMessageAdded(text=f"worker {wid} message {n}"),
                key=f"w{wid}-{n}",
                meta={"w": wid, "n": n},
            )
            tries = 0
            while True:
                head = log.head(SESSION)
                expected = head.seq if head is not None else turnlog.log.NEW_SESSION
                attempts += 1
                try:
                    done = log.append(SESSION, [draft], expected_seq=expected)
                except AppendConflictError as exc:
                    conflicts += 1
                    tries += 1
                    if exc.expected != expected or exc.actual == expected:
                        errors.append(
                            f"conflict reports expected {exc.expected}, actual "
                            f"{exc.actual} for an append expecting {expected}"
                        )
                    continue
                break
            acked.append((n, done.first_seq))
            retries.append(tries)
            if n % 4 == 3:
                mine = f"own-{wid}"
                head = log.head(mine)
                own_seq = log.append(
                    mine,
                    [
                        Draft(body=UserMessageAdded(text=f"worker {wid} note {n}"), meta={"n": n}),
                        Draft(
                            body=UserMessageAdded(text=f"worker {wid} note {n}, part 2"),
                            meta={"n": n},
                        ),
                    ],
                    expected_seq=head.seq if head is not None else turnlog.log.NEW_SESSION,
                )
                own.append((n, own_seq.first_seq))
            n += 1
    except Exception as exc:  # reported, not raised: the parent checks
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        log.close()
    out.put(
        {
            "worker": wid,
            "acked": acked,
            "own": own,
            "retries": retries,
            "conflicts": conflicts,
            "attempts": attempts,
            "errors": errors,
        }
    )


def run(
    path: str | Path,
    *,
    procs: int = 4,
    seconds: float = 20.0,
    sync: bool = True,
) -> dict[str, Any]:
    """Run the load and check the result; returns the figures (raises AssertionError)."""
    path = str(path)
    turnlog.open(path).close()  # create the store before the workers race to
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 2.0 + 0.3 * procs  # after every interpreter has started
    workers = [
        ctx.Process(target=worker, args=(path, w, start_at, seconds, sync, out))
        for w in range(procs)
    ]
    for p in workers:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in workers]
    for p in workers:
        p.join(timeout=60)
    elapsed = seconds
    errors = [e for r in results for e in r["errors"]]
    assert not errors, errors[:5]
    with turnlog.open(path, readonly=True) as log:
        report = log.verify()
        assert report.ok, str(report.problem)
        events = log.read(SESSION) if log.head(SESSION) is not None else []
        own = {r["worker"]: log.read(f"own-{r['worker']}") if r["own"] else [] for r in results}
    for r in results:  # each worker's own session: its batches, whole, in order, nothing else
        got = [(e.meta["n"], e.seq) for e in own[r["worker"]]]
        want = [(n, seq + i) for n, seq in r["own"] for i in range(2)]
        assert got == want, f"worker {r['worker']}'s own session differs from what it appended"
    found = [(e.meta["w"], e.meta["n"]) for e in events]
    assert [e.seq for e in events] == list(range(len(events))), "seqs are not dense"
    assert len(found) == len(set(found)), "an event was appended twice"
    acked = {(r["worker"], n): seq for r in results for n, seq in r["acked"]}
    assert set(found) == set(acked), (
        f"lost: {sorted(set(acked) - set(found))[:5]}, "
        f"unacknowledged: {sorted(set(found) - set(acked))[:5]}"
    )
    for event in events:
        assert acked[event.meta["w"], event.meta["n"]] == event.seq, "acknowledged elsewhere"
    attempts = sum(r["attempts"] for r in results)
    conflicts = sum(r["conflicts"] for r in results)
    assert attempts == len(events) + conflicts, "an attempt neither landed nor conflicted"
    retries = [t for r in results for t in r["retries"]]
    per_worker = [len(r["acked"]) for r in results]
    own_events = sum(len(v) for v in own.values())
    assert report.events == len(events) + own_events, "the store holds other events"
    return {
        "procs": procs,
        "seconds": elapsed,
        "sync": sync,
        "events": len(events),
        "own_events": own_events,
        "store_events_per_s": report.events / elapsed,
        "events_per_s": len(events) / elapsed,
        "attempts": attempts,
        "conflicts": conflicts,
        "conflict_rate": conflicts / attempts if attempts else 0.0,
        "retries_mean": statistics.mean(retries) if retries else 0.0,
        "retries_max": max(retries, default=0),
        "retries_p99": sorted(retries)[int(0.99 * (len(retries) - 1))] if retries else 0,
        "per_worker": per_worker,
    }


def describe(r: dict[str, Any]) -> str:
    return (
        f"{r['procs']} processes, {r['seconds']:.0f} s, sync={r['sync']}: "
        f"{r['events']:,} events in the shared session ({r['events_per_s']:,.0f}/s) and "
        f"{r['own_events']:,} in the workers' own ({r['store_events_per_s']:,.0f}/s in all), "
        f"{r['attempts']:,} attempts, "
        f"{r['conflicts']:,} conflicts ({r['conflict_rate']:.0%}), retries per event mean "
        f"{r['retries_mean']:.2f} / p99 {r['retries_p99']} / max {r['retries_max']}; "
        f"per worker {r['per_worker']}; no event lost or duplicated, chain verified"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.load_append", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--no-sync", action="store_true", help="open with sync=False")
    parser.add_argument("--dir", default=None, help="where to put the store (default: temp)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="turnlog-load-", dir=args.dir)
    try:
        result = run(
            os.path.join(root, "store"),
            procs=args.procs,
            seconds=args.seconds,
            sync=not args.no_sync,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result) if args.json else describe(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

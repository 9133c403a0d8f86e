"""Soak: a long run of many sessions, packed every turn; memory and pack latency over time.

Run from the repository root:

    python -m tests.bench.load_soak                                   # 1,000,000 events
    python -m tests.bench.load_soak --events 50000 --sessions 100     # a short run

Turns go round-robin over ``--sessions`` sessions of one LMDB store; a turn is
a user message, an assistant message with one or two tool calls, their results
and an assistant reply (4 or 5 events, about 1 KiB of text in all, a large
output now and then), appended as one batch, and then the session is packed
with one long-lived `Packer` (so every pack is incremental, as in an agent
loop). Every ``--every`` events it reports the events so far, the process's
resident memory (current and peak), the store's size, and the pack latency
(median, p95 and max) and append rate over that window, so that growth shows:
the Packer keeps one projection per session, so memory grows with the events
held; pack latency should stay flat once sessions are past the window.
``--freeze`` calls ``gc.freeze()`` after every window (see docs/reliability.md,
"Load", for why the worst packs otherwise grow with the heap).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import turnlog
from turnlog import (
    AssistantMessageAdded,
    Policy,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)
from turnlog.events import Body
from turnlog.replay import Packer

POLICY = Policy(context_window=32_000, output_reserve=4_000)
_WORDS = ("the", "file", "test", "build", "error", "function", "module", "value", "fix",
          "import", "config", "path", "returns", "list", "check", "update", "run", "data")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def turn(rng: random.Random, t: int) -> list[Body]:
    """One turn of an agent session (4 or 5 events)."""
    calls = [f"t{t}-c{i}" for i in range(rng.choice((1, 1, 2)))]
    out: list[Body] = [UserMessageAdded(text=f"Turn {t}: {_text(rng, 25)}")]
    out.append(AssistantMessageAdded(parts=(TextPart(text=_text(rng, 20)), *(
        ToolCall(id=c, name=rng.choice(("Read", "Bash", "Grep")),
                 arguments=json.dumps({"file_path": f"src/m{rng.randrange(40)}.py"}))
        for c in calls))))
    for c in calls:
        size = 40 if rng.random() < 0.97 else 3_000
        out.append(ToolResultAdded(call_id=c, tool_name="Read", output="\n".join(
            f"{i:5d} {_text(rng, 6)}" for i in range(rng.randrange(4, size)))))
    out.append(AssistantMessageAdded(parts=(TextPart(text=_text(rng, 30)),)))
    return out


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process, in MiB."""
    with open("/proc/self/statm") as f:
        current = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return current, peak


def run(path: str | Path, *, events: int = 1_000_000, sessions: int = 1_000,
        every: int = 50_000, sync: bool = False, seed: int = 1,
        progress: bool = True, freeze: bool = False) -> list[dict[str, Any]]:
    """Run the soak; return one row per window.

    With ``freeze``, ``gc.freeze()`` is called after every window: the objects
    alive then (the projections built so far) are left out of later garbage
    collections, which is what an application that holds many projections can
    do against full-collection pauses.
    """
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    log = turnlog.open(path, sync=sync)
    packer = Packer(log)
    total = t = 0
    window: list[float] = []
    window_events = 0
    appended_s = 0.0
    start = last = time.perf_counter()
    try:
        while total < events:
            session = f"s{t % sessions:05d}"
            batch = turn(rng, t)
            a0 = time.perf_counter()
            log.append(session, batch)
            a1 = time.perf_counter()
            packer.pack(session, policy=POLICY, explain=False)
            window.append((time.perf_counter() - a1) * 1e3)
            appended_s += a1 - a0
            total += len(batch)
            window_events += len(batch)
            t += 1
            if total // every != (total - len(batch)) // every or total >= events:
                now = time.perf_counter()
                current, peak = rss_mb()
                window.sort()
                row = {
                    "events": total, "turns": t, "elapsed_s": round(now - start, 1),
                    "rss_mb": round(current), "peak_rss_mb": round(peak),
                    "store_mb": round(os.path.getsize(os.path.join(path, "data.mdb")) / 2**20),
                    "pack_ms_p50": round(statistics.median(window), 3),
                    "pack_ms_p95": round(window[int(0.95 * (len(window) - 1))], 3),
                    "pack_ms_max": round(window[-1], 3),
                    "append_events_per_s": round(window_events / appended_s)
                    if appended_s else 0,
                    "window_s": round(now - last, 1),
                }
                rows.append(row)
                if progress:
                    print(json.dumps(row), file=sys.stderr, flush=True)
                window, window_events, appended_s, last = [], 0, 0.0, now
                if freeze:
                    gc.freeze()
        report = log.verify()
        assert report.ok, str(report.problem)
    finally:
        log.close()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| events | elapsed | RSS (peak) | store | pack p50 / p95 / max | appends |",
             "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['events']:,} | {r['elapsed_s']:,.0f} s | {r['rss_mb']:,} MiB "
                     f"({r['peak_rss_mb']:,}) | {r['store_mb']:,} MiB | {r['pack_ms_p50']:.2f} / "
                     f"{r['pack_ms_p95']:.2f} / {r['pack_ms_max']:.1f} ms "
                     f"| {r['append_events_per_s']:,}/s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.load_soak",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--every", type=int, default=50_000, help="report every N events")
    parser.add_argument("--sync", action="store_true", help="fsync every append")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where to put the store (default: temp)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--freeze", action="store_true",
                        help="gc.freeze() after every window (see run)")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="turnlog-soak-", dir=args.dir)
    try:
        rows = run(os.path.join(root, "store"), events=args.events, sessions=args.sessions,
                   every=args.every, sync=args.sync, seed=args.seed, freeze=args.freeze)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(rows) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

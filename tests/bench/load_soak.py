"""Soak: a long run of many sessions, packed every turn; memory and pack latency over time.

Run from the repository root:

    python -m tests.bench.load_soak                                   # 1,000,000 events
    python -m tests.bench.load_soak --events 50000 --sessions 100     # a short run

The run is ``--events`` events over ``--sessions`` sessions of one LMDB store,
each session getting the same share (1,000 events by default). ``--active``
sessions run at a time, as agent runs do in an orchestrator: each turn goes to
one of them, picked at random, and a session that has had its share ends and
a new one starts. A turn is a user message, an assistant message with one or
two tool calls, their results and an assistant reply (4 or 5 events, about
1 KiB of text in all, a large output now and then), appended as one batch;
then the session is packed with one long-lived `Packer` (so most packs are
incremental, as in an agent loop), whose projection cache is bounded
(``--cached``, 64 by default).

Every ``--every`` events it reports the events so far, the process's memory
(anonymous resident memory, i.e. the heap, which must stay bounded; the pages
of the store mapped in, which the kernel can drop; and the peak), the store's
size, and the pack latency (median, p95, p99, max) and append rate over that
window.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import turnlog
from turnlog import Packer, Policy
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    TextPart,
    ToolCall,
    ToolResultAdded,
    UserMessageAdded,
)

POLICY = Policy(context_window=32_000, output_reserve=4_000)
_WORDS = (
    "the",
    "file",
    "test",
    "build",
    "error",
    "function",
    "module",
    "value",
    "fix",
    "import",
    "config",
    "path",
    "returns",
    "list",
    "check",
    "update",
    "run",
    "data",
)


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def turn(rng: random.Random, t: int) -> list[Body]:
    """One turn of an agent session (4 or 5 events)."""
    calls = [f"t{t}-c{i}" for i in range(rng.choice((1, 1, 2)))]
    out: list[Body] = [UserMessageAdded(text=f"Turn {t}: {_text(rng, 25)}")]
    out.append(
        AssistantMessageAdded(
            parts=(
                TextPart(text=_text(rng, 20)),
                *(
                    ToolCall(
                        id=c,
                        name=rng.choice(("Read", "Bash", "Grep")),
                        arguments=json.dumps({"file_path": f"src/m{rng.randrange(40)}.py"}),
                    )
                    for c in calls
                ),
            )
        )
    )
    for c in calls:
        size = 40 if rng.random() < 0.97 else 3_000
        out.append(
            ToolResultAdded(
                call_id=c,
                tool_name="Read",
                output="\n".join(f"{i:5d} {_text(rng, 6)}" for i in range(rng.randrange(4, size))),
            )
        )
    out.append(AssistantMessageAdded(parts=(TextPart(text=_text(rng, 30)),)))
    return out


def memory_mb() -> dict[str, float]:
    """This process's resident memory in MiB: anonymous (heap), file-backed
    (mapped store pages) and the peak of the total."""
    fields: dict[str, float] = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile", "VmHWM"):
                fields[name] = int(value.split()[0]) / 1024
    return fields


def run(
    path: str | Path,
    *,
    events: int = 1_000_000,
    sessions: int = 1_000,
    active: int = 50,
    cached: int = 64,
    every: int = 50_000,
    sync: bool = False,
    seed: int = 1,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Run the soak; return one row per window (see the module's doc)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    share = -(-events // sessions)
    log = turnlog.open(path, sync=sync)
    packer = Packer(log, cached_sessions=cached)
    running: list[int] = list(range(min(active, sessions)))  # session numbers
    started = len(running)
    held: dict[int, int] = dict.fromkeys(running, 0)  # events per running session
    total = t = packs = 0
    window: list[float] = []
    window_events = 0
    appended_s = 0.0
    start = last = time.perf_counter()
    try:
        while total < events and running:
            slot = rng.randrange(len(running))
            number = running[slot]
            session = f"s{number:05d}"
            batch = turn(rng, t)
            a0 = time.perf_counter()
            log.append(session, batch)
            a1 = time.perf_counter()
            packer.pack(session, policy=POLICY, explain=False)
            window.append((time.perf_counter() - a1) * 1e3)
            packs += 1
            appended_s += a1 - a0
            total += len(batch)
            window_events += len(batch)
            held[number] += len(batch)
            t += 1
            if held[number] >= share:  # this run is over; the next one starts
                del held[number]
                if started < sessions:
                    running[slot] = started
                    held[started] = 0
                    started += 1
                else:
                    running.pop(slot)
            if total // every != (total - len(batch)) // every or total >= events:
                now = time.perf_counter()
                memory = memory_mb()
                window.sort()
                row = {
                    "events": total,
                    "turns": t,
                    "sessions": started,
                    "elapsed_s": round(now - start, 1),
                    "heap_mb": round(memory["RssAnon"]),
                    "mapped_mb": round(memory["RssFile"]),
                    "peak_rss_mb": round(memory["VmHWM"]),
                    "store_mb": round(os.path.getsize(os.path.join(path, "data.mdb")) / 2**20),
                    "pack_ms_p50": round(statistics.median(window), 3),
                    "pack_ms_p95": round(window[int(0.95 * (len(window) - 1))], 3),
                    "pack_ms_p99": round(window[int(0.99 * (len(window) - 1))], 3),
                    "pack_ms_max": round(window[-1], 3),
                    "append_events_per_s": round(window_events / appended_s) if appended_s else 0,
                    "window_s": round(now - last, 1),
                }
                rows.append(row)
                if progress:
                    print(json.dumps(row), file=sys.stderr, flush=True)
                window, window_events, appended_s, last = [], 0, 0.0, now
        report = log.verify()
        assert report.ok, str(report.problem)
        assert report.events == total and len(log.sessions()) == started
    finally:
        log.close()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| events | sessions | elapsed | heap | mapped store | peak RSS | store "
        "| pack p50 / p95 / p99 / max | appends |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['events']:,} | {r['sessions']:,} | {r['elapsed_s']:,.0f} s "
            f"| {r['heap_mb']:,} MiB | {r['mapped_mb']:,} MiB | {r['peak_rss_mb']:,} MiB "
            f"| {r['store_mb']:,} MiB | {r['pack_ms_p50']:.2f} / {r['pack_ms_p95']:.2f} / "
            f"{r['pack_ms_p99']:.2f} / {r['pack_ms_max']:.1f} ms "
            f"| {r['append_events_per_s']:,}/s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.load_soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--active", type=int, default=50, help="sessions running at a time")
    parser.add_argument("--cached", type=int, default=64, help="the Packer's cached_sessions")
    parser.add_argument("--every", type=int, default=50_000, help="report every N events")
    parser.add_argument("--sync", action="store_true", help="fsync every append")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where to put the store (default: temp)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="turnlog-soak-", dir=args.dir)
    try:
        rows = run(
            os.path.join(root, "store"),
            events=args.events,
            sessions=args.sessions,
            active=args.active,
            cached=args.cached,
            every=args.every,
            sync=args.sync,
            seed=args.seed,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(rows) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

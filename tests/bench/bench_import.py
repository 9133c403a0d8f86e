"""Import figures for every file of the shared transcript corpus.

Run from the repository root:

    python -m tests.bench.bench_import            # every corpus file, a markdown table
    python -m tests.bench.bench_import --repeat 5 # median of 5 imports per file

Each file is imported into a fresh LMDB store (``turnlog.open(dir)``, default
``sync=True``: every batch is on disk when it returns), with ``skip_bad=True``
for the one corpus file with damaged lines. Reported per file: the format,
the size, the sessions, events, tool calls and blobs the file maps to, the
records left out, the median import time, the time of a second import of
the same file (which appends nothing) and of an export back to the format.
This file is not collected by pytest (``tests/bench`` is excluded); CI never
runs it.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import turnlog
from turnlog.adapters.importers import ImportSummary, export_session, import_file

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"


def _measure(path: Path, repeat: int) -> tuple[ImportSummary, float, float, float]:
    damaged = path.name.startswith("3af9b1a7")
    times: list[float] = []
    summary: ImportSummary | None = None
    again = export = 0.0
    for _ in range(repeat):
        folder = Path(tempfile.mkdtemp(prefix="turnlog-bench-import-"))
        try:
            with turnlog.open(folder / "store") as log:
                start = time.perf_counter()
                summary = import_file(log, path, skip_bad=damaged)
                times.append(time.perf_counter() - start)
                start = time.perf_counter()
                import_file(log, path, skip_bad=damaged)
                again = time.perf_counter() - start
                start = time.perf_counter()
                for root in summary.roots:
                    export_session(log, root, summary.format)
                export = time.perf_counter() - start
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    assert summary is not None
    return summary, statistics.median(times), again, export


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="imports per file (median)")
    args = parser.parse_args()
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name != "SOURCES.md")
    if not files:
        raise SystemExit(f"no corpus at {CORPUS}")
    print(
        f"python {platform.python_version()}, {platform.machine()}, "
        f"median of {args.repeat} imports per file\n"
    )
    print(
        "| file | format | bytes | sessions | events | tool calls | blobs | skipped "
        "| import s | re-import s | export s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    totals = [0, 0, 0, 0, 0]
    seconds = 0.0
    for path in files:
        summary, took, again, export = _measure(path, args.repeat)
        name = path.name if len(path.name) <= 44 else path.name[:20] + "…" + path.name[-20:]
        size = path.stat().st_size
        print(
            f"| {name} | {summary.format} | {size:,} | {len(summary.sessions)} "
            f"| {summary.events:,} | {summary.tool_calls:,} | {summary.blobs} "
            f"| {len(summary.skipped)} | {took:.3f} | {again:.3f} | {export:.3f} |"
        )
        for i, value in enumerate(
            (size, len(summary.sessions), summary.events, summary.tool_calls, summary.blobs)
        ):
            totals[i] += value
        seconds += took
    print(
        f"| **{len(files)} files** | | {totals[0]:,} | {totals[1]} | {totals[2]:,} "
        f"| {totals[3]:,} | {totals[4]} | | {seconds:.3f} | | |"
    )


if __name__ == "__main__":
    main()

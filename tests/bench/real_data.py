"""The real-data check: every corpus transcript, imported, packed, rendered, replayed.

    python -m tests.bench.real_data [--corpus DIR] [--markdown]

For every file of the shared transcript corpus: import it into a fresh LMDB
store (idempotently: a second import must append nothing), then for each window
(8k, 32k, 128k) and each provider format (OpenAI Chat, OpenAI Responses,
Anthropic) pack the main session, check every packing invariant of
``turnlog.testing``, record the request with its rendered body, and finally
replay every request, neutral prompt and rendered body both. Prints one row
per file: events, tokens of the history, seconds to import, milliseconds per
pack, requests recorded and replayed identically.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import turnlog
from turnlog import BudgetExceededError, Packer, Policy
from turnlog.adapters.importers import import_file
from turnlog.adapters.providers import PROVIDERS, render_args, renderer, renderer_for
from turnlog.testing import check_packed

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
WINDOWS = {8_000: 1_000, 32_000: 4_000, 128_000: 16_000}  # window -> output reserve


def policy_for(window: int) -> Policy:
    """The default policy at a window, output reserve scaled."""
    return Policy(context_window=window, output_reserve=WINDOWS[window])


def check_file(path: Path, root: Path) -> dict[str, object]:
    """Import, pack at every window in every format, record, replay; return the row."""
    with turnlog.open(root / "store") as log:
        started = time.perf_counter()
        summary = import_file(log, path, skip_bad=True)
        imported = time.perf_counter() - started
        again = import_file(log, path, skip_bad=True)
        assert again.appended == 0, f"{path}: a second import appended {again.appended}"
        session = max(summary.sessions, key=lambda s: (log.head(s).seq, s)) \
            if summary.sessions else ""
        row: dict[str, object] = {"file": path.name, "format": summary.format,
                                  "events": summary.events, "tokens": 0, "import_s": imported,
                                  "packs": 0, "pack_ms": 0.0, "requests": 0, "identical": 0,
                                  "over_budget": 0}
        if not session:
            return row
        packer = Packer(log)
        pack_seconds = 0.0
        for window in WINDOWS:
            policy = policy_for(window)
            for fmt in sorted(PROVIDERS):
                render = renderer(fmt, model="check-model", max_tokens=policy.output_reserve,
                                  blobs=log.blob)
                started = time.perf_counter()
                try:
                    recorded = packer.record(session, policy=policy, model="check-model",
                                             format=fmt, render=render,
                                             render_args=render_args(
                                                 max_tokens=policy.output_reserve))
                except BudgetExceededError:
                    row["over_budget"] = int(str(row["over_budget"])) + 1
                    continue
                pack_seconds += time.perf_counter() - started
                row["packs"] = int(str(row["packs"])) + 1
                # The invariants are checked on the history the request was packed from.
                record = log.get(session, recorded.request_seq).body
                assert isinstance(record, turnlog.RequestIssued)
                view = packer.projection_at(session, record.head_seq, packer.counter_for(policy))
                packed = recorded.packed
                assert view.head == packed.head
                check_packed(view, packed, policy)
        view = packer.projection(session, packer.counter_for(policy_for(128_000)))
        row["tokens"] = (sum(it.tokens for it in view.items) + sum(view.section_tokens.values())
                         + view.tools_tokens)
        seqs = packer.requests(session)
        row["requests"] = len(seqs)
        for seq in seqs:
            request = log.get(session, seq).body
            assert isinstance(request, turnlog.RequestIssued)
            if packer.replay(session, seq, render=renderer_for(request, blobs=log.blob)).ok:
                row["identical"] = int(str(row["identical"])) + 1
        row["pack_ms"] = 1000 * pack_seconds / max(1, int(str(row["packs"])))
        assert log.verify().ok
        return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.real_data")
    parser.add_argument("--corpus", default=str(CORPUS), help="the corpus directory")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    files = sorted(p for p in Path(args.corpus).rglob("*") if p.is_file()
                   and p.suffix in (".jsonl", ".json", ".traj") and p.stat().st_size > 0)
    rows = []
    for path in files:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(check_file(path, Path(tmp)))
    header = ("file", "format", "events", "tokens", "import_s", "pack_ms", "packs",
              "over_budget", "requests", "identical")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    for row in rows:
        cells = [f"{row[h]:.3f}" if h == "import_s" else f"{row[h]:.1f}" if h == "pack_ms"
                 else str(row[h]) for h in header]
        print(("| " + " | ".join(cells) + " |") if args.markdown else "  ".join(cells))
    total = sum(int(str(r["requests"])) for r in rows)
    same = sum(int(str(r["identical"])) for r in rows)
    print(f"{len(rows)} files; {total} requests recorded, {same} replayed byte for byte "
          "(neutral prompt and rendered body)", file=sys.stderr)
    return 0 if total == same else 1


if __name__ == "__main__":
    sys.exit(main())

"""What redaction at the door costs: the scan alone, and an import with and without it.

Run from the repository root:

    python -m tests.bench.bench_redaction

The text is every file of the shared transcript corpus (``../shared/corpus``, or
``TURNLOG_CORPUS``), read as UTF-8. Reported: the scan rate of `Redactor` with the
default detectors and with every regular-expression plugin (`ALL_DETECTORS`), and
the time to import the corpus's Claude Code and Codex transcripts into a fresh LMDB
store without and with the default redactor (median of three). Not collected by
pytest; CI never runs it.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import turnlog
from turnlog.adapters.importers import import_path
from turnlog.adapters.redaction import ALL_DETECTORS, Redactor

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
)


def _scan(redactor: Redactor, text: str) -> tuple[float, dict[str, int]]:
    start = time.perf_counter()
    _, counts = redactor.text(text)
    return time.perf_counter() - start, counts


def _import(redactor: Redactor | None) -> float:
    times = []
    for _ in range(3):
        folder = Path(tempfile.mkdtemp(prefix="turnlog-bench-redact-"))
        try:
            with turnlog.open(folder / "store") as log:
                start = time.perf_counter()
                for sub in ("claude_code_jsonl", "codex_rollout_jsonl"):
                    import_path(
                        log, CORPUS / sub, redactor=redactor, skip_bad=True, keep_going=True
                    )
                times.append(time.perf_counter() - start)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return statistics.median(times)


def main() -> None:
    """Print the table."""
    files = sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix != ".md")
    text = "".join(p.read_bytes().decode("utf-8", "replace") for p in files)
    mib = len(text.encode()) / 2**20
    default, counts = _scan(Redactor(), text)
    every, _ = _scan(Redactor(detectors=ALL_DETECTORS), text)
    plain = _import(None)
    redacted = _import(Redactor())
    print(
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}; "
        f"{len(files)} files, {mib:.1f} MiB; found {counts}"
    )
    print("| measure | figure |\n| --- | --- |")
    print(f"| scan, default detectors | {mib / default:.2f} MiB/s ({default:.2f} s) |")
    print(f"| scan, every regular-expression plugin | {mib / every:.2f} MiB/s ({every:.2f} s) |")
    print(f"| import of the Claude Code and Codex transcripts, no redactor | {plain:.2f} s |")
    print(
        f"| the same import, default redactor | {redacted:.2f} s "
        f"(+{(redacted / plain - 1) * 100:.0f}%) |"
    )


if __name__ == "__main__":
    main()

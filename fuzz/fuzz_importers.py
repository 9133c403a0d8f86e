"""Fuzz the transcript importers, with the format forced and detected.

The first byte picks the format (or detection) and ``skip_bad``; the rest is
the file. Contract: `import_file` imports or raises ``ImportFormatError`` (a
``KernelError``), and on an error nothing at all was appended (no session, no
blob). After an import the log verifies, a second import appends nothing, and
every imported root session exports in its format. `detect` returns one of
``FORMATS`` or raises ``ImportFormatError``.

    python fuzz/fuzz_importers.py /tmp/work-importers fuzz/corpus/importers \\
        -max_total_time=600
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _harness import instrumented, main

with instrumented(__name__ == "__main__"):
    from turnlog import KernelError
    from turnlog.adapters.importers import FORMATS, detect, export_session, import_file
    from turnlog.errors import ImportFormatError
    from turnlog.testing import memory_log

_NAMES = {
    "codex": "rollout-2025-01-01T00-00-00-fuzz.jsonl",
    "aider": ".aider.chat.history.md",
    "mini_swe_agent": "fuzz.traj.json",
    "swe_agent": "fuzz.traj",
    "openhands_output": "output.jsonl",
}
_DIR = Path(
    tempfile.mkdtemp(
        prefix="turnlog-fuzz-import-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
)
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)


def _blobs(log: object) -> int:
    from turnlog import Log

    assert isinstance(log, Log)
    with log.store.read() as txn:
        return sum(1 for _ in txn.blobs())


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    selector, body = data[0], data[1:]
    choice = selector % (len(FORMATS) + 1)
    fmt = FORMATS[choice] if choice < len(FORMATS) else None
    skip_bad = bool(selector & 0x80)
    try:
        found = detect(body, name="fuzz.jsonl")
    except ImportFormatError:
        found = None
    if found is not None and found not in FORMATS:
        raise AssertionError(f"detect returned {found!r}")
    path = _DIR / _NAMES.get(fmt or found or "", "session-fuzz.jsonl")
    path.write_bytes(body)
    log = memory_log()
    try:
        summary = import_file(log, path, format=fmt, skip_bad=skip_bad)
    except KernelError as exc:
        if not isinstance(exc, ImportFormatError):
            raise AssertionError(
                f"import raised {type(exc).__name__}, not ImportFormatError: {exc}"
            ) from exc
        if log.sessions() or _blobs(log):
            raise AssertionError("a failed import appended something") from exc
        return
    report = log.verify()
    if not report.ok:
        raise AssertionError(f"an imported log does not verify: {report.problem}")
    heads = log.sessions()
    again = import_file(log, path, format=fmt, skip_bad=skip_bad)
    if again.appended != 0 or log.sessions() != heads:
        raise AssertionError("a second import appended events")
    out_format = fmt or found
    if out_format is None:
        raise AssertionError("import succeeded although the format was not detected")
    for root in summary.roots:
        export_session(log, root, out_format)


if __name__ == "__main__":
    main(TestOneInput, "importers")
    sys.exit(0)

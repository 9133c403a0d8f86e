"""Fuzz the ``turnlog`` command: its arguments and the files it reads.

An input is one line of arguments separated by NUL bytes, then the content of an
input file. ``@FILE`` in the arguments names that file (a policy, a checkpoint,
a key, a transcript to import); the command runs on a small store holding a
three-turn demo (session ``chat``), a session of hostile text (terminal escapes, bidi overrides,
tool arguments nested 1,000 deep) and its memories.

Contract (docs/cli.md): `main` returns one of the documented exit codes (0-4),
nothing escapes it, no traceback is printed, and human output (without
``--json``) carries no control character but newline and tab: terminal escapes
of the data are shown, never sent. Arguments never leave the sandbox: a ``/`` in
an argument becomes ``_`` and the command runs in a scratch directory.

    python fuzz/fuzz_cli.py /tmp/work-cli fuzz/corpus/cli -dict=fuzz/dicts/cli.dict \\
        -max_total_time=600
"""

from __future__ import annotations

import atexit
import io
import os
import re
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from _harness import instrumented, main

with instrumented(__name__ == "__main__"):
    import turnlog
    from turnlog.tools.cli import main as turnlog_main

_DIR = Path(
    tempfile.mkdtemp(
        prefix="turnlog-fuzz-cli-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
)
atexit.register(shutil.rmtree, _DIR, ignore_errors=True)
_PRISTINE = _DIR / "pristine"
_STORE = _DIR / "store"
_SCRATCH = _DIR / "scratch"
_FILE = _DIR / "input"
_CODES = {0, 1, 2, 3, 4}
#: Verbs whose output is raw bytes (a blob, an export, a request body), not text.
_RAW = {"blob", "export", "checkpoint"}
_ALLOWED = {0x09, 0x0A}
HOSTILE = (
    "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;title\x07\x1b[2J\x1b[H\x1b[1A\x1b[2Kverify: ok"
    "\x9b31m\u202eevil\u202c\u2066x\u2069\x85\r\x08"
)
_RUNS = [0]  # inputs run since the store was last reset


def _build() -> None:
    with redirect_stdout(io.StringIO()):
        code = turnlog_main(
            ["--store", str(_PRISTINE), "demo", "--turns", "3", "--session", "chat"]
        )
    assert code == 0, "the demo store could not be built"
    with turnlog.open(_PRISTINE) as log:
        log.append(
            "hostile",
            [
                turnlog.events.UserMessageAdded(text=HOSTILE),
                turnlog.events.AssistantMessageAdded(
                    parts=[
                        turnlog.events.TextPart(text=HOSTILE),
                        turnlog.events.ToolCall(
                            id="c1",
                            name=HOSTILE[:20],
                            arguments='{"a": ' + "[" * 1000 + "]" * 1000 + "}",
                        ),
                    ]
                ),
                turnlog.events.ToolResultAdded(call_id="c1", tool_name="t", output=HOSTILE),
            ],
        )
        memories = turnlog.memories.MemoryManager(log, memory_session="hostile-memories")
        memories.save(HOSTILE, HOSTILE)
        log.append("evil\u202eid\x85", turnlog.events.UserMessageAdded(text="x"))


def _reset() -> None:
    shutil.rmtree(_STORE, ignore_errors=True)
    shutil.rmtree(_SCRATCH, ignore_errors=True)
    shutil.copytree(_PRISTINE, _STORE)
    _SCRATCH.mkdir()


def _number(text: str) -> int:
    try:
        return int(text.rstrip("_"))
    except ValueError:
        return 0


def _argv(line: bytes) -> list[str] | None:
    args = []
    for raw in line.split(b"\x00"):
        token = raw.decode("utf-8", "replace")
        if token == "@FILE":
            args.append(str(_FILE))
            continue
        args.append(token.replace("/", "_"))
    if "demo" in args and any(_number(n) > 3 for t in args for n in re.findall(r"\d[\d_]*", t)):
        return None  # a long demo is slow by design, not a hang (int() takes 1_000, ٣)
    if "serve" in args:
        return None  # the web inspector serves until interrupted, by design
    return args


def TestOneInput(data: bytes) -> None:
    line, _, body = data.partition(b"\n")
    args = _argv(line[:2000])
    if args is None:
        return
    if _RUNS[0] >= 500 or (_STORE / "data.mdb").stat().st_size > 64 * 2**20:
        _reset()
        _RUNS[0] = 0
    _RUNS[0] += 1
    _FILE.write_bytes(body)
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", write_through=True)
    cwd = os.getcwd()
    os.chdir(_SCRATCH)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = turnlog_main(["--store", str(_STORE), *args])
    finally:
        os.chdir(cwd)
    stdout, stderr = out_bytes.getvalue(), err_bytes.getvalue()
    if code not in _CODES:
        raise AssertionError(f"exit code {code!r} for {args!r}: {stderr[-500:]!r}")
    if b"Traceback" in stderr:
        raise AssertionError(f"a traceback for {args!r}: {stderr[-2000:]!r}")
    shown = [stderr]
    if "--json" not in args and not _RAW & set(args) and "--format" not in args:
        shown.append(stdout)
    for text in shown:
        decoded = text.decode("utf-8")
        bad = {
            c
            for c in decoded
            if (ord(c) < 0x20 and ord(c) not in _ALLOWED)
            or 0x7F <= ord(c) < 0xA0
            or c
            in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067"
            "\u2068\u2069\u200e\u200f\u061c\u2028\u2029"
        }
        if bad:
            raise AssertionError(
                f"control characters {sorted(bad)!r} reached the terminal for {args!r}"
            )


_build()
_reset()

if __name__ == "__main__":
    main(TestOneInput, "cli")
    sys.exit(0)

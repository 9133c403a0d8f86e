"""Shared driver of the fuzz harnesses.

Every harness defines ``TestOneInput(data: bytes) -> None`` and calls `main`
when run as a script. With atheris installed the script fuzzes (all libFuzzer
flags pass through); with ``--replay`` or without atheris it runs every file
of the given corpus directories (default: its seed corpus) once, which is
what the test suite does through `replay_corpus`.

The contract checked by every harness: the input is accepted, or it raises a
``KernelError`` (the harness catches exactly the errors its target documents);
anything else escaping ``TestOneInput`` is a finding.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "CORPUS_ROOT",
    "Provider",
    "corpus_files",
    "instrumented",
    "main",
    "provider",
    "replay_corpus",
]

CORPUS_ROOT = Path(__file__).resolve().parent / "corpus"


def _fuzzing() -> bool:
    """True when this process is a fuzzing run (a harness run as a script, not --replay)."""
    if "--replay" in sys.argv:
        return False
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def instrumented(as_script: bool) -> Iterator[None]:
    """Instrument the turnlog modules imported in the block when fuzzing for real."""
    if as_script and _fuzzing():
        import atheris

        with atheris.instrument_imports(include=["turnlog"]):
            yield
    else:
        yield


class Provider:
    """The subset of ``atheris.FuzzedDataProvider`` the harnesses use, in pure Python.

    It consumes the bytes exactly as atheris does (ints from the end, most
    significant byte last, reduced modulo the range; bools and byte strings from
    the front), so an input found while fuzzing builds the same case when it is
    replayed without atheris. tests/test_fuzz_harnesses.py checks the two agree.
    """

    def __init__(self, data: bytes) -> None:
        self._data = bytes(data)
        self._lo = 0
        self._hi = len(self._data)

    def remaining_bytes(self) -> int:
        return self._hi - self._lo

    def ConsumeBytes(self, count: int) -> bytes:
        n = max(0, min(count, self._hi - self._lo))
        out = self._data[self._lo : self._lo + n]
        self._lo += n
        return out

    def ConsumeBool(self) -> bool:
        if self._lo >= self._hi:
            return False
        value = self._data[self._lo]
        self._lo += 1
        return bool(value & 1)

    def ConsumeIntInRange(self, lo: int, hi: int) -> int:
        span = hi - lo
        result = offset = 0
        while offset < 64 and (span >> offset) > 0 and self._hi > self._lo:
            self._hi -= 1
            result = (result << 8) | self._data[self._hi]
            offset += 8
        if span != 2**64 - 1:
            result %= span + 1
        return lo + result


def provider(data: bytes) -> Provider:
    """``atheris.FuzzedDataProvider(data)`` when atheris is installed, else `Provider`."""
    try:
        import atheris
    except ImportError:
        return Provider(data)
    fdp: Provider = atheris.FuzzedDataProvider(data)
    return fdp


def corpus_files(*dirs: str | os.PathLike[str]) -> list[Path]:
    """Every regular file under ``dirs`` (recursively), sorted for a stable order."""
    files: list[Path] = []
    for d in dirs:
        p = Path(d)
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files.extend(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
    return sorted(files)


def replay_corpus(test_one_input: Callable[[bytes], None], *dirs: str | os.PathLike[str]) -> int:
    """Run ``test_one_input`` once on every corpus file; return how many were run.

    An exception propagates with the file's path added as a note.
    """
    files = corpus_files(*dirs)
    for f in files:
        try:
            test_one_input(f.read_bytes())
        except BaseException as exc:
            exc.add_note(f"corpus file: {f}")
            raise
    return len(files)


def main(test_one_input: Callable[[bytes], None], target: str) -> None:
    """Fuzz ``test_one_input`` (atheris), or replay corpora once (``--replay``)."""
    seeds = CORPUS_ROOT / target
    if not _fuzzing():
        dirs = [a for a in sys.argv[1:] if not a.startswith("-")] or [str(seeds)]
        n = replay_corpus(test_one_input, *dirs)
        print(f"{target}: replayed {n} inputs, no finding")
        return
    import atheris

    argv = list(sys.argv)
    if not any(not a.startswith("-") for a in argv[1:]):
        argv.append(str(seeds))
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()

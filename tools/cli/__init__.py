"""The ``turnlog`` command: inspect, verify, export, pack, explain and replay a log.

Every verb works on the store named by ``--store`` (default ``$TURNLOG_STORE``,
else ``./.turnlog``). Verbs that print take ``--json``: ``sessions``, ``show``,
``verify`` and ``checkpoint`` print one JSON document; ``log`` and ``demo``
print JSON lines (one object a line). ``export`` always writes JSON lines and
``blob`` raw bytes. docs/cli.md describes every verb.

Human output is tables and lines through rich (`turnlog.tools.terminal`): colour
and progress bars only on a terminal and never with ``NO_COLOR``, and every
control, C1 and bidi-control character of the data shown as an escape (stdout
and stderr are wrapped in an `EscapingWriter` while a verb runs). An error's
hint (`turnlog.errors.Hint`) is printed in its command wording (flags and verbs).

The verbs live by group, each declared beside its handler (`._verbs.Verbs`):
`.store` (sessions, log, show, verify, copy, checkpoint, export, blob), `.tour`
(demo), `.packing` (pack, explain, replay, diff, compact), `.importing` (import),
`.memories` (memories, recall) and `.serve` (serve); `._common` holds what they
share and `._parser` builds the parser from the groups' declarations.

Exit codes:

====  =================================================================
0     success
1     a check failed (``verify``, ``replay``, the end of ``demo``, ``compact``)
2     usage error: bad arguments, unreadable or malformed input file
3     turnlog error (unknown session, corrupt store, nothing imported...):
      one line on stderr
4     no store at the given path
====  =================================================================
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TextIO, cast

import turnlog

from ..terminal import EscapingWriter
from ._common import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_NO_STORE,
    EXIT_OK,
    EXIT_USAGE,
    _NoStoreError,
    _PipeClosedError,
    _UsageError,
)
from ._parser import (
    _build_parser,
)

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_NO_STORE",
    "EXIT_OK",
    "EXIT_USAGE",
    "main",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``turnlog`` command.

    Parameters:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0 ok, 1 a check failed, 2 usage error, 3 turnlog
        error, 4 store missing.
    """
    parser = _build_parser()
    try:
        with _escaped(stdout=True):  # usage errors repeat the arguments
            args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE if exc.code else EXIT_OK
    run: Callable[[argparse.Namespace], int] = args.run
    with _escaped(stdout=not getattr(args, "json", False)):
        return _run(run, args)


@contextlib.contextmanager
def _escaped(*, stdout: bool) -> Iterator[None]:
    """Show control characters of the data as escapes on stderr, and on stdout for
    human output (JSON escapes its own); see `turnlog.tools.terminal`."""
    saved = sys.stdout, sys.stderr
    if stdout:
        sys.stdout = cast(TextIO, EscapingWriter(sys.stdout))
    sys.stderr = cast(TextIO, EscapingWriter(sys.stderr))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _error_line(message: str, args: argparse.Namespace) -> str:
    """An error message as the one line the command prints: without the credentials
    of any store location it repeats (`turnlog.stores.hide_credentials`)."""
    for value in (
        getattr(args, "store", None),
        os.environ.get("TURNLOG_STORE"),
        getattr(args, "source", None),
        getattr(args, "target", None),
    ):
        if value and (hidden := turnlog.stores.hide_credentials(value)) != value:
            message = message.replace(value, hidden)
    return "turnlog: error: " + " ".join(
        line.strip() for line in message.splitlines() if line.strip()
    )


def _run(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return run(args)
    except _UsageError as exc:
        print(_error_line(str(exc), args), file=sys.stderr)
        return EXIT_USAGE
    except _NoStoreError as exc:
        print(_error_line(str(exc), args), file=sys.stderr)
        return EXIT_NO_STORE
    except turnlog.errors.BudgetExceededError as exc:
        message = exc.cli_message()
        if getattr(args, "budget", None) is not None:
            # The kernel names the policy's fields; here the window is --budget's.
            message += (
                f"; --budget {args.budget:,} leaves {exc.usable:,} tokens usable and this "
                f"prompt needs {exc.needed:,}: pass a larger --budget, or --policy FILE "
                "with a smaller output_reserve"
            )
        print(_error_line(message, args), file=sys.stderr)
        return EXIT_ERROR
    except turnlog.KernelError as exc:
        print(_error_line(exc.cli_message(), args), file=sys.stderr)
        return EXIT_ERROR
    except (BrokenPipeError, _PipeClosedError):
        # The reader went away (``turnlog log s | head``): stop quietly, and keep
        # the interpreter from complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except MemoryError:
        print(
            "turnlog: error: out of memory; free memory or raise the process's limit, "
            "then run the command again",
            file=sys.stderr,
        )
        return EXIT_ERROR

"""The ``import`` verb: transcripts of other agents into the log."""

from __future__ import annotations

import argparse
import re
import sys

import msgspec
import turnlog
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
from rich.progress import Progress as ProgressBar
from turnlog.adapters.importers import ALIASES as IMPORT_ALIASES
from turnlog.adapters.importers import FORMATS as IMPORT_FORMATS
from turnlog.adapters.importers import ImportSummary, Progress, SkippedRecord, import_path
from turnlog.adapters.redaction import Redactor

from ..terminal import make_console, print_table, visible
from ._common import (
    EXIT_ERROR,
    EXIT_OK,
    _emit,
    _open,
    _out,
    _plural,
    _remove_store,
    _say,
    _store_path,
    _UsageError,
)
from ._verbs import Verbs, arg

VERBS = Verbs()


@VERBS.verb(
    "import",
    "import transcripts (Claude Code, Codex, OpenAI, mini-swe-agent, "
    "SWE-agent, OpenHands, Aider); idempotent",
    arg("paths", nargs="+", metavar="PATH", help="transcript files or directories of them"),
    arg(
        "--format",
        default=None,
        choices=sorted(IMPORT_FORMATS),
        type=lambda name: IMPORT_ALIASES.get(name, name),
        help="the format (default: detected from the content); the earlier "
        "spellings openai_chat and openai_responses are accepted",
    ),
    arg(
        "--session",
        default=None,
        metavar="ID",
        help="the session id (default: from the transcript)",
    ),
    arg(
        "--skip-bad",
        action="store_true",
        help="skip malformed records (listed) instead of refusing the file",
    ),
    arg(
        "--keep-going",
        action="store_true",
        help="go on past a file that cannot be "
        "imported (listed with the reason) instead of stopping there",
    ),
    arg(
        "--no-redact",
        action="store_true",
        help="keep secrets as they are (by default "
        "API keys, private keys, bearer tokens and URL passwords are replaced by "
        "placeholders before anything is stored)",
    ),
    arg(
        "--redact-pattern",
        action="append",
        default=[],
        metavar="KIND=REGEX",
        help="also redact what REGEX matches (its first group if it has one), as "
        "[redacted: KIND]; repeatable",
    ),
)
def _cmd_import(args: argparse.Namespace) -> int:
    redactor = None if args.no_redact else Redactor(patterns=_patterns(args.redact_pattern))
    totals = {"events": 0, "appended": 0, "tool_calls": 0, "blobs": 0, "tokens": 0}
    redacted: dict[str, int] = {}
    files: list[ImportSummary] = []
    skipped: list[SkippedRecord] = []
    failed: list[tuple[str, str]] = []
    paths_done = 0
    store = _store_path(args)
    existed, had_store = store.exists(), (store / "data.mdb").exists()
    console = make_console(sys.stderr)
    show = console.is_terminal and not args.json
    written = False
    try:
        with (
            _open(args, write=True, create=True) as log,
            ProgressBar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=console,
                transient=True,
                disable=not show,
            ) as bar,
        ):
            task = bar.add_task("importing", total=None)

            def progress(p: Progress) -> None:
                bar.update(
                    task,
                    description=visible(
                        f"importing {p.path[-60:]} (file {p.files_done + 1} of {p.files_total})"
                    ),
                    completed=p.events_done,
                    total=p.events_total or None,
                )

            def add(summary: ImportSummary) -> None:
                nonlocal files, skipped
                for key in ("events", "appended", "tool_calls", "blobs"):
                    totals[key] += getattr(summary, key)
                totals["tokens"] += summary.tokens
                for kind, n in summary.redacted.items():
                    redacted[kind] = redacted.get(kind, 0) + n
                files += summary.files or ([summary] if summary.sources else [])
                skipped += summary.skipped

            for path in args.paths:
                try:
                    summary = import_path(
                        log,
                        path,
                        format=args.format,
                        session=args.session,
                        skip_bad=args.skip_bad,
                        progress=progress,
                        keep_going=args.keep_going,
                        redactor=redactor,
                    )
                except turnlog.errors.ImportFormatError as exc:
                    failed.append((path, exc.cli_message()))
                    # A directory stopped at a bad file: the files before it stay imported.
                    before = getattr(exc, "imported", None)
                    if isinstance(before, ImportSummary):
                        add(before)
                    if args.json:
                        _emit({"type": "error", "path": path, "error": failed[-1][1]}, sys.stdout)
                    if args.keep_going:
                        continue
                    break
                add(summary)
                paths_done += 1
                if args.json:
                    _emit(
                        {
                            "type": "file",
                            "path": path,
                            "format": summary.format,
                            "sessions": list(summary.sessions),
                            "events": summary.events,
                            "appended": summary.appended,
                            "tool_calls": summary.tool_calls,
                            "blobs": summary.blobs,
                            "tokens": summary.tokens,
                            "redacted": summary.redacted,
                            "skipped": [msgspec.to_builtins(s) for s in summary.skipped],
                        },
                        sys.stdout,
                    )
            written = bool(log.sessions())
    finally:
        if not had_store and not written:
            _remove_store(store, existed)  # an import that wrote nothing leaves no store
    sessions = [x for f in files for x in f.sessions]
    # Transcripts that hold no event (empty files) import nothing either.
    empty = bool(files) and not failed and not totals["events"]
    code = EXIT_OK if files and not failed and not empty else EXIT_ERROR
    if args.json:
        _emit(
            {
                "type": "result",
                **totals,
                "sessions": sessions,
                "skipped": len(skipped),
                "redacted": dict(sorted(redacted.items())),
            },
            sys.stdout,
        )
        return code
    if files:
        print_table(
            _out(),
            [
                ("FILE", "left"),
                ("FORMAT", "left"),
                ("SESSIONS", "left"),
                ("EVENTS", "right"),
                ("NEW", "right"),
                ("SKIPPED", "right"),
            ],
            (
                [
                    f.sources[0] if f.sources else "",
                    f.format,
                    ", ".join(f.sessions),
                    f.events,
                    f.appended,
                    len(f.skipped) or "",
                ]
                for f in files
            ),
        )
    for record in skipped:
        _say(f"skipped {record}", "yellow")
    if files and not empty:
        print(
            f"imported {_plural(len(files), 'file')} into {_plural(len(sessions), 'session')}"
            f": {_plural(totals['events'], 'event')} ({totals['appended']:,} new), "
            f"{_plural(totals['tool_calls'], 'tool call')}, {_plural(totals['blobs'], 'blob')}"
            f", {_plural(totals['tokens'], 'token')} of reported usage"
        )
    if redacted:
        print(
            "redacted "
            + ", ".join(
                # A kind is a name (AWS Access Key, Basic Auth Credentials, a pattern's).
                f"{n:,} {kind if n == 1 or kind.endswith('s') else kind + 's'}"
                for kind, n in sorted(redacted.items())
            )
            + " (replaced by placeholders before storing; --no-redact keeps them)"
        )
    for _, error in failed:
        print(f"turnlog: error: {error}", file=sys.stderr)
    if not files and not failed:
        print(
            f"turnlog: error: nothing imported from {', '.join(args.paths)}: no transcript "
            "of a known format found"
            + (f" ({_plural(len(skipped), 'file')} skipped, listed above)" if skipped else "")
            + "; give transcript files (or --format FORMAT to force one)",
            file=sys.stderr,
        )
    elif empty:
        print(
            f"turnlog: error: nothing imported from {', '.join(args.paths)}: the "
            f"{'transcript holds' if len(files) == 1 else 'transcripts hold'} no events"
            + ("" if had_store else " (no store was created)"),
            file=sys.stderr,
        )
    elif failed and paths_done and not args.keep_going:
        print(
            "the paths before the failed one were imported; pass --keep-going to import the "
            "rest (what was imported is not appended twice)",
            file=sys.stderr,
        )
    return code


def _patterns(specs: list[str]) -> dict[str, str]:
    """``KIND=REGEX`` options as the patterns of a `Redactor`."""
    patterns: dict[str, str] = {}
    for spec in specs:
        kind, sep, regex = spec.partition("=")
        if not sep or not kind or not regex:
            raise _UsageError(f"--redact-pattern takes KIND=REGEX, found {spec!r}")
        if "]" in kind:
            raise _UsageError(f"--redact-pattern {spec!r}: KIND is a name without ']'")
        try:
            re.compile(regex)
        except re.error as exc:
            raise _UsageError(
                f"--redact-pattern {spec!r}: REGEX is not a valid regular expression ({exc})"
            ) from None
        patterns[kind] = regex
    return patterns

"""Verbs on memories: ``memories`` and ``recall``."""

from __future__ import annotations

import argparse
import sys

import msgspec
import turnlog
from turnlog.memories import MemoryManager, Recaller

from ..summary import expiry, head
from ..terminal import print_table
from ._common import (
    EXIT_OK,
    POLICY_OPTIONS,
    _emit,
    _open,
    _out,
    _plural,
    _policy_arg,
    _positive,
    _UsageError,
)
from ._verbs import Verbs, arg, session_arg

VERBS = Verbs()


@VERBS.verb(
    "memories",
    "list the memories of a session's memory session and the block in force",
    session_arg(),
    session_arg(
        "--memory-session",
        metavar="ID",
        default=None,
        help="the memory session (default: SESSION-memories)",
    ),
    arg("--block", action="store_true", help="also print the block in force"),
)
def _cmd_memories(args: argparse.Namespace) -> int:
    with _open(args) as log:
        if log.head(args.session) is None:
            raise turnlog.errors.UnknownSessionError(
                f"no session {args.session!r} in this log; list sessions with `turnlog sessions`"
            )
        if args.memory_session is not None and log.head(args.memory_session) is None:
            raise turnlog.errors.UnknownSessionError(
                f"no memory session {args.memory_session!r} in this log (--memory-session); "
                "list sessions with `turnlog sessions`"
            )
        manager = MemoryManager(
            log, memory_session=args.memory_session or f"{args.session}-memories"
        )
        memory_book = manager.book()
        book = memory_book.memories(include_expired=True)
        position = memory_book.head
        block = manager.block_in_force(args.session)
    if args.json:
        _emit(
            {
                "memory_session": manager.memory_session,
                "memories": [
                    {**msgspec.to_builtins(m), "lapsed": m.expired(position, None)} for m in book
                ],
                "block_in_force": block,
            },
            sys.stdout,
        )
        return EXIT_OK
    print(f"memory session {manager.memory_session!r}: {_plural(len(book), 'memory', 'memories')}")
    if book:
        print_table(
            _out(),
            [
                ("ID", "left"),
                ("RETENTION", "left"),
                ("TYPE", "left"),
                ("PINNED", "left"),
                ("EXPIRES", "left"),
                ("TITLE", "left"),
                ("CONTENT", "left"),
            ],
            (
                [
                    m.memory_id,
                    m.retention,
                    m.memory_type,
                    "pinned" if m.pinned else "",
                    expiry(m, position),
                    head(m.title, 40),
                    head(m.content, 60),
                ]
                for m in book
            ),
        )
    print(
        f"block in force in {args.session!r}: "
        + (_plural(len(block), "character") if block else "none")
    )
    if block and args.block:
        print(block)
    return EXIT_OK


@VERBS.verb(
    "recall",
    "search past events (BM25); --commit appends the results as a "
    "recall event so they may reach a prompt",
    arg("query", metavar="QUERY"),
    session_arg(
        "--session",
        action="append",
        metavar="ID",
        help="search only these sessions (repeatable; default: all)",
    ),
    arg("-k", type=_positive, default=5, metavar="N", help="results (default 5)"),
    session_arg(
        "--commit",
        metavar="SESSION",
        default=None,
        help="append the results to SESSION (an existing session) as a recall event",
    ),
    *POLICY_OPTIONS,
)
def _cmd_recall(args: argparse.Namespace) -> int:
    with _open(args, write=args.commit is not None) as log:
        # Compared as completed from their prefixes (by `_open`).
        if args.commit is not None and args.commit in (args.session or ()):
            raise _UsageError(
                f"--commit {args.commit} brings back events of other sessions; "
                f"leave {args.commit!r} out of --session"
            )
        for name in [*(args.session or ()), *([args.commit] if args.commit else [])]:
            if log.head(name) is None:
                raise turnlog.errors.UnknownSessionError(
                    f"no session {name!r} in this log; list sessions with `turnlog sessions`"
                )
        recaller = Recaller(log)
        if args.commit is not None:
            # The cap is that of the session's policy in force (--budget keeps the rest
            # of it), as the session's requests are packed under it.
            in_force = turnlog.Packer(log).policy_in_force(args.commit)
            policy = _policy_arg(args, in_force) or in_force or turnlog.Policy()
            # sessions=None searches every session but the one committed to.
            done = recaller.commit(
                args.commit, args.query, policy=policy, sessions=args.session, k=args.k
            )
            hits = log.get(args.commit, done.last_seq).body.hits if done else ()  # type: ignore[union-attr]
        else:
            _policy_arg(args)  # --agent without --policy is refused here too
            sessions = args.session or [h.session for h in log.sessions()]
            hits = tuple(recaller.search(args.query, sessions=sessions, k=args.k))
    if args.json:
        _emit(
            {
                "query": args.query,
                "hits": [msgspec.to_builtins(h) for h in hits],
                "committed": args.commit is not None and bool(hits),
            },
            sys.stdout,
        )
        return EXIT_OK
    if not hits:
        print("no results")
        return EXIT_OK
    print_table(
        _out(),
        [("EVENT", "left"), ("AT", "right"), ("SCORE", "right"), ("TEXT", "left")],
        (
            [f"{hit.session}#{hit.seq}", str(hit.offset), hit.score, head(hit.text, 80)]
            for hit in hits
        ),
    )
    if args.commit is not None:
        print(f"committed as a recall event in {args.commit!r}")
    return EXIT_OK

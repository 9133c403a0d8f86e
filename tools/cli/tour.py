"""The ``demo`` verb: a deterministic demo agent session, packed, recorded, replayed
and verified."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import turnlog
from turnlog import Compactor, Packer, Replayer

from .. import demo
from ..summary import head
from ..terminal import Column, print_table
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    _emit,
    _next_steps,
    _open,
    _out,
    _plural,
    _problem_json,
    _progress,
    _refs,
    _say,
    _spans,
    _UsageError,
)
from ._verbs import Verbs, arg

VERBS = Verbs()


@VERBS.verb(
    "demo",
    "append a deterministic demo agent session, then verify it",
    arg(
        "--turns",
        type=int,
        default=demo.DEFAULT_TURNS,
        metavar="N",
        help=f"number of turns, 1 to {demo.MAX_TURNS} (default {demo.DEFAULT_TURNS})",
    ),
    arg(
        "--session",
        default=demo.DEFAULT_SESSION,
        metavar="ID",
        help=f"session id (default {demo.DEFAULT_SESSION!r})",
    ),
    arg(
        "--no-pack",
        action="store_true",
        help="only append the events (no packing, requests, compaction or replay)",
    ),
    arg(
        "--overflow-turn",
        type=int,
        default=None,
        metavar="N",
        help="the turn whose request meets a context-overflow error (default "
        f"{demo.OVERFLOW_TURN})",
    ),
)
def _cmd_demo(args: argparse.Namespace) -> int:
    if not 1 <= args.turns <= demo.MAX_TURNS:
        raise _UsageError(
            f"--turns must be 1 to {demo.MAX_TURNS} (the demo session has "
            f"{demo.MAX_TURNS} turns), found {args.turns}"
        )
    overflow_turn = args.overflow_turn if args.overflow_turn is not None else demo.OVERFLOW_TURN
    rows: list[list[object]] = []
    present: list[int] = []
    with (
        _open(args, write=True, create=True) as log,
        _progress("demo turns", args.turns, show=not args.json) as advance,
    ):
        packer = Packer(log)
        compactor = Compactor(log, packer)
        packed_turns: list[demo.PackedTurn] = []

        def on_turn(turn: demo.TurnResult) -> None:
            advance()
            a = turn.appended
            packed = None
            if not a.duplicate and not args.no_pack:
                packed = demo.pack_turn(
                    log,
                    packer,
                    compactor,
                    args.session,
                    turn,
                    policy=demo.policy_for_turn(turn.turn),
                    overflow=turn.turn == overflow_turn,
                )
                packed_turns.append(packed)
            if args.json:
                record: dict[str, Any] = {
                    "type": "turn",
                    "turn": turn.turn,
                    "first_seq": a.first_seq,
                    "last_seq": a.last_seq,
                    "events": len(turn.drafts),
                    "blobs": turn.blobs,
                    "duplicate": a.duplicate,
                    "user": turn.user_text,
                }
                if packed is not None:
                    record["request"] = {
                        "seq": packed.request_seq,
                        "tokens": packed.tokens,
                        "pressure_before": packed.pressure_before,
                        "pressure": packed.pressure,
                        "stages": packed.fired,
                        "compaction": packed.compaction,
                        "recovery": packed.recovery,
                    }
                _emit(record, sys.stdout)
                return
            if a.duplicate:
                present.append(turn.turn)
                return
            row: list[object] = [
                turn.turn,
                f"{a.first_seq}-{a.last_seq}",
                len(turn.drafts),
                turn.blobs or "",
                head(turn.user_text, 40),
            ]
            if packed is not None:
                notes = [f"[{packed.compaction}]"] if packed.compaction else []
                notes += ["[recovery pack]"] if packed.recovery else []
                row += [
                    f"{packed.tokens:,}",
                    f"{packed.pressure_before:.2f}->{packed.pressure:.2f}",
                    " ".join(f"{k}={v}" for k, v in packed.fired.items() if v) or "verbatim",
                    " ".join(notes),
                ]
            rows.append(row)

        try:
            result = demo.run_demo(log, session=args.session, turns=args.turns, on_turn=on_turn)
        except turnlog.errors.IdempotencyError as exc:
            raise turnlog.errors.IdempotencyError(
                f"session {args.session!r} already holds other events under the demo's "
                f"keys: {exc}; use another --session"
            ) from exc
        replayer = Replayer(packer)
        replays = [replayer.replay(args.session, seq) for seq in replayer.requests(args.session)]
        report = log.verify(args.session)
    last = result.head
    replay_ok = all(r.ok for r in replays)
    if args.json:
        _emit(
            {
                "type": "result",
                "session": result.session,
                "turns": result.turns,
                "appended": result.appended,
                "present": result.present,
                "blobs": result.blobs,
                "head_seq": last.seq,
                "head_hash": last.hash.hex(),
                "requests": len(replays),
                "replayed_identical": sum(r.ok for r in replays),
                "verify": {
                    "ok": report.ok,
                    "problem": _problem_json(report.problem),
                    "events": report.events,
                    "blobs": report.blobs,
                },
            },
            sys.stdout,
        )
        return EXIT_OK if report.ok and replay_ok else EXIT_FAILED
    columns: list[Column] = [
        ("TURN", "right"),
        ("SEQS", "left"),
        ("EVENTS", "right"),
        ("BLOBS", "right"),
        ("USER MESSAGE", "left"),
    ]
    if any(len(row) > 5 for row in rows):
        columns += [
            ("TOKENS", "right"),
            ("PRESSURE", "left"),
            ("STAGES (events changed)", "left"),
            ("", "left"),
        ]
        rows = [row if len(row) > 5 else [*row, "", "", "", ""] for row in rows]
    if rows:
        print_table(_out(), columns, rows)
    if present:
        print(
            f"{_plural(len(present), 'turn')} already in the log ({_spans(present)}): "
            f"nothing appended or packed for {'it' if len(present) == 1 else 'them'}"
        )
    where = f"head {last.session}#{last.seq} {last.hash.hex()[:16]}"
    if result.appended == 0:
        turns = "the 1 turn was" if result.turns == 1 else f"all {result.turns:,} turns were"
        print(f"nothing new appended: {turns} already in the log ({where})")
    else:
        print(
            f"appended {_plural(result.appended, 'event')} in "
            f"{_plural(result.turns - len(present), 'turn')} ({result.present:,} already "
            "present), "
            f"{_refs(result.blobs)}; {where}"
        )
    fired = {
        name: sum(1 for t in packed_turns if t.fired.get(name))
        for name in ("truncate", "dedup", "prune", "trim", "summaries")
    }
    if packed_turns:
        compactions = sum(1 for t in packed_turns if t.compaction.startswith("committed"))
        recoveries = sum(t.recovery for t in packed_turns)
        print(
            f"packed and recorded {_plural(len(packed_turns), 'request')}; stages fired "
            "in: "
            + ", ".join(f"{name} {n}" for name, n in fired.items())
            + f" requests; {_plural(compactions, 'compaction')}, "
            f"{_plural(recoveries, 'overflow recovery', 'overflow recoveries')}"
        )
    bad = [r for r in replays if not r.ok]
    if not replays:
        print(
            "replay: no recorded request to replay"
            + (" (--no-pack records none)" if args.no_pack else "")
        )
    else:
        _say(
            f"replay: {len(replays) - len(bad)} of {_plural(len(replays), 'request')} "
            "reproduced byte for byte"
            + "".join(f"\n  #{r.request_seq}: {r.difference}" for r in bad),
            "red" if bad else "green",
        )
    if report.ok:
        _say(f"verify: ok ({_plural(report.events, 'event')}, {_refs(report.blobs)})", "green")
    else:
        _say(f"verify: FAILED: {report.problem}", "bold red")
    _next_steps(
        args,
        [
            ("log {s}", "the events, one line each"),
            ("show {s} -1", "the last event in full"),
            ("explain {s} -1", "why each event went into the last request as it did"),
            ("replay {s}", "re-pack every recorded request and compare byte for byte"),
            ("pack {s} --format anthropic", "the next request body, as it would be sent"),
        ],
    )
    return EXIT_OK if report.ok and replay_ok else EXIT_FAILED

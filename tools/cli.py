"""The ``turnlog`` command: inspect, verify, export, pack, explain and replay a log.

Every verb works on the store named by ``--store`` (default ``$TURNLOG_STORE``,
else ``./.turnlog``). Verbs that print take ``--json``: ``sessions``, ``show``,
``verify`` and ``checkpoint`` print one JSON document; ``log`` and ``demo``
print JSON lines (one object a line). ``export`` always writes JSON lines and
``blob`` raw bytes. docs/cli.md describes every verb.

Human output is tables and lines through rich (`turnlog.tools.terminal`): colour
and progress bars only on a terminal and never with ``NO_COLOR``, and every
control, C1 and bidi-control character of the data shown as an escape (stdout
and stderr are wrapped in an `EscapingWriter` while a verb runs). Library
messages are reworded to name the command's flags (`_cli_words`).

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
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn, TextIO, cast

import msgspec
import turnlog
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
from rich.progress import Progress as ProgressBar
from rich.text import Text
from turnlog import Compactor, Packer, Replayer
from turnlog.adapters.importers import FORMATS as IMPORT_FORMATS
from turnlog.adapters.importers import ImportSummary, Progress, SkippedRecord, import_path
from turnlog.adapters.providers import (
    PROVIDERS,
    RenderError,
    derived_tool_names,
    render_args,
    renderer,
    renderer_for,
)
from turnlog.events import EVENT_KINDS as KINDS
from turnlog.events import event_to_json
from turnlog.memories import MemoryManager, Recaller
from turnlog.packing import Packed
from turnlog.replay import ReplayResult

from . import demo
from .summary import format_size, format_time, head, loads_json, summarize
from .terminal import Column, EscapingWriter, cell, make_console, print_table, visible

__all__ = [
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_NO_STORE",
    "EXIT_OK",
    "EXIT_USAGE",
    "main",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_NO_STORE = 4

DEFAULT_STORE = "./.turnlog"


class _UsageError(Exception):
    """Bad input from the command line or a file it names (exit 2)."""


class _NoStoreError(Exception):
    """The store does not exist (exit 4)."""


class _PipeClosedError(Exception):
    """stdout was closed by its reader (``turnlog log s | head``).

    Raised instead of `BrokenPipeError` while a read snapshot is open: the
    store converts OSErrors raised inside a snapshot into `StoreError`.
    """


# -- output helpers -------------------------------------------------------------------

def _plural(count: int, word: str, many: str = "") -> str:
    """``1 event``, ``2 events``, ``1,024 events``."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def _out() -> Console:
    """The console for human output on stdout (colour only on a terminal)."""
    return make_console(sys.stdout)


def _say(text: str, style: str = "") -> None:
    """One line of human output, in ``style`` on a terminal."""
    _out().print(Text(visible(text), style=style))


def _emit(obj: object, out: IO[str]) -> None:
    _write_line(json.dumps(obj, ensure_ascii=False), out)


def _write_line(text: str, out: IO[str]) -> None:
    try:
        out.write(text + "\n")
    except BrokenPipeError:
        raise _PipeClosedError from None


def _write_stdout_bytes(data: bytes) -> None:
    try:
        sys.stdout.buffer.write(data)
    except BrokenPipeError:
        raise _PipeClosedError from None


def _store_path(args: argparse.Namespace) -> Path:
    value = args.store or os.environ.get("TURNLOG_STORE") or DEFAULT_STORE
    return Path(value)


def _is_url(value: str) -> bool:
    """True for a PostgreSQL URL (a store on a server rather than a directory)."""
    return value.startswith(("postgresql://", "postgres://"))


def _open(args: argparse.Namespace, *, write: bool = False) -> turnlog.Log:
    value = args.store or os.environ.get("TURNLOG_STORE") or DEFAULT_STORE
    return _open_store(value, write=write)


def _open_store(value: str, *, write: bool = False) -> turnlog.Log:
    if _is_url(value):
        return turnlog.open(value, readonly=not write)
    path = Path(value)
    where = turnlog.stores.hide_credentials(str(path))
    try:
        missing = not write and not (path / "data.mdb").is_file()
    except OSError as exc:  # a name too long, a loop of links...
        raise _NoStoreError(f"no turnlog store at {where!r}: {exc.strerror or exc}; pass "
                            "--store PATH or set TURNLOG_STORE") from None
    if missing:
        raise _NoStoreError(
            f"no turnlog store at {where!r}; pass --store PATH or set TURNLOG_STORE "
            "(create a store with `turnlog demo` or by appending to it)")
    return turnlog.open(path, readonly=not write)


def _read_bytes(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _UsageError(f"cannot read {what} {path!r}: {exc.strerror or exc}") from exc


def _read_key(path: str | None) -> bytes | None:
    if path is None:
        return None
    key = _read_bytes(path, "key file")
    if key.endswith(b"\r\n"):
        key = key[:-2]
    elif key.endswith(b"\n"):
        key = key[:-1]
    if not key:
        raise _UsageError(f"key file {path!r} is empty")
    return key


def _read_checkpoint(path: str) -> turnlog.log.Checkpoint:
    data = _read_bytes(path, "checkpoint file")
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise _UsageError(f"checkpoint file {path!r} is not JSON: {exc}") from exc
    except RecursionError:
        raise _UsageError(f"checkpoint file {path!r} is not a turnlog checkpoint: its JSON "
                          "is nested too deeply") from None
    if not isinstance(raw, dict):
        raise _UsageError(f"checkpoint file {path!r} must hold a JSON object")
    session, seq, digest, mac = (raw.get("session"), raw.get("seq"), raw.get("hash"),
                                 raw.get("mac", ""))
    unknown = sorted(set(raw) - {"session", "seq", "hash", "mac"})
    if (unknown or not isinstance(session, str) or not session
            or not isinstance(seq, int) or isinstance(seq, bool) or seq < 0
            or not isinstance(digest, str) or len(digest) != 64
            or any(c not in "0123456789abcdef" for c in digest) or not isinstance(mac, str)
            or (mac and (len(mac) != 64 or any(c not in "0123456789abcdef" for c in mac)))):
        raise _UsageError(
            f"checkpoint file {path!r} is not a turnlog checkpoint: expected "
            '{"session": str, "seq": int >= 0, "hash": 64 lowercase hex, '
            '"mac": "" or 64 lowercase hex}'
            + (f", found unknown keys {unknown}" if unknown else ""))
    return turnlog.log.Checkpoint(session=session, seq=seq, hash=digest, mac=mac)


def _write_output(path: str | None, data: bytes) -> None:
    if path is None:
        sys.stdout.flush()
        _write_stdout_bytes(data)
        return
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        raise _UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from exc


# -- verbs ---------------------------------------------------------------------------------

def _cmd_sessions(args: argparse.Namespace) -> int:
    with _open(args) as log:
        heads = log.sessions()
        location = turnlog.stores.hide_credentials(log.store.location)
        unfinished = turnlog.log.unfinished_copy(log)
    if args.json:
        _emit({"store": location, "unfinished_copy": unfinished, "sessions": [
            {"session": h.session, "head_seq": h.seq, "events": h.seq + 1,
             "head_hash": h.hash.hex()} for h in heads]}, sys.stdout)
        return EXIT_OK
    if unfinished is not None:
        _say(f"warning: {unfinished}", "yellow")
    if not heads:
        print("no sessions")
        return EXIT_OK
    columns: list[Column] = [("SESSION", "left"), ("HEAD", "right"), ("EVENTS", "right"),
                             ("HEAD HASH", "left")]
    print_table(_out(), columns, ([h.session, h.seq, h.seq + 1, h.hash.hex()[:16]]
                                  for h in heads))
    return EXIT_OK


def _log_record(event: turnlog.events.Event) -> dict[str, Any]:
    record: dict[str, Any] = {"session": event.session, "seq": event.seq, "kind": event.kind,
                              "time": event.time, "key": event.key,
                              "causation": event.causation, "hash": event.hash.hex(),
                              "summary": summarize(event, 200)}
    blob = getattr(event.body, "blob", None)
    if isinstance(blob, turnlog.events.BlobRef):
        record["blob"] = blob.hash
    return record


def _cmd_log(args: argparse.Namespace) -> int:
    count = 0
    with _open(args) as log, log.snapshot() as snap:
        for event in snap.iter(args.session, args.start, kinds=args.kind):
            if args.limit is not None and count >= args.limit:
                break
            count += 1
            if args.json:
                _emit(_log_record(event), sys.stdout)
            else:
                _write_line(f"{event.seq:>6}  {format_time(event.time)}  {event.kind:<14} "
                            f"{summarize(event, 72)}", sys.stdout)
    return EXIT_OK


def _ordered(raw: Any, obj: object) -> Any:
    """``raw`` (the JSON form of ``obj``) with struct keys in definition order, tag first."""
    fields = getattr(type(obj), "__struct_fields__", None)
    if fields is not None and isinstance(raw, dict):
        keys = (["type"] if "type" in raw else []) + [f for f in fields if f in raw]
        return {k: raw[k] if k == "type" else _ordered(raw[k], getattr(obj, k)) for k in keys}
    if isinstance(raw, list) and isinstance(obj, (list, tuple)) and len(raw) == len(obj):
        return [_ordered(r, o) for r, o in zip(raw, obj, strict=True)]
    return raw


def _is_block(value: object) -> bool:
    return isinstance(value, str) and ("\n" in value or len(value) > 100)


def _width(names: Iterable[object]) -> int:
    """The name column of one level of `show`: the longest name, at least 10."""
    return max([10, *(len(str(name)) for name in names)])


def _render_value(name: str, value: object, indent: str, lines: list[str],
                  width: int = 10) -> None:
    if _is_block(value):
        assert isinstance(value, str)
        lines.append(f"{indent}{name}")
        lines.extend(f"{indent}  | {line}" for line in value.split("\n"))
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        lines.append(f"{indent}{name}")
        for i, item in enumerate(value):
            skip = {"type"}
            label = f"[{i}] {item.get('type', '')}".rstrip()
            if item.get("type") == "tool_call":
                label += f"  {item.get('name', '')}  {item.get('id', '')}"
                skip |= {"name", "id"}
            lines.append(f"{indent}  {label}")
            level = _width(k for k in item if k not in skip)
            for k, v in item.items():
                if k in skip:
                    continue
                if k == "arguments" and item.get("type") == "tool_call":
                    _render_arguments(v, indent + "      ", lines)
                else:
                    _render_value(k, v, indent + "      ", lines, level)
    else:
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"{indent}{name:<{width}} {shown}")


def _render_arguments(text: str, indent: str, lines: list[str]) -> None:
    """A tool call's arguments: one line per argument when they are a JSON object."""
    parsed = loads_json(text)
    if not isinstance(parsed, dict) or not parsed:
        _render_value("arguments", text, indent, lines)
        return
    rendered = [f"{indent}arguments"]
    level = _width(parsed)
    try:
        for key, value in parsed.items():
            _render_value(str(key), value, indent + "  ", rendered, level)
    except RecursionError:  # parsed, but too deep to print again: show the text
        _render_value("arguments", text, indent, lines)
        return
    lines.extend(rendered)


def _cmd_show(args: argparse.Namespace) -> int:
    with _open(args) as log:
        seq = args.seq
        if seq < 0:
            top = log.head(args.session)
            if top is None:
                raise turnlog.errors.UnknownSessionError(
                    f"no session {args.session!r} in this log; "
                    "list sessions with `turnlog sessions`")
            seq = top.seq + 1 + seq
            if seq < 0:
                raise _UsageError(f"seq {args.seq} is before the first event "
                                  f"(the session has {top.seq + 1})")
        event = log.get(args.session, seq)
    raw = json.loads(event_to_json(event))
    if args.json:
        _emit(raw, sys.stdout)
        return EXIT_OK
    lines = [f"{event.session}#{event.seq}  {event.kind}",
             f"time       {format_time(event.time, precise=True)} UTC ({event.time})"
             if event.time is not None else "time       -",
             f"key        {event.key or '-'}", f"causation  {event.causation or '-'}",
             f"prev       {event.prev.hex()}", f"hash       {event.hash.hex()}"]
    if event.meta:
        lines.append(f"meta       {json.dumps(raw['meta'], ensure_ascii=False)}")
    lines.append("")
    body = _ordered(raw["body"], event.body)
    level = _width(name for name in body if name != "type")
    for name, value in body.items():
        if name == "type":
            continue
        if name == "blob" and isinstance(value, dict):
            lines.append(f"{'blob':<{level}} {value['hash']} ({format_size(value['size'])}, "
                         f"{value.get('media_type', 'text/plain; charset=utf-8')}); the text "
                         "stored in the event is a preview, `turnlog blob HASH` prints it all")
            continue
        _render_value(name, value, "", lines, level)
    _write_line("\n".join(lines), sys.stdout)
    return EXIT_OK


def _refs(count: int) -> str:
    return f"{count} blob ref{'s' * (count != 1)}"


def _problem_json(problem: turnlog.log.Problem | None) -> dict[str, Any] | None:
    if problem is None:
        return None
    return {"session": problem.session, "seq": problem.seq, "reason": problem.reason,
            "blob": problem.blob, "where": str(problem)}


def _verify_progress(events: int) -> None:
    print(f"verify: {events:,} events checked", file=sys.stderr, flush=True)


def _cmd_copy(args: argparse.Namespace) -> int:
    with _open_store(args.source) as source, _open_store(args.target, write=True) as target:
        copied = turnlog.log.copy_log(source, target, sessions=args.session)
        if args.session:  # the copied sessions (each with its lineage), not the whole target
            reports = [target.verify(session) for session in dict.fromkeys(args.session)]
            report = next((r for r in reports if not r.ok), reports[-1])
        else:
            report = target.verify()
        where = turnlog.stores.hide_credentials(target.store.location)
    if args.json:
        _emit({"target": where, "sessions": copied.sessions, "events": copied.events,
               "blobs": copied.blobs, "cached": copied.cached, "ok": report.ok,
               "problem": _problem_json(report.problem)}, sys.stdout)
    else:
        print(f"copied {_plural(copied.sessions, 'session')}, {_plural(copied.events, 'event')}"
              f", {_plural(copied.blobs, 'blob')} and {_plural(copied.cached, 'cached count')} "
              f"to {where}")
        print("verify: ok" if report.ok else f"verify: FAILED: {report.problem}")
    return EXIT_OK if report.ok else EXIT_FAILED


def _cmd_verify(args: argparse.Namespace) -> int:
    if args.key_file is not None and args.checkpoint is None:
        raise _UsageError("--key-file needs --checkpoint (the key checks the checkpoint's MAC)")
    checkpoint = _read_checkpoint(args.checkpoint) if args.checkpoint is not None else None
    key = _read_key(args.key_file)
    cp_json = None if checkpoint is None else {
        "session": checkpoint.session, "seq": checkpoint.seq, "hash": checkpoint.hash,
        "signed": bool(checkpoint.mac)}
    with _open(args) as log:
        try:
            report = log.verify(args.session, checkpoint=checkpoint, key=key,
                                strict=args.strict,
                                progress=_verify_progress if args.progress else None)
        except turnlog.errors.VerificationError as exc:
            if args.json:
                _emit({"ok": False, "problem": None, "error": str(exc), "checkpoint": cp_json},
                      sys.stdout)
            else:
                _say(f"FAILED: checkpoint: {exc}", "bold red")
            return EXIT_FAILED
    if args.json:
        _emit({"ok": report.ok, "problem": _problem_json(report.problem),
               "sessions": report.sessions, "events": report.events, "blobs": report.blobs,
               "checkpoint": cp_json, "warnings": list(report.warnings)}, sys.stdout)
    elif report.ok:
        extra = ""
        if checkpoint is not None:
            extra = (f"; extends checkpoint {checkpoint.session}#{checkpoint.seq} "
                     f"({checkpoint.hash[:16]}{', signature ok' if checkpoint.mac else ''})")
        _say(f"ok: {_plural(report.sessions, 'session')}, {_plural(report.events, 'event')}, "
             f"{_refs(report.blobs)} intact{extra}", "green")
        for warning in report.warnings:
            _say(f"warning: {warning}", "yellow")
    else:
        _say(f"FAILED: {report.problem}", "bold red")
        print(f"(checked {_plural(report.events, 'event')} in "
              f"{_plural(report.sessions, 'session')} before stopping)", file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_FAILED


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    key = _read_key(args.key_file)
    with _open(args) as log:
        cp = log.checkpoint(args.session, key=key)
    text = json.dumps({"session": cp.session, "seq": cp.seq, "hash": cp.hash, "mac": cp.mac})
    _write_output(args.output, (text + "\n").encode())
    if args.output is not None:
        print(f"wrote checkpoint {cp.session}#{cp.seq} ({cp.hash[:16]}"
              f"{', signed' if cp.mac else ''}) to {args.output}", file=sys.stderr)
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    with _open(args) as log, log.snapshot() as snap:
        lines: Iterable[bytes] = turnlog.log.export_events(log, args.session) if args.complete \
            else (event_to_json(event) + b"\n" for event in snap.iter(args.session))
        if args.output is None:
            sys.stdout.flush()
            for line in lines:
                _write_stdout_bytes(line)
            return EXIT_OK
        try:
            with open(args.output, "wb") as handle:
                count = 0
                for line in lines:
                    handle.write(line)
                    count += not line.startswith(b'{"blob"')
        except OSError as exc:
            raise _UsageError(f"cannot write {args.output!r}: {exc.strerror or exc}") from exc
    print(f"exported {count} events{' with their blobs' if args.complete else ''} of "
          f"{args.session!r} to {args.output}", file=sys.stderr)
    return EXIT_OK


def _find_blob(log: turnlog.Log, prefix: str) -> str:
    digest = prefix.lower()
    if not digest or any(c not in "0123456789abcdef" for c in digest) or len(digest) > 64:
        raise _UsageError(f"blob hash must be hex (a full 64-digit hash or a prefix of at "
                          f"least 8 digits), found {prefix!r}")
    if len(digest) == 64:
        return digest
    if len(digest) < 8:
        raise _UsageError(f"blob hash prefix {prefix!r} is too short; give at least 8 hex digits")
    with log.store.read() as txn:
        found = [d for d, _ in txn.blobs() if d.startswith(digest)]
    if not found:
        raise turnlog.errors.BlobNotFoundError(f"no blob starting with {prefix!r} in this log")
    if len(found) > 1:
        raise _UsageError(f"blob prefix {prefix!r} is ambiguous ({len(found)} blobs); "
                          "give more digits")
    return found[0]


def _cmd_blob(args: argparse.Namespace) -> int:
    with _open(args) as log:
        data = log.blob(_find_blob(log, args.hash))
    _write_output(args.output, data)
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.turns < 1:
        raise _UsageError(f"--turns must be >= 1, found {args.turns}")
    overflow_turn = args.overflow_turn if args.overflow_turn is not None else \
        demo.OVERFLOW_TURN
    rows: list[list[object]] = []
    present: list[int] = []
    with _open(args, write=True) as log, _progress("demo turns", args.turns,
                                                   show=not args.json) as advance:
        packer = Packer(log)
        compactor = Compactor(log, packer)
        packed_turns: list[demo.PackedTurn] = []

        def on_turn(turn: demo.TurnResult) -> None:
            advance()
            a = turn.appended
            packed = None
            if not a.duplicate and not args.no_pack:
                packed = demo.pack_turn(log, packer, compactor, args.session, turn,
                                        policy=demo.policy_for_turn(turn.turn),
                                        overflow=turn.turn == overflow_turn)
                packed_turns.append(packed)
            if args.json:
                record: dict[str, Any] = {
                    "type": "turn", "turn": turn.turn, "first_seq": a.first_seq,
                    "last_seq": a.last_seq, "events": len(turn.drafts), "blobs": turn.blobs,
                    "duplicate": a.duplicate, "user": turn.user_text}
                if packed is not None:
                    record["request"] = {
                        "seq": packed.request_seq, "tokens": packed.tokens,
                        "pressure_before": packed.pressure_before,
                        "pressure": packed.pressure, "stages": packed.fired,
                        "compaction": packed.compaction, "recovery": packed.recovery}
                _emit(record, sys.stdout)
                return
            if a.duplicate:
                present.append(turn.turn)
                return
            row: list[object] = [turn.turn, f"{a.first_seq}-{a.last_seq}", len(turn.drafts),
                                 turn.blobs or "", head(turn.user_text, 40)]
            if packed is not None:
                notes = [f"[{packed.compaction}]"] if packed.compaction else []
                notes += ["[recovery pack]"] if packed.recovery else []
                row += [f"{packed.tokens:,}",
                        f"{packed.pressure_before:.2f}->{packed.pressure:.2f}",
                        " ".join(f"{k}={v}" for k, v in packed.fired.items() if v)
                        or "verbatim", " ".join(notes)]
            rows.append(row)

        try:
            result = demo.run_demo(log, session=args.session, turns=args.turns,
                                   on_turn=on_turn)
        except turnlog.errors.IdempotencyError as exc:
            raise turnlog.errors.IdempotencyError(
                f"session {args.session!r} already holds other events under the demo's "
                f"keys: {exc}; use another --session") from exc
        replayer = Replayer(packer)
        replays = [replayer.replay(args.session, seq)
                   for seq in replayer.requests(args.session)]
        report = log.verify(args.session)
    last = result.head
    replay_ok = all(r.ok for r in replays)
    if args.json:
        _emit({"type": "result", "session": result.session, "turns": result.turns,
               "appended": result.appended, "present": result.present, "blobs": result.blobs,
               "head_seq": last.seq, "head_hash": last.hash.hex(),
               "requests": len(replays), "replayed_identical": sum(r.ok for r in replays),
               "verify": {"ok": report.ok, "problem": _problem_json(report.problem),
                          "events": report.events, "blobs": report.blobs}}, sys.stdout)
        return EXIT_OK if report.ok and replay_ok else EXIT_FAILED
    columns: list[Column] = [("TURN", "right"), ("SEQS", "left"), ("EVENTS", "right"),
                             ("BLOBS", "right"), ("USER MESSAGE", "left")]
    if any(len(row) > 5 for row in rows):
        columns += [("TOKENS", "right"), ("PRESSURE", "left"), ("STAGES (events changed)",
                                                               "left"), ("", "left")]
        rows = [row if len(row) > 5 else [*row, "", "", "", ""] for row in rows]
    if rows:
        print_table(_out(), columns, rows)
    if present:
        print(f"{_plural(len(present), 'turn')} already in the log ({_spans(present)}): "
              "nothing appended or packed for them")
    where = f"head {last.session}#{last.seq} {last.hash.hex()[:16]}"
    if result.appended == 0:
        print(f"nothing new appended: all {_plural(result.turns, 'turn')} were already in "
              f"the log ({where})")
    else:
        print(f"appended {_plural(result.appended, 'event')} in "
              f"{_plural(result.turns, 'turn')} ({result.present:,} already present), "
              f"{_refs(result.blobs)}; {where}")
    fired = {name: sum(1 for t in packed_turns if t.fired.get(name))
             for name in ("truncate", "dedup", "prune", "trim", "summaries")}
    if packed_turns:
        compactions = sum(1 for t in packed_turns if t.compaction.startswith("committed"))
        recoveries = sum(t.recovery for t in packed_turns)
        print(f"packed and recorded {_plural(len(packed_turns), 'request')}; stages fired "
              "in: " + ", ".join(f"{name} {n}" for name, n in fired.items())
              + f" requests; {_plural(compactions, 'compaction')}, "
              f"{_plural(recoveries, 'overflow recovery', 'overflow recoveries')}")
    bad = [r for r in replays if not r.ok]
    _say(f"replay: {len(replays) - len(bad)} of {_plural(len(replays), 'request')} reproduced "
         "byte for byte" + "".join(f"\n  #{r.request_seq}: {r.difference}" for r in bad),
         "red" if bad else "green")
    if report.ok:
        _say(f"verify: ok ({_plural(report.events, 'event')}, {_refs(report.blobs)})", "green")
    else:
        _say(f"verify: FAILED: {report.problem}", "bold red")
    _next_steps(args, [
        ("log {s}", "the events, one line each"),
        ("show {s} -1", "the last event in full"),
        ("explain {s} -1", "why each event went into the last request as it did"),
        ("replay {s}", "re-pack every recorded request and compare byte for byte"),
        ("pack {s} --format anthropic", "the next request body, as it would be sent")])
    return EXIT_OK if report.ok and replay_ok else EXIT_FAILED


def _spans(numbers: list[int]) -> str:
    """``1-40`` or ``1-3, 7`` for sorted turn numbers."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"turn {a}" if a == b else f"turns {a}-{b}" for a, b in spans)


def _next_steps(args: argparse.Namespace, steps: list[tuple[str, str]]) -> None:
    """What to try next, as commands that work on this store."""
    shown = turnlog.stores.hide_credentials(args.store) if args.store else ""
    store = f"--store {shlex.quote(shown)} " if args.store else ""
    session = getattr(args, "session", None) or demo.DEFAULT_SESSION
    commands = [f"turnlog {store}{command.format(s=session)}" for command, _ in steps]
    width = max(len(c) for c in commands)
    print("try next:")
    for command, (_, what) in zip(commands, steps, strict=True):
        _say(f"  {command:<{width}}  {what}", "cyan")


@contextlib.contextmanager
def _progress(what: str, total: int, *, show: bool) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr while the block runs, on a terminal only; yields the
    function that advances it by one."""
    console = make_console(sys.stderr)
    if not show or not console.is_terminal:
        yield lambda: None
        return
    with ProgressBar(TextColumn(visible(what)), BarColumn(), MofNCompleteColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda: bar.advance(task)


# -- packing, replay, explain -----------------------------------------------------------------

def _policy_arg(args: argparse.Namespace) -> turnlog.Policy | None:
    if getattr(args, "agent", None) and not getattr(args, "policy", None):
        raise _UsageError(f"--agent {args.agent} needs --policy FILE (the policy file whose "
                          f"[agents.{args.agent}] table to apply)")
    if getattr(args, "policy", None):
        try:
            policy = turnlog.Policy.from_toml(_read_bytes(args.policy, "policy file"),
                                              agent=args.agent)
        except turnlog.errors.PolicyError as exc:
            raise _UsageError(f"--policy {args.policy}: {exc}") from None
    else:
        policy = None
    budget = getattr(args, "budget", None)
    if budget is not None:
        base = policy or turnlog.Policy()
        reserve = min(base.output_reserve, budget // 4)
        fields = {f: getattr(base, f) for f in base.__struct_fields__}
        try:
            policy = turnlog.Policy(**{**fields, "context_window": budget,
                                       "output_reserve": reserve})
        except turnlog.errors.PolicyError as exc:
            raise _UsageError(f"--budget {budget} is too small: {exc}") from None
    return policy


def _session_model(log: turnlog.Log, session: str) -> str:
    """The session's most recent model ("" if none): the model named by the latest of its
    recorded requests, responses and assistant messages (an imported transcript names the
    model on each assistant message), through the sessions it forked from."""
    for event in reversed(log.lineage(session)):
        body = event.body
        if isinstance(body, (turnlog.events.RequestIssued, turnlog.events.ResponseReceived,
                             turnlog.events.AssistantMessageAdded)) and _model_name(body.model):
            return body.model
    return ""


def _model_name(name: str) -> bool:
    # Claude Code writes "<synthetic>" on the messages it makes up itself (an API error
    # shown as a reply): not a model a request can name.
    return bool(name) and not name.startswith("<")


def _request_seq(log: turnlog.Log, replayer: Replayer, session: str, value: int) -> int:
    """A REQ_SEQ argument: a request's seq, or counted from the end (-1: the latest)."""
    if value >= 0:
        return value
    requests = replayer.requests(session)
    if not requests:
        if log.head(session) is None:
            raise turnlog.errors.UnknownSessionError(f"no session {session!r} in this log; list "
                                              "sessions with `turnlog sessions`")
        raise turnlog.errors.UnknownSessionError(
            f"session {session!r} has no recorded request; record one with `turnlog pack "
            f"{session} --record`")
    if -value > len(requests):
        raise _UsageError(f"request {value} is before the first: {session!r} has "
                          f"{_plural(len(requests), 'recorded request')}")
    return requests[value]


def _packed_json(packed: Packed, *, request_seq: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt": msgspec.to_builtins(packed.prompt),
        "prompt_hash": packed.prompt.hash,
        "tokens": packed.tokens,
        "message_tokens": list(packed.message_tokens),
        "section_tokens": list(packed.section_tokens),
        "budget": msgspec.to_builtins(packed.budget),
        "pressure": packed.pressure,
        "pressure_before": packed.pressure_before,
        "thresholds": list(packed.thresholds),
        "compaction_due": packed.compaction_due,
        "recovery": packed.recovery,
        "stages": [msgspec.to_builtins(s) for s in packed.stages],
        "tokenizer": packed.tokenizer,
        "policy_hash": packed.policy_hash,
    }
    if request_seq is not None:
        out["request_seq"] = request_seq
    return out


def _cmd_pack(args: argparse.Namespace) -> int:
    policy = _policy_arg(args)
    with _open(args, write=args.record) as log:
        packer = Packer(log)
        request_seq = None
        render = None
        max_tokens: int | None = None
        model = args.model
        if args.format != "neutral":
            in_force = policy or packer.policy_in_force(args.session) or turnlog.Policy()
            max_tokens = args.max_tokens if args.max_tokens is not None \
                else in_force.output_reserve
            if log.head(args.session) is None:
                raise turnlog.errors.UnknownSessionError(
                    f"no session {args.session!r} in this log; "
                    "list sessions with `turnlog sessions`")
            model = model or _session_model(log, args.session)
            if not model:
                raise _UsageError(f"--format {args.format} needs a model name for the request "
                                  f"body: pass --model NAME ({args.session!r} has no recorded "
                                  "request, response or assistant message naming one)")
            render = renderer(args.format, model=model, max_tokens=max_tokens,
                              blobs=log.blob)
        if args.record:
            recorded = Replayer(packer).record(args.session, policy=policy, model=model,
                                               format=args.format, render=render,
                                               render_args=render_args(max_tokens=max_tokens))
            packed, request_seq = recorded.packed, recorded.request_seq
        else:
            packed = packer.pack(args.session, policy=policy)
        body = render(packed.prompt) if render is not None else b""
    if render is not None:
        # The request body exactly as it would be sent (the bytes the record hashes);
        # indented on a terminal, where nobody pipes the bytes anywhere.
        _write_stdout_bytes(_pretty(body) + b"\n" if sys.stdout.isatty() else body + b"\n")
        if request_seq is not None:
            print(f"recorded as {args.session}#{request_seq}", file=sys.stderr)
        return EXIT_OK
    if args.json:
        _emit(_packed_json(packed, request_seq=request_seq), sys.stdout)
        return EXIT_OK
    _print_packed(packed)
    if request_seq is not None:
        print(f"recorded as {args.session}#{request_seq}")
    return EXIT_OK


def _pretty(body: bytes) -> bytes:
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False).encode()
    except (ValueError, RecursionError):
        return body


def _print_packed(packed: Packed) -> None:
    b = packed.budget
    print(f"{packed.tokens:,} tokens of {b.usable:,} usable (window {b.window:,}, reserve "
          f"{b.output_reserve:,}); pressure {packed.pressure_before:.3f} -> "
          f"{packed.pressure:.3f}; compaction due: {'yes' if packed.compaction_due else 'no'}"
          + ("; recovery pack" if packed.recovery else ""))
    _print_stages(packed)
    rows: list[list[object]] = [["system", section.name, f"{tokens:,}", ""] for section, tokens
                                in zip(packed.prompt.system, packed.section_tokens, strict=True)]
    for i, (message, tokens) in enumerate(zip(packed.prompt.messages, packed.message_tokens,
                                               strict=True)):
        calls = ", ".join(c.name for c in message.tool_calls)
        text = head(message.text, 60) if message.text else f"[{calls}]" if calls else ""
        rows.append([i, message.role, f"{tokens:,}", text])
    print_table(_out(), [("#", "right"), ("ROLE", "left"), ("TOKENS", "right"),
                         ("TEXT", "left")], rows)


def _print_stages(packed: Packed) -> None:
    print_table(_out(), [("STAGE", "left"), ("", "left"), ("DETAIL", "left")],
                ([stage.name, cell("fired", "yellow") if stage.fired else "-", stage.detail]
                 for stage in packed.stages))


def _cmd_explain(args: argparse.Namespace) -> int:
    with _open(args) as log:
        replayer = Replayer(Packer(log))
        seq = _request_seq(log, replayer, args.session, args.request_seq)
        packed = replayer.explain(args.session, seq)
        request = log.get(args.session, seq).body
        fmt = request.format if isinstance(request, turnlog.events.RequestIssued) else ""
        derived = derived_tool_names(request, packed.prompt) \
            if isinstance(request, turnlog.events.RequestIssued) else ()
    if args.json:
        out = _packed_json(packed)
        out["derived_tools"] = list(derived)
        out["decisions"] = [msgspec.to_builtins(d) for d in packed.decisions]
        _emit(out, sys.stdout)
        return EXIT_OK
    _print_packed_header(packed)
    if derived:
        print(f"tools: {_plural(len(derived), 'definition')} derived for the "
              f"{fmt} body from the calls in the history (no tools recorded; "
              f"each a permissive schema): {', '.join(visible(n) for n in derived)}")
    styles = {"verbatim": "green", "trimmed": "red", "dropped": "red", "pruned": "yellow",
              "truncated": "yellow", "deduplicated": "yellow", "summarized": "cyan"}
    print_table(_out(), [("SEQ", "right"), ("KIND", "left"), ("DECISION", "left"),
                         ("TOKENS", "right"), ("RULE", "left")],
                ([d.seq, d.kind, cell(d.decision, styles.get(d.decision, "")),
                  f"{d.original_tokens:,} -> {d.tokens:,}" if d.original_tokens else "",
                  d.rule + (f": {d.detail}" if d.detail else "")]
                 for d in packed.decisions))
    return EXIT_OK


def _print_packed_header(packed: Packed) -> None:
    b = packed.budget
    print(f"{packed.tokens:,} tokens of {b.usable:,} usable; pressure "
          f"{packed.pressure_before:.3f} -> {packed.pressure:.3f}; tokenizer "
          f"{packed.tokenizer}; policy {packed.policy_hash[:16]}")
    _print_stages(packed)


def _cmd_replay(args: argparse.Namespace) -> int:
    with _open(args) as log:
        replayer = Replayer(Packer(log))
        seqs = replayer.requests(args.session) if args.all or args.request_seq is None \
            else [_request_seq(log, replayer, args.session, args.request_seq)]
        if not seqs and log.head(args.session) is None:
            raise turnlog.errors.UnknownSessionError(f"no session {args.session!r} in this log; "
                                              "list sessions with `turnlog sessions`")
        results = []
        for seq in seqs:
            request = log.get(args.session, seq).body
            try:
                render = renderer_for(request, blobs=log.blob) \
                    if isinstance(request, turnlog.events.RequestIssued) else None
                results.append(replayer.replay(args.session, seq, render=render))
            except RenderError as exc:
                results.append(ReplayResult(args.session, seq, False, "", "",
                                            f"cannot render the recorded format: {exc}"))
    ok = all(r.ok for r in results)
    if args.json:
        _emit({"ok": ok, "requests": [msgspec.to_builtins(r) for r in results]}, sys.stdout)
    else:
        for r in results:
            _say(f"{r.session}#{r.request_seq}: "
                 + ("identical" if r.ok else f"DIFFERS: {r.difference}"),
                 "" if r.ok else "bold red")
        _say(f"{sum(r.ok for r in results)} of {_plural(len(results), 'request')} reproduced "
             "byte for byte", "green" if ok else "bold red")
    return EXIT_OK if ok else EXIT_FAILED


def _cmd_diff(args: argparse.Namespace) -> int:
    with _open(args) as log:
        replayer = Replayer(Packer(log))
        diff = replayer.diff(args.session,
                             _request_seq(log, replayer, args.session, args.request_a),
                             _request_seq(log, replayer, args.session, args.request_b))
    if args.json:
        _emit(msgspec.to_builtins(diff), sys.stdout)
        return EXIT_OK
    print(f"#{diff.request_a}: {_plural(diff.tokens_a, 'token')}; #{diff.request_b}: "
          f"{_plural(diff.tokens_b, 'token')}")
    print(f"shared prefix: {_plural(diff.shared_messages, 'message')}, "
          f"{_plural(diff.shared_tokens, 'token')} (system "
          f"{'changed' if diff.system_changed else 'same'}, tools "
          f"{'changed' if diff.tools_changed else 'same'})")
    if not diff.changes:
        print("no decision changed")
        return EXIT_OK
    print_table(_out(), [("SEQ", "right"), ("KIND", "left"), ("BEFORE", "left"),
                         ("AFTER", "left"), ("RULE", "left")],
                ([c.seq, c.kind, c.before, c.after, c.rule + (f" ({c.detail})" if c.detail
                                                             else "")]
                 for c in diff.changes))
    return EXIT_OK


def _cmd_compact(args: argparse.Namespace) -> int:
    policy = _policy_arg(args)
    with _open(args, write=True) as log:
        packer = Packer(log)
        summarizer = None
        if args.summarizer not in (None, "extractive"):
            raise _UsageError(f"unknown summarizer {args.summarizer!r}; built in: extractive "
                              "(model summarizers are used from Python, see docs/packing.md)")
        outcome = Compactor(log, packer, summarizer=summarizer).compact(
            args.session, policy=policy, reason="manual")
    if args.json:
        _emit(msgspec.to_builtins(outcome), sys.stdout)
    else:
        _say(f"{outcome.status}: {outcome.reason}" + (f": {outcome.detail}" if outcome.detail
                                                       else ""),
             {"committed": "green", "failed": "bold red"}.get(outcome.status, "yellow"))
        if outcome.seqs:
            print(f"events appended: {', '.join(f'#{s}' for s in outcome.seqs)}; next prompt "
                  f"{outcome.next_tokens:,} tokens ({'fits' if outcome.fits else 'OVER BUDGET'})")
    return EXIT_OK if outcome.status != "failed" else EXIT_FAILED


def _cmd_import(args: argparse.Namespace) -> int:
    totals = {"events": 0, "appended": 0, "tool_calls": 0, "blobs": 0, "tokens": 0}
    files: list[ImportSummary] = []
    skipped: list[SkippedRecord] = []
    failed: list[tuple[str, str]] = []
    store = _store_path(args)
    existed, had_store = store.exists(), (store / "data.mdb").exists()
    console = make_console(sys.stderr)
    show = console.is_terminal and not args.json
    written = False
    try:
        with _open(args, write=True) as log, ProgressBar(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                console=console, transient=True, disable=not show) as bar:
            task = bar.add_task("importing", total=None)

            def progress(p: Progress) -> None:
                bar.update(task, description=visible(f"importing {p.path[-60:]} (file "
                                                     f"{p.files_done + 1} of {p.files_total})"),
                           completed=p.events_done, total=p.events_total or None)

            for path in args.paths:
                try:
                    summary = import_path(log, path, format=args.format, session=args.session,
                                          skip_bad=args.skip_bad, progress=progress,
                                          keep_going=args.keep_going)
                except turnlog.errors.ImportFormatError as exc:
                    failed.append((path, _cli_words(str(exc))))
                    if args.json:
                        _emit({"type": "error", "path": path, "error": failed[-1][1]},
                              sys.stdout)
                    if args.keep_going:
                        continue
                    break
                for key in ("events", "appended", "tool_calls", "blobs"):
                    totals[key] += getattr(summary, key)
                totals["tokens"] += summary.tokens
                files += summary.files or ([summary] if summary.sources else [])
                skipped += summary.skipped
                if args.json:
                    _emit({"type": "file", "path": path, "format": summary.format,
                           "sessions": list(summary.sessions), "events": summary.events,
                           "appended": summary.appended, "tool_calls": summary.tool_calls,
                           "blobs": summary.blobs, "tokens": summary.tokens,
                           "skipped": [msgspec.to_builtins(s) for s in summary.skipped]},
                          sys.stdout)
            written = bool(log.sessions())
    finally:
        if not had_store and not written:
            _remove_store(store, existed)  # an import that wrote nothing leaves no store
    sessions = [x for f in files for x in f.sessions]
    code = EXIT_OK if files and not failed else EXIT_ERROR
    if args.json:
        _emit({"type": "result", **totals, "sessions": sessions,
               "skipped": len(skipped)}, sys.stdout)
        return code
    if files:
        print_table(_out(), [("FILE", "left"), ("FORMAT", "left"), ("SESSIONS", "left"),
                             ("EVENTS", "right"), ("NEW", "right"), ("SKIPPED", "right")],
                    ([f.sources[0] if f.sources else "", f.format, ", ".join(f.sessions),
                      f.events, f.appended, len(f.skipped) or ""] for f in files))
    for record in skipped:
        _say(f"skipped {_cli_words(str(record))}", "yellow")
    if files:
        print(f"imported {_plural(len(files), 'file')} into {_plural(len(sessions), 'session')}"
              f": {_plural(totals['events'], 'event')} ({totals['appended']:,} new), "
              f"{_plural(totals['tool_calls'], 'tool call')}, {_plural(totals['blobs'], 'blob')}"
              f", {_plural(totals['tokens'], 'token')} of reported usage")
    for _, error in failed:
        print(f"turnlog: error: {error}", file=sys.stderr)
    if not files and not failed:
        print(f"turnlog: error: nothing imported from {', '.join(args.paths)}: no transcript "
              "of a known format found" + (f" ({_plural(len(skipped), 'file')} skipped, "
                                           "listed above)" if skipped else "")
              + "; give transcript files (or --format FORMAT to force one)", file=sys.stderr)
    elif failed and files and not args.keep_going:
        print("the paths before the failed one were imported; pass --keep-going to import the "
              "rest (what was imported is not appended twice)", file=sys.stderr)
    return code


def _remove_store(path: Path, existed: bool) -> None:
    """Remove the files of a store that `_open` created but nothing was written to."""
    for name in ("data.mdb", "lock.mdb"):
        with contextlib.suppress(OSError):
            (path / name).unlink()
    if not existed:
        with contextlib.suppress(OSError):
            path.rmdir()


#: Library wording (Python parameters) -> the command's flags, for error messages.
_FLAG_WORDS = (("pass format= if you know it", "pass --format FORMAT if you know it"),
               ("pass skip_bad=True", "pass --skip-bad"),
               ("with keep_going=True", "with --keep-going"))


def _cli_words(message: str) -> str:
    """A library error message with its Python parameters named as the command's flags."""
    for library, flag in _FLAG_WORDS:
        message = message.replace(library, flag)
    # Library messages name the command and the API call: on the command line, the command.
    return re.sub(r" \(Python: `[^`]*`\)|; Python: `[^`]*`", "", message)


def _cmd_memories(args: argparse.Namespace) -> int:
    with _open(args) as log:
        if log.head(args.session) is None:
            raise turnlog.errors.UnknownSessionError(
                f"no session {args.session!r} in this log; list sessions with `turnlog sessions`")
        if args.memory_session is not None and log.head(args.memory_session) is None:
            raise turnlog.errors.UnknownSessionError(
                f"no memory session {args.memory_session!r} in this log (--memory-session); "
                "list sessions with `turnlog sessions`")
        manager = MemoryManager(log, memory_session=args.memory_session
                                or f"{args.session}-memories")
        book = manager.memories(include_expired=True)
        block = manager.block_in_force(args.session)
    if args.json:
        _emit({"memory_session": manager.memory_session,
               "memories": [msgspec.to_builtins(m) for m in book],
               "block_in_force": block}, sys.stdout)
        return EXIT_OK
    print(f"memory session {manager.memory_session!r}: {_plural(len(book), 'memory', 'memories')}")
    if book:
        print_table(_out(), [("ID", "left"), ("RETENTION", "left"), ("TYPE", "left"),
                             ("PINNED", "left"), ("TITLE", "left"), ("CONTENT", "left")],
                    ([m.memory_id, m.retention, m.memory_type, "pinned" if m.pinned else "",
                      head(m.title, 40), head(m.content, 60)] for m in book))
    print(f"block in force in {args.session!r}: "
          + (_plural(len(block), "character") if block else "none"))
    if block and args.block:
        print(block)
    return EXIT_OK


def _cmd_recall(args: argparse.Namespace) -> int:
    if args.commit is not None and args.commit in (args.session or ()):
        raise _UsageError(f"--commit {args.commit} brings back events of other sessions; "
                          f"leave {args.commit!r} out of --session")
    with _open(args, write=args.commit is not None) as log:
        for name in [*(args.session or ()), *([args.commit] if args.commit else [])]:
            if log.head(name) is None:
                raise turnlog.errors.UnknownSessionError(f"no session {name!r} in this log; list "
                                                  "sessions with `turnlog sessions`")
        recaller = Recaller(log)
        if args.commit is not None:
            policy = _policy_arg(args) or turnlog.Policy()
            # sessions=None searches every session but the one committed to.
            done = recaller.commit(args.commit, args.query, policy=policy,
                                   sessions=args.session, k=args.k)
            hits = log.get(args.commit, done.last_seq).body.hits if done else ()  # type: ignore[union-attr]
        else:
            _policy_arg(args)  # --agent without --policy is refused here too
            sessions = args.session or [h.session for h in log.sessions()]
            hits = tuple(recaller.search(args.query, sessions=sessions, k=args.k))
    if args.json:
        _emit({"query": args.query, "hits": [msgspec.to_builtins(h) for h in hits],
               "committed": args.commit is not None and bool(hits)}, sys.stdout)
        return EXIT_OK
    if not hits:
        print("no results")
        return EXIT_OK
    print_table(_out(), [("EVENT", "left"), ("SCORE", "right"), ("TEXT", "left")],
                ([f"{hit.session}#{hit.seq}", hit.score, head(hit.text, 80)]
                 for hit in hits))
    if args.commit is not None:
        print(f"committed as a recall event in {args.commit!r}")
    return EXIT_OK


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from . import web
    except ImportError as exc:
        print(f"turnlog: error: `turnlog serve` needs the web extra (missing {exc.name}): "
              "pip install 'turnlog[web]'", file=sys.stderr)
        return EXIT_ERROR
    if not 0 <= args.port <= 65535:
        raise _UsageError(f"--port must be 0 to 65535, found {args.port}")
    token = args.token
    if token is None and not web.is_loopback(args.host):
        token = web.new_token()
    with _open(args) as log:
        try:
            server = web.Server(log, host=args.host, port=args.port, token=token)
        except OSError as exc:
            raise _UsageError(f"cannot listen on {args.host}:{args.port}: "
                              f"{exc.strerror or exc}; pass another --port") from None
        print(f"turnlog inspector (read-only) on {server.url}", flush=True)
        where = turnlog.stores.hide_credentials(log.store.location)
        print(f"store {where}; Ctrl-C to stop", flush=True)
        server.run()
    return EXIT_OK


# -- parser ----------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """Flags are spelled in full: an abbreviation (``--j`` for ``--json``) is a usage
    error, so what a script asks for never changes when a verb gains a flag, and no
    abbreviated ``--json`` turns escaped human output into raw JSON unnoticed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _nonneg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, found {value}")
    return value


def _positive(text: str) -> int:
    value = _nonneg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, found {value}")
    return value


#: The largest context window a policy takes (`turnlog.Policy` fields are at most 2**40).
_MAX_BUDGET = 2**40


def _budget(text: str) -> int:
    value = _nonneg(text)
    if value > _MAX_BUDGET:
        raise argparse.ArgumentTypeError(f"expected a context window of at most 2**40 "
                                         f"({_MAX_BUDGET:,}) tokens, found {value:,}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--store", default=argparse.SUPPRESS, metavar="PATH",
                        help="the store directory or postgresql:// URL (default: "
                             "$TURNLOG_STORE, else ./.turnlog)")
    printing = _Parser(add_help=False)
    printing.add_argument("--json", action="store_true", help="machine-readable output")

    parser = _Parser(prog="turnlog", description="Inspect, verify and export a turnlog store.",
                     epilog="Exit codes: 0 ok, 1 a check failed, 2 usage error, 3 turnlog "
                            "error, 4 store missing. See docs/cli.md.")
    parser.add_argument("--store", default=None, metavar="PATH",
                        help="the store directory or postgresql:// URL (default: "
                             "$TURNLOG_STORE, else ./.turnlog)")
    parser.add_argument("--version", action="version", version=f"turnlog {turnlog.__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True,
                                parser_class=_Parser)

    def verb(name: str, run: Callable[[argparse.Namespace], int], help_text: str, *,
             prints: bool = True) -> argparse.ArgumentParser:
        parents = [common, printing] if prints else [common]
        p = sub.add_parser(name, parents=parents, help=help_text, description=help_text)
        p.set_defaults(run=run)
        return p

    verb("sessions", _cmd_sessions, "list sessions with their head seq, event count and hash")

    p = verb("log", _cmd_log, "list a session's events, one line each")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--from", dest="start", type=_nonneg, default=0, metavar="SEQ",
                   help="start at this seq (default 0)")
    p.add_argument("--kind", action="extend", nargs="+", choices=sorted(KINDS),
                   metavar="KIND",
                   help=f"only these kinds (repeatable): {', '.join(sorted(KINDS))}")
    p.add_argument("--limit", type=_nonneg, default=None, metavar="N",
                   help="print at most N events")

    p = verb("show", _cmd_show, "print one event in full, with its prev and hash")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("seq", metavar="SEQ", type=int, help="the seq (negative: from the end, -1 "
                   "is the head)")

    p = verb("verify", _cmd_verify, "check the hash chain and blobs; exit 1 naming the first "
             "bad event")
    p.add_argument("session", metavar="SESSION", nargs="?", default=None,
                   help="only this session (default: all sessions and every blob)")
    p.add_argument("--checkpoint", metavar="FILE", help="also check that the log extends this "
                   "checkpoint (from `turnlog checkpoint`)")
    p.add_argument("--key-file", metavar="FILE", help="key of a signed checkpoint")
    p.add_argument("--strict", action="store_true", help="also prove every record decodes "
                   "against the schema and is canonical (slower)")
    p.add_argument("--progress", action="store_true", help="report the events checked on "
                   "stderr as it goes")

    p = verb("copy", _cmd_copy, "copy every session, blob and cached count of store SRC "
             "(or only the sessions given, with the sessions their forks continue) into "
             "store DST (a directory or a postgresql:// URL), hashes preserved, after "
             "verifying each session in SRC; then verify the copy. A copy stopped half way "
             "leaves DST marked unfinished (verify fails) and resumes when run again")
    p.add_argument("source", metavar="SRC", help="the store to copy (opened read-only)")
    p.add_argument("target", metavar="DST", help="the store to copy into (created if "
                   "missing; a session it holds must be a prefix of SRC's: it is continued)")
    p.add_argument("--session", action="append", metavar="ID", default=None,
                   help="copy only this session, with its forks' lineage (repeatable)")

    p = verb("checkpoint", _cmd_checkpoint, "write a checkpoint (session, seq, hash, mac) of "
             "a session's head as JSON")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--key-file", metavar="FILE", help="sign with HMAC-SHA256 under this key "
                   "(the file's bytes, one trailing newline removed)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    p = verb("export", _cmd_export, "write a session as JSON lines, one event a line, hashes "
             "included", prints=False)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--complete", action="store_true", help="a backup `turnlog import` reads "
                   "back with every hash: also the sessions a fork continues (first) and the "
                   "blobs the events refer to")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    p = verb("blob", _cmd_blob, "write a blob's raw bytes", prints=False)
    p.add_argument("hash", metavar="HASH", help="the blob's hash, or a unique prefix of at "
                   "least 8 hex digits")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    p = verb("demo", _cmd_demo, "append a deterministic demo agent session, then verify it")
    p.add_argument("--turns", type=int, default=demo.DEFAULT_TURNS, metavar="N",
                   help=f"number of turns, 1 to {demo.MAX_TURNS} (default "
                        f"{demo.DEFAULT_TURNS})")
    p.add_argument("--session", default=demo.DEFAULT_SESSION,
                   help=f"session id (default {demo.DEFAULT_SESSION!r})")
    p.add_argument("--no-pack", action="store_true", help="only append the events (no "
                   "packing, requests, compaction or replay)")
    p.add_argument("--overflow-turn", type=int, default=None, metavar="N",
                   help="the turn whose request meets a context-overflow error (default "
                        f"{demo.OVERFLOW_TURN})")

    def policy_options(p: argparse.ArgumentParser) -> None:
        group = p.add_mutually_exclusive_group()
        group.add_argument("--budget", type=_budget, metavar="N", help="context window in "
                           "tokens (the rest of the policy in force, or the defaults)")
        group.add_argument("--policy", metavar="FILE", help="a policy TOML file")
        p.add_argument("--agent", metavar="NAME", help="apply the [agents.NAME] table of "
                       "the policy file")

    p = verb("pack", _cmd_pack, "pack a session's prompt (optionally record it as a request)")
    p.add_argument("session", metavar="SESSION")
    policy_options(p)
    p.add_argument("--record", action="store_true", help="append the request record")
    p.add_argument("--format", default="neutral", choices=["neutral", *sorted(PROVIDERS)],
                   help="print the provider request body exactly as it would be sent, as "
                        "JSON (default: the neutral prompt and its accounting)")
    p.add_argument("--model", default="", help="model name put in the request body and record "
                   "(default with --format: the session's most recent model, named by a "
                   "recorded request or an assistant message)")
    p.add_argument("--max-tokens", type=_positive, default=None, metavar="N",
                   help="max output tokens in the request body (default: the policy's "
                        "output reserve)")

    p = verb("explain", _cmd_explain, "show the decision for every event of a recorded request")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("request_seq", metavar="REQ_SEQ", type=int)

    p = verb("replay", _cmd_replay, "re-pack recorded requests; exit 1 if any differs")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("request_seq", metavar="REQ_SEQ", type=int, nargs="?", default=None)
    p.add_argument("--all", action="store_true", help="every request of the session "
                   "(the default without REQ_SEQ)")

    p = verb("diff", _cmd_diff, "compare two recorded requests: shared prefix, changed "
             "decisions")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("request_a", metavar="REQ_A", type=int)
    p.add_argument("request_b", metavar="REQ_B", type=int)

    p = verb("compact", _cmd_compact, "compact a session now (appends the compaction events)")
    p.add_argument("session", metavar="SESSION")
    policy_options(p)
    p.add_argument("--summarizer", default=None, metavar="NAME",
                   help="the summarizer (default: extractive, offline)")

    p = verb("import", _cmd_import, "import transcripts (Claude Code, Codex, OpenAI, "
             "mini-swe-agent, SWE-agent, OpenHands, Aider); idempotent")
    p.add_argument("paths", nargs="+", metavar="FILE", help="files or directories")
    p.add_argument("--format", default=None, choices=sorted(IMPORT_FORMATS),
                   help="the format (default: detected from the content)")
    p.add_argument("--session", default=None, metavar="ID",
                   help="the session id (default: from the transcript)")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed records (listed) "
                   "instead of refusing the file")
    p.add_argument("--keep-going", action="store_true", help="go on past a file that cannot "
                   "be imported (listed with the reason) instead of stopping there")

    p = verb("memories", _cmd_memories, "list the memories of a session's memory session and "
             "the block in force")
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--memory-session", metavar="ID", default=None,
                   help="the memory session (default: SESSION-memories)")
    p.add_argument("--block", action="store_true", help="also print the block in force")

    p = verb("recall", _cmd_recall, "search past events (BM25); --commit appends the results "
             "as a recall event so they may reach a prompt")
    p.add_argument("query", metavar="QUERY")
    p.add_argument("--session", action="append", metavar="ID",
                   help="search only these sessions (repeatable; default: all)")
    p.add_argument("-k", type=_nonneg, default=5, metavar="N", help="results (default 5)")
    p.add_argument("--commit", metavar="SESSION", default=None,
                   help="append the results to SESSION as a recall event")
    policy_options(p)

    p = verb("serve", _cmd_serve, "serve a read-only web inspector of the store (sessions, "
             "timelines, request receipts, diffs, summaries, memories; JSON under /api/)",
             prints=False)
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default "
                   "127.0.0.1; any other address requires the token)")
    p.add_argument("--port", type=int, default=8765, metavar="N",
                   help="the port (default 8765; 0 picks a free one)")
    p.add_argument("--token", default=None, metavar="TOKEN",
                   help="the access token every request must carry (default: none on "
                        "loopback, a new random one printed with the address otherwise)")
    return parser


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
    for value in (getattr(args, "store", None), os.environ.get("TURNLOG_STORE"),
                  getattr(args, "source", None), getattr(args, "target", None)):
        if value and (hidden := turnlog.stores.hide_credentials(value)) != value:
            message = message.replace(value, hidden)
    return "turnlog: error: " + " ".join(
        line.strip() for line in message.splitlines() if line.strip())


def _run(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return run(args)
    except _UsageError as exc:
        print(_error_line(str(exc), args), file=sys.stderr)
        return EXIT_USAGE
    except _NoStoreError as exc:
        print(_error_line(str(exc), args), file=sys.stderr)
        return EXIT_NO_STORE
    except turnlog.KernelError as exc:
        print(_error_line(_cli_words(str(exc)), args), file=sys.stderr)
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
        print("turnlog: error: out of memory; free memory or raise the process's limit, "
              "then run the command again", file=sys.stderr)
        return EXIT_ERROR

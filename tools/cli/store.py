"""Verbs on a store: ``sessions``, ``log``, ``show``, ``verify``, ``copy``,
``checkpoint``, ``export``, ``blob``."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec
import turnlog
from turnlog.events import EVENT_KINDS as KINDS
from turnlog.events import event_to_json

from ..summary import format_size, format_time, loads_json, summarize
from ..terminal import Column, print_table
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    _emit,
    _is_url,
    _nonneg,
    _nonneg_seq,
    _open,
    _open_store,
    _out,
    _plural,
    _problem_json,
    _read_checkpoint,
    _read_key,
    _refs,
    _remove_store,
    _say,
    _seq,
    _UsageError,
    _verify_progress,
    _write_line,
    _write_output,
    _write_stdout_bytes,
)
from ._verbs import Verbs, arg, session_arg

VERBS = Verbs()


@VERBS.verb("sessions", "list sessions with their head seq, event count and hash")
def _cmd_sessions(args: argparse.Namespace) -> int:
    with _open(args) as log:
        heads = log.sessions()
        location = turnlog.stores.hide_credentials(log.store.location)
        unfinished = turnlog.log.unfinished_copy(log)
    if args.json:
        _emit(
            {
                "store": location,
                "unfinished_copy": unfinished,
                "sessions": [
                    {
                        "session": h.session,
                        "head_seq": h.seq,
                        "events": h.seq + 1,
                        "head_hash": h.hash.hex(),
                    }
                    for h in heads
                ],
            },
            sys.stdout,
        )
        return EXIT_OK
    if unfinished is not None:
        _say(f"warning: {unfinished}", "yellow")
    if not heads:
        print("no sessions")
        return EXIT_OK
    columns: list[Column] = [
        ("SESSION", "left"),
        ("HEAD", "right"),
        ("EVENTS", "right"),
        ("HEAD HASH", "left"),
    ]
    print_table(_out(), columns, ([h.session, h.seq, h.seq + 1, h.hash.hex()[:16]] for h in heads))
    return EXIT_OK


def _log_record(event: turnlog.events.Event) -> dict[str, Any]:
    record: dict[str, Any] = {
        "session": event.session,
        "seq": event.seq,
        "kind": event.kind,
        "time": event.time,
        "key": event.key,
        "causation": event.causation,
        "hash": event.hash.hex(),
        "summary": summarize(event, 200),
    }
    blob = getattr(event.body, "blob", None)
    if isinstance(blob, turnlog.events.BlobRef):
        record["blob"] = blob.hash
    return record


@VERBS.verb(
    "log",
    "list a session's events, one line each",
    session_arg(),
    arg(
        "--from",
        dest="start",
        type=_nonneg_seq,
        default=0,
        metavar="SEQ",
        help="start at this seq (default 0)",
    ),
    arg(
        "--kind",
        action="extend",
        nargs="+",
        choices=sorted(KINDS),
        metavar="KIND",
        help=f"only these kinds (repeatable): {', '.join(sorted(KINDS))}",
    ),
    arg("--limit", type=_nonneg, default=None, metavar="N", help="print at most N events"),
)
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
                _write_line(
                    f"{event.seq:>6}  {format_time(event.time):<19}  {event.kind:<14} "
                    f"{summarize(event, 72)}",
                    sys.stdout,
                )
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


def _render_value(name: str, value: object, indent: str, lines: list[str], width: int = 10) -> None:
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


@VERBS.verb(
    "show",
    "print one event in full, with its prev and hash",
    session_arg(),
    arg("seq", metavar="SEQ", type=_seq, help="the seq (negative: from the end, -1 is the head)"),
)
def _cmd_show(args: argparse.Namespace) -> int:
    with _open(args) as log:
        seq = args.seq
        if seq < 0:
            top = log.head(args.session)
            if top is None:
                raise turnlog.errors.UnknownSessionError(
                    f"no session {args.session!r} in this log; "
                    "list sessions with `turnlog sessions`"
                )
            seq = top.seq + 1 + seq
            if seq < 0:
                raise _UsageError(
                    f"seq {args.seq} is before the first event (the session has {top.seq + 1})"
                )
        event = log.get(args.session, seq)
    raw = json.loads(event_to_json(event))
    if args.json:
        _emit(raw, sys.stdout)
        return EXIT_OK
    lines = [
        f"{event.session}#{event.seq}  {event.kind}",
        f"time       {format_time(event.time, precise=True)} UTC ({event.time})"
        if event.time is not None
        else "time       -",
        f"key        {event.key or '-'}",
        f"causation  {event.causation or '-'}",
        f"prev       {event.prev.hex()}",
        f"hash       {event.hash.hex()}",
    ]
    if event.meta:
        lines.append(f"meta       {json.dumps(raw['meta'], ensure_ascii=False)}")
    lines.append("")
    body = _ordered(raw["body"], event.body)
    level = _width(name for name in body if name != "type")
    for name, value in body.items():
        if name == "type":
            continue
        if name == "blob" and isinstance(value, dict):
            lines.append(
                f"{'blob':<{level}} {value['hash']} ({format_size(value['size'])}, "
                f"{value.get('media_type', 'text/plain; charset=utf-8')}); the text "
                "stored in the event is a preview, `turnlog blob HASH` prints it all"
            )
            continue
        _render_value(name, value, "", lines, level)
    _write_line("\n".join(lines), sys.stdout)
    return EXIT_OK


@VERBS.verb(
    "verify",
    "check the hash chain and blobs; exit 1 naming the first bad event",
    session_arg(
        "session",
        nargs="?",
        default=None,
        help="only this session (default: all sessions and every blob)",
    ),
    arg(
        "--checkpoint",
        metavar="FILE",
        help="also check that the log extends this checkpoint (from `turnlog checkpoint`)",
    ),
    arg("--key-file", metavar="FILE", help="key of a signed checkpoint"),
    arg(
        "--strict",
        action="store_true",
        help="also prove every record decodes against the schema and is canonical (slower)",
    ),
    arg("--progress", action="store_true", help="report the events checked on stderr as it goes"),
)
def _cmd_verify(args: argparse.Namespace) -> int:
    if args.key_file is not None and args.checkpoint is None:
        raise _UsageError("--key-file needs --checkpoint (the key checks the checkpoint's MAC)")
    checkpoint = _read_checkpoint(args.checkpoint) if args.checkpoint is not None else None
    key = _read_key(args.key_file)
    cp_json = (
        None
        if checkpoint is None
        else {
            "session": checkpoint.session,
            "seq": checkpoint.seq,
            "hash": checkpoint.hash,
            "signed": bool(checkpoint.mac),
        }
    )
    with _open(args) as log:
        try:
            report = log.verify(
                args.session,
                checkpoint=checkpoint,
                key=key,
                strict=args.strict,
                progress=_verify_progress if args.progress else None,
            )
        except turnlog.errors.VerificationError as exc:
            if args.json:
                _emit(
                    {
                        "ok": False,
                        "problem": None,
                        "error": exc.cli_message(),
                        "checkpoint": cp_json,
                    },
                    sys.stdout,
                )
            else:
                _say(f"FAILED: checkpoint: {exc.cli_message()}", "bold red")
            return EXIT_FAILED
    if args.json:
        _emit(
            {
                "ok": report.ok,
                "problem": _problem_json(report.problem),
                "sessions": report.sessions,
                "events": report.events,
                "blobs": report.blobs,
                "checkpoint": cp_json,
                "warnings": list(report.warnings),
                "erased": [{"session": s, "seq": q, "by": b} for s, q, b in report.erased],
            },
            sys.stdout,
        )
    elif report.ok:
        extra = ""
        if checkpoint is not None:
            extra = (
                f"; extends checkpoint {checkpoint.session}#{checkpoint.seq} "
                f"({checkpoint.hash[:16]}{', signature ok' if checkpoint.mac else ''})"
            )
        _say(
            f"ok: {_plural(report.sessions, 'session')}, {_plural(report.events, 'event')}, "
            f"{_refs(report.blobs)} intact{extra}",
            "green",
        )
        if report.erased:
            print(
                f"{_plural(len(report.erased), 'event')} erased (listed by their erasure "
                "events; see `turnlog verify --json`)"
            )
        for warning in report.warnings:
            _say(f"warning: {warning}", "yellow")
    else:
        _say(f"FAILED: {report.problem}", "bold red")
        print(
            f"(checked {_plural(report.events, 'event')} in "
            f"{_plural(report.sessions, 'session')} before stopping)",
            file=sys.stderr,
        )
    return EXIT_OK if report.ok else EXIT_FAILED


@VERBS.verb(
    "copy",
    "copy every session, blob and cached count of store SRC (or only the "
    "sessions given, with the sessions their forks continue) into store DST (a "
    "directory or a postgresql:// URL), hashes preserved, after verifying each session "
    "in SRC; then verify the copy. A copy stopped half way leaves DST marked unfinished "
    "(verify fails) and resumes when run again",
    arg("source", metavar="SRC", help="the store to copy (opened read-only)"),
    arg(
        "target",
        metavar="DST",
        help="the store to copy into (created if missing; a "
        "session it holds must be a prefix of SRC's: it is continued)",
    ),
    arg(
        "--session",
        action="append",
        metavar="ID",
        default=None,
        help="copy only this session, with its forks' lineage (repeatable)",
    ),
)
def _cmd_copy(args: argparse.Namespace) -> int:
    if not _is_url(args.source) and not _is_url(args.target):
        with contextlib.suppress(OSError):
            if Path(args.source).resolve() == Path(args.target).resolve():
                raise _UsageError(
                    f"SRC and DST are the same store ({args.source!r}): copy writes one "
                    "store into another; name a new or other directory (or URL) as DST"
                )
    directory = None if _is_url(args.target) else Path(args.target)
    existed = directory is not None and directory.exists()
    created = directory is not None and not (directory / "data.mdb").exists()
    remove = False
    try:
        with (
            _open_store(args.source) as source,
            _open_store(args.target, write=True, create=True) as target,
        ):
            if _is_url(args.target) and source.store.location == target.store.location:
                raise _UsageError(
                    f"SRC and DST are the same store "
                    f"({turnlog.stores.hide_credentials(target.store.location)}): copy writes "
                    "one store into another; name another schema, database or server as DST"
                )
            try:
                copied = turnlog.log.copy_log(source, target, sessions=args.session)
            except Exception:
                # A failed copy that wrote no session leaves no store it created.
                with contextlib.suppress(turnlog.KernelError):
                    remove = created and not target.sessions()
                raise
            if args.session:  # the copied sessions (each with its lineage), not all of DST
                reports = [target.verify(session) for session in dict.fromkeys(args.session)]
                report = next((r for r in reports if not r.ok), reports[-1])
            else:
                report = target.verify()
            where = turnlog.stores.hide_credentials(target.store.location)
    finally:
        if remove and directory is not None:
            _remove_store(directory, existed)
    if args.json:
        _emit(
            {
                "target": where,
                "sessions": copied.sessions,
                "events": copied.events,
                "blobs": copied.blobs,
                "cached": copied.cached,
                "ok": report.ok,
                "problem": _problem_json(report.problem),
            },
            sys.stdout,
        )
    else:
        print(
            f"copied {_plural(copied.sessions, 'session')}, {_plural(copied.events, 'event')}"
            f", {_plural(copied.blobs, 'blob')} and {_plural(copied.cached, 'cached count')} "
            f"to {where}"
        )
        print("verify: ok" if report.ok else f"verify: FAILED: {report.problem}")
    return EXIT_OK if report.ok else EXIT_FAILED


@VERBS.verb(
    "checkpoint",
    "write a checkpoint (session, seq, hash, mac) of a session's head as JSON",
    session_arg(),
    arg(
        "--key-file",
        metavar="FILE",
        help="sign with HMAC-SHA256 under this key (the "
        "file's bytes, one trailing newline removed)",
    ),
    arg("-o", "--output", metavar="FILE", help="write to FILE instead of stdout"),
)
def _cmd_checkpoint(args: argparse.Namespace) -> int:
    key = _read_key(args.key_file)
    with _open(args) as log:
        cp = log.checkpoint(args.session, key=key)
    text = json.dumps({"session": cp.session, "seq": cp.seq, "hash": cp.hash, "mac": cp.mac})
    _write_output(args.output, (text + "\n").encode())
    if args.output is not None:
        print(
            f"wrote checkpoint {cp.session}#{cp.seq} ({cp.hash[:16]}"
            f"{', signed' if cp.mac else ''}) to {args.output}",
            file=sys.stderr,
        )
    return EXIT_OK


@VERBS.verb(
    "export",
    "write a session as JSON lines, one event a line, hashes included",
    session_arg(),
    arg(
        "--complete",
        action="store_true",
        help="a backup `turnlog import` reads back "
        "with every hash: also the sessions a fork continues (first) and the blobs the "
        "events refer to",
    ),
    arg("-o", "--output", metavar="FILE", help="write to FILE instead of stdout"),
    prints=False,
)
def _cmd_export(args: argparse.Namespace) -> int:
    with _open(args) as log, log.snapshot() as snap:
        lines: Iterable[bytes] = (
            turnlog.log.export_events(log, args.session)
            if args.complete
            else (event_to_json(event) + b"\n" for event in snap.iter(args.session))
        )
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
    print(
        f"exported {_plural(count, 'event')}{' with their blobs' if args.complete else ''} of "
        f"{args.session!r} to {args.output}",
        file=sys.stderr,
    )
    return EXIT_OK


def _find_blob(log: turnlog.Log, prefix: str) -> str:
    digest = prefix.lower()
    if not digest or any(c not in "0123456789abcdef" for c in digest) or len(digest) > 64:
        raise _UsageError(
            f"blob hash must be hex (a full 64-digit hash or a prefix of at "
            f"least 8 digits), found {prefix!r}"
        )
    if len(digest) == 64:
        return digest
    if len(digest) < 8:
        raise _UsageError(f"blob hash prefix {prefix!r} is too short; give at least 8 hex digits")
    with log.store.read() as txn:
        found = [d for d, _ in txn.blobs() if d.startswith(digest)]
    if not found:
        raise turnlog.errors.BlobNotFoundError(f"no blob starting with {prefix!r} in this log")
    if len(found) > 1:
        raise _UsageError(
            f"blob prefix {prefix!r} is ambiguous ({len(found)} blobs); give more digits"
        )
    return found[0]


@VERBS.verb(
    "blob",
    "write a blob's raw bytes",
    arg(
        "hash", metavar="HASH", help="the blob's hash, or a unique prefix of at least 8 hex digits"
    ),
    arg("-o", "--output", metavar="FILE", help="write to FILE instead of stdout"),
    prints=False,
)
def _cmd_blob(args: argparse.Namespace) -> int:
    with _open(args) as log:
        data = log.blob(_find_blob(log, args.hash))
    _write_output(args.output, data)
    return EXIT_OK


def _exact_session(log: turnlog.Log, session: str) -> None:
    """Refuse a SESSION of ``erase`` that is not a session's whole id, naming the ids it
    begins: erasing cannot be undone, so its id is never completed from a prefix as the
    reading verbs complete theirs.

    Raises:
        UnknownSessionError: no session has that id.
    """
    if log.head(session) is not None:
        return
    begun = [h.session for h in log.sessions() if h.session.startswith(session)]
    if not begun:
        return  # Log.erase names the missing session
    shown = " or ".join(repr(one) for one in begun[:3])
    more = f" ({len(begun):,} sessions begin with it)" if len(begun) > 3 else ""
    raise turnlog.errors.UnknownSessionError(
        f"no session {session!r} to erase: erase takes a session's whole id, never a "
        f"prefix, as erasing cannot be undone; did you mean {shown}{more}? Pass the whole "
        "id (`turnlog sessions` lists them)"
    )


@VERBS.verb(
    "erase",
    "erase the content of events (a whole session without SEQ), keeping the "
    "chain verifiable; see docs/erasure.md",
    arg(
        "session",
        metavar="SESSION",
        nargs="?",
        default=None,
        help="the session (its exact id); optional with --older-than",
    ),
    arg(
        "seqs",
        metavar="SEQ",
        type=_nonneg_seq,
        nargs="*",
        help="the events to erase (default: every event that holds content)",
    ),
    arg(
        "--reason",
        required=True,
        metavar="TEXT",
        help="why (stored in the erasure event: say who asked, not what was erased)",
    ),
    arg(
        "--older-than",
        dest="older_than",
        type=float,
        default=None,
        metavar="DAYS",
        help="retention: erase every event whose time is more than DAYS days before "
        "now (this machine's clock, UTC) instead of naming events",
    ),
)
def _cmd_erase(args: argparse.Namespace) -> int:
    if not args.reason:
        raise _UsageError(
            "--reason must not be empty: say who asked (it is stored in the erasure event)"
        )
    if args.older_than is not None:
        if args.seqs:
            raise _UsageError("--older-than takes no SEQ: it erases by the events' times")
        if not math.isfinite(args.older_than) or args.older_than < 0:
            raise _UsageError(
                f"--older-than must be a number of days >= 0, found {args.older_than}"
            )
        # Event times are caller data (microseconds since the epoch, UTC): the cutoff
        # is now by this machine's clock, minus DAYS; no event time is below -2**63.
        days = min(args.older_than, 1e12)
        cutoff = max(int((time.time() - days * 86_400) * 1_000_000), -(2**63))
        with _open(args, write=True) as log:
            if args.session is not None:
                _exact_session(log, args.session)
            results = log.erase_older_than(
                cutoff,
                reason=args.reason,
                sessions=None if args.session is None else [args.session],
            )
    else:
        if args.session is None:
            raise _UsageError("name the SESSION to erase (or give --older-than DAYS)")
        with _open(args, write=True) as log:
            _exact_session(log, args.session)
            results = [log.erase(args.session, args.seqs or None, reason=args.reason)]
    if args.json:
        _emit({"erased": [msgspec.to_builtins(r) for r in results]}, sys.stdout)
        return EXIT_OK
    for r in results:
        if r.seq is None:
            print(
                f"{r.session}: nothing left to erase"
                + (f" ({len(r.already)} erased before)" if r.already else "")
            )
            continue
        # Events quoting the named ones (a compaction, a section) go with them.
        derived = sorted(set(r.seqs) - set(args.seqs)) if args.seqs else []
        print(
            f"{r.session}: erased {_plural(len(r.seqs), 'event')} and "
            f"{_plural(len(r.blobs), 'blob')} "
            f"(erasure event #{r.seq})"
            + (
                f"; {len(derived):,} of them ({', '.join(map(str, derived))}) derived from "
                f"the {'event' if len(set(args.seqs)) == 1 else 'events'} named"
                if derived
                else ""
            )
        )
        for f in r.followed:  # derived from them: a memory, a recall, a quoting section
            print(
                f"{f.session}: erased {_plural(len(f.seqs), 'derived event')} and "
                f"{_plural(len(f.blobs), 'blob')} (erasure event #{f.seq})"
            )
    if not results:
        print("nothing to erase")
    return EXIT_OK

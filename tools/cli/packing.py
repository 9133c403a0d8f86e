"""Verbs on prompts: ``pack``, ``explain``, ``replay``, ``diff``, ``cost``, ``compact``."""

from __future__ import annotations

import argparse
import json
import sys

import msgspec
import turnlog
from turnlog import Compactor, Packer, Replayer
from turnlog.adapters.providers import (
    CACHE_RULES,
    PROVIDERS,
    RenderError,
    derived_tool_names,
    render_args,
    renderer,
    renderer_for,
)
from turnlog.packing import Packed
from turnlog.replay import ReplayResult, RequestCost, SessionCost

from ..summary import head
from ..terminal import cell, print_table, visible
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    POLICY_OPTIONS,
    _emit,
    _open,
    _out,
    _packed_json,
    _plural,
    _policy_arg,
    _positive,
    _request_seq,
    _requests_erased,
    _say,
    _seq,
    _session_model,
    _UsageError,
    _write_stdout_bytes,
)
from ._verbs import Verbs, arg, session_arg

VERBS = Verbs()


@VERBS.verb(
    "pack",
    "pack a session's prompt (optionally record it as a request)",
    session_arg(),
    *POLICY_OPTIONS,
    arg("--record", action="store_true", help="append the request record"),
    arg(
        "--format",
        default="neutral",
        choices=["neutral", *sorted(PROVIDERS)],
        help="print the provider request body exactly as it would be sent, as JSON "
        "(default: the neutral prompt and its accounting)",
    ),
    arg(
        "--model",
        default="",
        metavar="NAME",
        help="model name put in the request body and record "
        "(default with --format: the session's most recent model, named by a recorded "
        "request or an assistant message)",
    ),
    arg(
        "--max-tokens",
        type=_positive,
        default=None,
        metavar="N",
        help="max output tokens in the request body (default: the policy's output reserve)",
    ),
)
def _cmd_pack(args: argparse.Namespace) -> int:
    _policy_arg(args)  # a bad --policy or --agent is refused before the store is opened
    with _open(args, write=args.record) as log:
        packer = Packer(log)
        request_seq = None
        render = None
        max_tokens: int | None = None
        model = args.model
        before = packer.policy_in_force(args.session)
        policy = _policy_arg(args, before)
        # The reserve the prompt is packed to leave for the reply (as packing resolves it).
        reserve = (policy or before or turnlog.Policy()).resolved().output_reserve
        if args.max_tokens is not None and args.max_tokens > reserve:
            raise _UsageError(
                f"--max-tokens {args.max_tokens:,} is above the policy's output reserve "
                f"({reserve:,} tokens): the prompt is packed to leave {reserve:,} tokens of the "
                f"window for the reply, so a longer reply may not fit. Pass --max-tokens "
                f"{reserve:,} or less, or raise output_reserve (in a --policy file)"
            )
        if args.format != "neutral":
            max_tokens = args.max_tokens if args.max_tokens is not None else reserve
            if log.head(args.session) is None:
                raise turnlog.errors.UnknownSessionError(
                    f"no session {args.session!r} in this log; "
                    "list sessions with `turnlog sessions`"
                )
            model = model or _session_model(log, args.session)
            if not model:
                raise _UsageError(
                    f"--format {args.format} needs a model name for the request "
                    f"body: pass --model NAME ({args.session!r} has no recorded "
                    "request, response or assistant message naming one)"
                )
            render = renderer(args.format, model=model, max_tokens=max_tokens, blobs=log.blob)
        if args.record:
            recorded = Replayer(packer).record(
                args.session,
                policy=policy,
                model=model,
                format=args.format,
                render=render,
                render_args=render_args(max_tokens=max_tokens),
            )
            packed, request_seq = recorded.packed, recorded.request_seq
            after = packer.policy_in_force(args.session)
            changes = _policy_changes(before, after)
        else:
            packed = packer.pack(args.session, policy=policy)
            changes = []
        body = render(packed.prompt) if render is not None else b""
    if changes:
        # On stderr: stdout carries the prompt, the body or the JSON document.
        print(_policy_change_note(args.session, before, changes), file=sys.stderr)
    if render is not None:
        # The request body exactly as it would be sent (the bytes the record hashes);
        # indented on a terminal, where nobody pipes the bytes anywhere.
        _write_stdout_bytes(_pretty(body) + b"\n" if sys.stdout.isatty() else body + b"\n")
        if request_seq is not None:
            print(f"recorded as {args.session}#{request_seq}", file=sys.stderr)
        return EXIT_OK
    if args.json:
        out = _packed_json(packed, request_seq=request_seq)
        if request_seq is not None:
            out["policy_changes"] = [
                {"field": name, "from": old, "to": new} for name, old, new in changes
            ]
        _emit(out, sys.stdout)
        return EXIT_OK
    _print_packed(packed)
    if request_seq is not None:
        print(f"recorded as {args.session}#{request_seq}")
    return EXIT_OK


def _policy_changes(
    before: turnlog.Policy | None, after: turnlog.Policy | None
) -> list[tuple[str, object, object]]:
    """The fields a recorded ``PolicySet`` changed, in the policy's field order, as
    (field, from, to); none when the policy in force stayed the same."""
    if after is None or (before is not None and before.hash == after.hash):
        return []
    old = msgspec.to_builtins(
        before if before is not None else turnlog.Policy(), order="deterministic"
    )
    new = msgspec.to_builtins(after, order="deterministic")
    fields = turnlog.Policy.__struct_fields__
    return [
        (name, old.get(name, _default(name)), new.get(name, _default(name)))
        for name in fields
        if old.get(name, _default(name)) != new.get(name, _default(name))
    ]


def _default(name: str) -> object:
    return msgspec.to_builtins(getattr(turnlog.Policy(), name))


def _policy_change_note(
    session: str, before: turnlog.Policy | None, changes: list[tuple[str, object, object]]
) -> str:
    what = "; ".join(
        f"{name} {_shown(old, name)} -> {_shown(new, name)}" for name, old, new in changes
    )
    start = (
        f"the session's policy changed ({_plural(len(changes), 'field')}): "
        if before is not None
        else f"the session had no policy; it now has one ({_plural(len(changes), 'field')} "
        "other than the defaults): "
    )
    return (
        start + what + f". Later requests of {session!r} are packed under it; "
        "pass --policy FILE (or --budget) again to change it"
    )


def _shown(value: object, name: str = "") -> str:
    if name == "rules" and value == 0:
        return "unset"
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "unset"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list | dict):
        return (
            json.dumps(value, sort_keys=True)
            if len(json.dumps(value)) <= 60
            else f"({len(value)} entries, changed)"
        )
    return str(value)


def _pretty(body: bytes) -> bytes:
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False).encode()
    except (ValueError, RecursionError):
        return body


def _print_packed(packed: Packed) -> None:
    b = packed.budget
    print(
        f"{packed.tokens:,} tokens of {b.usable:,} usable (window {b.window:,}, reserve "
        f"{b.output_reserve:,}); pressure {packed.pressure_before:.3f} -> "
        f"{packed.pressure:.3f}; compaction due: {'yes' if packed.compaction_due else 'no'}"
        + ("; recovery pack" if packed.recovery else "")
    )
    _print_stages(packed)
    rows: list[list[object]] = [
        ["system", section.name, f"{tokens:,}", ""]
        for section, tokens in zip(packed.prompt.system, packed.section_tokens, strict=True)
    ]
    for i, (message, tokens) in enumerate(
        zip(packed.prompt.messages, packed.message_tokens, strict=True)
    ):
        calls = ", ".join(c.name for c in message.tool_calls)
        text = head(message.text, 60) if message.text else f"[{calls}]" if calls else ""
        rows.append([i, message.role, f"{tokens:,}", text])
    print_table(
        _out(), [("#", "right"), ("ROLE", "left"), ("TOKENS", "right"), ("TEXT", "left")], rows
    )


def _print_stages(packed: Packed) -> None:
    print_table(
        _out(),
        [("STAGE", "left"), ("", "left"), ("DETAIL", "left")],
        (
            [stage.name, cell("fired", "yellow") if stage.fired else "-", stage.detail]
            for stage in packed.stages
        ),
    )


@VERBS.verb(
    "explain",
    "show the decision for every event of a recorded request",
    session_arg(),
    arg("request_seq", metavar="REQ_SEQ", type=_seq),
)
def _cmd_explain(args: argparse.Namespace) -> int:
    with _open(args) as log:
        replayer = Replayer(Packer(log))
        seq = _request_seq(log, replayer, args.session, args.request_seq)
        packed = replayer.explain(args.session, seq)
        request = log.get(args.session, seq).body
        fmt = request.format if isinstance(request, turnlog.events.RequestIssued) else ""
        derived = (
            derived_tool_names(request, packed.prompt)
            if isinstance(request, turnlog.events.RequestIssued)
            else ()
        )
    if args.json:
        out = _packed_json(packed)
        out["derived_tools"] = list(derived)
        out["decisions"] = [msgspec.to_builtins(d) for d in packed.decisions]
        _emit(out, sys.stdout)
        return EXIT_OK
    _print_packed_header(packed)
    if derived:
        print(
            f"tools: {_plural(len(derived), 'definition')} derived for the "
            f"{fmt} body from the calls in the history (no tools recorded; "
            f"each a permissive schema): {', '.join(visible(n) for n in derived)}"
        )
    styles = {
        "verbatim": "green",
        "trimmed": "red",
        "dropped": "red",
        "pruned": "yellow",
        "truncated": "yellow",
        "deduplicated": "yellow",
        "summarized": "cyan",
    }
    print_table(
        _out(),
        [
            ("SEQ", "right"),
            ("KIND", "left"),
            ("DECISION", "left"),
            ("TOKENS", "right"),
            ("RULE", "left"),
        ],
        (
            [
                d.seq,
                d.kind,
                cell(d.decision, styles.get(d.decision, "")),
                f"{d.original_tokens:,} -> {d.tokens:,}" if d.original_tokens else "",
                d.rule + (f": {d.detail}" if d.detail else ""),
            ]
            for d in packed.decisions
        ),
    )
    return EXIT_OK


def _print_packed_header(packed: Packed) -> None:
    b = packed.budget
    print(
        f"{packed.tokens:,} tokens of {b.usable:,} usable; pressure "
        f"{packed.pressure_before:.3f} -> {packed.pressure:.3f}; tokenizer "
        f"{packed.tokenizer}; policy {packed.policy_hash[:16]}"
    )
    _print_stages(packed)


@VERBS.verb(
    "replay",
    "re-pack recorded requests; exit 1 if any differs",
    session_arg(),
    arg("request_seq", metavar="REQ_SEQ", type=_seq, nargs="?", default=None),
    arg(
        "--all",
        action="store_true",
        help="every request of the session (the default without REQ_SEQ)",
    ),
)
def _cmd_replay(args: argparse.Namespace) -> int:
    if args.all and args.request_seq is not None:
        raise _UsageError(
            f"give REQ_SEQ ({args.request_seq}) or --all, not both: REQ_SEQ replays that "
            "request, --all (or neither) every request of the session"
        )
    with _open(args) as log:
        replayer = Replayer(Packer(log))
        seqs = (
            replayer.requests(args.session)
            if args.all or args.request_seq is None
            else [_request_seq(log, replayer, args.session, args.request_seq)]
        )
        if not seqs and log.head(args.session) is None:
            raise turnlog.errors.UnknownSessionError(
                f"no session {args.session!r} in this log; list sessions with `turnlog sessions`"
            )
        results = []
        for seq in seqs:
            request = log.get(args.session, seq).body
            try:
                render = (
                    renderer_for(request, blobs=log.blob)
                    if isinstance(request, turnlog.events.RequestIssued)
                    else None
                )
                results.append(replayer.replay(args.session, seq, render=render))
            except RenderError as exc:
                results.append(
                    ReplayResult(
                        args.session,
                        seq,
                        False,
                        "",
                        "",
                        f"cannot render the recorded format: {exc}",
                    )
                )
        records_erased = "" if results else _requests_erased(log, args.session)
    # A request that held erased content cannot be reproduced, by design: it is
    # reported as erased (at its erasure event), not as a mismatch.
    ok = all(r.ok or r.erased_by is not None for r in results)
    if args.json:
        _emit({"ok": ok, "requests": [msgspec.to_builtins(r) for r in results]}, sys.stdout)
    elif not results:
        print(
            f"{args.session}: no recorded requests to replay: {records_erased}"
            if records_erased
            else f"{args.session}: no recorded requests to replay (a request is recorded by "
            f"`turnlog pack {args.session} --record`, or by the Session facade in Python)"
        )
    else:
        for r in results:
            _say(
                f"{r.session}#{r.request_seq}: "
                + (
                    "identical"
                    if r.ok
                    else f"ERASED: {r.difference}"
                    if r.erased_by is not None
                    else f"DIFFERS: {r.difference}"
                ),
                "" if r.ok or r.erased_by is not None else "bold red",
            )
        erased = sum(r.erased_by is not None for r in results)
        _say(
            f"{sum(r.ok for r in results)} of {_plural(len(results), 'request')} reproduced "
            "byte for byte" + (f", {erased} held erased content" if erased else ""),
            "green" if ok else "bold red",
        )
    return EXIT_OK if ok else EXIT_FAILED


@VERBS.verb(
    "diff",
    "compare two recorded requests: shared prefix, changed decisions",
    session_arg(),
    arg("request_a", metavar="REQ_A", type=_seq),
    arg("request_b", metavar="REQ_B", type=_seq),
)
def _cmd_diff(args: argparse.Namespace) -> int:
    with _open(args) as log:
        replayer = Replayer(Packer(log))
        diff = replayer.diff(
            args.session,
            _request_seq(log, replayer, args.session, args.request_a),
            _request_seq(log, replayer, args.session, args.request_b),
        )
    if args.json:
        _emit(msgspec.to_builtins(diff), sys.stdout)
        return EXIT_OK
    print(
        f"#{diff.request_a}: {_plural(diff.tokens_a, 'token')}; #{diff.request_b}: "
        f"{_plural(diff.tokens_b, 'token')}"
    )
    print(
        f"shared prefix: {_plural(diff.shared_messages, 'message')}, "
        f"{_plural(diff.shared_tokens, 'token')} (system "
        f"{'changed' if diff.system_changed else 'same'}, tools "
        f"{'changed' if diff.tools_changed else 'same'})"
    )
    if not diff.changes:
        print("no decision changed")
        return EXIT_OK
    print_table(
        _out(),
        [
            ("SEQ", "right"),
            ("KIND", "left"),
            ("BEFORE", "left"),
            ("AFTER", "left"),
            ("RULE", "left"),
        ],
        (
            [c.seq, c.kind, c.before, c.after, c.rule + (f": {c.detail}" if c.detail else "")]
            for c in diff.changes
        ),
    )
    return EXIT_OK


@VERBS.verb(
    "cost",
    "what a session's recorded requests cost: input, cache-write and "
    "cache-read tokens and their price, beside the usage the provider reported",
    session_arg(),
)
def _cmd_cost(args: argparse.Namespace) -> int:
    with _open(args) as log:
        cost = Replayer(Packer(log)).cost(args.session, caching=CACHE_RULES)
        erased = "" if cost.requests or args.json else _requests_erased(log, args.session)
    if args.json:
        _emit(_cost_json(cost), sys.stdout)
        return EXIT_OK
    if not cost.requests:
        print(
            f"{args.session}: no recorded requests to price: {erased}"
            if erased
            else f"{args.session}: no recorded requests to price (a request is recorded by "
            f"`turnlog pack {args.session} --record`, or by the Session facade in Python)"
        )
        return EXIT_OK
    print_table(
        _out(),
        [
            ("REQ", "right"),
            ("FORMAT", "left"),
            ("TOKENS", "right"),
            ("INPUT", "right"),
            ("CACHE WRITE", "right"),
            ("CACHE READ", "right"),
            ("PRICE", "right"),
            ("REPORTED IN/WRITE/READ", "right"),
            ("REPORTED PRICE", "right"),
        ],
        (_cost_row(row) for row in cost.requests),
    )
    t = cost.total
    print(
        f"total: {_plural(t.requests, 'request')}, {t.tokens:,} tokens: {t.input_tokens:,} "
        f"input, {t.cache_write_tokens:,} cache write, {t.cache_read_tokens:,} cache read "
        f"(cached share {t.cached_share:.2f}); {_dollars(t.price)}"
    )
    if t.reported_requests:
        u = t.reported
        print(
            f"reported by the provider for {_plural(t.reported_requests, 'request')}: "
            f"{u.input_tokens:,} input tokens ({u.cache_write_tokens:,} cache write, "
            f"{u.cache_read_tokens:,} cache read), {u.output_tokens:,} output; "
            f"{_dollars(t.reported_price)} for the input"
        )
    else:
        print(
            "no response recorded the provider's usage for "
            + ("this request" if len(cost.requests) == 1 else "these requests")
        )
    for row in cost.requests:
        if row.note:
            _say(f"#{row.request_seq}: not estimated: {row.note}", "yellow")
    return EXIT_OK


def _dollars(price: float) -> str:
    return f"${price:,.4f}"


def _cost_row(row: RequestCost) -> list[object]:
    estimated = not row.note
    reported = row.reported
    return [
        row.request_seq,
        row.format,
        f"{row.tokens:,}" if estimated else "-",
        f"{row.input_tokens:,}" if estimated else "-",
        f"{row.cache_write_tokens:,}" if estimated else "-",
        f"{row.cache_read_tokens:,}" if estimated else "-",
        _dollars(row.price) if estimated else "-",
        f"{reported.input_tokens:,}/{reported.cache_write_tokens:,}/{reported.cache_read_tokens:,}"
        if reported is not None
        else "-",
        _dollars(row.reported_price) if row.reported_price is not None else "-",
    ]


def _cost_json(cost: SessionCost) -> dict[str, object]:
    """The stable ``cost --json`` document (docs/cli.md): every key always present."""

    def usage(u: turnlog.events.Usage | None) -> dict[str, int] | None:
        if u is None:
            return None
        return {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_write_tokens": u.cache_write_tokens,
            "cache_read_tokens": u.cache_read_tokens,
            "reasoning_tokens": u.reasoning_tokens,
        }

    t = cost.total
    return {
        "session": cost.session,
        "requests": [
            {
                "request_seq": r.request_seq,
                "format": r.format,
                "model": r.model,
                "estimated": not r.note,
                "note": r.note,
                "tokens": r.tokens,
                "input_tokens": r.input_tokens,
                "cache_write_tokens": r.cache_write_tokens,
                "cache_read_tokens": r.cache_read_tokens,
                "price": r.price,
                "prices": dict(r.prices),
                "reported": usage(r.reported),
                "reported_price": r.reported_price,
            }
            for r in cost.requests
        ],
        "total": {
            "requests": t.requests,
            "tokens": t.tokens,
            "input_tokens": t.input_tokens,
            "cache_write_tokens": t.cache_write_tokens,
            "cache_read_tokens": t.cache_read_tokens,
            "price": t.price,
            "cached_share": t.cached_share,
            "reported_requests": t.reported_requests,
            "reported": usage(t.reported),
            "reported_price": t.reported_price,
        },
    }


@VERBS.verb(
    "compact",
    "compact a session now (appends the compaction events)",
    session_arg(),
    *POLICY_OPTIONS,
    arg(
        "--summarizer",
        default=None,
        metavar="NAME",
        help="the summarizer (default: extractive, offline)",
    ),
)
def _cmd_compact(args: argparse.Namespace) -> int:
    _policy_arg(args)  # a bad --policy or --agent is refused before the store is opened
    with _open(args, write=True) as log:
        packer = Packer(log)
        policy = _policy_arg(args, packer.policy_in_force(args.session))
        summarizer = None
        if args.summarizer not in (None, "extractive"):
            raise _UsageError(
                f"unknown summarizer {args.summarizer!r}; built in: extractive "
                "(model summarizers are used from Python, see docs/packing.md)"
            )
        outcome = Compactor(log, packer, summarizer=summarizer).compact(
            args.session, policy=policy, reason="manual"
        )
    if args.json:
        _emit(msgspec.to_builtins(outcome), sys.stdout)
    else:
        _say(
            f"{outcome.status}: {outcome.reason}"
            + (f": {outcome.detail}" if outcome.detail else ""),
            {"committed": "green", "failed": "bold red"}.get(outcome.status, "yellow"),
        )
        if outcome.seqs:
            print(
                f"events appended: {', '.join(f'#{s}' for s in outcome.seqs)}; next prompt "
                f"{outcome.next_tokens:,} tokens ({'fits' if outcome.fits else 'OVER BUDGET'})"
            )
    return EXIT_OK if outcome.status != "failed" else EXIT_FAILED

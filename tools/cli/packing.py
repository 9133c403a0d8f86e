"""Verbs on prompts: ``pack``, ``explain``, ``replay``, ``diff``, ``compact``."""

from __future__ import annotations

import argparse
import json
import sys

import msgspec
import turnlog
from turnlog import Compactor, Packer, Replayer
from turnlog.adapters.providers import (
    PROVIDERS,
    RenderError,
    derived_tool_names,
    render_args,
    renderer,
    renderer_for,
)
from turnlog.packing import Packed
from turnlog.replay import ReplayResult

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
    _say,
    _session_model,
    _UsageError,
    _write_stdout_bytes,
)
from ._verbs import Verbs, arg, session_arg

VERBS = Verbs()


@VERBS.verb("pack", "pack a session's prompt (optionally record it as a request)",
            session_arg(),
            *POLICY_OPTIONS,
            arg("--record", action="store_true", help="append the request record"),
            arg("--format", default="neutral", choices=["neutral", *sorted(PROVIDERS)],
                help="print the provider request body exactly as it would be sent, as JSON "
                     "(default: the neutral prompt and its accounting)"),
            arg("--model", default="", help="model name put in the request body and record "
                "(default with --format: the session's most recent model, named by a recorded "
                "request or an assistant message)"),
            arg("--max-tokens", type=_positive, default=None, metavar="N",
                help="max output tokens in the request body (default: the policy's output "
                     "reserve)"))
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


@VERBS.verb("explain", "show the decision for every event of a recorded request",
            session_arg(),
            arg("request_seq", metavar="REQ_SEQ", type=int))
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


@VERBS.verb("replay", "re-pack recorded requests; exit 1 if any differs",
            session_arg(),
            arg("request_seq", metavar="REQ_SEQ", type=int, nargs="?", default=None),
            arg("--all", action="store_true", help="every request of the session (the default "
                "without REQ_SEQ)"))
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
    # A request that held erased content cannot be reproduced, by design: it is
    # reported as erased (at its erasure event), not as a mismatch.
    ok = all(r.ok or r.erased_by is not None for r in results)
    if args.json:
        _emit({"ok": ok, "requests": [msgspec.to_builtins(r) for r in results]}, sys.stdout)
    else:
        for r in results:
            _say(f"{r.session}#{r.request_seq}: "
                 + ("identical" if r.ok else f"ERASED: {r.difference}"
                    if r.erased_by is not None else f"DIFFERS: {r.difference}"),
                 "" if r.ok or r.erased_by is not None else "bold red")
        erased = sum(r.erased_by is not None for r in results)
        _say(f"{sum(r.ok for r in results)} of {_plural(len(results), 'request')} reproduced "
             "byte for byte" + (f", {erased} held erased content" if erased else ""),
             "green" if ok else "bold red")
    return EXIT_OK if ok else EXIT_FAILED


@VERBS.verb("diff", "compare two recorded requests: shared prefix, changed decisions",
            session_arg(),
            arg("request_a", metavar="REQ_A", type=int),
            arg("request_b", metavar="REQ_B", type=int))
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


@VERBS.verb("compact", "compact a session now (appends the compaction events)",
            session_arg(),
            *POLICY_OPTIONS,
            arg("--summarizer", default=None, metavar="NAME",
                help="the summarizer (default: extractive, offline)"))
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

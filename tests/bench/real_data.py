"""The real-data check: every corpus transcript, imported, packed, rendered, replayed.

    python -m tests.bench.real_data [--corpus DIR] [--markdown] [--sample]

For every file of the shared transcript corpus: import it into a fresh LMDB
store (idempotently: a second import must append nothing), then for each window
(4k, 8k, 16k, 32k, 128k) and each format (neutral, OpenAI Chat, OpenAI
Responses, Anthropic) record a request for the main session with the default
policy (packing rules 2), check every packing invariant of ``turnlog.testing``
and the rendered body against the official SDK's request type and what the
provider's API refuses (`REFUSALS`: Anthropic's rules, `anthropic_problems`), and finally
replay every request, neutral prompt and rendered body both. A refusal
(`BudgetExceededError`) counts as *refused below the floor* when
``check_overflow`` confirms that the floor alone does not fit; anything else
that goes wrong (a checker, the SDK type, an unjustified refusal, a replay that
differs) counts as *invalid*. Prints one row per file and one per window;
exits 1 when anything is invalid or a window of 8k or more refuses a pack.
``--sample`` runs the representative part the default test run checks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import turnlog
from turnlog import Packer, Policy, Replayer
from turnlog.adapters.importers import import_file
from turnlog.adapters.providers import (
    PROVIDERS,
    RenderError,
    render_args,
    renderer,
    renderer_for,
)
from turnlog.adapters.providers.fakeserver import anthropic_problems
from turnlog.errors import BudgetExceededError
from turnlog.testing import check_overflow, check_packed

from tests.sdkcheck import check

#: The shared transcript corpus: $TURNLOG_CORPUS, else ../shared/corpus beside the repository.
CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
)
# window -> output reserve
WINDOWS = {4_000: 500, 8_000: 1_000, 16_000: 2_000, 32_000: 4_000, 128_000: 16_000}
FORMATS = ("neutral", *sorted(PROVIDERS))
#: What each provider's API refuses in a body, beyond its SDK's request type (the rules
#: the fake server enforces too).
REFUSALS = {"anthropic": anthropic_problems}
#: The files of ``--sample`` (and of the default test run): one hard case per importer,
#: by name: two compactions and abandoned calls, freeform calls, reused call ids.
SAMPLE = (
    "3af9b1a7-6512-4883-ad18-320658ced099.jsonl",
    "agent-a00ad96.jsonl",
    "rollout-2025-09-29T13-09-19-01999469-65fd-7fa2-ab93-d24bb4c714cb.jsonl",
    "django__django-16255.traj.json",
    "basic.json",
    "katy.traj",
    "humanevalfix-python-0.traj",
)


def sdk_types() -> dict[str, object]:
    """The official SDKs' request types by format."""
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
    from openai.types.responses.response_create_params import (
        ResponseCreateParamsNonStreaming,
    )

    return {
        "anthropic": MessageCreateParamsNonStreaming,
        "openai-chat": CompletionCreateParamsNonStreaming,
        "openai-responses": ResponseCreateParamsNonStreaming,
    }


def policy_for(window: int, rules: int = 0, fields: dict[str, Any] | None = None) -> Policy:
    """The default policy at a window, output reserve scaled (``rules`` 0: the newest),
    with ``fields`` set besides."""
    return Policy(
        context_window=window, output_reserve=WINDOWS[window], rules=rules, **(fields or {})
    )


def check_file(
    path: Path, root: Path, rules: int = 0, fields: dict[str, Any] | None = None
) -> dict[str, object]:
    """Import, pack at every window in every format, record, replay; return the row."""
    with turnlog.open(root / "store") as log:
        started = time.perf_counter()
        summary = import_file(log, path, skip_bad=True)
        imported = time.perf_counter() - started
        again = import_file(log, path, skip_bad=True)
        assert again.appended == 0, f"{path}: a second import appended {again.appended}"
        session = (
            max(summary.sessions, key=lambda s: (log.head(s).seq, s)) if summary.sessions else ""
        )
        row: dict[str, object] = {
            "file": path.name,
            "format": summary.format,
            "events": summary.events,
            "tokens": 0,
            "import_s": imported,
            "packs": 0,
            "pack_ms": 0.0,
            "requests": 0,
            "identical": 0,
            "refused": 0,
            "invalid": 0,
            "problems": [],
        }
        for window in WINDOWS:
            row[f"packs@{window}"] = row[f"refused@{window}"] = row[f"invalid@{window}"] = 0
        if not session:
            return row
        packer = Packer(log)
        replayer = Replayer(packer)
        pack_seconds = 0.0
        types = sdk_types()
        problems: list[str] = row["problems"]  # type: ignore[assignment]

        def count(name: str, window: int) -> None:
            row[name] = int(str(row[name])) + 1
            row[f"{name}@{window}"] = int(str(row[f"{name}@{window}"])) + 1

        for window in WINDOWS:
            policy = policy_for(window, rules, fields)
            for fmt in FORMATS:
                render = (
                    None
                    if fmt == "neutral"
                    else renderer(
                        fmt, model="check-model", max_tokens=policy.output_reserve, blobs=log.blob
                    )
                )
                started = time.perf_counter()
                try:
                    recorded = replayer.record(
                        session,
                        policy=policy,
                        model="check-model",
                        format=fmt,
                        render=render,
                        render_args=render_args(max_tokens=policy.output_reserve)
                        if render is not None
                        else "",
                    )
                except RenderError as exc:  # only under rules 1: reused call ids
                    count("invalid", window)
                    problems.append(f"{window} {fmt}: {exc}")
                    continue
                except BudgetExceededError as exc:
                    view = packer.projection(session, packer.counter_for(policy))
                    try:
                        check_overflow(view, policy, exc)
                    except AssertionError as bad:
                        count("invalid", window)
                        problems.append(f"{window} {fmt}: unjustified refusal: {bad}")
                    else:
                        count("refused", window)
                    continue
                pack_seconds += time.perf_counter() - started
                count("packs", window)
                # The invariants are checked on the history the request was packed from.
                record = log.get(session, recorded.request_seq).body
                assert isinstance(record, turnlog.events.RequestIssued)
                view = packer.projection_at(session, record.head_seq, packer.counter_for(policy))
                packed = recorded.packed
                assert view.head == packed.head
                try:
                    check_packed(view, packed, policy)
                    if render is not None:
                        body = json.loads(recorded.rendered)
                        check(body, types[fmt])
                        refused = REFUSALS.get(fmt, lambda _: [])(body)
                        assert not refused, f"the API refuses the body: {refused[:3]}"
                except AssertionError as bad:
                    count("invalid", window)
                    problems.append(f"{window} {fmt}: {str(bad)[:300]}")
        view = packer.projection(session, packer.counter_for(policy_for(128_000)))
        row["tokens"] = (
            sum(it.tokens for it in view.items)
            + sum(view.section_tokens.values())
            + view.tools_tokens
        )
        seqs = replayer.requests(session)
        row["requests"] = len(seqs)
        for seq in seqs:
            request = log.get(session, seq).body
            assert isinstance(request, turnlog.events.RequestIssued)
            render_back = (
                renderer_for(request, blobs=log.blob) if request.format != "neutral" else None
            )
            if replayer.replay(session, seq, render=render_back).ok:
                row["identical"] = int(str(row["identical"])) + 1
            else:
                row["invalid"] = int(str(row["invalid"])) + 1
                problems.append(f"request #{seq} does not replay byte for byte")
        row["pack_ms"] = 1000 * pack_seconds / max(1, int(str(row["packs"])))
        assert log.verify().ok
        return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.real_data")
    parser.add_argument("--corpus", default=str(CORPUS), help="the corpus directory")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument(
        "--sample", action="store_true", help="only the representative files of SAMPLE"
    )
    parser.add_argument(
        "--rules",
        type=int,
        default=0,
        choices=(0, 1, 2),
        help="the packing rules (0: the newest; 1: turnlog 0.1.0's, to compare)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a policy field besides the window and reserve, VALUE read as JSON",
    )
    args = parser.parse_args(argv)
    fields = {k: json.loads(v) for k, _, v in (s.partition("=") for s in args.set)}
    files = sorted(
        p
        for p in Path(args.corpus).rglob("*")
        if p.is_file() and p.suffix in (".jsonl", ".json", ".traj") and p.stat().st_size > 0
    )
    if args.sample:
        files = [p for p in files if p.name in SAMPLE]
    rows = []
    for path in files:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(check_file(path, Path(tmp), args.rules, fields))
    header = (
        "file",
        "format",
        "events",
        "tokens",
        "import_s",
        "pack_ms",
        "packs",
        "refused",
        "invalid",
        "requests",
        "identical",
    )
    _table(
        header,
        [
            [
                f"{row[h]:.3f}"
                if h == "import_s"
                else f"{row[h]:.1f}"
                if h == "pack_ms"
                else str(row[h])
                for h in header
            ]
            for row in rows
        ],
        args.markdown,
    )
    print()
    by_window = [
        [
            f"{window // 1000}k",
            *(
                str(sum(int(str(r[f"{name}@{window}"])) for r in rows))
                for name in ("packs", "refused", "invalid")
            ),
        ]
        for window in WINDOWS
    ]
    _table(("window", "packs", "refused below the floor", "invalid"), by_window, args.markdown)
    for row in rows:
        for problem in row["problems"]:  # type: ignore[attr-defined]
            print(f"{row['file']}: {problem}", file=sys.stderr)
    total = sum(int(str(r["requests"])) for r in rows)
    same = sum(int(str(r["identical"])) for r in rows)
    invalid = sum(int(str(r["invalid"])) for r in rows)
    refused_large = sum(int(str(r[f"refused@{w}"])) for r in rows for w in WINDOWS if w >= 8_000)
    print(
        f"{len(rows)} files; {total} requests recorded, {same} replayed byte for byte "
        f"(neutral prompt and rendered body); invalid: {invalid}; refused at 8k or more: "
        f"{refused_large}",
        file=sys.stderr,
    )
    return 0 if total == same and not invalid and not refused_large else 1


def _table(header: tuple[str, ...], cells: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print("  ".join(header))
    for row in cells:
        print(("| " + " | ".join(row) + " |") if markdown else "  ".join(row))


if __name__ == "__main__":
    sys.exit(main())

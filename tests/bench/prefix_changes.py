"""Requests whose leading part changes: every one, with where and why.

    python -m tests.bench.prefix_changes [--corpus DIR] [--windows 8000,16000]
        [--formats neutral,anthropic] [--all]

Every corpus transcript's main session is grown event by event and packed before
every assistant message (as `tests.bench.cache_share` does). A request *changes
an earlier part* when the previous request is not a prefix of it: in the neutral
prompt, the tools, the system sections one by one, then the messages (the
previous request's messages must lead the current one's); in a provider format,
the rendered request body's fields other than its message list must be equal and
the previous body's messages must lead the current one's (cache breakpoints
left out: a marker says where the cache is written, not what it matches; Anthropic's
consecutive turns of one role read as one stream). Such a change is *reported* when
a stage report of the current pack begins with ``prefix break``, or the breakpoints
report says what the log changed since the previous request (or, in a format that
derives tool definitions from the calls, the tools first called).

Each unreported change is listed (``--all``: every change) as one JSON line: the
session, the request (its number and the lineage position it stands before), the
first differing part of both requests, and the stage reports of both packs.
Not collected by pytest; CI never runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from turnlog import Policy, pack
from turnlog._pack._assemble import DERIVED_TOOLS_BREAK, INPUT_BREAK
from turnlog._pack._index import PackIndex
from turnlog._pack._model import Packed
from turnlog._projection import Projection
from turnlog._prompt import Message, Prompt
from turnlog._tokens import TiktokenCounter
from turnlog.adapters.providers import render_body
from turnlog.adapters.providers._registry import provider
from turnlog.errors import BudgetExceededError
from turnlog.events import AssistantMessageAdded, Event

from .cache_share import CORPUS, WINDOWS, lineages

#: The formats compared: the neutral prompt and every provider's request body.
FORMATS = ("neutral", "openai-chat", "openai-responses", "anthropic")
#: The list of each format's body that a request appends to.
MESSAGE_FIELD = {"openai-chat": "messages", "openai-responses": "input", "anthropic": "messages"}


def requests(events: list[Event], policy: Policy) -> Iterator[tuple[int, int, Packed]]:
    """``(request number, lineage position it stands before, pack)`` of a session
    grown event by event, packed before every assistant message (a pack refused below
    the floor is left out)."""
    view = Projection(TiktokenCounter(policy.resolved().tokenizer))
    index = PackIndex()
    n = 0
    for pos, event in enumerate(events):
        if isinstance(event.body, AssistantMessageAdded) and view.units:
            try:
                packed = pack(view, policy, index=index)
            except BudgetExceededError:  # below the floor: no request made
                packed = None
            if packed is not None:
                yield n, pos, packed
            n += 1
        view.apply(event)


def neutral_difference(old: Prompt, new: Prompt) -> str | None:
    """Where ``new`` stops extending ``old`` (None: ``old`` leads ``new``)."""
    if old.tools != new.tools:
        return "tool schemas"
    if old.system != new.system:
        for i in range(max(len(old.system), len(new.system))):
            a = old.system[i] if i < len(old.system) else None
            b = new.system[i] if i < len(new.system) else None
            if a != b:
                return f"system section {i} ({describe_section(a)} -> {describe_section(b)})"
    for i, message in enumerate(old.messages):
        if i >= len(new.messages):
            return f"message {i} ({describe(message)} -> none)"
        if new.messages[i] != message:
            return f"message {i} ({describe(message)} -> {describe(new.messages[i])})"
    old_marks = [b for b in old.breakpoints if b.at != "message"]
    new_marks = [b for b in new.breakpoints if b.at != "message"]
    if old_marks != new_marks:
        return f"breakpoints {old_marks} -> {new_marks}"
    return None


def describe_section(section: Any) -> str:
    return "none" if section is None else f"{section.name}: {section.text[:60]!r}"


def describe(message: Message) -> str:
    text = " ".join(getattr(p, "text", type(p).__name__) for p in message.parts)
    return f"{message.role} from {list(message.source)}: {text[:70]!r}"


def body_difference(old: dict[str, Any], new: dict[str, Any], format: str) -> str | None:  # noqa: A002
    """Where the body ``new`` stops extending ``old`` (None: ``old`` leads ``new``)."""
    field = MESSAGE_FIELD[format]
    old, new = unmarked(old), unmarked(new)
    for key in sorted(set(old) | set(new)):
        if key != field and old.get(key) != new.get(key):
            return f"body field {key!r}"
    before, after = stream(old.get(field, []), format), stream(new.get(field, []), format)
    for i, item in enumerate(before):
        if i >= len(after):
            return f"{field}[{i}] (gone)"
        if after[i] != item:
            return f"{field}[{i}] ({json.dumps(item)[:90]} -> {json.dumps(after[i])[:90]})"
    return None


def unmarked(value: Any) -> Any:
    """``value`` without its ``cache_control`` markers: a marker says where the provider
    writes the cache, and is not part of the prefix it matches (the marker of the
    previous request's end moves on with every request)."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def stream(messages: list[Any], format: str) -> list[Any]:  # noqa: A002
    """The body's message list as the provider reads it. Anthropic combines consecutive
    turns of one role (the renderer does too, so a request that ends in an assistant
    message continues that turn in the next request): its messages are compared as one
    stream of ``(role, content block)``."""
    if format != "anthropic":
        return messages
    out: list[Any] = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        out.extend((message["role"], block) for block in content)
    return out


def render_body_of(packed: Packed, format: str) -> dict[str, Any]:  # noqa: A002
    return render_body(packed.prompt, format, model="m", max_tokens=1024)


def reported(packed: Packed, format: str = "neutral") -> bool:  # noqa: A002
    """Whether the pack reports a prefix break: a stage report opening with ``prefix
    break``, or the breakpoints report saying that the log changed what earlier requests
    held (or, in a format that derives tool definitions from the calls, that they
    change)."""
    if any(s.detail.startswith("prefix break") for s in packed.stages):
        return True
    said = next((s.detail for s in packed.stages if s.name == "breakpoints"), "")
    if INPUT_BREAK in said:  # the log changed what earlier requests held
        return True
    derives = format != "neutral" and provider(format).tools_required
    return derives and DERIVED_TOOLS_BREAK in said


def changes(
    events: list[Event], policy: Policy, formats: tuple[str, ...] = ("neutral",)
) -> Iterator[tuple[int, int, str, str, Packed, Packed]]:
    """``(request, position, format, difference, previous pack, pack)`` of every
    request that changes an earlier part of the one before it."""
    previous: Packed | None = None
    bodies: dict[str, dict[str, Any]] = {}
    for n, pos, packed in requests(events, policy):
        current = {f: render_body_of(packed, f) for f in formats if f != "neutral"}
        if previous is not None:
            for f in formats:
                diff = (
                    neutral_difference(previous.prompt, packed.prompt)
                    if f == "neutral"
                    else body_difference(bodies[f], current[f], f)
                )
                if diff is not None:
                    yield n, pos, f, diff, previous, packed
        previous, bodies = packed, current


def stages(packed: Packed) -> dict[str, str]:
    return {s.name: s.detail for s in packed.stages if s.fired or s.name in ("trim", "summaries")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--windows", default=",".join(str(w) for w in WINDOWS))
    parser.add_argument("--formats", default="neutral")
    parser.add_argument("--all", action="store_true", help="list reported changes too")
    args = parser.parse_args(argv)
    formats = tuple(args.formats.split(","))
    sessions = lineages(args.corpus, None)
    for window in (int(w) for w in args.windows.split(",")):
        policy = Policy(context_window=window)
        counts = {"window": window, "reported": 0, "unreported": 0}
        for name, events in sessions:
            for n, pos, f, diff, old, new in changes(events, policy, formats):
                key = "reported" if reported(new, f) else "unreported"
                counts[key] += 1
                if key == "unreported" or args.all:
                    line = {
                        "window": window,
                        "session": name,
                        "request": n,
                        "before": pos,
                        "format": f,
                        "first_difference": diff,
                        "reported": key == "reported",
                        "previous": stages(old),
                        "current": stages(new),
                    }
                    print(json.dumps(line), flush=True)
        print(json.dumps(counts), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

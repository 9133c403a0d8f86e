"""Reference counts of tool results, kept incrementally, match counting them directly.

A tool result's references (pruning priority) are the later assistant messages
that name its target file (by base name) or quote one of its first distinctive
lines; a message that does both counts once. The pruning stage's `PruneFacts`
keeps per-file mention counters instead of touching every earlier result a
message names; this checks it against a direct count over the finished projection.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from turnlog._pack._dedup import basename as _basename
from turnlog._pack._prune import PruneFacts, quote_keys
from turnlog._pack._prune import line_key as _line_key
from turnlog.events import AssistantMessageAdded, TextPart, ToolCall
from turnlog.packing import Projection
from turnlog.testing import SessionItem, build, memory_log, project, sessions

FAST = settings(
    deadline=None,
    max_examples=max(80, settings().max_examples),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_PATHISH = re.compile(r"[\w./\\-]*\w\.\w{1,8}\b")


def counted_directly(view: Projection) -> list[int]:
    refs = [0] * len(view.items)
    for message in view.items:
        body = message.event.body
        if not isinstance(body, AssistantMessageAdded):
            continue
        text = "\n".join(
            [p.text for p in body.parts if isinstance(p, TextPart)]
            + [p.arguments for p in body.parts if isinstance(p, ToolCall)]
        )
        named = {_basename(m) for m in _PATHISH.findall(text)}
        quoted = {_line_key(line.strip()) for line in text.splitlines() if len(line.strip()) >= 24}
        for item in view.items[: message.index]:
            if item.kind != "tool" or item.unit < 0:
                continue
            if (item.target and _basename(item.target) in named) or (
                set(quote_keys(item.event.body.output)) & quoted  # type: ignore[union-attr]
            ):  # type: ignore[union-attr]
                refs[item.index] += 1
    return refs


def refs(view: Projection) -> list[int]:
    facts = PruneFacts()
    facts.catch_up(view.items)
    return [facts.refs(item.index) for item in view.items]


@FAST
@given(items=sessions())
def test_reference_counts_match_a_direct_count(items: list[SessionItem]) -> None:
    log = memory_log()
    session = build(log, "s", items)
    view = project(log, session)
    assert refs(view) == counted_directly(view)


def test_a_message_that_names_and_quotes_a_result_counts_once() -> None:
    from turnlog.events import ToolResultAdded, UserMessageAdded

    line = "def handle_request(self, request): return self.router(request)"
    log = memory_log()
    build(
        log,
        "s",
        [
            UserMessageAdded(text="look at the server"),
            AssistantMessageAdded(
                parts=(ToolCall(id="c1", name="Read", arguments='{"file_path": "src/server.py"}'),)
            ),
            ToolResultAdded(call_id="c1", tool_name="Read", output=f"{line}\nmore"),
            AssistantMessageAdded(parts=(TextPart(text=f"In src/server.py:\n{line}"),)),
            AssistantMessageAdded(parts=(TextPart(text="server.py again"),)),
            AssistantMessageAdded(parts=(TextPart(text=line),)),
            AssistantMessageAdded(parts=(TextPart(text="nothing about it"),)),
        ],
    )
    view = project(log, "s")
    assert refs(view)[2] == 3
    assert counted_directly(view)[2] == 3

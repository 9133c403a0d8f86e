"""The explanation: one `Decision` per lineage event, built on first use.

An engine decides the items (`ItemDecisions`); everything else (rewound events,
conversation a provider's compaction replaced, system sections, tool sets,
compactions, records) is decided here, from the facts of the projection as of
the pack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict

import msgspec

from .._events import (
    AssistantMessageAdded,
    CompactionCommitted,
    NotificationAdded,
    PolicySet,
    RecallAdded,
    SystemSectionSet,
    ToolResultAdded,
    ToolsSet,
    UserMessageAdded,
)
from .._projection import Item, Projection, compacts
from ._model import SUMMARY_SECTION, Decision

__all__: list[str] = []


class Common(TypedDict):
    """The fields every decision of one event shares."""

    pos: int
    session: str
    seq: int
    kind: str


#: Decides one item (by index) given its common fields.
ItemDecisions = Callable[[int, Common], Decision]


class Facts:
    """What the decisions read from the projection, as of one pack. The projection
    only appends to these lists and maps (a rewind replaces them), so references to
    them and the count of events are a snapshot; the small maps are copied."""

    __slots__ = (
        "compactions",
        "cut",
        "events",
        "item_at",
        "items",
        "latest_section",
        "n_compactions",
        "n_events",
        "n_items",
        "policy_pos",
        "rewinds",
        "rewound",
        "section_tokens",
        "tools_pos",
        "tools_tokens",
        "units",
    )

    def __init__(self, view: Projection) -> None:
        self.events = view.events
        self.n_events = len(view.events)
        self.rewound = view.rewound
        self.cut = view.cut
        self.rewinds = dict(view.rewinds)
        self.item_at = view.item_at
        self.items = view.items
        self.n_items = len(view.items)
        self.units = view.units
        self.latest_section = {name: pos for name, (_, _, pos) in view.sections.items()}
        self.section_tokens = dict(view.section_tokens)
        self.tools_pos = view.tools_pos
        self.tools_tokens = view.tools_tokens
        self.policy_pos = view.policy_pos
        self.compactions = view.compactions
        self.n_compactions = len(view.compactions)


def orphan(item: Item, common: Common) -> Decision:
    """The decision of a tool result that answers no open call."""
    return Decision(
        **common,
        decision="dropped",
        rule="orphan",
        detail=f"tool result for call {item.call_id!r}, which no open call in the history matches",
        original_tokens=item.tokens,
    )


def decisions(
    facts: Facts,
    item_decision: ItemDecisions,
    summary_shown: Mapping[int, str],
    *,
    wire_ids: bool = False,
) -> tuple[Decision, ...]:
    """One decision per event of the lineage, in position order. With ``wire_ids``
    (rules 2), an item in the prompt whose call id goes out renamed says so."""
    out: list[Decision] = []
    rewind_by = _rewind_positions(facts.rewinds)
    events = facts.events
    for pos in range(facts.n_events):
        event = events[pos]
        common = Common(pos=pos, session=event.session, seq=event.seq, kind=event.kind)
        if pos in facts.rewound:
            out.append(
                Decision(
                    **common,
                    decision="dropped",
                    rule="rewind",
                    detail=f"rewound by position {rewind_by.get(pos, -1)}",
                )
            )
            continue
        if pos < facts.cut and pos not in facts.item_at and _conversation(event.body):
            out.append(_replaced(facts, common))
            continue
        index = facts.item_at.get(pos)
        if index is not None:
            item = facts.items[index]
            if item.unit < 0:
                out.append(orphan(item, common))
                continue
            decision = item_decision(index, common)
            if decision.decision == "verbatim":
                decision = _preview(item, decision)
            if wire_ids:
                decision = _with_wire_ids(facts, item, decision)
            out.append(decision)
            continue
        out.append(_record(facts, event.body, pos, common, summary_shown))
    return tuple(out)


def _conversation(body: object) -> bool:
    return isinstance(
        body,
        (
            UserMessageAdded,
            AssistantMessageAdded,
            ToolResultAdded,
            NotificationAdded,
            RecallAdded,
            CompactionCommitted,
        ),
    )


def _replaced(facts: Facts, common: Common) -> Decision:
    """The decision of conversation that a provider's compaction replaced."""
    native = compacts(facts.events[facts.cut].body)
    what = (
        f"the {native.format} {native.item_type!r} item"
        if native is not None
        else "a provider compaction"
    )
    return Decision(
        **common,
        decision="dropped",
        rule="native.compaction",
        detail=f"replaced by {what} at position {facts.cut} (the provider "
        "carries it forward; the event stays in the log)",
    )


_IN_PROMPT = frozenset({"verbatim", "truncated", "clipped", "deduplicated", "pruned"})


def _preview(item: Item, decision: Decision) -> Decision:
    """A user message the log stored as a blob goes in as its preview: truncated, not
    verbatim."""
    body = item.event.body
    if not isinstance(body, UserMessageAdded) or body.blob is None:
        return decision
    return msgspec.structs.replace(
        decision,
        decision="truncated",
        rule="truncate.blob_preview",
        detail=f"stored as blob {body.blob.hash[:16]} ({body.blob.size} bytes); the log "
        f"keeps a {len(body.text)}-character preview (`turnlog blob {body.blob.hash}`)",
    )


def _with_wire_ids(facts: Facts, item: Item, decision: Decision) -> Decision:
    """The decision, saying which call ids go out renamed (reused earlier in the
    session: the prompt gives every call its own id and binds results to it)."""
    unit = facts.units[item.unit]
    if unit.wire_ids == unit.calls or decision.decision not in _IN_PROMPT:
        return decision
    if item.kind == "tool":
        renamed = [
            (c, w)
            for c, w in zip(unit.calls, unit.wire_ids, strict=True)
            if c == item.call_id and c != w
        ]
    else:
        renamed = [(c, w) for c, w in zip(unit.calls, unit.wire_ids, strict=True) if c != w]
    if not renamed:
        return decision
    words = ", ".join(f"{c!r} as {w!r}" for c, w in renamed)
    what = "answers call" if item.kind == "tool" else "sends call id"
    note = f"{what} {words} (the id was used earlier in the session)"
    detail = f"{decision.detail}; {note}" if decision.detail else note
    return msgspec.structs.replace(decision, detail=detail)


def _record(
    facts: Facts, body: object, pos: int, common: Common, summary_shown: Mapping[int, str]
) -> Decision:
    """The decision of an event that is not a message."""
    if isinstance(body, SystemSectionSet):
        if body.text and facts.latest_section.get(body.name) == pos:
            return Decision(
                **common,
                decision="verbatim",
                rule="system.section",
                detail=f"section {body.name!r}",
                tokens=facts.section_tokens.get(body.name, 0),
                original_tokens=facts.section_tokens.get(body.name, 0),
            )
        return Decision(
            **common,
            decision="dropped",
            rule="system.replaced",
            detail=f"section {body.name!r} " + ("removed" if not body.text else "set again later"),
        )
    if isinstance(body, ToolsSet):
        if pos == facts.tools_pos:
            return Decision(
                **common,
                decision="verbatim",
                rule="tools.schemas",
                detail=f"{len(body.tools)} tools",
                tokens=facts.tools_tokens,
                original_tokens=facts.tools_tokens,
            )
        return Decision(
            **common,
            decision="dropped",
            rule="tools.replaced",
            detail="tool set declared again later",
        )
    if isinstance(body, CompactionCommitted):
        why = summary_shown.get(pos, "")
        if why:
            return Decision(**common, decision="dropped", rule="summaries.not_shown", detail=why)
        return Decision(
            **common,
            decision="verbatim",
            rule="summaries.shown",
            detail=f"summary of positions {body.first_seq}-{body.last_seq} in {SUMMARY_SECTION}",
        )
    if isinstance(body, PolicySet):
        return Decision(
            **common,
            decision="not_a_prompt_event",
            rule="policy",
            detail="in force" if pos == facts.policy_pos else "replaced",
        )
    return Decision(
        **common,
        decision="not_a_prompt_event",
        rule=common["kind"],
        detail="record of the session, not model input",
    )


def _rewind_positions(rewinds: Mapping[int, frozenset[int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for at, rewound in sorted(rewinds.items()):
        for pos in rewound:
            out.setdefault(pos, at)
    return out

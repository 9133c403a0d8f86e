"""The projection: a session's lineage folded into a history view, incrementally.

Theory of operation
-------------------
`Projection.apply` takes events in lineage order (the order `Log.lineage`
returns; an event's *position* is its index there, equal to its seq unless
the session is a fork) and maintains the structure packing works on:

* **items**: the model-visible events (user messages, assistant messages,
  tool results, notifications, recall results), each with its verbatim token
  count under the projection's counter;
* **units**: what packing keeps or drops as a whole. A unit is one user
  message, notification or recall, or one assistant message *together with
  the results of its tool calls* (results join the unit of the call they
  answer, wherever they appear in the log). Dropping units, never items, is
  what makes splitting a tool pair impossible;
* **turns**: a new turn starts at each user message;
* system sections, tool schemas, compactions, pins, the policy in force,
  request/response pairs (for tokenizer calibration and overflow recovery),
  and running totals: the verbatim tokens of every unit's items and the
  units with a call still open.

The projection is a fold and nothing else: it knows what happened, not how
packing judges it. The packing heuristics (truncation, the dedup tiers, the
pruning scores) live with the stages that use them and keep their own
incremental state, owned by the `Packer` (see ``_pack``). Items and units are
frozen; the fold replaces a unit when a result joins it. The query API is
read-only: sequences and mappings a caller must not change.

A rewind is one of two events that are not folded incrementally: the
projection is rebuilt from the start with the rewound positions excluded, so
every derived state (sections, memories, summaries, indexes) forgets them by
construction; ``generation`` counts the rebuilds, so that state derived from
the items elsewhere knows to start again. The other is an assistant message
holding a provider's own compaction (a `NativePart` of type ``compaction``):
the provider's rule is that it replaces everything of the conversation before
it, so the projection is rebuilt with the conversation events before it
(messages, tool results, notifications, recalls, turnlog's own summaries)
left out of the items (``cut`` is its position; the events stay in the log
and in ``events``), and the message itself pinned. Nothing here does I/O, reads a clock or
depends on dict order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any

import msgspec

from ._context import READ_OUTPUT
from ._erase import placeholder
from ._events import (
    AssistantMessageAdded,
    CompactionCommitted,
    CompactionFailed,
    Event,
    EventErased,
    EventsPinned,
    ImagePart,
    NativePart,
    NotificationAdded,
    PolicySet,
    ProviderErrorReceived,
    ReasoningPart,
    RecallAdded,
    RequestIssued,
    ResponseReceived,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)
from ._policy import Policy
from ._tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TOOL_SCHEMA_OVERHEAD,
    TokenCounter,
)

__all__ = ["Item", "Projection", "Unit", "notification_text", "recall_text"]

#: The conversation events a provider's compaction replaces (those before it).
_REPLACEABLE = (
    UserMessageAdded,
    AssistantMessageAdded,
    ToolResultAdded,
    NotificationAdded,
    RecallAdded,
    CompactionCommitted,
)


def compacts(body: object) -> NativePart | None:
    """The provider compaction an assistant message holds (its last), else None."""
    if not isinstance(body, AssistantMessageAdded):
        return None
    found = None
    for part in body.parts:
        if isinstance(part, NativePart) and part.item_type == "compaction":
            found = part
    return found


_PATH_KEYS = ("file_path", "path", "filename", "file", "notebook_path", "target_file")


# Items and units are never part of a reference cycle (they hold events, strings,
# numbers, tuples and dicts of those), so they are left out of the cyclic garbage
# collector: a process caching many projections holds hundreds of thousands of
# them, and a full collection walking them all stalls every thread for a tenth
# of a second or more. Their collections are tuples for the same reason (CPython
# stops tracking a tuple of untracked values; a list or set is always tracked).
class Item(msgspec.Struct, frozen=True, gc=False, eq=False):
    """One model-visible event and what packing needs to know about it.

    Attributes:
        index: its index in `Projection.items`.
        pos: its lineage position.
        event: the event.
        kind: ``user``, ``assistant``, ``tool``, ``notification`` or ``recall``.
        turn: the turn it belongs to (0 before the first user message).
        unit: the unit it belongs to; -1 for an orphan tool result (no open call
            matched it; packing drops it).
        tokens: its verbatim tokens under the projection's counter.
        call_id, tool_name: for a tool result, the call it answers.
        args: for a tool result, the call's arguments parsed as a JSON object
            (empty when they are not one).
        target: for a tool result, what the call acted on: a path, a pattern or a
            command (first 200 characters), or "".
        kit: the context tools' ``read_output`` was in the ``ToolsSet`` in force
            when the event was appended (its notices then name that tool).
    """

    index: int
    pos: int
    event: Event
    kind: str
    turn: int
    unit: int = -1
    tokens: int = 0
    call_id: str = ""
    tool_name: str = ""
    args: dict[str, Any] = {}
    target: str = ""
    kit: bool = False


class Unit(msgspec.Struct, frozen=True, gc=False, eq=False):
    """Items kept or dropped together: a message, or a call with its results.

    Attributes:
        index: its index in `Projection.units`.
        turn: the turn it belongs to.
        items: item indexes: the message, then results as they arrive.
        calls: the ids of its tool calls, in call order.
        open_calls: the calls still waiting for a result, in call order.
        wire_ids: the id each call gets in a prompt, in call order: its own id the
            first time the session uses it, a derived one (``ID_2``, ``ID_3``...) when
            an earlier call of the lineage used it already, so that every call of a
            prompt has its own id (the log keeps the ids as given).
    """

    index: int
    turn: int
    items: tuple[int, ...]
    calls: tuple[str, ...] = ()
    open_calls: tuple[str, ...] = ()
    wire_ids: tuple[str, ...] = ()

    @property
    def pending(self) -> bool:
        """True while a tool call of this unit has no result."""
        return bool(self.open_calls)


def call_target(args: Mapping[str, Any]) -> str:
    """What a tool call acts on: a path, a pattern or a command (for placeholders)."""
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    for key in ("pattern", "query", "url", "command", "cmd"):
        value = args.get(key)
        if isinstance(value, str) and value:
            return value[:200]
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return " ".join(value)[:200]
    return ""


#: What the prompt says for a user message with neither text nor images.
EMPTY_USER_TEXT = "(empty message)"
#: What the prompt carries for an assistant message without parts.
EMPTY_ASSISTANT_TEXT = "(empty response)"


def notification_text(source: str, text: str) -> str:
    """A notification as the prompt carries it (a user message)."""
    return f'<notification source="{source}">\n{text}\n</notification>'


def recall_text(body: RecallAdded, keep: int) -> str:
    """A recall result as the prompt carries it, with its first ``keep`` hits."""
    # A hit's offset (where in a long output it is) shows only when there is one:
    # hits recorded before offsets existed render as they always did.
    hits = "\n".join(
        f'<hit session="{h.session}" seq="{h.seq}"'
        + (f' offset="{h.offset}"' if h.offset else "")
        + f">\n{h.text}\n</hit>"
        for h in body.hits[:keep]
    )
    omitted = len(body.hits) - keep
    more = f"\n[{omitted} more results omitted by the recall cap]" if omitted else ""
    return f'<recall query="{body.query}">\n{hits}{more}\n</recall>'


def _parse_args(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


class Projection:
    """Folds a session's lineage into the state packing reads.

    Build one with ``Projection(counter)`` and feed it the lineage with `extend`
    (a `Packer` does this for you and keeps it up to date). Everything else is a
    read-only query.

    Parameters:
        counter: the token counter every item is measured with.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.generation = 0  # rebuilds by a rewind so far
        # rewind position -> the rewound set it establishes (kept across rebuilds)
        self._rewinds: dict[int, frozenset[int]] = {}
        self._reset(frozenset())

    def _reset(self, rewound: frozenset[int], cut: int = -1) -> None:
        self._events: list[Event] = []
        self._rewound: frozenset[int] = rewound
        self._cut = cut
        self._items: list[Item] = []
        self._item_at: dict[int, int] = {}
        self._units: list[Unit] = []
        self._turn_starts: list[int] = []
        self._sections: dict[str, tuple[str, int, int]] = {}
        self._section_tokens: dict[str, int] = {}
        self._tools_pos = -1
        self._kit = False
        self._tools: tuple[ToolSpec, ...] = ()
        self._tools_tokens = 0
        self._compactions: list[int] = []
        self._failures: list[int] = []
        self._pins: set[int] = set()
        self._policy: Policy | None = None
        self._policy_pos = -1
        self._requests: dict[int, int] = {}
        self._usage: list[tuple[int, int]] = []
        self._errors: list[int] = []
        self._responses: list[int] = []
        self._last_request = -1
        self._last_overflow = -1
        self._tool_calls = 0
        self._call_unit: dict[str, int] = {}
        self._unit_tokens = 0
        self._open_units: set[int] = set()
        self._assistant_units: list[int] = []
        self._call_ids: set[str] = set()  # every call id and wire id used so far

    # -- folding -----------------------------------------------------------------
    def extend(self, events: Iterable[Event]) -> None:
        """Apply events in lineage order."""
        for event in events:
            self.apply(event)

    def apply(self, event: Event) -> None:
        """Apply the next event of the lineage."""
        pos = len(self._events)
        body = event.body
        if type(body) is EventErased:
            event = placeholder(event)
            body = event.body
        self._events.append(event)
        if isinstance(body, SessionRewound):
            if pos not in self._rewinds:
                self._rewind(pos, body)
            return
        if pos in self._rewound:
            return
        if pos < self._cut and isinstance(body, _REPLACEABLE):
            return
        if pos > self._cut and compacts(body) is not None:
            self._compacted(pos)
            return
        if isinstance(body, (UserMessageAdded, NotificationAdded, RecallAdded)):
            self._message(pos, event, body)
        elif isinstance(body, AssistantMessageAdded):
            self._assistant(pos, event, body)
        elif isinstance(body, ToolResultAdded):
            self._tool_result(pos, event, body)
        else:
            self._record(pos, body)

    def _message(
        self, pos: int, event: Event, body: UserMessageAdded | NotificationAdded | RecallAdded
    ) -> None:
        if isinstance(body, UserMessageAdded):
            self._turn_starts.append(len(self._units))
            kind = "user"
        else:
            kind = "notification" if isinstance(body, NotificationAdded) else "recall"
        item = self._new_item(pos, event, kind, len(self._units))
        self._new_unit(item)

    def _assistant(self, pos: int, event: Event, body: AssistantMessageAdded) -> None:
        item = self._new_item(pos, event, "assistant", len(self._units))
        calls = tuple(p.id for p in body.parts if isinstance(p, ToolCall))
        self._assistant_units.append(len(self._units))
        unit = self._new_unit(item, calls)
        if calls:
            self._units[unit.index] = unit = msgspec.structs.replace(
                unit, wire_ids=self._wire_ids(calls)
            )
        self._tool_calls += len(calls)
        if calls:
            self._open_units.add(unit.index)
        for call in calls:
            self._call_unit[call] = unit.index

    def _wire_ids(self, calls: tuple[str, ...]) -> tuple[str, ...]:
        """Prompt ids for a message's calls: unique over the lineage so far."""
        seen = self._call_ids
        out: list[str] = []
        for call in calls:
            wire = call
            n = 1
            while wire in seen:
                n += 1
                wire = f"{call}_{n}"
            seen.add(wire)
            out.append(wire)
        # Usually every id is its own: then the very tuple (`assemble` checks identity).
        return calls if out == list(calls) else tuple(out)

    def _tool_result(self, pos: int, event: Event, body: ToolResultAdded) -> None:
        unit_index = self._call_unit.get(body.call_id)
        if unit_index is None or body.call_id not in self._units[unit_index].open_calls:
            # an orphan: no open call to answer; packing drops it
            self._new_item(pos, event, "tool", -1, call_id=body.call_id, tool_name=body.tool_name)
            return
        unit = self._units[unit_index]
        call_body = self._items[unit.items[0]].event.body
        assert isinstance(call_body, AssistantMessageAdded)
        args: dict[str, Any] = {}
        for part in call_body.parts:
            if isinstance(part, ToolCall) and part.id == body.call_id:
                args = _parse_args(part.arguments)
                break
        item = self._new_item(
            pos,
            event,
            "tool",
            unit_index,
            call_id=body.call_id,
            tool_name=body.tool_name,
            args=args,
            target=call_target(args),
        )
        open_calls = tuple(c for c in unit.open_calls if c != body.call_id)
        if not open_calls:
            self._open_units.discard(unit_index)
        self._units[unit_index] = msgspec.structs.replace(
            unit, items=(*unit.items, item.index), open_calls=open_calls
        )
        self._unit_tokens += item.tokens

    def _record(self, pos: int, body: object) -> None:
        """Fold an event that is not a message: sections, tools, records."""
        if isinstance(body, SystemSectionSet):
            if body.text:
                self._sections[body.name] = (body.text, body.position, pos)
                self._section_tokens[body.name] = self.counter.count(body.text) + 1
            else:
                self._sections.pop(body.name, None)
                self._section_tokens.pop(body.name, None)
        elif isinstance(body, ToolsSet):
            self._tools_pos = pos
            self._tools = body.tools
            self._kit = READ_OUTPUT in body.tools
            count = self.counter.count
            self._tools_tokens = sum(
                TOOL_SCHEMA_OVERHEAD + count(t.name) + count(t.description) + count(t.parameters)
                for t in body.tools
            )
        elif isinstance(body, CompactionCommitted):
            self._compactions.append(pos)
        elif isinstance(body, CompactionFailed):
            self._failures.append(pos)
        elif isinstance(body, EventsPinned):
            if body.pinned:
                self._pins.update(body.seqs)
            else:
                self._pins.difference_update(body.seqs)
        elif isinstance(body, PolicySet):
            self._policy = body.policy
            self._policy_pos = pos
        else:
            self._exchange(pos, body)

    def _exchange(self, pos: int, body: object) -> None:
        """Fold a request, response or provider error record."""
        if isinstance(body, RequestIssued):
            self._requests[pos] = body.tokens
            self._last_request = pos
        elif isinstance(body, ResponseReceived):
            self._responses.append(pos)
            if body.request_seq is not None and body.usage.input_tokens:
                local = self._requests.get(body.request_seq)
                if local:
                    self._usage.append((local, body.usage.input_tokens))
        elif isinstance(body, ProviderErrorReceived):
            self._errors.append(pos)
            if body.overflow:
                self._last_overflow = pos

    def _rewind(self, pos: int, body: SessionRewound) -> None:
        # The view becomes what it was right after position to_seq (including
        # the rewinds that had happened by then), minus everything since.
        base: frozenset[int] = frozenset()
        for at in sorted(self._rewinds):
            if at <= body.to_seq:
                base = self._rewinds[at]
        rewound = base | frozenset(range(body.to_seq + 1, pos))
        self._rewinds[pos] = rewound
        events = self._events
        self._reset(rewound)
        self.generation += 1
        for event in events:
            self.apply(event)

    def _compacted(self, pos: int) -> None:
        # A provider compaction at ``pos``: the view is rebuilt with the conversation
        # before it left out (a rewind inside the rebuild keeps its own rebuild).
        events = self._events
        self._reset(self._rewound, cut=pos)
        self.generation += 1
        for event in events:
            self.apply(event)
        self._pins.add(pos)

    def _new_item(
        self,
        pos: int,
        event: Event,
        kind: str,
        unit: int,
        *,
        call_id: str = "",
        tool_name: str = "",
        args: dict[str, Any] | None = None,
        target: str = "",
    ) -> Item:
        item = Item(
            len(self._items),
            pos,
            event,
            kind,
            len(self._turn_starts),
            unit,
            self._measure(event),
            call_id,
            tool_name,
            args or {},
            target,
            self._kit,
        )
        self._items.append(item)
        self._item_at[pos] = item.index
        return item

    def _new_unit(self, item: Item, calls: tuple[str, ...] = ()) -> Unit:
        unit = Unit(len(self._units), item.turn, (item.index,), calls, calls)
        self._units.append(unit)
        self._unit_tokens += item.tokens
        return unit

    def _measure(self, event: Event) -> int:
        count = self.counter.count
        body = event.body
        if isinstance(body, UserMessageAdded):
            text = body.text if body.text or body.images else EMPTY_USER_TEXT
            return MESSAGE_OVERHEAD + count(text) + IMAGE_TOKENS * len(body.images)
        if isinstance(body, AssistantMessageAdded):
            if not body.parts:
                return MESSAGE_OVERHEAD + count(EMPTY_ASSISTANT_TEXT)
            total = MESSAGE_OVERHEAD
            for part in body.parts:
                if isinstance(part, TextPart):
                    total += count(part.text)
                elif isinstance(part, ToolCall):
                    total += TOOL_CALL_OVERHEAD + count(part.name) + count(part.arguments)
                elif isinstance(part, ReasoningPart):
                    total += count(part.text) + count(part.opaque)
                elif isinstance(part, ImagePart):
                    total += IMAGE_TOKENS
                elif isinstance(part, NativePart):
                    total += count(part.data)
            return total
        if isinstance(body, ToolResultAdded):
            return MESSAGE_OVERHEAD + 1 + count(body.output)
        # Notifications and recalls are measured as the text the prompt carries.
        if isinstance(body, NotificationAdded):
            return MESSAGE_OVERHEAD + count(notification_text(body.source, body.text))
        if isinstance(body, RecallAdded):
            return MESSAGE_OVERHEAD + count(recall_text(body, len(body.hits)))
        return MESSAGE_OVERHEAD

    # -- queries --------------------------------------------------------------------
    @property
    def events(self) -> Sequence[Event]:
        """Every event of the lineage, by position (rewound ones included)."""
        return self._events

    @property
    def items(self) -> Sequence[Item]:
        """The model-visible events, in lineage order."""
        return self._items

    @property
    def item_at(self) -> Mapping[int, int]:
        """Lineage position -> item index, for positions that hold an item."""
        return self._item_at

    @property
    def units(self) -> Sequence[Unit]:
        """The units, in the order of their first item."""
        return self._units

    @property
    def turn_starts(self) -> Sequence[int]:
        """The unit index where each turn starts (one per user message)."""
        return self._turn_starts

    @property
    def assistant_units(self) -> Sequence[int]:
        """Indexes of the units that start with an assistant message (the steps), in
        order."""
        return self._assistant_units

    @property
    def rewound(self) -> Set[int]:
        """Positions a rewind removed from the view."""
        return self._rewound

    @property
    def cut(self) -> int:
        """Position of the latest assistant message holding a provider's compaction
        (-1 when none): the conversation before it is not in the items."""
        return self._cut

    def replaced(self, pos: int) -> bool:
        """True when the event at ``pos`` is conversation that a provider's compaction
        replaced (it stays in ``events``, out of the items)."""
        return (
            pos < self._cut
            and pos not in self._rewound
            and isinstance(self._events[pos].body, _REPLACEABLE)
        )

    @property
    def rewinds(self) -> Mapping[int, frozenset[int]]:
        """Rewind position -> the positions it removed (those of earlier rewinds too)."""
        return self._rewinds

    @property
    def sections(self) -> Mapping[str, tuple[str, int, int]]:
        """Active system sections: name -> (text, ordering position, lineage position)."""
        return self._sections

    @property
    def section_tokens(self) -> Mapping[str, int]:
        """Tokens of each active system section."""
        return self._section_tokens

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The tool schemas in force."""
        return self._tools

    @property
    def tools_pos(self) -> int:
        """Position of the ``ToolsSet`` in force (-1 when none)."""
        return self._tools_pos

    @property
    def tools_tokens(self) -> int:
        """Tokens of the tool schemas in force."""
        return self._tools_tokens

    @property
    def compactions(self) -> Sequence[int]:
        """Positions of the ``CompactionCommitted`` events in the view."""
        return self._compactions

    @property
    def failures(self) -> Sequence[int]:
        """Positions of the ``CompactionFailed`` events in the view."""
        return self._failures

    @property
    def pins(self) -> Set[int]:
        """Pinned positions."""
        return self._pins

    @property
    def policy(self) -> Policy | None:
        """The policy of the last ``PolicySet`` (None when there is none)."""
        return self._policy

    @property
    def policy_pos(self) -> int:
        """Position of the ``PolicySet`` in force (-1 when none)."""
        return self._policy_pos

    @property
    def requests(self) -> Mapping[int, int]:
        """Request record position -> the prompt tokens it recorded."""
        return self._requests

    @property
    def usage(self) -> Sequence[tuple[int, int]]:
        """``(local prompt tokens, provider-reported input tokens)`` per answered request."""
        return self._usage

    @property
    def errors(self) -> Sequence[int]:
        """Positions of provider errors."""
        return self._errors

    @property
    def responses(self) -> Sequence[int]:
        """Positions of provider responses."""
        return self._responses

    @property
    def last_request(self) -> int:
        """Position of the latest request record (-1 when none)."""
        return self._last_request

    @property
    def last_overflow(self) -> int:
        """Position of the latest context-overflow error (-1 when none)."""
        return self._last_overflow

    @property
    def tool_calls(self) -> int:
        """Tool calls made so far (for schedule triggers)."""
        return self._tool_calls

    @property
    def open_units(self) -> Set[int]:
        """Units with a call still waiting for its result."""
        return self._open_units

    @property
    def unit_tokens(self) -> int:
        """Verbatim tokens of every item that belongs to a unit."""
        return self._unit_tokens

    @property
    def overflow_pending(self) -> bool:
        """True when the latest request ended in a context-overflow error: the next
        pack is a deterministic recovery pack."""
        return self._last_overflow > self._last_request >= 0 or (
            self._last_overflow >= 0 and self._last_request < 0
        )

    @property
    def head(self) -> int:
        """Position of the last applied event (-1 when empty)."""
        return len(self._events) - 1

    def sorted_sections(self) -> list[tuple[str, str, int]]:
        """``(name, text, pos)`` of the active system sections, by position then name."""
        ordered = sorted(self._sections.items(), key=lambda kv: (kv[1][1], kv[0]))
        return [(name, text, pos) for name, (text, _, pos) in ordered]

"""The projection: a session's lineage folded into a history view, incrementally.

Theory of operation
-------------------
`Projection.apply` takes events in lineage order (the order `Log.lineage`
returns; an event's *position* is its index there, equal to its seq unless
the session is a fork) and maintains:

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
  request/response pairs (for tokenizer calibration and overflow recovery);
* incremental indexes for dedup (exact repeats, stale reads, greps subsumed
  by a full read) and for pruning scores (references by later assistant
  text, decision language), so that a pack after one append costs O(new);
* running totals packing would otherwise sum over the whole history: the
  verbatim tokens of every unit's items and the units with a call still open.
  ``pack_cache`` holds the packer's own derived indexes (see ``pack``); like
  every derived state it is dropped when a rewind rebuilds the projection.

A rewind is the one event that is not folded incrementally: the projection is
rebuilt from the start with the rewound positions excluded, so every derived
state (sections, memories, summaries, indexes) forgets them by construction.
Nothing here does I/O, reads a clock or depends on dict order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import msgspec
import xxhash

from ._events import (
    AssistantMessageAdded,
    CompactionCommitted,
    CompactionFailed,
    Event,
    EventsPinned,
    ImagePart,
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

_PATH_KEYS = ("file_path", "path", "filename", "file", "notebook_path", "target_file")
# Path-like tokens: the regex r"[\w./\\-]*\w\.\w{1,8}\b", matched by `_pathish` in
# linear time (the regex itself backtracks quadratically on a long run of its
# characters, e.g. a line of dashes or a base64 argument: seconds for 16 KB).
_PATH_RUN = re.compile(r"[\w./\\-]+")
_PATH_END = re.compile(r"\w\.\w{1,8}\b")
_DECISION = re.compile(
    r"\b(based on|i'll use|i will use|the issue is|the problem is|this shows|that means|"
    r"so the fix|root cause|because|therefore|the bug is)\b", re.IGNORECASE)
_QUOTE_MIN = 24


# Items and units are never part of a reference cycle (they hold events, strings,
# numbers, tuples and dicts of those), so they are left out of the cyclic garbage
# collector: a process caching many projections holds hundreds of thousands of
# them, and a full collection walking them all stalls every thread for a tenth
# of a second or more. Their collections are tuples for the same reason (CPython
# stops tracking a tuple of untracked values; a list or set is always tracked).
class Item(msgspec.Struct, gc=False, eq=False):
    """One model-visible event and what packing needs to know about it."""

    index: int
    pos: int
    event: Event
    kind: str  # user | assistant | tool | notification | recall
    turn: int
    unit: int = -1
    tokens: int = 0
    call_id: str = ""
    tool_name: str = ""
    target: str = ""
    args: dict[str, Any] = {}
    full_read: bool = False
    target_key: str = ""  # base name of the target, for references by later messages
    mention_base: int = 0  # messages naming that base name before this result
    quoted: int = 0  # later messages quoting the result without naming its target
    mentions: dict[str, int] | None = None  # the projection's mention counters
    decision_language: bool = False
    quote_keys: tuple[int, ...] = ()
    trunc: tuple[tuple[float, ...], str, str, int] | None = None

    @property
    def refs(self) -> int:
        """Later assistant messages that name this result's target file (by base name)
        or quote one of its first distinctive lines (a message doing both counts once)."""
        named = 0
        if self.mentions is not None:
            named = self.mentions[self.target_key] - self.mention_base
        return named + self.quoted


class Unit(msgspec.Struct, gc=False, eq=False):
    """Items kept or dropped together: a message, or a call with its results."""

    index: int
    turn: int
    items: tuple[int, ...]  # item indexes: the message, then results as they arrive
    calls: tuple[str, ...] = ()
    open_calls: tuple[str, ...] = ()  # calls still waiting for a result, in call order

    @property
    def pending(self) -> bool:
        """True while a tool call of this unit has no result."""
        return bool(self.open_calls)


def call_target(name: str, args: dict[str, Any]) -> str:
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
    del name
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
    hits = "\n".join(f'<hit session="{h.session}" seq="{h.seq}">\n{h.text}\n</hit>'
                     for h in body.hits[:keep])
    omitted = len(body.hits) - keep
    more = f"\n[{omitted} more results omitted by the recall cap]" if omitted else ""
    return f'<recall query="{body.query}">\n{hits}{more}\n</recall>'


def _parse_args(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _pathish(text: str) -> list[str]:
    r"""``re.findall(r"[\w./\\-]*\w\.\w{1,8}\b", text)``, in linear time.

    Every character of a match is in the class, so a match lies in one maximal run
    of class characters; it starts where the run starts (the regex tries the
    earliest start first) and, the star being greedy, ends after the last place
    in the run where ``\w\.\w{1,8}\b`` matches; it then leaves no room for a
    second match in that run.
    """
    found: list[str] = []
    for run in _PATH_RUN.finditer(text):
        start, end = run.span()
        dot = text.rfind(".", start + 1, end - 1)
        while dot >= 0:
            tail = _PATH_END.match(text, dot - 1)
            if tail is not None:
                found.append(text[start:tail.end()])
                break
            dot = text.rfind(".", start + 1, dot)
    return found


def _basename(path: str) -> str:
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


def _line_key(line: str) -> int:
    return int(xxhash.xxh3_64_intdigest(line.encode("utf-8", "surrogatepass")))


def _quote_keys(text: str) -> tuple[int, ...]:
    keys: list[int] = []
    for raw in text.splitlines():
        line = raw.strip()
        if len(line) >= _QUOTE_MIN:
            keys.append(_line_key(line))
            if len(keys) == 3:
                break
    return tuple(keys)


class DedupIndex:
    """Which tool results a later result makes redundant (seed 003's three tiers).

    Maintained incrementally for one tool-kind mapping; ``superseded`` maps an
    item index to ``(tier, by item index, note)``. Marks are never removed.
    """

    def __init__(self, kinds: dict[str, str]) -> None:
        self.kinds = kinds
        self.superseded: dict[int, tuple[int, int, str]] = {}
        self.marked: list[int] = []  # the keys of ``superseded``, in the order marked
        self._exact: dict[bytes, int] = {}
        self._reads: dict[str, list[int]] = {}
        self._stale: dict[str, list[int]] = {}
        self._greps: dict[str, list[int]] = {}

    def kind(self, tool_name: str) -> str:
        kind = self.kinds.get(tool_name)
        if kind is None:
            kind = self.kinds.get(tool_name.lower(), "other")
        return kind

    def add(self, item: Item) -> None:
        body = item.event.body
        assert isinstance(body, ToolResultAdded)
        kind = self.kind(item.tool_name)
        if body.is_error:
            return
        if kind in ("file_read", "grep", "glob"):
            key = xxhash.xxh3_128_digest(
                f"{item.tool_name}\x00{json.dumps(item.args, sort_keys=True)}\x00".encode(
                    "utf-8", "surrogatepass") + body.output.encode("utf-8", "surrogatepass"))
            earlier = self._exact.get(key)
            if earlier is not None:
                self._mark(earlier, (1, item.index, ""))
            self._exact[key] = item.index
        target = item.target
        if not target:
            return
        if kind == "file_read":
            for stale in self._stale.pop(target, []):
                self._mark(stale, (2, item.index, ""))
            if item.full_read:
                for grep in self._greps.pop(target, []):
                    self._mark(grep, (3, item.index, _basename(target)))
            self._reads.setdefault(target, []).append(item.index)
        elif kind in ("file_edit", "file_write"):
            self._stale.setdefault(target, []).extend(self._reads.pop(target, []))
        elif kind == "grep" and "." in _basename(target):
            self._greps.setdefault(target, []).append(item.index)

    def _mark(self, index: int, mark: tuple[int, int, str]) -> None:
        if index not in self.superseded:
            self.superseded[index] = mark
            self.marked.append(index)


class Projection:
    """Folds a session's lineage into the state packing reads.

    Parameters:
        counter: the token counter every item is measured with.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        # rewind position -> the rewound set it establishes (kept across rebuilds)
        self._rewinds: dict[int, frozenset[int]] = {}
        self._reset(frozenset())

    def _reset(self, rewound: frozenset[int]) -> None:
        self.events: list[Event] = []
        self.rewound: frozenset[int] = rewound
        self.items: list[Item] = []
        self.item_at: dict[int, int] = {}
        self.units: list[Unit] = []
        self.turn_starts: list[int] = []  # unit index where each turn starts
        self.sections: dict[str, tuple[str, int, int]] = {}  # name -> (text, position, pos)
        self.section_tokens: dict[str, int] = {}
        self.tools_pos = -1
        self.tools: tuple[Any, ...] = ()
        self.tools_tokens = 0
        self.compactions: list[int] = []  # positions of CompactionCommitted events
        self.failures: list[int] = []  # positions of CompactionFailed events
        self.pins: set[int] = set()
        self.policy: Policy | None = None
        self.policy_pos = -1
        self.requests: dict[int, int] = {}  # request pos -> local prompt tokens
        self.usage: list[tuple[int, int]] = []  # (local, reported) input tokens
        self.errors: list[int] = []  # provider error positions
        self.last_request = -1
        self.last_overflow = -1
        self.tool_calls = 0  # tool calls so far (for schedule triggers)
        self.responses: list[int] = []
        self._call_unit: dict[str, int] = {}
        self._mentions: dict[str, int] = {}  # target base name -> messages naming it
        self._quotes: dict[int, tuple[int, ...]] = {}  # quote key -> items, see `Item`
        self._since_assistant: list[int] = []
        self._dedup: DedupIndex | None = None
        self._tool_items: list[int] = []
        self.unit_tokens = 0  # verbatim tokens of every item that belongs to a unit
        self.open_units: set[int] = set()  # units with a call still waiting for its result
        self.pack_cache: dict[object, object] = {}  # the packer's derived indexes

    # -- folding -----------------------------------------------------------------
    def extend(self, events: Iterable[Event]) -> None:
        """Apply events in lineage order."""
        for event in events:
            self.apply(event)

    def apply(self, event: Event) -> None:
        """Apply the next event of the lineage."""
        pos = len(self.events)
        self.events.append(event)
        body = event.body
        if isinstance(body, SessionRewound):
            if pos not in self._rewinds:
                self._rewind(pos, body)
            return
        if pos in self.rewound:
            return
        if isinstance(body, UserMessageAdded):
            self.turn_starts.append(len(self.units))
            item = self._new_item(pos, event, "user")
            self._new_unit(item)
        elif isinstance(body, AssistantMessageAdded):
            item = self._new_item(pos, event, "assistant")
            unit = self._new_unit(item)
            calls = tuple(p.id for p in body.parts if isinstance(p, ToolCall))
            self.tool_calls += len(calls)
            unit.calls = unit.open_calls = calls
            if calls:
                self.open_units.add(unit.index)
            for call in calls:
                self._call_unit[call] = unit.index
            self._note_assistant(item, body)
        elif isinstance(body, ToolResultAdded):
            self._tool_result(pos, event, body)
        elif isinstance(body, NotificationAdded):
            self._new_unit(self._new_item(pos, event, "notification"))
        elif isinstance(body, RecallAdded):
            self._new_unit(self._new_item(pos, event, "recall"))
        elif isinstance(body, SystemSectionSet):
            if body.text:
                self.sections[body.name] = (body.text, body.position, pos)
                self.section_tokens[body.name] = self.counter.count(body.text) + 1
            else:
                self.sections.pop(body.name, None)
                self.section_tokens.pop(body.name, None)
        elif isinstance(body, ToolsSet):
            self.tools_pos = pos
            self.tools = body.tools
            self.tools_tokens = sum(
                TOOL_SCHEMA_OVERHEAD + self.counter.count(t.name)
                + self.counter.count(t.description) + self.counter.count(t.parameters)
                for t in body.tools)
        elif isinstance(body, CompactionCommitted):
            self.compactions.append(pos)
        elif isinstance(body, CompactionFailed):
            self.failures.append(pos)
        elif isinstance(body, EventsPinned):
            if body.pinned:
                self.pins.update(body.seqs)
            else:
                self.pins.difference_update(body.seqs)
        elif isinstance(body, PolicySet):
            self.policy = body.policy
            self.policy_pos = pos
        elif isinstance(body, RequestIssued):
            self.requests[pos] = body.tokens
            self.last_request = pos
        elif isinstance(body, ResponseReceived):
            self.responses.append(pos)
            if body.request_seq is not None and body.usage.input_tokens:
                local = self.requests.get(body.request_seq)
                if local:
                    self.usage.append((local, body.usage.input_tokens))
        elif isinstance(body, ProviderErrorReceived):
            self.errors.append(pos)
            if body.overflow:
                self.last_overflow = pos

    def _rewind(self, pos: int, body: SessionRewound) -> None:
        # The view becomes what it was right after position to_seq (including
        # the rewinds that had happened by then), minus everything since.
        base: frozenset[int] = frozenset()
        for at in sorted(self._rewinds):
            if at <= body.to_seq:
                base = self._rewinds[at]
        rewound = base | frozenset(range(body.to_seq + 1, pos))
        self._rewinds[pos] = rewound
        events = self.events
        self._reset(rewound)
        for event in events:
            self.apply(event)

    def _new_item(self, pos: int, event: Event, kind: str) -> Item:
        item = Item(len(self.items), pos, event, kind, len(self.turn_starts))
        item.tokens = self._measure(event)
        self.items.append(item)
        self.item_at[pos] = item.index
        return item

    def _new_unit(self, item: Item) -> Unit:
        unit = Unit(len(self.units), item.turn, (item.index,))
        item.unit = unit.index
        self.units.append(unit)
        self.unit_tokens += item.tokens
        return unit

    def _tool_result(self, pos: int, event: Event, body: ToolResultAdded) -> None:
        item = self._new_item(pos, event, "tool")
        item.call_id = body.call_id
        item.tool_name = body.tool_name
        unit_index = self._call_unit.get(body.call_id)
        if unit_index is None or body.call_id not in self.units[unit_index].open_calls:
            return  # an orphan: no open call to answer; packing drops it
        unit = self.units[unit_index]
        unit.open_calls = tuple(c for c in unit.open_calls if c != body.call_id)
        if not unit.open_calls:
            self.open_units.discard(unit_index)
        unit.items += (item.index,)
        item.unit = unit_index
        self.unit_tokens += item.tokens
        call_body = self.items[unit.items[0]].event.body
        assert isinstance(call_body, AssistantMessageAdded)
        for part in call_body.parts:
            if isinstance(part, ToolCall) and part.id == body.call_id:
                item.args = _parse_args(part.arguments)
                item.target = call_target(part.name, item.args)
                item.full_read = not any(k in item.args for k in ("offset", "limit",
                                                                  "view_range", "line"))
                break
        if item.target:
            name = _basename(item.target)
            if name:
                item.target_key = name
                item.mention_base = self._mentions.setdefault(name, 0)
                item.mentions = self._mentions
        item.quote_keys = _quote_keys(body.output)
        for key in item.quote_keys:
            self._quotes[key] = (*self._quotes.get(key, ()), item.index)
        self._since_assistant.append(item.index)
        self._tool_items.append(item.index)
        if self._dedup is not None:
            self._dedup.add(item)

    def _note_assistant(self, item: Item, body: AssistantMessageAdded) -> None:
        texts = [p.text for p in body.parts if isinstance(p, TextPart)]
        texts += [p.arguments for p in body.parts if isinstance(p, ToolCall)]
        text = "\n".join(texts)
        if self._since_assistant and _DECISION.search(text):
            for index in self._since_assistant:
                self.items[index].decision_language = True
        self._since_assistant = []
        # A result is referenced once per message that names its target or quotes it.
        # Naming is counted per base name (a result's count is the counter now minus
        # the counter when it arrived), so a message naming a file read a thousand
        # times costs one step, not a thousand.
        named = {_basename(match) for match in _pathish(text)}
        mentions = self._mentions
        for key in named:
            if key in mentions:
                mentions[key] += 1
        quoted: set[int] = set()
        for raw in text.splitlines():
            line = raw.strip()
            if len(line) >= _QUOTE_MIN:
                quoted.update(self._quotes.get(_line_key(line), ()))
        for index in quoted:
            quoting = self.items[index]
            if quoting.target_key not in named:
                quoting.quoted += 1

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
            return total
        if isinstance(body, ToolResultAdded):
            return MESSAGE_OVERHEAD + 1 + count(body.output)
        # Notifications and recalls are measured as the text the prompt carries.
        if isinstance(body, NotificationAdded):
            return MESSAGE_OVERHEAD + count(notification_text(body.source, body.text))
        if isinstance(body, RecallAdded):
            return MESSAGE_OVERHEAD + count(recall_text(body, len(body.hits)))
        return MESSAGE_OVERHEAD

    # -- derived ------------------------------------------------------------------
    def dedup(self, kinds: dict[str, str]) -> DedupIndex:
        """The dedup index for a tool-kind mapping (rebuilt only when it changes)."""
        if self._dedup is None or self._dedup.kinds != kinds:
            index = DedupIndex(dict(kinds))
            for i in self._tool_items:
                index.add(self.items[i])
            self._dedup = index
        return self._dedup

    @property
    def overflow_pending(self) -> bool:
        """True when the latest request ended in a context-overflow error: the next
        pack is a deterministic recovery pack."""
        return self.last_overflow > self.last_request >= 0 or (
            self.last_overflow >= 0 and self.last_request < 0)

    @property
    def head(self) -> int:
        """Position of the last applied event (-1 when empty)."""
        return len(self.events) - 1

    def sorted_sections(self) -> list[tuple[str, str, int]]:
        """``(name, text, pos)`` of the active system sections, by position then name."""
        ordered = sorted(self.sections.items(), key=lambda kv: (kv[1][1], kv[0]))
        return [(name, text, pos) for name, (text, _, pos) in ordered]

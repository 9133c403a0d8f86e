"""The ledger: what a built-in stage reads and changes, written once for both engines.

Theory of operation
-------------------
Each built-in stage (truncate, summaries, dedup, prune, trim) is one object that
holds its rule: its gate, its per-item texts and numbers, its order, its report
and the words of its decisions. It acts on the prompt only through a `Ledger`,
whose operations are the few bulk moves the stages make: cut every oversized
item, summarize the covered units, replace every superseded result, replace
prune candidates (all, or one at a time in priority order), drop the oldest
groups of units until a level is met. Two engines implement the ledger:

* the reference engine (`PackState`) applies each move item by item, and is
  what custom stages change directly (``replace``, ``drop_unit``...);
* the incremental engine (``_index.IndexedLedger``) answers each move from
  per-unit running sums the `Packer` keeps up to date as the log grows, so a
  pack after one append costs about O(log n) plus the prompt it returns.

A stage cannot tell them apart, so its rule is written once; the engines differ
only in how they add up. ``tests/test_pack_paths.py`` packs every generated
session with both and requires the same bytes, reports and decisions.

Protection (the mandatory tail, pinned events, calls awaiting a result) is the
ledger's, not the stages': no move ever changes a protected unit, except
truncation, which only cuts inside one event and says where the rest is.

The ledger speaks no stage's language: a move takes what it needs of a stage as
a small protocol defined here (`CutRule`, `Replacer`, `Shrinker`, `Superseded`,
`References`, `SummarySection`) or a neutral value (`Marker`, `Replacement`), so
this module imports no stage and a stage imports the ledger, never the reverse.
A new built-in stage that acts through these moves is one module plus its place
in ``DEFAULT_STAGES``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterator, Mapping, MutableMapping, Sequence, Set
from typing import NamedTuple, Protocol

from .._events import TextPart
from .._policy import Policy
from .._projection import Item, Projection, Unit
from .._prompt import Message
from .._tokens import MESSAGE_OVERHEAD, TokenCounter
from ._model import Budget, Limits
from ._rewrites import ItemSizes

__all__: list[str] = []


class Replacement(NamedTuple):
    """What a stage puts in place of an item: the text, its tokens, the rule and the
    numbers in words."""

    text: str
    tokens: int
    rule: str
    detail: str


class Marker:
    """The message a trimmed run leaves in the prompt (rules 2).

    Attributes:
        before: the first kept unit after the gap (the marker goes before it;
            ``-1``: at the end).
        message: the marker message; tokens: its tokens.
    """

    __slots__ = ("before", "message", "tokens")

    def __init__(
        self, before: int, text: str, counter: TokenCounter, count: int | None = None
    ) -> None:
        """``count``: the text's count, when the caller knows it (else counted here)."""
        self.before = before
        self.message = Message(role="user", parts=(TextPart(text=text),))
        self.tokens = MESSAGE_OVERHEAD + (counter.count(text) if count is None else count)


class ReplayMemo:
    """Where a replay over a session's earlier requests (the rules 3 watermarks) keeps
    its state between packs of one projection, so that a pack resumes it where the
    previous one stopped instead of replaying every request again.

    The ledger hands it out (`Ledger.replay_memo`) and answers for what it knows:
    ``edited``, the first unit whose size, as the replay reads it, changed since the
    memo was last handed out (None: none did), and ``left_out``, True when what
    `Ledger.left_out` says changed too (for units from ``edited`` on: a unit a shown
    summary stands for left the protected tail, or joined it); the ledger clears
    ``state`` when the replay's sizes are of another kind (other stage decisions). The
    replay answers for the rest: ``key``, what it read beside the sizes (levels, the
    fixed part of the prompt), and ``state``, its own, which it must not use past
    ``edited``.
    """

    __slots__ = ("edited", "key", "left_out", "seen", "sizes", "state")

    def __init__(self) -> None:
        self.key: Hashable = None
        self.state: object = None
        self.edited: int | None = None
        self.left_out = False
        # the ledger's: which sizes the state was built from, and what it saw changed
        self.sizes: Hashable = None
        self.seen: tuple[int, ...] = ()


class CutRule(Protocol):
    """A stage that cuts oversized items: it words where the rest of a cut item is."""

    def detail(self, item: Item, rule: str) -> str:
        """The decision's detail for ``item`` cut under ``rule``."""
        ...


class Replacer(Protocol):
    """A stage that puts a shorter text in place of an item."""

    def replacement(self, item: Item, ledger: Ledger) -> Replacement:
        """What replaces ``item``, and the rule and numbers in words."""
        ...


class Shrinker(Replacer, Protocol):
    """A `Replacer` that knows its replacement's tokens before making it."""

    def tokens(self, item: Item, policy: Policy, counter: TokenCounter) -> int:
        """Tokens of the message that would replace ``item``."""
        ...


class Superseded(Protocol):
    """Which results a later one makes redundant: item index -> ``(tier, by item
    index, note)``."""

    @property
    def superseded(self) -> Mapping[int, tuple[int, int, str]]: ...


class References(Protocol):
    """How later messages refer to tool results."""

    @property
    def decided(self) -> Set[int]:
        """Results followed by decision language."""

    def refs(self, index: int) -> int:
        """References to result ``index`` so far."""
        ...


class SummarySection(Protocol):
    """Which committed summaries the prompt shows, and the section showing them."""

    @property
    def shown(self) -> Sequence[int]:
        """Positions of the summaries shown, oldest span first."""

    @property
    def text(self) -> str:
        """The summary section ("" when none is shown)."""

    @property
    def tokens(self) -> int:
        """The section's tokens."""

    @property
    def framing(self) -> int:
        """System-message framing the section adds when it opens it."""

    @property
    def why(self) -> Mapping[int, str]:
        """Why a compaction is not shown ("" when it is), by position."""


class Protection:
    """Which units no stage may reduce.

    Under rules 1 (turnlog 0.1.0): the mandatory tail (every unit from the latest
    user message on; with no user message, the last unit), pinned units and units
    with a call still waiting for its result.

    Under rules 2 the mandatory tail is the latest user message (the *opening* of
    the current turn, never dropped) plus the last ``tail_steps`` steps of the turn
    (a step: an assistant message with its calls and their results, and what
    arrived after it); older steps of the turn are ordinary history. With no user
    message, the last ``tail_steps`` steps (at least the last unit). Only calls of
    the current turn await their result; earlier calls without one were abandoned
    and their units are ordinary history.

    Attributes:
        turn_unit: where the current turn starts (its opening user message); for
            rules 1 the same as ``tail_unit``.
        tail_unit: where the protected run of latest steps starts.
        older: protected units before ``tail_unit``, ascending (the opening user
            message under rules 2, pinned units, units awaiting a result).
    """

    __slots__ = ("hard", "older", "older_set", "tail_unit", "turn_unit")

    def __init__(self, view: Projection, policy: Policy) -> None:
        units = view.units
        n_units = len(units)
        turns = view.turn_starts
        if policy.rules < 2:
            older = set(view.open_units)
            self.turn_unit = self.tail_unit = turns[-1] if turns else max(n_units - 1, 0)
        else:
            self.turn_unit = turns[-1] if turns else -1
            self.tail_unit = _tail_start(view, self.turn_unit, policy.tail_steps)
            # a call awaits its result only in the current turn: one left without a
            # result by an earlier turn was abandoned (an interrupted agent), and its
            # unit is ordinary history, answered by a placeholder while it is kept
            start = max(self.turn_unit, 0)
            older = {u for u in view.open_units if u >= start}
            if self.turn_unit >= 0:
                older.add(self.turn_unit)
        items = view.items
        for pos in view.pins:
            index = view.item_at.get(pos)
            if index is not None and items[index].unit >= 0:
                older.add(items[index].unit)
        self.hard = frozenset(older)  # kept even by the last resort of trimming
        self.older = sorted(u for u in older if u < self.tail_unit)
        self.older_set = set(self.older)

    def __contains__(self, unit: int) -> bool:
        return unit >= self.tail_unit or unit in self.older_set

    def units(self, n_units: int) -> Iterator[int]:
        """Every protected unit, ascending."""
        yield from self.older
        yield from range(self.tail_unit, n_units)


def _tail_start(view: Projection, turn_unit: int, steps: int) -> int:
    """Where the last ``steps`` steps after ``turn_unit`` start (rules 2)."""
    n_units = len(view.units)
    assistants = view.assistant_units
    first = bisect_right(assistants, turn_unit)  # the turn's first step
    if len(assistants) - first > steps:
        if steps:
            return assistants[len(assistants) - steps]
        return n_units if turn_unit >= 0 else max(n_units - 1, 0)
    if turn_unit >= 0:
        return min(turn_unit + 1, n_units)
    return 0 if steps else max(n_units - 1, 0)


class Ledger(Protocol):
    """The prompt as it is being packed, and the moves the built-in stages make."""

    @property
    def view(self) -> Projection: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def counter(self) -> TokenCounter: ...
    @property
    def budget(self) -> Budget: ...
    @property
    def total(self) -> int:
        """Tokens of the whole prompt as it stands."""

    @property
    def protection(self) -> Protection: ...
    @property
    def dedup_index(self) -> Superseded: ...
    @property
    def prune_facts(self) -> References: ...
    @property
    def summary_tokens(self) -> MutableMapping[int, int]:
        """A cache of each summary block's tokens, by compaction position."""

    @property
    def clip_limits(self) -> Limits:
        """The most tokens one item may take, any text and a tool result (0: no
        clipping)."""

    def truncate(self, stage: CutRule) -> int:
        """Cut every oversized item; the number cut."""

    def clip(self) -> int:
        """Clip every item over the clip limit (protected ones too); the number."""

    def protected_tokens(self) -> int:
        """Tokens of the protected units and the placeholder results."""

    def summarize_covered(self, plan: SummarySection) -> int:
        """Summarize the covered units that are not protected and show the plan's
        section; the number of items inside the summaries' spans summarized."""

    def keep_originals(self, why: str) -> None:
        """Show the covered events instead of their summaries (rules 2), saying why."""

    def deduplicate(self, stage: Replacer) -> int:
        """Replace every superseded result outside the protected units; the number."""

    def prunable_newest_first(self, end: int) -> Iterator[tuple[int, int]]:
        """``(item, tokens)`` of the tool results prune may consider in units before
        ``end`` (live, not protected, not deduplicated), newest first."""

    def prune_potential(
        self, stage: Shrinker, end: int, shielded: Sequence[int]
    ) -> tuple[int, int, int]:
        """``(tokens, count, saving)`` of the prune candidates: the results of
        `prunable_newest_first` that are not shielded and that pruning shrinks."""

    def prune_candidates(self, stage: Shrinker, end: int, shielded: Sequence[int]) -> list[int]:
        """The prune candidates' item indexes."""

    def prune_all(self, stage: Shrinker, end: int, shielded: Sequence[int]) -> int:
        """Prune every candidate; the number."""

    def prune_one(self, stage: Shrinker, index: int) -> bool:
        """Prune one candidate."""

    def drop_oldest(
        self, ends: Sequence[int], target: int, why: Callable[[Unit], tuple[str, str]]
    ) -> tuple[int, int]:
        """Drop the unprotected units before ``ends[k]`` for the smallest ``k`` that
        brings the prompt to ``target`` tokens (or before the last end); ``why`` gives
        a dropped unit's rule and detail. Units wholly summarized stay summarized.
        Returns ``(groups, units)`` dropped."""

    def droppable_before(self) -> Callable[[int], int]:
        """``f(end)``: tokens of the unprotected, unsummarized units before unit
        ``end``, as the stages so far left them (what dropping them would save)."""

    def kept_before(self) -> Callable[[int], int]:
        """``f(end)``: tokens of the unsummarized units before unit ``end``, protected
        or not, as the stages so far left them (rules 3 sizes past requests with it)."""

    def replay_memo(self, slot: Hashable) -> ReplayMemo | None:
        """The memo kept in ``slot`` for a replay reading `kept_before` (see
        `ReplayMemo`), None when the engine keeps none (the replay starts over)."""

    @property
    def sizes(self) -> ItemSizes:
        """The policy's per-item sizes (tokens, pruning savings, dedup marks)."""

    def left_out(self, unit: int) -> bool:
        """True for a unit a shown summary stands for (not in the prompt)."""

    def rewrite(
        self,
        deduplicated: Sequence[int],
        pruned: Sequence[int],
        dedup: Replacer,
        prune: Replacer,
        note: str,
    ) -> tuple[int, int]:
        """Rules 3: replace the given superseded and prunable results (those not
        protected and in the prompt), their decisions' details ending with ``note``;
        ``(deduplicated, pruned)`` counts."""

    def keep(self, unit: int) -> None:
        """Keep one more unit through trimming (rules 3: the opening message of the
        turn of the latest prefix break, until the next break), unless a summary shown
        stands for it."""

    def release(self, units: Sequence[int], why: Callable[[Unit], tuple[str, str]]) -> int:
        """Drop the units `keep` kept among ``units`` (each before the cut), with the
        decision ``why`` gives (rules 3: what the latest prefix break kept, when the
        prompt cannot fit with it); how many were dropped."""

    def drop_tail(
        self, ends: Sequence[int], target: int, why: Callable[[Unit], tuple[str, str]]
    ) -> tuple[int, int]:
        """The last resort (rules 2): like `drop_oldest` over the protected latest
        steps (``ends`` past the tail's start), keeping the turn's opening message,
        pinned units and calls awaiting a result."""

    def dropped_run(self) -> tuple[int, int, int] | None:
        """``(first position, last position, first kept unit after them or -1)`` of
        the units dropped so far; None when none was."""

    def mark(self, marker: Marker) -> None:
        """Put the trimming marker in the prompt (its tokens count from now on)."""

    def settle(self) -> None:
        """Count the placeholder results of kept units only (a unit with calls that
        never got a result may be trimmed or summarized under rules 2)."""


def live_items(view: Projection) -> Iterator[Item]:
    """Items that belong to a unit (orphan results excluded)."""
    return (item for item in view.items if item.unit >= 0)

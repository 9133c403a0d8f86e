"""Stage 5, pruning: old tool results become placeholders, most prunable first.

Candidates are tool results outside the protected region: the last
``prune_protect_turns`` user turns and, walking back from there, the most
recent ``prune_protect_tokens`` of tool output (the walk stops at the first
result that does not fit). Each candidate's prunability is

    weight(kind) - prune_reference_bonus x references - prune_decision_bonus x decided

where ``references`` counts later assistant messages that name the result's
target file or quote one of its first distinctive lines (a message doing both
counts once), and ``decided`` is 1 when the assistant message that followed
the result uses decision language. Highest prunability goes first, ties oldest
first, until the prompt is at the warning level; pruning runs only at the
warning level and when the candidates could save ``prune_min_savings``.

`PruneFacts` keeps the references and decision language incrementally (per
session: they do not depend on the policy): a message naming a file read a
thousand times costs one step, not a thousand.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import xxhash

from .._events import AssistantMessageAdded, TextPart, ToolCall
from .._policy import Policy
from .._projection import Item
from .._tokens import MESSAGE_OVERHEAD, TokenCounter
from ._dedup import basename
from ._ledger import Ledger, Replacement
from ._model import StageReport

__all__: list[str] = []

# Path-like tokens: the regex r"[\w./\\-]*\w\.\w{1,8}\b", matched by `pathish` in
# linear time (the regex itself backtracks quadratically on a long run of its
# characters, e.g. a line of dashes or a base64 argument: seconds for 16 KB).
_PATH_RUN = re.compile(r"[\w./\\-]*")
_PATH_END = re.compile(r"\w\.\w{1,8}\b")
#: Decision language: these phrases, whole words, in any case. `_DECISION` is their
#: alternation with common prefixes factored out (the same matches; the regex engine
#: then tries fewer branches at each position of the text).
DECISION_PHRASES = (
    "based on",
    "i'll use",
    "i will use",
    "the issue is",
    "the problem is",
    "this shows",
    "that means",
    "so the fix",
    "root cause",
    "because",
    "therefore",
    "the bug is",
)
_DECISION = re.compile(
    r"\b(?:b(?:ased on|ecause)|i(?:'ll use| will use)|"
    r"th(?:e (?:issue|problem|bug) is|is shows|at means|erefore)|so the fix|root cause)\b",
    re.IGNORECASE,
)
# The same alternation, case-sensitive: on ASCII text, which no character outside
# ASCII folds to, IGNORECASE matches exactly what this matches in the lowercased text.
_DECISION_LOWER = re.compile(_DECISION.pattern)
_QUOTE_MIN = 24


def decides(text: str) -> bool:
    """Whether ``text`` holds decision language (``_DECISION.search``). ASCII text is
    lowercased and searched from the first place a phrase occurs (the phrases found by
    substring search, in C), several times faster than the case-insensitive regex."""
    if not text.isascii():
        return _DECISION.search(text) is not None
    low = text.lower()
    start = min((at for at in map(low.find, DECISION_PHRASES) if at >= 0), default=-1)
    return start >= 0 and _DECISION_LOWER.search(low, start) is not None


def pathish(text: str) -> list[str]:
    r"""``re.findall(r"[\w./\\-]*\w\.\w{1,8}\b", text)``, in linear time.

    Every character of a match is in the class, so a match lies in one maximal run
    of class characters; it starts where the run starts (the regex tries the
    earliest start first) and, the star being greedy, ends after the last place
    in the run where ``\w\.\w{1,8}\b`` matches; it then leaves no room for a
    second match in that run.

    A match holds a dot, so only the runs holding one are looked at: from each
    dot not yet passed, the run is found forward in the text and backward in the
    reversed text (both linear, in C), and the next run is looked for from its
    end; most text has few dots.
    """
    found: list[str] = []
    dot = text.find(".")
    if dot < 0:
        return found
    backward = text[::-1]
    size = len(text)
    while dot >= 0:
        # text[dot - 1], text[dot - 2]... are backward[size - dot], backward[size - dot + 1]...
        before = _PATH_RUN.match(backward, size - dot)
        assert before is not None
        start = dot - (before.end() - (size - dot))
        after = _PATH_RUN.match(text, dot)
        assert after is not None
        end = after.end()
        dot = text.rfind(".", start + 1, end - 1)
        while dot >= 0:
            tail = _PATH_END.match(text, dot - 1)
            if tail is not None:
                found.append(text[start : tail.end()])
                break
            dot = text.rfind(".", start + 1, dot)
        dot = text.find(".", end)
    return found


def line_key(line: str) -> int:
    """The key a distinctive line is quoted by."""
    return int(xxhash.xxh3_64_intdigest(line.encode("utf-8", "surrogatepass")))


def quote_keys(text: str) -> tuple[int, ...]:
    """Keys of the first three distinctive lines of a result."""
    # The first lines come from a growing prefix: a long output is not split whole.
    # A prefix's lines are the text's lines but for its last one, which may be cut
    # (or end at the "\r" of a "\r\n"), so that one waits for a longer prefix.
    size = 4_096
    while True:
        whole = size >= len(text)
        lines = text.splitlines() if whole else text[:size].splitlines()[:-1]
        keys: list[int] = []
        for raw in lines:
            line = raw.strip()
            if len(line) >= _QUOTE_MIN:
                keys.append(line_key(line))
                if len(keys) == 3:
                    return tuple(keys)
        if whole:
            return tuple(keys)
        size *= 4


def _refs(
    base: dict[int, tuple[str, int]], mentions: dict[str, int], quoted: dict[int, int], index: int
) -> int:
    """A result's references: the mentions of its target's base name since it arrived,
    plus the messages that quoted it without naming its target."""
    named = 0
    found = base.get(index)
    if found is not None:
        named = mentions[found[0]] - found[1]
    return named + quoted.get(index, 0)


class PruneFacts:
    """References to tool results by later assistant messages, and decision language.

    Folds a projection's items in order (`catch_up`). A result's ``refs`` is the
    mention counter of its target's base name now minus that counter when it
    arrived, plus the messages that quoted it without naming its target.
    """

    def __init__(self) -> None:
        self.done = 0  # items folded in
        self.decided: set[int] = set()  # results followed by decision language
        self._mentions: dict[str, int] = {}  # target base name -> messages naming it
        self._base: dict[int, tuple[str, int]] = {}  # result -> (base name, counter then)
        self._quoted: dict[int, int] = {}  # result -> quoting messages not naming it
        self._quotes: dict[int, tuple[int, ...]] = {}  # quote key -> results
        self._since: list[int] = []  # results since the last assistant message

    def refs(self, index: int) -> int:
        """References to result ``index`` so far."""
        return _refs(self._base, self._mentions, self._quoted, index)

    def as_of_now(self) -> RefsAsOf:
        """The references and decision language of every result so far, frozen: later
        items change what `refs` says, not what this says."""
        return RefsAsOf(
            self._base,
            dict(self._mentions),
            dict(self._quoted),
            self.decided,
            frozenset(self._since),
        )

    def catch_up(self, items: Sequence[Item]) -> None:
        """Fold in the items appended since the last call."""
        for index in range(self.done, len(items)):
            item = items[index]
            if item.kind == "assistant":
                body = item.event.body
                assert isinstance(body, AssistantMessageAdded)
                self._assistant(body)
            elif item.kind == "tool" and item.unit >= 0:
                self._result(item)
        self.done = len(items)

    def _result(self, item: Item) -> None:
        if item.target:
            name = basename(item.target)
            if name:
                self._base[item.index] = (name, self._mentions.setdefault(name, 0))
        body = item.event.body
        for key in quote_keys(getattr(body, "output", "")):
            self._quotes[key] = (*self._quotes.get(key, ()), item.index)
        self._since.append(item.index)

    def _assistant(self, body: AssistantMessageAdded) -> None:
        texts = [p.text for p in body.parts if isinstance(p, TextPart)]
        texts += [p.arguments for p in body.parts if isinstance(p, ToolCall)]
        text = "\n".join(texts)
        if self._since and decides(text):
            self.decided.update(self._since)
        self._since = []
        named = {basename(match) for match in pathish(text)}
        mentions = self._mentions
        for key in named:
            if key in mentions:
                mentions[key] += 1
        quoted: set[int] = set()
        for raw in text.splitlines():
            line = raw.strip()
            if len(line) >= _QUOTE_MIN:
                quoted.update(self._quotes.get(line_key(line), ()))
        for index in quoted:
            base = self._base.get(index)
            if base is None or base[0] not in named:
                self._quoted[index] = self._quoted.get(index, 0) + 1


class RefsAsOf:
    """`PruneFacts` as of one moment (see `PruneFacts.as_of_now`). A result's base
    name entry is written once; ``decided`` only grows, and only with results that
    were still waiting for an assistant message (``since``) then."""

    __slots__ = ("_base", "_decided", "_mentions", "_quoted", "_since")

    def __init__(
        self,
        base: dict[int, tuple[str, int]],
        mentions: dict[str, int],
        quoted: dict[int, int],
        decided: set[int],
        since: frozenset[int],
    ) -> None:
        self._base, self._mentions, self._quoted = base, mentions, quoted
        self._decided, self._since = decided, since

    def refs(self, index: int) -> int:
        """References to result ``index`` then."""
        return _refs(self._base, self._mentions, self._quoted, index)

    def decided(self, index: int) -> bool:
        """Whether decision language followed result ``index`` then."""
        return index in self._decided and index not in self._since


class Prune:
    """The pruning stage (see the module docstring)."""

    name = "prune"
    decision = "pruned"

    @staticmethod
    def text(item: Item, policy: Policy) -> str:
        """The placeholder of a pruned result: it keeps the tool name and target."""
        kind = policy.kind_of(item.tool_name)
        if kind in ("bash", "shell_read"):
            return (
                "[Old shell output cleared; inspect truncation storage or rerun targeted "
                "commands if needed]"
            )
        if kind == "glob":
            return "[Old glob output cleared]"
        if item.target:
            return f"[Old {item.tool_name} output cleared for {item.target}]"
        return "[Old tool result content cleared]"

    @staticmethod
    def tokens(item: Item, policy: Policy, counter: TokenCounter) -> int:
        """Tokens of the placeholder message of a pruned result."""
        return MESSAGE_OVERHEAD + 1 + counter.count(Prune.text(item, policy))

    @staticmethod
    def priority(item: Item, policy: Policy, refs: int, decided: bool) -> int:
        """Prunability: the kind's weight minus the bonuses (higher goes first)."""
        weights = policy.tool_weights
        return (
            weights.get(policy.kind_of(item.tool_name), weights.get("other", 50))
            - policy.prune_reference_bonus * refs
            - (policy.prune_decision_bonus if decided else 0)
        )

    @staticmethod
    def detail(item: Item, policy: Policy, refs: int, decided: bool) -> str:
        """The decision detail of a pruned result."""
        return (
            f"priority {Prune.priority(item, policy, refs, decided)} (kind "
            f"{policy.kind_of(item.tool_name)}, {refs} references, decision language "
            f"{'yes' if decided else 'no'})"
        )

    def replacement(self, item: Item, ledger: Ledger) -> Replacement:
        """What replaces a pruned item, and the rule and numbers in words."""
        policy = ledger.policy
        facts = ledger.prune_facts
        refs, decided = facts.refs(item.index), item.index in facts.decided
        return Replacement(
            self.text(item, policy),
            self.tokens(item, policy, ledger.counter),
            "prune.score",
            self.detail(item, policy, refs, decided),
        )

    @staticmethod
    def boundary(ledger: Ledger) -> int:
        """Units before this index are older than the protected turns."""
        turns = ledger.view.turn_starts
        first_protected = len(turns) - ledger.policy.prune_protect_turns + 1
        if first_protected <= 0:
            return 0
        if first_protected <= len(turns):
            return turns[first_protected - 1]
        return len(ledger.view.units)

    @staticmethod
    def shield(results: Iterator[tuple[int, int]], budget: int) -> list[int]:
        """The newest results within ``prune_protect_tokens`` (newest first): the walk
        back stops at the first result that does not fit."""
        shielded: list[int] = []
        for index, tokens in results:
            if tokens > budget:
                break
            budget -= tokens
            shielded.append(index)
        return shielded

    def __call__(self, ledger: Ledger) -> StageReport:
        policy = ledger.policy
        before = ledger.total
        warning = ledger.budget.warning
        if policy.rules >= 3 and warning > 0:
            # rules 3 keeps the prefix: earlier results are rewritten together at a
            # prefix break (`_rewrites`, applied by trimming) or by a recovery pack
            # (whose warning level is 0)
            return StageReport(
                name="prune",
                fired=False,
                detail=(
                    "rules 3 keep the prompt's prefix: prune acts at a prefix break "
                    "(see trim) and in a recovery pack"
                ),
                tokens_before=before,
                tokens_after=before,
            )
        if not policy.prune:
            return StageReport(name="prune", fired=False, detail="disabled by policy")
        if before < warning:
            return StageReport(
                name="prune",
                fired=False,
                detail=f"pressure below warning ({before} < {warning} tokens)",
                tokens_before=before,
                tokens_after=before,
            )
        end = self.boundary(ledger)
        shielded = self.shield(ledger.prunable_newest_first(end), policy.prune_protect_tokens)
        potential, count, saving = ledger.prune_potential(self, end, shielded)
        if potential < policy.prune_min_savings or not count:
            return StageReport(
                name="prune",
                fired=False,
                detail=f"potential savings {potential} < minimum {policy.prune_min_savings}",
                tokens_before=before,
                tokens_after=before,
            )
        if before - saving > warning:  # every candidate goes, in any order
            pruned = ledger.prune_all(self, end, shielded)
        else:
            pruned = self._in_order(ledger, end, shielded, warning)
        return StageReport(
            name="prune",
            fired=pruned > 0,
            detail=f"{pruned} of {count} candidates pruned",
            tokens_before=before,
            tokens_after=ledger.total,
            events=pruned,
        )

    def _in_order(self, ledger: Ledger, end: int, shielded: list[int], warning: int) -> int:
        """Prune the most prunable candidates first until the prompt is at the warning
        level."""
        policy, facts, items = ledger.policy, ledger.prune_facts, ledger.view.items
        order = sorted(
            (-self.priority(items[i], policy, facts.refs(i), i in facts.decided), items[i].pos, i)
            for i in ledger.prune_candidates(self, end, shielded)
        )
        pruned = 0
        for _, _, index in order:
            if ledger.total <= warning:
                break
            if ledger.prune_one(self, index):
                pruned += 1
        return pruned

"""Stage 4, dedup: superseded tool results become the seed's placeholders.

Three tiers (seed 003), checked as results arrive:

1. an identical later result of the same read/grep/glob call (same tool, same
   arguments, same output);
2. a file read made stale by an edit of the file and a later re-read;
3. a grep on a file subsumed by a later full read of that file.

`DedupIndex` finds them incrementally (the `Packer`'s index keeps one per
tool-kind mapping); the stage replaces every superseded result outside the
protected units once the prompt is at the warning level.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import xxhash

from .._events import ToolResultAdded
from .._policy import tool_kind
from .._projection import Item
from .._tokens import MESSAGE_OVERHEAD, TokenCounter
from ._ledger import Ledger, Replacement
from ._model import StageReport

__all__: list[str] = []

_TEXT = {
    1: "[Superseded -- identical result returned by later call]",
    2: "[Superseded -- file was re-read after modification]",
    3: "[Superseded -- content included in later file_read of {name}]",
}
_PARTIAL_KEYS = ("offset", "limit", "view_range", "line")


def basename(path: str) -> str:
    """The last component of a path (``/`` or ``\\`` separated)."""
    return path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


class DedupIndex:
    """Which tool results a later result makes redundant, for one tool-kind mapping.

    ``superseded`` maps an item index to ``(tier, by item index, note)``; ``marked``
    lists its keys in the order they were marked. Marks are never removed.
    """

    def __init__(self, kinds: Mapping[str, str]) -> None:
        self.kinds = dict(kinds)
        self.superseded: dict[int, tuple[int, int, str]] = {}
        self.marked: list[int] = []
        self._exact: dict[bytes, int] = {}
        self._reads: dict[str, list[int]] = {}
        self._stale: dict[str, list[int]] = {}
        self._greps: dict[str, list[int]] = {}

    def kind(self, tool_name: str) -> str:
        """The tool kind of a name under this mapping (``other`` if unknown)."""
        return tool_kind(self.kinds, tool_name)

    def add(self, item: Item) -> None:
        """Fold in the next tool result (of a unit) in lineage order."""
        body = item.event.body
        assert isinstance(body, ToolResultAdded)
        kind = self.kind(item.tool_name)
        if body.is_error:
            return
        if kind in ("file_read", "grep", "glob"):
            key = xxhash.xxh3_128_digest(
                f"{item.tool_name}\x00{json.dumps(item.args, sort_keys=True)}\x00".encode(
                    "utf-8", "surrogatepass"
                )
                + body.output.encode("utf-8", "surrogatepass")
            )
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
            if not any(k in item.args for k in _PARTIAL_KEYS):  # a full read
                for grep in self._greps.pop(target, []):
                    self._mark(grep, (3, item.index, basename(target)))
            self._reads.setdefault(target, []).append(item.index)
        elif kind in ("file_edit", "file_write"):
            self._stale.setdefault(target, []).extend(self._reads.pop(target, []))
        elif kind == "grep" and "." in basename(target):
            self._greps.setdefault(target, []).append(item.index)

    def _mark(self, index: int, mark: tuple[int, int, str]) -> None:
        if index not in self.superseded:
            self.superseded[index] = mark
            self.marked.append(index)


class Dedup:
    """The dedup stage (see the module docstring)."""

    name = "dedup"
    decision = "deduplicated"

    @staticmethod
    def text(mark: tuple[int, int, str]) -> str:
        """The placeholder of a superseded result."""
        tier, _, name = mark
        return _TEXT[tier].format(name=name)

    @staticmethod
    def tokens(mark: tuple[int, int, str], counter: TokenCounter) -> int:
        """Tokens of the placeholder message of a superseded result."""
        return MESSAGE_OVERHEAD + 1 + counter.count(Dedup.text(mark))

    def replacement(self, item: Item, ledger: Ledger) -> Replacement:
        """What replaces a superseded item, and the rule and numbers in words."""
        mark = ledger.dedup_index.superseded[item.index]
        by = ledger.view.items[mark[1]].pos
        return Replacement(
            self.text(mark),
            self.tokens(mark, ledger.counter),
            f"dedup.tier{mark[0]}",
            f"superseded by position {by}",
        )

    def __call__(self, ledger: Ledger) -> StageReport:
        policy = ledger.policy
        before = ledger.total
        if not policy.dedup:
            return StageReport(name="dedup", fired=False, detail="disabled by policy")
        warning = ledger.budget.warning
        if policy.rules >= 3 and warning > 0:
            # rules 3 keeps the prefix: earlier results are rewritten together at a
            # prefix break (`_rewrites`, applied by trimming) or by a recovery pack
            # (whose warning level is 0)
            return StageReport(
                name="dedup",
                fired=False,
                detail=(
                    "rules 3 keep the prompt's prefix: dedup acts at a prefix break "
                    "(see trim) and in a recovery pack"
                ),
                tokens_before=before,
                tokens_after=before,
            )
        if before < warning:
            return StageReport(
                name="dedup",
                fired=False,
                detail=f"pressure below warning ({before} < {warning} tokens)",
                tokens_before=before,
                tokens_after=before,
            )
        count = ledger.deduplicate(self)
        return StageReport(
            name="dedup",
            fired=count > 0,
            detail=f"{count} results superseded",
            tokens_before=before,
            tokens_after=ledger.total,
            events=count,
        )

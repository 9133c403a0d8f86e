"""Stage 2, truncation: oversized tool outputs and notifications keep head and tail.

Tool outputs and notifications over ``truncate_lines`` or ``truncate_bytes`` keep
their head (``truncate_head_ratio``) and tail around a notice that names where the
whole output is: its blob (``turnlog blob HASH``) or its event (``turnlog show
SESSION SEQ``), or, for outputs appended while the context tools were registered
(``Item.kit``), the ``read_output`` tool and the ref to pass it. Outputs stored
as blobs already carry a head/tail preview: decision
``truncated``, rule ``truncate.blob_preview``. Recall results are capped by
``recall_max_chars`` and ``recall_max_tokens``.

Truncation cuts inside one event and says where the rest is, so it applies to
protected units too. What it does to an item depends on the item and on the
policy fields in `key` only; `cut` computes it once per item and key (the
`Packer`'s index caches it), and both engines read it from there.
"""

from __future__ import annotations

from typing import NamedTuple

from .._events import NotificationAdded, RecallAdded, ToolResultAdded
from .._policy import Policy
from .._projection import Item, notification_text, recall_text
from .._tokens import MESSAGE_OVERHEAD, TokenCounter
from .._validation import plural
from ._ledger import Ledger
from ._model import StageReport

__all__: list[str] = []

#: How a notice names the context tools' ``read_output`` (outputs appended while
#: the kit was in the tools in force: ``Item.kit``); the ref follows in quotes.
_KIT_HINT = "read ranges of it with the read_output tool, ref"

#: Item kinds whose content a stage may replace (never user or assistant messages).
REPLACEABLE = ("tool", "notification", "recall")


class Cut(NamedTuple):
    """An item's truncation: the rule that fired, the text kept, its tokens."""

    rule: str
    text: str
    tokens: int


class Truncate:
    """The truncation stage (see the module docstring)."""

    name = "truncate"

    @staticmethod
    def key(policy: Policy) -> tuple[float, ...] | None:
        """Everything `cut` reads from the policy (None when truncation is off)."""
        if not policy.truncate:
            return None
        return (
            policy.truncate_lines,
            policy.truncate_bytes,
            policy.truncate_head_ratio,
            policy.recall_max_chars,
            policy.recall_max_tokens,
        )

    @staticmethod
    def cut(item: Item, policy: Policy, counter: TokenCounter) -> Cut | None:
        """The item's truncation under ``policy`` (None when it stays whole)."""
        if item.kind not in REPLACEABLE or item.unit < 0:
            return None
        text, rule = _truncated_text(item, policy, counter)
        if not rule:
            return None
        return Cut(rule, text, MESSAGE_OVERHEAD + 1 + counter.count(text))

    @staticmethod
    def detail(item: Item, rule: str) -> str:
        """The decision detail of a truncated item."""
        blob = getattr(item.event.body, "blob", None)
        if rule == "truncate.blob_preview" and blob is not None:
            return f"stored as blob {blob.hash[:16]} ({blob.size} bytes); preview kept"
        return rule.removeprefix("truncate.")

    def __call__(self, ledger: Ledger) -> StageReport:
        if not ledger.policy.truncate:
            return StageReport(name="truncate", fired=False, detail="disabled by policy")
        before = ledger.total
        count = ledger.truncate(self)
        return StageReport(
            name="truncate",
            fired=count > 0,
            detail=f"{plural(count, 'output')} truncated",
            tokens_before=before,
            tokens_after=ledger.total,
            events=count,
        )


def _truncated_text(item: Item, policy: Policy, counter: TokenCounter) -> tuple[str, str]:
    """(text, rule) for an item after truncation; rule is "" when untouched."""
    body = item.event.body
    if isinstance(body, RecallAdded):
        return capped_recall(body, policy, counter)
    if isinstance(body, NotificationAdded):
        text = body.text
        blob = body.blob
    elif isinstance(body, ToolResultAdded):
        text = body.output
        blob = body.blob
    else:
        return "", ""
    n_lines = text.count("\n") + 1
    # n characters are n to 4n UTF-8 bytes: encode only when it can matter.
    data_len = (
        len(text.encode("utf-8", "surrogatepass"))
        if len(text) * 4 > policy.truncate_bytes
        else len(text)
    )
    if n_lines <= policy.truncate_lines and data_len <= policy.truncate_bytes:
        if blob is not None:
            if item.kit:
                text = text.replace(
                    f"is blob {blob.hash} ...]",
                    f'is blob {blob.hash}; {_KIT_HINT} "{blob.hash}" ...]',
                    1,
                )
            return _render(item, text), "truncate.blob_preview"
        return "", ""
    if item.kit:
        ref = blob.hash if blob else f"{item.event.session}#{item.event.seq}"
        where = (f"blob {ref}" if blob else f"event {ref}") + f' ({_KIT_HINT} "{ref}")'
    else:
        where = (
            f"blob {blob.hash} (read it back with `turnlog blob {blob.hash}`)"
            if blob
            else f"event {item.event.session}#{item.event.seq} (`turnlog show "
            f"{item.event.session} {item.event.seq}`)"
        )
    head, tail, omitted_lines, omitted_chars = _head_and_tail(text, policy)
    rule = "truncate.lines" if n_lines > policy.truncate_lines else "truncate.bytes"
    notice = (
        f"\n[... truncated: {omitted_lines} lines ({omitted_chars} characters) omitted. "
        f"The full output is {where}; inspect it with targeted grep/read calls rather "
        f"than pasting it back into context ...]\n"
    )
    return _render(item, head + notice + tail), rule


def _head_and_tail(text: str, policy: Policy) -> tuple[str, str, int, int]:
    """Head and tail kept by the policy's limits, and the lines and characters omitted."""
    lines = text.split("\n")
    head_lines = max(1, int(policy.truncate_lines * policy.truncate_head_ratio))
    tail_lines = max(1, policy.truncate_lines - head_lines)
    head_bytes = max(16, int(policy.truncate_bytes * policy.truncate_head_ratio))
    tail_bytes = max(16, policy.truncate_bytes - head_bytes)
    if len(lines) > head_lines + tail_lines:
        head = "\n".join(lines[:head_lines])
        tail = "\n".join(lines[-tail_lines:])
    else:  # over the byte limit in few (maybe one) lines: cut the text itself
        head = tail = text
    head = _cut_bytes(head, head_bytes, from_end=False)
    tail = _cut_bytes(tail, tail_bytes, from_end=True)
    omitted_chars = max(0, len(text) - len(head) - len(tail))
    omitted_lines = max(0, len(lines) - head.count("\n") - tail.count("\n") - 2)
    return head, tail, omitted_lines, omitted_chars


def _cut_bytes(text: str, limit: int, *, from_end: bool) -> str:
    if len(text) <= limit // 4:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    piece = data[len(data) - limit :] if from_end else data[:limit]
    return piece.decode("utf-8", "ignore")


def _render(item: Item, text: str) -> str:
    body = item.event.body
    if isinstance(body, NotificationAdded):
        return notification_text(body.source, text)
    return text


def capped_recall(body: RecallAdded, policy: Policy, counter: TokenCounter) -> tuple[str, str]:
    """A recall result within ``recall_max_chars`` and ``recall_max_tokens``: as many
    whole hits as fit (then cut to the character cap); rule "" when it fits whole."""
    full = recall_text(body, len(body.hits))
    if len(full) <= policy.recall_max_chars and counter.count(full) <= policy.recall_max_tokens:
        return "", ""
    keep = len(body.hits)
    text = full
    while keep > 0:
        keep -= 1
        text = recall_text(body, keep)
        if len(text) <= policy.recall_max_chars and counter.count(text) <= policy.recall_max_tokens:
            break
    if len(text) > policy.recall_max_chars:
        text = text[: policy.recall_max_chars]
    return text, "truncate.recall_cap"

"""Generate docs/policy.md's reference of the policy TOML from `turnlog.Policy`.

For every part of a policy (`turnlog.packing.POLICY_PARTS`, the TOML tables ``[budget]``,
``[truncation]``...) a table gives each field in the part's order with its type
and allowed range (read from the class's annotations), its default (read from a
default `Policy`), what it means and where its default comes from (`MEANINGS`
and `SOURCES` below: a field added to the class shows up with an empty meaning
until it is described here, and the test that keeps the document current fails
until then).

    python -m turnlog.tools.policydoc --write docs/policy.md   # regenerate
    python -m turnlog.tools.policydoc --check docs/policy.md   # exit 1 if stale

The generated part sits between the ``<!-- policy:begin -->`` and
``<!-- policy:end -->`` markers; the rest of the document is hand-written.
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
from turnlog import Policy
from turnlog.packing import POLICY_PARTS

__all__ = ["BEGIN", "END", "MEANINGS", "SOURCES", "main", "render", "replace"]

BEGIN = "<!-- policy:begin -->"
END = "<!-- policy:end -->"

#: Field -> what it means.
MEANINGS: dict[str, str] = {
    "context_window": "The model's context window in tokens (prompt and output).",
    "output_reserve": "Tokens kept free for the model's output.",
    "safety_margin": "Tokens kept free besides the output reserve. The usable budget is "
    "`context_window - output_reserve - safety_margin`.",
    "warning_buffer": "Warning level as a buffer: pressure is high when fewer than this "
    "many usable tokens remain. Dedup and pruning act from here.",
    "warning_ratio": "Warning level as a ratio of the usable budget (with a buffer too, "
    "the earlier one wins).",
    "compact_buffer": "Compaction level as a buffer: `compaction_due` when fewer than this "
    "many usable tokens remain.",
    "compact_ratio": "Compaction level as a ratio of the usable budget.",
    "blocking_buffer": "Blocking level as a buffer: above it whole turns are trimmed.",
    "blocking_ratio": "Blocking level as a ratio of the usable budget.",
    "tokenizer": "The tiktoken encoding prompts are counted with (`cl100k_base`, `o200k_base`...).",
    "truncate": "Truncate long tool outputs and notifications.",
    "truncate_lines": "An output over this many lines is truncated.",
    "truncate_bytes": "An output over this many UTF-8 bytes is truncated.",
    "truncate_head_ratio": "Share of a truncated output kept from its head; the rest "
    "comes from its tail.",
    "dedup": "Replace a tool result superseded by a later identical call (a re-read of "
    "an unchanged file, a repeated search) with a note.",
    "prune": "Replace old tool results with placeholders under pressure.",
    "prune_protect_turns": "The latest user turns whose tool results are never pruned.",
    "prune_protect_tokens": "Tokens of the most recent tool results protected from "
    "pruning, walking back from the protected turns.",
    "prune_min_savings": "Prune only when it would save at least this many tokens.",
    "prune_reference_bonus": "Score taken off a result for each later message that "
    "refers to it (referenced results are pruned last).",
    "prune_decision_bonus": "Score taken off a result a later decision rests on.",
    "tool_kinds": "Tool name -> kind (`file_read`, `file_edit`, `file_write`, `grep`, "
    "`glob`, `bash`, `shell_read`, `web_fetch`, `web_search`, `other`); a "
    "table replaces the whole default map.",
    "tool_weights": "Kind -> pruning weight: higher is pruned first.",
    "trim": "Drop whole oldest turns when the prompt is over the blocking level.",
    "trim_low_ratio": "Rules 3: when the kept history passes the blocking level, cut it "
    "down to this share of the blocking level, at a turn or step "
    "boundary (the low watermark).",
    "summary_budget": "Share of the history budget committed summaries may take before "
    "the oldest are left out.",
    "summary_max_tokens": "Largest summary a summarizer may return, in tokens.",
    "auto_compact": "Let `Compactor.maybe_compact` compact when the compact level is reached.",
    "compact_cooldown_turns": "Turns to wait after a compaction before the next automatic one.",
    "compact_every_turns": "Compact every N turns whatever the pressure (0: never).",
    "compact_every_tool_calls": "Compact every N tool calls whatever the pressure (0: never).",
    "compact_max_failures": "Consecutive failed compactions that open the circuit breaker "
    "(packing then trims until pressure drops).",
    "keep_recent_turns": "Most recent turns a compaction never covers.",
    "keep_recent_messages": "At least this many recent messages stay out of a compaction.",
    "summary_model": "Informational: the model a model summarizer should use (the kernel "
    "never calls a model).",
    "segment_target_tokens": "A compaction summarizes its span in segments of about this "
    "many tokens.",
    "segment_min_tokens": "Smallest segment, in tokens.",
    "segment_min_messages": "A segment may also close after this many messages.",
    "rollup_fanout": "Every this many consecutive summaries of one level are rolled up "
    "into one summary of the next level.",
    "memory_max_count": "Most memories in the memory block.",
    "memory_max_chars": "Largest memory block in characters: whole entries are dropped "
    "from the end until it fits.",
    "memory_working_max": "Most recent working memories kept in the block.",
    "memory_summary_keep": "Summary memories from compactions kept by consolidation "
    "(the most recent unpinned ones).",
    "memory_refresh": "Points at which the memory block may be re-rendered into a "
    "session: `session_start`, `compaction`, `every_turn`, `manual`.",
    "recall_max_chars": "Most characters of recall results in one recall event.",
    "recall_max_tokens": "Most tokens of recall results in one recall event.",
    "cache_breakpoints": "Most prompt-cache breakpoints placed in a prompt.",
    "cache_horizon_turns": "Turns ahead the compaction cost model weighs cache reads over.",
    "cache_write_price": "Price of a cache write per million tokens (compaction cost model).",
    "cache_read_price": "Price of a cache read per million tokens (compaction cost model).",
    "input_price": "Informational: price of uncached input per million tokens.",
    "rules": "Packing rules version: 1 is turnlog 0.1.0's, 2 adds the step tail, clipping, "
    "unique call ids, gated summaries and trim markers, 3 keeps the prompt's prefix "
    "(trimming with hysteresis, dedup and pruning in recovery only) and scales the "
    "defaults with the window (docs/packing.md). 0 (unset): a policy handed in "
    "packs and records with the newest rules (3), written out in its `PolicySet`; "
    "one read back from a 0.1.0 log means 1. A new rule is a new version, so old "
    "records keep their meaning.",
    "tail_steps": "Rules 2: the mandatory tail is the latest user message plus this many "
    "last steps.",
    "clip_ratio": "Rules 2: an item over this share of the history budget is clipped.",
    "tool_clip_ratio": (
        "Rules 2: a tool result, or a tool call's arguments, over this share of the history "
        "budget is clipped (to at least 256 tokens, never more than `clip_ratio` allows); "
        "unset, tool traffic shares `clip_ratio`. 0.05 with `trim_low_ratio` 0.7 is the "
        "cache-first setting of docs/packing.md."
    ),
    "summary_gate": "Rules 2: committed summaries replace their events only when the "
    "pressure reaches this ratio.",
}

#: Field -> where its default comes from (the design seeds: the context managers turnlog
#: does the work of, see docs/packing.md).
SOURCES: dict[str, str] = {
    "output_reserve": "seed 003 `reserve_output_tokens`",
    "warning_buffer": "seed 003",
    "compact_buffer": "seed 003 `auto_compact_buffer_tokens`",
    "blocking_buffer": "seed 003",
    "keep_recent_turns": "seed 003",
    "truncate_lines": "seed 003",
    "truncate_bytes": "seed 003",
    "prune_protect_turns": "seed 003",
    "prune_protect_tokens": "seed 003",
    "prune_min_savings": "seed 003",
    "prune_reference_bonus": "seed 003",
    "prune_decision_bonus": "seed 003",
    "tool_weights": "seed 003",
    "summary_budget": "seed 000 `summaryBudget`",
    "summary_max_tokens": "seed 004",
    "recall_max_chars": "seed 002 `maxInjectedChars`",
    "recall_max_tokens": "seed 000 (auto-recall cap)",
    "memory_max_count": "seed 003",
    "memory_working_max": "seed 003",
    "cache_breakpoints": "the Anthropic Messages API limit",
    "rules": "unset keeps every 0.1.0 record's meaning",
}


def _type(annotation: Any) -> str:
    """A field's type and range, as a reader of TOML needs it."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *metas = typing.get_args(annotation)
        bounds = []
        for meta in metas:
            if isinstance(meta, msgspec.Meta):
                for key, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
                    value = getattr(meta, key)
                    if value is not None:
                        shown = (
                            "2**40" if value == 2**40 else "2**31" if value == 2**31 else str(value)
                        )
                        bounds.append(f"{sign} {shown}")
        return _type(base) + (f" ({', '.join(bounds)})" if bounds else "")
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [_type(a) for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(parts) + " (optional)"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"table of {_type(key)} -> {_type(value)}"
    if origin is tuple:
        return f"array of {_type(typing.get_args(annotation)[0])}"
    if origin is typing.Literal:
        return " \\| ".join(f"`{v}`" for v in typing.get_args(annotation))
    names = {int: "integer", float: "float", str: "string", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        return f"{len(value)} entries (below)"
    if isinstance(value, tuple):
        return "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""`'
    if isinstance(value, int):
        return f"`{value:_}`"  # 128_000: TOML's own digit separator
    return f"`{value}`"


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def render() -> str:
    """The generated reference (without the markers)."""
    hints = typing.get_type_hints(Policy, include_extras=True)
    default = Policy()
    out = [
        f"{len(hints)} fields in {len(POLICY_PARTS)} parts. Each part is a TOML table; "
        "its fields may also be given at the top level.",
        "",
    ]
    for part, names in POLICY_PARTS.items():
        out += [
            f"### [{part}]",
            "",
            "| field | type | default | meaning | default from |",
            "|---|---|---|---|---|",
        ]
        for name in names:
            out.append(
                f"| `{name}` | {_type(hints[name])} | {_default(getattr(default, name))}"
                f" | {MEANINGS.get(name, '')} | {SOURCES.get(name, '')} |"
            )
        out.append("")
    out += [
        "### Default maps",
        "",
        "`tool_kinds` (tool name -> kind):",
        "",
        "```toml",
        "[pruning.tool_kinds]",
    ]
    out += [f'"{k}" = "{v}"' for k, v in default.tool_kinds.items()]
    out += ["```", "", "`tool_weights` (kind -> weight):", "", "```toml", "[pruning.tool_weights]"]
    out += [f"{k} = {v}" for k, v in default.tool_weights.items()]
    out += [
        "```",
        "",
        "### The default policy as a file",
        "",
        "Every field at its default, maps left out (a map given in a file replaces "
        "the default one):",
        "",
        "```toml",
    ]
    for part, values in default.parts().items():
        out.append(f"[{part}]")
        out += [
            f"{name} = {_toml(value)}"
            for name, value in values.items()
            if value is not None and not isinstance(value, dict)
        ]
        out.append("")
    out[-1] = "```"
    return "\n".join(out) + "\n"


def replace(text: str) -> str:
    """``text`` with the part between the markers regenerated."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + render() + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    """``--write PATH`` regenerates, ``--check PATH`` exits 1 when the file is stale."""
    parser = argparse.ArgumentParser(prog="python -m turnlog.tools.policydoc")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", metavar="PATH")
    group.add_argument("--check", metavar="PATH")
    args = parser.parse_args(argv)
    path = Path(args.write or args.check)
    text = path.read_text()
    fresh = replace(text)
    if args.write:
        path.write_text(fresh)
        return 0
    if fresh != text:
        print(
            f"{path} is out of date: run python -m turnlog.tools.policydoc --write {path}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

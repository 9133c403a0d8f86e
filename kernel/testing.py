"""Hypothesis strategies and invariant checkers for packing (and custom stages).

Theory of operation
-------------------
`pack` promises a handful of invariants (see ``turnlog._pack`` and
docs/packing.md). This module states each one as a *checker*: a function that
reads a projection and a `Packed` result, and raises `AssertionError` with a
message naming the lineage position or the prompt message index that breaks
it. The checkers do not trust the packer's bookkeeping: they recompute what
they can (the mandatory tail, pending calls, token counts of every message)
from the events and the prompt itself.

The strategies generate what the checkers run on: `policies` gives valid
policies over many budgets (small windows included, with buffers and pruning
numbers scaled so that every stage actually fires), `sessions` gives realistic
agent sessions (parallel tool calls, errors, huge and blob-sized outputs,
late and out-of-order results, notifications, recalls, pins, system changes,
compactions, a rewind and a fork). `build` appends a generated session to a
log. `check_stage` puts it together for a custom stage::

    from hypothesis import given, settings
    from turnlog.testing import check_stage, policies, sessions

    def drop_old_notifications(state):
        ...  # reads and changes the PackState, returns a StageReport

    @settings(max_examples=50, deadline=None)
    @given(items=sessions(), policy=policies(max_window=32_000))
    def test_my_stage_keeps_the_invariants(items, policy):
        check_stage("old-notifications", drop_old_notifications, items, policy,
                    position="before:trim")

This module imports hypothesis, which the core library does not need: install it
with ``pip install 'turnlog[testing]'`` and import this module explicitly
(``turnlog`` never imports it).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any

import blake3
import msgspec

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - the extra is installed in every test run
    raise ImportError("turnlog.testing needs hypothesis: pip install 'turnlog[testing]'") \
        from exc

from ._errors import BudgetExceededError
from ._events import (
    AssistantMessageAdded,
    Body,
    CompactionCommitted,
    EventsPinned,
    ImagePart,
    NotificationAdded,
    Part,
    ReasoningPart,
    RecallAdded,
    RecallHit,
    SessionRewound,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)
from ._log import Draft, Log
from ._memstore import MemoryStore
from ._pack import DECISIONS, DEFAULT_STAGES, Packed, PackState, Stage, pack
from ._policy import Policy
from ._projection import Projection
from ._prompt import Message, Prompt
from ._tokens import (
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    REPLY_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TOOL_SCHEMA_OVERHEAD,
    TokenCounter,
    get_counter,
)

__all__ = [
    "Compact",
    "Fork",
    "SessionItem",
    "build",
    "check_all",
    "check_budget",
    "check_decisions",
    "check_deterministic",
    "check_mandatory_tail",
    "check_order",
    "check_overflow",
    "check_packed",
    "check_protected",
    "check_summaries",
    "check_stage",
    "check_tool_pairs",
    "long_turns",
    "memory_log",
    "policies",
    "project",
    "sessions",
    "with_stage",
]

#: Decisions under which an item's content is in the prompt.
_PRESENT = frozenset({"verbatim", "truncated", "clipped", "deduplicated", "pruned"})
#: The roots of the rules the built-in pipeline decides by.
_BUILTIN_RULES = frozenset({"verbatim", "truncate", "clip", "summaries", "dedup", "prune",
                            "trim", "orphan", "rewind", "system", "tools", "policy"})
#: The text every trimming marker (rules 2) starts with; the marker names no source.
_MARKER = "[turnlog: earlier history of this session"
#: Decisions under which an item is not in the prompt.
_ABSENT = frozenset({"summarized", "trimmed", "dropped"})
#: Decisions a protected unit must never get.
_REDUCED = frozenset({"deduplicated", "pruned", "trimmed", "summarized"})


# -- session markers ----------------------------------------------------------------------
class Fork(msgspec.Struct, frozen=True, kw_only=True):
    """In a generated session: continue in a new session forked from the current
    one after its own seq ``at`` (`Log.fork`). Later items go to the fork.

    Attributes:
        at: seq, in the session being forked, of the last event the fork keeps.
        session: the new session's id ("" derives one from the current id).
    """

    at: int
    session: str = ""


class Compact(msgspec.Struct, frozen=True, kw_only=True):
    """In a generated session: a ``CompactionCommitted`` over lineage positions
    ``first..last``; `build` fills in ``covered_digest`` from the log.

    Attributes:
        first: first covered lineage position.
        last: last covered lineage position.
        summary: the summary text.
        level: 0 for a summary of events, higher for a roll-up.
        children: positions of the compactions a roll-up summarizes.
    """

    first: int
    last: int
    summary: str
    level: int = 0
    children: tuple[int, ...] = ()


#: One element of a generated session.
SessionItem = Body | Draft | Fork | Compact


def memory_log(*, blob_threshold: int = 16 * 1024, preview_chars: int = 2 * 1024) -> Log:
    """An in-memory log with a small blob threshold, so generated outputs of a few
    KiB already exercise blob previews."""
    return Log(MemoryStore(), blob_threshold=blob_threshold, preview_chars=preview_chars)


def build(log: Log, session: str, items: Sequence[SessionItem]) -> str:
    """Append a generated session to ``log``, starting (or continuing) ``session``.

    Payloads and `Draft` s are appended as they are; a `Fork` forks the current
    session and continues in the fork; a `Compact` becomes a
    ``CompactionCommitted`` whose ``covered_digest`` is computed from the log.

    Returns:
        The session the last item went to (the fork's id after a `Fork`): pack that one.
    """
    current = session
    batch: list[Body | Draft] = []
    forks = 0

    def flush() -> None:
        if batch:
            log.append(current, list(batch))
            batch.clear()

    for item in items:
        if isinstance(item, Fork):
            flush()
            forks += 1
            new = item.session or f"{session}.fork{forks}"
            log.fork(current, item.at, new)
            current = new
        elif isinstance(item, Compact):
            flush()
            lineage = log.lineage(current)
            digest = blake3.blake3(b"".join(
                e.hash for e in lineage[item.first:item.last + 1])).hexdigest()
            batch.append(CompactionCommitted(
                first_seq=item.first, last_seq=item.last, covered_digest=digest,
                summary=item.summary, level=item.level, children=item.children,
                summarizer="turnlog.testing", reason="rollup" if item.level else "threshold"))
        else:
            batch.append(item)
    flush()
    return current


def project(log: Log, session: str, counter: TokenCounter | None = None) -> Projection:
    """A fresh projection of ``session``'s whole lineage (``cl100k_base`` by default)."""
    view = Projection(counter or get_counter("cl100k_base"))
    view.extend(log.lineage(session))
    return view


def with_stage(name: str, stage: Stage, position: str = "before:trim",
               base: Sequence[tuple[str, Stage]] = DEFAULT_STAGES,
               ) -> tuple[tuple[str, Stage], ...]:
    """A copy of ``base`` with ``(name, stage)`` inserted.

    Parameters:
        position: ``"before:NAME"``, ``"after:NAME"`` (NAME a stage of ``base``),
            ``"first"`` or ``"last"``.

    Raises:
        ValueError: an unknown position or stage name.
    """
    stages = list(base)
    names = [n for n, _ in stages]
    if position == "first":
        at = 0
    elif position == "last":
        at = len(stages)
    else:
        where, _, target = position.partition(":")
        if where not in ("before", "after") or target not in names:
            raise ValueError(f"position must be 'first', 'last', 'before:NAME' or "
                             f"'after:NAME' with NAME in {names}, found {position!r}")
        at = names.index(target) + (where == "after")
    stages.insert(at, (name, stage))
    return tuple(stages)


# -- policies -------------------------------------------------------------------------------
_WINDOWS = (2_000, 3_000, 4_000, 6_000, 8_000, 12_000, 16_000, 32_000, 64_000, 128_000,
            200_000)


@st.composite
def policies(draw: st.DrawFn, *, min_window: int = 2_000, max_window: int = 200_000,
             stages: bool = True) -> Policy:
    """Valid policies over many budgets.

    Buffers or ratios, truncation limits, pruning protection and minimum savings
    are scaled to the window, so that with the sessions of `sessions` the
    warning, compact and blocking levels are crossed and dedup, pruning and
    trimming fire at every size.

    Parameters:
        min_window / max_window: bounds of ``context_window``.
        stages: when True, now and then a reduction stage is disabled.
    """
    if not 0 < min_window <= max_window:
        raise ValueError(f"need 0 < min_window <= max_window, found {min_window}, {max_window}")
    fixed = [w for w in _WINDOWS if min_window <= w <= max_window]
    # Log-uniform between the bounds, so that small windows are as common as large ones.
    scale = draw(st.integers(0, 1_000)) / 1_000
    window = int(min_window * (max_window / min_window) ** scale)
    use_fixed = draw(st.booleans())
    if fixed and use_fixed:
        window = draw(st.sampled_from(fixed))
    reserve = int(window * draw(st.sampled_from((0.0, 0.05, 0.1, 0.125, 0.2, 0.3))))
    margin = draw(st.sampled_from((0, 0, 0, window // 100)))
    usable = window - reserve - margin
    fractions = sorted(draw(st.lists(st.floats(0.0, 0.6), min_size=3, max_size=3)),
                       reverse=True)
    use_ratio = draw(st.sampled_from(("buffer", "buffer", "ratio", "both")))
    thresholds: dict[str, Any] = {}
    for name, fraction in zip(("warning", "compact", "blocking"), fractions, strict=True):
        buffer = int(usable * fraction)
        thresholds[f"{name}_buffer"] = None if use_ratio == "ratio" else buffer
        thresholds[f"{name}_ratio"] = (None if use_ratio == "buffer"
                                       else round(1.0 - fraction, 3))
    big = usable > 40_000
    truncate_bytes = max(64, int(usable * draw(st.sampled_from((0.3, 0.6, 1.0, 2.0, 4.0)))))
    return Policy(
        context_window=window, output_reserve=reserve, safety_margin=margin,
        **thresholds,
        truncate=not stages or draw(st.integers(0, 9)) > 0,
        truncate_lines=draw(st.sampled_from((20, 60, 200, 800, 2_000))),
        truncate_bytes=min(truncate_bytes, 50_000 if big else truncate_bytes),
        truncate_head_ratio=draw(st.sampled_from((0.3, 0.5, 0.6, 0.8))),
        dedup=not stages or draw(st.integers(0, 9)) > 0,
        prune=not stages or draw(st.integers(0, 9)) > 0,
        prune_protect_turns=draw(st.integers(0, 3)),
        prune_protect_tokens=int(usable * draw(st.sampled_from((0.0, 0.02, 0.1, 0.3)))),
        prune_min_savings=int(usable * draw(st.sampled_from((0.0, 0.01, 0.05, 0.15)))),
        prune_reference_bonus=draw(st.sampled_from((0, 15, 40))),
        prune_decision_bonus=draw(st.sampled_from((0, 10, 30))),
        trim=not stages or draw(st.integers(0, 19)) > 0,
        summary_budget=draw(st.sampled_from((0.05, 0.25, 0.75))),
        recall_max_chars=draw(st.sampled_from((200, 1_000, 4_000))),
        recall_max_tokens=draw(st.sampled_from((50, 300, 2_000))),
        cache_breakpoints=draw(st.integers(0, 4)),
        rules=draw(st.sampled_from((0, 0, 1, 2))),
        tail_steps=draw(st.sampled_from((0, 1, 2, 4, 8))),
        clip_ratio=draw(st.sampled_from((0.1, 0.25, 0.5, 1.0))),
        summary_gate=draw(st.sampled_from((0.0, 0.5, 0.72, 1.0))),
    ).resolved()


# -- sessions -------------------------------------------------------------------------------
_FILES = ("src/app.py", "src/util.py", "src/models/user.py", "tests/test_app.py", "README.md",
          "docs/guide.md")
_WORDS = ("the", "value", "config", "parser", "request", "cache", "user", "session", "error",
          "returns", "list", "index", "path", "token", "budget", "result", "check", "update",
          "file", "line", "import", "test", "fails", "because", "handler", "timeout")
_DECIDE = ("Based on the output, ", "The issue is that ", "I'll use the helper: ",
           "Therefore ", "")
_SECTIONS = (("base", 0), ("environment", 10), ("memories", 20), ("mode", 30))
_TOOLS = (
    ToolSpec(name="Read", description="Read a file from the workspace.",
             parameters='{"type":"object","properties":{"file_path":{"type":"string"},'
                        '"offset":{"type":"integer"},"limit":{"type":"integer"}}}'),
    ToolSpec(name="Edit", description="Replace a string in a file.",
             parameters='{"type":"object","properties":{"file_path":{"type":"string"},'
                        '"old_string":{"type":"string"},"new_string":{"type":"string"}}}'),
    ToolSpec(name="Write", description="Write a whole file.",
             parameters='{"type":"object","properties":{"file_path":{"type":"string"},'
                        '"content":{"type":"string"}}}'),
    ToolSpec(name="Grep", description="Search file contents with a regex.",
             parameters='{"type":"object","properties":{"pattern":{"type":"string"},'
                        '"path":{"type":"string"}}}'),
    ToolSpec(name="Glob", description="List files matching a glob.",
             parameters='{"type":"object","properties":{"pattern":{"type":"string"}}}'),
    ToolSpec(name="Bash", description="Run a shell command.",
             parameters='{"type":"object","properties":{"command":{"type":"string"}}}'),
)


class _Sim:
    """The simulated agent behind `sessions`: what has been said, which calls are open."""

    def __init__(self, draw: st.DrawFn, seed: int, max_events: int, options: dict[str, bool],
                 ) -> None:
        self.draw = draw
        self.rng = random.Random(seed)
        self.max_events = max_events
        self.options = options
        self.items: list[SessionItem] = []
        self.kinds: list[str] = []  # kind per lineage position
        self.offset = 0  # lineage position of the current session's seq 0
        self.open: dict[str, tuple[str, dict[str, Any], int]] = {}  # call -> (tool, args, pos)
        self.versions: dict[str, int] = {}
        self.calls = 0
        self.sections: set[str] = set()
        self.compactions: list[tuple[int, int, int, int]] = []  # (pos, first, last, level)
        self.rewound = False
        self.forked = False
        self.last_output = ""
        self.touched: list[str] = []

    # -- bookkeeping
    @property
    def pos(self) -> int:
        return len(self.kinds)

    @property
    def own_seq(self) -> int:
        return self.pos - self.offset

    @property
    def full(self) -> bool:
        return len(self.items) >= self.max_events

    def emit(self, body: Body, *, time: int | None = None) -> int:
        pos = self.pos
        self.items.append(body if time is None else Draft(body=body, time=time))
        self.kinds.append(str(body.__struct_config__.tag))
        return pos

    # -- text
    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(n))

    def file_text(self, path: str) -> list[str]:
        version = self.versions.get(path, 0)
        rng = random.Random(f"{path}:{version}")
        size = 400 if path.endswith(".md") else rng.randint(15, 120)
        return [f"{i + 1:6d}\t{'    ' * rng.randint(0, 2)}{rng.choice(_WORDS)}_{i} = "
                f"{rng.choice(_WORDS)}({rng.randint(0, 999)})  # v{version}"
                for i in range(size)]

    def big_text(self, lines: int, width: int) -> str:
        base = self.rng.randint(0, 10**6)
        return "\n".join(f"[{base + i}] {self.words(1)} " + "x" * (width + i % 7)
                         for i in range(lines))

    # -- events
    def user(self) -> None:
        shape = self.draw(st.integers(0, 19))
        if shape == 0:
            text = ""
        elif shape == 1:
            text = self.big_text(self.draw(st.integers(30, 300)), 40)
        else:
            text = f"Please {self.words(self.draw(st.integers(2, 30)))}."
            if self.draw(st.booleans()):
                text += f" Look at {self.rng.choice(_FILES)}."
        images: tuple[ImagePart, ...] = ()
        if shape == 2:
            images = (ImagePart(media_type="image/png", url="https://example.invalid/a.png"),)
        self.emit(UserMessageAdded(text=text, images=images), time=self.pos * 1_000_000)

    def assistant(self, *, calls: int | None = None) -> list[tuple[str, str, dict[str, Any]]]:
        n = self.draw(st.integers(0, 4)) if calls is None else calls
        parts: list[Part] = []
        if self.draw(st.integers(0, 3)) == 0:
            parts.append(ReasoningPart(text=self.words(self.draw(st.integers(3, 60))),
                                       opaque="sig" * self.draw(st.integers(0, 20)),
                                       provider="anthropic"))
        text = self.rng.choice(_DECIDE) + self.words(self.draw(st.integers(0, 40)))
        if self.draw(st.integers(0, 2)) == 0:
            text += f" See {self.rng.choice(_FILES)}."
        if self.last_output and self.draw(st.integers(0, 4)) == 0:
            quoted = [ln for ln in self.last_output.splitlines() if len(ln.strip()) >= 24]
            if quoted:
                text += "\n" + quoted[0].strip()
        if text or not n:
            parts.append(TextPart(text=text or "ok"))
        made: list[tuple[str, str, dict[str, Any]]] = []
        for _ in range(n):
            tool, args = self.call()
            self.calls += 1
            call_id = f"call_{self.calls}"
            made.append((call_id, tool, args))
            arguments = "{not json" if self.draw(st.integers(0, 30)) == 30 else json.dumps(args)
            parts.append(ToolCall(id=call_id, name=tool, arguments=arguments))
        pos = self.emit(AssistantMessageAdded(parts=tuple(parts), model="test-model"))
        for call_id, tool, args in made:
            self.open[call_id] = (tool, args, pos)
        return made

    def call(self) -> tuple[str, dict[str, Any]]:
        tool = self.draw(st.sampled_from(("Read", "Read", "Read", "Edit", "Write", "Grep",
                                          "Glob", "Bash", "Bash")))
        path = self.draw(st.sampled_from(_FILES[:3])) if self.draw(st.integers(0, 4)) \
            else self.draw(st.sampled_from(_FILES))
        if self.touched and self.draw(st.integers(0, 2)) == 0:
            path = self.touched[-1]  # back to the file just read, searched or edited
        self.touched.append(path)
        if tool == "Read":
            if self.draw(st.integers(0, 4)) == 0:
                return tool, {"file_path": path, "offset": self.draw(st.integers(1, 50)),
                              "limit": 20}
            return tool, {"file_path": path}
        if tool == "Edit":
            return tool, {"file_path": path, "old_string": self.words(3),
                          "new_string": self.words(3)}
        if tool == "Write":
            return tool, {"file_path": path, "content": self.words(20)}
        if tool == "Grep":
            target = path if self.draw(st.booleans()) else "src/"
            return tool, {"pattern": self.rng.choice(_WORDS), "path": target}
        if tool == "Glob":
            return tool, {"pattern": self.draw(st.sampled_from(("**/*.py", "src/*", "*.md")))}
        command = self.draw(st.sampled_from(("pytest -q", "ls -la", "git status",
                                             "python -m build", "cat src/app.py")))
        return tool, {"command": command}

    def output(self, tool: str, args: dict[str, Any]) -> tuple[str, bool, int | None]:
        """(output, is_error, exit_code) of a call."""
        path = args.get("file_path") or args.get("path") or ""
        if self.draw(st.integers(0, 9)) == 0:
            code = self.draw(st.sampled_from((1, 2, 127)))
            return (f"Error: {self.words(6)} ({path or args.get('command', '')})",
                    True, code if tool == "Bash" else None)
        size = self.draw(st.integers(0, 29))
        if tool == "Read":
            lines = self.file_text(path)
            if "offset" in args:
                start = int(args["offset"])
                lines = lines[start:start + int(args.get("limit", 20))]
            return "\n".join(lines), False, None
        if tool in ("Edit", "Write"):
            self.versions[path] = self.versions.get(path, 0) + 1
            verb = "updated" if tool == "Edit" else "created successfully at"
            return f"The file {path} has been {verb}.", False, None
        if tool == "Grep":
            files = [path] if "." in path.rsplit("/", 1)[-1] else list(_FILES[:3])
            found = [f"{f}:{line}" for f in files for line in self.file_text(f)[::9]]
            return "\n".join(found), False, None
        if tool == "Glob":
            return "\n".join(sorted(_FILES)), False, None
        if size <= 1:  # huge, above the blob threshold of `memory_log`
            return self.big_text(self.draw(st.integers(400, 1_200)), 40), False, 0
        if size <= 4:  # large: many lines
            return self.big_text(self.draw(st.integers(50, 400)), 10), False, 0
        return self.words(self.draw(st.integers(1, 80))), False, 0

    def result(self, call_id: str, *, orphan: bool = False) -> None:
        if orphan:
            self.emit(ToolResultAdded(call_id=f"unknown_{self.pos}", tool_name="Bash",
                                      output="late output of a call nobody made"))
            return
        tool, args, _ = self.open.pop(call_id)
        output, is_error, code = self.output(tool, args)
        self.last_output = output
        self.emit(ToolResultAdded(call_id=call_id, tool_name=tool, output=output,
                                  is_error=is_error, exit_code=code))

    def notification(self) -> None:
        huge = self.draw(st.integers(0, 9)) == 0
        text = self.big_text(200, 20) if huge else f"File {self.rng.choice(_FILES)} changed."
        self.emit(NotificationAdded(source=self.draw(st.sampled_from(("watcher", "jobs",
                                                                       "child-agent"))),
                                    text=text))

    def recall(self) -> None:
        hits = tuple(RecallHit(session="past", seq=i, text=self.words(self.draw(
            st.integers(5, 200))), score=f"0.{9 - i}") for i in range(self.draw(st.integers(0,
                                                                                          5))))
        self.emit(RecallAdded(query=self.words(3), hits=hits, searcher="bm25"))

    def section(self, *, initial: bool = False) -> None:
        name, position = self.draw(st.sampled_from(_SECTIONS))
        remove = not initial and name in self.sections and self.draw(st.integers(0, 2)) == 0
        if remove:
            self.sections.discard(name)
            self.emit(SystemSectionSet(name=name, text="", position=position))
            return
        self.sections.add(name)
        size = self.draw(st.sampled_from((10, 40, 150)))
        self.emit(SystemSectionSet(name=name, text=f"# {name}\n{self.words(size)}",
                                   position=position))

    def tools(self) -> None:
        count = self.draw(st.integers(2, len(_TOOLS)))
        self.emit(ToolsSet(tools=_TOOLS[:count]))

    def item_positions(self, below: int) -> list[int]:
        model = ("user", "assistant", "tool_result", "notification", "recall")
        return [p for p in range(min(below, self.pos)) if self.kinds[p] in model]

    def pin(self) -> None:
        candidates = self.item_positions(self.own_seq)
        if not candidates:
            return
        chosen = sorted(set(self.draw(st.lists(st.sampled_from(candidates), min_size=1,
                                               max_size=3))))
        self.emit(EventsPinned(seqs=tuple(chosen), pinned=self.draw(st.integers(0, 5)) > 0))

    def rewind(self) -> None:
        if self.own_seq < 4:
            return
        to = self.draw(st.integers(max(-1, self.own_seq - 8), self.own_seq - 1))
        self.rewound = True
        for call_id in [c for c, (_, _, p) in self.open.items() if p > to]:
            del self.open[call_id]
        self.emit(SessionRewound(to_seq=to, reason="user rewound"))

    def compact(self) -> None:
        below = self.own_seq - 1
        level0 = [c for c in self.compactions if c[3] == 0]
        kids = level0[-2:]
        if len(kids) == 2 and max(k[2] for k in kids) <= below and self.draw(st.booleans()):
            first = min(k[1] for k in kids)
            last = max(k[2] for k in kids)
            self.items.append(Compact(first=first, last=last, level=1,
                                      children=tuple(k[0] for k in kids),
                                      summary="Roll-up: " + self.words(30)))
            self.compactions.append((self.pos, first, last, 1))
            self.kinds.append("compaction")
            return
        if below < 3:
            return
        first = self.draw(st.integers(0, below - 1))
        last = self.draw(st.integers(first, min(below, first + 20)))
        self.items.append(Compact(first=first, last=last,
                                  summary=f"Summary of {first}-{last}: "
                                          + self.words(self.draw(st.integers(5, 120)))))
        self.compactions.append((self.pos, first, last, 0))
        self.kinds.append("compaction")

    def fork(self) -> None:
        at = self.draw(st.integers(max(0, self.own_seq - 6), self.own_seq - 1))
        keep = self.offset + at + 1
        self.kinds = self.kinds[:keep]
        self.open = {c: v for c, v in self.open.items() if v[2] < keep}
        self.compactions = [c for c in self.compactions if c[0] < keep]
        self.items.append(Fork(at=at))
        self.forked = True
        self.offset = keep
        self.kinds.append("fork")

    # -- the session
    def exchange(self) -> None:
        made = self.assistant()
        order = list(range(len(made)))
        if len(order) > 1 and self.draw(st.booleans()):
            order = self.draw(st.permutations(order))
        for i in order:
            if self.full:
                return
            choice = self.draw(st.integers(0, 19))
            if choice == 19:
                continue  # left pending: maybe answered later, maybe never
            if choice == 18:
                self.notification()
            self.result(made[i][0])

    def run(self) -> list[SessionItem]:
        opts = self.options
        for _ in range(self.draw(st.integers(0, 3))):
            self.section(initial=True)
        if self.draw(st.integers(0, 9)):
            self.tools()
        if self.draw(st.integers(0, 9)):
            self.user()
        actions = ["turn"] * 6 + ["exchange"] * 4 + ["notification", "recall", "recall", "late",
                                                     "orphan", "section", "pin"]
        if opts["compactions"]:
            actions.append("compact")
        if opts["rewinds"]:
            actions.append("rewind")
        if opts["forks"]:
            actions.append("fork")
        while not self.full:
            action = self.draw(st.sampled_from(actions))
            if action == "turn":
                self.user()
                for _ in range(self.draw(st.integers(1, 3))):
                    if not self.full:
                        self.exchange()
            elif action == "exchange":
                self.exchange()
            elif action == "notification":
                self.notification()
            elif action == "recall":
                self.recall()
            elif action == "late" and self.open:
                self.result(self.draw(st.sampled_from(sorted(self.open))))
            elif action == "orphan":
                self.result("", orphan=True)
            elif action == "section":
                self.section()
            elif action == "pin":
                self.pin()
            elif action == "compact" and len(self.compactions) < 4:
                self.compact()
            elif action == "rewind" and not self.rewound:
                self.rewind()
            elif action == "fork" and not self.forked and self.own_seq > 2:
                self.fork()
            if self.draw(st.integers(0, 40)) == 40:
                break
        if self.draw(st.integers(0, 4)) == 0:
            self.assistant(calls=self.draw(st.integers(1, 3)))  # a call left pending at the end
        return self.items


@st.composite
def sessions(draw: st.DrawFn, *, max_events: int = 60, forks: bool = True,
             rewinds: bool = True, compactions: bool = True) -> list[SessionItem]:
    """Realistic agent sessions, as a list of payloads, `Draft` s and markers.

    A session sets system sections (and later changes or removes them) and a
    tool set, then alternates user turns with assistant messages (text,
    reasoning, 0-4 parallel tool calls on a few files, so that all three dedup
    tiers fire) and their results: errors with exit codes, multi-line and
    blob-sized outputs, results arriving after a notification or out of
    order, calls left pending in the middle or at the end, orphan results.
    Notifications, recalls, pins of earlier positions, compactions
    (`Compact`, with roll-ups), one rewind and one fork (`Fork`) come now and then.

    Append one with `build`. Parameters:
        max_events: an upper bound on the number of items (a few more may
            follow to finish an exchange).
        forks / rewinds / compactions: allow those items.
    """
    seed = draw(st.integers(0, 2**32 - 1))
    options = {"forks": forks, "rewinds": rewinds, "compactions": compactions}
    limit = draw(st.integers(1, max(1, max_events)))
    return _Sim(draw, seed, limit, options).run()


@st.composite
def long_turns(draw: st.DrawFn, *, min_steps: int = 20, max_steps: int = 300,
               giants: bool = True, reused_ids: bool = True, freeform: bool = True,
               compactions: bool = True) -> list[SessionItem]:
    """Long autonomous turns: one user message, then hundreds of model steps.

    What coding agents do on one instruction (a step: an assistant message with 0-3
    tool calls and their results). Now and then: a giant tool-call argument (a
    ``Write`` of a big file), a giant user message (the opening one too) or tool
    output, call ids reused from earlier steps (as SWE-agent trajectories do),
    freeform calls whose input is raw text rather than JSON (Codex's
    ``apply_patch``), calls left without a result, imported compactions (`Compact`)
    over earlier steps, and sometimes an earlier short turn. Append with `build`.

    Parameters:
        min_steps / max_steps: bounds of the number of steps in the long turn.
        giants / reused_ids / freeform / compactions: allow those.
    """
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    steps = draw(st.integers(min_steps, max(min_steps, max_steps)))
    giant_every = draw(st.sampled_from((0, 7, 40))) if giants else 0
    reuse = draw(st.sampled_from((0.0, 0.1, 0.5))) if reused_ids else 0.0
    free = draw(st.sampled_from((0.0, 0.2))) if freeform else 0.0
    n_compactions = draw(st.integers(0, 2)) if compactions else 0
    items: list[SessionItem] = []
    if draw(st.booleans()):
        items.append(SystemSectionSet(name="base", text="You are a coding agent. " * 20))
        items.append(ToolsSet(tools=_TOOLS))

    def words(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    def giant() -> str:
        # about 20k-60k tokens, lines that tokenize like code
        return "\n".join(f"{i}: {words(6)}" for i in range(rng.randint(2_500, 7_000)))

    if draw(st.booleans()):  # an earlier, short turn
        items.append(UserMessageAdded(text="earlier: " + words(12)))
        items.append(AssistantMessageAdded(parts=(TextPart(text=words(20)),)))
    opening = giant() if giant_every and rng.random() < 0.15 else "fix it: " + words(30)
    items.append(UserMessageAdded(text=opening))
    used: list[str] = []
    n = 0
    for step in range(steps):
        big = bool(giant_every) and step % giant_every == giant_every - 1
        calls: list[ToolCall] = []
        for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
            if used and rng.random() < reuse:
                call_id = rng.choice(used)
            else:
                n += 1
                call_id = f"call_{n}"
            if call_id in (c.id for c in calls):
                n += 1
                call_id = f"call_{n}"
            used.append(call_id)
            if rng.random() < free:
                arguments = f"*** Begin Patch\n*** Update File: {rng.choice(_FILES)}\n" \
                            f"-{words(8)}\n+{words(8)}\n*** End Patch"
                if big and rng.random() < 0.5:
                    arguments += "\n" + giant()
                calls.append(ToolCall(id=call_id, name="apply_patch", arguments=arguments,
                                      freeform=True))
            elif big and rng.random() < 0.5:
                calls.append(ToolCall(id=call_id, name="Write", arguments=json.dumps(
                    {"file_path": rng.choice(_FILES), "content": giant()})))
            else:
                calls.append(ToolCall(id=call_id, name="Bash", arguments=json.dumps(
                    {"command": f"grep -n {rng.choice(_WORDS)} {rng.choice(_FILES)}"})))
        text = giant() if big and not calls else words(rng.randint(3, 40))
        items.append(AssistantMessageAdded(parts=(TextPart(text=text), *calls)))
        for call in calls:
            if rng.random() < 0.03:
                continue  # never answered
            output = giant() if big and rng.random() < 0.3 else "\n".join(
                f"{rng.choice(_FILES)}:{i}: {words(8)}" for i in range(rng.randint(1, 30)))
            items.append(ToolResultAdded(call_id=call.id, tool_name=call.name, output=output,
                                         is_error=rng.random() < 0.1))
        if big and rng.random() < 0.2:
            items.append(UserMessageAdded(text=giant()))  # a giant message mid-session
    positions = len(items)
    for k in range(n_compactions):
        if positions < 4:
            break
        last = rng.randint(1, positions - 2)
        first = rng.randint(0, last)
        items.append(Compact(first=first, last=last,
                             summary=f"Summary {k} of positions {first}-{last}: {words(30)}"))
    return items


# -- checkers ----------------------------------------------------------------------------------
def _where(view: Projection, pos: int) -> str:
    if 0 <= pos < len(view.events):
        event = view.events[pos]
        return f"position {pos} ({event.kind} {event.session}#{event.seq})"
    return f"position {pos}"


def _recount(message: Message, counter: TokenCounter) -> int:
    """Tokens of a message under the framing convention of ``turnlog._tokens``."""
    total = MESSAGE_OVERHEAD + (1 if message.role == "tool" else 0)
    for part in message.parts:
        if isinstance(part, TextPart):
            total += counter.count(part.text)
        elif isinstance(part, ToolCall):
            total += TOOL_CALL_OVERHEAD + counter.count(part.name) + counter.count(part.arguments)
        elif isinstance(part, ReasoningPart):
            total += counter.count(part.text) + counter.count(part.opaque)
        elif isinstance(part, ImagePart):
            total += IMAGE_TOKENS
    return total


def check_budget(packed: Packed, policy: Policy, *, counter: TokenCounter | None = None,
                 recount: bool = True) -> None:
    """The prompt fits and its accounting adds up.

    Checks ``tokens <= policy.usable``; that ``sum(message_tokens) +
    sum(section_tokens) + budget.tools`` plus the framing (3 to prime the reply,
    3 for the system message when there is one) equals ``tokens``; and, with
    ``recount``, that every message, section and the tool schemas are counted
    as their content measures under ``counter`` (the packed tokenizer when None),
    never less.

    Raises:
        AssertionError: naming the message index or section that is off.
    """
    prompt = packed.prompt
    assert packed.budget.usable == policy.usable, (
        f"budget.usable {packed.budget.usable} != policy.usable {policy.usable}")
    assert packed.tokens <= policy.usable, (
        f"prompt has {packed.tokens} tokens, over the usable budget {policy.usable} "
        f"by {packed.tokens - policy.usable}")
    assert len(packed.message_tokens) == len(prompt.messages), (
        f"{len(packed.message_tokens)} message token counts for {len(prompt.messages)} messages")
    assert len(packed.section_tokens) == len(prompt.system), (
        f"{len(packed.section_tokens)} section token counts for {len(prompt.system)} sections")
    framing = REPLY_OVERHEAD + (MESSAGE_OVERHEAD if prompt.system else 0)
    parts = sum(packed.message_tokens) + sum(packed.section_tokens) + packed.budget.tools
    assert parts + framing == packed.tokens, (
        f"accounting: messages {sum(packed.message_tokens)} + sections "
        f"{sum(packed.section_tokens)} + tools {packed.budget.tools} + framing {framing} = "
        f"{parts + framing}, but the prompt claims {packed.tokens} tokens")
    if not recount:
        return
    counter = counter or get_counter(packed.tokenizer)
    for i, (message, claimed) in enumerate(zip(prompt.messages, packed.message_tokens,
                                               strict=True)):
        actual = _recount(message, counter)
        assert actual <= claimed <= actual + 1, (
            f"message {i} (role {message.role}, from positions {list(message.source)}) is "
            f"counted as {claimed} tokens but measures {actual}")
    for i, (section, claimed) in enumerate(zip(prompt.system, packed.section_tokens,
                                               strict=True)):
        actual = counter.count(section.text) + 1
        assert actual == claimed, (f"system section {i} ({section.name!r}) is counted as "
                                   f"{claimed} tokens but measures {actual}")
    tools = sum(TOOL_SCHEMA_OVERHEAD + counter.count(t.name) + counter.count(t.description)
                + counter.count(t.parameters) for t in prompt.tools)
    assert tools == packed.budget.tools, (
        f"tool schemas are counted as {packed.budget.tools} tokens but measure {tools}")


def check_tool_pairs(prompt: Prompt) -> None:
    """Tool calls and results are paired: `Prompt.problems` finds nothing, every tool
    message answers a call of the assistant message that opens its run, no call is
    answered twice, no result is an orphan, and every call of an assistant message
    that is not the last message is answered.

    Raises:
        AssertionError: naming the message index.
    """
    problems = prompt.problems()
    assert not problems, "Prompt.problems: " + "; ".join(problems)
    opener = -1
    calls: dict[str, str] = {}
    answered: set[str] = set()
    messages = prompt.messages
    for i, message in enumerate(messages):
        if message.role == "tool":
            assert opener >= 0, f"message {i}: tool result {message.tool_call_id!r} before any " \
                                "assistant message"
            assert message.tool_call_id in calls, (
                f"message {i}: tool result {message.tool_call_id!r} is an orphan: message "
                f"{opener} makes calls {sorted(calls)}")
            assert message.tool_call_id not in answered, (
                f"message {i}: call {message.tool_call_id!r} is answered twice")
            answered.add(message.tool_call_id)
            continue
        if opener >= 0 and opener != len(messages) - 1:
            missing = sorted(set(calls) - answered)
            assert not missing, f"message {opener}: calls {missing} have no result"
        opener, calls, answered = -1, {}, set()
        if message.role == "assistant":
            opener = i
            calls = {c.id: c.name for c in message.tool_calls}


def _anchors(view: Projection, prompt: Prompt) -> list[tuple[int, int, int]]:
    """An order key per message: (unit anchor position, rank, position)."""
    keys: list[tuple[int, int, int]] = []
    call_pos: dict[str, int] = {}
    for i, message in enumerate(prompt.messages):
        if _is_marker(message):
            continue
        assert message.source, f"message {i} ({message.role}) names no source position"
        src = message.source[0]
        index = view.item_at.get(src)
        assert index is not None, (
            f"message {i} ({message.role}) comes from {_where(view, src)}, which is not a "
            "model-visible event of the view")
        kind = view.items[index].kind
        if message.role == "assistant":
            for call in message.tool_calls:
                call_pos[call.id] = src
        if message.role == "tool":
            anchor = call_pos.get(message.tool_call_id)
            assert anchor is not None, (
                f"message {i}: tool result for {message.tool_call_id!r} comes before (or "
                "without) the assistant message that made the call")
            if kind == "assistant":  # a placeholder for a result that never came
                keys.append((anchor, 2, i))
            else:
                assert src > anchor, (f"message {i}: result at {_where(view, src)} precedes "
                                      f"its call at position {anchor} in the log")
                keys.append((anchor, 1, src))
        else:
            keys.append((src, 0, src))
    return keys


def check_order(view: Projection, packed: Packed) -> None:
    """Messages keep the relative order of their source events, except that a
    call's results come right after its assistant message (in arrival order,
    then placeholders for results that never came).

    Raises:
        AssertionError: naming the two message indexes out of order.
    """
    keys = _anchors(view, packed.prompt)
    sourced = [m for m in packed.prompt.messages if not _is_marker(m)]
    for i in range(1, len(keys)):
        assert keys[i - 1] < keys[i], (
            f"messages {i - 1} and {i} are out of order: message {i - 1} comes from "
            f"{_where(view, sourced[i - 1].source[0])}, message {i} from "
            f"{_where(view, sourced[i].source[0])}")
    markers = [i for i, m in enumerate(packed.prompt.messages) if _is_marker(m)]
    assert len(markers) <= 1, f"messages {markers} are all trimming markers; a pack has one"


def _is_marker(message: Message) -> bool:
    """A trimming marker (rules 2): a user message with no source, in the marker's words."""
    return (not message.source and message.role == "user"
            and message.text.startswith(_MARKER))


def _tail_units(view: Projection) -> range:
    """Units of the mandatory tail under rules 1, recomputed from the items."""
    users = [item for item in view.items if item.kind == "user" and item.unit >= 0]
    if users:
        start = users[-1].unit
    elif view.units:
        start = len(view.units) - 1
    else:
        start = 0
    return range(start, len(view.units))


def _tail_v2(view: Projection, steps: int) -> tuple[int, range]:
    """Rules 2, recomputed from the items: the unit of the latest user message (-1 when
    there is none) and the units of the last ``steps`` steps after it (a step starts
    at an assistant message)."""
    n_units = len(view.units)
    users = [item for item in view.items if item.kind == "user" and item.unit >= 0]
    opening = users[-1].unit if users else -1
    starts = [u for u in range(opening + 1, n_units)
              if view.items[view.units[u].items[0]].kind == "assistant"]
    if len(starts) > steps:
        start = starts[len(starts) - steps] if steps else (
            n_units if opening >= 0 else max(n_units - 1, 0))
    elif opening >= 0:
        start = min(opening + 1, n_units)
    else:
        start = 0 if steps else max(n_units - 1, 0)
    return opening, range(start, n_units)


def _by_position(view: Projection, packed: Packed) -> dict[int, int]:
    """Lineage position -> index of the message that carries that event."""
    out: dict[int, int] = {}
    for i, message in enumerate(packed.prompt.messages):
        if _is_marker(message):
            continue
        src = message.source[0] if message.source else -1
        index = view.item_at.get(src)
        if message.role == "tool" and index is not None and view.items[index].kind != "tool":
            continue  # placeholder for a missing result
        assert src not in out, (f"messages {out[src]} and {i} both come from "
                                f"{_where(view, src)}")
        out[src] = i
    return out


def check_mandatory_tail(view: Projection, packed: Packed, policy: Policy | None = None,
                         ) -> None:
    """The mandatory tail is in the prompt.

    Rules 1: every item of the unit where the latest user turn starts, and of every
    unit after it, is in the prompt, verbatim or at worst truncated. Rules 2 (the
    whichever ``packed.rules`` names; ``policy`` gives ``tail_steps``): the latest user message
    is in the prompt, verbatim, truncated or clipped, and so is every item of the
    last ``tail_steps`` steps, except that the last resort of trimming (rule
    ``trim.tail``) may drop the oldest of those steps once every older unit that is
    not protected is out of the prompt.

    Raises:
        AssertionError: naming the position that was reduced or left out.
    """
    present = _by_position(view, packed)
    decisions = packed.decisions
    policy = msgspec.structs.replace(policy or Policy(), rules=packed.rules)
    if packed.rules >= 2:
        _check_tail_v2(view, packed, policy, present)
        return
    for unit in _tail_units(view):
        for index in view.units[unit].items:
            item = view.items[index]
            assert item.pos in present, (
                f"{_where(view, item.pos)} is in the mandatory tail (unit {unit}) but not in "
                "the prompt")
            if decisions:
                decision = decisions[item.pos].decision
                assert decision in ("verbatim", "truncated"), (
                    f"{_where(view, item.pos)} is in the mandatory tail but was {decision} "
                    f"({decisions[item.pos].rule})")


def _check_tail_v2(view: Projection, packed: Packed, policy: Policy,
                   present: dict[int, int]) -> None:
    decisions = packed.decisions
    opening, tail = _tail_v2(view, policy.tail_steps)
    kept_ok = ("verbatim", "truncated", "clipped")
    if opening >= 0:
        for index in view.units[opening].items:
            item = view.items[index]
            assert item.pos in present, (
                f"{_where(view, item.pos)} is the latest user message but not in the prompt")
            if decisions:
                decision = decisions[item.pos]
                assert decision.decision in kept_ok, (
                    f"{_where(view, item.pos)} is the latest user message but was "
                    f"{decision.decision} ({decision.rule})")
    dropped_tail = False
    for unit in tail:
        for index in view.units[unit].items:
            item = view.items[index]
            if not decisions:
                continue
            decision = decisions[item.pos]
            if decision.decision == "trimmed":
                assert decision.rule == "trim.tail", (
                    f"{_where(view, item.pos)} is in the last {policy.tail_steps} steps but "
                    f"was trimmed by {decision.rule}, not the last resort trim.tail")
                dropped_tail = True
                continue
            assert item.pos in present, (
                f"{_where(view, item.pos)} is in the mandatory tail (unit {unit}) but not in "
                f"the prompt ({decision.decision}, {decision.rule})")
            assert decision.decision in kept_ok, (
                f"{_where(view, item.pos)} is in the mandatory tail but was "
                f"{decision.decision} ({decision.rule})")
    if dropped_tail and decisions:
        hard = {opening} | {u for u in range(max(opening, 0), len(view.units))
                            if _pending(view, u)}
        for pin in view.pins:
            at = view.item_at.get(pin)
            if at is not None and view.items[at].unit >= 0:
                hard.add(view.items[at].unit)
        first_tail = tail.start
        for unit in range(first_tail):
            if unit in hard:
                continue
            for index in view.units[unit].items:
                pos = view.items[index].pos
                assert pos not in present, (
                    f"a protected step was trimmed (trim.tail) while the older "
                    f"{_where(view, pos)} is still in the prompt")


def _same_content(view: Projection, pos: int, message: Message) -> str:
    """Why a verbatim message differs from its event ("" when it does not)."""
    body = view.events[pos].body
    if isinstance(body, ToolResultAdded):
        ok = message.role == "tool" and message.text == body.output \
            and (message.tool_call_id == body.call_id
                 or message.tool_call_id.startswith(body.call_id + "_"))
    elif isinstance(body, AssistantMessageAdded):
        # call ids may go out renamed (rules 2: unique within the prompt)
        ok = message.role == "assistant" and len(message.parts) == len(body.parts) and all(
            a == b or (isinstance(a, ToolCall) and isinstance(b, ToolCall)
                       and msgspec.structs.replace(a, id=b.id) == b)
            for a, b in zip(message.parts, body.parts, strict=True))
    elif isinstance(body, UserMessageAdded):
        ok = message.role == "user" and message.text in (body.text, "(empty message)") \
            and tuple(p for p in message.parts if isinstance(p, ImagePart)) == body.images
    elif isinstance(body, (NotificationAdded, RecallAdded)):
        ok = message.role == "user"
    else:
        return f"a {type(body).__name__} cannot be a message"
    return "" if ok else f"message content differs from the {view.events[pos].kind} event"


def check_decisions(view: Projection, packed: Packed) -> None:
    """Exactly one decision per lineage event, in position order, each one of
    `DECISIONS`, and consistent with the prompt: an item decided verbatim,
    truncated, deduplicated or pruned is in the prompt (verbatim ones unchanged,
    with the decision's tokens); one summarized, trimmed or dropped is not; a
    section or tool set decided verbatim is in the prompt as logged.

    Raises:
        AssertionError: naming the position.
    """
    decisions = packed.decisions
    n = len(view.events)
    assert len(decisions) == n, f"{len(decisions)} decisions for {n} lineage events"
    present = _by_position(view, packed)
    for pos, decision in enumerate(decisions):
        event = view.events[pos]
        assert decision.pos == pos, f"decision {pos} names position {decision.pos}"
        assert (decision.session, decision.seq, decision.kind) == (
            event.session, event.seq, event.kind), (
            f"decision {pos} names {decision.kind} {decision.session}#{decision.seq}, the "
            f"event is {_where(view, pos)}")
        assert decision.decision in DECISIONS, (
            f"{_where(view, pos)}: unknown decision {decision.decision!r}")
        index = view.item_at.get(pos)
        if index is not None:
            if decision.decision in _PRESENT:
                assert pos in present, (f"{_where(view, pos)} is {decision.decision} "
                                        f"({decision.rule}) but not in the prompt")
                i = present[pos]
                assert decision.tokens == packed.message_tokens[i], (
                    f"{_where(view, pos)}: decision says {decision.tokens} tokens, message {i} "
                    f"is counted as {packed.message_tokens[i]}")
                if decision.decision == "verbatim":
                    why = _same_content(view, pos, packed.prompt.messages[i])
                    assert not why, f"{_where(view, pos)} is verbatim but message {i}: {why}"
            else:
                assert decision.decision in _ABSENT, (
                    f"{_where(view, pos)} is a model-visible event decided "
                    f"{decision.decision!r}")
                assert pos not in present, (
                    f"{_where(view, pos)} is {decision.decision} ({decision.rule}) but message "
                    f"{present[pos]} carries it")
            continue
        assert pos not in present, f"{_where(view, pos)} is not an item but message " \
                                   f"{present.get(pos)} carries it"
        body = event.body
        if decision.decision == "verbatim" and isinstance(body, SystemSectionSet):
            found = [s for s in packed.prompt.system if s.name == body.name]
            assert found and found[0].text == body.text, (
                f"{_where(view, pos)}: section {body.name!r} is verbatim but the prompt has "
                f"{[s.name for s in packed.prompt.system]}")
        elif decision.decision == "verbatim" and isinstance(body, ToolsSet):
            assert packed.prompt.tools == body.tools, (
                f"{_where(view, pos)}: tool set is verbatim but the prompt's tools differ")
        elif decision.decision == "verbatim" and isinstance(body, CompactionCommitted):
            summary = [s for s in packed.prompt.system if s.name == "conversation_summary"]
            assert summary and body.summary in summary[0].text, (
                f"{_where(view, pos)}: summary is shown but not in conversation_summary")
        elif isinstance(body, (SystemSectionSet, ToolsSet, CompactionCommitted)):
            assert decision.decision == "dropped", (
                f"{_where(view, pos)} is decided {decision.decision!r}")
        elif pos in view.rewound:
            assert decision.decision == "dropped", (
                f"{_where(view, pos)} was rewound but is decided {decision.decision!r}")
        else:
            assert decision.decision in ("not_a_prompt_event", "dropped"), (
                f"{_where(view, pos)} is decided {decision.decision!r}")
    for pos, i in present.items():
        assert view.item_at.get(pos) is not None, (
            f"message {i} comes from {_where(view, pos)}, not a model-visible event")


def _pending(view: Projection, unit: int) -> set[str]:
    items = view.units[unit].items
    first = view.items[items[0]].event.body
    if not isinstance(first, AssistantMessageAdded):
        return set()
    calls = {p.id for p in first.parts if isinstance(p, ToolCall)}
    answered = {view.items[i].call_id for i in items[1:]}
    return calls - answered


def check_protected(view: Projection, packed: Packed) -> None:
    """Units holding a pinned event and units with a call still waiting for its
    result (rules 2: a call of the current turn) are never pruned, deduplicated,
    trimmed or summarized.

    Raises:
        AssertionError: naming the position and why it is protected.
    """
    decisions = packed.decisions
    why: dict[int, str] = {}
    for pos in sorted(view.pins):
        index = view.item_at.get(pos)
        if index is not None and view.items[index].unit >= 0:
            why.setdefault(view.items[index].unit, f"pinned position {pos}")
    # rules 2: only calls of the current turn await a result (earlier ones were abandoned)
    start = max(_tail_v2(view, 0)[0], 0) if packed.rules >= 2 else 0
    for unit in range(start, len(view.units)):
        pending = _pending(view, unit)
        if pending:
            why.setdefault(unit, f"calls {sorted(pending)} await a result")
    for unit, reason in sorted(why.items()):
        for index in view.units[unit].items:
            item = view.items[index]
            decision = decisions[item.pos]
            assert decision.decision not in _REDUCED, (
                f"{_where(view, item.pos)} is protected ({reason}) but was "
                f"{decision.decision} ({decision.rule})")


def check_overflow(view: Projection, policy: Policy, error: BudgetExceededError) -> None:
    """A `BudgetExceededError` is justified: the protected part alone (static
    system sections, tool schemas, framing, and the mandatory tail, pinned units
    and units awaiting a result, truncated as far as the policy allows, plus the
    placeholder results for calls that have none) exceeds the usable budget, and the error's
    numbers say by how much. With ``policy.trim`` off, only the numbers are checked.

    Raises:
        AssertionError: the packer gave up although the protected part fits.
    """
    assert error.usable == policy.usable, (f"error names usable {error.usable}, the policy "
                                           f"has {policy.usable}")
    assert error.needed > error.usable, f"error needs {error.needed} <= usable {error.usable}"
    assert f"Over by {error.needed - error.usable} tokens" in str(error), (
        f"the message does not say by how much: {error}")
    if not policy.trim:
        return
    policy = policy.resolved()  # as `pack` packs it
    state = PackState(view, policy, view.counter)
    if policy.truncate:
        dict(DEFAULT_STAGES)["truncate"](state)
    rules2 = policy.rules_version >= 2
    if rules2:
        dict(DEFAULT_STAGES)["clip"](state)
        opening = _tail_v2(view, policy.tail_steps)[0]
        keep: set[int] = {opening} if opening >= 0 else set()
        assert "floor" in str(error), f"the message does not name the floor: {error}"
    else:
        keep = set(_tail_units(view))
    for pos in view.pins:
        index = view.item_at.get(pos)
        if index is not None and view.items[index].unit >= 0:
            keep.add(view.items[index].unit)
    # The placeholder results the prompt needs for calls that have none are the
    # packer's own (``synthetic_tokens``): their wording is its business.
    floor = state.system_tokens + state.tools_tokens + REPLY_OVERHEAD + state.synthetic_tokens
    first = max(min(keep), 0) if rules2 and keep else 0
    for unit in range(first, len(view.units)):
        if _pending(view, unit):
            keep.add(unit)
    for unit in keep:
        floor += sum(state.tokens_of(i) for i in view.units[unit].items)
    if rules2:
        # the marker naming the trimmed history is part of the floor
        floor += MESSAGE_OVERHEAD + view.counter.count(
            _MARKER + f" (positions {len(view.events)}-{len(view.events)}) was left out of "
            "this prompt to fit the context window; it is in the log: `turnlog log "
            f"{view.events[-1].session if view.events else ''} --from {len(view.events)}`]")
    assert floor > policy.usable, (
        f"BudgetExceededError ({error.needed} needed) although the protected part needs only "
        f"{floor} of {policy.usable} usable tokens: {str(error)[:200]}")


def check_summaries(view: Projection, packed: Packed, policy: Policy) -> None:
    """The summaries stage's report and the decisions agree.

    The report's "N summaries shown, M events summarized" matches the decisions: N
    compactions decided verbatim (their summary in ``conversation_summary``), M
    events decided ``summarized``, each naming a compaction that is committed in
    the view and whose span holds it (or completes a tool exchange it cuts). When
    the stage did not fire, no event is summarized by it and no summary is shown. An
    event inside the span of a shown summary is never decided ``trimmed`` (it is
    summarized, or in the prompt when protected). Skipped when a custom stage
    decided events (it may change the prompt after the report). Under rules 2 with
    ``summary_budget`` 0 nothing is summarized: covered events are packed as if no
    compaction existed.

    Raises:
        AssertionError: naming the report or the position that disagrees.
    """
    decisions = packed.decisions
    if not decisions:
        return
    if any(d.rule.split(".", 1)[0] not in _BUILTIN_RULES and d.rule != d.kind
           for d in decisions):
        return  # a custom stage changed the prompt after the summaries stage reported
    reports = [r for r in packed.stages if r.name == "summaries"]
    # (a custom stage may summarize items itself, under its own rule)
    summarized = [d for d in decisions if d.decision == "summarized"
                  and d.rule.startswith("summaries.")]
    shown = [d.pos for d in decisions if d.kind == "compaction"
             and d.decision == "verbatim"]
    if not reports or not reports[0].fired:
        assert not summarized, (
            f"the summaries stage did not fire ({reports[0].detail if reports else 'absent'})"
            f" but {_where(view, summarized[0].pos)} is decided summarized")
        assert not shown, (f"the summaries stage did not fire but the summary at "
                           f"{_where(view, shown[0])} is decided shown")
    else:
        report = reports[0]
        expected = f"{len(shown)} summaries shown, {len(summarized)} events summarized"
        assert report.detail == expected, (
            f"the summaries stage reports {report.detail!r}; the decisions say {expected!r}")
        assert report.events == len(summarized), (
            f"the summaries stage counts {report.events} events; {len(summarized)} are "
            "decided summarized")
    if packed.rules >= 2 and policy.summary_budget == 0:
        assert not summarized, (f"summary_budget is 0 but {_where(view, summarized[0].pos)} "
                                "is decided summarized")
    spans: dict[int, tuple[int, int]] = {}
    for pos in view.compactions:
        body = view.events[pos].body
        assert isinstance(body, CompactionCommitted)
        spans[pos] = (body.first_seq, body.last_seq)
    for decision in summarized:
        detail = decision.detail
        assert detail.startswith("covered by compaction #"), (
            f"{_where(view, decision.pos)} is summarized but names no compaction: {detail!r}")
        at = int(detail.removeprefix("covered by compaction #").split(" ", 1)[0])
        assert at in spans, (f"{_where(view, decision.pos)} is summarized by position {at}, "
                             "which is no committed compaction of the view")
        first, last = spans[at]
        if "completes a tool exchange" not in detail:
            assert first <= decision.pos <= last, (
                f"{_where(view, decision.pos)} is summarized by compaction #{at}, whose span "
                f"{first}-{last} does not hold it")
    for pos in shown:
        first, last = spans[pos]
        for covered in range(first, min(last + 1, len(decisions))):
            if view.item_at.get(covered) is None:
                continue
            decision = decisions[covered]
            assert decision.decision != "trimmed", (
                f"{_where(view, covered)} is covered by the shown summary #{pos} but decided "
                f"trimmed ({decision.rule}): it is summarized")


def check_packed(view: Projection, packed: Packed, policy: Policy) -> None:
    """Every single-pack checker: budget, tool pairs, order, mandatory tail,
    decisions, protections, summaries."""
    check_budget(packed, policy)
    check_tool_pairs(packed.prompt)
    check_order(view, packed)
    check_decisions(view, packed)
    check_mandatory_tail(view, packed, policy)
    check_protected(view, packed)
    check_summaries(view, packed, policy)


def check_deterministic(view_factory: Callable[[], Projection], policy: Policy, *,
                        stages: Sequence[tuple[str, Stage]] | None = None) -> Packed | None:
    """Packing is a function of its inputs: two fresh projections give identical
    ``prompt.encode()`` and decisions, and so does packing the same projection again.

    Returns:
        The first `Packed`, or None when both raised the same `BudgetExceededError`.
    Raises:
        AssertionError: naming the first differing part.
    """
    results: list[Packed | str] = []
    first_view = view_factory()
    for view in (first_view, view_factory(), first_view):
        try:
            results.append(pack(view, policy, stages=stages))
        except BudgetExceededError as exc:
            results.append(str(exc))
    first = results[0]
    for n, other in enumerate(results[1:], 1):
        label = "a fresh projection" if n == 1 else "the same projection packed again"
        if isinstance(first, str) or isinstance(other, str):
            assert first == other, f"{label}: one pack raised, the other did not " \
                                   f"({first if isinstance(first, str) else other})"
            continue
        if first.prompt.encode() != other.prompt.encode():
            raise AssertionError(f"{label} gives different prompt bytes: first difference "
                                 f"at {first.prompt.first_difference(other.prompt)}")
        assert first.decisions == other.decisions, f"{label} gives different decisions"
        assert first.tokens == other.tokens, f"{label} gives {other.tokens} tokens, " \
                                             f"not {first.tokens}"
    return None if isinstance(first, str) else first


def check_all(view_factory: Callable[[], Projection], policy: Policy, *,
              stages: Sequence[tuple[str, Stage]] | None = None) -> Packed | None:
    """Pack a fresh projection and run every checker, determinism included.

    A `BudgetExceededError` is accepted only when `check_overflow` confirms it.

    Returns:
        The `Packed` result, or None when the budget was (rightly) exceeded.
    """
    view = view_factory()
    try:
        packed = pack(view, policy, stages=stages)
    except BudgetExceededError as exc:
        check_overflow(view, policy, exc)
        check_deterministic(view_factory, policy, stages=stages)
        return None
    check_packed(view, packed, policy)
    check_deterministic(view_factory, policy, stages=stages)
    return packed


def check_stage(stage_name: str, stage: Stage, session_items: Sequence[SessionItem],
                policy: Policy, position: str = "before:trim") -> Packed | None:
    """Check a custom stage against every invariant on one session.

    Builds an in-memory log from ``session_items`` (see `sessions`), packs it with
    ``stage`` inserted into a copy of `DEFAULT_STAGES` at ``position`` (see
    `with_stage`), and runs `check_all`.

    Returns:
        The `Packed` result, or None when the budget was (rightly) exceeded.
    Raises:
        AssertionError: an invariant does not hold; the message says which and where.
    """
    log = memory_log()
    session = build(log, "check-stage", session_items)
    stages = with_stage(stage_name, stage, position)
    return check_all(lambda: project(log, session), policy, stages=stages)

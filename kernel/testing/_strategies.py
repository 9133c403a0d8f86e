"""Hypothesis strategies: generated policies and agent sessions, and how to log them.

`policies` gives valid policies over many budgets (small windows included, with
buffers and pruning numbers scaled so that every stage actually fires);
`sessions` gives realistic agent sessions (parallel tool calls, errors, huge and
blob-sized outputs, late and out-of-order results, notifications, recalls, pins,
system changes, compactions, a rewind and a fork); `long_turns` gives one long
agentic turn. `build` appends a generated session to a log (`memory_log` makes
one), `project` folds it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import blake3
import msgspec
from hypothesis import strategies as st

from .._events import (
    AssistantMessageAdded,
    Body,
    CompactionCommitted,
    EventsPinned,
    ImagePart,
    NativePart,
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
from .._log import Draft, Log
from .._memstore import MemoryStore
from .._policy import Policy
from .._projection import Projection
from .._tokens import TokenCounter, get_counter

__all__ = [
    "Compact",
    "Fork",
    "SessionItem",
    "build",
    "long_turns",
    "memory_log",
    "policies",
    "project",
    "sessions",
]


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
            digest = blake3.blake3(
                b"".join(e.hash for e in lineage[item.first : item.last + 1])
            ).hexdigest()
            batch.append(
                CompactionCommitted(
                    first_seq=item.first,
                    last_seq=item.last,
                    covered_digest=digest,
                    summary=item.summary,
                    level=item.level,
                    children=item.children,
                    summarizer="turnlog.testing",
                    reason="rollup" if item.level else "threshold",
                )
            )
        else:
            batch.append(item)
    flush()
    return current


def project(log: Log, session: str, counter: TokenCounter | None = None) -> Projection:
    """A fresh projection of ``session``'s whole lineage (``cl100k_base`` by default)."""
    view = Projection(counter or get_counter("cl100k_base"))
    view.extend(log.lineage(session))
    return view


# -- policies -------------------------------------------------------------------------------
_WINDOWS = (2_000, 3_000, 4_000, 6_000, 8_000, 12_000, 16_000, 32_000, 64_000, 128_000, 200_000)


@st.composite
def policies(
    draw: st.DrawFn, *, min_window: int = 2_000, max_window: int = 200_000, stages: bool = True
) -> Policy:
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
    fractions = sorted(draw(st.lists(st.floats(0.0, 0.6), min_size=3, max_size=3)), reverse=True)
    use_ratio = draw(st.sampled_from(("buffer", "buffer", "ratio", "both")))
    thresholds: dict[str, Any] = {}
    for name, fraction in zip(("warning", "compact", "blocking"), fractions, strict=True):
        buffer = int(usable * fraction)
        thresholds[f"{name}_buffer"] = None if use_ratio == "ratio" else buffer
        thresholds[f"{name}_ratio"] = None if use_ratio == "buffer" else round(1.0 - fraction, 3)
    big = usable > 40_000
    truncate_bytes = max(64, int(usable * draw(st.sampled_from((0.3, 0.6, 1.0, 2.0, 4.0)))))
    return Policy(
        context_window=window,
        output_reserve=reserve,
        safety_margin=margin,
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
        tool_clip_ratio=draw(st.sampled_from((None, None, None, 0.01, 0.05, 0.5))),
        summary_gate=draw(st.sampled_from((0.0, 0.5, 0.72, 1.0))),
    ).resolved()


# -- sessions -------------------------------------------------------------------------------
_FILES = (
    "src/app.py",
    "src/util.py",
    "src/models/user.py",
    "tests/test_app.py",
    "README.md",
    "docs/guide.md",
)
_WORDS = (
    "the",
    "value",
    "config",
    "parser",
    "request",
    "cache",
    "user",
    "session",
    "error",
    "returns",
    "list",
    "index",
    "path",
    "token",
    "budget",
    "result",
    "check",
    "update",
    "file",
    "line",
    "import",
    "test",
    "fails",
    "because",
    "handler",
    "timeout",
)
_DECIDE = ("Based on the output, ", "The issue is that ", "I'll use the helper: ", "Therefore ", "")
_SECTIONS = (("base", 0), ("environment", 10), ("memories", 20), ("mode", 30))
_TOOLS = (
    ToolSpec(
        name="Read",
        description="Read a file from the workspace.",
        parameters='{"type":"object","properties":{"file_path":{"type":"string"},'
        '"offset":{"type":"integer"},"limit":{"type":"integer"}}}',
    ),
    ToolSpec(
        name="Edit",
        description="Replace a string in a file.",
        parameters='{"type":"object","properties":{"file_path":{"type":"string"},'
        '"old_string":{"type":"string"},"new_string":{"type":"string"}}}',
    ),
    ToolSpec(
        name="Write",
        description="Write a whole file.",
        parameters='{"type":"object","properties":{"file_path":{"type":"string"},'
        '"content":{"type":"string"}}}',
    ),
    ToolSpec(
        name="Grep",
        description="Search file contents with a regex.",
        parameters='{"type":"object","properties":{"pattern":{"type":"string"},'
        '"path":{"type":"string"}}}',
    ),
    ToolSpec(
        name="Glob",
        description="List files matching a glob.",
        parameters='{"type":"object","properties":{"pattern":{"type":"string"}}}',
    ),
    ToolSpec(
        name="Bash",
        description="Run a shell command.",
        parameters='{"type":"object","properties":{"command":{"type":"string"}}}',
    ),
)


class _Sim:
    """The simulated agent behind `sessions`: what has been said, which calls are open."""

    def __init__(
        self,
        draw: st.DrawFn,
        seed: int,
        max_events: int,
        options: dict[str, bool],
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
        return [
            f"{i + 1:6d}\t{'    ' * rng.randint(0, 2)}{rng.choice(_WORDS)}_{i} = "
            f"{rng.choice(_WORDS)}({rng.randint(0, 999)})  # v{version}"
            for i in range(size)
        ]

    def big_text(self, lines: int, width: int) -> str:
        base = self.rng.randint(0, 10**6)
        return "\n".join(
            f"[{base + i}] {self.words(1)} " + "x" * (width + i % 7) for i in range(lines)
        )

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
            parts.append(
                ReasoningPart(
                    text=self.words(self.draw(st.integers(3, 60))),
                    opaque="sig" * self.draw(st.integers(0, 20)),
                    provider="anthropic",
                )
            )
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

    def native(self) -> None:
        """A provider's compaction (either format's), then text, as the API returns it."""
        summary = self.words(self.draw(st.integers(3, 40)))
        if self.draw(st.booleans()):
            part = NativePart(
                format="anthropic",
                item_type="compaction",
                data=json.dumps({"type": "compaction", "content": summary}),
                text=summary,
            )
        else:
            part = NativePart(
                format="openai-responses",
                item_type="compaction",
                data=json.dumps(
                    {
                        "type": "compaction",
                        "id": f"cmp_{self.pos}",
                        "encrypted_content": "gAAAA" + "Zm9v" * len(summary),
                    }
                ),
            )
        self.emit(
            AssistantMessageAdded(parts=(part, TextPart(text=self.words(5))), model="test-model")
        )

    def call(self) -> tuple[str, dict[str, Any]]:
        tool = self.draw(
            st.sampled_from(
                ("Read", "Read", "Read", "Edit", "Write", "Grep", "Glob", "Bash", "Bash")
            )
        )
        path = (
            self.draw(st.sampled_from(_FILES[:3]))
            if self.draw(st.integers(0, 4))
            else self.draw(st.sampled_from(_FILES))
        )
        if self.touched and self.draw(st.integers(0, 2)) == 0:
            path = self.touched[-1]  # back to the file just read, searched or edited
        self.touched.append(path)
        if tool == "Read":
            if self.draw(st.integers(0, 4)) == 0:
                return tool, {
                    "file_path": path,
                    "offset": self.draw(st.integers(1, 50)),
                    "limit": 20,
                }
            return tool, {"file_path": path}
        if tool == "Edit":
            return tool, {
                "file_path": path,
                "old_string": self.words(3),
                "new_string": self.words(3),
            }
        if tool == "Write":
            return tool, {"file_path": path, "content": self.words(20)}
        if tool == "Grep":
            target = path if self.draw(st.booleans()) else "src/"
            return tool, {"pattern": self.rng.choice(_WORDS), "path": target}
        if tool == "Glob":
            return tool, {"pattern": self.draw(st.sampled_from(("**/*.py", "src/*", "*.md")))}
        command = self.draw(
            st.sampled_from(
                ("pytest -q", "ls -la", "git status", "python -m build", "cat src/app.py")
            )
        )
        return tool, {"command": command}

    def output(self, tool: str, args: dict[str, Any]) -> tuple[str, bool, int | None]:
        """(output, is_error, exit_code) of a call."""
        path = args.get("file_path") or args.get("path") or ""
        if self.draw(st.integers(0, 9)) == 0:
            code = self.draw(st.sampled_from((1, 2, 127)))
            return (
                f"Error: {self.words(6)} ({path or args.get('command', '')})",
                True,
                code if tool == "Bash" else None,
            )
        size = self.draw(st.integers(0, 29))
        if tool == "Read":
            lines = self.file_text(path)
            if "offset" in args:
                start = int(args["offset"])
                lines = lines[start : start + int(args.get("limit", 20))]
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
            self.emit(
                ToolResultAdded(
                    call_id=f"unknown_{self.pos}",
                    tool_name="Bash",
                    output="late output of a call nobody made",
                )
            )
            return
        tool, args, _ = self.open.pop(call_id)
        output, is_error, code = self.output(tool, args)
        self.last_output = output
        self.emit(
            ToolResultAdded(
                call_id=call_id, tool_name=tool, output=output, is_error=is_error, exit_code=code
            )
        )

    def notification(self) -> None:
        huge = self.draw(st.integers(0, 9)) == 0
        text = self.big_text(200, 20) if huge else f"File {self.rng.choice(_FILES)} changed."
        self.emit(
            NotificationAdded(
                source=self.draw(st.sampled_from(("watcher", "jobs", "child-agent"))), text=text
            )
        )

    def recall(self) -> None:
        hits = tuple(
            RecallHit(
                session="past",
                seq=i,
                text=self.words(self.draw(st.integers(5, 200))),
                score=f"0.{9 - i}",
            )
            for i in range(self.draw(st.integers(0, 5)))
        )
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
        self.emit(
            SystemSectionSet(name=name, text=f"# {name}\n{self.words(size)}", position=position)
        )

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
        chosen = sorted(
            set(self.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3)))
        )
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
            self.items.append(
                Compact(
                    first=first,
                    last=last,
                    level=1,
                    children=tuple(k[0] for k in kids),
                    summary="Roll-up: " + self.words(30),
                )
            )
            self.compactions.append((self.pos, first, last, 1))
            self.kinds.append("compaction")
            return
        if below < 3:
            return
        first = self.draw(st.integers(0, below - 1))
        last = self.draw(st.integers(first, min(below, first + 20)))
        self.items.append(
            Compact(
                first=first,
                last=last,
                summary=f"Summary of {first}-{last}: " + self.words(self.draw(st.integers(5, 120))),
            )
        )
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
        actions = (
            ["turn"] * 6
            + ["exchange"] * 4
            + ["notification", "recall", "recall", "late", "orphan", "section", "pin"]
        )
        if opts["compactions"]:
            actions.append("compact")
        if opts["rewinds"]:
            actions.append("rewind")
        if opts["forks"]:
            actions.append("fork")
        if opts["native"]:
            actions.append("native")
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
            elif action == "native":
                self.native()
            if self.draw(st.integers(0, 40)) == 40:
                break
        if self.draw(st.integers(0, 4)) == 0:
            self.assistant(calls=self.draw(st.integers(1, 3)))  # a call left pending at the end
        return self.items


@st.composite
def sessions(
    draw: st.DrawFn,
    *,
    max_events: int = 60,
    forks: bool = True,
    rewinds: bool = True,
    compactions: bool = True,
    native: bool = False,
) -> list[SessionItem]:
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
        native: allow assistant messages opening with a provider's own compaction (a
            `NativePart`, which replaces the conversation before it in prompts).
    """
    seed = draw(st.integers(0, 2**32 - 1))
    options = {"forks": forks, "rewinds": rewinds, "compactions": compactions, "native": native}
    limit = draw(st.integers(1, max(1, max_events)))
    return _Sim(draw, seed, limit, options).run()


@st.composite
def long_turns(
    draw: st.DrawFn,
    *,
    min_steps: int = 20,
    max_steps: int = 300,
    giants: bool = True,
    reused_ids: bool = True,
    freeform: bool = True,
    compactions: bool = True,
) -> list[SessionItem]:
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
                arguments = (
                    f"*** Begin Patch\n*** Update File: {rng.choice(_FILES)}\n"
                    f"-{words(8)}\n+{words(8)}\n*** End Patch"
                )
                if big and rng.random() < 0.5:
                    arguments += "\n" + giant()
                calls.append(
                    ToolCall(id=call_id, name="apply_patch", arguments=arguments, freeform=True)
                )
            elif big and rng.random() < 0.5:
                calls.append(
                    ToolCall(
                        id=call_id,
                        name="Write",
                        arguments=json.dumps({"file_path": rng.choice(_FILES), "content": giant()}),
                    )
                )
            else:
                calls.append(
                    ToolCall(
                        id=call_id,
                        name="Bash",
                        arguments=json.dumps(
                            {"command": f"grep -n {rng.choice(_WORDS)} {rng.choice(_FILES)}"}
                        ),
                    )
                )
        text = giant() if big and not calls else words(rng.randint(3, 40))
        items.append(AssistantMessageAdded(parts=(TextPart(text=text), *calls)))
        for call in calls:
            if rng.random() < 0.03:
                continue  # never answered
            output = (
                giant()
                if big and rng.random() < 0.3
                else "\n".join(
                    f"{rng.choice(_FILES)}:{i}: {words(8)}" for i in range(rng.randint(1, 30))
                )
            )
            items.append(
                ToolResultAdded(
                    call_id=call.id, tool_name=call.name, output=output, is_error=rng.random() < 0.1
                )
            )
        if big and rng.random() < 0.2:
            items.append(UserMessageAdded(text=giant()))  # a giant message mid-session
    positions = len(items)
    for k in range(n_compactions):
        if positions < 4:
            break
        last = rng.randint(1, positions - 2)
        first = rng.randint(0, last)
        items.append(
            Compact(
                first=first,
                last=last,
                summary=f"Summary {k} of positions {first}-{last}: {words(30)}",
            )
        )
    return items

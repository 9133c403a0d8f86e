"""The generator of the demo session: a scripted agent on a virtual project.

Theory of operation
-------------------
`generate` plays a scripted session of an agent working on a made-up Python
project (``ledgerly``, see ``project``) against a virtual file system, and returns
the events of each turn as `turnlog.Draft` lists. Tool results are computed from
that file system, so reads after an edit show the edit, greps find what is really
there, ``git diff`` shows what changed and test runs list the tests that exist.
All randomness comes from one ``random.Random(seed)`` and all times from a fixed
start plus scripted durations; the clock is never read. Turn *k* depends only on
turns before it, so ``generate(n) == generate(m)[:n]`` for ``n <= m``.

The demo ships what this writes, not this code: ``python -m tests.demo.generate``
rewrites ``tools/demo_session.jsonl.gz`` (`turnlog.tools.demo` reads it), and
``tests/test_demo.py`` checks that the file is exactly what this generates.
"""

from __future__ import annotations

import difflib
import fnmatch
import gzip
import hashlib
import json
import random
import re
from collections.abc import Callable, Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path

import msgspec
from turnlog import Draft
from turnlog.events import (
    AssistantMessageAdded,
    Body,
    EventsPinned,
    MemoryChanged,
    NotificationAdded,
    Part,
    ReasoningPart,
    SystemSectionSet,
    TextPart,
    ToolCall,
    ToolResultAdded,
    ToolSpec,
    ToolsSet,
    UserMessageAdded,
)
from turnlog.tools.demo import DATA_FILE, MAX_TURNS, MODEL, START_TIME

from tests.demo.project import ROOT, initial_files

# -- system prompt and tools ------------------------------------------------------

_BASE = """\
You are a software engineering agent working in the user's repository through tools.

# How to work
- Read the relevant code before changing it; never guess at file contents.
- Prefer small, reviewable edits. Keep the existing style of each file.
- After a change, run the narrowest tests that cover it, then the whole suite.
- When a command fails, read its output fully before trying again.
- Do not commit, push or rewrite history unless the user asks.

# Tools
- Read returns a file with line numbers; line numbers are not part of the file.
- Edit replaces one exact occurrence of old_string; include enough context to be unique.
- Use Grep and Glob to search instead of running grep or find through Bash.
- Several independent tool calls may be made in one message; they run in parallel.

# Answers
- Be brief. Lead with the result, then what you changed and how you checked it.
- Reference code as path:line so the user can jump to it.
"""

_MODES = {
    "plan": (
        "Plan mode is active. Investigate with read-only tools and propose a plan. Do "
        "not edit files and do not run commands that change state until the user "
        "approves the plan."
    ),
    "default": (
        "Default mode. Edits inside the project directory need no confirmation. "
        "Ask before running commands that touch anything outside it, install "
        "packages or change git history."
    ),
    "accept-edits": (
        "Accept-edits mode. File edits are applied without review; the user "
        "reviews the diff at the end. Keep edits minimal and mention every "
        "file you changed in your final answer."
    ),
}


def _environment(branch: str, day: str) -> str:
    return (
        f"Working directory: {ROOT}\nIs a git repository: yes\nBranch: {branch}\n"
        f"Platform: linux (x86_64)\nShell: bash\nPython: 3.12.3 (.venv)\n"
        f"Today's date: {day}\n"
    )


def _schema(properties: dict[str, object], required: list[str]) -> str:
    return json.dumps(
        {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        sort_keys=True,
    )


_TOOLS = (
    ToolSpec(
        name="Read",
        description=(
            "Read a file from the local file system. Returns the contents with line numbers "
            "(cat -n format). Use offset and limit for long files."
        ),
        parameters=_schema(
            {
                "file_path": {"type": "string", "description": "Absolute path of the file"},
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Line number to start reading at",
                },
                "limit": {"type": "integer", "minimum": 1, "description": "Number of lines"},
            },
            ["file_path"],
        ),
    ),
    ToolSpec(
        name="Edit",
        description=(
            "Replace an exact string in a file. old_string must occur exactly once unless "
            "replace_all is true."
        ),
        parameters=_schema(
            {
                "file_path": {"type": "string"},
                "old_string": {"type": "string", "description": "Text to replace, verbatim"},
                "new_string": {"type": "string", "description": "Replacement text"},
                "replace_all": {"type": "boolean", "default": False},
            },
            ["file_path", "old_string", "new_string"],
        ),
    ),
    ToolSpec(
        name="Write",
        description="Create or overwrite a file with the given content.",
        parameters=_schema(
            {"file_path": {"type": "string"}, "content": {"type": "string"}},
            ["file_path", "content"],
        ),
    ),
    ToolSpec(
        name="Grep",
        description=(
            "Search file contents with a regular expression. output_mode 'content' shows "
            "matching lines, 'files_with_matches' (default) only paths."
        ),
        parameters=_schema(
            {
                "pattern": {"type": "string", "description": "Regular expression"},
                "path": {"type": "string", "description": "File or directory to search"},
                "glob": {"type": "string", "description": "Only files matching this glob"},
                "output_mode": {
                    "type": "string",
                    "enum": ["content", "files_with_matches", "count"],
                },
                "-n": {"type": "boolean", "description": "Show line numbers"},
                "-i": {"type": "boolean", "description": "Case insensitive"},
            },
            ["pattern"],
        ),
    ),
    ToolSpec(
        name="Glob",
        description="Find files by name pattern, e.g. 'src/**/*.py'.",
        parameters=_schema(
            {"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"]
        ),
    ),
    ToolSpec(
        name="Bash",
        description=(
            "Run a shell command in the project directory. Output is truncated only by the "
            "caller. Set run_in_background for long jobs; you are notified when they finish."
        ),
        parameters=_schema(
            {
                "command": {"type": "string"},
                "description": {"type": "string", "description": "What the command does"},
                "timeout": {"type": "integer", "maximum": 600000},
                "run_in_background": {"type": "boolean"},
            },
            ["command"],
        ),
    ),
)


# -- the virtual project ----------------------------------------------------------------


def _numbered(text: str, start: int = 1) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(lines, start))


def _git_hash(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


class _Project:
    """The repository the agent works in: files, the last commit, test state."""

    def __init__(self, seed: int) -> None:
        self.files = initial_files(seed)
        self.committed = dict(self.files)
        self.branch = "main"
        self.commits: list[str] = [
            "9c41d07 Release 0.4.1",
            "51e0b2a Skip Harbor total rows",
            "e37a9f5 Regenerate merchant table",
        ]
        #: test id -> (source lines up to the failing one, error), for failing tests.
        self.failing: dict[str, tuple[list[str], str]] = {}

    @staticmethod
    def rel(path: str) -> str:
        return path[len(ROOT) + 1 :] if path.startswith(ROOT + "/") else path

    def tests(self) -> list[str]:
        """Test ids as pytest collects them, in file order."""
        ids: list[str] = []
        rows = self.files["tests/fixtures/statement_2023.csv"].count("\n") - 1
        for path in sorted(p for p in self.files if re.fullmatch(r"tests/test_\w+\.py", p)):
            params: list[str] | None = None
            for line in self.files[path].split("\n"):
                if line.startswith("@pytest.mark.parametrize"):
                    if "ROWS" in line:
                        params = [f"row{i}" for i in range(rows)]
                    else:
                        count = line[line.index("[") :].count("(") if "[" in line else 1
                        params = [str(i) for i in range(max(1, count))]
                found = re.match(r"def (test_\w+)\(", line)
                if found:
                    name = f"{path}::{found.group(1)}"
                    ids += [f"{name}[{p}]" for p in params] if params else [name]
                    params = None
        return ids


# -- the session builder -------------------------------------------------------------------

Call = tuple[str, dict[str, object]]


class _Builder:
    """Accumulates the drafts of the current turn and simulates the tools."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.project = _Project(seed)
        self.clock = START_TIME
        self.turn = 0
        self.seq = 0  # seq of the next event, assuming the session starts empty
        self.drafts: list[Draft] = []
        self.last_assistant_key = ""
        self.background: dict[str, tuple[str, str, int]] = {}
        self.mode = ""
        self.env_branch = ""

    # -- envelope ----------------------------------------------------------------------
    def _add(
        self,
        body: Body,
        *,
        after: float,
        causation: str | None = None,
        meta: dict[str, object] | None = None,
    ) -> str:
        self.clock += int(after * 1_000_000)
        key = f"demo-{self.turn}-{len(self.drafts)}"
        self.drafts.append(
            Draft(body=body, time=self.clock, key=key, causation=causation, meta=meta or {})
        )
        self.seq += 1
        return key

    def start_turn(self) -> None:
        self.turn += 1
        self.drafts = []
        if self.env_branch and self.env_branch != self.project.branch:
            self.environment()  # the runtime refreshes the environment section

    # -- event helpers -----------------------------------------------------------------
    def system(self, name: str, text: str, position: int) -> None:
        self._add(SystemSectionSet(name=name, text=text, position=position), after=0.01)

    def set_mode(self, mode: str) -> None:
        if mode != self.mode:
            self.mode = mode
            self.system("mode", _MODES[mode], 20)

    def environment(self) -> None:
        self.env_branch = self.project.branch
        day = "2024-03-12" if self.clock < START_TIME + 86_400_000_000 else "2024-03-13"
        self.system("environment", _environment(self.project.branch, day), 10)

    def user(self, text: str) -> int:
        seq = self.seq
        self._add(UserMessageAdded(text=text), after=self.rng.uniform(20, 240))
        return seq

    def notify(self, source: str, text: str, *, causation: str | None = None) -> None:
        self._add(
            NotificationAdded(source=source, text=text),
            after=self.rng.uniform(1, 40),
            causation=causation,
        )

    def say(self, text: str, *calls: Call, think: str = "") -> list[str]:
        """One assistant message (text, then parallel tool calls), then the results."""
        parts: list[Part] = []
        if think:
            parts.append(ReasoningPart(text=think))
        if text:
            parts.append(TextPart(text=text))
        ids = []
        for name, args in calls:
            call_id = f"call_{self.rng.getrandbits(96):024x}"
            ids.append(call_id)
            parts.append(
                ToolCall(id=call_id, name=name, arguments=json.dumps(args, ensure_ascii=False))
            )
        latency = round(self.rng.uniform(1.5, 14.0), 2)
        key = self._add(
            AssistantMessageAdded(parts=tuple(parts), model=MODEL),
            after=latency,
            meta={"latency_s": latency, "stop_reason": "tool_use" if calls else "end_turn"},
        )
        self.last_assistant_key = key
        outputs = []
        for call_id, (name, args) in zip(ids, calls, strict=True):
            output, is_error, exit_code, seconds = self._run(name, args)
            outputs.append(output)
            self._add(
                ToolResultAdded(
                    call_id=call_id,
                    tool_name=name,
                    output=output,
                    is_error=is_error,
                    exit_code=exit_code,
                ),
                after=seconds,
                causation=key,
                meta={"duration_ms": int(seconds * 1000)},
            )
        return outputs

    def pin(self, seqs: tuple[int, ...]) -> None:
        self._add(EventsPinned(seqs=seqs), after=0.5)

    def remember(self, memory_id: str, title: str, content: str, source: int) -> None:
        self._add(
            MemoryChanged(
                op="save",
                memory_id=memory_id,
                memory_type="project",
                retention="durable",
                title=title,
                content=content,
                source_seqs=(source,),
                reason="user asked to remember",
            ),
            after=0.2,
        )

    # -- tool simulation ---------------------------------------------------------------
    def _run(self, name: str, args: dict[str, object]) -> tuple[str, bool, int | None, float]:
        rng = self.rng
        if name == "Read":
            out, err = self._read(str(args["file_path"]))
            return out, err, None, rng.uniform(0.02, 0.3)
        if name == "Edit":
            out, err = self._edit(
                str(args["file_path"]),
                str(args["old_string"]),
                str(args["new_string"]),
                bool(args.get("replace_all")),
            )
            return out, err, None, rng.uniform(0.02, 0.2)
        if name == "Write":
            rel = self.project.rel(str(args["file_path"]))
            existed = rel in self.project.files
            self.project.files[rel] = str(args["content"])
            text = (
                f"The file {args['file_path']} has been overwritten."
                if existed
                else f"File created successfully at: {args['file_path']}"
            )
            return text, False, None, rng.uniform(0.02, 0.2)
        if name == "Grep":
            return self._grep(args), False, None, rng.uniform(0.05, 0.9)
        if name == "Glob":
            pattern = str(args["pattern"])
            found = sorted(f"{ROOT}/{p}" for p in self.project.files if fnmatch.fnmatch(p, pattern))
            return "\n".join(found) or "No files found", False, None, rng.uniform(0.02, 0.3)
        if name == "Bash":
            out, code, seconds = self._bash(
                str(args["command"]), bool(args.get("run_in_background"))
            )
            return out, code != 0, code, seconds
        raise ValueError(f"the demo has no tool {name!r}")

    def _read(self, path: str) -> tuple[str, bool]:
        text = self.project.files.get(self.project.rel(path))
        if text is None:
            return f"File does not exist: {path}", True
        return _numbered(text), False

    def _edit(self, path: str, old: str, new: str, replace_all: bool) -> tuple[str, bool]:
        rel = self.project.rel(path)
        text = self.project.files.get(rel)
        if text is None:
            return f"File does not exist: {path}", True
        count = text.count(old)
        if replace_all and count:
            self.project.files[rel] = text.replace(old, new)
            return (
                f"The file {path} has been updated. All {count} occurrences were replaced.",
                False,
            )
        if count != 1:
            return (
                f"String to replace {'not found' if count == 0 else 'is not unique'} in file {path}"
            ), True
        at = text.index(old)
        text = text[:at] + new + text[at + len(old) :]
        self.project.files[rel] = text
        first = text[:at].count("\n") + 1
        last = first + new.count("\n")
        lines = text.split("\n")
        lo, hi = max(1, first - 4), min(len(lines), last + 4)
        snippet = _numbered("\n".join(lines[lo - 1 : hi]), lo)
        return (
            f"The file {path} has been updated. Here's the result of running `cat -n` on "
            f"a snippet of the edited file:\n{snippet}"
        ), False

    def _grep(self, args: dict[str, object]) -> str:
        flags = re.IGNORECASE if args.get("-i") else 0
        pattern = re.compile(str(args["pattern"]), flags)
        where = self.project.rel(str(args.get("path", ROOT)))
        where = "" if where == ROOT else where
        glob = str(args.get("glob", "*"))
        mode = str(args.get("output_mode", "files_with_matches"))
        hits: list[str] = []
        files: list[str] = []
        for rel in sorted(self.project.files):
            if where and rel != where and not rel.startswith(where.rstrip("/") + "/"):
                continue
            if not fnmatch.fnmatch(rel.rsplit("/", 1)[-1], glob):
                continue
            matched = False
            for number, line in enumerate(self.project.files[rel].split("\n"), 1):
                if pattern.search(line):
                    matched = True
                    prefix = f"{ROOT}/{rel}:{number}:" if args.get("-n") else f"{ROOT}/{rel}:"
                    hits.append(prefix + line)
            if matched:
                files.append(f"{ROOT}/{rel}")
        if not files:
            return "No matches found"
        if mode == "content":
            return "\n".join(hits)
        if mode == "count":
            return "\n".join(f"{f}:{sum(h.startswith(f + ':') for h in hits)}" for f in files)
        return f"Found {len(files)} file{'s' * (len(files) != 1)}\n" + "\n".join(files)

    # -- bash -------------------------------------------------------------------------
    def _bash(self, command: str, background: bool) -> tuple[str, int, float]:
        rng = self.rng
        if background:
            job = f"bash_{len(self.background) + 1}"
            out, code, _ = self._bash(command, False)
            self.background[job] = (command, out, code)
            return (f"Command running in background with ID: {job}", 0, rng.uniform(0.05, 0.2))
        # Dispatch on the program, not on words that may appear in arguments.
        if command.startswith("git"):
            return self._git(command)
        if command.startswith("uv lock"):
            return self._uv_lock(command)
        if command.startswith("ruff format"):
            count = sum(1 for p in self.project.files if p.endswith(".py"))
            return f"{count} files already formatted", 0, rng.uniform(0.05, 0.2)
        if command.startswith("ruff"):
            return self._ruff()
        if command.startswith(("python -m pytest", "pytest")):
            return self._pytest(command)
        if "cProfile" in command:
            return self._profile()
        if "ledgerly import" in command:
            return self._import(command)
        if "ledgerly report" in command or "ledgerly budget" in command:
            return self._report(command)
        if command.startswith("wc -l"):
            rel = command.rsplit(maxsplit=1)[-1]
            text = self.project.files.get(rel, "")
            return f"{text.count(chr(10))} {rel}", 0, rng.uniform(0.01, 0.05)
        return "", 0, rng.uniform(0.05, 0.5)

    def _pytest(self, command: str) -> tuple[str, int, float]:
        rng = self.rng
        verbose = " -v" in command
        select = [a for a in command.split() if a.startswith("tests/")]
        keyword = re.search(r"-k (\w+)", command)
        ids = [
            t
            for t in self.project.tests()
            if (not select or any(t.startswith(s) for s in select))
            and (not keyword or keyword.group(1) in t.split("::")[-1])
        ]
        failed = [t for t in ids if t in self.project.failing]
        seconds = round(0.35 + len(ids) * 0.0021 + rng.uniform(0, 0.6), 2)
        lines = [
            f"{' test session starts ':=^80}",
            f"platform linux -- Python 3.12.3, pytest-{self._locked('pytest')}, "
            f"pluggy-{self._locked('pluggy')}",
            f"rootdir: {ROOT}",
            "configfile: pyproject.toml",
            "plugins: cov-5.0.0",
            f"collected {len(ids)} items",
            "",
        ]
        if verbose:
            for i, test in enumerate(ids, 1):
                status = "FAILED" if test in self.project.failing else "PASSED"
                lines.append(f"{test} {status} [{i * 100 // len(ids):>3}%]")
        else:
            by_file: dict[str, str] = {}
            for test in ids:
                name = test.split("::")[0]
                by_file[name] = by_file.get(name, "") + ("F" if test in failed else ".")
            done = 0
            for name, marks in by_file.items():
                for start in range(0, len(marks), 72):
                    chunk = marks[start : start + 72]
                    done += len(chunk)
                    text = f"{name} {chunk}" if start == 0 else chunk
                    lines.append(f"{text:<92} [{done * 100 // len(ids):>3}%]")
        if failed:
            lines += ["", f"{' FAILURES ':=^80}"]
            for test in failed:
                lines.append(f"{' ' + test.split('::', 1)[1] + ' ':_^80}")
                lines.append(self._failure(test))
        if "--cov" in command:
            lines += [
                "",
                "---------- coverage: platform linux, python 3.12.3-final-0 -----------",
                "Name                           Stmts   Miss  Cover   Missing",
                "------------------------------------------------------------",
            ]
            total = miss_total = 0
            for rel in sorted(
                p for p in self.project.files if p.startswith("src/") and p.endswith(".py")
            ):
                stmts = sum(
                    1
                    for line in self.project.files[rel].split("\n")
                    if line.strip() and not line.strip().startswith(("#", '"""'))
                )
                miss = (
                    0
                    if rel.endswith(("_merchants.py", "__init__.py"))
                    else rng.randrange(0, max(2, stmts // 6))
                )
                total += stmts
                miss_total += miss
                missing = ", ".join(str(rng.randrange(10, 90)) for _ in range(min(miss, 4)))
                lines.append(
                    f"{rel:<30} {stmts:>5} {miss:>6} {100 * (stmts - miss) // stmts:>5}%"
                    f"   {missing}"
                )
            lines += [
                "------------------------------------------------------------",
                f"TOTAL                          {total:>5} {miss_total:>6} "
                f"{100 * (total - miss_total) // total:>5}%",
            ]
        lines.append("")
        if failed:
            lines.append(f"{' short test summary info ':=^80}")
            for test in failed:
                reason = self.project.failing[test][1].split("\n")[0]
                lines.append(f"FAILED {test} - {reason[:80]}")
            summary = f"{len(failed)} failed, {len(ids) - len(failed)} passed in {seconds}s"
        else:
            summary = f"{len(ids)} passed in {seconds}s"
        lines.append(f"{'=' * 28} {summary} {'=' * 28}")
        return "\n".join(lines), 1 if failed else 0, seconds + 0.4

    def _locked(self, package: str) -> str:
        lock = self.project.files["uv.lock"]
        found = re.search(rf'name = "{package}"\nversion = "([^"]+)"', lock)
        return found.group(1) if found else "?"

    def _failure(self, test: str) -> str:
        path = test.split("::", maxsplit=1)[0]
        source, error = self.project.failing[test]
        lines = self.project.files.get(path, "").split("\n")
        number = next((i for i, line in enumerate(lines, 1) if line.strip() == source[-1]), 0)
        body = [""] + [f"    {s}" for s in source[:-1]] + [f">       {source[-1]}"]
        body += [f"E       {e}" for e in error.split("\n")]
        body += ["", f"{path}:{number}: {error.split(':', 1)[0]}"]
        return "\n".join(body)

    def _ruff(self) -> tuple[str, int, float]:
        problems = []
        for rel in sorted(self.project.files):
            if not rel.endswith(".py"):
                continue
            for number, line in enumerate(self.project.files[rel].split("\n"), 1):
                if len(line) > 99:
                    problems.append(f"{rel}:{number}:100: E501 Line too long ({len(line)} > 99)")
                if line.startswith("from typing import") and "Iterable" in line:
                    problems.append(
                        f"{rel}:{number}:1: UP035 [*] Import from "
                        "`collections.abc` instead: `Iterable`"
                    )
        seconds = self.rng.uniform(0.05, 0.3)
        if not problems:
            return "All checks passed!", 0, seconds
        fixable = sum("[*]" in p for p in problems)
        tail = [f"Found {len(problems)} error{'s' * (len(problems) != 1)}."]
        if fixable:
            tail.append(f"[*] {fixable} fixable with the `--fix` option.")
        return "\n".join(problems + tail), 1, seconds

    def _diff(self) -> tuple[str, int, int, int]:
        out: list[str] = []
        files = plus = minus = 0
        for rel in sorted(set(self.project.files) | set(self.project.committed)):
            old = self.project.committed.get(rel)
            new = self.project.files.get(rel)
            if old == new:
                continue
            files += 1
            head = f"diff --git a/{rel} b/{rel}"
            if old is None:
                out += [head, "new file mode 100644", f"index 0000000..{_git_hash(new or '')[:7]}"]
            else:
                out.append(f"{head}\nindex {_git_hash(old)[:7]}..{_git_hash(new or '')[:7]} 100644")
            body = list(
                difflib.unified_diff(
                    (old or "").splitlines(),
                    (new or "").splitlines(),
                    "/dev/null" if old is None else f"a/{rel}",
                    f"b/{rel}",
                    lineterm="",
                    n=3,
                )
            )
            plus += sum(1 for line in body[2:] if line.startswith("+"))
            minus += sum(1 for line in body[2:] if line.startswith("-"))
            out += body
        return "\n".join(out), files, plus, minus

    def _git(self, command: str) -> tuple[str, int, float]:
        project = self.project
        seconds = self.rng.uniform(0.01, 0.15)
        if command.startswith("git checkout -b"):
            project.branch = command.rsplit(maxsplit=1)[-1]
            return f"Switched to a new branch '{project.branch}'", 0, seconds
        if command.startswith("git status"):
            changed = sorted(
                rel for rel in project.files if project.committed.get(rel) != project.files[rel]
            )
            if "--short" in command:
                return (
                    "\n".join(f"{' M' if r in project.committed else '??'} {r}" for r in changed),
                    0,
                    seconds,
                )
            lines = [f"On branch {project.branch}"]
            modified = [r for r in changed if r in project.committed]
            new = [r for r in changed if r not in project.committed]
            if not changed:
                return "\n".join([*lines, "nothing to commit, working tree clean"]), 0, seconds
            if modified:
                lines += [
                    "Changes not staged for commit:",
                    '  (use "git add <file>..." to update what will be committed)',
                    "",
                ]
                lines += [f"\tmodified:   {r}" for r in modified] + [""]
            if new:
                lines += [
                    "Untracked files:",
                    '  (use "git add <file>..." to include in what will be committed)',
                    "",
                ]
                lines += [f"\t{r}" for r in new] + [""]
            lines.append('no changes added to commit (use "git add" and/or "git commit -a")')
            return "\n".join(lines), 0, seconds
        if command.startswith("git diff --stat"):
            text, files, plus, minus = self._diff()
            counts: dict[str, int] = {}
            name = ""
            for line in text.split("\n"):
                if line.startswith("diff --git"):
                    name = line.split(" b/", 1)[1]
                    counts[name] = 0
                elif line[:1] in "+-" and not line.startswith(("+++", "---")):
                    counts[name] += 1
            width = max((len(n) for n in counts), default=0)
            rows = [f" {n:<{width}} | {c:>4} {'+' * min(c, 40)}" for n, c in counts.items()]
            rows.append(
                f" {files} file{'s' * (files != 1)} changed, {plus} insertions(+), "
                f"{minus} deletions(-)"
            )
            return "\n".join(rows), 0, seconds
        if command.startswith("git diff"):
            text, _, _, _ = self._diff()
            return text, 0, seconds
        if command.startswith("git log"):
            return "\n".join(project.commits[:12]), 0, seconds
        if "git commit" in command:
            text, files, plus, minus = self._diff()
            if not files:
                return "nothing to commit, working tree clean", 1, seconds
            message = re.search(r'-m "([^"]+)"', command)
            title = message.group(1) if message else "Update"
            short = _git_hash(text)[:7]
            project.commits.insert(0, f"{short} {title}")
            project.committed = dict(project.files)
            return (
                (
                    f"[{project.branch} {short}] {title}\n {files} file"
                    f"{'s' * (files != 1)} changed, {plus} insertions(+), {minus} deletions(-)"
                ),
                0,
                seconds,
            )
        return "", 0, seconds

    def _profile(self) -> tuple[str, int, float]:
        rng = self.rng
        rows = self.project.files["tests/fixtures/statement_2023.csv"].count("\n") - 1
        total = round(rng.uniform(0.55, 0.75), 3)
        lines = [
            f"imported {rows} transactions",
            f"         {rows * 212 + rng.randrange(5000)} function calls "
            f"({rows * 201 + rng.randrange(5000)} primitive calls) in {total} seconds",
            "",
            "   Ordered by: cumulative time",
            "",
            "   ncalls  tottime  percall  cumtime  percall filename:lineno(function)",
        ]
        entries = [
            ("1", "{built-in method builtins.exec}"),
            ("1", "cli.py:16(main)"),
            ("1", "parser.py:70(read_statement)"),
            (f"{rows + 1}", "parser.py:47(_northwind)"),
            (f"{rows}", "parser.py:30(parse_date)"),
            (f"{rows * 2 - 12}", "{built-in method _strptime._strptime_datetime}"),
            (f"{rows * 2 - 12}", "_strptime.py:309(_strptime)"),
            (f"{rows}", "money.py:12(parse_amount)"),
            (f"{rows * 2 - 12}", "_strptime.py:26(_getlang)"),
            (f"{rows * 2 - 12}", "locale.py:579(getlocale)"),
            (f"{rows}", "{method 'replace' of 'str' objects}"),
        ]
        cum = total
        for calls, name in entries:
            tot = round(cum * rng.uniform(0.02, 0.2), 3)
            count = int(calls)
            lines.append(
                f"{calls:>9} {tot:8.3f} {tot / count:8.3f} {cum:8.3f} {cum / count:8.3f} {name}"
            )
            cum = round(cum * rng.uniform(0.55, 0.97), 3)
        return "\n".join(lines), 0, total + 0.3

    def _amounts_ok(self) -> bool:
        return 'replace(",", "")' in self.project.files["src/ledgerly/money.py"]

    def _import(self, command: str) -> tuple[str, int, float]:
        rel = next((a for a in command.split() if a.endswith(".csv")), "")
        text = self.project.files.get(rel)
        seconds = self.rng.uniform(0.3, 1.2)
        if text is None:
            return f"FileNotFoundError: [Errno 2] No such file or directory: '{rel}'", 1, seconds
        if "--date-format %d/%m/%Y" in command:
            first = text.split("\n")[1].split(",")[0]
            return (
                _traceback(
                    [
                        (
                            "src/ledgerly/cli.py",
                            28,
                            "main",
                            "txs = read_statement(args.file, "
                            'date_format=getattr(args, "date_format", None))',
                        ),
                        (
                            "src/ledgerly/parser.py",
                            80,
                            "read_statement",
                            "return list(parse(rows, account or path.stem, date_format))",
                        ),
                        (
                            "src/ledgerly/parser.py",
                            52,
                            "_northwind",
                            "yield Transaction(parse_date(row[0], date_format), row[1].strip(),",
                        ),
                        (
                            "src/ledgerly/parser.py",
                            35,
                            "parse_date",
                            "return datetime.strptime(text, candidate).date()",
                        ),
                    ],
                    f"ValueError: time data '{first}' does not match format '%d/%m/%Y'",
                ),
                1,
                seconds,
            )
        rows = text.count("\n") - 1
        if not self._amounts_ok():
            bad = next(
                line
                for line in text.split("\n")[1:]
                if any(c in _csv_fields(line)[2] for c in ",(")
            )
            number = text.split("\n").index(bad) + 1
            return (
                _traceback(
                    [
                        ("src/ledgerly/cli.py", 27, "main", "txs = read_statement(args.file)"),
                        (
                            "src/ledgerly/parser.py",
                            64,
                            "read_statement",
                            "return list(parse(rows, account or path.stem))",
                        ),
                        (
                            "src/ledgerly/parser.py",
                            44,
                            "_northwind",
                            "yield Transaction(parse_date(row[0]), row[1].strip(), parse_amount(row[2]), "  # noqa: E501
                            "account)",
                        ),
                        ("src/ledgerly/money.py", 15, "parse_amount", "return Decimal(text)"),
                    ],
                    "decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]",
                    note=f"(while reading line {number}: {bad})",
                ),
                1,
                seconds,
            )
        return f"imported {rows} transactions", 0, seconds

    def _report(self, command: str) -> tuple[str, int, float]:
        text = self.project.files["tests/fixtures/statement_2023.csv"]
        month = re.search(r"--month (\d{4}-\d{2})", command)
        wanted = month.group(1) if month else "2023-06"
        table = dict(
            re.findall(
                r"\('([^']+)', '([^']+)'\)", self.project.files["src/ledgerly/_merchants.py"]
            )
        )
        totals: dict[str, Decimal] = {}
        count = 0
        for line in text.split("\n")[1:]:
            if not line.startswith(wanted):
                continue
            fields = _csv_fields(line)
            name = re.sub(r"\b(POS|CARD \d{4}|REF \w+)\b", "", fields[1].split("  ")[0]).strip()
            try:
                amount = _parse_amount(fields[2])
            except InvalidOperation:
                continue
            category = table.get(name, "Income" if amount > 0 else "Uncategorized")
            totals[category] = totals.get(category, Decimal(0)) + amount
            count += 1
        seconds = self.rng.uniform(0.3, 1.0)
        if "--json" in command:
            doc = {
                "month": wanted,
                "transactions": count,
                "totals": {k: str(v) for k, v in sorted(totals.items())},
            }
            return json.dumps(doc, indent=2), 0, seconds
        if "budget" in command:
            lines = []
            for name, amount in sorted(totals.items()):
                limit = Decimal(200 + 50 * (len(name) % 7))
                spent = -amount if amount < 0 else Decimal(0)
                flag = "  OVER" if spent > limit else ""
                lines.append(f"{name:<14} {spent:>10,.2f} / {limit:>8,.2f}{flag}")
            return "\n".join(lines), 0, seconds
        width = max(len(k) for k in totals)
        lines = [f"{k:<{width}}  {v:>10,.2f}" for k, v in sorted(totals.items())]
        if "--verbose" in command:
            lines.append("")
            for line in text.split("\n")[1:]:
                if line.startswith(wanted[:4]):
                    lines.append("  " + " | ".join(_csv_fields(line)))
        return "\n".join(lines), 0, seconds

    def _uv_lock(self, command: str) -> tuple[str, int, float]:
        lock = self.project.files["uv.lock"]
        changes = []
        for name in re.findall(r"--upgrade-package (\S+)", command):
            found = re.search(rf'name = "{re.escape(name)}"\nversion = "([^"]+)"', lock)
            if not found:
                continue
            old = found.group(1)
            major, minor, _ = (int(x) for x in old.split("."))
            new = f"{major}.{minor + 1}.0"
            lock = lock.replace(
                f'name = "{name}"\nversion = "{old}"', f'name = "{name}"\nversion = "{new}"'
            )
            lock = lock.replace(f"{name}-{old}", f"{name}-{new}")
            wheel = name.replace("-", "_")
            lock = lock.replace(f"{wheel}-{old}", f"{wheel}-{new}")
            changes.append(f"Updated {name} v{old} -> v{new}")
        self.project.files["uv.lock"] = lock
        count = lock.count("[[package]]")
        return (
            (
                f"Resolved {count} packages in {self.rng.randrange(300, 900)}ms\n"
                + "\n".join(changes)
            ),
            0,
            self.rng.uniform(0.5, 2.0),
        )


def _csv_fields(line: str) -> list[str]:
    out: list[str] = []
    cell, quoted = "", False
    for char in line:
        if char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            out.append(cell)
            cell = ""
        else:
            cell += char
    out.append(cell)
    return out


def _parse_amount(text: str) -> Decimal:
    text = text.strip().replace("$", "").replace(",", "")
    if text.startswith("(") and text.endswith(")"):
        return -Decimal(text[1:-1])
    return Decimal(text)


def _traceback(frames: list[tuple[str, int, str, str]], error: str, note: str = "") -> str:
    lines = [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
        f'  File "{ROOT}/src/ledgerly/__main__.py", line 4, in <module>',
        "    sys.exit(main())",
    ]
    for path, line, func, code in frames:
        lines += [f'  File "{ROOT}/{path}", line {line}, in {func}', f"    {code}"]
    lines.append(error)
    if note:
        lines.append(note)
    return "\n".join(lines)


# -- the script -----------------------------------------------------------------------------


def _path(rel: str) -> str:
    return f"{ROOT}/{rel}"


def _read(rel: str) -> Call:
    return ("Read", {"file_path": _path(rel)})


def _edit(rel: str, old: str, new: str, *, replace_all: bool = False) -> Call:
    args: dict[str, object] = {"file_path": _path(rel), "old_string": old, "new_string": new}
    if replace_all:
        args["replace_all"] = True
    return ("Edit", args)


def _write(rel: str, content: str) -> Call:
    return ("Write", {"file_path": _path(rel), "content": content})


def _grep(pattern: str, path: str = "", *, mode: str = "", numbered: bool = False) -> Call:
    args: dict[str, object] = {"pattern": pattern}
    if path:
        args["path"] = _path(path)
    if mode:
        args["output_mode"] = mode
    if numbered:
        args["-n"] = True
    return ("Grep", args)


def _bash(command: str, description: str, **options: object) -> Call:
    return ("Bash", {"command": command, "description": description, **options})


_AMOUNT_OLD = """    text = text.strip().replace("$", "")
    return Decimal(text)"""
_AMOUNT_NEW_1 = """    text = text.strip().replace("$", "").replace(",", "")
    negative = text.startswith("(") and text.endswith(")")
    if negative:
        text = text[1:-1]
    try:
        return Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not an amount: {text!r}") from None"""
_AMOUNT_FIX_OLD = """    try:
        return Decimal(text)
    except InvalidOperation:"""
_AMOUNT_FIX_NEW = """    try:
        amount = Decimal(text)
    except InvalidOperation:"""
_AMOUNT_FIX_TAIL_OLD = """        raise ValueError(f"not an amount: {text!r}") from None"""
_AMOUNT_FIX_TAIL_NEW = """        raise ValueError(f"not an amount: {text!r}") from None
    return -amount if negative else amount"""

_MONEY_TESTS = """

def test_parse_amount_thousands_separator():
    assert parse_amount("1,024.00") == Decimal("1024.00")


def test_parse_amount_parentheses():
    assert parse_amount("(24.00)") == Decimal("-24.00")


def test_parse_amount_rejects_text():
    with pytest.raises(ValueError, match="not an amount"):
        parse_amount("n/a")
"""

_ROW_TEST = """

ROWS = (FIXTURES / "statement_2023.csv").read_text().splitlines()[1:]


@pytest.mark.parametrize("line", ROWS, ids=[f"row{i}" for i in range(len(ROWS))])
def test_every_row_parses(line, tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("Date,Description,Amount,Balance\\n" + line + "\\n")
    (tx,) = read_statement(path)
    assert tx.amount != 0
"""

_DATE_OLD = '''def parse_date(text: str) -> date:
    """Parse a statement date (ISO format: 2023-11-04)."""
    return datetime.strptime(text.strip(), "%Y-%m-%d").date()'''
_DATE_NEW = (
    '''DATE_FORMATS = ("%Y-%m-%d", "%d/%m/%Y")


def parse_date(text: str, fmt: str | None = None) -> date:
    """Parse a statement date: ISO (2023-11-04) or day first (04/11/2023)."""
    text = text.strip()
    for candidate in (fmt,) if fmt else DATE_FORMATS:
        try:
            return datetime.strptime(text, candidate).date()
        except ValueError:
            if fmt:
                raise
    raise ValueError(f"unknown date format: {text!r} (expected one of {DATE_FORMATS}, or '''
    """pass --date-format)")"""
)
_DATE_TESTS = """

def test_parse_date_day_first():
    assert parse_date("04/11/2023") == date(2023, 11, 4)


def test_parse_date_forced_format():
    with pytest.raises(ValueError):
        parse_date("2023-11-04", "%d/%m/%Y")
"""

_CATEGORIZE_OLD = '''    merchant = merchant_of(tx.description)
    for name, category in MERCHANTS:
        if name == merchant:
            return category
    return "Uncategorized"'''
_CATEGORIZE_NEW = """    merchant = merchant_of(tx.description).upper()
    return MERCHANT_INDEX.get(merchant, "Uncategorized")"""
_CATEGORIZE_INDEX_OLD = """_NOISE = re.compile("""
_CATEGORIZE_INDEX_NEW = """#: Merchant name (upper case) -> category, built once at import.
MERCHANT_INDEX: dict[str, str] = {name.upper(): category for name, category in MERCHANTS}

_NOISE = re.compile("""
_CATEGORIZE_TESTS = """

def test_merchant_lookup_ignores_case():
    assert categorize(tx("Greenleaf Market  Portland"), []) == "Groceries"
"""

_REPORT_JSON_OLD = """def render(totals: dict[str, Decimal]) -> str:"""
_REPORT_JSON_NEW = '''def to_json(totals: dict[str, Decimal], month: str) -> str:
    """The report as JSON; amounts are strings so no precision is lost."""
    return json.dumps({"month": month, "totals": {k: str(v) for k, v in totals.items()}},
                      indent=2)


def render(totals: dict[str, Decimal]) -> str:'''

_BUDGET = '''"""Monthly budgets per category, with a warning when one is exceeded."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

__all__ = ["Budget", "check", "load_budgets"]


@dataclass(frozen=True, slots=True)
class Budget:
    category: str
    limit: Decimal


def load_budgets(path: Path) -> dict[str, Budget]:
    """Read ``[budgets]`` from a TOML file: ``Groceries = "450.00"``."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {k: Budget(k, Decimal(v)) for k, v in data["budgets"].items()}


def check(totals: dict[str, Decimal], budgets: dict[str, Budget]) -> list[str]:
    """One warning per category whose spending exceeds its budget."""
    warnings = []
    for category, total in totals.items():
        spent = -total
        if spent > budgets[category].limit:
            warnings.append(f"{category}: spent {spent} of {budgets[category].limit}")
    return warnings
'''
_BUDGET_TESTS = """from decimal import Decimal

from ledgerly.budget import Budget, check


def test_check_warns_when_over():
    budgets = {"Groceries": Budget("Groceries", Decimal("100"))}
    assert check({"Groceries": Decimal("-120.50")}, budgets) == [
        "Groceries: spent 120.50 of 100"
    ]


def test_check_ignores_categories_without_budget():
    assert check({"Income": Decimal("2090")}, {}) == []
"""


def _turns() -> Iterator[Callable[[_Builder], None]]:
    """The session, one function per turn; endless (chores repeat after the story)."""
    yield from (
        _t_investigate_amounts,
        _t_fix_amounts,
        _t_every_row,
        _t_verbose_suite,
        _t_dates,
        _t_date_flag,
        _t_show_diff,
        _t_commit,
        _t_categorize_look,
        _t_categorize_fix,
        _t_merchants_changed,
        _t_report_json,
        _t_background_cov,
        _t_coverage_question,
        _t_profile,
        _t_deps,
        _t_commit,
        _t_harbor_total,
        _t_regression_check,
        _t_plan_budgets,
        _t_budgets,
        _t_commit,
    )
    chores = (
        _c_explain,
        _c_run_tests,
        _c_fixture_rows,
        _c_todos,
        _c_docstring,
        _c_lint,
        _c_merchant,
        _c_status,
        _c_ci_notice,
        _c_docstring,
        _c_run_tests,
        _c_commit,
    )
    while True:
        yield from chores


def _t_investigate_amounts(b: _Builder) -> None:
    b.system("base", _BASE, 0)
    b.environment()
    b.set_mode("plan")
    b._add(ToolsSet(tools=_TOOLS), after=0.01)
    first = b.user(
        "Importing our 2023 statement (tests/fixtures/statement_2023.csv) blows up "
        'with decimal.InvalidOperation. I think it\'s amounts like "1,024.00" and '
        '"(24.00)". Can you look into it? Plan first, don\'t change anything yet.'
    )
    b.pin((first,))
    b.say(
        "I'll look at how amounts are parsed and which formats the export contains.",
        _read("src/ledgerly/money.py"),
        _read("src/ledgerly/parser.py"),
        _read("tests/test_money.py"),
    )
    b.say(
        "`parse_amount` only strips `$`. Let me check where it's used and which odd "
        "amount formats occur in the export.",
        _grep("parse_amount", "src"),
        _grep(r"\(\d[\d,]*\.\d\d\)", "tests/fixtures", mode="content", numbered=True),
        _bash(
            "python -m ledgerly import tests/fixtures/statement_2023.csv",
            "Reproduce the import failure",
        ),
    )
    b.say(
        "Reproduced. I'll read the whole export once to see whether anything else is odd "
        "(dates, quoting, summary rows).",
        _read("tests/fixtures/statement_2023.csv"),
        think="The traceback points at Decimal(text) in money.py. Two formats fail: "
        "thousands separators inside quoted cells and debits in parentheses. I should "
        "check the full file for other surprises before proposing the plan.",
    )
    b.say(
        "Plan:\n\n1. `src/ledgerly/money.py:12` `parse_amount`: drop thousands separators, "
        "treat `(x)` as `-x`, and raise `ValueError` naming the text instead of leaking "
        "`decimal.InvalidOperation`.\n2. Tests in `tests/test_money.py` for `1,024.00`, "
        "`(24.00)` and garbage input.\n3. A parametrized test that parses every row of "
        "the 2023 fixture so a new odd format shows up as one failing row.\n\nDates, quoting "
        "and the summary rows look fine in this export. Shall I go ahead?"
    )


def _t_fix_amounts(b: _Builder) -> None:
    b.set_mode("default")
    source = b.user(
        "Plan looks good, go ahead. And remember for the rest of this project: "
        "money is always Decimal, never float."
    )
    b.remember(
        "money-is-decimal",
        "Money is Decimal",
        "All amounts in ledgerly are decimal.Decimal, parsed from text; never use "
        "float for money (user, 2024-03-12).",
        source,
    )
    b.say(
        "Updating `parse_amount` first.",
        _edit("src/ledgerly/money.py", _AMOUNT_OLD, _AMOUNT_NEW_1),
        _edit(
            "src/ledgerly/money.py",
            "from decimal import ROUND_HALF_EVEN, Decimal",
            "from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation",
        ),
    )
    b.project.failing["tests/test_money.py::test_parse_amount_parentheses"] = (
        [
            "def test_parse_amount_parentheses():",
            'assert parse_amount("(24.00)") == Decimal("-24.00")',
        ],
        "AssertionError: assert Decimal('24.00') == Decimal('-24.00')\n +  where "
        "Decimal('24.00') = parse_amount('(24.00)')",
    )
    b.say(
        "Now the tests for the new formats, then a run of the money tests.",
        _edit(
            "tests/test_money.py",
            '    assert format_amount(Decimal("4180")) == "  4,180.00"\n',
            '    assert format_amount(Decimal("4180")) == "  4,180.00"\n' + _MONEY_TESTS,
        ),
        _bash("python -m pytest -q tests/test_money.py", "Run the money tests"),
    )
    b.say(
        "The parentheses case comes back positive. Re-reading the function.",
        _read("src/ledgerly/money.py"),
    )
    b.project.failing.clear()
    b.say(
        "I strip the parentheses but never apply the sign. Fixing.",
        _edit("src/ledgerly/money.py", _AMOUNT_FIX_OLD, _AMOUNT_FIX_NEW),
        _edit("src/ledgerly/money.py", _AMOUNT_FIX_TAIL_OLD, _AMOUNT_FIX_TAIL_NEW),
    )
    b.say("", _bash("python -m pytest -q tests/test_money.py", "Run the money tests again"))
    b.notify(
        "file-watcher",
        "2 files changed on disk: src/ledgerly/money.py, "
        "tests/test_money.py (saved by the editor, content unchanged).",
    )
    b.say(
        "Done. `parse_amount` (`src/ledgerly/money.py:12`) now accepts `1,024.00` and "
        "`(24.00)` (as -24.00) and raises `ValueError: not an amount: 'n/a'` for garbage. "
        "Three new tests in `tests/test_money.py`; all 10 money tests pass. I noted that "
        "money is always Decimal."
    )


def _t_every_row(b: _Builder) -> None:
    b.user(
        "Does the full 2023 statement import now? And add that test that every row of it parses."
    )
    b.say(
        "",
        _bash(
            "python -m ledgerly import tests/fixtures/statement_2023.csv",
            "Import the 2023 statement",
        ),
        _edit(
            "tests/test_parser.py",
            "    assert len(txs) > 2500\n",
            "    assert len(txs) > 2500\n" + _ROW_TEST,
        ),
    )
    b.say(
        "Running the whole suite, and checking nothing else calls `parse_amount` in a way "
        "that relied on the old exception.",
        _bash("python -m pytest -q", "Run all tests"),
        _grep("parse_amount", "src"),
        _grep("InvalidOperation", "src", mode="content", numbered=True),
    )
    b.say(
        "Yes: all 2900 rows import. `tests/test_parser.py` now has `test_every_row_parses`, "
        "parametrized over the fixture's rows (one test id per row, so a bad row is named "
        "in the failure). The whole suite passes. Only `money.py` mentions "
        "`InvalidOperation`, and it no longer leaks it."
    )


def _t_verbose_suite(b: _Builder) -> None:
    b.user("Run the whole suite verbose, I want to see the row tests listed.")
    b.say("", _bash("python -m pytest -v", "Run all tests verbosely"))
    b.say(
        "All green: the 2900 `test_every_row_parses[rowN]` cases plus the unit tests. "
        "The verbose listing is long, so next time `pytest -q` is enough unless you want "
        "the names."
    )


def _t_dates(b: _Builder) -> None:
    b.user(
        "Next one: Harbor Credit changed its export, dates are now 04/11/2023 (day "
        "first). Support that, but keep ISO working. Do it on a branch."
    )
    b.say(
        "Looking at the date parsing and its callers.",
        _read("src/ledgerly/parser.py"),
        _grep("parse_date", mode="content", numbered=True),
        _bash("git checkout -b harbor-dates", "Create a branch for the change"),
    )
    b.say(
        "`parse_date` is only called from the two format readers. Trying each known "
        "format in order.",
        _edit("src/ledgerly/parser.py", _DATE_OLD, _DATE_NEW),
        _edit(
            "tests/test_parser.py",
            '    assert parse_date("2023-11-04") == date(2023, 11, 4)\n',
            '    assert parse_date("2023-11-04") == date(2023, 11, 4)\n' + _DATE_TESTS,
        ),
    )
    b.say(
        "",
        _bash("python -m pytest -q tests/test_parser.py -k date", "Run the date tests"),
        _bash("ruff check src tests", "Lint"),
    )
    b.say(
        "One line too long. Splitting the message.",
        _edit(
            "src/ledgerly/parser.py",
            '    raise ValueError(f"unknown date format: {text!r} (expected one of '
            '{DATE_FORMATS}, or pass --date-format)")',
            '    raise ValueError(\n        f"unknown date format: {text!r} (expected '
            'one of {DATE_FORMATS}, or pass --date-format)"\n    )',
        ),
        _bash("ruff check src tests", "Lint again"),
    )
    b.say(
        "Done on branch `harbor-dates`: `parse_date` (`src/ledgerly/parser.py:24`) tries "
        "ISO then day-first, or one forced format. Two new tests; lint is clean."
    )


def _t_date_flag(b: _Builder) -> None:
    b.user("Add a --date-format option to the CLI so we can force one when a file is ambiguous.")
    b.say("", _read("src/ledgerly/cli.py"))
    b.say(
        "Threading the option through `read_statement` to the readers.",
        _edit(
            "src/ledgerly/cli.py",
            '    imp.add_argument("file", type=Path)\n',
            '    imp.add_argument("file", type=Path)\n    imp.add_argument("--date-format",'
            ' help="strptime format, e.g. %%d/%%m/%%Y (default: detect)")\n',
        ),
        _edit(
            "src/ledgerly/cli.py",
            "    txs = read_statement(args.file)",
            '    txs = read_statement(args.file, date_format=getattr(args, "date_format", None))',
        ),
        _edit(
            "src/ledgerly/parser.py",
            'def read_statement(path: Path, *, account: str = "") -> list[Transaction]:',
            'def read_statement(path: Path, *, account: str = "", date_format: str | '
            "None = None\n                   ) -> list[Transaction]:",
        ),
        _edit(
            "src/ledgerly/parser.py",
            "        return list(parse(rows, account or path.stem))",
            "        return list(parse(rows, account or path.stem, date_format))",
        ),
        _edit(
            "src/ledgerly/parser.py",
            "account: str) -> Iterator[Transaction]:",
            "account: str,\n               date_format: str | None = None"
            ") -> Iterator[Transaction]:",
            replace_all=True,
        ),
        _edit(
            "src/ledgerly/parser.py",
            "yield Transaction(parse_date(row[0]), ",
            "yield Transaction(\n            parse_date(row[0], date_format), ",
            replace_all=True,
        ),
    )
    b.say(
        "",
        _bash("python -m pytest -q", "Run all tests"),
        _bash(
            "python -m ledgerly import tests/fixtures/statement_2023.csv --date-format %d/%m/%Y",
            "Try forcing the wrong format on an ISO file",
        ),
    )
    b.say(
        "Works as intended: forcing `%d/%m/%Y` on the ISO-dated 2023 file fails with a "
        "clear `ValueError` naming the value and the format, and without the option the "
        "format is detected. Note: `%` must be written `%%` in argparse help strings, "
        "which I did."
    )


def _t_show_diff(b: _Builder) -> None:
    b.user("show me the diff so far")
    b.say("", _bash("git status", "Show changed files"), _bash("git diff", "Show the diff"))
    b.say(
        "That's everything since 0.4.1: amount parsing, the date formats and "
        "`--date-format`, plus the tests."
    )


def _t_commit(b: _Builder) -> None:
    messages = {
        "harbor-dates": "Parse thousands separators, parenthesized debits and day-first dates",
        "report-json": "Add report --json, dict merchant lookup, bump pytest and ruff",
    }
    message = messages.get(b.project.branch, "Add monthly budgets")
    b.user(b.rng.choice(["commit it", "ok, commit this", "looks good, commit"]))
    b.say("", _bash(f'git add -A && git commit -m "{message}"', "Commit the changes"))
    b.say(f'Committed on `{b.project.branch}`: "{message}".')


def _t_categorize_look(b: _Builder) -> None:
    b.set_mode("plan")
    b.user(
        "Lots of transactions from the Harbor export end up Uncategorized, e.g. "
        "'Greenleaf Market' in mixed case. How does matching work?"
    )
    b.say(
        "",
        _read("src/ledgerly/categorize.py"),
        _grep("Uncategorized", mode="content", numbered=True),
    )
    b.say(
        "Let me check how the names in the merchant table are written.",
        _read("src/ledgerly/_merchants.py"),
        _bash(
            "python -m ledgerly report tests/fixtures/statement_2023.csv --month 2023-06",
            "June report for reference",
        ),
    )
    b.say(
        "Matching is exact and case-sensitive: `categorize` (`src/ledgerly/categorize.py:"
        "41`) compares `merchant_of(description)` with each of the 2,402 upper-case names "
        "in `MERCHANTS`, one by one. So `Greenleaf Market` never matches `GREENLEAF "
        "MARKET`, and every lookup scans the whole table.\n\nProposal: build a dict keyed "
        "by the upper-cased name once at import and look up `merchant.upper()`. That fixes "
        "the case problem and makes the lookup O(1)."
    )


def _t_categorize_fix(b: _Builder) -> None:
    b.set_mode("default")
    b.user("fix it, and make the lookup a dict while you're there")
    b.project.failing["tests/test_categorize.py::test_merchant_lookup_ignores_case"] = (
        [
            "def test_merchant_lookup_ignores_case():",
            'assert categorize(tx("Greenleaf Market  Portland"), []) == "Groceries"',
        ],
        "NameError: name 'MERCHANT_INDEX' is not defined",
    )
    b.say(
        "",
        _edit("src/ledgerly/categorize.py", _CATEGORIZE_OLD, _CATEGORIZE_NEW),
        _edit(
            "tests/test_categorize.py",
            '    assert categorize(tx("SOMEWHERE NEW  TOWN"), []) == "Uncategorized"\n',
            '    assert categorize(tx("SOMEWHERE NEW  TOWN"),'
            ' []) == "Uncategorized"\n' + _CATEGORIZE_TESTS,
        ),
        _bash("python -m pytest -q tests/test_categorize.py", "Run categorize tests"),
    )
    b.say(
        "I used the index before defining it. Re-reading the module to put it in the right place.",
        _read("src/ledgerly/categorize.py"),
    )
    b.project.failing.clear()
    b.say(
        "",
        _edit("src/ledgerly/categorize.py", _CATEGORIZE_INDEX_OLD, _CATEGORIZE_INDEX_NEW),
        _bash("python -m pytest -q tests/test_categorize.py", "Run categorize tests again"),
    )
    merchants = b.project.files["src/ledgerly/_merchants.py"]
    b.project.files["src/ledgerly/_merchants.py"] = merchants.replace(
        "]\n",
        "    ('HARBORLIGHT TAQUERIA', 'Eating out'),\n    ('NORTHSTAR PHARMACY', 'Health'),\n]\n",
    )
    b.notify(
        "file-watcher",
        "src/ledgerly/_merchants.py changed on disk (regenerated by "
        "scripts/gen_merchants.py outside this session). Earlier reads of this file "
        "may be stale.",
    )
    b.say(
        "Fixed: `MERCHANT_INDEX` maps upper-cased names to categories and `categorize` "
        "looks up `merchant.upper()`. New test for mixed case; all categorize tests pass. "
        "Heads-up: `_merchants.py` was just regenerated outside this session."
    )


def _t_merchants_changed(b: _Builder) -> None:
    b.user("Yes I regenerated the merchant table. Rerun the June report with it.")
    b.say(
        "Checking what changed in the table first.",
        _bash("git diff --stat", "Diff"),
        _grep(
            "HARBORLIGHT|NORTHSTAR PHARMACY",
            "src/ledgerly/_merchants.py",
            mode="content",
            numbered=True,
        ),
    )
    b.say(
        "",
        _bash(
            "python -m ledgerly report tests/fixtures/statement_2023.csv --month 2023-06",
            "June report",
        ),
    )
    b.say(
        "Two merchants were added (Harborlight Taqueria, Northstar Pharmacy). The June "
        "totals above use the new table."
    )


def _t_report_json(b: _Builder) -> None:
    b.user(
        "New branch report-json: add `ledgerly report --json` for the dashboard, amounts "
        "as strings."
    )
    b.say(
        "",
        _bash("git checkout -b report-json", "New branch"),
        _read("src/ledgerly/report.py"),
        _read("src/ledgerly/cli.py"),
        _read("tests/test_report.py"),
    )
    b.say(
        "Adding `to_json` next to `render` and the flag in the CLI.",
        _edit("src/ledgerly/report.py", _REPORT_JSON_OLD, _REPORT_JSON_NEW),
        _edit(
            "src/ledgerly/report.py",
            "from collections import defaultdict",
            "import json\nfrom collections import defaultdict",
        ),
        _edit(
            "src/ledgerly/cli.py",
            '    rep.add_argument("--month", required=True, help="YYYY-MM")\n',
            '    rep.add_argument("--month", required=True, '
            'help="YYYY-MM")\n    rep.add_argument("--json", action="store_true", '
            'help="print JSON")\n',
        ),
    )
    b.say(
        "",
        _bash("python -m pytest -q", "Run all tests"),
        _bash(
            "python -m ledgerly report tests/fixtures/statement_2023.csv --month 2023-06 --json",
            "Try the JSON output",
        ),
    )
    b.say(
        '`ledgerly report --json` prints `{"month", "totals"}` with amounts as strings '
        "(`src/ledgerly/report.py:24`). Tests pass."
    )


def _t_background_cov(b: _Builder) -> None:
    b.user(
        "Start the full suite with coverage in the background, and meanwhile update the "
        "README for --json and --date-format."
    )
    command = "python -m pytest -v --cov=ledgerly --cov-report=term-missing"
    b.say(
        "",
        _bash(command, "Full suite with coverage", run_in_background=True),
        _read("README.md"),
        _read("CHANGELOG.md"),
    )
    cause = b.last_assistant_key
    b.say(
        "",
        _edit(
            "README.md",
            "## Supported exports",
            "Add `--json` for machine-readable "
            "output; amounts are strings.\nAdd `--date-format %d/%m/%Y` to force a "
            "date format when detection is ambiguous.\n\n## Supported exports",
        ),
        _edit(
            "CHANGELOG.md",
            "# Changelog\n",
            "# Changelog\n\n## Unreleased\n- Amounts "
            "with thousands separators and parenthesized debits.\n- Day-first dates; "
            "`import --date-format`.\n- `report --json`.\n- Merchant lookup ignores case."
            "\n",
        ),
    )
    job, (cmd, output, code) = next(iter(b.background.items()))
    b.notify(
        "background-job",
        f"Background command {job} (`{cmd}`) finished with exit code {code}.\n\n{output}",
        causation=cause,
    )
    b.say(
        "README and CHANGELOG updated. The background run finished: everything passes; "
        "the coverage table is at the end of its output."
    )


def _t_coverage_question(b: _Builder) -> None:
    b.user("What's our coverage on cli.py? Anything important untested?")
    b.say(
        "From the background run: `cli.py` is the least covered module; the untested "
        "lines are the `--date-format` plumbing and the rules-file branch "
        "(`RULES.exists()`). Worth one CLI test that runs `main([...])` on the small "
        "fixture with each flag. Want me to add it?",
        think="The coverage table came in the background-job notification; no need to run "
        "anything again.",
    )


def _t_profile(b: _Builder) -> None:
    b.set_mode("accept-edits")
    b.user("Later. Importing the 2023 file is slow on the CI box. Can you profile it?")
    b.say(
        "",
        _bash(
            "python -m cProfile -s cumtime -m ledgerly import "
            "tests/fixtures/statement_2023.csv | head -30",
            "Profile the import",
        ),
        _grep("strptime", "src", mode="content", numbered=True),
    )
    b.say(
        "Most time is in `strptime`, called up to twice per row. Re-reading the parser "
        "to see the loop.",
        _read("src/ledgerly/parser.py"),
    )
    b.say(
        "",
        _bash("wc -l tests/fixtures/statement_2023.csv", "Count rows"),
        _bash(
            "python -m ledgerly import tests/fixtures/statement_2023.csv", "Import again for timing"
        ),
    )
    b.say(
        "For 2900 rows the import takes well under a second locally; `strptime` dominates "
        "but the absolute cost is small. I'd look at the CI runner (cold venv, coverage "
        "enabled) before optimizing the parser."
    )


def _t_deps(b: _Builder) -> None:
    b.user("Dependabot says pytest and ruff are outdated. Bump them in the lock.")
    b.say("", _read("uv.lock"))
    b.say(
        "",
        _bash(
            "uv lock --upgrade-package pytest --upgrade-package ruff",
            "Upgrade two packages in the lock",
        ),
        _grep('name = "(pytest|ruff)"', "uv.lock", mode="content", numbered=True),
    )
    b.say(
        "",
        _bash("ruff check src tests", "Lint with the new ruff"),
        _bash("python -m pytest -q", "Tests with the new pytest"),
    )
    b.say(
        "Bumped pytest and ruff in `uv.lock` (see the versions above). The new ruff finds "
        "nothing and the suite passes with the new pytest."
    )


def _t_harbor_total(b: _Builder) -> None:
    b.user(
        "The Harbor export sometimes writes 'TOTAL' in capitals at the bottom and we "
        "import it as a transaction."
    )
    b.say("", _grep('startswith\\("Total"\\)', "src", mode="content", numbered=True))
    b.say(
        "",
        _edit(
            "src/ledgerly/parser.py",
            '        if not row or row[0].startswith("Total"):',
            '        if not row or row[0].strip().lower().startswith("total"):',
        ),
        _bash("python -m pytest -q tests/test_parser.py", "Parser tests"),
    )
    b.say("Summary rows are now skipped whatever their case (`src/ledgerly/parser.py`, `_harbor`).")


def _t_regression_check(b: _Builder) -> None:
    b.user("Rerun the big import and the June report to make sure nothing regressed.")
    b.say(
        "",
        _bash(
            "python -m ledgerly import tests/fixtures/statement_2023.csv",
            "Import the 2023 statement",
        ),
        _bash(
            "python -m ledgerly report tests/fixtures/statement_2023.csv --month 2023-06",
            "June report",
        ),
    )
    b.say("Same numbers as before the Harbor change: 2900 transactions, identical June totals.")


def _t_plan_budgets(b: _Builder) -> None:
    b.set_mode("plan")
    b.user("Next feature: budgets per category, with a warning when a month goes over. Plan only.")
    b.say(
        "",
        _read("src/ledgerly/report.py"),
        _read("src/ledgerly/categorize.py"),
        _read("src/ledgerly/cli.py"),
        ("Glob", {"pattern": "src/ledgerly/*.py"}),
    )
    b.say("", _grep(r"^def ", "src", mode="content", numbered=True))
    b.say(
        "Plan:\n\n1. New `src/ledgerly/budget.py`: `Budget(category, limit)`, "
        "`load_budgets(path)` reading `[budgets]` from TOML, `check(totals, budgets)` "
        "returning one warning per category over its limit.\n2. `ledgerly budget FILE "
        "--month M` prints spent / limit per category and marks overruns.\n3. Tests for "
        "`check`, including categories without a budget."
    )


def _t_budgets(b: _Builder) -> None:
    b.set_mode("default")
    b.user("go")
    b.project.failing["tests/test_budget.py::test_check_ignores_categories_without_budget"] = (
        [
            "def test_check_ignores_categories_without_budget():",
            'assert check({"Income": Decimal("2090")}, {}) == []',
        ],
        "KeyError: 'Income'",
    )
    b.say(
        "",
        _bash("git checkout -b budgets", "New branch"),
        _write("src/ledgerly/budget.py", _BUDGET),
        _write("tests/test_budget.py", _BUDGET_TESTS),
        _bash("python -m pytest -q tests/test_budget.py", "Run budget tests"),
    )
    b.say(
        "`check` indexes budgets for every category. Re-reading it.",
        _read("src/ledgerly/budget.py"),
    )
    b.project.failing.clear()
    b.say(
        "",
        _edit(
            "src/ledgerly/budget.py",
            "    for category, total in totals.items():\n"
            "        spent = -total\n        if spent > budgets[category].limit:",
            "    for category, total in totals.items():\n        spent = -total\n"
            "        if category in budgets and spent > budgets[category].limit:",
        ),
        _bash("python -m pytest -q", "Run all tests"),
        _bash(
            "python -m ledgerly budget tests/fixtures/statement_2023.csv --month 2023-06",
            "Try the budget command",
        ),
    )
    b.say(
        "Budgets work: `src/ledgerly/budget.py` plus tests; categories without a budget "
        "are ignored."
    )


# -- chores (the session goes on with routine work after the story) -----------------------

_MODULES = [
    "src/ledgerly/money.py",
    "src/ledgerly/parser.py",
    "src/ledgerly/categorize.py",
    "src/ledgerly/report.py",
    "src/ledgerly/cli.py",
]


def _c_explain(b: _Builder) -> None:
    rel = b.rng.choice(_MODULES)
    names = re.findall(r"^def (\w+)", b.project.files[rel], re.M)
    name = b.rng.choice(names)
    b.user(
        f"Quick question: what does `{name}` in {rel.rsplit('/', 1)[-1]} do exactly, and "
        "who calls it?"
    )
    test = "tests/test_" + rel.rsplit("/", 1)[-1]
    calls = [_read(rel), _grep(rf"\b{name}\(", mode="content", numbered=True)]
    if test in b.project.files:
        calls.append(_read(test))
    b.say("", *calls)
    b.say("", _grep(name, "tests"))
    b.say(
        f"`{name}` is defined in `{rel}`; the grep above lists every call site. It is "
        "pure: no I/O beyond what its arguments carry."
    )


def _c_run_tests(b: _Builder) -> None:
    b.user(b.rng.choice(["run the tests", "can you run the suite again?", "tests still green?"]))
    b.say(
        "",
        _bash("python -m pytest -q", "Run all tests"),
        _bash("git status --short", "Changed files"),
    )
    b.say("All tests pass.")


def _c_fixture_rows(b: _Builder) -> None:
    month = f"2023-{b.rng.randrange(1, 13):02d}"
    b.user(f"How many {month} rows are in the big fixture, and any refunds among them?")
    b.say(
        "",
        _grep(f"^{month}", "tests/fixtures/statement_2023.csv", mode="count"),
        _read("tests/fixtures/statement_2023.csv"),
        _bash("wc -l tests/fixtures/statement_2023.csv", "Count all rows"),
    )
    b.say(
        f"The count is above; refunds are the rows of {month} with a positive amount in "
        "the listing (a handful, all small)."
    )


def _c_merchant(b: _Builder) -> None:
    b.user("Which category does HARBORLIGHT TAQUERIA get, and are there similar names?")
    b.say(
        "",
        _grep("HARBORLIGHT", "src/ledgerly/_merchants.py", mode="content", numbered=True),
        _read("src/ledgerly/_merchants.py"),
        _bash(
            "python -m ledgerly report tests/fixtures/statement_2023.csv --month 2023-06",
            "June report",
        ),
    )
    b.say(
        "`HARBORLIGHT TAQUERIA` is in `Eating out`; the other HARBOR... entries are listed above."
    )


def _c_todos(b: _Builder) -> None:
    b.user("Are there any TODOs or FIXMEs left in the code?")
    b.say(
        "",
        _grep("TODO|FIXME|XXX", "src", mode="content", numbered=True),
        _grep("TODO|FIXME|XXX", "tests", mode="content", numbered=True),
        ("Glob", {"pattern": "**/*.py"}),
    )
    b.say("None in `src/` or `tests/`.")


def _c_docstring(b: _Builder) -> None:
    rel = b.rng.choice(_MODULES)
    text = b.project.files[rel]
    candidates = [
        m
        for m in re.findall(r'^    """([^"\n]+)\."""$', text, re.M)
        if "README" not in m and len(m) + 40 <= 99
    ]
    b.user(
        f"Tidy up the docstrings in {rel.rsplit('/', 1)[-1]} a bit, mention the README "
        "where it helps."
    )
    b.say("", _read(rel))
    if candidates:
        doc = b.rng.choice(candidates)
        b.say(
            "",
            _edit(rel, f'    """{doc}."""', f'    """{doc}. See the README for examples."""'),
            _bash("python -m pytest -q", "Run all tests"),
            _bash("ruff check src tests", "Lint"),
        )
    b.say(
        "Docstring updated; tests pass."
        if candidates
        else "The docstrings there already point to the README; nothing to change."
    )


def _c_lint(b: _Builder) -> None:
    b.user("lint please")
    b.say(
        "",
        _bash("ruff check src tests", "Lint"),
        _bash("ruff format --check src tests", "Check formatting"),
    )
    b.say("Lint is clean and everything is formatted.")


def _c_status(b: _Builder) -> None:
    b.user("where are we? what's uncommitted?")
    b.say("", _bash("git status", "Status"), _bash("git log --oneline -5", "Recent commits"))
    b.say("See the status above; uncommitted changes are only the docstring touch-ups.")


def _c_ci_notice(b: _Builder) -> None:
    outcome = b.rng.choice(["passed", "passed", "failed (network timeout in pip install)"])
    b.notify("ci", f"CI run #{100 + b.turn} on branch {b.project.branch} finished: {outcome}.")
    b.user("CI says something, anything I need to do?")
    b.say(
        "It's the CI notice above. If it failed, it was the network timeout while "
        "installing packages, not our tests; re-running the job should fix it."
    )


def _c_commit(b: _Builder) -> None:
    b.user("commit whatever is pending")
    b.say(
        "",
        _bash('git add -A && git commit -m "Docstring touch-ups"', "Commit"),
        _bash("git log --oneline -3", "Recent commits"),
    )
    b.say("Committed (or nothing was pending).")


# -- the generator --------------------------------------------------------------------------


def generate(turns: int = MAX_TURNS, seed: int = 7) -> list[list[Draft]]:
    """The demo session: one list of drafts per turn.

    Deterministic: the same ``(turns, seed)`` always give equal drafts, and a
    shorter session is a prefix of a longer one with the same seed. Times start
    at `START_TIME`; idempotency keys are ``demo-<turn>-<i>`` (turns from 1).

    Parameters:
        turns: number of turns (>= 1).
        seed: seed of the generator.

    Raises:
        ValueError: ``turns`` is below 1.
    """
    if turns < 1:
        raise ValueError(f"turns must be >= 1, found {turns}")
    builder = _Builder(seed)
    out: list[list[Draft]] = []
    script = _turns()
    for _ in range(turns):
        builder.start_turn()
        next(script)(builder)
        out.append(builder.drafts)
    return out


def main() -> None:
    """Write the demo's data file: one line per turn, the JSON list of its drafts."""
    path = Path(__file__).resolve().parents[2] / "tools" / DATA_FILE
    lines = b"".join(msgspec.json.encode(turn) + b"\n" for turn in generate(MAX_TURNS))
    # mtime=0: the same session always gives the same file.
    path.write_bytes(gzip.compress(lines, compresslevel=9, mtime=0))
    print(f"wrote {path} ({MAX_TURNS} turns, {len(lines):,} bytes uncompressed)")


if __name__ == "__main__":
    main()

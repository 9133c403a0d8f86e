"""Every example command of docs/ and the README runs, and prints what the page shows.

``console`` blocks (in docs/*.md and README.md) hold commands after ``$ `` and the
output they print. Each block runs in a fresh directory (``HOME`` there too, with a
key in ``~/.turnlog-key``) on its own copy of a store holding the demo, through the
installed console script and a shell (pipes work); ``--store /tmp/demo`` names a new
store for that block. Each command's output must equal the lines under it, where a
line ``...`` stands for any number of lines. ``sh`` blocks of the README (the quick
starts) run line by line and must succeed; setting up a virtual environment and
running the test suite are left out.

After a change of output, ``python tests/test_doc_examples.py --write`` rewrites the
output under every command (keeping the lines around each ``...``); read the diff.

So an example cannot go stale: change the output and the page must change with it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import turnlog

ROOT = Path(__file__).resolve().parents[1]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BIN = Path(sys.executable).parent
FRESH = "/tmp/demo"
#: A Claude Code transcript for the README's import example (session id ``SESSION``).
TRANSCRIPT = (
    "\n".join(
        [
            '{"type": "user", "sessionId": "SESSION", "uuid": "u1", "timestamp": '
            '"2025-01-01T10:00:00Z", "message": {"role": "user", "content": "Why does test_parse '
            'fail?"}}',
            '{"type": "assistant", "sessionId": "SESSION", "uuid": "a1", "parentUuid": "u1", '
            '"timestamp": "2025-01-01T10:00:05Z", "message": {"id": "m1", "role": "assistant", '
            '"model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "Reading it."}, '
            '{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "parse.py"}}], '  # noqa: E501
            '"usage": {"input_tokens": 120, "output_tokens": 30}}}',
            '{"type": "user", "sessionId": "SESSION", "uuid": "u2", "parentUuid": "a1", '
            '"timestamp": "2025-01-01T10:00:06Z", "message": {"role": "user", "content": '
            '[{"type": "tool_result", "tool_use_id": "t1", "content": "def parse(s): ..."}]}}',
        ]
    )
    + "\n"
)


def blocks(kind: str) -> list[tuple[str, int, str]]:
    """``(page, line, text)`` of every fenced block of ``kind``."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in re.finditer(rf"^```{kind}\n(.*?)^```$", text, re.S | re.M):
            line = text[: match.start()].count("\n") + 1
            found.append((page.relative_to(ROOT).as_posix(), line, match.group(1)))
    return found


def commands(block: str) -> list[tuple[str, list[str]]]:
    """The ``(command, expected output lines)`` pairs of a console block."""
    out: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"output before the first command: {line!r}"
            out[-1][1].append(line)
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` fits ``expected``, where a line ``...`` matches any lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and matches(expected[1:], actual[1:])


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("docs") / "store"
    done = subprocess.run(
        [str(BIN / "turnlog"), "--store", str(store), "demo"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return store


def environment(home: Path, store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    return {
        **env,
        "HOME": str(home),
        "TURNLOG_STORE": str(store),
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "LC_ALL": "C.UTF-8",
    }


def run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


CONSOLE = blocks("console")


def test_the_pages_have_examples() -> None:
    assert len(CONSOLE) >= 8
    assert {page for page, _, _ in CONSOLE} >= {"docs/cli.md", "README.md"}


@pytest.mark.parametrize(
    ("page", "line", "block"), CONSOLE, ids=[f"{page}:{line}" for page, line, _ in CONSOLE]
)
def test_console_example_prints_what_the_page_shows(
    page: str, line: int, block: str, demo_store: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(demo_store, store)
    (tmp_path / ".turnlog-key").write_text("example-key\n")
    fresh = tmp_path / "fresh-demo"
    env = environment(tmp_path, store)
    for command, expected in commands(block):
        done = run(
            command.replace(FRESH, str(fresh)).replace(".venv/bin/", f"{BIN}/"), tmp_path, env
        )
        shown = (done.stdout + done.stderr).replace(str(fresh), FRESH)
        actual = [text.rstrip() for text in shown.splitlines()]
        assert matches([text.rstrip() for text in expected], actual), (
            f"{page}:{line}: `{command}` printed (exit {done.returncode}):\n"
            + "\n".join(actual)
            + "\n\nthe page shows:\n"
            + "\n".join(expected)
        )


def run_python(page: str, line: int, block: str, namespace: dict[str, object]) -> None:
    """Run one ``python`` block, its tracebacks naming the page and the line."""
    exec(compile("\n" * line + block, str(ROOT / page), "exec"), namespace)


def test_the_log_page_examples_run_in_order() -> None:
    namespace: dict[str, object] = {}
    ran = 0
    for page, line, block in blocks("python"):
        if page == "docs/log.md":
            run_python(page, line, block, namespace)
            ran += 1
    assert ran >= 12


class _Handled(Exception):
    """Raised by the follow example's ``handle`` once it has every stored event."""


def test_the_deployment_follow_example_resumes_after_the_last_event_handled() -> None:
    [(page, line, block)] = [
        b for b in blocks("python") if b[0] == "docs/deployment.md" and "log.follow" in b[2]
    ]
    log = turnlog.open(":memory:")
    log.append("s1", [turnlog.events.UserMessageAdded(text=f"m{i}") for i in range(3)])
    handled: list[int] = []

    def handle(event: turnlog.events.Event) -> None:
        handled.append(event.seq)
        if len(handled) == 3:
            raise _Handled

    with pytest.raises(_Handled):
        run_python(page, line, block, {"log": log, "handle": handle})
    assert handled == [0, 1, 2]


def test_readme_shell_examples_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    transcript = home / ".claude" / "projects" / "PROJECT" / "SESSION.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(TRANSCRIPT)
    env = environment(home, tmp_path / "unused-store")
    ran = 0
    for page, line, block in blocks("sh"):
        if page != "README.md":
            continue  # the docs' synopses are not examples
        for written in block.splitlines():
            if written.startswith("python3 -m venv") or "pytest" in written:
                continue  # setting up, and the test suite itself
            command = written.replace(".venv/bin/", f"{BIN}/")
            done = run(command, tmp_path, env)
            assert done.returncode == 0, (
                f"{page}:{line}: `{command}` failed:\n" + done.stdout + done.stderr
            )
            ran += 1
    assert ran >= 9


def _refreshed(expected: list[str], actual: list[str]) -> list[str]:
    """``actual`` cut like ``expected``: as many lines before and after each ``...``."""
    if "..." not in expected:
        return actual
    cut = expected.index("...")
    head, rest = actual[:cut], actual[cut:]
    tail = (
        _refreshed(expected[cut + 1 :], rest[-len(expected[cut + 1 :]) :])
        if expected[cut + 1 :]
        else []
    )
    return [*head, "...", *tail]


def write(store: Path, scratch: Path) -> None:
    """Rewrite the output under every console command with what it prints now, keeping
    each ``...`` cut (``python tests/test_doc_examples.py --write``)."""
    for page in PAGES:
        text = page.read_text()

        def refresh(match: re.Match[str]) -> str:
            work = Path(tempfile.mkdtemp(dir=scratch))
            shutil.copytree(store, work / "store")
            (work / ".turnlog-key").write_text("example-key\n")
            env = environment(work, work / "store")
            lines = []
            for command, expected in commands(match.group(1)):
                done = run(
                    command.replace(FRESH, str(work / "fresh-demo")).replace(
                        ".venv/bin/", f"{BIN}/"
                    ),
                    work,
                    env,
                )
                shown = (done.stdout + done.stderr).replace(str(work / "fresh-demo"), FRESH)
                lines += [
                    f"$ {command}",
                    *_refreshed(expected, [t.rstrip() for t in shown.splitlines()]),
                ]
            return "```console\n" + "\n".join(lines) + "\n```"

        page.write_text(re.sub(r"^```console\n(.*?)^```$", refresh, text, flags=re.S | re.M))


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    with tempfile.TemporaryDirectory() as tmp:
        demo = Path(tmp) / "store"
        subprocess.run(
            [str(BIN / "turnlog"), "--store", str(demo), "demo"], check=True, capture_output=True
        )
        write(demo, Path(tmp))

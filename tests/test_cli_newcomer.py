"""The turnlog command as a newcomer meets it: each behaviour driven through the console
script in a subprocess, on a fresh store.

A first hour with the command should not stumble: defaults that work (the model of
``pack --format``), errors that name the flags to use, an import that says what it did
file by file, arguments that mean the same in every verb, tables with headers, and
colour only where a person reads it.
"""

from __future__ import annotations

import errno
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import turnlog

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
)


def script() -> str:
    found = shutil.which("turnlog") or str(Path(sys.executable).with_name("turnlog"))
    assert Path(found).exists(), "the turnlog console script is not installed"
    return found


def cli(
    store: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("TURNLOG_STORE", "NO_COLOR")}
    return subprocess.run(
        [script(), "--store", str(store), *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env={**base, **(env or {})},
        check=False,
        timeout=300,
    )


def on_terminal(store: Path, *argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the command with stdout and stderr on a pseudo-terminal; (exit code, output)."""
    master, slave = pty.openpty()
    base = {k: v for k, v in os.environ.items() if k not in ("TURNLOG_STORE", "NO_COLOR")}
    proc = subprocess.Popen(
        [script(), "--store", str(store), *argv],
        stdout=slave,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        env={**base, "TERM": "xterm-256color", "COLUMNS": "200", **(env or {})},
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=300), b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("newcomer") / "store"
    done = cli(store, "demo")
    assert done.returncode == 0, done.stderr
    return store


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    return tmp_path / "store"


def table_header(output: str, *headers: str) -> None:
    first = output.splitlines()[0] if output else ""
    assert first.split()[: len(headers)] == list(headers), output[:300]


# -- pack --format ---------------------------------------------------------------------------


def test_pack_format_takes_the_model_the_session_recorded(demo: Path) -> None:
    done = cli(demo, "pack", "demo", "--format", "anthropic")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"] == "demo-model"
    assert (
        json.loads(cli(demo, "pack", "demo", "--format", "anthropic", "--model", "m").stdout)[
            "model"
        ]
        == "m"
    )
    assert "recorded request" in cli(demo, "pack", "--help").stdout


def test_pack_format_without_a_recorded_model_names_the_model_flag(fresh: Path) -> None:
    with turnlog.open(fresh) as log:
        log.append("chat", turnlog.events.UserMessageAdded(text="hello"))
    done = cli(fresh, "pack", "chat", "--format", "openai-chat")
    assert done.returncode == 2
    assert "--model" in done.stderr and "model must be" not in done.stderr


CLAUDE_CODE = (
    CORPUS
    / "claude_code_jsonl"
    / "Durban-Designer__vsla"
    / "docs"
    / "history"
    / "raw_sessions"
    / "-home-kenth56-vsla"
    / "069508a5-1193-487c-a9b5-a6f5f3ae4f98.jsonl"
)
CODEX = (
    CORPUS
    / "codex_rollout_jsonl"
    / "MoonLadderStudios__MoonMind"
    / "codex"
    / "sessions"
    / "2025"
    / "11"
    / "13"
    / "rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-"
    "d2510c7a74a2.jsonl"
)
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")


@needs_corpus
@pytest.mark.parametrize(
    ("path", "model"),
    [(CLAUDE_CODE, "claude-opus-4-20250514"), (CODEX, "gpt-5.1-codex")],
    ids=["claude_code", "codex"],
)
def test_pack_format_takes_the_model_an_imported_transcript_names(
    fresh: Path, path: Path, model: str
) -> None:
    # No request is recorded; the transcript names the model on its assistant messages.
    assert cli(fresh, "import", str(path)).returncode == 0
    session = json.loads(cli(fresh, "sessions", "--json").stdout)["sessions"][0]["session"]
    for fmt in ("anthropic", "openai-chat", "openai-responses"):
        done = cli(fresh, "pack", session, "--format", fmt, "--budget", "32000")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["model"] == model


def test_pack_max_tokens_zero_is_a_usage_error_naming_the_flag(demo: Path) -> None:
    done = cli(demo, "pack", "demo", "--format", "anthropic", "--max-tokens", "0")
    assert done.returncode == 2, done.stderr
    assert "--max-tokens" in done.stderr and "expected an integer >= 1, found 0" in done.stderr
    assert "Traceback" not in done.stderr


def test_pack_format_is_indented_on_a_terminal_and_exact_in_a_pipe(demo: Path) -> None:
    piped = cli(demo, "pack", "demo", "--format", "anthropic").stdout
    assert piped.count("\n") == 1
    code, shown = on_terminal(demo, "pack", "demo", "--format", "anthropic")
    assert code == 0
    assert shown.count("\n") > 100 and '\n  "model": "demo-model"' in shown.replace("\r", "")


# -- errors name flags ----------------------------------------------------------------------


def test_import_errors_name_the_flags_not_python_parameters(tmp_path: Path, fresh: Path) -> None:
    unknown = tmp_path / "notes.jsonl"
    unknown.write_text('{"hello": 1}\n')
    done = cli(fresh, "import", str(unknown))
    assert done.returncode == 3 and "--format" in done.stderr and "format=" not in done.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"type": "user", "uuid": "u1", "sessionId": "s", "message": '
        '{"role": "user", "content": "hi"}}\n{not json\n'
    )
    done = cli(fresh, "import", str(bad), "--format", "claude_code")
    assert done.returncode == 3
    assert "--skip-bad" in done.stderr and "skip_bad" not in done.stderr


def test_policy_flag_errors_name_the_flag(demo: Path, tmp_path: Path) -> None:
    done = cli(demo, "pack", "demo", "--budget", "0")
    assert done.returncode == 2 and "--budget 0 is too small" in done.stderr
    policy = tmp_path / "p.toml"
    policy.write_text("context_window = 'big'\n")
    done = cli(demo, "pack", "demo", "--policy", str(policy))
    assert done.returncode == 2 and f"--policy {policy}" in done.stderr


# -- import ---------------------------------------------------------------------------------


@pytest.fixture
def transcripts(tmp_path: Path) -> Path:
    """A directory of two real Claude Code transcripts and one with a malformed record
    sorted between them."""
    found = sorted(
        p
        for p in (CORPUS / "claude_code_jsonl").rglob("*.jsonl")
        if p.stat().st_size < 200_000
        and "subagents" not in p.parts
        and not p.name.startswith("agent-")
    )
    if len(found) < 2:
        pytest.skip("needs ../shared/corpus (see README: Tests)")
    folder = tmp_path / "transcripts"
    folder.mkdir()
    shutil.copy(found[0], folder / "a.jsonl")
    shutil.copy(found[1], folder / "c.jsonl")
    (folder / "b.jsonl").write_text(
        '{"type": "user", "uuid": "u1", "sessionId": "s", '
        '"message": {"role": "user", "content": "hi"}}\n{bad\n'
    )
    return folder


def test_import_of_a_directory_stops_at_a_bad_file_and_says_what_was_imported(
    transcripts: Path, fresh: Path
) -> None:
    done = cli(fresh, "import", str(transcripts))
    assert done.returncode == 3
    assert "b.jsonl" in done.stderr and "a.jsonl" in done.stderr
    assert "before it was imported" in done.stderr and "--keep-going" in done.stderr
    with turnlog.open(fresh, readonly=True) as log:
        assert len(log.sessions()) >= 1  # a.jsonl, as the message says


def test_import_keep_going_reports_each_file(transcripts: Path, fresh: Path) -> None:
    done = cli(fresh, "import", str(transcripts), "--keep-going")
    assert done.returncode == 0, done.stderr
    table_header(done.stdout, "FILE", "FORMAT", "SESSIONS", "EVENTS", "NEW", "SKIPPED")
    rows = done.stdout.splitlines()
    assert any(row.startswith(str(transcripts / "a.jsonl")) for row in rows)
    assert any(row.startswith(str(transcripts / "c.jsonl")) for row in rows)
    assert any(row.startswith(f"skipped {transcripts / 'b.jsonl'}: line 2") for row in rows)
    assert "imported 2 files into" in done.stdout
    again = cli(fresh, "import", str(transcripts), "--keep-going", "--json")
    result = json.loads(again.stdout.splitlines()[-1])
    assert result["type"] == "result" and result["appended"] == 0


@pytest.mark.parametrize(
    "what",
    ["no transcripts", "empty directory", "random bytes", "empty transcript", "empty transcripts"],
)
def test_an_import_that_imports_nothing_fails_and_creates_no_store(
    tmp_path: Path, what: str
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    argv = [str(source)]
    if what == "no transcripts":
        (source / "hosts").write_text("127.0.0.1 localhost\n")
        (source / "notes.json").write_text('{"a": 1}')
    elif what == "random bytes":
        data = source / "random.jsonl"
        data.write_bytes(bytes((i * 7919 + 13) % 256 for i in range(4096)))
        argv = [str(data), "--format", "claude_code", "--skip-bad"]
    elif what.startswith("empty transcript"):
        # An empty .jsonl file is a Claude Code transcript of no event; it said "imported
        # 1 file into 0 sessions" with exit 0, and the store it created was removed.
        (source / "a.jsonl").write_bytes(b"")
        if what == "empty transcripts":
            (source / "rollout-b.jsonl").write_bytes(b"\n")
        else:
            argv = [str(source / "a.jsonl")]
    store = tmp_path / "new-store"
    done = cli(store, "import", *argv)
    assert done.returncode == 3, done.stdout
    assert done.stderr.startswith("turnlog: error: ") and "Traceback" not in done.stderr
    assert "imported 1 path" not in done.stdout and "imported" not in done.stdout
    if what.startswith("empty transcript"):
        assert "hold no events" in done.stderr or "holds no events" in done.stderr, done.stderr
    assert not store.exists(), "a failed import created a store"


def test_a_failed_import_into_an_existing_directory_leaves_it_as_it_was(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "README").write_text("mine")
    done = cli(store, "import", str(tmp_path / "missing.jsonl"))
    assert done.returncode == 3
    assert sorted(p.name for p in store.iterdir()) == ["README"]


# -- compact ---------------------------------------------------------------------------------


def test_compact_says_why_it_skipped(fresh: Path) -> None:
    with turnlog.open(fresh) as log:
        log.append(
            "chat",
            [
                turnlog.events.UserMessageAdded(text="hello"),
                turnlog.events.AssistantMessageAdded(parts=(turnlog.events.TextPart(text="hi"),)),
            ],
        )
    done = cli(fresh, "compact", "chat")
    assert done.returncode == 0
    line = done.stdout.strip()
    assert line.startswith("skipped: nothing to compact: ") and len(line) > 40


# -- consistent, loud arguments -----------------------------------------------------------


def test_negative_request_seqs_count_requests_from_the_end(demo: Path) -> None:
    with turnlog.open(demo, readonly=True) as log:
        requests = turnlog.Replayer(turnlog.Packer(log)).requests("demo")
    latest = cli(demo, "explain", "demo", "-1", "--json")
    assert latest.returncode == 0, latest.stderr
    same = cli(demo, "explain", "demo", str(requests[-1]), "--json")
    assert json.loads(latest.stdout) == json.loads(same.stdout)
    assert cli(demo, "replay", "demo", "-2").stdout.startswith(f"demo#{requests[-2]}: ")
    diff = json.loads(cli(demo, "diff", "demo", "-2", "-1", "--json").stdout)
    assert (diff["request_a"], diff["request_b"]) == (requests[-2], requests[-1])
    too_far = cli(demo, "explain", "demo", f"-{len(requests) + 1}")
    assert too_far.returncode == 2 and "recorded requests" in too_far.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ("memories", "nosuch"),
        ("memories", "demo", "--memory-session", "nosuch"),
        ("recall", "amount", "--session", "nosuch"),
        ("recall", "amount", "--commit", "nosuch"),
        ("explain", "nosuch", "-1"),
        ("replay", "nosuch"),
    ],
    ids=" ".join,
)
def test_unknown_sessions_are_errors_everywhere(demo: Path, argv: tuple[str, ...]) -> None:
    done = cli(demo, *argv)
    assert done.returncode == 3 and "nosuch" in done.stderr, done.stdout


@pytest.mark.parametrize(
    "verb", [("pack", "demo"), ("compact", "demo"), ("recall", "amount")], ids=lambda v: v[0]
)
def test_agent_without_a_policy_file_is_a_usage_error(demo: Path, verb: tuple[str, ...]) -> None:
    done = cli(demo, *verb, "--agent", "small")
    assert done.returncode == 2 and "--agent small needs --policy FILE" in done.stderr


def test_recall_commit_brings_back_other_sessions_only(fresh: Path) -> None:
    with turnlog.open(fresh) as log:
        log.append(
            "old", turnlog.events.UserMessageAdded(text="the parser handles decimal amounts")
        )
        log.append("new", turnlog.events.UserMessageAdded(text="fix the decimal amounts parser"))
    done = cli(fresh, "recall", "decimal amounts parser", "--commit", "new", "--json")
    assert done.returncode == 0, done.stderr
    hits = json.loads(done.stdout)["hits"]
    assert hits and {hit["session"] for hit in hits} == {"old"}
    refused = cli(fresh, "recall", "decimal", "--commit", "new", "--session", "new")
    assert refused.returncode == 2 and "--commit new" in refused.stderr


# -- output ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "headers"),
    [
        (("sessions",), ("SESSION", "HEAD", "EVENTS")),
        (("memories", "demo"), ("memory",)),
        (("recall", "parse amount"), ("EVENT", "AT", "SCORE", "TEXT")),
        (("log", "demo", "--limit", "3"), ("0",)),
    ],
    ids=lambda v: v[0] if isinstance(v, tuple) and v and v[0][0].islower() else "",
)
def test_listings_are_tables_with_headers(
    demo: Path, argv: tuple[str, ...], headers: tuple[str, ...]
) -> None:
    done = cli(demo, *argv)
    assert done.returncode == 0, done.stderr
    table_header(done.stdout, *headers)
    lines = done.stdout.splitlines()
    assert all(line == line.rstrip() for line in lines), "no trailing blanks in a pipe"


def test_explain_diff_and_memories_print_column_headers(demo: Path) -> None:
    explained = cli(demo, "explain", "demo", "-1").stdout.splitlines()
    assert any(line.split()[:4] == ["SEQ", "KIND", "DECISION", "TOKENS"] for line in explained)
    assert any(line.split()[:2] == ["STAGE", "DETAIL"] for line in explained)
    memories = cli(demo, "memories", "demo").stdout.splitlines()
    assert memories[1].split() == [
        "ID",
        "RETENTION",
        "TYPE",
        "PINNED",
        "EXPIRES",
        "TITLE",
        "CONTENT",
    ]
    # (between prefix breaks consecutive requests change no decision: -5 spans a compaction)
    diff = cli(demo, "diff", "demo", "-5", "-1").stdout.splitlines()
    assert any(line.split()[:5] == ["SEQ", "KIND", "BEFORE", "AFTER", "RULE"] for line in diff)


def test_counts_are_plural_aware(fresh: Path) -> None:
    with turnlog.open(fresh) as log:
        log.append("one", turnlog.events.UserMessageAdded(text="hello"))
    verified = cli(fresh, "verify")
    assert verified.stdout == "ok: 1 session, 1 event, 0 blob refs intact\n"
    for argv in (("demo", "--turns", "1"), ("verify",), ("replay", "demo")):
        out = cli(fresh, *argv).stdout
        singular = re.findall(
            r"(?<![\d,.])1 (?:events|messages|requests|sessions|turns|"
            r"blob refs|memories)\b",
            out,
        )
        assert not singular and "(s)" not in out, (argv, singular)


def test_show_aligns_the_values_of_each_level(demo: Path) -> None:
    with turnlog.open(demo, readonly=True) as log:
        seq = next(e.seq for e in log.read("demo", kinds=["tool_result"]))
    lines = cli(demo, "show", "demo", str(seq)).stdout.split("\n\n", 1)[1].splitlines()
    starts = {
        len(line) - len(line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith(" ") and len(line.split(None, 1)) == 2
    }
    assert len(starts) == 1, lines


def test_demo_rerun_prints_one_line_for_the_turns_already_there(demo: Path) -> None:
    done = cli(demo, "demo")
    assert done.returncode == 0
    assert "already in the log" in done.stdout
    assert done.stdout.count("already in the log") == 2  # the turns line and the summary


def test_demo_counts_one_turn_in_the_singular_and_only_the_turns_it_appended(
    fresh: Path,
) -> None:
    """A re-run of one turn said "nothing appended or packed for them" and "all 1 turn
    were already in the log"; a run over 1 stored and 1 new turn said "in 2 turns"."""
    assert cli(fresh, "demo", "--turns", "1", "--no-pack").returncode == 0
    again = cli(fresh, "demo", "--turns", "1", "--no-pack").stdout
    assert "1 turn already in the log (turn 1): nothing appended or packed for it\n" in again
    assert "nothing new appended: the 1 turn was already in the log" in again
    assert "replay: no recorded request to replay (--no-pack records none)" in again
    more = cli(fresh, "demo", "--turns", "2", "--no-pack").stdout
    assert re.search(r"^appended \d+ events in 1 turn \(17 already present\)", more, re.M), more


def test_erase_names_the_events_it_erased_besides_the_one_named(fresh: Path) -> None:
    """``turnlog erase demo 4`` said "erased 4 events": the compactions quoting event 4
    went with it, unnamed."""
    assert cli(fresh, "demo", "--turns", "4").returncode == 0
    done = cli(fresh, "erase", "demo", "4", "--reason", "asked")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert re.fullmatch(
        r"demo: erased (\d+) events and 0 blobs \(erasure event #\d+\); (\d+) of them "
        r"\([\d, ]+\) derived from the event named",
        first,
    ), first


def test_demo_ends_with_what_to_try_next(fresh: Path) -> None:
    done = cli(fresh, "demo", "--turns", "2")
    tail = done.stdout.split("try next:\n", 1)[1]
    assert f"turnlog --store {fresh} log demo" in tail
    assert f"turnlog --store {fresh} explain demo -1" in tail


def test_colour_on_a_terminal_only_and_never_with_no_color(demo: Path) -> None:
    code, coloured = on_terminal(demo, "replay", "demo")
    assert code == 0 and "\x1b[" in coloured
    code, plain = on_terminal(demo, "replay", "demo", env={"NO_COLOR": "1"})
    assert code == 0 and "\x1b[" not in plain
    assert "\x1b[" not in cli(demo, "replay", "demo").stdout


def test_library_errors_that_name_a_command_name_the_api_call_too(demo: Path) -> None:
    with turnlog.open(demo, readonly=True) as log:
        with pytest.raises(turnlog.errors.UnknownSessionError, match=r"Log\.sessions\(\)"):
            log.read("nosuch")
        with pytest.raises(turnlog.errors.UnknownSessionError, match=r"Log\.read\('demo'\)"):
            log.get("demo", 10**6)
        with pytest.raises(
            turnlog.errors.InvalidArgumentError, match=r"Replayer\.requests\('demo'\)"
        ):
            turnlog.Replayer(turnlog.Packer(log)).explain("demo", 0)
    done = cli(demo, "log", "nosuch")  # the command names only itself
    assert done.returncode == 3 and "`turnlog sessions`" in done.stderr
    assert "Python" not in done.stderr


@needs_corpus
def test_compact_takes_the_older_steps_of_a_one_instruction_session_in_one_run(fresh: Path) -> None:
    # A Codex rollout: its instructions and environment as notifications, one user
    # message, then 41 tool calls; the default policy keeps the last 3 turns verbatim.
    assert cli(fresh, "import", str(CODEX)).returncode == 0
    session = "019a802a-aab1-7c31-9831-d2510c7a74a2"
    due = cli(fresh, "pack", session, "--budget", "32000", "--json")
    assert json.loads(due.stdout)["compaction_due"] is True
    done = cli(fresh, "compact", session, "--json")
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "committed", outcome
    with turnlog.open(fresh, readonly=True) as log:
        events = log.read(session)
        user = next(e.seq for e in events if isinstance(e.body, turnlog.events.UserMessageAdded))
        compactions = [
            e.body for e in events if isinstance(e.body, turnlog.events.CompactionCommitted)
        ]
    assert len(compactions) == 1
    # the older steps after the instruction, not what came before it or the instruction
    assert compactions[0].first_seq > user
    after = json.loads(cli(fresh, "pack", session, "--budget", "32000", "--json").stdout)
    assert [s["name"] for s in after["prompt"]["system"]] == ["conversation_summary"]
    assert after["tokens"] < json.loads(due.stdout)["tokens"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("context_windw = 32000\n", "did you mean 'context_window'"),
        ("[budgt]\ncontext_window = 32000\n", "did you mean [budget]? the tables are [budget]"),
        ('context_window = "32k"\n', "an integer is expected at context_window"),
    ],
)
def test_a_policy_file_mistake_is_a_usage_error_that_says_what_to_write(
    demo: Path, tmp_path: Path, text: str, words: str
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(text)
    done = cli(demo, "pack", "demo", "--policy", str(policy))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr


def test_diff_prints_each_rule_as_explain_does(demo: Path) -> None:
    # 'rule: detail', as explain prints it: a detail with parentheses of its own is
    # not nested in another pair.
    diff = cli(demo, "diff", "demo", "-3", "-1").stdout.splitlines()
    changes = json.loads(cli(demo, "diff", "demo", "-3", "-1", "--json").stdout)["changes"]
    rows = [line for line in diff if re.match(r"\s*\d+\s+tool_result\s", line)]
    assert rows and len(rows) == len(changes)
    for row, change in zip(rows, changes, strict=True):
        assert change["detail"]
        assert row.endswith(f"  {change['rule']}: {change['detail']}"), row
    explained = cli(demo, "explain", "demo", "-1").stdout
    for change in changes:
        assert f"  {change['rule']}: {change['detail']}" in explained


def test_a_seq_that_is_not_a_request_names_its_kind(demo: Path) -> None:
    done = cli(demo, "explain", "demo", "1")
    assert done.returncode != 0
    assert "demo#1 is not a request record (its kind is " in done.stderr
    assert "turnlog log demo --kind request" in done.stderr

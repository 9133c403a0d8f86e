"""turnlog as someone new to it uses it: the public API and the documentation, on real
transcripts of the shared corpus where that matters.

Each test is one thing a first use ran into: it drives the product as documented
(`export_session`, the `turnlog` command, the inspector, the examples of the docs) and
checks what that use needs to hold.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import turnlog
from turnlog.adapters.importers import FORMATS, detect, export_session, import_file
from turnlog.events import (
    AssistantMessageAdded,
    NotificationAdded,
    RecallAdded,
    TextPart,
    UserMessageAdded,
)
from turnlog.tools.cli._parser import _build_parser

CORPUS = Path(
    os.environ.get("TURNLOG_CORPUS")
    or Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
)

#: One real transcript of each source, small enough to export to every format quickly.
SAMPLES = {
    "claude_code": "claude_code_jsonl/M-Thisness__M-Claude/Archives/"
    "93a38075-1e1b-4210-978f-8e927e43b55b.jsonl",
    "codex": "codex_rollout_jsonl/Python-AI-Solutions__agentic-neurodata-conversion/codex/"
    "sessions/2025/09/29/rollout-2025-09-29T13-07-08-01999467-65bf-7281-8ab6-73bb53989041.jsonl",
    "mini_swe_agent": "mini_swe_agent_traj_json/gruckion__mini-swe-agent/swebench_results/"
    "20251118_gemini-3-pro-74pct/trajs/django__django-16255/django__django-16255.traj.json",
    "swe_agent": "swe_agent_traj/princeton-nlp__SWE-agent/trajectories/demonstrations/"
    "function_calling_simple.traj",
    "openhands": "openhands_events/All-Hands-AI__OpenHands/tests/runtime/trajs/basic.json",
}

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present")

#: The suffix a file of each format is detected by.
_SUFFIX = {"claude_code": ".jsonl", "codex": ".jsonl", "openhands_output": ".jsonl", "aider": ".md"}


def _user_texts(log: turnlog.Log, session: str) -> list[str]:
    return [e.body.text.strip() for e in log.read(session) if isinstance(e.body, UserMessageAdded)]


def _said(log: turnlog.Log, session: str) -> list[str]:
    """User messages and notifications (a format without notifications writes them as
    user messages)."""
    return [
        e.body.text.strip()
        for e in log.read(session)
        if isinstance(e.body, (UserMessageAdded, NotificationAdded))
    ]


def _in_order(wanted: list[str], found: list[str]) -> bool:
    rest = iter(found)
    return all(any(w == f for f in rest) for w in wanted)


def _assistant_texts(log: turnlog.Log, session: str) -> list[str]:
    return [
        part.text.strip()
        for e in log.read(session)
        if isinstance(e.body, AssistantMessageAdded)
        for part in e.body.parts
        if isinstance(part, TextPart) and part.text.strip()
    ]


@needs_corpus
@pytest.mark.parametrize("source", sorted(SAMPLES))
@pytest.mark.parametrize(
    "target", [f for f in FORMATS if f not in ("turnlog", "openhands_output", "aider")]
)
def test_an_imported_transcript_exports_to_another_format(
    source: str, target: str, tmp_path: Path
) -> None:
    """`export_session(log, session, FORMAT)` of a session imported from another format
    writes that format from the events (the source records kept in meta are the other
    format's): the file is detected as FORMAT and imports back with the same user and
    assistant texts."""
    if source == target:
        pytest.skip("the same format gives its file back (tests/test_importers.py)")
    log = turnlog.open(":memory:")
    summary = import_file(log, CORPUS / SAMPLES[source], skip_bad=True)
    session = summary.roots[0]
    data = export_session(log, session, target)
    name = (
        f"rollout-x{_SUFFIX[target]}" if target == "codex" else f"x{_SUFFIX.get(target, '.json')}"
    )
    path = tmp_path / name
    path.write_bytes(data)
    assert detect(path) == target
    again = turnlog.open(":memory:")
    back = import_file(again, path)
    assert _in_order(_user_texts(log, session), _said(again, back.roots[0]))
    assert _assistant_texts(again, back.roots[0]) == _assistant_texts(log, session)


_DOCS = Path(__file__).resolve().parents[1]
#: Placeholders of the docs' command lines that stand for numbers.
_NUMBERS = {"SEQ": "3", "REQ_SEQ": "3", "N": "3", "DAYS": "3"}


def _doc_commands() -> list[tuple[str, str]]:
    """Every ``turnlog ...`` code span of the README and docs/*.md, as (where, text)."""
    found = []
    for path in [_DOCS / "README.md", *sorted((_DOCS / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"`((?:\.venv/bin/)?turnlog [^`]+)`", text):
            line = text[: match.start()].count("\n") + 1
            found.append((f"{path.name}:{line}", match.group(1)))
    return found


def test_the_command_lines_in_the_docs_parse() -> None:
    """A command line the README or a page of docs/ shows in running text is one the
    command takes as written (placeholders aside): a reader copies it. A span naming
    only a verb or a flag (`turnlog import`, `turnlog import --format`) refers to it and is
    not a command line."""
    wrong = []
    for where, text in _doc_commands():
        if any(mark in text for mark in ("|", "[", "...", "…")):
            continue
        argv = [_NUMBERS.get(word, word) for word in shlex.split(text)[1:]]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                _build_parser().parse_args(argv)
        except SystemExit as exc:
            said = err.getvalue().strip().splitlines()[-1:]
            mention = ("arguments are required", "expected one argument")
            if exc.code and not any(m in s for m in mention for s in said):
                wrong.append(f"{where}: `{text}`: {said}")
    assert not wrong, "\n".join(wrong)


# -- the command on an imported transcript ------------------------------------------------


def _script() -> str:
    found = shutil.which("turnlog") or str(Path(sys.executable).with_name("turnlog"))
    assert Path(found).exists(), "the turnlog console script is not installed"
    return found


def cli(store: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TURNLOG_STORE", "NO_COLOR")}
    return subprocess.run(
        [_script(), "--store", str(store), *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A store holding one real SWE-agent trajectory, imported by the command: (store,
    session id)."""
    if not CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    store = tmp_path_factory.mktemp("outside") / "store"
    done = cli(store, "import", str(CORPUS / SAMPLES["swe_agent"]), "--json")
    assert done.returncode == 0, done.stderr
    session = json.loads(done.stdout.splitlines()[-1])["sessions"][0]
    return store, session


@pytest.mark.parametrize("older", [False, True], ids=["seqs", "older-than"])
def test_erase_names_the_whole_id_a_prefix_stands_for(
    imported: tuple[Path, str], older: bool
) -> None:
    """The reading verbs complete a session id from a unique prefix; `erase` does not
    (it cannot be undone), and given the prefix it says so and names the whole id,
    erasing nothing."""
    store, session = imported
    prefix = session.split("-")[0]
    assert prefix != session
    argv = ["--older-than", "0"] if older else ["0"]
    done = cli(store, "erase", prefix, *argv, "--reason", "test")
    assert done.returncode == 3, done.stdout
    assert f"did you mean {session!r}" in done.stderr and "whole id" in done.stderr
    assert "erased" not in cli(store, "verify", session).stdout


def test_recall_commit_takes_a_prefix_and_the_sessions_policy(tmp_path: Path) -> None:
    """`recall --commit SESSION` completes SESSION from a prefix as `--session` does, and
    caps what it appends by the session's policy in force (the one its requests are
    packed under: `pack --budget 8000 --record` set it), not by the defaults."""
    if not CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    store = tmp_path / "store"
    other = (
        CORPUS / "claude_code_jsonl/Durban-Designer__vsla/docs/history/raw_sessions/"
        "-home-kenth56-vsla/069508a5-1193-487c-a9b5-a6f5f3ae4f98.jsonl"
    )
    done = cli(store, "import", str(CORPUS / SAMPLES["swe_agent"]), str(other), "--json")
    assert done.returncode == 0, done.stderr
    session = json.loads(done.stdout.splitlines()[0])["sessions"][0]
    prefix = session.split("-")[0]
    assert cli(store, "pack", prefix, "--budget", "8000", "--record").returncode == 0
    done = cli(store, "recall", "cuda kernel", "-k", "20", "--commit", prefix)
    assert done.returncode == 0, done.stderr
    with turnlog.open(store, readonly=True) as log:
        head = log.head(session)
        assert head is not None
        recall = log.get(session, head.seq).body
        assert isinstance(recall, RecallAdded) and recall.hits
        # What was committed fits the cap the session packs under: the next request
        # shows it whole (a recall over the cap is cut when packed: "truncated").
        packed = turnlog.Packer(log).pack(session)
        (decision,) = [d for d in packed.decisions if d.seq == head.seq]
        assert decision.decision == "verbatim", decision


@pytest.mark.parametrize(("budget", "code"), [("100", 3), ("0", 2)])
def test_a_budget_too_small_says_to_pass_a_larger_budget(
    imported: tuple[Path, str], budget: str, code: int
) -> None:
    """A window the prompt cannot fit (or no window at all) is refused naming the flag
    to change, not only the policy fields behind it."""
    store, session = imported
    done = cli(store, "pack", session, "--budget", budget)
    assert done.returncode == code, done.stdout
    assert "pass a larger --budget" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1


def test_the_receipt_refuses_a_filter_it_does_not_know(tmp_path: Path) -> None:
    """The inspector answers a bad parameter with 400 saying what it takes
    (docs/inspector.md), also for the receipt's decision and kind filters: an unknown
    one showed an empty page, as if no event had that decision."""
    pytest.importorskip("starlette", reason="the web extra: pip install 'turnlog[web]'")
    if not CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    import httpx
    from turnlog.tools.web import Server
    from web_support import corpus_store

    path, session, seq = corpus_store(tmp_path / "store")
    with turnlog.open(path, readonly=True) as log:
        server = Server(log).start()
        try:
            base = f"{server.base}/api/sessions/{quote(session, safe='')}/requests/{seq}"
            for query, says in [
                ("decision=bogus", "unknown decision 'bogus'; the decisions are verbatim"),
                ("decision=Verbatim", "unknown decision 'Verbatim'"),
                ("kind=bogus", "unknown event kind 'bogus'; the kinds are assistant"),
            ]:
                answer = httpx.get(f"{base}?{query}", timeout=60)
                assert answer.status_code == 400, query
                assert says in answer.json()["error"]
            good = httpx.get(f"{base}?decision=verbatim&kind=user", timeout=60)
            assert good.status_code == 200
            chosen = good.json()["decisions"]
            assert chosen and {(d["decision"], d["kind"]) for d in chosen} == {("verbatim", "user")}
        finally:
            server.stop()


def test_replay_of_a_session_without_requests_says_so(imported: tuple[Path, str]) -> None:
    """An imported transcript has no recorded request until one is packed with
    --record: `replay` says so and how to record one (as `cost` does), where it
    printed "0 of 0 requests reproduced byte for byte"."""
    store, session = imported
    done = cli(store, "replay", session)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{session}: no recorded requests to replay (a request is recorded by `turnlog "
        f"pack {session} --record`, or by the Session facade in Python)\n"
    )
    assert json.loads(cli(store, "replay", session, "--json").stdout) == {
        "ok": True,
        "requests": [],
    }


def test_budget_scales_the_defaults_a_smaller_budget_left(tmp_path: Path) -> None:
    """`pack --budget N` keeps the policy in force but for the window. The defaults it
    scaled to an earlier --budget (reserve, buffers, caps) are defaults, not choices:
    after a `--budget 4000 --record`, `--budget 128000` packs as a session without that
    history does (before: a 1,000-token reserve and a 642-token warning buffer at 128k,
    against 16,000 and 24,000). Fields a policy file set stay as set."""
    if not CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    transcript = str(CORPUS / SAMPLES["swe_agent"])
    fresh, used = tmp_path / "fresh", tmp_path / "used"
    for store in (fresh, used):
        assert cli(store, "import", transcript).returncode == 0
    session = cli(fresh, "sessions", "--json")
    sid = json.loads(session.stdout)["sessions"][0]["session"]

    def budget(store: Path, window: str) -> dict[str, int]:
        done = cli(store, "pack", sid, "--budget", window, "--json")
        assert done.returncode == 0, done.stderr
        plan: dict[str, int] = json.loads(done.stdout)["budget"]
        return plan

    assert cli(used, "pack", sid, "--budget", "4000", "--record").returncode == 0
    for window in ("128000", "16000"):
        assert budget(used, window) == budget(fresh, window)
    done = cli(used, "pack", sid, "--budget", "128000", "--record")
    assert "output_reserve 500 -> 16,000; warning_buffer 750 -> 24,000" in done.stderr, done.stderr
    policy = tmp_path / "policy.toml"
    policy.write_text("context_window = 32000\noutput_reserve = 3000\nwarning_buffer = 5000\n")
    assert cli(used, "pack", sid, "--policy", str(policy), "--record").returncode == 0
    plan = budget(used, "64000")
    assert plan["output_reserve"] == 3000 and plan["warning"] == 64000 - 3000 - 5000


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "postgresql://agent:s3cretpw@db.example/agents?pool_timout=5",
            "unknown parameter 'pool_timout'",
        ),
        ("postgresql://agent:s3c%zzretpw@db.example/agents", "the PostgreSQL URL is malformed"),
    ],
)
def test_a_postgresql_url_with_a_mistake_says_which(url: str, says: str) -> None:
    """A misspelt parameter of a store URL is named (it was only "malformed"), and no
    message repeats the password, though libpq's own messages quote the URL."""
    pytest.importorskip("psycopg", reason="the postgres extra: pip install 'turnlog[postgres]'")
    with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
        turnlog.open(url)
    assert says in str(raised.value) and "s3c" not in str(raised.value)
    done = subprocess.run(
        [_script(), "--store", url, "sessions"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 3 and says in done.stderr and "s3c" not in done.stderr


@pytest.mark.parametrize("given", ["read_output", {"id": "c1", "name": "read_output"}])
def test_call_context_tool_takes_a_tool_call_and_says_so(given: object) -> None:
    """`call_context_tool` given a tool name or a dict instead of the `ToolCall` that
    `record` returned raises `InvalidArgumentError` naming what it takes (an
    AttributeError before), on both facades, and appends nothing."""
    import asyncio

    from turnlog.adapters import AsyncSession, Session

    log = turnlog.open(":memory:")
    session = Session(log, "s", model="gpt-4o-mini", format="openai-chat")
    session.user("hi")
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="must be a ToolCall"):
        session.call_context_tool(given)  # type: ignore[arg-type]
    shell = AsyncSession(log, "s", model="gpt-4o-mini", format="openai-chat")
    with pytest.raises(turnlog.errors.InvalidArgumentError, match=r"answer\.tool_calls"):
        asyncio.run(shell.call_context_tool(given))  # type: ignore[arg-type]
    assert len(log.read("s")) == 1


@pytest.mark.parametrize(
    ("fmt", "body"),
    [
        (
            "openai-chat",
            {
                "model": "gpt-4o",
                "messages": [
                    {"role": "user", "content": "Why does test_parse fail?"},
                    {"role": "assistant", "content": "It compares floats."},
                ],
            },
        ),
        (
            "openai-responses",
            {
                "model": "gpt-4.1",
                "input": [{"role": "user", "content": "Why does test_parse fail?"}],
            },
        ),
    ],
)
def test_pack_format_takes_the_model_an_imported_request_body_names(
    tmp_path: Path, fmt: str, body: dict[str, object]
) -> None:
    """An OpenAI request body names its model once, at the top, not on each message:
    `pack --format` of the imported session takes it, as it takes the model a Claude
    Code or Codex transcript names on its messages (it asked for --model before)."""
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    store = tmp_path / "store"
    done = cli(store, "import", str(path), "--format", fmt, "--json")
    assert done.returncode == 0, done.stderr
    session = json.loads(done.stdout.splitlines()[-1])["sessions"][0]
    for target in ("anthropic", "openai-chat"):
        done = cli(store, "pack", session, "--format", target)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["model"] == body["model"]


def test_log_says_what_was_erased_in_words(tmp_path: Path) -> None:
    """`turnlog log` sums up an erased event and an erasure event as it sums up the
    others (they were printed as their raw JSON fields)."""
    if not CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    store = tmp_path / "store"
    done = cli(store, "import", str(CORPUS / SAMPLES["swe_agent"]), "--json")
    session = json.loads(done.stdout.splitlines()[-1])["sessions"][0]
    kinds = [
        json.loads(line)["kind"]
        for line in cli(store, "log", session, "--json").stdout.splitlines()
    ]
    seq = kinds.index("user")
    done = cli(store, "erase", session, str(seq), "--reason", "data-subject request 7")
    assert done.returncode == 0, done.stderr
    erasure = len(kinds)
    lines = cli(store, "log", session).stdout.splitlines()
    assert lines[seq].split(None, 2)[2] == f"erased         user erased by #{erasure}"
    assert lines[erasure].split(None, 2)[2] == (
        f"erasure        1 event erased ({seq}): data-subject request 7"
    )


def test_copy_of_a_store_onto_itself_is_a_usage_error(imported: tuple[Path, str]) -> None:
    """`copy SRC DST` with DST the same directory as SRC (spelt the same or not) says so,
    exit 2, where LMDB's "environment is already open in this process" came out."""
    store, _ = imported
    for target in (str(store), f"{store}/", str(store / ".." / store.name)):
        done = subprocess.run(
            [_script(), "copy", str(store), target],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert done.returncode == 2, done.stderr
        assert "SRC and DST are the same store" in done.stderr


@pytest.mark.parametrize("turns", ["0", "101"])
def test_demo_turns_out_of_range_is_a_usage_error_and_creates_nothing(
    tmp_path: Path, turns: str
) -> None:
    """`demo --turns` outside 1 to 100 is a usage error naming the range (101 was a
    turnlog error, exit 3, worded for Python), and no store is left behind."""
    store = tmp_path / "store"
    done = cli(store, "demo", "--turns", turns)
    assert done.returncode == 2 and "--turns must be 1 to 100" in done.stderr, done.stderr
    assert not store.exists()


# -- config objects refuse a misspelled option with a KernelError naming it ---------------
def _loose(function: object) -> Any:
    """``function`` untyped, to call it with the mistakes a user makes."""
    return function


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: _loose(turnlog.Policy)(windw=1), ["'windw'", "context_window", "summary_gate"]),
        (lambda: _loose(turnlog.Policy)(contxt_window=1), ["did you mean 'context_window'"]),
        (lambda: _loose(turnlog.Policy)(8_000), ["keyword arguments", "1 positional argument;"]),
        (lambda: _loose(turnlog.Policy)(context_window="8k"), ["context_window", "'8k'"]),
        (lambda: _loose(turnlog.Policy)(truncate_lines=1), ["truncate_lines", ">= 2", "found 1"]),
    ],
)
def test_a_policy_given_a_wrong_field_raises_a_policy_error_naming_it(
    build: object, says: list[str]
) -> None:
    with pytest.raises(turnlog.errors.PolicyError) as caught:
        build()  # type: ignore[operator]
    for words in says:
        assert words in str(caught.value), str(caught.value)


def test_stores_sessions_and_open_refuse_a_misspelled_option_naming_the_valid_ones(
    tmp_path: Path,
) -> None:
    from turnlog.adapters import AsyncSession, Session
    from turnlog.stores import LMDBStore

    memory = turnlog.open(":memory:")
    cases = [
        (
            lambda: _loose(turnlog.open)(tmp_path / "a", readonlyy=True),
            "'readonly'",
            "blob_threshold",
        ),
        (
            lambda: _loose(turnlog.open)(tmp_path / "a", True),
            "1 positional argument (path)",
            "sync=...",
        ),
        (lambda: _loose(LMDBStore)(tmp_path / "b", mapsize=1), "'map_size'", "max_map_size"),
        (lambda: _loose(Session)(memory, "s", model="m", max_token=5), "'max_tokens'", "redactor"),
        (lambda: _loose(AsyncSession)(memory, "s", model="m", fromat="x"), "'format'", "attempts"),
        (lambda: _loose(Session)(memory, "s", "m"), "2 positional arguments", "model=..."),
        (
            lambda: _loose(turnlog.stores.PostgresStore)(
                "postgresql://u@127.0.0.1:1/d", pool_timeot=1
            ),
            "'pool_timeout'",
            "notify",
        ),
    ]
    for build, closest, listed in cases:
        with pytest.raises(turnlog.errors.InvalidArgumentError) as caught:
            build()
        assert closest in str(caught.value) and listed in str(caught.value), str(caught.value)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("facade", ["Session", "AsyncSession"])
@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ((), "arguments 'log', 'session_id' and 'model'"),
        (("memory", "s1"), "argument 'model'"),
        (("memory",), "argument 'session_id'"),
    ],
)
def test_a_session_missing_an_argument_names_it_and_shows_the_call(
    facade: str, given: tuple[str, ...], missing: str
) -> None:
    """``Session(log, "s1")`` without ``model=`` raised Python's bare "missing 1
    required keyword-only argument"."""
    import turnlog.adapters

    with turnlog.open(":memory:") as log:
        args = [log if name == "memory" else name for name in given]
        kwargs = {"model": "gpt-4o-mini"} if missing == "argument 'session_id'" else {}
        with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
            _loose(getattr(turnlog.adapters, facade))(*args, **kwargs)
    assert f"{facade}() is missing its required {missing}" in str(raised.value)
    assert f'call it as {facade}(turnlog.open(path), "s1", model="gpt-4o-mini")' in str(
        raised.value
    )


@pytest.mark.parametrize("given", ["path", "store", "session"])
@pytest.mark.parametrize("call", ["Packer", "Compactor", "Session"])
def test_what_is_not_a_log_is_refused_where_the_log_goes(call: str, given: str) -> None:
    """``Packer("./store")``, ``Compactor(store)`` or ``Packer(session)`` failed at the
    first use (or at once) with an ``AttributeError``; each says what to pass."""
    import turnlog.adapters

    build: dict[str, Any] = {
        "Packer": turnlog.Packer,
        "Compactor": turnlog.Compactor,
        "Session": lambda log: turnlog.adapters.Session(log, "s2", model="gpt-4o-mini"),
    }
    shows = {
        "Packer": {
            "path": "Packer(turnlog.open(path))",
            "store": "Packer(turnlog.Log(store))",
            "session": "Packer(session.log)",
        },
        "Compactor": {
            "path": "Compactor(turnlog.open(path))",
            "store": "Compactor(turnlog.Log(store))",
            "session": "Compactor(session.log)",
        },
    }.get(call, {})
    with turnlog.open(":memory:") as log:
        session = turnlog.adapters.Session(log, "s1", model="gpt-4o-mini")
        value = {"path": "./store", "store": log.store, "session": session}[given]
        with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
            build[call](value)
    assert "log must be a turnlog Log" in str(raised.value)
    assert shows.get(given, 'Session(turnlog.open(path), "s1", model=...)') in str(raised.value)


@pytest.mark.parametrize("where", ["port", "socket"])
def test_a_postgresql_server_that_refuses_the_connection_fails_at_once(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listening where the URL points is said at the first attempt, naming the
    location without its password; it waited the whole pool_timeout (30 s by default)."""
    pytest.importorskip("psycopg", reason="the postgres extra: pip install 'turnlog[postgres]'")
    import time

    from turnlog import _postgres

    class NoWaiting:
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            raise AssertionError(f"a refused connection was retried after {seconds} s")

    monkeypatch.setattr(_postgres, "time", NoWaiting)
    url = (
        "postgresql://agent:s3cretpw@127.0.0.1:1/agents?pool_timeout=3600"
        if where == "port"
        else f"postgresql://agent:s3cretpw@/agents?host={tmp_path}&pool_timeout=3600"
    )
    with pytest.raises(turnlog.errors.StoreUnavailableError) as raised:
        turnlog.open(url)
    message = str(raised.value)
    assert "nothing accepts connections at postgresql://agent@" in message, message
    assert "s3c" not in message and "Nothing was written" in message


@pytest.mark.parametrize(
    ("wire", "field"),
    [
        ("openai-chat", "max_completion_tokens"),
        ("openai-responses", "max_output_tokens"),
        ("anthropic", "max_tokens"),
    ],
)
def test_a_session_without_max_tokens_sends_the_reserve_in_every_format(
    wire: str, field: str
) -> None:
    """The output cap a session sends without ``max_tokens`` is the room packing left for
    the reply, in every format (openai-chat sent none, so a reply could outgrow it);
    a model the table does not know goes without one where the API allows."""
    from turnlog.adapters import Session

    with turnlog.open(":memory:") as log:
        cases = [
            ("gpt-4o", None, 16_384),  # Policy.for_model: the model's output limit
            ("gpt-4o", turnlog.Policy(context_window=32_000), 4_000),  # resolved: 32k / 8
            ("gpt-4o", turnlog.Policy(output_reserve=8_000), 8_000),
            ("gpt-4o", turnlog.Policy(output_reserve=20_000), 16_384),  # the model's limit
        ]
        for number, (model, policy, cap) in enumerate(cases):
            session = Session(log, f"s{number}", model=model, format=wire, policy=policy)
            session.user("hello")
            assert session.prepare().json()[field] == cap, (model, policy)
        if wire != "anthropic":
            session = Session(log, "unknown", model="my-local-model", format=wire)
            session.user("hello")
            assert field not in session.prepare().json()


@pytest.mark.parametrize("window", [4_000, 16_000, 32_000, 200_000])
def test_budget_reserves_for_output_what_a_policy_of_that_window_does(
    imported: tuple[Path, str], window: int
) -> None:
    """``--budget N`` and ``Policy(context_window=N)`` are one rule: the reserve is an
    eighth of the window, at most 16,000 (--budget took a quarter: 8,000 at 32k)."""
    store, session = imported
    done = cli(store, "pack", session, "--budget", str(window), "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["budget"]
    policy = turnlog.Policy(context_window=window).resolved()
    assert plan["output_reserve"] == policy.output_reserve == min(16_000, window // 8)
    assert plan["usable"] == policy.usable


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_reply_of_another_api_names_the_format_expected_and_the_one_it_looks_like(
    stream: bool,
) -> None:
    """A reply recorded into a session of another format said only that a field was
    missing (``expected a JSON array at $.choices, found null``)."""
    import httpx
    from turnlog.adapters import Session
    from turnlog.adapters.providers import PROVIDERS
    from turnlog.adapters.providers.fakeserver import FakeReply, FakeServer

    wires = ["openai-chat", "openai-responses", "anthropic"]
    with turnlog.open(":memory:") as log, FakeServer() as server:
        bodies: dict[str, bytes] = {}
        for wire in wires:  # a real reply of each API, from the fake speaking its wire
            session = Session(log, f"get-{wire}", model="gpt-4o", format=wire, stream=stream)
            session.user("hello")
            server.script(FakeReply(text="hi"))
            provider = PROVIDERS[wire]
            answer = httpx.post(
                provider.endpoint(server.base_url(wire)),
                content=session.prepare().body,
                headers={**provider.headers("k"), "content-type": "application/json"},
            )
            assert answer.status_code == 200, answer.text
            bodies[wire] = answer.content
        for wire in wires:
            session = Session(log, f"put-{wire}", model="gpt-4o", format=wire, stream=stream)
            session.user("hello")
            session.prepare()
            head = session.head
            for other in wires:
                if other == wire:
                    continue
                with pytest.raises(turnlog.errors.DecodeError) as raised:
                    session.record(bodies[other], stream=stream)
                message = str(raised.value)
                assert (
                    f"expected {'an Anthropic' if wire == 'anthropic' else 'an OpenAI'}" in message
                )
                assert f"format '{wire}'" in message, message
                assert "looks like" in message and f"format={other!r}" in message, message
                assert session.head == head
            session.record(bodies[wire], stream=stream)


def test_no_message_counts_things_as_thing_s() -> None:
    """ "1 segment(s) summarized", "1 event(s) erased": every count the library and the
    command print says 1 thing, 2 things (no string of kernel/, adapters/ or tools/
    writes "thing(s)")."""
    import tokenize

    root = Path(__file__).resolve().parents[1]
    found = []
    for folder in ("kernel", "adapters", "tools"):
        for path in sorted((root / folder).rglob("*.py")):
            with path.open("rb") as source:
                for token in tokenize.tokenize(source.readline):
                    text = token.string.replace("http(s)", "")
                    if token.type == tokenize.STRING and re.search(r"[a-z]\((?:s|es)\)", text):
                        found.append(f"{path.relative_to(root)}:{token.start[0]}: {text[:70]}")
    assert not found, "\n".join(found)


def test_summaries_and_messages_of_one_thing_say_it_in_the_singular() -> None:
    from turnlog.adapters.providers import render
    from turnlog.events import ContentErased, Event
    from turnlog.packing import Message, Prompt
    from turnlog.tools.summary import summarize

    erased = ContentErased(seqs=(1,), hashes=("ab" * 32,), reason="asked")
    shown = summarize(Event(session="s", seq=3, body=erased))
    assert shown.startswith("1 event erased (1)"), shown
    with pytest.raises(turnlog.errors.InvalidArgumentError, match=r"\(1 problem\)"):
        render(
            Prompt(system=(), tools=(), messages=(Message(role="user", parts=()),)),
            "openai-chat",
            model="m",
            max_tokens=None,
        )


def test_log_lines_align_whether_or_not_an_event_has_a_time(tmp_path: Path) -> None:
    """An imported transcript's events carry times and the requests packed after it
    none: the kind column of the ``-`` lines sat 17 characters to the left."""
    store = tmp_path / "store"
    with turnlog.open(store) as log:
        log.append(
            "s", turnlog.Draft(body=UserMessageAdded(text="hello"), time=1_700_000_000_000_000)
        )
        log.append("s", UserMessageAdded(text="again"))
    lines = cli(store, "log", "s").stdout.splitlines()
    assert [line.index("user") for line in lines] == [lines[0].index("user")] * 2, lines


def test_a_draft_takes_its_body_by_position() -> None:
    """``Draft(body, time=...)``, as a new user first writes it, raised msgspec's bare
    "Extra positional arguments provided"; the options stay keyword-only."""
    body = UserMessageAdded(text="hello")
    assert turnlog.Draft(body, time=5) == turnlog.Draft(body=body, time=5)
    with turnlog.open(":memory:") as log:
        log.append("s", turnlog.Draft(body, key="k1"))
        assert log.get("s", 0).key == "k1"
    with pytest.raises(turnlog.errors.InvalidArgumentError, match="give the options by name"):
        _loose(turnlog.Draft)(body, 5)


@pytest.mark.parametrize("given", ["log", "session id"])
def test_pack_given_a_log_or_a_session_says_how_to_pack_a_session(given: str) -> None:
    """``turnlog.pack(log, policy)`` failed with "'Log' object has no attribute
    'overflow_pending'"."""
    with turnlog.open(":memory:") as log:
        view: object = log if given == "log" else "s"
        with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
            turnlog.pack(_loose(view), turnlog.Policy())
        assert "must be a Projection" in str(raised.value)
        assert "turnlog.Packer(log).pack(session, policy=...)" in str(raised.value)


@pytest.mark.parametrize("held", ["blob", "fork"])
def test_an_export_without_complete_says_to_export_with_complete(tmp_path: Path, held: str) -> None:
    """``turnlog import`` of a plain export whose events refer to a blob (or continue a
    fork's source) said only "the file was changed or is not whole"; the file was whole,
    written without ``--complete``."""
    store = tmp_path / "store"
    with turnlog.open(store) as log:
        log.append("a", [UserMessageAdded(text="x" * 100_000), UserMessageAdded(text="y")])
        if held == "fork":
            log.fork("a", 0, "b")
            log.append("b", UserMessageAdded(text="z"))
    session = "a" if held == "blob" else "b"
    plain, whole = tmp_path / "plain.jsonl", tmp_path / "whole.jsonl"
    assert cli(store, "export", session, "-o", str(plain)).returncode == 0
    done = cli(tmp_path / "other", "import", str(plain))
    assert done.returncode == 3, done.stderr
    assert "export made without --complete" in done.stderr, done.stderr
    assert "`turnlog export SESSION --complete`" in done.stderr, done.stderr
    assert not (tmp_path / "other").exists()
    assert cli(store, "export", session, "--complete", "-o", str(whole)).returncode == 0
    assert cli(tmp_path / "other", "import", str(whole)).returncode == 0


def test_a_session_given_a_mapping_for_its_policy_says_to_make_a_policy() -> None:
    """``Session(..., policy={"context_window": 32000})`` failed with "'dict' object has
    no attribute 'resolved'"."""
    import turnlog.adapters

    log = turnlog.open(":memory:")
    with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
        turnlog.adapters.Session(
            log, "s1", model="gpt-4o-mini", policy=_loose({"context_window": 32_000})
        )
    assert "policy must be None or a turnlog.Policy" in str(raised.value)


def test_a_tool_call_is_summarized_by_its_first_argument_that_is_not_null() -> None:
    """An imported OpenHands action's arguments begin with ``action_risk: null``: the
    log showed every call as ``run(null)``."""
    from turnlog.events import Event, ToolCall
    from turnlog.tools.summary import summarize

    call = ToolCall(
        id="c1", name="run", arguments='{"action_risk": null, "command": "ls -R /workspace"}'
    )
    shown = summarize(Event(session="s", seq=1, body=AssistantMessageAdded(parts=(call,))))
    assert shown == "-> run(ls -R /workspace)", shown


def test_reasoning_without_text_is_followed_by_one_space() -> None:
    """A Codex step that only thinks and calls a tool read ``(thinking)  -> shell(...)``,
    two spaces, and one that only thinks ended in a blank."""
    from turnlog.events import Event, ReasoningPart, ToolCall
    from turnlog.tools.summary import summarize

    thought = ReasoningPart(text="plan")
    call = ToolCall(id="c1", name="shell", arguments='{"cmd": "ls"}')
    for parts, expected in (
        ((thought, call), "(thinking) -> shell(ls)"),
        ((thought,), "(thinking)"),
    ):
        shown = summarize(Event(session="s", seq=1, body=AssistantMessageAdded(parts=parts)))
        assert shown == expected, shown


@pytest.mark.parametrize(
    ("verb", "given", "says"),
    [
        ("system", ("base",), "Session.system() is missing its required argument 'text'"),
        ("user", (), "call it as Session.user(text)"),
        ("tool_result", ("c1",), "missing its required argument 'output'"),
        ("record", (), "call it as Session.record(response)"),
        ("replay", (), "missing its required argument 'request_seq'"),
    ],
)
def test_a_session_verb_missing_an_argument_names_it(
    verb: str, given: tuple[str, ...], says: str
) -> None:
    """``session.system("base")`` raised Python's bare "missing 1 required positional
    argument"; so did the other verbs, on AsyncSession too."""
    import asyncio

    import turnlog.adapters

    log = turnlog.open(":memory:")
    session = turnlog.adapters.Session(log, "s1", model="gpt-4o-mini")
    with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
        getattr(session, verb)(*given)
    assert says in str(raised.value)
    facade = turnlog.adapters.AsyncSession(log, "s2", model="gpt-4o-mini")
    with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
        asyncio.run(getattr(facade, verb)(*given))
    assert says.replace("Session.", "AsyncSession.") in str(raised.value)


@pytest.mark.parametrize(
    ("verb", "options", "says"),
    [
        ("prepare", {"kee": "k1"}, "Session.prepare() has no option 'kee'; did you mean 'key'?"),
        ("compact", {"key": "k1"}, "Session.compact() has no option 'key'"),
        ("explain", {"seq": 3}, "Session.explain() has no option 'seq'"),
    ],
)
def test_a_misspelled_option_of_prepare_compact_or_explain_is_named(
    verb: str, options: dict[str, object], says: str
) -> None:
    """``session.prepare(kee="k1")`` raised Python's bare "got an unexpected keyword
    argument", on AsyncSession too, while the other verbs named it."""
    import asyncio

    import turnlog.adapters

    log = turnlog.open(":memory:")
    session = turnlog.adapters.Session(log, "s1", model="gpt-4o-mini")
    session.user("hi")
    with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
        getattr(session, verb)(**options)
    assert says in str(raised.value)
    facade = turnlog.adapters.AsyncSession(log, "s1", model="gpt-4o-mini")
    with pytest.raises(turnlog.errors.InvalidArgumentError) as raised:
        asyncio.run(getattr(facade, verb)(**options))
    assert says.replace("Session.", "AsyncSession.") in str(raised.value)
    assert log.head("s1").seq == 0  # type: ignore[union-attr]

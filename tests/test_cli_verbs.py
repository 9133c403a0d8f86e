"""The command's shape: each verb declared beside its handler, errors that carry their
hint in a command wording and a Python wording, and session ids given by a unique
prefix (as ``blob`` takes a hash prefix), with the candidates or the closest ids on a
miss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import turnlog
from support import lapsing_memories
from turnlog.adapters import importers
from turnlog.errors import Hint, ImportFormatError, KernelError, UnknownSessionError
from turnlog.events import UserMessageAdded
from turnlog.tools.cli import _parser, main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sessions ``alpha``, ``alpha-1``, ``alpha-2``, ``beta-session`` and ``mem-beta``."""
    path = tmp_path_factory.mktemp("verbs") / "store"
    with turnlog.open(path) as log:
        for session in ("alpha", "alpha-1", "alpha-2", "beta-session", "mem-beta"):
            log.append(session, UserMessageAdded(text=f"hello from {session}"))
    return path


# -- declarations ----------------------------------------------------------------------


def test_every_verb_is_declared_in_the_module_of_its_handler() -> None:
    seen: set[str] = set()
    for group in _parser.GROUPS:
        for verb in group.VERBS:
            assert verb.run.__module__ == group.__name__, verb.name
            assert verb.name not in seen, f"verb {verb.name!r} declared twice"
            seen.add(verb.name)
    assert {"sessions", "log", "show", "verify", "pack", "import", "serve"} <= seen


def test_every_declared_verb_parses_and_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for verb in _parser.verbs():
        assert verb.name in out
        code, usage, _ = run(capsys, verb.name, "--help")
        assert code == 0 and f"turnlog {verb.name}" in usage
        assert ("--json" in usage) == verb.prints, verb.name


def test_docs_cli_lists_every_verb_and_names_every_option_in_its_section() -> None:
    """docs/cli.md had no row for ``erase`` in its verb table, and said nothing of
    ``erase --json`` or ``recall --agent``; its list of ``pack --format`` values left
    out ``neutral`` (the default), and the ``log`` section ``compaction_part`` and
    ``state`` of the kinds ``--kind`` takes: every choice is named too."""
    import argparse
    import re

    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    table = set(re.findall(r"^\| \[`([a-z]+)`\]\(#", doc, re.M))
    sections = {
        part.split("\n", 1)[0].strip(): part for part in re.split(r"^## ", doc, flags=re.M)[1:]
    }
    parser = _parser._build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for verb in _parser.verbs():
        assert verb.name in table, f"no row for {verb.name!r} in the verb table"
        section = sections.get(verb.name, "")
        assert section, f"no '## {verb.name}' section"
        for action in subparsers.choices[verb.name]._actions:
            names = [o for o in action.option_strings if o not in ("-h", "--help", "--store")]
            if names:
                assert any(re.search(rf"{re.escape(o)}\b", section) for o in names), (
                    f"{verb.name}: {'/'.join(names)} is not named in its section of docs/cli.md"
                )
            for choice in action.choices or ():
                assert f"`{choice}`" in section, (
                    f"{verb.name}: {'/'.join(names) or action.dest} {choice} is not named "
                    "in its section of docs/cli.md"
                )


# -- hints ---------------------------------------------------------------------------------


def test_a_hint_is_worded_for_python_in_str_and_for_the_command_in_cli_message() -> None:
    error = ImportFormatError(
        "x.jsonl: not a transcript", hint=Hint(cli="pass --format FORMAT", python="pass format=")
    )
    assert str(error) == "x.jsonl: not a transcript; pass format="
    assert error.cli_message() == "x.jsonl: not a transcript; pass --format FORMAT"
    assert error.args == ("x.jsonl: not a transcript",)
    plain = KernelError("no hint here")
    assert str(plain) == plain.cli_message() == "no hint here"
    # A KeyError subclass does not quote its message, with or without a hint.
    assert str(UnknownSessionError("no session 's'")) == "no session 's'"


def test_library_errors_reach_the_command_in_its_own_wording(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    with turnlog.open(store, readonly=True) as log, pytest.raises(UnknownSessionError) as info:
        log.get("alpha", 99)
    assert "(Python: `Log.read('alpha')`)" in str(info.value)
    code, _, err = run(capsys, "--store", str(store), "show", "alpha", "99")
    assert code == 3
    assert "see `turnlog log alpha`" in err and "Python" not in err

    junk = tmp_path / "notes.json"
    junk.write_text('{"a": 1}\n')
    with pytest.raises(ImportFormatError, match="pass format= if you know it"):
        importers.detect(junk)
    code, _, err = run(capsys, "--store", str(tmp_path / "new"), "import", str(junk))
    assert code == 3
    assert "pass --format FORMAT if you know it" in err and "format=" not in err


# -- session prefixes ------------------------------------------------------------------


def test_a_unique_prefix_names_its_session(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    code, out, err = run(capsys, "--store", str(store), "log", "beta-s", "--json")
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["session"] == "beta-session"
    code, out, _ = run(capsys, "--store", str(store), "checkpoint", "alpha-2")
    assert code == 0 and json.loads(out)["session"] == "alpha-2"


def test_an_exact_id_wins_over_the_ids_it_begins(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    code, out, _ = run(capsys, "--store", str(store), "checkpoint", "alpha")
    assert code == 0 and json.loads(out)["session"] == "alpha"


def test_an_ambiguous_prefix_lists_the_candidates(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    code, out, err = run(capsys, "--store", str(store), "log", "alpha-")
    assert code == 2 and out == ""
    assert "session prefix 'alpha-' is ambiguous" in err
    assert "'alpha-1', 'alpha-2'" in err and "'alpha'" not in err


def test_a_miss_names_the_closest_ids(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    code, _, err = run(capsys, "--store", str(store), "verify", "beta-sesion")
    assert code == 3
    assert "no session 'beta-sesion'" in err and "did you mean 'beta-session'" in err
    code, _, err = run(capsys, "--store", str(store), "log", "zzz")
    assert code == 3 and "no session 'zzz'" in err and "did you mean" not in err


def test_prefixes_in_options_naming_sessions(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    code, out, err = run(
        capsys, "--store", str(store), "memories", "beta", "--memory-session", "mem-b", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["memory_session"] == "mem-beta"
    code, out, err = run(
        capsys, "--store", str(store), "recall", "hello", "--session", "mem", "--json"
    )
    assert code == 0, err
    assert {hit["session"] for hit in json.loads(out)["hits"]} == {"mem-beta"}


def hello_store(tmp_path: Path) -> Path:
    """A store under ``tmp_path`` whose one session, "chat", holds one user message."""
    path = tmp_path / "store"
    with turnlog.open(path) as log:
        log.append("chat", UserMessageAdded(text="hello"))
    return path


def test_replay_refuses_a_request_and_all_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``turnlog replay SESSION 3 --all`` replayed every request, ignoring 3."""
    path = hello_store(tmp_path)
    with turnlog.open(path) as log:
        seq = turnlog.Replayer(turnlog.Packer(log)).record("chat").request_seq
    code, out, err = run(capsys, "--store", str(path), "replay", "chat", str(seq), "--all")
    assert code == 2 and not out, out
    assert f"give REQ_SEQ ({seq}) or --all, not both" in err, err
    for argv in ([str(seq)], ["--all"]):
        code, out, _ = run(capsys, "--store", str(path), "replay", "chat", *argv)
        assert code == 0 and "1 of 1 request reproduced" in out, out


def test_docs_cli_names_every_key_of_the_json_documents(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/cli.md left out ``erased`` of ``verify --json`` and ``redacted`` of
    ``import --json``, and described no key of ``diff``, ``compact``, ``memories`` and
    ``recall --json``: every top-level key a verb prints is named in its section."""
    import re

    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    sections = {
        part.split("\n", 1)[0].strip(): part for part in re.split(r"^## ", doc, flags=re.M)[1:]
    }
    source = tmp_path / "chat.jsonl"
    source.write_text(
        '{"type": "user", "sessionId": "s1", "uuid": "u1", "message": {"role": "user", '
        '"content": "hello"}}\n'
    )
    store = ["--store", str(tmp_path / "store")]
    runs = [
        ("import", ["import", str(source)]),
        ("sessions", ["sessions"]),
        ("verify", ["verify"]),
        ("pack", ["pack", "s1", "--record"]),
        ("pack", ["pack", "s1", "--record"]),
        ("replay", ["replay", "s1"]),
        ("cost", ["cost", "s1"]),
        ("diff", ["diff", "s1", "-2", "-1"]),
        ("compact", ["compact", "s1"]),
        ("memories", ["memories", "s1"]),
        ("recall", ["recall", "hello"]),
        ("erase", ["erase", "s1", "0", "--reason", "test"]),
    ]
    for verb, argv in runs:
        code, out, err = run(capsys, *store, *argv, "--json")
        assert code == 0, err
        for line in out.splitlines():
            for key in json.loads(line):
                assert f'"{key}"' in sections[verb], f"{verb} --json: {key!r} is not in docs/cli.md"


def test_cost_of_one_request_without_reported_usage_says_this_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It said "no response recorded the provider's usage for these requests" of one."""
    path = tmp_path / "store"
    for text, says in (("hello", "this request"), ("again", "these requests")):
        with turnlog.open(path) as log:
            log.append("chat", UserMessageAdded(text=text))
            turnlog.Replayer(turnlog.Packer(log)).record("chat")
        code, out, err = run(capsys, "--store", str(path), "cost", "chat")
        assert code == 0 and out.endswith(f"usage for {says}\n"), out + err


def test_import_names_its_arguments_paths_as_docs_cli_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/cli.md writes ``turnlog import PATH...`` (a file or a directory); the
    usage said ``FILE [FILE ...]``."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    assert "turnlog import PATH..." in doc
    code, usage, _ = run(capsys, "import", "--help")
    assert code == 0 and "PATH [PATH ...]" in usage and "FILE" not in usage, usage


def test_memories_say_when_each_lapses(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``turnlog memories`` listed a memory past its ``expires_seq`` like a live one."""
    path = tmp_path / "store"
    lapsing_memories(path)
    code, out, err = run(capsys, "--store", str(path), "memories", "chat")
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[2:-1]}
    assert "after #1 (lapsed)" in rows["m0"]
    assert "after #5" in rows["m1"] and "lapsed" not in rows["m1"]
    assert "2024-03-12 09:01:56" in rows["m2"]
    assert out.splitlines()[1].split()[4] == "EXPIRES"
    code, out, err = run(capsys, "--store", str(path), "memories", "chat", "--json")
    lapsed = {m["memory_id"]: m["lapsed"] for m in json.loads(out)["memories"]}
    assert lapsed == {"m0": True, "m1": False, "m2": False, "m3": False}


def test_recall_of_no_results_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``recall -k 0`` printed "no results" and exited 0."""
    path = hello_store(tmp_path)
    code, out, err = run(capsys, "--store", str(path), "recall", "hello", "-k", "0")
    assert code == 2 and not out and "-k" in err and "expected an integer >= 1" in err, err
    code, out, err = run(capsys, "--store", str(path), "recall", "hello", "-k", "1")
    assert code == 0 and "chat" in out, err

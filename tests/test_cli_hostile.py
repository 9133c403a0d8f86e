"""The turnlog command on hostile stores and input files, run as a user runs it.

Every test runs the installed console script in a subprocess on a store written
through the public API: logged text full of terminal escapes must be shown, not
obeyed, and malformed or enormous input gets a one-line error with the
documented exit code, never a traceback.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import turnlog

# OSC 52 (clipboard write), a title change, a screen clear with a cursor move home,
# a cursor-up + erase-line that overwrites the line above, C1 CSI, bidi overrides.
HOSTILE = (
    "find \x1b]52;c;cm0gLXJmIH4=\x07 \x1b]0;owned\x07 \x1b[2J\x1b[H "
    "\x1b[1A\x1b[2Kverify: ok \x9b31m \u202eevil\u202c \u2066iso\u2069 \x85 \r\x08 end"
)
RAW = ("\x1b", "\x07", "\x9b", "\x85", "\u202e", "\u202c", "\u2066", "\u2069", "\r", "\x08")
SESSION = "hostile"
BAD_ID = "evil\u202eid\x85"
DEEP_ARGS = '{"x": ' + "[" * 1000 + "]" * 1000 + "}"


def script() -> str:
    found = shutil.which("turnlog") or str(Path(sys.executable).with_name("turnlog"))
    assert Path(found).exists(), "the turnlog console script is not installed"
    return found


def cli(
    store: Path, *argv: str, limit_memory: int | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``turnlog --store STORE ARGV...`` (optionally under an address-space limit)."""

    def limit() -> None:
        assert limit_memory is not None
        resource.setrlimit(resource.RLIMIT_AS, (limit_memory, limit_memory))

    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("TURNLOG_STORE", None)
    return subprocess.run(
        [script(), "--store", str(store), *argv],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        check=False,
        preexec_fn=limit if limit_memory else None,
        timeout=300,
    )


def no_traceback(result: subprocess.CompletedProcess[str], code: int) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.startswith(("turnlog: error: ", "usage: ")), result.stderr


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "store"
    with turnlog.open(path) as log:
        log.append(
            SESSION,
            [
                turnlog.events.SystemSectionSet(name="base", text="You are a coding agent."),
                turnlog.events.UserMessageAdded(text=HOSTILE),
                turnlog.events.AssistantMessageAdded(
                    parts=(
                        turnlog.events.TextPart(text=HOSTILE),
                        turnlog.events.ToolCall(
                            id="c1", name="Bash", arguments=json.dumps({"cmd": HOSTILE})
                        ),
                        turnlog.events.ToolCall(id="c2", name="Deep", arguments=DEEP_ARGS),
                    )
                ),
                turnlog.events.ToolResultAdded(call_id="c1", tool_name="Bash", output=HOSTILE),
                turnlog.events.ToolResultAdded(call_id="c2", tool_name="Deep", output="ok"),
            ],
        )
        turnlog.memories.MemoryManager(log, memory_session=f"{SESSION}-memories").save(
            HOSTILE, HOSTILE
        )
        log.append(BAD_ID, turnlog.events.UserMessageAdded(text="hello"))
    return path


def assert_escaped(text: str) -> None:
    for char in RAW:
        assert char not in text, f"{char!r} reached the terminal"
    assert "\\x1b]52;c;" in text


@pytest.mark.parametrize(
    "argv",
    [
        ("log", SESSION),
        ("show", SESSION, "1"),
        ("show", SESSION, "2"),
        ("show", SESSION, "3"),
        ("pack", SESSION),
        ("memories", SESSION),
        ("recall", "find"),
    ],
    ids=lambda argv: "-".join(argv[:2]),
)
def test_human_output_shows_terminal_escapes_instead_of_sending_them(
    store: Path, argv: tuple[str, ...]
) -> None:
    result = cli(store, *argv)
    assert result.returncode == 0, result.stderr
    assert_escaped(result.stdout)


def test_sessions_and_errors_show_c1_controls_and_bidi_overrides_in_session_ids(
    store: Path,
) -> None:
    result = cli(store, "sessions")
    assert result.returncode == 0
    assert "evil\\u202eid\\x85" in result.stdout and "\u202e" not in result.stdout
    widths = {len(line) for line in result.stdout.splitlines()[1:]}
    assert len(widths) == 1, "the escaped id keeps the table aligned"
    result = cli(store, "show", BAD_ID + "x", "0")
    assert result.returncode == 3 and "\u202e" not in result.stderr
    assert "\x85" not in result.stderr


def test_an_abbreviated_flag_is_a_usage_error_not_raw_json(store: Path) -> None:
    # `--j` was taken as `--json`, which prints session ids unescaped (found by the CLI
    # fuzz harness); flags are spelled in full.
    for argv in (
        ("sessions", "--j"),
        ("sessions", "--js"),
        ("log", SESSION, "--jso"),
        ("--sto", str(store), "sessions"),
    ):
        result = cli(store, *argv)
        assert result.returncode == 2, argv
        assert "turnlog: error:" in result.stderr and "\u202e" not in result.stdout


def test_json_output_keeps_the_text_exactly(store: Path) -> None:
    result = cli(store, "log", SESSION, "--json")
    assert result.returncode == 0
    summaries = [json.loads(line)["summary"] for line in result.stdout.splitlines()]
    assert "\u202eevil" in summaries[1]
    shown = json.loads(cli(store, "show", SESSION, "1", "--json").stdout)
    assert shown["body"]["text"] == HOSTILE


def test_tool_call_arguments_nested_a_thousand_deep_list_and_show(store: Path) -> None:
    listed = cli(store, "log", SESSION)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    assert "Deep({" in listed.stdout
    shown = cli(store, "show", SESSION, "2")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr
    assert '| {"x": [[[[' in shown.stdout


@pytest.mark.parametrize("shape", ["array", "object"])
def test_import_of_json_nested_200000_deep_is_an_import_format_error(
    tmp_path: Path, shape: str
) -> None:
    deep = tmp_path / "deep.json"
    depth = 200_000
    deep.write_text(
        "[" * depth + "]" * depth if shape == "array" else '{"a":' * depth + "1" + "}" * depth
    )
    store = tmp_path / "store"
    result = cli(store, "import", str(deep))
    no_traceback(result, 3)
    for fmt in ("claude_code", "openai_chat", "swe_agent", "openhands"):
        forced = cli(store, "import", "--format", fmt, str(deep))
        no_traceback(forced, 3)
        assert "nested too deeply" in forced.stderr or "recursion" in forced.stderr


def test_verify_checkpoint_of_deeply_nested_json_is_a_usage_error(
    store: Path, tmp_path: Path
) -> None:
    deep = tmp_path / "cp.json"
    deep.write_text('{"session": ' + "[" * 200_000 + "]" * 200_000 + "}")
    result = cli(store, "verify", "--checkpoint", str(deep))
    no_traceback(result, 2)
    assert "nested too deeply" in result.stderr


def test_pack_budget_beyond_any_context_window_is_a_usage_error(store: Path) -> None:
    for argv in (("pack", SESSION), ("compact", SESSION), ("recall", "x", "--commit", "y")):
        result = cli(store, *argv, "--budget", str(10**21))
        no_traceback(result, 2)
        assert "--budget" in result.stderr and "at most 2**40" in result.stderr


def test_checkpoint_with_a_non_ascii_mac_is_refused(store: Path, tmp_path: Path) -> None:
    made = cli(store, "checkpoint", SESSION)
    cp = json.loads(made.stdout)
    cp["mac"] = "é" * 64
    path = tmp_path / "cp.json"
    path.write_text(json.dumps(cp))
    key = tmp_path / "key"
    key.write_text("secret\n")
    result = cli(store, "verify", "--checkpoint", str(path), "--key-file", str(key))
    no_traceback(result, 2)
    assert '"mac": "" or 64 lowercase hex' in result.stderr


def test_log_verify_of_a_checkpoint_with_a_non_ascii_mac_is_a_verification_error(
    store: Path,
) -> None:
    with turnlog.open(store, readonly=True) as log:
        cp = log.checkpoint(SESSION, key=b"k")
        for mac in ("é" * 64, "ü", "A" * 64):
            forged = turnlog.log.Checkpoint(session=cp.session, seq=cp.seq, hash=cp.hash, mac=mac)
            with pytest.raises(turnlog.errors.VerificationError, match="64 lowercase hex"):
                log.verify(SESSION, checkpoint=forged, key=b"k")


def test_import_of_a_device_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result = cli(store, "import", "/dev/zero")
    no_traceback(result, 3)
    assert "not a regular file" in result.stderr


def test_import_of_a_file_larger_than_memory_is_a_clear_error(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        f.truncate(3 * 2**30)  # sparse: costs no disk
    result = cli(tmp_path / "store", "import", str(big), limit_memory=2 * 2**30)
    no_traceback(result, 3)
    assert "does not fit in memory" in result.stderr


def test_usage_errors_show_control_characters_of_the_arguments(store: Path) -> None:
    result = cli(store, "pack", SESSION, "--bad\x1b[2J\x1b]0;owned\x07\u202e")
    no_traceback(result, 2)
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    assert "\\x1b[2J" in result.stderr


def test_paths_too_long_for_the_file_system_are_clear_errors(store: Path, tmp_path: Path) -> None:
    long = "x" * 300
    no_traceback(cli(tmp_path / long, "sessions"), 4)
    no_traceback(cli(store, "import", long), 3)
    no_traceback(cli(store, "pack", SESSION, "--policy", long), 2)

"""The turnlog command: every verb, its output formats and its exit codes.

Most tests call ``main`` in-process against a store filled once by the demo;
a few run the installed ``turnlog`` console script in a subprocess.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import blake3
import msgspec
import pytest
import turnlog
from turnlog.tools import demo
from turnlog.tools.cli import main

SESSION = demo.DEFAULT_SESSION


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``main`` and return ``(exit code, stdout, stderr)``."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def script() -> str:
    """The installed console script."""
    found = shutil.which("turnlog") or str(Path(sys.executable).with_name("turnlog"))
    assert Path(found).exists(), "the turnlog console script is not installed"
    return found


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the default demo session (read-only for the tests)."""
    path = tmp_path_factory.mktemp("cli") / "store"
    assert main(["--store", str(path), "demo"]) == 0
    return path


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """A path for a new store."""
    return tmp_path / "store"


def first_blob(path: Path) -> tuple[turnlog.events.Event, turnlog.events.BlobRef]:
    """The first tool result of the demo whose output went to a blob, and its ref."""
    with turnlog.open(path, readonly=True) as log:
        for event in log.read(SESSION, kinds=["tool_result"]):
            body = event.body
            if isinstance(body, turnlog.events.ToolResultAdded) and body.blob is not None:
                return event, body.blob
    raise AssertionError("the demo has no blob")


def head_of(path: Path, session: str = SESSION) -> turnlog.log.Head:
    with turnlog.open(path, readonly=True) as log:
        head = log.head(session)
    assert head is not None
    return head


# -- demo ----------------------------------------------------------------------------------


def test_demo_prints_a_line_per_turn_and_ends_with_verify(
    capsys: pytest.CaptureFixture[str], fresh: Path
) -> None:
    code, out, err = run(capsys, "--store", str(fresh), "demo", "--turns", "6")
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0].split()[:5] == ["TURN", "SEQS", "EVENTS", "BLOBS", "USER"]
    assert [line.split()[0] for line in lines[1:7]] == ["1", "2", "3", "4", "5", "6"]
    assert "Importing our 2023 statement" in lines[1]
    assert all("->" in line for line in lines[1:7])
    end = lines.index("try next:")
    assert lines[end - 4].startswith("appended ")
    assert lines[end - 3].startswith("packed and recorded 6 requests")
    assert lines[end - 2] == "replay: 6 of 6 requests reproduced byte for byte"
    assert lines[end - 1].startswith("verify: ok")
    assert f"turnlog --store {fresh} explain demo -1" in out


def test_demo_default_session_is_long_and_has_blobs(store: Path) -> None:
    with turnlog.open(store, readonly=True) as log:
        events = log.read(SESSION)
        report = log.verify()
    assert len(events) >= 300
    packing = {"policy", "request", "response", "provider_error", "compaction"}
    assert all(e.time is not None for e in events)
    generated = [
        e
        for e in events
        if e.kind not in packing
        and not (isinstance(e.body, turnlog.events.SystemSectionSet) and e.body.name == "memories")
    ]
    assert all(e.key and e.key.startswith("demo-") for e in generated)
    kinds = {e.kind for e in events}
    assert (
        kinds
        >= {"system", "tools", "user", "assistant", "tool_result", "notification", "memory", "pin"}
        | packing
    )
    requests = [e for e in events if e.kind == "request"]
    assert len(requests) == 41 and any(e.body.recovery for e in requests)  # type: ignore[union-attr]
    assert report.ok and report.blobs >= 5
    assert (
        sum(
            len(e.body.parts) > 2
            for e in events
            if isinstance(e.body, turnlog.events.AssistantMessageAdded)
        )
        >= 10
    )  # parallel tool calls


def test_demo_rerun_appends_nothing(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    before = head_of(store)
    code, out, _ = run(capsys, "--store", str(store), "demo")
    assert code == 0
    assert "nothing new appended" in out
    assert f"{demo.DEFAULT_TURNS} turns already in the log (turns 1-{demo.DEFAULT_TURNS})" in out
    assert "TURN" not in out  # no table of turns when every turn was already there
    assert head_of(store) == before


def test_demo_is_deterministic(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, store: Path
) -> None:
    other = tmp_path / "other"
    code, out, _ = run(capsys, "--store", str(other), "demo", "--json")
    assert code == 0
    result = json.loads(out.splitlines()[-1])
    assert result["type"] == "result" and result["verify"]["ok"]
    assert bytes.fromhex(result["head_hash"]) == head_of(store).hash
    assert demo.demo_events(12) == demo.demo_events(12)
    assert demo.demo_events(12) == demo.demo_events(20)[:12]


def test_demo_extends_a_shorter_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    grown, direct = tmp_path / "grown", tmp_path / "direct"
    assert main(["--store", str(grown), "demo", "--turns", "3"]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "--store", str(grown), "demo", "--turns", "5", "--json")
    turns = [json.loads(line) for line in out.splitlines()[:-1]]
    assert code == 0
    assert [t["duplicate"] for t in turns] == [True, True, True, False, False]
    assert main(["--store", str(direct), "demo", "--turns", "5"]) == 0
    assert head_of(grown) == head_of(direct)


def test_demo_refuses_a_session_holding_other_events_under_its_keys(
    capsys: pytest.CaptureFixture[str], fresh: Path
) -> None:
    with turnlog.open(fresh) as log:
        log.append(
            SESSION,
            [turnlog.Draft(body=turnlog.events.UserMessageAdded(text="mine"), key="demo-1-0")],
        )
    code, _, err = run(capsys, "--store", str(fresh), "demo", "--turns", "2")
    assert code == 3
    assert err.startswith(
        "turnlog: error: session 'demo' already holds other events under the demo's keys"
    )
    assert "Traceback" not in err


def test_run_demo_calls_the_turn_hook() -> None:
    seen: list[demo.TurnResult] = []
    log = turnlog.open(":memory:")
    result = demo.run_demo(log, turns=4, on_turn=seen.append)
    assert [t.turn for t in seen] == [1, 2, 3, 4]
    assert seen[0].user_text.startswith("Importing our 2023 statement")
    assert seen[-1].appended.last_seq == result.head.seq
    assert result.appended == sum(len(t.drafts) for t in seen) and result.present == 0


# -- sessions, log, show -------------------------------------------------------------------


def test_sessions_text_and_json(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    head = head_of(store)
    code, out, _ = run(capsys, "--store", str(store), "sessions")
    assert code == 0
    assert out.splitlines()[0].split() == ["SESSION", "HEAD", "EVENTS", "HEAD", "HASH"]
    assert out.splitlines()[1].split() == [
        SESSION,
        str(head.seq),
        str(head.seq + 1),
        head.hash.hex()[:16],
    ]
    code, out, _ = run(capsys, "--store", str(store), "sessions", "--json")
    doc = json.loads(out)
    assert doc["sessions"][0] == {
        "session": SESSION,
        "head_seq": head.seq,
        "events": head.seq + 1,
        "head_hash": head.hash.hex(),
    }
    assert [s["session"] for s in doc["sessions"]] == [SESSION, f"{SESSION}-memories"]


def test_store_comes_from_the_environment(
    capsys: pytest.CaptureFixture[str], store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNLOG_STORE", str(store))
    code, out, _ = run(capsys, "sessions", "--json")
    assert code == 0 and json.loads(out)["store"] == str(store)
    code, out, _ = run(capsys, "sessions", "--store", str(store), "--json")  # after the verb
    assert code == 0


def test_log_lists_every_event_with_a_summary(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    code, out, _ = run(capsys, "--store", str(store), "log", SESSION)
    lines = out.splitlines()
    assert code == 0 and len(lines) == head_of(store).seq + 1
    assert lines[0].split()[:4] == ["0", "2024-03-12", "09:00:00", "system"]
    first_read = next(line for line in lines if "tool_result" in line and "blob" in line)
    assert "Read ok" in first_read and "KB blob " in first_read
    assert any("-> Read(" in line and "Read(" in line.split("->")[1] for line in lines)


def test_log_filters_and_json_lines(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    code, out, _ = run(
        capsys,
        "--store",
        str(store),
        "log",
        SESSION,
        "--from",
        "100",
        "--kind",
        "user",
        "--kind",
        "notification",
        "--limit",
        "5",
        "--json",
    )
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(records) == 5
    assert all(r["seq"] >= 100 and r["kind"] in ("user", "notification") for r in records)
    assert set(records[0]) >= {
        "session",
        "seq",
        "kind",
        "time",
        "key",
        "causation",
        "hash",
        "summary",
    }
    code, out, _ = run(
        capsys, "--store", str(store), "log", SESSION, "--kind", "tool_result", "--json"
    )
    blobs = [json.loads(line)["blob"] for line in out.splitlines() if '"blob"' in line]
    assert len(blobs) >= 4


def test_show_prints_one_event_in_full(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    event, _ = first_blob(store)
    code, out, _ = run(capsys, "--store", str(store), "show", SESSION, str(event.seq))
    assert code == 0
    assert out.startswith(f"{SESSION}#{event.seq}  tool_result\n")
    assert f"prev       {event.prev.hex()}" in out and f"hash       {event.hash.hex()}" in out
    assert "turnlog blob HASH" in out
    code, out, _ = run(capsys, "--store", str(store), "show", SESSION, str(event.seq), "--json")
    raw = json.loads(out)
    assert raw["hash"] == event.hash.hex() and raw["body"]["type"] == "tool_result"


def test_show_counts_negative_seqs_from_the_head(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    code, out, _ = run(capsys, "--store", str(store), "show", SESSION, "-1", "--json")
    assert code == 0 and json.loads(out)["seq"] == head_of(store).seq


# -- verify and checkpoints ----------------------------------------------------------------


def test_verify_intact_store(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    code, out, _ = run(capsys, "--store", str(store), "verify")
    assert code == 0 and out.startswith("ok: 2 sessions, ")
    code, out, _ = run(capsys, "--store", str(store), "verify", SESSION, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and doc["problem"] is None
    assert doc["events"] == head_of(store).seq + 1


def test_verify_strict_and_progress(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    # The strict level checks the same events; progress goes to stderr, the report to
    # stdout as before (every 10,000 events and at the end).
    code, out, _ = run(capsys, "--store", str(store), "verify", "--json")
    fast = json.loads(out)
    code, out, err = run(
        capsys, "--store", str(store), "verify", "--strict", "--progress", "--json"
    )
    strict = json.loads(out)
    assert code == 0 and strict["ok"] and strict["events"] == fast["events"]
    assert err.splitlines()[-1] == f"verify: {strict['events']:,} events checked"
    many = tmp_path / "many"
    with turnlog.open(many) as log:
        for start in range(0, 25_000, 5_000):
            log.append(
                "s",
                [
                    turnlog.events.UserMessageAdded(text=f"m{i}")
                    for i in range(start, start + 5_000)
                ],
            )
    code, _, err = run(capsys, "--store", str(many), "verify", "--progress")
    assert code == 0
    assert err.splitlines() == [
        "verify: 10,000 events checked",
        "verify: 20,000 events checked",
        "verify: 25,000 events checked",
    ]


def tamper(source: Path, target: Path, marker: bytes) -> None:
    """Copy a store and flip one bit of every copy of ``marker`` in its data file."""
    shutil.copytree(source, target)
    data = bytearray((target / "data.mdb").read_bytes())
    at = data.find(marker)
    assert at >= 0
    while at >= 0:
        data[at] ^= 0x01
        at = data.find(marker, at + 1)
    (target / "data.mdb").write_bytes(bytes(data))


def test_verify_names_the_first_bad_event(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    with turnlog.open(store, readonly=True) as log:
        seq = next(
            e.seq
            for e in log.read(SESSION, kinds=["user"])
            if isinstance(e.body, turnlog.events.UserMessageAdded)
            and e.body.text.startswith("Plan looks good")
        )
    bad = tmp_path / "bad"
    tamper(store, bad, b"Plan looks good, go ahead")
    code, out, _ = run(capsys, "--store", str(bad), "verify")
    assert code == 1
    assert out.startswith(f"FAILED: {SESSION}#{seq}: ")
    code, out, _ = run(capsys, "--store", str(bad), "verify", "--json")
    problem = json.loads(out)["problem"]
    assert code == 1 and (problem["session"], problem["seq"]) == (SESSION, seq)


def test_verify_finds_a_damaged_blob(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    event, ref = first_blob(store)
    with turnlog.open(store, readonly=True) as log:
        data = log.blob(ref)
    middle = data[len(data) // 2 : len(data) // 2 + 48]  # far from the preview's head and tail
    bad = tmp_path / "bad"
    tamper(store, bad, middle)
    code, out, _ = run(capsys, "--store", str(bad), "verify", "--json")
    problem = json.loads(out)["problem"]
    assert code == 1
    assert (problem["seq"], problem["blob"]) == (event.seq, ref.hash)
    assert "blob" in problem["reason"]


def test_signed_checkpoint_round_trip(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    key, cp = tmp_path / "key", tmp_path / "cp.json"
    key.write_bytes(b"correct horse\n")
    code, _, err = run(
        capsys, "--store", str(store), "checkpoint", SESSION, "--key-file", str(key), "-o", str(cp)
    )
    assert code == 0 and "signed" in err
    doc = json.loads(cp.read_text())
    head = head_of(store)
    assert (doc["session"], doc["seq"], doc["hash"]) == (SESSION, head.seq, head.hash.hex())
    assert len(doc["mac"]) == 64
    code, out, _ = run(
        capsys, "--store", str(store), "verify", "--checkpoint", str(cp), "--key-file", str(key)
    )
    assert code == 0 and "signature ok" in out
    code, out, _ = run(capsys, "--store", str(store), "verify", "--checkpoint", str(cp))
    assert code == 1 and out == (
        "FAILED: checkpoint: the checkpoint is signed; "
        "pass --key-file FILE with the key it was signed with\n"
    )
    code, out, _ = run(capsys, "--store", str(store), "verify", "--checkpoint", str(cp), "--json")
    assert code == 1 and json.loads(out)["error"].endswith(
        "pass --key-file FILE with the key it was signed with"
    )
    with (
        turnlog.open(store, readonly=True) as log,
        pytest.raises(turnlog.errors.VerificationError, match="pass key= with the key"),
    ):
        log.verify(SESSION, checkpoint=turnlog.log.Checkpoint(**doc))
    key.write_bytes(b"wrong horse")
    code, out, _ = run(
        capsys,
        "--store",
        str(store),
        "verify",
        "--checkpoint",
        str(cp),
        "--key-file",
        str(key),
        "--json",
    )
    assert code == 1 and "does not match" in json.loads(out)["error"]


def test_checkpoint_to_stdout_and_a_log_that_no_longer_extends_it(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "--store", str(store), "checkpoint", SESSION)
    doc = json.loads(out)
    assert code == 0 and doc["mac"] == ""
    cp = tmp_path / "cp.json"
    cp.write_text(json.dumps({**doc, "seq": doc["seq"] + 10}))
    code, out, _ = run(capsys, "--store", str(store), "verify", "--checkpoint", str(cp))
    assert code == 1 and "truncated" in out
    cp.write_text(json.dumps({**doc, "seq": 5}))
    code, out, _ = run(capsys, "--store", str(store), "verify", "--checkpoint", str(cp))
    assert code == 1 and "rewritten" in out


# -- export and blobs ----------------------------------------------------------------------


def test_export_writes_every_event_with_its_chain(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "--store", str(store), "export", SESSION)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(lines) == head_of(store).seq + 1
    assert lines[0]["prev"] == "00" * 32
    assert all(b["prev"] == a["hash"] for a, b in itertools.pairwise(lines))
    target = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "--store", str(store), "export", SESSION, "-o", str(target))
    assert code == 0 and "exported" in err
    assert target.read_text() == out
    assert turnlog._codec.event_from_json(out.splitlines()[5]).seq == 5


def test_blob_writes_raw_bytes(
    capsysbinary: pytest.CaptureFixture[bytes], store: Path, tmp_path: Path
) -> None:
    _, ref = first_blob(store)
    assert main(["--store", str(store), "blob", ref.hash]) == 0
    data = capsysbinary.readouterr().out
    assert len(data) == ref.size and blake3.blake3(data).hexdigest() == ref.hash
    target = tmp_path / "blob.txt"
    assert main(["--store", str(store), "blob", ref.hash[:10].upper(), "-o", str(target)]) == 0
    assert target.read_bytes() == data


def test_blob_errors(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    code, _, err = run(capsys, "--store", str(store), "blob", "abc")
    assert code == 2 and "at least 8" in err
    code, _, err = run(capsys, "--store", str(store), "blob", "not-hex!")
    assert code == 2
    code, _, err = run(capsys, "--store", str(store), "blob", "0" * 64)
    assert code == 3 and err.startswith("turnlog: error: no blob")


# -- pack: the policy it records, the reply it asks for -------------------------------------


@pytest.fixture
def demo_copy(store: Path, tmp_path: Path) -> Path:
    """A copy of the demo store to write to."""
    target = tmp_path / "copy"
    shutil.copytree(store, target)
    return target


def test_pack_budget_record_says_which_policy_fields_it_changed(
    capsys: pytest.CaptureFixture[str], demo_copy: Path
) -> None:
    with turnlog.open(demo_copy, readonly=True) as log:
        before = turnlog.Packer(log).policy_in_force(SESSION)
    assert before is not None and before.context_window == 32_000
    code, out, err = run(
        capsys, "--store", str(demo_copy), "pack", SESSION, "--budget", "8000", "--record"
    )
    assert code == 0 and "recorded as" in out
    # rules 3: recall_max_tokens and blocking_buffer, left at their defaults (the demo
    # sets the buffer to its absolute default), scale with the window
    assert err.startswith(
        "the session's policy changed (4 fields): context_window 32,000 -> "
        "8,000; output_reserve 4,000 -> 1,000; blocking_buffer 750 -> 187; "
        "recall_max_tokens 2,000 -> 875. "
    )
    with turnlog.open(demo_copy, readonly=True) as log:
        after = turnlog.Packer(log).policy_in_force(SESSION)
    # --budget keeps the rest of the policy in force.
    assert after == msgspec.structs.replace(
        before,
        context_window=8000,
        output_reserve=1000,
        blocking_buffer=187,
        recall_max_tokens=875,
    )
    code, out, err = run(
        capsys, "--store", str(demo_copy), "pack", SESSION, "--budget", "8000", "--record", "--json"
    )
    assert code == 0 and err == ""  # the policy in force already: nothing changed
    assert json.loads(out)["policy_changes"] == []
    code, out, err = run(
        capsys, "--store", str(demo_copy), "pack", SESSION, "--budget", "9000", "--record", "--json"
    )
    # What the 8,000 window scaled (the reserve an eighth of it, as a Policy of that
    # window has) scales to 9,000.
    assert json.loads(out)["policy_changes"] == [
        {"field": "context_window", "from": 8000, "to": 9000},
        {"field": "output_reserve", "from": 1000, "to": 1125},
        {"field": "blocking_buffer", "from": 187, "to": 210},
        {"field": "recall_max_tokens", "from": 875, "to": 984},
    ]
    assert "policy changed (4 fields): context_window 8,000 -> 9,000; output_reserve" in err


def test_pack_record_into_a_session_without_a_policy_names_what_differs_from_the_defaults(
    capsys: pytest.CaptureFixture[str], fresh: Path
) -> None:
    with turnlog.open(fresh) as log:
        log.append("s", turnlog.events.UserMessageAdded(text="hello"))
    code, _, err = run(capsys, "--store", str(fresh), "pack", "s", "--budget", "64000", "--record")
    assert code == 0
    assert err.startswith("the session had no policy; it now has one (")
    assert "context_window 128,000 -> 64,000" in err
    code, _, err = run(capsys, "--store", str(fresh), "pack", "s")
    assert code == 0 and err == ""  # packing without --record changes nothing


def test_pack_record_that_cannot_pack_under_its_budget_leaves_the_policy_in_force(
    capsys: pytest.CaptureFixture[str], demo_copy: Path
) -> None:
    head = head_of(demo_copy)
    code, out, err = run(
        capsys, "--store", str(demo_copy), "pack", SESSION, "--budget", "100", "--record"
    )
    assert code == 3 and out == ""
    assert "the prompt is below its floor" in err and "pass a larger --budget" in err
    assert head_of(demo_copy) == head  # no PolicySet of a 100-token window was left behind
    code, _, err = run(capsys, "--store", str(demo_copy), "pack", SESSION, "--record")
    assert code == 0 and err == ""  # still packed under the policy in force before


def test_pack_max_tokens_above_the_output_reserve_names_both_and_records_nothing(
    capsys: pytest.CaptureFixture[str], demo_copy: Path
) -> None:
    head = head_of(demo_copy)
    for extra in ((), ("--record",), ("--format", "anthropic", "--record")):
        code, out, err = run(
            capsys, "--store", str(demo_copy), "pack", SESSION, "--max-tokens", "5000", *extra
        )
        assert code == 2 and out == ""
        assert "--max-tokens 5,000 is above the policy's output reserve (4,000 tokens)" in err
        assert "Pass --max-tokens 4,000 or less, or raise output_reserve" in err
    assert head_of(demo_copy) == head
    code, out, err = run(
        capsys,
        "--store",
        str(demo_copy),
        "pack",
        SESSION,
        "--budget",
        "8000",
        "--max-tokens",
        "1001",
        "--format",
        "anthropic",
    )
    assert code == 2 and "(1,000 tokens)" in err  # the reserve of the policy given
    code, out, _ = run(
        capsys,
        "--store",
        str(demo_copy),
        "pack",
        SESSION,
        "--max-tokens",
        "4000",
        "--format",
        "anthropic",
    )
    assert code == 0 and json.loads(out)["max_tokens"] == 4000


# -- exit codes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["log"],
        ["log", SESSION, "--kind", "bogus"],
        ["show", SESSION, "x"],
        ["log", SESSION, "--from", "-3"],
        ["demo", "--turns", "0"],
        ["verify", "--key-file", "k"],
        # beyond any seq (they exited 3 with "seq must be an int from 0 to 2**63 - 1")
        ["show", SESSION, "9" * 23],
        ["log", SESSION, "--from", "9" * 23],
        ["explain", SESSION, "9" * 23],
        ["diff", SESSION, "0", "9" * 23],
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], store: Path, argv: list[str]
) -> None:
    code, _, err = run(capsys, "--store", str(store), *argv)
    assert code == 2
    assert "error" in err and "Traceback" not in err


def test_unreadable_or_malformed_input_files_exit_2(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    code, _, err = run(
        capsys, "--store", str(store), "verify", "--checkpoint", str(tmp_path / "missing.json")
    )
    assert code == 2 and "cannot read checkpoint file" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"session": "demo", "seq": "3"}')
    code, _, err = run(capsys, "--store", str(store), "verify", "--checkpoint", str(bad))
    assert code == 2 and "not a turnlog checkpoint" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["log", "nosuch"],
        ["show", "nosuch", "0"],
        ["show", SESSION, "100000"],
        ["verify", "nosuch"],
        ["checkpoint", "nosuch"],
        ["export", "nosuch"],
    ],
)
def test_turnlog_errors_exit_3_with_one_clean_line(
    capsys: pytest.CaptureFixture[str], store: Path, argv: list[str]
) -> None:
    code, out, err = run(capsys, "--store", str(store), *argv)
    assert code == 3 and out == ""
    assert err.startswith("turnlog: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "verb",
    [
        ["sessions"],
        ["log", SESSION],
        ["verify"],
        ["blob", "0" * 64],
        # verbs that append but do not create a store (they created an empty one)
        ["erase", SESSION, "--reason", "r"],
        ["erase", "--older-than", "30", "--reason", "r"],
        ["pack", SESSION, "--record"],
        ["compact", SESSION],
        ["recall", "q", "--commit", SESSION],
    ],
)
def test_missing_store_exits_4(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, verb: list[str]
) -> None:
    code, _, err = run(capsys, "--store", str(tmp_path / "nowhere"), *verb)
    assert code == 4 and "no turnlog store" in err
    assert not (tmp_path / "nowhere").exists()


def test_copy_that_fails_before_writing_a_session_leaves_no_store_it_created(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
) -> None:
    target, made = tmp_path / "new", tmp_path / "made"
    made.mkdir()
    for dst in (target, made):
        code, out, err = run(capsys, "copy", str(store), str(dst), "--session", "nosuch")
        assert code == 3 and out == ""
        assert "no session 'nosuch' in the source" in err
    assert not target.exists()  # not an empty store that `sessions` would list as one
    assert list(made.iterdir()) == []  # a directory that was there stays, empty
    code, _, err = run(capsys, "--store", str(target), "sessions")
    assert code == 4 and "no turnlog store" in err


def test_erase_arguments_out_of_range_are_usage_errors(
    capsys: pytest.CaptureFixture[str], fresh: Path
) -> None:
    with turnlog.open(fresh) as log:
        log.append("s", turnlog.Draft(body=turnlog.events.UserMessageAdded(text="hi"), time=1))
    head = head_of(fresh, "s")
    for days in ("nan", "inf"):
        code, out, err = run(
            capsys, "--store", str(fresh), "erase", "--older-than", days, "--reason", "r"
        )
        assert code == 2 and out == "" and "Traceback" not in err
        assert f"--older-than must be a number of days >= 0, found {days}" in err
    code, out, err = run(capsys, "--store", str(fresh), "erase", "s", "--reason", "")
    assert code == 2 and "--reason must not be empty" in err
    assert head_of(fresh, "s") == head
    # A window older than any event time erases nothing (the cutoff is no number of
    # microseconds a store holds).
    for days in ("1e9", "1e300"):
        code, out, err = run(
            capsys, "--store", str(fresh), "erase", "--older-than", days, "--reason", "r"
        )
        assert (code, out, err) == (0, "nothing to erase\n", "")
    assert head_of(fresh, "s") == head


def test_replay_cost_and_explain_of_a_session_whose_requests_were_erased_say_so(
    capsys: pytest.CaptureFixture[str], fresh: Path
) -> None:
    with turnlog.open(fresh) as log:
        log.append("s", turnlog.events.UserMessageAdded(text="my address is 1 Main St"))
    for _ in range(2):
        assert run(capsys, "--store", str(fresh), "pack", "s", "--record")[0] == 0
    code, out, _ = run(capsys, "--store", str(fresh), "erase", "s", "--reason", "asked")
    assert code == 0 and "(erasure event #4)" in out
    erased = "its 2 recorded requests were erased (erasure event #4)"
    code, out, _ = run(capsys, "--store", str(fresh), "replay", "s")
    assert (code, out) == (0, f"s: no recorded requests to replay: {erased}\n")
    code, out, _ = run(capsys, "--store", str(fresh), "cost", "s")
    assert (code, out) == (0, f"s: no recorded requests to price: {erased}\n")
    code, _, err = run(capsys, "--store", str(fresh), "explain", "s", "-1")
    assert (code, err) == (3, f"turnlog: error: session 's' has no recorded request: {erased}\n")
    # Named by its seq, an erased request record says it was erased (it said "is not a
    # request record (its kind is 'erased')").
    with turnlog.open(fresh, readonly=True) as log:
        stubs = [
            e.seq
            for e in log.read("s", kinds=["erased"])
            if isinstance(e.body, turnlog.events.EventErased) and e.body.kind == "request"
        ]
    assert len(stubs) == 2
    for argv in (("explain", "s", str(stubs[0])), ("replay", "s", str(stubs[1]))):
        code, _, err = run(capsys, "--store", str(fresh), *argv)
        assert code == 3 and (
            f"s#{argv[2]} was a request record, erased (erasure event #4): what it "
            "recorded is gone" in err
        ), err


def test_import_of_a_directory_stopped_at_a_bad_file_counts_the_files_imported_before(
    capsys: pytest.CaptureFixture[str], fresh: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "transcripts"
    folder.mkdir()
    line = '{"type": "user", "uuid": "u1", "sessionId": "s", "message": {"role": "user", '
    (folder / "a.jsonl").write_text(line + '"content": "hi"}}\n')
    (folder / "b.jsonl").write_text(line.replace("u1", "u2") + '"content": "yo"}}\n{bad\n')
    code, out, err = run(capsys, "--store", str(fresh), "import", str(folder), "--json")
    assert code == 3
    error, result = (json.loads(x) for x in out.splitlines())
    assert error["type"] == "error" and "the file before it was imported" in error["error"]
    # The result counts what stays imported (it said 0 events and no session).
    assert (result["events"], result["appended"], result["sessions"]) == (1, 1, ["s"])
    code, out, err = run(capsys, "--store", str(fresh), "import", str(folder))
    assert code == 3
    assert out.splitlines()[1].startswith(f"{folder / 'a.jsonl'}  claude_code  s")
    assert "imported 1 file into 1 session: 1 event (0 new)" in out
    assert "b.jsonl: line 2" in err and "the paths before the failed one" not in err


def test_import_of_an_export_counts_its_tool_calls_and_reported_usage(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    chat = tmp_path / "chat.jsonl"
    records = [
        {
            "type": "user",
            "sessionId": "s1",
            "uuid": "u1",
            "message": {"role": "user", "content": "ls"},
        },
        {
            "type": "assistant",
            "sessionId": "s1",
            "uuid": "u2",
            "parentUuid": "u1",
            "message": {
                "role": "assistant",
                "model": "claude-x",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
                ],
                "usage": {"input_tokens": 10, "output_tokens": 5},
            },
        },
    ]
    chat.write_text("".join(json.dumps(r) + "\n" for r in records))
    first, second, export = tmp_path / "a", tmp_path / "b", tmp_path / "s1.jsonl"
    code, out, _ = run(capsys, "--store", str(first), "import", str(chat), "--json")
    imported = json.loads(out.splitlines()[-1])
    assert code == 0 and (imported["tool_calls"], imported["tokens"]) == (1, 15)
    assert (
        run(capsys, "--store", str(first), "export", "s1", "--complete", "-o", str(export))[0] == 0
    )
    code, out, _ = run(capsys, "--store", str(second), "import", str(export), "--json")
    result = json.loads(out.splitlines()[-1])
    # The same events, the same counts (an export's import said 0 tool calls, 0 tokens).
    assert code == 0 and result["events"] == imported["events"]
    assert (result["tool_calls"], result["tokens"]) == (1, 15)


@pytest.mark.parametrize("forced", [(), ("--format", "turnlog")])
def test_import_of_a_directory_of_exports_reads_each_back(
    capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path, forced: tuple[str, ...]
) -> None:
    folder = tmp_path / "backups"
    folder.mkdir()
    export = folder / f"{SESSION}.jsonl"
    assert (
        run(capsys, "--store", str(store), "export", SESSION, "--complete", "-o", str(export))[0]
        == 0
    )
    target = tmp_path / "restored"
    # It ended in a traceback (KeyError: 'turnlog'), or found no file with --format turnlog.
    code, out, err = run(capsys, "--store", str(target), "import", str(folder), *forced)
    assert code == 0 and err == ""
    assert out.splitlines()[1].startswith(f"{export}  turnlog  {SESSION}")
    assert head_of(target) == head_of(store)
    assert run(capsys, "--store", str(target), "verify")[0] == 0


# -- the console script --------------------------------------------------------------------


def test_console_script_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "TURNLOG_STORE": str(tmp_path / "store")}

    def sh(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script(), *argv], capture_output=True, text=True, env=env, timeout=120, check=False
        )

    done = sh("demo", "--turns", "5")
    assert done.returncode == 0 and "\nverify: ok" in done.stdout
    sessions = json.loads(sh("sessions", "--json").stdout)["sessions"]
    assert sessions[0]["session"] == SESSION
    assert len(sh("log", SESSION).stdout.splitlines()) == sessions[0]["events"]
    assert sh("show", SESSION, "0").stdout.startswith(f"{SESSION}#0  system")
    assert sh("verify").returncode == 0
    exported = sh("export", SESSION).stdout.splitlines()
    assert len(exported) == sessions[0]["events"]
    blob = next(
        json.loads(line)["blob"]
        for line in sh("log", SESSION, "--json").stdout.splitlines()
        if '"blob"' in line
    )
    raw = subprocess.run(
        [script(), "blob", blob], capture_output=True, env=env, timeout=60, check=True
    ).stdout
    assert blake3.blake3(raw).hexdigest() == blob
    assert json.loads(sh("checkpoint", SESSION).stdout)["seq"] == sessions[0]["head_seq"]
    missing = sh("log", "nosuch")
    assert missing.returncode == 3 and missing.stdout == ""
    assert missing.stderr.startswith("turnlog: error: ") and "Traceback" not in missing.stderr
    assert sh("log").returncode == 2


def test_python_dash_m_runs_the_command(store: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "--store", str(store), "sessions", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert json.loads(done.stdout)["sessions"][0]["session"] == SESSION


def test_a_closed_pipe_ends_the_command_quietly(store: Path) -> None:
    with subprocess.Popen(
        [script(), "--store", str(store), "export", SESSION],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b"{")
        proc.stdout.close()
        err = proc.stderr.read()
        code = proc.wait(timeout=60)
    assert code == 0 and err == b""


def test_compact_on_a_single_turn_session_compacts_older_steps_and_says_why_it_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store"
    with turnlog.open(path) as log:
        log.append("one", turnlog.events.UserMessageAdded(text="fix the failing tests"))
        for i in range(40):
            log.append(
                "one",
                [
                    turnlog.events.AssistantMessageAdded(
                        parts=(
                            turnlog.events.ToolCall(
                                id=f"c{i}",
                                name="Bash",
                                arguments=json.dumps({"command": f"run {i}"}),
                            ),
                        )
                    ),
                    turnlog.events.ToolResultAdded(
                        call_id=f"c{i}",
                        tool_name="Bash",
                        output="\n".join(f"line {j}" for j in range(60)),
                    ),
                ],
            )
        log.append("short", turnlog.events.UserMessageAdded(text="hi"))
    code, out, _ = run(capsys, "--store", str(path), "compact", "one")
    assert code == 0 and out.startswith("committed"), out
    with turnlog.open(path, readonly=True) as log:
        compaction = log.read("one", kinds=["compaction"])[0].body
        assert isinstance(compaction, turnlog.events.CompactionCommitted)
        assert compaction.first_seq >= 1  # the turn's opening message stays as it is
    code, out, _ = run(capsys, "--store", str(path), "compact", "short")
    assert code == 0 and out.startswith("skipped") and "; " in out, out

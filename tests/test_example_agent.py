"""The embedding example runs offline, replays every request, and is the code the docs show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import turnlog
from turnlog import Packer, Replayer
from turnlog.adapters import example_agent
from turnlog.adapters.providers import renderer_for
from turnlog.events import RequestIssued, ToolCall, ToolResultAdded

ROOT = Path(__file__).resolve().parents[1]


def test_the_example_answers_and_replays_every_request(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert example_agent.main([str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "answer: Invoice 2024-117 comes to 70.5" in out
    assert "calculate" in out and "-> '70.5'" in out
    replays = [line for line in out.splitlines() if line.startswith("replay #")]
    assert len(replays) == 3 and all(line.endswith(": ok") for line in replays)
    assert "verify: ok" in out
    assert "tool_result  verbatim" in out  # the explanation of the last request
    # Each rule reads as `turnlog explain` prints it: "rule: detail" (it said
    # "system.section section 'base'").
    assert "verbatim            system.section: section 'base'\n" in out
    assert "not_a_prompt_event  policy: in force\n" in out
    # The docs show this output as it is.
    docs = (ROOT / "docs" / "embedding.md").read_text()
    assert f"```text\n{out}```" in docs
    with turnlog.open(tmp_path / "store", readonly=True) as log:
        packer = Packer(log)
        replayer = Replayer(packer)
        seqs = replayer.requests("example")
        assert len(seqs) == 3
        for seq in seqs:  # as `turnlog replay` does: the renderer from the record alone
            record = log.get("example", seq).body
            assert isinstance(record, RequestIssued) and record.format == "openai-chat"
            render = renderer_for(record, blobs=log.blob)
            assert render is not None and replayer.replay("example", seq, render=render).ok


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_the_example_with_context_tools_reads_the_truncated_middle_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, use_async: bool
) -> None:
    args = ["--context-tools", str(tmp_path / "store")] + (["--async"] if use_async else [])
    assert example_agent.main(args) == 0
    out = capsys.readouterr().out
    assert "answer: The build failed at line 2500: a SIDEHILL checksum mismatch" in out
    assert "  read_file(" in out and "  read_output(" in out and "  search_history(" in out
    replays = [line for line in out.splitlines() if line.startswith("replay #")]
    assert len(replays) == 4 and all(line.endswith(": ok") for line in replays)
    with turnlog.open(tmp_path / "store", readonly=True) as log:
        results = {
            e.body.tool_name: e.body.output
            for e in log.lineage("example")
            if isinstance(e.body, ToolResultAdded)
        }
        middle = "[02500] error: SIDEHILL checksum mismatch"
        # the model's first view of the log left the middle out; read_output brought it
        assert middle not in results["read_file"] and middle in results["read_output"]
        assert "SIDEHILL" in results["search_history"]
        replayer = Replayer(Packer(log))
        first = replayer.explain("example", replayer.requests("example")[1])
        assert "read_output tool, ref" in "".join(m.text for m in first.prompt.messages)


def test_the_example_runs_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "turnlog.adapters.example_agent"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "verify: ok" in done.stdout


def test_the_docs_show_the_example_as_it_is() -> None:
    source = (ROOT / "adapters" / "example_agent.py").read_text()
    docs = (ROOT / "docs" / "embedding.md").read_text()
    assert f"```python\n{source}```" in docs


def test_the_example_tools_stay_in_the_workspace_and_only_compute(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    assert example_agent.read_file(tmp_path, "a.txt") == "alpha"
    assert example_agent.list_dir(tmp_path, ".") == "a.txt"
    assert example_agent.calculate("2 ** 10 - (3 * 4) / 8") == "1022.5"
    for call in (
        ToolCall(id="1", name="read_file", arguments='{"path": "../etc/passwd"}'),
        ToolCall(id="2", name="calculate", arguments='{"expression": "__import__(1)"}'),
        ToolCall(id="3", name="calculate", arguments='{"expression": "1/0"}'),
        ToolCall(id="4", name="list_dir", arguments="not json"),
        ToolCall(id="5", name="delete", arguments="{}"),
    ):
        output, failed = example_agent.run_tool(tmp_path, call)
        assert failed, (call, output)


#: Expressions a model could send that must come back as a tool error at once: huge
#: powers (`9**9**9` has 369,693,100 digits), products past any float, nesting that
#: would exhaust the recursion, bad syntax, very long input, complex results.
HOSTILE = [
    "9**9**9",
    "9**9**9**9",
    "(10**300)**(10**300)",
    "2**100000",
    "10.0**400",
    "0.5**-5000",
    "(-2)**0.5",
    "1e300*1e300*1e300",
    "(1+" * 120 + "1" + ")" * 120,
    "(" * 300 + "1" + ")" * 300,
    "-" * 500 + "1",
    "1" + "+1" * 2000,
    "1+",
    "",
    "True + 1",
    "10**301",
    "99999**99999 - 99999**99999",
]


def test_calculate_refuses_what_it_cannot_compute_quickly() -> None:
    # In a child process: before the bounds, the first expression ran for hours.
    code = (
        "import json, sys\n"
        "from turnlog.events import ToolCall\n"
        "from turnlog.adapters.example_agent import run_tool\n"
        "for i, e in enumerate(json.loads(sys.stdin.read())):\n"
        "    out, failed = run_tool(None, ToolCall(id=str(i), name='calculate',\n"
        "                           arguments=json.dumps({'expression': e})))\n"
        "    print(json.dumps([e[:40], failed, out[:200]]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(HOSTILE),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == len(HOSTILE)
    for expression, failed, output in results:
        assert failed and output.startswith(("ValueError: ", "ZeroDivisionError: ")), (
            expression,
            output,
        )
    assert example_agent.calculate("-(2 ** 10) + 10 ** 300 - 10 ** 300") == "-1024"
    assert example_agent.calculate("2 ** 0.5 * 2 ** 0.5") == str(2**0.5 * 2**0.5)
    assert example_agent.calculate("9 ** 9 ** 2 / 3") == str(9**81 / 3)
    assert example_agent.calculate("((((1 + 2))))") == "3"


def test_the_example_runs_twice_on_the_same_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The second run appends a second task with the same call ids to the same session.
    for _ in range(2):
        assert example_agent.main([str(tmp_path / "store")]) == 0
        out = capsys.readouterr().out
        assert "answer: Invoice 2024-117 comes to 70.5" in out and "verify: ok" in out
    with turnlog.open(tmp_path / "store", readonly=True) as log:
        packer = Packer(log)
        replayer = Replayer(packer)
        for seq in replayer.requests("example"):
            record = log.get("example", seq).body
            assert isinstance(record, RequestIssued)
            assert replayer.replay("example", seq, render=renderer_for(record, blobs=log.blob)).ok


@pytest.mark.parametrize(
    "module", ["turnlog.adapters.example_agent", "turnlog.adapters.examples.langgraph"]
)
def test_an_unknown_flag_is_a_usage_error_not_a_store(module: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--no-such-flag"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no store named after the flag

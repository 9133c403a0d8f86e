"""The README's embedding example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"


def test_readme_embedding_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None, "README has no python example"
    code = match.group(1)
    assert len(code.strip().splitlines()) <= 20
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "tool_result verbatim" in out
    assert (tmp_path / "agent-store" / "data.mdb").exists()


def test_readme_names_two_setup_commands() -> None:
    text = README.read_text()
    assert ".venv/bin/turnlog demo" in text
    assert ".venv/bin/python -m pytest -q" in text


def test_readme_embedding_example_runs_twice_on_the_same_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The second run reuses the call ids of the first in the same session: the prompt
    # sends them unique (packing rules 2), so every later request still renders.
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None, "README has no python example"
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        exec(compile(match.group(1), str(README), "exec"), {})
        assert "tool_result verbatim" in capsys.readouterr().out

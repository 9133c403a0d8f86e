"""The README's embedding example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

README = Path(__file__).parents[1] / "README.md"


def test_readme_embedding_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The second run reuses the call ids of the first in the same session: the prompt
    # sends them unique (packing rules 2), so every later request still renders.
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None, "README has no python example"
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        exec(compile(match.group(1), str(README), "exec"), {})
        assert "tool_result verbatim" in capsys.readouterr().out


_INSTALL = re.compile(r"\.venv/bin/pip install -q -e (\S+)((?: --config-settings \S+)*)")


def test_a_script_beside_a_clone_named_turnlog_imports_the_installed_package(
    tmp_path: Path,
) -> None:
    # A clone in a folder named turnlog, installed with the README's first command into a
    # venv, and a script run from the folder that holds the clone: the script's folder
    # comes first on sys.path, where the clone looks like a namespace package `turnlog`.
    import setuptools

    assert int(setuptools.__version__.split(".")[0]) >= 77, (
        "setuptools>=77 (the test extra) builds turnlog without isolation: pip install -e "
        "'.[test]' again"
    )
    installs = _INSTALL.findall(README.read_text())
    assert len(installs) >= 2 and len(set(options for _, options in installs)) == 1, installs
    options = installs[0][1].split()
    clone = tmp_path / "turnlog"
    root = Path(__file__).resolve().parents[1]
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True, timeout=120)
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The dependencies, pip and setuptools come from this environment (a plain path: its
    # own .pth files, this checkout's install among them, are not read), so nothing is
    # downloaded.
    here = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "_test_dependencies.pth").write_text(here + "\n")

    def install() -> None:
        done = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-e",
                ".",
                *options,
            ],
            cwd=clone,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]

    install()
    script = tmp_path / "agent.py"
    script.write_text(
        "import turnlog\nimport turnlog.adapters.providers\n"
        "print(turnlog.open.__module__, turnlog.__file__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran = subprocess.run(
        [str(python), str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.startswith("turnlog ") and str(tmp_path) in ran.stdout
    # What the README says about a module added later: found after the install line runs
    # again.
    (clone / "kernel" / "_added.py").write_text("ADDED = 1\n")
    probe = [str(python), "-c", "import turnlog._added as m; print(m.ADDED)"]
    install()
    again = subprocess.run(
        probe, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert again.stdout.strip() == "1", again.stderr[-2000:]

"""An example run as a command without its extra says which extra to install, no traceback.

The extra's packages are installed in the test environment, so the subprocess hides one
(``sys.modules[name] = None`` makes its import fail as a missing module would) and runs
the example as ``python -m`` does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    ("turnlog.adapters.examples.langgraph", "langchain_openai", "turnlog[langgraph]"),
    ("turnlog.adapters.examples.langgraph", "langchain_core", "turnlog[langgraph]"),
    ("turnlog.adapters.examples.agents_sdk", "agents", "turnlog[openai-agents]"),
]


@pytest.mark.parametrize(("module", "missing", "extra"), CASES)
def test_an_example_without_its_extra_names_the_extra(
    module: str, missing: str, extra: str, tmp_path: object
) -> None:
    code = (
        f"import runpy, sys; sys.modules[{missing!r}] = None; "
        f"sys.argv = [{module!r}, {str(tmp_path)!r}]; "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"pip install '{extra}'" in done.stderr
    assert f"missing {missing}" in done.stderr
    assert done.stdout == ""


def test_importing_an_example_without_its_extra_still_raises() -> None:
    code = (
        "import sys; sys.modules['langchain_openai'] = None\n"
        "try:\n"
        "    import turnlog.adapters.examples.langgraph\n"
        "except ImportError as exc:\n"
        "    print(exc.name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "langchain_openai"

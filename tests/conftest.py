"""Shared fixtures: the ``log`` fixture over every backend, ``reopen``, hypothesis profiles.

Slow tests (``@pytest.mark.slow``) are skipped unless ``--run-slow`` is given or
the mark expression selects them (``-m slow``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from support import LogFactory, backend_params
from turnlog import Log

# The default profile draws the same examples on every run (derandomize), so that a run
# of the suite is a function of the code alone; "thorough" draws new ones each time to
# look for counterexamples.
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=25,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=500,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Find counterexamples without shrinking them: for triage, when a rule is broken on
# purpose and the question is only which properties notice.
settings.register_profile(
    "triage",
    deadline=None,
    max_examples=25,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--run-slow``."""
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="also run tests marked slow (crash rounds, soak)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip slow tests unless asked for with ``--run-slow`` or ``-m slow``."""
    if config.getoption("--run-slow") or "slow" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="slow; run with --run-slow or -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=backend_params())
def backend(request: pytest.FixtureRequest) -> str:
    """The backend name ("lmdb", "memory" or "postgres")."""
    return str(request.param)


@pytest.fixture
def logs(backend: str, tmp_path: Path) -> Iterator[LogFactory]:
    """Opens further logs of the current backend (all closed at teardown)."""
    factory = LogFactory(backend, tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture
def log(logs: LogFactory) -> Log:
    """A fresh, empty log: LMDB on disk under ``tmp_path``, in memory, or in a schema
    of its own on the test run's PostgreSQL server."""
    return logs.open()


@pytest.fixture
def reopen(logs: LogFactory) -> Callable[[Log], Log]:
    """``reopen(log)`` closes an LMDB log and opens its directory again (memory: same log)."""
    return logs.reopen

"""The fuzz harnesses of fuzz/ replay their committed corpora without a finding.

Each harness runs once over every file of ``fuzz/corpus/<target>/`` (the seeds and
the inputs of past findings), in the same process, without atheris: the
contract of every target (accepted, or a ``KernelError``) is checked on them on
every test run. The long campaigns are described in fuzz/README.md.
"""

from __future__ import annotations

import importlib
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
TARGETS = ("cli", "codec", "importers", "pack", "policy", "responses")


def harness(target: str) -> ModuleType:
    """Import ``fuzz/fuzz_<target>.py`` (without instrumentation)."""
    if str(FUZZ) not in sys.path:
        sys.path.insert(0, str(FUZZ))
    return importlib.import_module(f"fuzz_{target}")


def test_every_target_has_a_harness_and_a_seed_corpus() -> None:
    found = sorted(p.stem.removeprefix("fuzz_") for p in FUZZ.glob("fuzz_*.py"))
    assert found == sorted(TARGETS)
    for target in TARGETS:
        files = list((FUZZ / "corpus" / target).iterdir())
        assert files, f"fuzz/corpus/{target} is empty"
        assert all(f.stat().st_size <= 20_000 for f in files), "seeds stay small"


@pytest.mark.parametrize("target", TARGETS)
def test_the_corpus_replays_without_a_finding(target: str) -> None:
    module = harness(target)
    from _harness import replay_corpus

    assert replay_corpus(module.TestOneInput, FUZZ / "corpus" / target) > 0


def test_the_pure_python_provider_consumes_bytes_like_atheris() -> None:
    atheris = pytest.importorskip("atheris")
    harness("pack")
    from _harness import Provider

    rng = random.Random(7)
    for _ in range(3_000):
        data = rng.randbytes(rng.randrange(0, 40))
        ours, theirs = Provider(data), atheris.FuzzedDataProvider(data)
        for _ in range(10):
            op = rng.randrange(3)
            if op == 0:
                lo = rng.randrange(-1_000, 1_000)
                hi = lo + rng.choice([0, 1, 2, 255, 256, 1_000, 65_536, 2**31, 2**40])
                assert ours.ConsumeIntInRange(lo, hi) == theirs.ConsumeIntInRange(lo, hi)
            elif op == 1:
                assert ours.ConsumeBool() == theirs.ConsumeBool()
            else:
                n = rng.randrange(0, 6)
                assert ours.ConsumeBytes(n) == theirs.ConsumeBytes(n)
        assert ours.remaining_bytes() == theirs.remaining_bytes()

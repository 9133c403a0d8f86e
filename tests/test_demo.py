"""The demo's data file is exactly what its generator writes, and the demo reads it."""

from __future__ import annotations

import gzip
from importlib import resources

import msgspec
import pytest
import turnlog
from turnlog.tools import demo

from tests.demo.generate import generate


def test_the_data_file_is_what_the_generator_writes() -> None:
    data = resources.files("turnlog.tools").joinpath(demo.DATA_FILE).read_bytes()
    lines = gzip.decompress(data).splitlines()
    generated = generate(demo.MAX_TURNS)
    assert len(lines) == demo.MAX_TURNS
    assert lines == [msgspec.json.encode(turn) for turn in generated]
    assert demo.demo_events(demo.MAX_TURNS) == generated


def test_a_shorter_demo_is_a_prefix_of_a_longer_one() -> None:
    assert demo.demo_events(12) == demo.demo_events(20)[:12]
    assert [d.key for d in demo.demo_events(1)[0]][:2] == ["demo-1-0", "demo-1-1"]


@pytest.mark.parametrize("turns", [0, demo.MAX_TURNS + 1, True, "3"])
def test_a_demo_length_out_of_range_says_the_range(turns: object) -> None:
    with pytest.raises(turnlog.errors.InvalidArgumentError, match=f"1 to {demo.MAX_TURNS}"):
        demo.demo_events(turns)  # type: ignore[arg-type]
